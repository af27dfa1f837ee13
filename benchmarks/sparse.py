"""Sparse coupling graphs at scale, ours and the anchors side by side in one run.

1. ``gibbs``: 2D ±J lattices with periodic boundaries, ``h ~ N(0, 0.1²)``, fixed β = 0.5,
   16 chains, at n = 4,096, 65,536 and 1,048,576: ``Gibbs`` (colour-class sweeps on the
   edge list; ``ours``: the engine with its default diagnostics, ``ours-nodiag``: without
   them, ``ours-sweeps``: the sweeps alone, ``run_chains``) against dwave-samplers'
   ``SimulatedAnnealingSampler`` at the same fixed β (``beta_schedule_type="custom"``,
   16 reads) and thrml's block Gibbs (two checkerboard blocks, 16 chains vmapped), in spin
   updates per second. The cost per sweep against E and its log-log slope are printed.
2. ``sqa``: a Pegasus graph (``pegasus:16``, 5,640 spins, ±J), anneal mode, the same sweeps,
   Trotter number and reads for ours and openjij's ``SQASampler``: throughput and best
   energy.
3. ``bp``: ``MeanField(method="bp")`` on 2D lattices up to n = 65,536: time per iteration
   against E (linear: slope ≈ 1).

Every measurement runs in its own subprocess (``--worker``), so its peak memory
(``ru_maxrss``) is its own; the methods of one size run one after another, round-robin
over ``--repeats``, and each reports its best time. Compile time is excluded from rates
(reported separately).

Run:  python benchmarks/sparse.py                      # everything, ~15 minutes on 2 cores
      python benchmarks/sparse.py --only gibbs --sizes 64 256
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import subprocess
import sys
import time

import numpy as np

BETA = 0.5
CHAINS = 16
H_SCALE = 0.1


def _lattice_model(L, seed=0):
    import jax
    import jax.numpy as jnp

    from isingattn import IsingModel, graphs

    g = graphs.lattice((L, L), periodic=True)
    k1, k2 = jax.random.split(jax.random.key(seed))
    J = graphs.random_couplings(k1, g, "pm")
    h = jax.random.normal(k2, (g.n,), jnp.float32) * H_SCALE
    return IsingModel(h, J, beta=BETA)


def _timed(f, repeats):
    import jax

    t = time.perf_counter()
    jax.block_until_ready(f(0))
    first = time.perf_counter() - t
    best = np.inf
    for r in range(repeats):
        t = time.perf_counter()
        jax.block_until_ready(f(r + 1))
        best = min(best, time.perf_counter() - t)
    return best, max(first - best, 0.0)


def worker(task: dict) -> dict:
    """One measurement; returns times and this process's peak memory."""
    import jax

    kind, method, size, sweeps, repeats = task["kind"], task["method"], task["size"], task["sweeps"], task["repeats"]
    out = {}
    if kind == "gibbs":
        model = _lattice_model(size)
        n = model.n
        jax.block_until_ready(model.J.weights)
        out["rss_model_mib"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # imports + model built
        if method == "ours":  # the engine as users call it: marginals and the default diagnostics
            from isingattn.inference.mcmc import Gibbs

            eng = Gibbs(num_warmup=0, num_samples=sweeps, num_chains=CHAINS)
            f = jax.jit(lambda k: (lambda m: (m.mean, m.info["r_hat"], m.info["ess"]))(
                eng.marginals(model, key=jax.random.key(k))))
            best, comp = _timed(f, repeats)
            out["model_mib"] = (model.h.nbytes + sum(x.nbytes for x in jax.tree_util.tree_leaves(model.J))
                                + model.J.graph.nbytes) / 2**20
        elif method == "ours-nodiag":  # the engine without its diagnostics: marginals only
            from isingattn.inference.mcmc import Gibbs

            eng = Gibbs(num_warmup=0, num_samples=sweeps, num_chains=CHAINS, diagnostics=False)
            f = jax.jit(lambda k: eng.marginals(model, key=jax.random.key(k)).mean)
            best, comp = _timed(f, repeats)
        elif method == "ours-sweeps":  # the sweeps alone (run_chains), no statistics
            from isingattn.inference.mcmc.coloring import color_classes
            from isingattn.inference.mcmc.gibbs import run_chains

            classes = color_classes(model.J)
            f = jax.jit(lambda k: run_chains(jax.random.key(k), model.h, model.J, BETA, None, (n,), num_warmup=0,
                                             num_samples=sweeps, num_chains=CHAINS, classes=classes)[1])
            best, comp = _timed(f, repeats)
        elif method == "dwave":
            from dwave.samplers import SimulatedAnnealingSampler

            bqm = model.to_bqm()
            sa = SimulatedAnnealingSampler()
            sa.sample(bqm, num_reads=1, num_sweeps=1, beta_schedule_type="custom", beta_schedule=[BETA], seed=0)
            best, comp = np.inf, 0.0
            for r in range(repeats):
                t = time.perf_counter()
                sa.sample(bqm, num_reads=CHAINS, num_sweeps=sweeps, beta_schedule_type="custom",
                          beta_schedule=[BETA] * sweeps, seed=r)
                best = min(best, time.perf_counter() - t)
        elif method == "thrml":
            best, comp = _thrml(model, sweeps, repeats)
        out.update(rate=CHAINS * n * sweeps / best, E=int(model.J.graph.E), n=n)
    elif kind == "sqa":
        from isingattn import IsingModel, graphs

        g = graphs.parse(f"pegasus:{size}")
        J = graphs.random_couplings(jax.random.key(0), g, "pm")
        model = IsingModel(np.zeros(g.n, np.float32), J, beta=5.0)
        P, R = task["trotter"], task["reads"]
        if method == "ours":
            from isingattn.inference.mcmc.coloring import color_classes
            from isingattn.inference.mcmc.sqa import sqa_sample

            classes = color_classes(J)
            f = jax.jit(lambda k: sqa_sample(jax.random.key(k), model.h, J, 5.0, num_reads=R, trotter=P,
                                             num_sweeps=sweeps, gamma_schedule=("linear", 3.0, 0.01), mode="anneal",
                                             thermal_sweeps=0, classes=classes)[1]["energy"])
            best, comp = _timed(f, repeats)
            out["best_energy"] = float(np.min(np.asarray(f(99))))
        else:
            import openjij as oj

            bqm = model.to_bqm()
            sampler = oj.SQASampler()
            best, comp, E = np.inf, 0.0, np.inf
            for r in range(repeats):
                t = time.perf_counter()
                ss = sampler.sample(bqm, num_reads=R, num_sweeps=sweeps, trotter=P, beta=5.0, seed=r + 1)
                best = min(best, time.perf_counter() - t)
                E = min(E, float(ss.first.energy))
            out["best_energy"] = E
        out.update(rate=R * P * g.n * sweeps / best, E=int(g.E), n=g.n)
    elif kind == "bp":
        from isingattn.inference.meanfield import MeanField

        model = _lattice_model(size)
        # at most `sweeps` iterations (the tol is floored at 64 eps): time per iteration run
        eng = MeanField(method="bp", tol=1e-30, max_iter=sweeps)
        f = jax.jit(lambda k: eng.marginals(model).info["iterations"])
        best, comp = _timed(f, repeats)
        iters = int(np.max(np.asarray(f(0))))
        out.update(per_iter=best / iters, iterations=iters, E=int(model.J.graph.E), n=model.n)
    out.update(best=best, compile=comp, maxrss_mib=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)
    return out


def _thrml(model, sweeps, repeats):
    import jax
    import jax.numpy as jnp
    from thrml import Block, SamplingSchedule, SpinNode, sample_states
    from thrml.models import IsingEBM, IsingSamplingProgram, hinton_init

    from isingattn.inference.mcmc.coloring import color_classes

    g = model.J.graph
    nodes = [SpinNode() for _ in range(g.n)]
    edges = [(nodes[i], nodes[j]) for i, j in g.edges.tolist()]
    # thrml's energy is -β(Σ b_i s_i + Σ_edges w s_i s_j): b = h, w = J_ij, as ours
    ebm = IsingEBM(nodes, edges, model.h, model.J.weights, jnp.asarray(BETA, jnp.float32))
    free = [Block([nodes[i] for i in c]) for c in color_classes(model.J)]  # the checkerboard
    program = IsingSamplingProgram(ebm, free, clamped_blocks=[])
    schedule = SamplingSchedule(n_warmup=sweeps - 1, n_samples=1, steps_per_sample=1)
    observe = [Block(nodes[:1])]

    @jax.jit
    def run(seed):
        k_init, k_run = jax.random.split(jax.random.key(seed))
        init = hinton_init(k_init, ebm, free, (CHAINS,))
        keys = jax.random.split(k_run, CHAINS)
        return jax.vmap(lambda k, *i: sample_states(k, program, schedule, list(i), [], observe))(keys, *init)

    return _timed(run, repeats)


def _run_worker(task, timeout):
    cmd = [sys.executable, __file__, "--worker", json.dumps(task)]
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"error": f"timed out after {timeout} s"}
    if p.returncode:
        return {"error": (p.stderr.strip().splitlines() or ["failed"])[-1][:200]}
    return json.loads(p.stdout.strip().splitlines()[-1])


def _slope(x, y):
    x, y = np.log(np.asarray(x, float)), np.log(np.asarray(y, float))
    return float(np.polyfit(x, y, 1)[0]) if len(x) > 1 else float("nan")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    ap.add_argument("--only", nargs="*", choices=("gibbs", "sqa", "bp"), default=("gibbs", "sqa", "bp"))
    ap.add_argument("--sizes", nargs="*", type=int, default=(64, 256, 1024), help="lattice sides L (n = L²) for gibbs")
    ap.add_argument("--sweeps", nargs="*", type=int, default=(100, 100, 20), help="Gibbs sweeps, one per size")
    ap.add_argument("--methods", nargs="*", default=("ours", "ours-nodiag", "ours-sweeps", "dwave", "thrml"))
    ap.add_argument("--pegasus", type=int, default=16)
    ap.add_argument("--sqa-sweeps", type=int, default=100)
    ap.add_argument("--bp-sizes", nargs="*", type=int, default=(32, 64, 128, 256))
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--timeout", type=int, default=900, help="seconds per measurement")
    args = ap.parse_args(argv)
    if args.worker:
        print(json.dumps(worker(json.loads(args.worker))))
        return 0
    import jax

    print(f"# sparse graphs; {platform.machine()}, {os.cpu_count()} CPUs, jax {jax.__version__} ({jax.default_backend()}); "
          f"1-min load average {os.getloadavg()[0]:.2f}")
    print(f"$ python benchmarks/sparse.py {' '.join(argv if argv is not None else sys.argv[1:])}".rstrip())
    if "gibbs" in args.only:
        print(f"\n## Gibbs: 2D ±J periodic lattice, h ~ N(0, {H_SCALE}²), β = {BETA}, {CHAINS} chains; best of {args.repeats}\n")
        print("| n | E | sweeps | method | best (s) | compile (s) | M spin updates/s | ours / this | peak RSS (MiB) | "
              "RSS with model built (MiB) |")
        print("|---:|---:|---:|---|---:|---:|---:|---:|---:|---:|")
        per_sweep = []
        for L, S in zip(args.sizes, args.sweeps):
            res = {}
            for m in args.methods:
                if m == "thrml" and L > 256:  # thrml builds one Python node object per spin: skipped beyond n = 65,536
                    continue
                res[m] = _run_worker(dict(kind="gibbs", method=m, size=L, sweeps=S, repeats=args.repeats), args.timeout)
                print(f"  done gibbs n={L * L} {m}: {res[m]}", file=sys.stderr, flush=True)
            ours = res.get("ours", {}).get("rate")
            for m, r in res.items():
                if "error" in r:
                    print(f"| {L * L} | | {S} | {m} | {r['error']} | | | | |")
                    continue
                ratio = f"{ours / r['rate']:.2f}x" if ours else ""
                print(f"| {r['n']} | {r['E']} | {S} | {m} | {r['best']:.3f} | {r['compile']:.1f} | {r['rate'] / 1e6:.1f} | "
                      f"{ratio} | {r['maxrss_mib']:.0f} | {r['rss_model_mib']:.0f} |")
            if ours:
                per_sweep.append((res["ours"]["E"], res["ours"]["best"] / S))
                print(f"\nn = {L * L}: the model itself (h, weights, neighbour tables, graph) takes "
                      f"{res['ours']['model_mib']:.1f} MiB\n")
        if len(per_sweep) > 1:
            E, t = zip(*per_sweep)
            print(f"\nours, time per sweep vs E: " + ", ".join(f"E={e}: {x * 1e3:.2f} ms" for e, x in per_sweep)
                  + f"; log-log slope {_slope(E, t):.2f} (1 = linear)")
    if "sqa" in args.only:
        P, R = 8, 16
        print(f"\n## SQA: pegasus:{args.pegasus}, ±J, h = 0, β = 5, anneal mode, trotter {P}, {R} reads, "
              f"{args.sqa_sweeps} sweeps; openjij OMP_NUM_THREADS=1\n")
        print("| method | n | E | best (s) | compile (s) | M spin updates/s | ours / this | best energy | peak RSS (MiB) |")
        print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
        os.environ["OMP_NUM_THREADS"] = "1"
        res = {m: _run_worker(dict(kind="sqa", method=m, size=args.pegasus, sweeps=args.sqa_sweeps, repeats=args.repeats,
                                   trotter=P, reads=R), args.timeout) for m in ("ours", "openjij")}
        ours = res["ours"].get("rate")
        for m, r in res.items():
            if "error" in r:
                print(f"| {m} | {r['error']} | | | | | | | |")
                continue
            print(f"| {m} | {r['n']} | {r['E']} | {r['best']:.3f} | {r['compile']:.1f} | {r['rate'] / 1e6:.2f} | "
                  f"{ours / r['rate']:.2f}x | {r['best_energy']:.0f} | {r['maxrss_mib']:.0f} |")
    if "bp" in args.only:
        iters = 50
        print(f"\n## BP: MeanField(method='bp') on 2D ±J periodic lattices, at most {iters} iterations (to the float32 floor of tol)\n")
        print("| n | E | iterations | time per iteration (ms) | compile (s) | peak RSS (MiB) |")
        print("|---:|---:|---:|---:|---:|---:|")
        pts = []
        for L in args.bp_sizes:
            r = _run_worker(dict(kind="bp", method="ours", size=L, sweeps=iters, repeats=args.repeats), args.timeout)
            if "error" in r:
                print(f"| {L * L} | | | {r['error']} | | |")
                continue
            pts.append((r["E"], r["per_iter"]))
            print(f"| {r['n']} | {r['E']} | {r['iterations']} | {r['per_iter'] * 1e3:.3f} | {r['compile']:.1f} | "
                  f"{r['maxrss_mib']:.0f} |")
        if len(pts) > 1:
            print(f"\nlog-log slope of time per iteration against E: {_slope(*zip(*pts)):.2f} (1 = linear)")
    print(f"\n1-min load average at end {os.getloadavg()[0]:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
