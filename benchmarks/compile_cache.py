"""The persistent compilation cache as a Python user meets it: the first call of an engine in
a fresh process, with the cache empty (the first process) and filled (a second process).

Each case runs three times, each in a fresh Python process, as a user script would:

* ``off``: no cache (``ISINGATTN_JAX_CACHE=0``);
* ``cold``: ``ISINGATTN_JAX_CACHE`` set to a new, empty folder (the first process fills it);
* ``warm``: the same folder again (a second process).

The time is the case's first call (trace + compile or cache load + one run), after imports and
model building. ``cold / warm`` is the gain; the target is ≥ 3.

Cases, float32, as the README calls them: ``Gibbs()`` on a 32×32 ±J torus (β = 0.5),
``Exact(corr=True)`` on a dense n = 16 glass, ``Banded()`` on T = 256 with w = 8 and 64
queries sharing J, and ``isingattn.learn.fit(X, method="plm")`` on 2,000 samples of 16 spins.

Run:  python benchmarks/compile_cache.py            (about 2 minutes on 2 CPU cores)
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile

from _table import table_lines

TARGET = 3.0

CHILD = r"""
import json, os, sys, time
import numpy as np
import jax
import isingattn
from isingattn import IsingModel
case = sys.argv[1]
rng = np.random.default_rng(0)
if case == "gibbs":
    from isingattn.inference import Gibbs
    L = 32
    idx = np.arange(L * L).reshape(L, L)
    J = np.zeros((L * L, L * L), np.float32)
    for a, b in ((idx, np.roll(idx, 1, 0)), (idx, np.roll(idx, 1, 1))):
        w = rng.choice([-1.0, 1.0], size=a.size).astype(np.float32)
        J[a.ravel(), b.ravel()] = w
        J[b.ravel(), a.ravel()] = w
    model = IsingModel(np.zeros(L * L, np.float32), J, beta=0.5)
    run = lambda: Gibbs().marginals(model, key=jax.random.key(0)).mean
elif case == "exact":
    from isingattn.inference import Exact
    n = 16
    J = np.triu(rng.normal(size=(n, n)) / 4, 1).astype(np.float32)
    model = IsingModel(rng.normal(size=n).astype(np.float32), J + J.T, beta=1.0)
    run = lambda: Exact(corr=True).marginals(model).corr
elif case == "banded":
    from isingattn.inference import Banded
    T, w = 256, 8
    d = np.abs(np.arange(T)[:, None] - np.arange(T)[None, :])
    J = np.where((d > 0) & (d <= w), rng.normal(size=(T, T)) / 4, 0.0)
    J = np.triu(J, 1).astype(np.float32)
    model = IsingModel(rng.normal(size=(64, T)).astype(np.float32), J + J.T, beta=1.0)
    run = lambda: Banded().marginals(model).mean
elif case == "fit-plm":
    from isingattn.learn import fit
    X = np.where(rng.random((2000, 16)) < 0.5, -1.0, 1.0).astype(np.float32)
    run = lambda: fit(X, method="plm").model.J
else:
    raise SystemExit(f"unknown case {case}")
t = time.perf_counter()
jax.block_until_ready(run())
print(json.dumps({"first_call_s": time.perf_counter() - t}))
"""


def child(case: str, cache: str) -> float:
    env = dict(os.environ, ISINGATTN_JAX_CACHE=cache, PYTHONWARNINGS="ignore")
    env.pop("JAX_COMPILATION_CACHE_DIR", None)
    out = subprocess.run([sys.executable, "-c", CHILD, case], capture_output=True, text=True, env=env)
    if out.returncode:
        raise SystemExit(f"{case} failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])["first_call_s"]


def main():
    import platform

    import jax

    print(f"# compile cache, first call per process; {platform.machine()}, {os.cpu_count()} CPUs, jax {jax.__version__}; "
          f"1-min load average at start {os.getloadavg()[0]:.2f}")
    rows = []
    for case in ("gibbs", "exact", "banded", "fit-plm"):
        with tempfile.TemporaryDirectory(prefix="isingattn-cache-bench-") as folder:
            off = child(case, "0")
            cold = child(case, folder)
            warm = child(case, folder)
            size = sum(os.path.getsize(os.path.join(folder, f)) for f in os.listdir(folder))
            entries = len(os.listdir(folder))
        ratio = cold / warm
        rows.append([case, f"{off:.2f}", f"{cold:.2f}", f"{warm:.2f}", f"{ratio:.1f}", str(entries), f"{size / 2**20:.1f}",
                     "PASS" if ratio >= TARGET else "MISS"])
        print(f"  {case}: off {off:.2f} s, cold {cold:.2f} s, warm {warm:.2f} s", file=sys.stderr)
    print("\n".join(table_lines(["case", "off s", "cold s", "warm s", "cold/warm", "entries", "MiB", f"≥ {TARGET:g}x"], rows)))
    print(f"# 1-min load average at end {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
