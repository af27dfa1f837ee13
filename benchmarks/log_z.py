"""log Z from every engine that gives one, against an exact reference, in one run.

Models (float64):
  tree      a random tree of 2,000 spins (h ~ N(0, 0.3²), J ~ ±U(0.5, 1)), β = 1; reference:
            dwave-samplers' TreeDecompositionSampler (exact variable elimination)
  strip     an 8×64 open strip, ±1 couplings, h ~ N(0, 0.3²), β = 0.5; reference: Banded
            (exact: bandwidth 8)
  dense     n = 20, h ~ N(0, 0.3²), J ~ N(0, 1/n), β = 1; reference: Exact
  torus LxL periodic ferromagnets at K = 0.3, K_c, 0.6, no field; reference: Kaufman's
            exact finite-lattice log Z (isingattn.onsager)
Engines: MeanField naive (a lower bound), TAP, Bethe (BP), AIS (an estimate with its SE; Gibbs
sweeps), parallel tempering ("PT": the stepping-stone estimate along its adapted ladder, with
its SE), AIS with Swendsen–Wang moves ("AIS-SW", on the ferromagnetic tori only: it needs
J ≥ 0), and Exact/Banded where they apply. Each row: the reference's value, the error, the SE
where the engine gives one, and the wall time of the second call (the first compiles).

Run:  python benchmarks/log_z.py              (about 10 minutes on 2 cores)
      python benchmarks/log_z.py --sizes 32    (the tori at L = 32 only)
      python benchmarks/log_z.py --sizes 32,64 --ais-chains 128 --ais-temps 512 \
          --sw-chains 64 --sw-temps 1024 --pt-warmup 1000 --pt-samples 4000   (the README's table)
"""

from __future__ import annotations

import argparse
import os
import platform
import time

import jax
import numpy as np

jax.config.update("jax_enable_x64", True)


def timed(engine, model, key):
    out = jax.block_until_ready(engine.marginals(model, key=key))
    t = time.perf_counter()
    out = jax.block_until_ready(engine.marginals(model, key=key))
    return out, time.perf_counter() - t


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", default="32,64", help="torus sides")
    ap.add_argument("--ais-chains", type=int, default=256)
    ap.add_argument("--ais-temps", type=int, default=1024)
    ap.add_argument("--sw-chains", type=int, default=64, help="AIS with Swendsen–Wang moves (tori only)")
    ap.add_argument("--sw-temps", type=int, default=1024)
    ap.add_argument("--pt-warmup", type=int, default=1000)
    ap.add_argument("--pt-samples", type=int, default=4000)
    ap.add_argument("--pt-replicas", type=int, default=16)
    ap.add_argument("--pt-chains", type=int, default=4)
    args = ap.parse_args()

    from isingattn import IsingModel, graphs, onsager
    from isingattn.compare import _TreeReference
    from isingattn.inference.banded import Banded
    from isingattn.inference.exact import Exact
    from isingattn.inference.mcmc import AIS, ParallelTempering
    from isingattn.inference.meanfield import MeanField
    from isingattn.instances import random_model

    print(f"# {platform.machine()}, {os.cpu_count()} CPUs, jax {jax.__version__}; "
          f"1-min load average {os.getloadavg()[0]:.2f}")
    key = jax.random.key(0)
    rng = np.random.default_rng(0)
    models = []
    # a random tree: each spin i > 0 attached to a random earlier one
    n = 2000
    par = np.array([rng.integers(i) for i in range(1, n)])
    J = np.zeros((n, n))
    w = rng.choice([-1.0, 1.0], n - 1) * rng.uniform(0.5, 1.0, n - 1)
    J[np.arange(1, n), par] = w
    J[par, np.arange(1, n)] = w
    tree = IsingModel(rng.normal(0, 0.3, n), J, beta=1.0).sparsified()
    models.append(("tree n=2000", tree, "TreeDecomposition", float(_TreeReference().marginals(tree).log_z), []))
    g = graphs.lattice([64, 8])  # row-major with the short side last: bandwidth 8
    strip = IsingModel(rng.normal(0, 0.3, g.n), graphs.random_couplings(key, g, "pm", 1.0, dtype=np.float64), beta=0.5)
    ref = float(Banded(bandwidth=None).marginals(strip).log_z)
    models.append(("strip 8x64", strip, "Banded", ref, [("Banded", Banded(bandwidth=None))]))
    h, J = random_model(rng, 20, h_scale=0.3)
    dense = IsingModel(h, J, beta=1.0)
    models.append(("dense n=20", dense, "Exact", float(Exact().marginals(dense).log_z), [("Exact", Exact())]))
    for L in (int(x) for x in args.sizes.split(",")):
        g = graphs.lattice([L, L], periodic=True)
        for K, kname in ((0.3, "0.3"), (onsager.K_C, "K_c"), (0.6, "0.6")):
            m = IsingModel(np.zeros(g.n), graphs.random_couplings(key, g, "ferro", 1.0, dtype=np.float64), beta=K)
            models.append((f"torus {L}x{L} K={kname}", m, "Kaufman", float(onsager.torus_log_z(L, L, K)),
                           [("AIS-SW", AIS(num_chains=args.sw_chains, num_temps=args.sw_temps,
                                           transition="swendsen-wang"))]))

    engines = [("naive", MeanField(method="naive", max_iter=5000)), ("TAP", MeanField(method="tap", max_iter=5000)),
               ("Bethe", MeanField(method="bp", max_iter=5000)),
               ("AIS", AIS(num_chains=args.ais_chains, num_temps=args.ais_temps)),
               ("PT", ParallelTempering(num_warmup=args.pt_warmup, num_samples=args.pt_samples,
                                        num_replicas=args.pt_replicas, num_chains=args.pt_chains, keep_samples=False))]
    print("| model | reference | log Z (reference) | engine | kind | error | SE | converged | wall (s) |")
    print("|---|---|---:|---|---|---:|---:|---|---:|")
    for name, model, ref_name, ref, extra in models:
        for ename, eng in engines + extra:
            out, wall = timed(eng, model, jax.random.key(1) if eng.needs_key else None)
            se = float(out.info["log_z_se"]) if "log_z_se" in out.info else float("nan")
            conv = bool(np.all(np.asarray(out.info.get("converged", True))))
            print(f"| {name} | {ref_name} | {ref:.6f} | {ename} | {out.info.get('log_z_kind', '')} | "
                  f"{float(out.log_z) - ref:+.3e} | {se:.3g} | {conv} | {wall:.3g} |", flush=True)
    print(f"\n1-min load average at end {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
