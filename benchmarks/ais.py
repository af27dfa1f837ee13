"""AIS on periodic L×L ferromagnets at the critical coupling K_c (issue 28), in one run:

1. throughput: spin updates per second of AIS and of the Gibbs engine on the same 64×64
   torus (coloured sweeps, the same chains), and their ratio (target ≥ 0.8);
2. the defaults: ``AIS()`` on a 32×32 torus at K_c, its SE and wall time (target: SE ≤ 0.5
   nats within two minutes), and its error against Kaufman's exact log Z;
3. the wall time to an SE of 0.1 nats at L = 32, 64, 128: ``num_temps`` doubled from 256
   (chains fixed) until the SE is at most 0.1; the cost's growth with n.

Run:  python benchmarks/ais.py            (about 10 minutes on 2 cores)
"""

from __future__ import annotations

import argparse
import os
import platform
import time

import jax
import numpy as np

jax.config.update("jax_enable_x64", True)


def torus(L, K, dtype=np.float32):
    from isingattn import IsingModel, graphs

    g = graphs.lattice([L, L], periodic=True)
    return IsingModel(np.zeros(g.n, dtype), graphs.random_couplings(jax.random.key(0), g, "ferro", 1.0, dtype=dtype),
                      beta=K)


def run(engine, model, key):
    t = time.perf_counter()
    out = jax.block_until_ready(engine.marginals(model, key=key))
    first = time.perf_counter() - t
    t = time.perf_counter()
    out = jax.block_until_ready(engine.marginals(model, key=jax.random.fold_in(key, 1)))
    return out, time.perf_counter() - t, first


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", default="32,64,128")
    ap.add_argument("--chains", type=int, default=64)
    ap.add_argument("--parts", default="1,2,3", help="which of the three parts to run, e.g. 1 or 1,3")
    ap.add_argument("--start-temps", type=int, default=256, help="part 3's first num_temps")
    args = ap.parse_args()
    from isingattn import onsager
    from isingattn.inference.mcmc import AIS, Gibbs

    Kc = float(onsager.K_C)
    print(f"# {platform.machine()}, {os.cpu_count()} CPUs, jax {jax.__version__}; "
          f"1-min load average {os.getloadavg()[0]:.2f}\n")
    key = jax.random.key(0)

    parts = {int(p) for p in args.parts.split(",")}
    if 1 in parts:  # throughput, float32, 64 chains, 500 sweeps each
        model = torus(64, Kc)
        C, S = 64, 500
        _, t_ais, _ = run(AIS(num_chains=C, num_temps=S), model, key)
        _, t_gibbs, _ = run(Gibbs(num_warmup=0, num_samples=S, num_chains=C, diagnostics=False, keep_samples=False),
                            model, key)
        ups = C * S * model.n
        print("| 64×64 torus at K_c, float32 | sweeps × chains | wall (s) | spin updates / s |")
        print("|---|---:|---:|---:|")
        print(f"| AIS | {S} × {C} | {t_ais:.3f} | {ups / t_ais:.3g} |")
        print(f"| Gibbs (diagnostics off) | {S} × {C} | {t_gibbs:.3f} | {ups / t_gibbs:.3g} |")
        print(f"\nAIS / Gibbs throughput: {t_gibbs / t_ais:.2f}\n")

    if 2 in parts:  # the defaults
        m32 = torus(32, Kc, np.float64)
        ref = float(onsager.torus_log_z(32, 32, Kc))
        out, wall, first = run(AIS(), m32, key)
        print(f"AIS() on 32×32 at K_c (float64): log Z {float(out.log_z):.4f}, Kaufman {ref:.4f}, error "
              f"{float(out.log_z) - ref:+.4f}, SE {float(out.info['log_z_se']):.4f}, weight ESS "
              f"{float(out.info['weight_ess']):.1f} of 256; {wall:.1f} s (+ {first - wall:.1f} s compile)\n")

    if 3 not in parts:
        return
    # 3. time to SE 0.1
    print(f"| L | n | num_temps | chains | SE | error vs Kaufman | wall (s) | sweeps × spins / 1e9 |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|")
    for L in (int(x) for x in args.sizes.split(",")):
        m = torus(L, Kc, np.float64)
        ref = float(onsager.torus_log_z(L, L, Kc))
        T = args.start_temps
        while True:
            out, wall, _ = run(AIS(num_chains=args.chains, num_temps=T), m, key)
            se = float(out.info["log_z_se"])
            print(f"| {L} | {m.n} | {T} | {args.chains} | {se:.3f} | {float(out.log_z) - ref:+.3f} | {wall:.2f} | "
                  f"{T * args.chains * m.n / 1e9:.3g} |", flush=True)
            if se <= 0.1 or T >= 2**15:
                break
            T *= 2
    print(f"\n1-min load average at end {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
