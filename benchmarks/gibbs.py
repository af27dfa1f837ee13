"""Gibbs engine throughput, side by side with dwave-samplers' simulated annealing at a
fixed β and thrml's block Gibbs (DESIGN.md §3, Gibbs).

Problems (float32, β = 1, ``h ~ N(0, 1)``, dense ``J_jk ~ N(0, 1/n)``):

1. ``dense``: one model, n = 64, 256 chains (the headline number), against
   * dwave-samplers ``SimulatedAnnealingSampler`` (C++, single-threaded, Metropolis) at
     fixed β: ``beta_schedule_type="custom"``, ``beta_schedule = [β] * num_sweeps``,
     ``num_reads = 256``, the same number of sweeps as ours, one ``sample`` call;
   * thrml (JAX) block Gibbs, ``IsingEBM`` with every pair as an edge: a dense graph
     has no two uncoupled spins, so its free blocks are the 64 single spins, visited in
     order (the same systematic heat-bath scan as ours); 256 chains vmapped over keys
     and initial states, ``sample_states`` observing every spin each sweep. It runs
     fewer sweeps (``--thrml-sweeps``): its compile alone takes over a minute.
2. ``batch``: an attention layer's worth of models, Q = 256 queries sharing one J,
   n = 16, 4 chains each (ours only).

Rates are spin updates per second: chains (reads) x models x n x sweeps / wall time,
after compilation (JAX) or one untimed warm-up call (dwave). Every method is timed
``--repeats`` times, round-robin with the others so that all see the same background
load, and its best time is used. ``sweeps only`` is ``run_chains`` (the jitted loop
over sweeps for all chains and models, every sweep's spins stored); ``Gibbs() engine,
default diagnostics`` is ``Gibbs(num_warmup, num_samples, num_chains=256).marginals`` as
users call it (sweeps, per-spin split R-hat/ESS/MCSE, the ``[n, n]`` second moment, the
samples), and the ``diagnostics=False`` row the same without R-hat/ESS/MCSE. The
target is the engine with its default diagnostics against dwave SA, in the
same run. The CPU-second column divides by the process CPU time of the best
run (all threads): on a loaded machine it shows the work done per core-second, which
wall time hides (XLA runs ours on 2 threads; dwave is single-threaded). So that a fast
wrong sampler cannot win, each method's spin
means are compared with ours (``max|Δm|``; the standard error of a dwave/thrml mean is
about 0.03-0.06 here, ours about 0.005).

Run:  python benchmarks/gibbs.py                  (about 3 minutes on a 2-core CPU)
      python benchmarks/gibbs.py --sweeps 330 --repeats 2 --skip-thrml
"""

from __future__ import annotations

import argparse
import os
import platform
import time
from importlib.metadata import version

import jax
import jax.numpy as jnp
import numpy as np

from isingattn import IsingModel
from isingattn.fluctuation import unpack_samples
from isingattn.inference.mcmc.gibbs import Gibbs, run_chains

TARGET_RATE = 5e7  # spin updates / s, dense n = 64, 256 chains
TARGET_DWAVE = 1.5  # ours / dwave SA at fixed beta (sweeps only; and the engine with default diagnostics)
TARGET_THRML = 10.0  # ours / thrml block Gibbs
ENGINE = "ours: Gibbs() engine, default diagnostics"


def _timed(f, cpu=False):
    t, c = time.perf_counter(), time.process_time()
    out = f()
    jax.block_until_ready(out)
    wall, cpu_s = time.perf_counter() - t, time.process_time() - c
    return ((wall, cpu_s) if cpu else wall), out


def dwave_runner(h, J, beta, reads, sweeps):
    from dwave.samplers import SimulatedAnnealingSampler

    bqm = IsingModel(np.asarray(h, np.float64), np.asarray(J, np.float64)).to_bqm()  # bqm.energy(s) == E(s)
    sampler = SimulatedAnnealingSampler()
    sched = np.full(sweeps, float(beta))
    labels = list(range(len(h)))

    def run(seed):
        ss = sampler.sample(bqm, num_reads=reads, num_sweeps=sweeps, beta_schedule_type="custom",
                            beta_schedule=sched, seed=seed)
        return np.asarray(ss.record.sample)[:, [ss.variables.index(v) for v in labels]]  # [reads, n]

    sampler.sample(bqm, num_reads=2, num_sweeps=2, beta_schedule_type="custom", beta_schedule=[1.0, 1.0], seed=0)
    return run


def thrml_runner(h, J, beta, chains, warmup, samples):
    from thrml import Block, SamplingSchedule, SpinNode, sample_states
    from thrml.models import IsingEBM, IsingSamplingProgram, hinton_init

    n = len(h)
    nodes = [SpinNode() for _ in range(n)]
    iu = np.triu_indices(n, 1)
    edges = [(nodes[i], nodes[j]) for i, j in zip(*iu)]
    # thrml's energy is -β(Σ b_i s_i + Σ_edges w s_i s_j): b = h, w = J_jk, as ours
    ebm = IsingEBM(nodes, edges, jnp.asarray(h, jnp.float32), jnp.asarray(np.asarray(J)[iu], jnp.float32),
                   jnp.asarray(beta, jnp.float32))
    free = [Block([v]) for v in nodes]  # dense: no two uncoupled spins, one block per spin
    program = IsingSamplingProgram(ebm, free, clamped_blocks=[])
    schedule = SamplingSchedule(n_warmup=warmup, n_samples=samples, steps_per_sample=1)

    @jax.jit
    def run(key):
        k_init, k_run = jax.random.split(key)
        init = hinton_init(k_init, ebm, free, (chains,))
        keys = jax.random.split(k_run, chains)
        out = jax.vmap(lambda k, *i: sample_states(k, program, schedule, list(i), [], [Block(nodes)]))(keys, *init)
        return 2.0 * out[0].astype(jnp.float32) - 1.0  # [chains, samples, n]

    return run


def dense_problem(a, rng):
    n, C, beta = 64, 256, 1.0
    W = a.sweeps // 11
    S = a.sweeps - W
    J = np.triu(rng.normal(size=(n, n)) / np.sqrt(n), 1)
    J = J + J.T
    h = rng.normal(size=n)
    model = IsingModel(jnp.asarray(h, jnp.float32), jnp.asarray(J, jnp.float32), beta)
    sweeps_f = jax.jit(lambda k: run_chains(k, model.h, model.J, model.beta, None, (n,), num_warmup=W,
                                            num_samples=S, num_chains=C)[0])
    engine = Gibbs(num_warmup=W, num_samples=S, num_chains=C)  # default diagnostics, as users call it
    bare = Gibbs(num_warmup=W, num_samples=S, num_chains=C, diagnostics=False)

    methods = {}  # name -> (callable(r) -> result, updates)
    methods["ours: Gibbs sweeps only (run_chains, jit)"] = (lambda r: sweeps_f(jax.random.PRNGKey(r)), C * n * (W + S))
    methods[ENGINE] = (lambda r: engine.marginals(model, key=jax.random.PRNGKey(r)).mean, C * n * (W + S))
    methods["ours: Gibbs(diagnostics=False) engine"] = (lambda r: bare.marginals(model, key=jax.random.PRNGKey(r)).mean,
                                                        C * n * (W + S))
    compile_s = {}
    for name, (f, _) in methods.items():
        compile_s[name] = _timed(lambda: f(0))[0]
    dw = dwave_runner(h, J, beta, C, W + S)
    methods["dwave-samplers SimulatedAnnealingSampler, fixed beta"] = (dw, C * n * (W + S))
    compile_s["dwave-samplers SimulatedAnnealingSampler, fixed beta"] = 0.0
    if not a.skip_thrml:
        Wt = a.thrml_sweeps // 11
        St = a.thrml_sweeps - Wt
        th = thrml_runner(h, J, beta, C, Wt, St)
        name = "thrml block Gibbs (64 one-spin blocks, vmap chains)"
        compile_s[name] = _timed(lambda: th(jax.random.PRNGKey(0)))[0]
        methods[name] = (lambda r, th=th: th(jax.random.PRNGKey(r)), C * n * (Wt + St))

    best = {k: float("inf") for k in methods}
    best_cpu = dict(best)
    means = {}
    for r in range(a.repeats):  # round-robin: every method sees the same background load
        for name, (f, _) in methods.items():
            (t, c), out = _timed(lambda: f(r + 1), cpu=True)
            best[name] = min(best[name], t)
            best_cpu[name] = min(best_cpu[name], c)
            if out.dtype == np.uint32:  # run_chains' draws, packed 32 to a word
                out = unpack_samples(out, S, (n,), jnp.float32)
            out = np.asarray(out, np.float64)
            means[name] = out.reshape(-1, n).mean(0)

    ours = "ours: Gibbs sweeps only (run_chains, jit)"
    rate = {k: methods[k][1] / best[k] for k in methods}
    print(f"\n## dense: n = {n}, {C} chains (reads), beta = {beta}; ours and dwave {W} + {S} sweeps, "
          f"thrml {a.thrml_sweeps // 11} + {a.thrml_sweeps - a.thrml_sweeps // 11}; best of {a.repeats}\n")
    cpu_rate = {k: methods[k][1] / best_cpu[k] for k in methods}
    print("| method | sweeps | best time (s) | compile (s) | M spin updates/s | ours (sweeps only) / this | "
          "M updates per CPU-second | max abs(Δm) vs ours |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for name in methods:
        sweeps = methods[name][1] // (C * n)
        dm = "(reference)" if name == ours else f"{np.max(np.abs(means[name] - means[ours])):.3f}"
        print(f"| {name} | {sweeps} | {best[name]:.3f} | {compile_s[name]:.1f} | {rate[name] / 1e6:.1f} | "
              f"{rate[ours] / rate[name]:.2f}x | {cpu_rate[name] / 1e6:.1f} | {dm} |")
    dwave = rate["dwave-samplers SimulatedAnnealingSampler, fixed beta"]
    checks = [("ours, sweeps only", rate[ours], TARGET_RATE, "M/s")]
    checks.append(("ours / dwave SA", rate[ours] / dwave, TARGET_DWAVE, "x"))
    checks.append(("engine with default diagnostics / dwave SA", rate[ENGINE] / dwave, TARGET_DWAVE, "x"))
    if not a.skip_thrml:
        checks.append(("ours / thrml", rate[ours] / rate["thrml block Gibbs (64 one-spin blocks, vmap chains)"],
                       TARGET_THRML, "x"))
    print("\nTargets:")
    for label, got, want, unit in checks:
        scale = 1e6 if unit == "M/s" else 1.0
        print(f"  {label:42s} >= {want / scale:6.1f}{unit:3s}  got {got / scale:8.2f}{unit:3s}  "
              f"{'PASS' if got >= want else 'FAIL'}")


def batch_problem(a, rng):
    Q, n, C = 256, 16, 4
    W = a.sweeps // 11
    S = a.sweeps - W
    J = np.triu(rng.normal(size=(n, n)) / np.sqrt(n), 1)
    model = IsingModel(jnp.asarray(rng.normal(size=(Q, n)), jnp.float32), jnp.asarray(J + J.T, jnp.float32), 1.0)
    shape = (Q, n)
    sweeps_f = jax.jit(lambda k: run_chains(k, model.h, model.J, model.beta, None, shape, num_warmup=W,
                                            num_samples=S, num_chains=C)[0])
    engine = Gibbs(num_warmup=W, num_samples=S, num_chains=C)
    fs = {"sweeps only": lambda r: sweeps_f(jax.random.PRNGKey(r)),
          "Gibbs() engine, default diagnostics": lambda r: engine.marginals(model, key=jax.random.PRNGKey(r)).mean}
    for f in fs.values():
        _timed(lambda: f(0))
    best = {k: min(_timed(lambda: f(r + 1))[0] for r in range(a.repeats)) for k, f in fs.items()}
    updates = C * Q * n * (W + S)
    print(f"\n## batch: Q = {Q} models sharing J, n = {n}, {C} chains each, {W} + {S} sweeps (ours only)\n")
    print("| method | best time (s) | M spin updates/s |")
    print("|---|---:|---:|")
    for k, t in best.items():
        print(f"| ours: {k} | {t:.3f} | {updates / t / 1e6:.1f} |")


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--sweeps", type=int, default=1100, help="warmup + samples per chain (warmup = 1/11)")
    p.add_argument("--thrml-sweeps", type=int, default=110, help="thrml's warmup + samples (it is slow)")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--skip-thrml", action="store_true")
    p.add_argument("--skip-batch", action="store_true")
    a = p.parse_args(argv)
    rng = np.random.default_rng(a.seed)
    def _v(m):  # an anchor that is not installed (e.g. thrml with --skip-thrml) is named as such
        try:
            return version(m)
        except Exception:
            return "not installed"

    vs = ", ".join(f"{m} {_v(m)}" for m in ("jax", "dwave-samplers", "thrml"))
    print(f"# Gibbs throughput, float32, {jax.devices()[0].platform} ({platform.processor() or platform.machine()}, "
          f"{os.cpu_count()} CPUs); {vs}; 1-min load average at start {os.getloadavg()[0]:.2f}")
    dense_problem(a, rng)
    if not a.skip_batch:
        batch_problem(a, rng)
    print(f"\n1-min load average at end {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
