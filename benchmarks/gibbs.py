"""Gibbs engine throughput: spin updates per second after compile (DESIGN.md §3, Gibbs).

Problems (float32, β = 1, ``h ~ N(0, 1)``, dense ``J_jk ~ N(0, 1/n)``):

1. ``dense``: one model, n = 64, 256 chains (the headline number).
2. ``batch``: an attention layer's worth of models, Q = 256 queries sharing one
   J, n = 16, 4 chains each.

For each, two timings, best of ``--repeats`` after one compile call:

* ``sweeps``: ``run_chains`` alone (the jitted scan over sweeps, vmapped over
  chains, all models at once): the sampler's own rate.
* ``engine``: ``Gibbs(...).marginals(model, key=...)``, i.e. the sweeps plus the
  per-spin R-hat/ESS (FFT over every draw) and ``sample_marginals`` (mean and the
  ``[n, n]`` second moment of every model).

Spin updates = chains x models x n x (warmup + samples) sweeps.

Run:  python benchmarks/gibbs.py                  (about a minute on a 2-core CPU)
      python benchmarks/gibbs.py --sweeps 300 --repeats 2
"""

from __future__ import annotations

import argparse
import platform
import time

import jax
import jax.numpy as jnp
import numpy as np

from isingattn import IsingModel
from isingattn.inference.gibbs import Gibbs, run_chains


def _best(f, repeats):
    jax.block_until_ready(f(jax.random.PRNGKey(0)))  # compile
    best = float("inf")
    for r in range(repeats):
        t = time.perf_counter()
        jax.block_until_ready(f(jax.random.PRNGKey(r + 1)))
        best = min(best, time.perf_counter() - t)
    return best


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--sweeps", type=int, default=1100, help="warmup + samples per chain (warmup = 1/11)")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--seed", type=int, default=0)
    a = p.parse_args(argv)
    rng = np.random.default_rng(a.seed)
    W = a.sweeps // 11
    S = a.sweeps - W
    print(f"# Gibbs throughput, float32, {jax.devices()[0].platform} ({platform.processor() or platform.machine()}), "
          f"{W} warmup + {S} sampling sweeps per chain; best of {a.repeats}")
    print("| problem | models | n | chains | sweeps only (M spin updates/s) | engine incl. R-hat/ESS/corr (M/s) |")
    print("|---|---|---|---|---|---|")
    for name, Q, n, C in [("dense", 1, 64, 256), ("batch", 256, 16, 4)]:
        J = np.triu(rng.normal(size=(n, n)) / np.sqrt(n), 1)
        J = jnp.asarray(J + J.T, jnp.float32)
        h = jnp.asarray(rng.normal(size=(Q, n)) if Q > 1 else rng.normal(size=n), jnp.float32)
        model = IsingModel(h, J, 1.0)
        shape = tuple(model.batch_shape) + (n,)
        sweeps = jax.jit(lambda k: run_chains(k, model.h, model.J, model.beta, None, shape, num_warmup=W,
                                              num_samples=S, num_chains=C))
        engine = Gibbs(num_warmup=W, num_samples=S, num_chains=C)
        full = lambda k: engine.marginals(model, key=k).mean
        updates = C * Q * n * (W + S)
        t_s, t_e = _best(sweeps, a.repeats), _best(full, a.repeats)
        print(f"| {name} | {Q} | {n} | {C} | {updates / t_s / 1e6:.1f} ({t_s:.2f} s) | {updates / t_e / 1e6:.1f} ({t_e:.2f} s) |")


if __name__ == "__main__":
    main()
