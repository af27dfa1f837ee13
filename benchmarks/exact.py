"""Exact marginals side by side: our meet-in-the-middle ``Exact`` engine against
naive enumeration in JAX, ``dimod.ExactSolver`` and dwave-samplers'
``TreeDecompositionSampler`` (DESIGN.md §3, "Exact enumeration — meet in the middle").

Problem: Q queries share one dense coupling matrix; ``h_q ~ N(0, 1)``,
``J_jk ~ N(0, 1/n)`` (j<k, symmetric, zero diagonal), float32, β = 1.

Methods:

1. ours   ``jax.jit(lambda h, J: Exact().marginals(IsingModel(h, J)).mean)``
          on all Q queries at once; best and median over ``--repeats`` runs after compile.
2. naive  ``m = softmax(S h_q + c_J)ᵀ S`` over the full ``[2^n, n]`` table S, jit-compiled
          float32. It forms ``[Q, 2^n]`` logits, so queries go through ``lax.map`` in
          chunks whose block stays under ``--naive-block-mib``.
3. dimod.ExactSolver on ``IsingModel(h_q, J).to_bqm()`` + numpy float64 Boltzmann
          weights from the sampleset energies, one query at a time.
4. dwave-samplers ``TreeDecompositionSampler().sample(bqm, beta=1, marginals=True,
          num_reads=1)``; ``info['variable_marginals']`` is P(s=+1), so m = 2P - 1.

Anchors 3 and 4 run on the first ``--anchor-queries`` queries only; their time for Q
queries is the measured mean per query times Q and is labelled "extrap.". BQM export
is not timed. Every method's marginals are compared with ours (max |Δm| over the
queries it ran), so a fast wrong answer cannot win.

The useful work of our fast path is two GEMMs ``[Q, 2^(n/2)] x [2^(n/2), 2^(n/2)]``,
i.e. ``4 Q 2^n`` FLOPs; the script prints that rate as a fraction of the machine's
float32 GEMM rate (a jitted square ``jnp.matmul``), and, as a diagnostic, the time of
those two GEMMs alone at the engine's shapes.

Run:  python benchmarks/exact.py            (about 2 minutes on a 2-core CPU)
      python benchmarks/exact.py --ns 12 16 --q 64 --repeats 3 --anchor-queries 2

Junction tree (``--junction-tree``, DESIGN.md §3, "Junction tree / variable elimination"): ``JunctionTree`` on batches of ``--jt-batch``
models sharing one graph (king 8 x 24 and Chimera C3; Gaussian ``J ~ N(0, 1)`` on the edges,
``h ~ N(0, 0.5²)``, β = 1, float64), one jitted call returning means, edge correlations and log Z,
against dwave-samplers' ``TreeDecompositionSampler(marginals=True)``, one model per call, on every
model of the batch (BQM export not timed). Per-model time ratio and the largest disagreement in
⟨s⟩, ⟨s_i s_j⟩ on the edges (``interaction_marginals``) and log Z. Then ``JunctionTree`` against
``Banded(bandwidth=8)`` on a 64 x 8 lattice strip (bandwidth 8 in row-major order).

      python benchmarks/exact.py --junction-tree            (about 1 minute on a 2-core CPU)
"""

from __future__ import annotations

import argparse
import math
import os
import platform
import statistics
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np

from isingattn import IsingModel
from isingattn.inference.exact import Exact

from _table import table_lines

TARGETS_N = 20
TARGET_NAIVE = 100.0  # ours ≥ 100x faster than naive enumeration (total time, Q queries)
TARGET_EXACTSOLVER = 10_000.0  # ours ≥ 10,000x faster than dimod.ExactSolver per query
TARGET_GEMM_FRACTION = 0.40  # useful FLOP rate ≥ 40% of the machine's GEMM rate
TARGET_JT = 10.0  # JunctionTree ≥ 10x TreeDecompositionSampler per model (batches of 16)
JT_AGREE = 1e-5  # ... agreeing to this (⟨s⟩, ⟨s_i s_j⟩ absolute; log Z relative)
CORRECT_TOL = 1e-4  # max |Δm| against ours for a method's answer to count as correct


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


# ---- problem -----------------------------------------------------------------------------


def make_problem(n: int, Q: int, seed: int):
    """h [Q, n] ~ N(0, 1), one J [n, n] with J_jk ~ N(0, 1/n), float32."""
    rng = np.random.default_rng([seed, n])
    h = rng.standard_normal((Q, n)).astype(np.float32)
    A = np.triu(rng.normal(0.0, 1.0 / math.sqrt(n), (n, n)), 1)
    J = (A + A.T).astype(np.float32)
    return h, J


# ---- timing ------------------------------------------------------------------------------


def time_jitted(fn, args, repeats: int):
    """Compile (first call), then ``repeats`` timed calls. Returns (out, compile_s, best_s, median_s)."""
    return time_interleaved({"f": (fn, args)}, repeats)["f"]


def time_interleaved(jobs: dict, repeats: int) -> dict:
    """Compile every job, then time them round-robin ``repeats`` times, so that all of them
    see the same background load. jobs: name -> (jitted fn, args).
    Returns name -> (out, compile_s, best_s, median_s)."""
    outs, comp, times = {}, {}, {k: [] for k in jobs}
    for k, (fn, args) in jobs.items():
        t = time.perf_counter()
        outs[k] = jax.block_until_ready(fn(*args))
        comp[k] = time.perf_counter() - t
    for _ in range(repeats):
        for k, (fn, args) in jobs.items():
            t = time.perf_counter()
            outs[k] = jax.block_until_ready(fn(*args))
            times[k].append(time.perf_counter() - t)
    return {k: (outs[k], comp[k], min(times[k]), statistics.median(times[k])) for k in jobs}


def gemm_job(size: int):
    """A jitted float32 square matmul (2 size^3 FLOPs) and its inputs."""
    k1, k2 = jax.random.split(jax.random.key(0))
    a = jax.random.normal(k1, (size, size), jnp.float32)
    b = jax.random.normal(k2, (size, size), jnp.float32)
    return jax.jit(jnp.matmul), (a, b)


def gemm_rate(size: int, repeats: int) -> float:
    """Best float32 FLOP/s of a jitted square matmul."""
    _, _, best, _ = time_jitted(*gemm_job(size), repeats)
    return 2.0 * size**3 / best


def engine_gemms_job(n: int, Q: int):
    """The engine's two GEMMs alone at its shapes (u K and v Kᵀ), jitted, with random inputs."""
    NA, NB = 2 ** (n // 2), 2 ** (n - n // 2)
    ks = jax.random.split(jax.random.key(1), 3)
    u = jax.random.uniform(ks[0], (Q, NA), jnp.float32)
    v = jax.random.uniform(ks[1], (Q, NB), jnp.float32)
    K = jax.random.uniform(ks[2], (NA, NB), jnp.float32)
    return jax.jit(lambda u, v, K: (u @ K, v @ K.T)), (u, v, K)


# ---- methods -------------------------------------------------------------------------------


ours = jax.jit(lambda h, J: Exact().marginals(IsingModel(h, J)).mean)


def _table(n: int):
    """[2^n, n] table of all configurations in {-1, +1} (float32), independent of the engine's."""
    c = jnp.arange(2**n, dtype=jnp.int32)[:, None]
    return (1 - 2 * ((c >> jnp.arange(n, dtype=jnp.int32)) & 1)).astype(jnp.float32)


def naive_chunk(n: int, Q: int, block_mib: float) -> int:
    """Largest divisor of Q whose [chunk, 2^n] float32 logits block fits in block_mib."""
    cap = max(1, int(block_mib * 2**20 // (4 * 2**n)))
    return max(d for d in range(1, Q + 1) if Q % d == 0 and d <= cap)


def make_naive(n: int, chunk: int, beta: float = 1.0):
    """Jitted naive enumeration: m_q = softmax(β(S h_q + ½ sᵀJs))ᵀ S, chunks of queries via lax.map."""

    @jax.jit
    def naive(h, J):
        S = _table(n)  # [2^n, n]
        cJ = 0.5 * jnp.sum((S @ J) * S, axis=-1)  # [2^n], query-independent

        def block(hc):  # [chunk, n] -> [chunk, n]; materializes [chunk, 2^n]
            p = jax.nn.softmax(beta * (hc @ S.T + cJ), axis=-1)
            return p @ S

        hs = h.reshape(-1, chunk, n)
        return jax.lax.map(block, hs).reshape(h.shape)

    return naive


def exactsolver_marginals(bqm, n: int, beta: float = 1.0) -> np.ndarray:
    import dimod

    ss = dimod.ExactSolver().sample(bqm)
    cols = [ss.variables.index(v) for v in range(n)]
    X = ss.record.sample[:, cols].astype(np.float64)  # [2^n, n]
    E = np.asarray(ss.record.energy, dtype=np.float64)
    w = np.exp(-beta * (E - E.min()))
    return (w @ X) / w.sum()


def treedecomp_marginals(bqm, n: int, beta: float = 1.0) -> np.ndarray:
    from dwave.samplers import TreeDecompositionSampler

    ss = TreeDecompositionSampler().sample(bqm, beta=beta, marginals=True, num_reads=1)
    p_up = ss.info["variable_marginals"]  # label -> P(s = +1)
    return np.array([2.0 * p_up[v] - 1.0 for v in range(n)])


def run_anchor(name: str, fn, h, J, k: int):
    """Run a per-query anchor on the first k queries. Returns (per-query seconds, marginals [k, n])."""
    n = h.shape[1]
    try:
        from tqdm import tqdm
    except ImportError:  # plain progress
        tqdm = None
    warm = IsingModel(h[0, :4], J[:4, :4]).to_bqm()  # untimed warm-up (imports, lazy init)
    fn(warm, 4)
    it = range(k)
    if tqdm is not None:
        from isingattn.progress import disabled  # a bar on a terminal only (never cursor codes in a log)

        it = tqdm(it, desc=f"  {name} n={n}", file=sys.stderr, leave=False, disable=disabled())
    out, total = [], 0.0
    for q in it:
        bqm = IsingModel(h[q], J).to_bqm()  # export not timed
        t = time.perf_counter()
        out.append(fn(bqm, n))
        total += time.perf_counter() - t
        if tqdm is None:
            log(f"  {name} n={n}: query {q + 1}/{k} done ({total:.2f} s so far)")
    return total / k, np.stack(out)


# ---- report --------------------------------------------------------------------------------


def fmt_t(s: float) -> str:
    if s >= 100:
        return f"{s:,.0f} s"
    if s >= 1:
        return f"{s:.2f} s"
    if s >= 1e-3:
        return f"{s * 1e3:.2f} ms"
    return f"{s * 1e6:.1f} us"


def fmt_x(r: float) -> str:
    return f"{r:,.0f}x" if r >= 10 else f"{r:.2f}x"


def machine_info(gemm_size: int, gemm_flops: float) -> list[str]:
    cpu = platform.processor() or "?"
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next(l.split(":", 1)[1].strip() for l in f if l.startswith("model name"))
    except (OSError, StopIteration):
        pass
    try:
        import importlib.metadata as md

        vers = ", ".join(f"{p} {md.version(p)}" for p in ("dimod", "dwave-samplers", "numpy"))
    except Exception:  # pragma: no cover
        vers = "?"
    try:
        affinity = len(os.sched_getaffinity(0))
    except AttributeError:
        affinity = os.cpu_count()
    return [
        f"jax {jax.__version__} (jaxlib {jax.lib.__version__ if hasattr(jax.lib, '__version__') else '?'}), "
        f"backend {jax.default_backend()}, devices {jax.devices()}",
        f"CPU: {cpu}; os.cpu_count() = {os.cpu_count()}, usable cores = {affinity}; Python {platform.python_version()}",
        f"{vers}; XLA_FLAGS = {os.environ.get('XLA_FLAGS', '(unset)')}",
        f"float32 GEMM rate: {gemm_flops / 1e9:.1f} GFLOP/s (jit jnp.matmul {gemm_size}x{gemm_size}, best of repeats)",
    ]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ns", type=int, nargs="+", default=[12, 16, 20], help="numbers of spins (default: 12 16 20)")
    ap.add_argument("--q", type=int, default=256, help="queries sharing one J (default: 256)")
    ap.add_argument("--repeats", type=int, default=10, help="timed repeats after compile for JAX methods (default: 10)")
    ap.add_argument(
        "--anchor-queries",
        type=int,
        nargs="+",
        default=[4, 4, 1],
        help="queries run by the per-query anchors (ExactSolver, TreeDecomposition), one value for all n or one per "
        "--ns entry (default: 4 4 1)",
    )
    ap.add_argument("--naive-block-mib", type=float, default=256.0, help="max size of the naive [chunk, 2^n] logits block")
    ap.add_argument("--gemm-size", type=int, default=2048, help="square size for the GEMM-rate measurement")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--skip-exactsolver", action="store_true")
    ap.add_argument("--skip-treedecomp", action="store_true")
    ap.add_argument("--junction-tree", action="store_true", help="run the junction-tree comparison instead")
    ap.add_argument("--jt-batch", type=int, default=16, help="models per JunctionTree call (default: 16)")
    args = ap.parse_args(argv)
    if args.junction_tree:
        return junction_tree_main(args)

    if len(args.anchor_queries) == 1:
        anchor_k = {n: args.anchor_queries[0] for n in args.ns}
    elif len(args.anchor_queries) == len(args.ns):
        anchor_k = dict(zip(args.ns, args.anchor_queries))
    else:
        ap.error(f"--anchor-queries takes 1 value or one per --ns entry ({len(args.ns)}); got {len(args.anchor_queries)}")
    Q = args.q

    load0 = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    log(f"measuring GEMM rate ({args.gemm_size}x{args.gemm_size} float32) ...")
    gemm_rates = [gemm_rate(args.gemm_size, max(args.repeats, 3))]

    rows, notes, summary = [], [], {}
    for n in args.ns:
        log(f"n={n}: building problem (Q={Q})")
        h_np, J_np = make_problem(n, Q, args.seed)
        h, J = jnp.asarray(h_np), jnp.asarray(J_np)
        k = min(anchor_k[n], Q)

        chunk = naive_chunk(n, Q, args.naive_block_mib)
        log(f"n={n}: ours, naive JAX enumeration (chunks of {chunk} queries), GEMMs; {args.repeats} interleaved repeats")
        res = time_interleaved(
            {
                "ours": (ours, (h, J)),
                "naive": (make_naive(n, chunk), (h, J)),
                "gemms": engine_gemms_job(n, Q),
                "square": gemm_job(args.gemm_size),
            },
            args.repeats,
        )
        m_ours, c_ours, best_ours, med_ours = res["ours"]
        m_naive, c_naive, best_naive, med_naive = res["naive"]
        gemm_rates.append(2.0 * args.gemm_size**3 / res["square"][2])
        m_ours = np.asarray(m_ours, dtype=np.float64)
        fallback = int(np.sum(np.asarray(Exact().marginals(IsingModel(h, J)).info["stable_path"])))
        useful = 4.0 * Q * 2**n
        summary[n] = dict(ours=best_ours, rate=useful / best_ours, gemm_alone=res["gemms"][2])
        rows.append((n, "ours: inference.Exact (jit)", f"{Q}", best_ours, med_ours, c_ours, None, 0.0, ""))

        err = float(np.max(np.abs(np.asarray(m_naive, np.float64) - m_ours)))
        label = "naive JAX f32 softmax(Sh+c)ᵀS" + (f" [{chunk}-query chunks]" if chunk < Q else "")
        if chunk < Q:
            notes.append(
                f"n={n}: naive enumeration ran in lax.map chunks of {chunk} queries "
                f"([{Q}, 2^{n}] float32 logits = {Q * 2**n * 4 / 2**20:,.0f} MiB > --naive-block-mib {args.naive_block_mib:g})."
            )
        summary[n]["naive"] = (best_naive, err)
        rows.append((n, label, f"{Q}", best_naive, med_naive, c_naive, best_naive / best_ours, err, ""))

        ours_q = best_ours / Q
        for skip, name, fn, key in (
            (args.skip_exactsolver, "dimod.ExactSolver + numpy f64", exactsolver_marginals, "exactsolver"),
            (args.skip_treedecomp, "dwave TreeDecompositionSampler", treedecomp_marginals, "treedecomp"),
        ):
            if skip:
                continue
            log(f"n={n}: {name} on {k} of {Q} queries")
            per_q, m = run_anchor(name, fn, h_np, J_np, k)
            err = float(np.max(np.abs(m - m_ours[:k])))
            summary[n][key] = (per_q, err)
            rows.append((n, name, f"{k} of {Q}", per_q * Q, None, None, per_q / ours_q, err, "extrap."))

        log(
            f"n={n}: ours {fmt_t(best_ours)}, naive {fmt_t(best_naive)}"
            + "".join(f", {key} {fmt_t(summary[n][key][0])}/query" for key in ("exactsolver", "treedecomp") if key in summary[n])
        )
        if fallback:
            notes.append(f"n={n}: {fallback} of {Q} queries took the engine's log-space fallback path.")

    log("measuring GEMM rate again ...")
    gemm_rates.append(gemm_rate(args.gemm_size, max(args.repeats, 3)))
    gflops = max(gemm_rates)  # the machine's best observed rate: conservative for our fraction
    load1 = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")

    # ---- print ------------------------------------------------------------------------------
    out = print
    out("Exact marginals: ours (meet in the middle) vs naive enumeration vs dimod / dwave-samplers")
    out(f"Q = {Q} queries sharing one J; h ~ N(0,1), J ~ N(0,1/n), float32, beta = 1; seed {args.seed}")
    for line in machine_info(args.gemm_size, gflops):
        out("  " + line)
    out(
        "  (GEMM rate measured before, during (interleaved with each n) and after the run: "
        + ", ".join(f"{r / 1e9:.1f}" for r in gemm_rates)
        + f" GFLOP/s; the largest is used. 1-min load average {load0:.2f} at start, {load1:.2f} at end)"
    )
    out("")
    hdr = ("n", "method", "queries run", f"time for Q={Q}", "median", "compile", "per query", "ours faster by", "max|Δm| vs ours")
    table = []
    for n, name, ran, tot, med, comp, ratio, err, extrap in rows:
        per_q = tot / Q
        table.append(
            (
                str(n),
                name,
                ran,
                fmt_t(tot) + (" (extrap.)" if extrap else ""),
                fmt_t(med) if med is not None else "-",
                fmt_t(comp) if comp is not None else "-",
                fmt_t(per_q),
                "-" if ratio is None else fmt_x(ratio) + (" per query" if extrap else " total"),
                "(reference)" if ratio is None else f"{err:.1e}" + ("" if err <= CORRECT_TOL else "  WRONG"),
            )
        )
    for ln in table_lines(hdr, table, left=3, group_col=0):
        out(ln)
    out("")
    out("Times: JAX methods best (and median) of repeats after compile, timed round-robin with each other;")
    out("anchors: measured mean per query x Q, labelled 'extrap.' (after one untimed warm-up call).")
    out("Anchor times exclude BQM export. 'ours faster by' is total time (naive) or time per query (anchors).")
    for note in notes:
        out("Note: " + note)
    out("")
    out(f"Useful FLOP rate of ours (4*Q*2^n / time) vs GEMM rate {gflops / 1e9:.1f} GFLOP/s:")
    for n in args.ns:
        s = summary[n]
        NA, NB = 2 ** (n // 2), 2 ** (n - n // 2)
        out(
            f"  n={n:>2}: {s['rate'] / 1e9:7.1f} GFLOP/s = {100 * s['rate'] / gflops:5.1f}% of GEMM;  "
            f"the two GEMMs [{Q}x{NA}]@[{NA}x{NB}] alone: {fmt_t(s['gemm_alone'])} "
            f"= {100 * s['gemm_alone'] / s['ours']:.0f}% of our call ({100 * 4 * Q * 2**n / s['gemm_alone'] / gflops:.0f}% of GEMM rate)"
        )
    out("")
    if TARGETS_N not in summary:
        out(f"Targets are defined at n={TARGETS_N}, Q=256; n={TARGETS_N} was not run.")
        return 0
    s = summary[TARGETS_N]
    out(f"Targets at n={TARGETS_N}, Q={Q}" + ("" if Q == 256 else " (targets are defined for Q=256)") + ":")

    def verdict(ok: bool, correct: bool = True) -> str:
        return "PASS" if ok and correct else ("MISS (answer differs from ours)" if ok else "MISS")

    def target(label: str, goal: str, got: str, v: str) -> None:
        out(f"  {label:<40} {goal:>12}  got {got:>10}  {v}")

    t_naive, e_naive = s["naive"]
    r = t_naive / s["ours"]
    target("ours vs naive enumeration (total time)", f">= {TARGET_NAIVE:,.0f}x", fmt_x(r), verdict(r >= TARGET_NAIVE, e_naive <= CORRECT_TOL))
    if "exactsolver" in s:
        t_es, e_es = s["exactsolver"]
        r = t_es / (s["ours"] / Q)
        target("ours vs dimod.ExactSolver (per query)", f">= {TARGET_EXACTSOLVER:,.0f}x", fmt_x(r),
               verdict(r >= TARGET_EXACTSOLVER, e_es <= CORRECT_TOL))
    else:
        out("  ours vs dimod.ExactSolver: skipped")
    frac = s["rate"] / gflops
    target("useful FLOP rate / GEMM rate", f">= {100 * TARGET_GEMM_FRACTION:.0f}%", f"{100 * frac:.1f}%", verdict(frac >= TARGET_GEMM_FRACTION))
    return 0


# ---- junction tree ---------------------------------------------------------------------------


def king_graph(rows: int, cols: int):
    """The king's graph (lattice plus diagonals), row-major."""
    import networkx as nx

    from isingattn.sparse import CouplingGraph

    G = nx.grid_2d_graph(rows, cols)
    G.add_edges_from(((i, j), (i + 1, j + d)) for i in range(rows - 1) for j in range(cols) for d in (-1, 1)
                     if 0 <= j + d < cols)
    G = nx.convert_node_labels_to_integers(G, ordering="sorted")
    return CouplingGraph(G.number_of_nodes(), np.asarray(G.edges))


def tds_moments(g, h, w):
    """TreeDecompositionSampler's (m [n], edge ⟨s_i s_j⟩ [E], log Z) and its time for one model."""
    from dwave.samplers import TreeDecompositionSampler

    from isingattn.sparse import SparseCouplings

    bqm = IsingModel(h, SparseCouplings(g, w)).to_bqm()
    t = time.perf_counter()
    ss = TreeDecompositionSampler().sample(bqm, beta=1.0, marginals=True, num_reads=1)
    dt = time.perf_counter() - t
    m = np.array([2 * ss.info["variable_marginals"][v] - 1 for v in range(g.n)])
    pair = {tuple(sorted((int(a), int(b)))): p for (a, b), p in ss.info["interaction_marginals"].items()}
    c = np.array([(lambda p: p[(1, 1)] + p[(-1, -1)] - p[(1, -1)] - p[(-1, 1)])(pair[(a, b)])
                  for a, b in g.edges.tolist()])
    return m, c, ss.info["log_partition_function"], dt


def junction_tree_main(args) -> int:
    jax.config.update("jax_enable_x64", True)
    out = print
    from isingattn import graphs
    from isingattn.inference.banded import Banded
    from isingattn.inference.junction_tree import JunctionTree, plan_for
    from isingattn.sparse import SparseCouplings

    B, reps = args.jt_batch, args.repeats
    out(f"JunctionTree vs TreeDecompositionSampler, {B} models per call, float64, beta = 1 "
        f"(load average {os.getloadavg()[0]:.1f} at the start)")
    rows = []
    cases = [("king 8x24", king_graph(8, 24)), ("Chimera C3", graphs.chimera(3))]
    for name, g in cases:
        rng = np.random.default_rng([args.seed, g.n])
        h = jnp.asarray(0.5 * rng.standard_normal((B, g.n)))
        w = jnp.asarray(rng.standard_normal((B, g.E)))
        plan = plan_for(g, "auto")
        fn = jax.jit(lambda h, w, g=g: (lambda m: (m.mean, m.info["edge_corr"], m.log_z))(
            JunctionTree().marginals(IsingModel(h, SparseCouplings(g, w)))))
        (mean, ec, lz), comp, best, med = time_jitted(fn, (h, w), reps)
        ref = [tds_moments(g, np.asarray(h[q]), np.asarray(w[q])) for q in range(B)]
        t_tds = statistics.mean(r[3] for r in ref)
        dm = max(float(np.abs(np.asarray(mean[q]) - r[0]).max()) for q, r in enumerate(ref))
        dc = max(float(np.abs(np.asarray(ec[q]) - r[1]).max()) for q, r in enumerate(ref))
        dz = max(abs(float(lz[q]) - r[2]) / abs(r[2]) for q, r in enumerate(ref))
        ratio = t_tds / (best / B)
        rows.append((name, g.n, plan.treewidth, plan.heuristic, best / B, med / B, comp, t_tds, ratio, dm, dc, dz))
    out("")
    out("| graph | n | width (order) | ours per model (best / median) | compile | TDS per model | ratio | max Δ⟨s⟩ | max Δ⟨ss⟩ | max rel Δ log Z |")
    out("|---|---|---|---|---|---|---|---|---|---|")
    for name, n, tw, heur, b, m, c, t, r, dm, dc, dz in rows:
        out(f"| {name} | {n} | {tw} ({heur}) | {fmt_t(b)} / {fmt_t(m)} | {c:.1f} s | {fmt_t(t)} | {fmt_x(r)} | "
            f"{dm:.1e} | {dc:.1e} | {dz:.1e} |")
    out("")
    for name, n, tw, heur, b, m, c, t, r, dm, dc, dz in rows:
        ok = max(dm, dc, dz) <= JT_AGREE
        out(f"  target {name}: >= {TARGET_JT:.0f}x per model, agreeing to {JT_AGREE:g}: got {fmt_x(r)}, "
            f"{'agrees' if ok else 'DISAGREES'}  {'PASS' if r >= TARGET_JT and ok else 'MISS'}")

    # the fast path for bands: Banded against JunctionTree on a strip banded in the spin order
    g = graphs.lattice((64, 8))
    rng = np.random.default_rng([args.seed, 1])
    h = jnp.asarray(0.5 * rng.standard_normal((B, g.n)))
    w = jnp.asarray(rng.standard_normal((B, g.E)))
    jt = jax.jit(lambda h, w: (lambda m: (m.mean, m.log_z))(JunctionTree().marginals(IsingModel(h, SparseCouplings(g, w)))))
    bd = jax.jit(lambda h, w: (lambda m: (m.mean, m.log_z))(Banded(bandwidth=8).marginals(IsingModel(h, SparseCouplings(g, w)))))
    res = time_interleaved({"jt": (jt, (h, w)), "banded": (bd, (h, w))}, reps)
    (mj, lj), cj, bj, _ = res["jt"]
    (mb, lb), cb, bb, _ = res["banded"]
    plan = plan_for(g, "auto")
    out("")
    out(f"Banded(bandwidth=8) vs JunctionTree on a 64x8 strip ({B} models, width {plan.treewidth} by {plan.heuristic}): "
        f"Banded {fmt_t(bb)} (compile {cb:.1f} s), JunctionTree {fmt_t(bj)} (compile {cj:.1f} s): "
        f"JunctionTree takes {bj / bb:.1f}x Banded's time; max |Δm| {float(jnp.abs(mj - mb).max()):.1e}, "
        f"max |Δ log Z| {float(jnp.abs(lj - lb).max()):.1e}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
