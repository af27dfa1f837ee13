"""Banded (transfer-matrix) marginals side by side with dwave-samplers'
``TreeDecompositionSampler`` (DESIGN.md §3, "Banded / transfer matrix").

Problem: Q queries share one banded coupling matrix of bandwidth w over T spins;
``h_q ~ N(0, 1)``, ``J_jk ~ N(0, 1/w)`` for ``1 ≤ |j-k| ≤ w`` (symmetric), β = 1.

Methods:

1. ours   ``jax.jit(lambda h, J: Banded(bandwidth=w).marginals(IsingModel(h, J)).mean)``
          on all Q queries in one call, float32 and float64; best and median of
          ``--repeats`` runs after compile.
2. dwave-samplers ``TreeDecompositionSampler().sample(bqm, beta=1, marginals=True,
          num_reads=1, elimination_order=range(T))`` one query at a time on the first
          ``--anchor-queries`` queries; m = 2 P(s=+1) - 1. Its time for Q queries is the
          mean per query times Q ("extrap."). BQM export is not timed.

Agreement: max |Δm| of our float64 (and float32) marginals against the anchor's on the
queries it ran (target ≤ 1e-5). Speed: time per query, anchor / ours (target ≥ 100x).

Run:  python benchmarks/banded.py                 (about 1 minute on a 2-core CPU)
      python benchmarks/banded.py --T 512 --w 10 --q 64
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import time

import jax
import numpy as np

from isingattn import IsingModel
from isingattn.inference.banded import Banded

from _table import table_lines

TARGET_ERR = 1e-5
TARGET_RATIO = 100.0


def make_problem(T: int, w: int, Q: int, seed: int):
    rng = np.random.default_rng([seed, T, w])
    h = rng.standard_normal((Q, T))
    dist = np.abs(np.arange(T)[:, None] - np.arange(T)[None, :])
    A = np.triu(rng.normal(0.0, 1.0 / np.sqrt(w), (T, T)) * (dist <= w), 1)
    return h, A + A.T


def time_jitted(fn, args, repeats: int):
    """Compile, then ``repeats`` timed calls: (out, compile_s, best_s, median_s)."""
    t = time.perf_counter()
    out = jax.block_until_ready(fn(*args))
    comp = time.perf_counter() - t
    ts = []
    for _ in range(repeats):
        t = time.perf_counter()
        out = jax.block_until_ready(fn(*args))
        ts.append(time.perf_counter() - t)
    return np.asarray(out, np.float64), comp, min(ts), statistics.median(ts)


def treedecomp(h, J, beta, k):
    from dwave.samplers import TreeDecompositionSampler

    sampler, T = TreeDecompositionSampler(), h.shape[1]
    order = list(range(T))
    sampler.sample(IsingModel(h[0, :8], J[:8, :8]).to_bqm(), beta=beta, marginals=True)  # warm-up
    ms, total = [], 0.0
    for q in range(k):
        bqm = IsingModel(h[q], J).to_bqm()
        t = time.perf_counter()
        ss = sampler.sample(bqm, beta=beta, marginals=True, num_reads=1, elimination_order=order)
        total += time.perf_counter() - t
        p = ss.info["variable_marginals"]
        ms.append([2.0 * p[j] - 1.0 for j in range(T)])
    return np.array(ms), total / k


def fmt_t(s: float) -> str:
    return f"{s * 1e3:.2f} ms" if s < 1 else f"{s:.2f} s"


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--T", type=int, default=256)
    p.add_argument("--w", type=int, default=8)
    p.add_argument("--q", type=int, default=256)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--anchor-queries", type=int, default=8)
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    jax.config.update("jax_enable_x64", True)
    T, w, Q, beta = args.T, args.w, args.q, 1.0
    h, J = make_problem(T, w, Q, args.seed)

    print(f"Banded marginals: ours (transfer matrix, jit, Q queries per call) vs dwave TreeDecompositionSampler")
    print(f"T = {T} spins, bandwidth w = {w}, Q = {Q} queries sharing one J; h ~ N(0,1), J ~ N(0,1/w) in the band, beta = {beta}")
    import dimod
    import dwave.samplers

    print(f"  jax {jax.__version__}, backend {jax.default_backend()}; CPU {platform.processor() or platform.machine()}, "
          f"os.cpu_count() = {os.cpu_count()}; dimod {dimod.__version__}, dwave-samplers {dwave.samplers.__version__}; "
          f"1-min load average {os.getloadavg()[0]:.2f}")
    rows = []
    res = {}
    for dt in (np.float64, np.float32):
        f = jax.jit(lambda h, J: Banded(bandwidth=w).marginals(IsingModel(h, J)).mean)
        res[dt] = time_jitted(f, (h.astype(dt), J.astype(dt)), args.repeats)
    k = args.anchor_queries
    m_ref, per_q_ref = treedecomp(h, J, beta, k)
    print(f"  (load average at end {os.getloadavg()[0]:.2f})\n")
    hdr = ("method", "queries run", f"time for Q={Q}", "median", "compile", "per query", "ours faster by",
           "max|Δm| vs TreeDecomp")
    for dt in (np.float64, np.float32):
        out, comp, best, med = res[dt]
        err = float(np.abs(out[:k] - m_ref).max())
        rows.append((f"ours: Banded({w}) {np.dtype(dt).name} (jit)", str(Q), fmt_t(best), fmt_t(med), fmt_t(comp),
                     fmt_t(best / Q), f"{per_q_ref / (best / Q):,.0f}x per query", f"{err:.1e}"))
    rows.append(("dwave TreeDecompositionSampler", f"{k} of {Q}", fmt_t(per_q_ref * Q) + " (extrap.)", "-", "-",
                 fmt_t(per_q_ref), "-", "(reference)"))
    print("\n".join(table_lines(hdr, rows, left=2)))
    print("\nTimes: ours best (and median) of repeats after compile; anchor: mean per query over the queries run.")
    err64 = float(np.abs(res[np.float64][0][:k] - m_ref).max())
    ratio32 = per_q_ref / (res[np.float32][2] / Q)
    ratio64 = per_q_ref / (res[np.float64][2] / Q)
    print(f"\nTargets at T={T}, w={w}, Q={Q}:")
    print(f"  max|Δm| float64 vs TreeDecompositionSampler  <= {TARGET_ERR:g}  got {err64:.1e}  "
          f"{'PASS' if err64 <= TARGET_ERR else 'MISS'}")
    print(f"  speed per query (float32 / float64)          >= {TARGET_RATIO:.0f}x  got {ratio32:,.0f}x / {ratio64:,.0f}x  "
          f"{'PASS' if ratio32 >= TARGET_RATIO else 'MISS'} (float32)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
