"""Accuracy per second on the open ±J strips: the maximum marginal error against
wall time for parallel tempering and Gibbs, drawn in one plot.

Each engine runs at a ladder of budgets (``num_samples`` doubling, warmup a quarter of it),
one key per point, on the 8×24 and 6×40 strips (seed 0: ±1 couplings, h ~ N(0, 0.3²)) at
β = 2, against the exact transfer matrix of tests/inference/mcmc/test_pt.py. Wall times are
second calls (compilation excluded: every budget is compiled once before it is timed), so the
curves show sampling cost, not compile cost.

Run:  nice -n 19 python benchmarks/pt_accuracy.py --out results/pt_accuracy   (about 5 minutes)
"""

from __future__ import annotations

import argparse
import os
import time
import warnings

import jax
import jax.numpy as jnp
import numpy as np

from isingattn import IsingModel, atomic
from isingattn.inference.mcmc import Gibbs, ParallelTempering

from pt import _reference  # benchmarks/pt.py: the transfer matrix from the test file


def run(engine, model, key):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # unconverged Gibbs warns at every budget; the error says it all
        jax.block_until_ready(engine.marginals(model, key=jax.random.key(999)).mean)  # compile
        t = time.perf_counter()
        out = engine.marginals(model, key=key)
        jax.block_until_ready(out.mean)
    return out, time.perf_counter() - t


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--beta", type=float, default=2.0)
    p.add_argument("--budgets", type=int, nargs="+", default=[250, 500, 1000, 2000, 4000, 8000, 16000])
    p.add_argument("--out", default="runs/benchmarks/pt_accuracy")
    args = p.parse_args()
    strip_model, transfer_exact = _reference()
    print(f"load average at start: {os.getloadavg()[0]:.2f}")
    print("| strip | engine | num_samples | max |err| | mean |err| | converged | wall s |")
    print("|---|---|---|---|---|---|---|")
    curves = {}
    for rows, cols in ((8, 24), (6, 40)):
        h, J = strip_model(rows, cols, 0)
        mean, _, _ = transfer_exact(h, J, args.beta, rows, cols)
        model = IsingModel(jnp.asarray(h, jnp.float32), jnp.asarray(J, jnp.float32), args.beta)
        for name in ("pt", "gibbs"):
            pts = []
            for i, S in enumerate(args.budgets):
                kw = dict(num_warmup=max(S // 4, 50), num_samples=S, keep_samples=False)
                eng = ParallelTempering(num_replicas=16, **kw) if name == "pt" else Gibbs(num_chains=64, **kw)  # Gibbs: PT's 16 x 4 chains
                out, dt = run(eng, model, jax.random.key(i))
                err = np.abs(np.asarray(out.mean) - mean)
                pts.append((dt, err.max()))
                print(f"| {rows}x{cols} | {name} | {S} | {err.max():.3f} | {err.mean():.4f} | "
                      f"{bool(out.info['converged'])} | {dt:.2f} |", flush=True)
            curves[(rows, cols, name)] = pts
    print(f"load average at end: {os.getloadavg()[0]:.2f}")

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4.2))
    style = {"pt": "-o", "gibbs": "--s"}
    colour = {(8, 24): "tab:blue", (6, 40): "tab:orange"}
    for (rows, cols, name), pts in curves.items():
        t, e = zip(*pts)
        ax.loglog(t, e, style[name], color=colour[(rows, cols)], label=f"{'PT' if name == 'pt' else 'Gibbs'} {rows}×{cols}")
    ax.axhline(0.08, color="0.5", lw=0.8, ls=":")
    ax.text(ax.get_xlim()[0] * 1.1, 0.085, "0.08 (the target)", fontsize=7, color="0.4")
    ax.set_xlabel("wall time (s, compilation excluded)")
    ax.set_ylabel("max |⟨s_i⟩ − exact| over spins")
    ax.set_title(f"Open ±J strips at β = {args.beta:g}: PT (16 replicas × 4 chains) vs Gibbs (64 chains)", fontsize=9)
    ax.legend(fontsize=8)
    fig.tight_layout()
    os.makedirs(args.out, exist_ok=True)
    atomic.savefig(fig, os.path.join(args.out, "error_vs_time.png"), dpi=120)
    print(f"wrote {args.out}/error_vs_time.png")


if __name__ == "__main__":
    main()
