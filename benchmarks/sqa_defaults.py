"""Ground states with the samplers' own defaults: ``SQASampler()``,
an annealer by default (``mode="anneal"``) with its derived β and Γ schedule, the thermal sampler that
was its default before (``mode="thermal"``, β = 1), the same with the old fixed defaults (β = 1, Γ linear
3 → 0.01), dwave-samplers' ``SimulatedAnnealingSampler`` and, if importable, openjij's
``SQASampler``, side by side on the same instances in one run.

Instances: ``isingattn.testing.random_model(default_rng(i), n, h_scale=0.3)`` for
``i = 0..instances-1``: ``h ~ N(0, 0.3²)``, ``J_ij ~ N(0, 1/n)`` (all pairs), as SPIN BQMs;
the ground energy ``E0`` by ``dimod.ExactSolver`` (n ≤ 20). A read is at the ground state
when ``E ≤ E0 + 1e-9 max(1, |E0|)``. Every sampler gets ``--num-reads`` reads per instance
and nothing else: its defaults. Seeds: ours and dwave's take ``seed = i``; openjij restarts
every read of one call from the same integer seed (identical reads), so it is called once
per read with ``seed = 1000 i + r``. The same instances and seeds as
``tests/inference/dimod/test_sqa_sampler_defaults.py``.

Wall time is per sampler over all instances. Ours is timed after one warm-up call that
compiles (reported separately); every instance then shares that compilation.

``--family pm`` takes the signs of the same couplings and no field (a ±1 spin glass):
integer gaps, where the cold end of the rule, not the mixing cap, sets β.

Run:  python benchmarks/sqa_defaults.py          (about half a minute on 2 cores)
      python benchmarks/sqa_defaults.py --family pm
      PYTHONPATH=/path/to/openjij python benchmarks/sqa_defaults.py --oj-threads 1
"""

from __future__ import annotations

import argparse
import os
import platform
import shlex
import sys
import time

import numpy as np


def make_instances(n, count, family="gauss"):
    """SPIN BQMs; ``"pm"``: the signs of the same couplings (±1 spin glass) and no field."""
    from isingattn.model import IsingModel
    from isingattn.instances import random_model

    out = []
    for i in range(count):
        h, J = random_model(np.random.default_rng(i), n, h_scale=0.3)
        if family == "pm":
            h, J = np.zeros(n), np.sign(J)
        out.append(IsingModel(h, J).to_bqm())
    return out


def at_ground(E, e0):
    return np.asarray(E) <= e0 + 1e-9 * max(1.0, abs(e0))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=16)
    ap.add_argument("--instances", type=int, default=10)
    ap.add_argument("--num-reads", type=int, default=32)
    ap.add_argument("--family", choices=("gauss", "pm"), default="gauss",
                    help="gauss: the issue's instances; pm: J_ij = ±1, h = 0 (integer gaps: the cold end binds)")
    ap.add_argument("--oj-threads", default="1", help="OMP_NUM_THREADS for openjij ('' leaves it unset)")
    args = ap.parse_args(argv)
    if args.oj_threads:
        os.environ["OMP_NUM_THREADS"] = args.oj_threads  # read once, when openjij's OpenMP runtime loads

    import dimod
    import jax
    from dwave.samplers import SimulatedAnnealingSampler
    from dwave.samplers.sa.sampler import default_beta_range

    from isingattn.inference.dimod.samplers import SQASampler

    from importlib.metadata import version

    try:
        import openjij
    except ImportError:
        openjij = None
    print("$ python " + " ".join(shlex.quote(a) for a in [sys.argv[0]] + list(sys.argv[1:] if argv is None else argv)))
    print(f"# {platform.machine()}, {os.cpu_count()} CPUs, jax {jax.__version__} ({jax.default_backend()}, "
          f"x64 {jax.config.jax_enable_x64}), dwave-samplers {version('dwave-samplers')}, dimod {dimod.__version__}, "
          f"openjij {version('openjij') if openjij else '(not importable)'}; "
          f"1-min load average {os.getloadavg()[0]:.2f}")
    R = args.num_reads
    bqms = make_instances(args.n, args.instances, args.family)
    E0 = [float(dimod.ExactSolver().sample(b).first.energy) for b in bqms]
    what = "h ~ N(0, 0.3²), J ~ N(0, 1/n)" if args.family == "gauss" else "h = 0, J = ±1"
    print(f"{args.instances} random dense n={args.n} instances ({what}), {R} reads each; "
          "ground energies by dimod.ExactSolver\n")

    ours = SQASampler()  # its defaults: mode="anneal"
    assert ours.sample(bqms[0], num_reads=1, num_sweeps=1, seed=0).info["mode"] == "anneal"
    t = time.perf_counter()
    ours.sample(bqms[0], num_reads=R, seed=10**6)  # compiles the derived-default run once
    compile_s = time.perf_counter() - t
    infos = []

    def run_ours(i, b):
        ss = ours.sample(b, num_reads=R, seed=i)
        infos.append(ss.info)
        return ss.record.energy

    old = dict(beta=1.0, gamma_schedule=("linear", 3.0, 0.01))
    ours.sample(bqms[0], num_reads=R, seed=10**6, **old)  # its own compilation (a static schedule)
    ours.sample(bqms[0], num_reads=R, seed=10**6, mode="thermal")  # the thermal run's own compilation
    runs = {
        "ours, SQASampler() defaults (anneal, derived β, Γ)": run_ours,
        "ours, mode='thermal' (the earlier default; β=1)":
            lambda i, b: ours.sample(b, num_reads=R, seed=i, mode="thermal").record.energy,
        "ours, old defaults (β=1, Γ linear 3→0.01)": lambda i, b: ours.sample(b, num_reads=R, seed=i, **old).record.energy,
        "dwave-samplers SimulatedAnnealingSampler, defaults":
            lambda i, b: SimulatedAnnealingSampler().sample(b, num_reads=R, seed=i).record.energy,
    }
    if openjij is not None:
        def run_oj(i, b):
            s = openjij.SQASampler()
            return np.array([s.sample(b, num_reads=1, seed=1000 * i + r).record.energy[0] for r in range(R)])

        runs["openjij SQASampler, defaults (β=5, Γ=1, trotter 4)"] = run_oj
    rows, frac = [], {}
    for name, f in runs.items():
        t = time.perf_counter()
        Es = [f(i, b) for i, b in enumerate(bqms)]
        wall = time.perf_counter() - t
        hits = [at_ground(E, e0) for E, e0 in zip(Es, E0)]
        frac[name] = np.array([h.mean() for h in hits])
        gaps = np.array([E.min() - e0 for E, e0 in zip(Es, E0)])
        rows.append((name, sum(h.any() for h in hits), frac[name], gaps, np.mean([E.mean() - e0 for E, e0 in zip(Es, E0)]), wall))
    if openjij is None:
        print("openjij: not importable, skipped (install openjij, or put it on PYTHONPATH, to add its row)\n")

    K = args.instances
    print(f"| sampler | instances with a read at E0 | reads at E0 (mean ± SE) | worst best-read gap | mean ⟨E⟩ − E0 | wall (s) |")
    print("|---|---:|---:|---:|---:|---:|")
    for name, hit, fr, gaps, mgap, wall in rows:
        se = np.sqrt(np.sum(fr * (1 - fr) / R)) / K
        print(f"| {name} | {hit}/{K} | {fr.mean():.3f} ± {se:.3f} | {gaps.max():.4f} | {mgap:.4f} | {wall:.2f} |")
    print(f"\nours: one compilation for every instance, {compile_s:.1f} s (the warm-up call, not in the wall time)")

    betas = np.array([x["beta"] for x in infos])
    gmax = np.array([x["gamma_schedule"][1] for x in infos])
    gmin = np.array([x["gamma_schedule"][2] for x in infos])
    sa = np.array([default_beta_range(b) for b in bqms])
    print(f"derived β: {betas.min():.3g} … {betas.max():.3g}; Γ geometric from {gmax.min():.3g} … {gmax.max():.3g} "
          f"to {gmin.min():.3g} … {gmin.max():.3g} (P = 8); dwave's beta_range: hot {sa[:, 0].min():.3g} … "
          f"{sa[:, 0].max():.3g}, cold {sa[:, 1].min():.3g} … {sa[:, 1].max():.3g}\n")

    names = list(frac)
    print("| instance | E0 | derived β | " + " | ".join(f"P(E0): {n.split(',')[0]}{' (old)' if 'old' in n else ''}"
                                                      for n in names) + " |")
    print("|---:|---:|---:|" + "---:|" * len(names))
    for i in range(K):
        print(f"| {i} | {E0[i]:.4f} | {betas[i]:.3g} | " + " | ".join(f"{frac[n][i]:.3f}" for n in names) + " |")
    print(f"\n1-min load average at end {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
