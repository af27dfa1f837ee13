"""Ocean's sampler parameters, handled once for the samplers of this package that take them
(:class:`~isingattn.inference.dimod.samplers.SQASampler`, ``PTSampler``, ``SwendsenWangSampler``,
``DQASampler``):
``initial_states`` with ``initial_states_generator`` (dimod's ``Initialized`` semantics),
``interrupt_function`` (asked between compiled calls of at most ``READS_PER_CALL`` reads) and
``num_sweeps=0`` (the initial states returned as they are).
"""

from __future__ import annotations

import time
from typing import Optional

import dimod
import jax
import numpy as np

from isingattn.errors import IsingInputError, IsingTypeError

__all__ = ["INITIAL_STATES_GENERATORS", "OCEAN_DEFAULTS", "READS_PER_CALL", "check", "initial_states", "reads"]

# as dwave-samplers names them: every sampler of this package with ``num_sweeps`` takes them
OCEAN_DEFAULTS = dict(initial_states=None, initial_states_generator="random", interrupt_function=None)
INITIAL_STATES_GENERATORS = ("none", "tile", "random")  # dimod.Initialized's
READS_PER_CALL = 16  # at most this many reads run in one compiled call; interrupt_function is asked between calls


def initial_states(bqm, labels, p) -> Optional[np.ndarray]:
    """The reads' initial states ``[num_reads, n]`` (float, in the order of ``labels``) in
    {-1, +1} (a BINARY BQM's 0/1 mapped to its SPIN view), with 0 where a read starts at
    random; None: every read at random. ``p`` holds ``initial_states`` (samples-like,
    ``dimod.as_samples``), ``initial_states_generator`` and ``num_reads``."""
    given, gen, R = p["initial_states"], p["initial_states_generator"], p["num_reads"]
    if given is None:
        if gen == "none":
            raise IsingInputError("initial_states_generator='none' needs initial_states for all num_reads reads; "
                                  "got none. Pass initial_states, or use 'random'.")
        return None
    try:
        arr, variables = dimod.as_samples(given)
    except (TypeError, ValueError, KeyError) as err:
        raise IsingInputError(f"initial_states must be samples-like (dimod.as_samples): an array [reads, "
                              f"variables], a dict, or (array, labels); got {type(given).__name__} ({err}).") from None
    if set(variables) != set(labels) or len(variables) != len(labels):
        raise IsingInputError(f"initial_states must give a value to each of the BQM's {len(labels)} variables and "
                              f"no other; got {len(variables)} variable(s) (shape {arr.shape}).")
    arr = np.asarray(arr)[:, _positions(variables, labels)].astype(np.float64)
    allowed = (-1.0, 1.0) if bqm.vartype is dimod.SPIN else (0.0, 1.0)
    if not np.all(np.isin(arr, allowed)):
        bad = arr[~np.isin(arr, allowed)].ravel()[0]
        raise IsingInputError(f"initial_states of a {bqm.vartype.name} BQM must hold values in "
                              f"{{{int(allowed[0])}, {int(allowed[1])}}}; got {bad:g}.")
    if bqm.vartype is dimod.BINARY:
        arr = 2.0 * arr - 1.0
    k = arr.shape[0]
    if k >= R:
        return arr[:R]
    if gen == "none" or (gen == "tile" and k == 0):
        raise IsingInputError(f"initial_states holds {k} state(s) for num_reads={R} and "
                              f"initial_states_generator={gen!r}; give {R} states, or use 'tile' or 'random'.")
    if gen == "tile":
        return arr[np.arange(R) % k]
    return np.concatenate([arr, np.zeros((R - k, arr.shape[1]))])  # 'random': the rest start at random


def check(p: dict) -> None:
    """``initial_states_generator`` and ``interrupt_function`` (``initial_states`` is
    read against the BQM, in :func:`reads`)."""
    gen = p["initial_states_generator"]
    if not isinstance(gen, str) or gen not in INITIAL_STATES_GENERATORS:
        raise IsingInputError(f"initial_states_generator must be one of {INITIAL_STATES_GENERATORS}; got {gen!r}.")
    if p["interrupt_function"] is not None and not callable(p["interrupt_function"]):
        raise IsingTypeError("interrupt_function must be None or a callable of no arguments that returns True to "
                             f"stop sampling; got {type(p['interrupt_function']).__name__}.")

def reads(bqm, labels, p: dict, seed: int, run, *, width: Optional[int] = None, length: Optional[int] = None):
    """The reads of a sampler with Ocean's parameters: ``(spins [reads, n], infos, interrupted, t)``.

    ``run(key, init, c)`` makes ``c`` reads from ``init [c, width]`` (±1, or 0 where a
    read starts at random; ``width ≥ n`` columns, the padding 0) and returns ``(spins
    [c, ≥ n], info)``. Reads run in calls of at most ``READS_PER_CALL`` (equal sizes:
    one compilation), call ``k`` with key ``fold_in(key, k)`` (one call: the key itself),
    so the reads depend on ``seed`` and ``num_reads`` only; ``interrupt_function`` is
    asked before each call after the first, and when it returns True the reads made so
    far are returned (``interrupted``). A zero-length run (``length``, default
    ``p["num_sweeps"]``, is 0) returns the initial states (reads without one: uniformly
    random, from the key) without calling ``run``. ``t`` is ``time.perf_counter_ns()``
    when the set-up ended."""
    n, R = len(labels), p["num_reads"]
    init = initial_states(bqm, labels, p)
    init = np.zeros((R, n)) if init is None else init
    key, stop = jax.random.PRNGKey(seed), p["interrupt_function"]
    t = time.perf_counter_ns()
    if (p["num_sweeps"] if length is None else length) == 0:
        return np.where(init != 0, init, np.asarray(jax.random.rademacher(key, init.shape))), [], False, t
    calls = -(-R // READS_PER_CALL)
    c = -(-R // calls)
    width = n if width is None else width
    init = np.pad(init, ((0, calls * c - R), (0, width - n)))  # padding reads and spins start at random
    out, infos = [], []
    for k in range(calls):
        if k and stop is not None and stop():
            break
        spins, info = run(key if calls == 1 else jax.random.fold_in(key, k), init[k * c:(k + 1) * c], c)
        out.append(np.asarray(spins)[:min(c, R - k * c), :n])
        infos.append(info)
    return np.concatenate(out), infos, len(out) < calls, t


def _positions(variables, labels) -> list:
    """The position in ``variables`` of each of ``labels`` (a dict: O(n))."""
    pos = {v: i for i, v in enumerate(variables)}
    return [pos[v] for v in labels]
