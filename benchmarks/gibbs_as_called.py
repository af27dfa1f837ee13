"""``Gibbs()`` as users call it, against dwave-samplers' SimulatedAnnealingSampler at a fixed β,
side by side in one run.

A 64×64 ±J periodic lattice (``h ~ N(0, 0.1²)``, β = 1), 16 chains, 100 draws, no warmup:

* ``eager``: ``Gibbs(num_warmup=0, num_samples=100, num_chains=16).marginals(model, key=k)``
  with its defaults: diagnostics (split R-hat, ESS, MCSE, frozen), the energy trace, the
  float samples, and the convergence warning (silenced here, not skipped);
* ``eager, no samples``: the same with ``keep_samples=False``;
* ``eager, no diagnostics``: ``diagnostics=False, keep_samples=False``;
* ``jit``: the default engine inside ``jax.jit``, returning the mean, R-hat, ESS and the
  energy trace (what a training loop reads);
* dwave SA: 16 reads of 100 sweeps at ``beta_schedule=[1.0] * 100`` (its final states only).

Best of ``--repeats`` after one warm-up call each, round-robin so both see the same load.
``--ref COMMIT`` runs the same calls on another commit of this repository too (``git archive``
into a temporary package layout first on PYTHONPATH, as ``banded_vjp.py`` does), each tree in
its own process with its own dwave SA row, and prints them side by side.

Run:  python benchmarks/gibbs_as_called.py [--ref COMMIT]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
import warnings

import jax
import jax.numpy as jnp
import numpy as np

from isingattn import IsingModel, graphs
from isingattn.inference.mcmc import Gibbs


def lattice_model(L: int, beta: float, seed: int = 0) -> IsingModel:
    g = graphs.lattice((L, L), periodic=True)
    k1, k2 = jax.random.split(jax.random.key(seed))
    J = graphs.random_couplings(k1, g, "pm")
    h = jax.random.normal(k2, (g.n,), jnp.float32) * 0.1
    return IsingModel(h, J, beta=beta)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--size", type=int, default=64)
    p.add_argument("--beta", type=float, default=1.0)
    p.add_argument("--chains", type=int, default=16)
    p.add_argument("--draws", type=int, default=100)
    p.add_argument("--repeats", type=int, default=7)
    p.add_argument("--clock", choices=("wall", "cpu"), default="wall",
                   help="cpu: the process's CPU seconds (all threads; dwave SA runs on one), steadier on a loaded machine")
    p.add_argument("--ref", default=None, help="also run the calls on this commit, side by side")
    p.add_argument("--json", action="store_true", help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    if a.ref:
        return side_by_side(a, argv if argv is not None else sys.argv[1:])
    import dimod
    from dwave.samplers import SimulatedAnnealingSampler

    warnings.simplefilter("ignore", RuntimeWarning)  # the convergence warning is computed, not shown
    model = lattice_model(a.size, a.beta)
    n, C, D = model.n, a.chains, a.draws
    kw = dict(num_warmup=0, num_samples=D, num_chains=C)
    engines = {"eager": Gibbs(**kw), "eager, no samples": Gibbs(**kw, keep_samples=False),
               "eager, no diagnostics": Gibbs(**kw, diagnostics=False, keep_samples=False)}
    calls = {name: (lambda e: lambda k: e.marginals(model, key=jax.random.key(k)).mean)(e) for name, e in engines.items()}
    jitted = jax.jit(lambda k: (lambda m: (m.mean, m.info["r_hat"], m.info["ess"], m.info["energy"]))(
        engines["eager"].marginals(model, key=jax.random.key(k))))
    calls["jit"] = jitted
    g, w = model.J.graph, np.asarray(model.J.weights)
    bqm = dimod.BQM({i: -float(x) for i, x in enumerate(np.asarray(model.h))},
                    {(int(u), int(v)): -float(x) for (u, v), x in zip(g.edges, w)}, 0.0, "SPIN")
    sa = SimulatedAnnealingSampler()
    calls["dwave SA"] = lambda k: sa.sample(bqm, num_reads=C, beta_schedule_type="custom",
                                           beta_schedule=[a.beta] * D, seed=k + 1).record.energy
    for f in calls.values():
        jax.block_until_ready(f(0))
    clock = time.perf_counter if a.clock == "wall" else time.process_time
    best = {}
    for r in range(a.repeats):
        for name, f in calls.items():
            t = clock()
            jax.block_until_ready(f(r + 1))
            best[name] = min(best.get(name, np.inf), clock() - t)
    if a.json:
        print(json.dumps({name: t for name, t in best.items()}))
        return
    print(f"# {a.size}x{a.size} ±J periodic lattice, h ~ N(0, 0.1²), β = {a.beta}, {C} chains x {D} draws; "
          f"jax {jax.__version__}, {os.cpu_count()} CPUs, 1-min load average {os.getloadavg()[0]:.2f}; best of {a.repeats}, "
          f"{'wall' if a.clock == 'wall' else 'CPU'} time")
    print("| call | best (ms) | M spin updates/s | / dwave SA |\n|---|---:|---:|---:|")
    for name, t in best.items():
        print(f"| {name} | {1e3 * t:.1f} | {n * C * D / t / 1e6:.1f} | {best['dwave SA'] / t:.2f}x |")


def side_by_side(a, argv):
    """Each tree's calls in its own process (this file, with the tree's package first on the path)."""
    from banded_vjp import archive

    args, skip = [], False
    for x in argv:  # the same settings, without --ref
        if skip or x == "--ref":
            skip = not skip
            continue
        if not x.startswith("--ref="):
            args.append(x)
    res = {}
    for label, path in (("work tree", None), (a.ref, archive(a.ref))):
        env = dict(os.environ)
        if path:
            env["PYTHONPATH"] = path + os.pathsep + env.get("PYTHONPATH", "")
        out = subprocess.run([sys.executable, os.path.abspath(__file__), *args, "--json"], env=env,
                             capture_output=True, text=True, check=True)
        res[label] = json.loads(out.stdout.strip().splitlines()[-1])
    print(f"# {a.size}x{a.size} ±J periodic lattice, h ~ N(0, 0.1²), β = {a.beta}, {a.chains} chains x {a.draws} draws; "
          f"jax {jax.__version__}, {os.cpu_count()} CPUs, 1-min load average at end {os.getloadavg()[0]:.2f}; best of "
          f"{a.repeats}, {'wall' if a.clock == 'wall' else 'CPU'} time; each tree in its own process, work tree first")
    labels = list(res)
    print("| call | " + " | ".join(f"{x}: best (ms) | / dwave SA" for x in labels) + " |")
    print("|---|" + "---:|---:|" * len(labels))
    for name in res[labels[0]]:
        cells = [f"{1e3 * res[x][name]:.1f} | {res[x]['dwave SA'] / res[x][name]:.2f}x" for x in labels]
        print(f"| {name} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
