"""Planar: exact zero-field log Z at scale, and the samplers scored against it.

Part "scale": ±J glasses on open L×L lattices (spins in graphs.lattice order), β = 1. Each row:
the time of ``Planar().marginals`` (first call: the expanded graph is built, then one sparse LU),
log Z per spin, and the process's peak resident memory so far (``resource.getrusage``'s
``ru_maxrss``). With ``--torus``, the uniform torus at K_c against Kaufman's formula, for the
four-Pfaffian path's time and accuracy side by side with the closed form. No other library
gives an exact log Z here, so there is no anchor to time against.

Part "table": a 64×64 ±J glass with open boundaries (planar), β = 1 and β = 2: every engine of
the library that estimates log Z (AIS with Gibbs moves, parallel tempering's stepping stone,
naive mean field (a lower bound), TAP, Bethe/BP) against the exact planar log Z: estimate, SE,
error, error / SE, whether the engine's own diagnostics (``info["converged"]``) call the run
converged, and wall time (one call: compilation included, a few seconds per engine).
Population annealing is not in the library yet; SQA and Gibbs give no log Z.

Run:  python benchmarks/planar.py --part scale --sizes 256          (about 30 s)
      python benchmarks/planar.py --part scale --sizes 1024         (minutes; ~10 GiB peak)
      python benchmarks/planar.py --part scale --sizes 128 --torus
      python benchmarks/planar.py --part table                      (a few minutes)
"""

from __future__ import annotations

import argparse
import os
import platform
import resource
import time

import jax
import numpy as np

jax.config.update("jax_enable_x64", True)


def peak_gib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20  # Linux: KiB


def scale(sizes, torus: bool):
    from isingattn import IsingModel, graphs, onsager
    from isingattn.inference.planar import Planar

    print("| lattice | spins | β | Planar time | log Z / spin | peak memory |")
    print("|---|---|---|---|---|---|")
    for L in sizes:
        g = graphs.lattice((L, L))
        J = graphs.random_couplings(jax.random.key(L), g, "pm", 1.0, dtype=np.float64)
        model = IsingModel(np.zeros(g.n), J, beta=1.0)
        t = time.perf_counter()
        out = Planar().marginals(model)
        dt = time.perf_counter() - t
        print(f"| {L}×{L} ±J open | {g.n:,} | 1 | {dt:.1f} s | {float(out.log_z) / g.n:.10f} | {peak_gib():.2f} GiB |",
              flush=True)
    if torus:
        print("\n| torus | K | Planar time | Planar log Z | Kaufman log Z | relative error |")
        print("|---|---|---|---|---|---|")
        for L in sizes:
            g = graphs.lattice((L, L), periodic=True)
            model = IsingModel(np.zeros(g.n), graphs.random_couplings(None, g, "ferro", 1.0, dtype=np.float64),
                               beta=onsager.K_C)
            t = time.perf_counter()
            out = Planar().marginals(model)
            dt = time.perf_counter() - t
            ref = float(onsager.torus_log_z(L, L, onsager.K_C))
            print(f"| {L}×{L} | K_c | {dt:.1f} s | {float(out.log_z):.10f} | {ref:.10f} | "
                  f"{abs(float(out.log_z) - ref) / ref:.1e} |", flush=True)


def table(args):
    from isingattn import IsingModel, graphs
    from isingattn.inference.mcmc import AIS, ParallelTempering
    from isingattn.inference.meanfield import MeanField
    from isingattn.inference.planar import Planar
    from isingattn.sparse import SparseCouplings

    g = graphs.lattice((64, 64))
    # drawn by numpy: the same glass with or without x64 (JAX's draws differ), as the tutorial draws it
    J = SparseCouplings(g, np.random.default_rng(64).choice([-1.0, 1.0], g.E))
    engines = {
        f"AIS ({args.ais_chains} chains × {args.ais_temps} temperatures)": AIS(num_chains=args.ais_chains,
                                                                               num_temps=args.ais_temps),
        f"PT (stepping stone, {args.pt_replicas} replicas × {args.pt_chains} chains, "
        f"{args.pt_samples} draws)": ParallelTempering(num_replicas=args.pt_replicas, num_chains=args.pt_chains,
                                                        num_warmup=args.pt_warmup, num_samples=args.pt_samples),
        "mean field, naive (lower bound)": MeanField(method="naive"),
        "mean field, TAP": MeanField(method="tap"),
        "Bethe (BP)": MeanField(method="bp"),
    }
    for beta in (1.0, 2.0):
        model = IsingModel(np.zeros(g.n), J, beta=beta)
        t = time.perf_counter()
        exact = float(Planar().marginals(model).log_z)
        print(f"\nβ = {beta:g}: exact log Z (Planar) = {exact:.6f} ({time.perf_counter() - t:.2f} s)")
        print("| engine | log Z | SE | error | error / SE | converged (its own diagnostics) | time (incl. compile) |")
        print("|---|---|---|---|---|---|---|")
        for name, eng in engines.items():
            t = time.perf_counter()
            out = jax.block_until_ready(eng.marginals(model, key=jax.random.key(int(beta))))
            dt = time.perf_counter() - t
            lz = float(out.log_z)
            se = float(out.info["log_z_se"]) if "log_z_se" in out.info else float("nan")
            err = lz - exact
            ratio = f"{err / se:+.1f}" if np.isfinite(se) else "—"
            se_s = f"{se:.3f}" if np.isfinite(se) else "—"
            conv = out.info.get("converged")
            conv = "—" if conv is None else ("yes" if bool(np.all(np.asarray(conv))) else "no")
            print(f"| {name} | {lz:.3f} | {se_s} | {err:+.3f} | {ratio} | {conv} | {dt:.1f} s |", flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--part", choices=("scale", "table"), default="scale")
    ap.add_argument("--sizes", default="256", help="lattice sides for --part scale")
    ap.add_argument("--torus", action="store_true", help="also the uniform torus at K_c against Kaufman")
    ap.add_argument("--ais-chains", type=int, default=128)
    ap.add_argument("--ais-temps", type=int, default=512)
    ap.add_argument("--pt-replicas", type=int, default=16)
    ap.add_argument("--pt-chains", type=int, default=4)
    ap.add_argument("--pt-warmup", type=int, default=500)
    ap.add_argument("--pt-samples", type=int, default=2000)
    args = ap.parse_args()
    print(f"# {platform.machine()}, {os.cpu_count()} CPUs, jax {jax.__version__}; "
          f"1-min load average {os.getloadavg()[0]:.2f}")
    if args.part == "scale":
        scale([int(s) for s in args.sizes.split(",")], args.torus)
    else:
        table(args)


if __name__ == "__main__":
    main()
