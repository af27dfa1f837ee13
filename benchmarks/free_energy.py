"""log Z of periodic L×L ferromagnets by population annealing against AIS, at equal sweep
budgets, in one run (the anchor side by side).

For each case ``L:K`` (``--cases``) and each key of ``--seeds``:

* ``get("pa")`` with its defaults (or ``--replicas``/``--populations``); its budget in
  replica-moves is ``populations · replicas · num_temps · moves_per_temp`` (the ladder
  it chose);
* ``AIS(transition="swendsen-wang")`` with ``--ais-chains`` chains and ``num_temps`` set so
  that ``chains · num_temps`` is the same number of moves (one move per temperature);

and the error against Kaufman's exact log Z (:func:`isingattn.onsager.torus_log_z`), the
reported SE, ``|error| / SE``, wall and CPU time (user + system of this process: on a
loaded machine the wall time overstates the work). The summary gives, per case and
estimator, the mean SE, the RMS error, mean z² and the ratio of PA's SE to AIS's (the
issue's target: at most 1/3).

Run:  python benchmarks/free_energy.py --cases 16:0.4406868 16:0.6 --seeds 0 1 2
      python benchmarks/free_energy.py --cases 32:0.4406868 32:0.6 --seeds 0
      python benchmarks/free_energy.py --cases 16:0.4406868 --seeds $(seq 0 19) --no-ais   (calibration)
"""

from __future__ import annotations

import argparse
import os
import platform
import resource
import sys
import time

import jax
import numpy as np

sys.path.insert(0, os.path.dirname(__file__))
from _table import table_lines  # noqa: E402


def torus(L, K, dtype=np.float32):
    from isingattn import IsingModel, graphs

    g = graphs.lattice([L, L], periodic=True)
    return IsingModel(np.zeros(g.n, dtype), graphs.random_couplings(jax.random.key(0), g, "ferro", 1.0, dtype=dtype),
                      beta=K)


def cpu_seconds():
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def run(engine, model, key):
    """(Marginals, wall s, cpu s) of one call, the first call's compile included."""
    import warnings

    t, c = time.perf_counter(), cpu_seconds()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        out = jax.block_until_ready(engine.marginals(model, key=key))
    return out, time.perf_counter() - t, cpu_seconds() - c, [str(w.message)[:60] for w in caught]


def main():
    from isingattn import onsager
    from isingattn.inference import AIS, get

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cases", nargs="+", default=["32:0.4406868", "32:0.6"])
    ap.add_argument("--seeds", nargs="+", type=int, default=[0])
    ap.add_argument("--replicas", type=int, default=None)
    ap.add_argument("--populations", type=int, default=None)
    ap.add_argument("--ais-chains", type=int, default=256)
    ap.add_argument("--no-ais", action="store_true", help="population annealing only (a calibration over seeds)")
    args = ap.parse_args()
    print(f"log Z on L×L tori: population annealing vs AIS at equal moves; jax {jax.__version__}, "
          f"{jax.default_backend()}, os.cpu_count() = {os.cpu_count()}, {platform.machine()}, "
          f"1-min load average {os.getloadavg()[0]:.2f}", flush=True)
    pa_cfg = {k: v for k, v in (("num_replicas", args.replicas), ("num_populations", args.populations)) if v}
    pa = get("pa", **pa_cfg)
    rows, summary = [], {}
    for case in args.cases:
        L, K = case.split(":")
        L, K = int(L), float(K)
        model = torus(L, K)
        ref = float(onsager.torus_log_z(L, L, K))
        for seed in args.seeds:
            key = jax.random.key(seed)
            out, wall, cpu, warn = run(pa, model, key)
            P = int(out.info["num_populations"])
            temps = np.asarray(out.info["ladder"])  # [P, T + 1]
            steps = int(np.sum(np.isfinite(temps[:, 1:])))  # all populations' steps
            moves = steps * pa.num_replicas * pa.moves_per_temp
            res = [("pa", out, wall, cpu, warn, moves)]
            if args.no_ais:
                for name, o, w, c, wn, mv in res:
                    err, se = float(o.log_z) - ref, float(o.info["log_z_se"])
                    rows.append([f"{L}x{L}", f"{K:.4f}", name, str(seed), f"{mv:.3g}", f"{err:+.4f}", f"{se:.4f}",
                                 f"{abs(err) / se:.2f}", f"{w:.1f}", f"{c:.1f}",
                                 str(bool(np.all(o.info["converged"]))),
                                 f"temps {int(o.info['num_temps'])}, families {float(o.info['families_eff']):.0f}"])
                    summary.setdefault((L, K, name), []).append((err, se, w, c))
                    print("  ".join(rows[-1]), flush=True)
                continue
            ais = AIS(num_chains=args.ais_chains, num_temps=max(1, round(moves / args.ais_chains)),
                      transition="swendsen-wang")
            o2, w2, c2, warn2 = run(ais, model, key)
            res.append(("ais-sw", o2, w2, c2, warn2, ais.num_chains * ais.num_temps))
            for name, o, w, c, wn, mv in res:
                err = float(o.log_z) - ref
                se = float(o.info["log_z_se"])
                extra = (f"temps {int(o.info['num_temps'])}, families {float(o.info['families_eff']):.0f}, P {P}"
                         if name == "pa" else f"temps {ais.num_temps}, weight ESS {float(o.info['weight_ess']):.1f}")
                rows.append([f"{L}x{L}", f"{K:.4f}", name, str(seed), f"{mv:.3g}", f"{err:+.4f}", f"{se:.4f}",
                             f"{abs(err) / se:.2f}", f"{w:.1f}", f"{c:.1f}", str(bool(np.all(o.info["converged"]))),
                             extra])
                summary.setdefault((L, K, name), []).append((err, se, w, c))
                print("  ".join(rows[-1]), flush=True)
    print()
    hdr = ["case", "K", "estimator", "seed", "moves", "error", "SE", "|err|/SE", "wall s", "cpu s", "converged",
           "notes"]
    print("\n".join(table_lines(hdr, rows, left=3, group_col=0)))
    print()
    srows = []
    for (L, K, name), v in summary.items():
        v = np.array(v)
        pa_se = np.mean(np.array(summary[(L, K, "pa")])[:, 1])
        srows.append([f"{L}x{L}", f"{K:.4f}", name, str(len(v)), f"{np.mean(v[:, 1]):.4f}",
                      f"{np.sqrt(np.mean(v[:, 0] ** 2)):.4f}", f"{np.mean((v[:, 0] / v[:, 1]) ** 2):.2f}",
                      f"{np.mean(np.abs(v[:, 0] / v[:, 1]) <= 2):.2f}",
                      f"{pa_se / np.mean(v[:, 1]):.3f}", f"{np.median(v[:, 2]):.1f}", f"{np.median(v[:, 3]):.1f}"])
    print("\n".join(table_lines(["case", "K", "estimator", "runs", "mean SE", "RMS error", "mean z²",
                                 "share |z| ≤ 2", "PA SE / this SE", "wall s (median)", "cpu s (median)"], srows,
                                left=3, group_col=0)))
    print(f"(load average at end {os.getloadavg()[0]:.2f})")


if __name__ == "__main__":
    main()
