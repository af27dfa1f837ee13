"""First-call (trace + compile + one run) times of every registered engine at the sizes the
README uses, and of the first training step of hJ + Banded(8) at T = 256 (each under 60 s).

Every case runs in its own fresh Python process (no in-memory jit cache; the library enables
no persistent compilation cache, and this script turns it off explicitly), float32 unless a
row says float64, called as the README calls it:

* ``<engine> marginals``, the ``isingattn compare --n 16 --graph dense --beta 1`` problem
  (seed 0, ``jax.jit(lambda m, k: engine.marginals(m, key=k))`` as ``compare`` runs it), for
  every registered engine that takes a dense J (all but ``banded``), default settings;
* ``banded marginals``, T = 256, w = 8, Q = 256 queries sharing J (benchmarks/banded.py),
  float32 and float64;
* ``exact marginals`` of the quick start (``Exact(corr=True)``, 2 queries, 3 spins), and
  ``boltzmann_attention`` of the quick start (q = k = v = ones (4, 1, 8, 16), causal hJ) with
  every registered engine (Banded with its default bandwidth 8);
* the first training step (forward + backward + AdamW, one layer) of hJ + Banded(8) at
  T = 256, batch 8, and of hJ + Exact at T = 16, batch 64, as benchmarks/train_step.py builds them.

Columns: ``first call`` (trace + compile + one run), ``second call`` (the run alone), and
``first - second`` (about the compile). PASS when ``first call`` ≤ 60 s.

Run:  python benchmarks/compile_times.py                    (~4 minutes on 2 CPU cores)
      python benchmarks/compile_times.py --only train-hJ-banded8-256 banded-256-f32
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

from _table import table_lines

TARGET_S = 60.0
HERE = os.path.dirname(os.path.abspath(__file__))
DENSE = ("exact", "meanfield", "meanfield-naive", "meanfield-tap", "meanfield-bp", "gibbs", "sqa", "dqa", "dimod")


def cases() -> dict:
    """label -> (engine, what, size): one subprocess each. Engines come from the registry, so a
    newly registered engine shows up in the attention rows (and, unless banded, the dense rows)."""
    from isingattn.inference import available

    out = {}
    for name in available():
        if name != "banded":
            out[f"{name}-dense16"] = (name, "marginals", "compare --n 16 dense")
    out["banded-256-f32"] = ("banded", "marginals", "T=256 w=8 Q=256 f32")
    out["banded-256-f64"] = ("banded", "marginals", "T=256 w=8 Q=256 f64")
    out["exact-quickstart"] = ("exact", "marginals", "quick start: corr, Q=2 n=3")
    for name in available():
        out[f"{name}-attention8"] = (name, "boltzmann_attention", "quick start: (4,1,8,16) causal")
    out["train-hJ-banded8-256"] = ("banded", "train step", "hJ+Banded(8) T=256 batch 8")
    out["train-hJ-exact-16"] = ("exact", "train step", "hJ+Exact T=16 batch 64")
    return out


def _timed(fn):
    """(first call s, second call s) of ``fn()`` (results blocked on)."""
    import jax

    t = time.perf_counter()
    jax.block_until_ready(fn())
    first = time.perf_counter() - t
    t = time.perf_counter()
    jax.block_until_ready(fn())
    return first, time.perf_counter() - t


def child(label: str) -> dict:
    """Measure one case in this (fresh) process."""
    if label.endswith("-f64"):
        os.environ["JAX_ENABLE_X64"] = "1"
    import jax

    jax.config.update("jax_enable_compilation_cache", False)
    import jax.numpy as jnp
    import numpy as np

    from isingattn import IsingModel, boltzmann_attention, inference
    from isingattn.inference.banded import Banded
    from isingattn.inference.exact import Exact

    name, what, _ = cases()[label]
    key = jax.random.PRNGKey(0)
    if label.startswith("train-"):
        sys.path.insert(0, HERE)
        import train_step

        r = train_step.child("hJ-banded8-256" if "banded" in label else "hJ-exact-16", 8 if "banded" in label else 64, 1)
        first, second = r["compile_s"], r["median_s"]
    elif label.endswith("-dense16"):
        from isingattn.instances import random_model

        # the model of `isingattn compare --n 16 --graph dense --beta 1` (seed 0): models/cli.py _load_model
        rng = np.random.default_rng(np.asarray(jax.random.key_data(jax.random.PRNGKey(0))).ravel())
        h, J = random_model(rng, 16, graph="dense")
        model, eng = IsingModel(h, J, beta=1.0), inference.get(name)
        fn = jax.jit(lambda m, k: eng.marginals(m, key=k))
        first, second = _timed(lambda: fn(model, key))
    elif label.startswith("banded-256"):
        sys.path.insert(0, HERE)
        from banded import make_problem

        dt = np.float64 if label.endswith("f64") else np.float32
        h, J = (x.astype(dt) for x in make_problem(256, 8, 256, 0))
        fn = jax.jit(lambda h, J: Banded(bandwidth=8).marginals(IsingModel(h, J)).mean)
        first, second = _timed(lambda: fn(h, J))
    elif label == "exact-quickstart":
        h = jnp.array([[0.5, -0.2, 0.1], [1.0, 0.0, -1.0]])
        J = jnp.array([[0, .3, 0], [.3, 0, -.5], [0, -.5, 0]])
        first, second = _timed(lambda: Exact(corr=True).marginals(IsingModel(h, J, beta=1.0)))
    else:  # the README's boltzmann_attention call, eager, with this engine
        q = k = v = jnp.ones((4, 1, 8, 16))
        eng = inference.get(name)
        kw = dict(key=key) if eng.needs_key else {}
        first, second = _timed(lambda: boltzmann_attention(q, k, v, jnp.zeros((1, 8, 8)), variant="hJ", engine=eng,
                                                           causal=True, **kw))
    return dict(label=label, first_s=first, second_s=second)


def main(argv=None) -> int:
    all_cases = cases()
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--only", nargs="*", default=list(all_cases), choices=list(all_cases))
    p.add_argument("--timeout", type=float, default=1200.0, help="seconds per case before it is reported as MISS")
    p.add_argument("--child", default=None, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.child:
        print(json.dumps(child(args.child)))
        return 0
    import jax

    print(f"First call (trace + compile + run) per case, each in a fresh process; jax {jax.__version__}, "
          f"{jax.default_backend()}, os.cpu_count() = {os.cpu_count()}")
    print(f"command: python benchmarks/compile_times.py {' '.join(argv if argv is not None else sys.argv[1:])}".rstrip())
    rows = []
    for label in args.only:
        name, what, size = all_cases[label]
        l0 = os.getloadavg()[0]
        t = time.perf_counter()
        try:
            out = subprocess.run([sys.executable, os.path.abspath(__file__), "--child", label], capture_output=True,
                                 text=True, timeout=args.timeout)
            r = json.loads(out.stdout.strip().splitlines()[-1]) if out.returncode == 0 else None
            err = None if r else f"failed (exit {out.returncode}): {out.stderr.strip().splitlines()[-1:]}"
        except subprocess.TimeoutExpired:
            r, err = None, f"over {args.timeout:.0f} s (killed)"
        wall = time.perf_counter() - t
        load = f"{l0:.2f}/{os.getloadavg()[0]:.2f}"
        if r:
            ok = r["first_s"] <= TARGET_S
            rows.append((name, what, size, f"{r['first_s']:.1f} s", f"{r['second_s']:.3f} s",
                         f"{r['first_s'] - r['second_s']:.1f} s", f"{TARGET_S:.0f} s", "PASS" if ok else "MISS", load))
        else:
            rows.append((name, what, size, err, "-", "-", f"{TARGET_S:.0f} s", "MISS", load))
        print(f"  done {label} in {wall:.0f} s (process)", file=sys.stderr, flush=True)
    hdr = ("engine", "call", "size", "first call", "second call", "first - second", "target", "", "load start/end")
    print()
    print("\n".join(table_lines(hdr, rows, left=3)))
    miss = [f"{x[0]} {x[1]} ({x[2]})" for x in rows if x[7] == "MISS"]
    print(f"\n{len(rows) - len(miss)} of {len(rows)} first calls within {TARGET_S:.0f} s"
          + (f"; over: {', '.join(miss)}" if miss else "") + f". 1-min load average at end {os.getloadavg()[0]:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
