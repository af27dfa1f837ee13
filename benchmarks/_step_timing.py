"""The training-step timing shared by train_step.py, dimod_train_step.py and banded_vjp.py.

Imported by those scripts from their own folder (``python benchmarks/<script>.py`` puts it
on ``sys.path``)."""

from __future__ import annotations

import statistics
import time


def time_calls(call, repeats: int) -> dict:
    """``call(i)`` once to compile (``first_s``), then ``repeats`` times: wall seconds, median and best,
    and the median CPU seconds of the process (``cpu_median_s``: every thread, so it moves less with
    the load of a shared machine than the wall time does)."""
    import jax

    t = time.perf_counter()
    out = jax.block_until_ready(call(0))
    first_s = time.perf_counter() - t
    times, cpu = [], []
    for i in range(1, repeats + 1):
        t, c = time.perf_counter(), time.process_time()
        out = jax.block_until_ready(call(i))
        times.append(time.perf_counter() - t)
        cpu.append(time.process_time() - c)
    return dict(first_s=first_s, median_s=statistics.median(times), best_s=min(times),
                cpu_median_s=statistics.median(cpu), out=out)


def time_train_steps(model, T: int, batch: int, steps: int, vocab: int = 6) -> dict:
    """``steps`` AdamW training steps of ``model`` on random ``[batch, T]`` tokens and targets
    (after one that compiles), each with its own key (a sampling engine draws afresh):
    ``first_s``, ``median_s``, ``best_s`` and the last ``loss``."""
    import equinox as eqx
    import jax

    from isingattn.models.train import TrainConfig, _optimizer, _step_fn

    tc = TrainConfig(steps=steps + 1)
    opt_state = _optimizer(tc).init(eqx.filter(model, eqx.is_array))
    step = _step_fn(tc)
    keys = jax.random.split(jax.random.PRNGKey(1), 2)
    toks = jax.random.randint(keys[0], (batch, T), 0, vocab)
    tgt = jax.random.randint(keys[1], (batch, T), 0, T)
    r = time_calls(lambda i: step(model, opt_state, toks, tgt, jax.random.fold_in(keys[0], i)), steps)
    r["loss"] = float(r.pop("out")[2])
    return r
