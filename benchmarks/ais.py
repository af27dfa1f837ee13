"""AIS on periodic L×L ferromagnets at the critical coupling K_c, in one run:

1. throughput: spin updates per second of AIS and of the Gibbs engine on the same 64×64
   torus (coloured sweeps, the same chains), and their ratio (target ≥ 0.8);
2. the defaults: ``AIS()`` on a 32×32 torus at K_c, its SE and wall time (target: SE ≤ 0.5
   nats within two minutes), and its error against Kaufman's exact log Z;
3. the wall time to an SE of 0.1 nats at L = 32, 64, 128: ``num_temps`` doubled from 256
   (chains fixed) until the SE is at most 0.1; the cost's growth with n.
   ``--time-to-se SE`` sets the target; ``--transition swendsen-wang`` anneals with cluster
   moves (the Gibbs anneal's SE is not honest at K_c); ``--start-temps`` may end in ``n``
   (``0.5n``: half a temperature per spin, rounded to a power of 2, at least 64), so that the
   first ladder scales with the size (the weights' log-variance grows as n / num_temps);
   ``--jump`` goes from a run's SE straight to the ladder that SE ∝ 1/sqrt(num_temps)
   predicts for the target (a power of 2 times the last, at most 8x), instead of doubling.
   A size stops when the next run would take longer than ``--max-seconds`` (predicted from
   the last run's wall time). Each row also says whether the estimate is within 4 SE of
   Kaufman's value; the time to the target is the wall time of the row that reached it.
4. (``--parts 4``) whether the SE is honest: for each case ``L:chains:temps:keys:K`` of
   ``--z-cases``, ``z = (log Ẑ - log Z_Kaufman) / SE`` over keys ``300 .. 300 + keys - 1``:
   mean(z²) (about 1 when the SE is honest), the largest |z|, the mean z, the spread of the
   errors against the mean SE.

Run:  python benchmarks/ais.py            (about 10 minutes on 2 cores)
      python benchmarks/ais.py --parts 3 --transition swendsen-wang --time-to-se 0.1 --jump
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
    ap.add_argument("--parts", default="1,2,3", help="which parts (1-4) to run, e.g. 1 or 1,3")
    ap.add_argument("--start-temps", default="256", help="part 3's first num_temps; '0.5n': half a temperature per spin")
    ap.add_argument("--time-to-se", type=float, default=0.1, help="part 3's target SE (nats)")
    ap.add_argument("--transition", default="gibbs", choices=("gibbs", "swendsen-wang"), help="part 3's AIS move")
    ap.add_argument("--jump", action="store_true", help="part 3: go to the predicted ladder, not the next doubling")
    ap.add_argument("--z-cases", default="16:64:256:60:Kc,32:64:1024:10:Kc,32:64:1024:10:0.6",
                    help="part 4: L:chains:temps:keys:K, comma-separated (K a number or Kc)")
    ap.add_argument("--max-seconds", type=float, default=600.0, help="part 3: stop a size once a run took longer")
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

    if 4 in parts:
        print(f"| L | K | transition | chains | temps | keys | mean z² | max \\|z\\| | mean z | sd(error) | mean SE |")
        print("|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|")
        for case in args.z_cases.split(","):
            L, C, T, nk, K = case.split(":")
            L, C, T, nk = int(L), int(C), int(T), int(nk)
            K = Kc if K == "Kc" else float(K)
            m, ref = torus(L, K, np.float64), float(onsager.torus_log_z(L, L, K))
            eng = AIS(num_chains=C, num_temps=T, transition=args.transition)
            outs = [eng.marginals(m, key=jax.random.key(300 + k)) for k in range(nk)]
            err = np.array([float(o.log_z) - ref for o in outs])
            se = np.array([float(o.info["log_z_se"]) for o in outs])
            z = err / se
            print(f"| {L} | {K:.4g} | {args.transition} | {C} | {T} | {nk} | {np.mean(z**2):.2f} | "
                  f"{np.abs(z).max():.2f} | {z.mean():+.2f} | {err.std(ddof=1):.3f} | {se.mean():.3f} |", flush=True)
    if 3 not in parts:
        return
    # 3. time to the target SE
    target = args.time_to_se
    print(f"AIS(transition={args.transition!r}), {args.chains} chains, target SE {target}\n")
    print("| L | n | num_temps | chains | SE | error vs Kaufman | within 4 SE | weight ESS | wall (s) | "
          "sweeps × spins / 1e9 |")
    print("|---:|---:|---:|---:|---:|---:|---|---:|---:|---:|")
    for L in (int(x) for x in args.sizes.split(",")):
        m = torus(L, Kc, np.float64)
        ref = float(onsager.torus_log_z(L, L, Kc))
        st = args.start_temps
        T = max(64, 2 ** round(np.log2(float(st[:-1]) * m.n))) if st.endswith("n") else int(st)
        while True:
            eng = AIS(num_chains=args.chains, num_temps=T, transition=args.transition)
            t = time.perf_counter()
            out = jax.block_until_ready(eng.marginals(m, key=key))  # compile + run; the ladder is static
            wall_first = time.perf_counter() - t
            wall = wall_first
            if wall_first <= 60:  # time a second call (compiled); a long run is timed once, compile included
                t = time.perf_counter()
                out = jax.block_until_ready(eng.marginals(m, key=key))
                wall = time.perf_counter() - t
            se, err = float(out.info["log_z_se"]), float(out.log_z) - ref
            print(f"| {L} | {m.n} | {T} | {args.chains} | {se:.3f} | {err:+.3f} | {abs(err) <= 4 * se} | "
                  f"{float(out.info['weight_ess']):.1f} | {wall:.2f}{' (with compile)' if wall_first > 60 else ''} | "
                  f"{T * args.chains * m.n / 1e9:.3g} |", flush=True)
            if se <= target or T >= 2**17:
                break
            factor = 2
            if args.jump:
                factor = int(min(8, 2 ** np.ceil(np.log2(max((se / target) ** 2, 2.0)))))
            if wall * factor > args.max_seconds:
                print(f"| {L} | {m.n} | stopped: the next ladder ({T * factor}) would take about {wall * factor:.0f} s "
                      f"> {args.max_seconds:.0f} s; SE ∝ 1/sqrt(num_temps) puts the target at about "
                      f"{T * (se / target) ** 2:.0f} temperatures, {wall * (se / target) ** 2:.0f} s |", flush=True)
                break
            T *= factor
    print(f"\n1-min load average at end {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
