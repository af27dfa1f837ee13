"""Ground-state search: our ``SQASampler(mode="anneal")`` against openjij's ``SQASampler``
at equal sweeps, Trotter number and reads, plus spin-update throughput.

Instances: random dense SK-like models from ``isingattn.testing.random_model``:
``h_j ~ N(0, 1/n)``, ``J_jk ~ N(0, 1/n)`` (all pairs), n = 24 by default. Their ground
energy comes from exact enumeration of all ``2^n`` energies, split in two halves A, B
(meet in the middle, with the project's ``energy``/``cross_energy`` and Exact's
``spin_table``): ``E(a, b) = E_A(a) + E_B(b) + E_AB(a, b)`` is one ``[2^(n/2), 2^(n/2)]``
table, float64. A read succeeds when its energy is within ``1e-9 · max(1, |E0|)`` of E0.

How the two samplers are parameterized (openjij 0.12, ``openjij/sampler/sqa_sampler.py``
and ``include/openjij/updater/single_spin_flip.hpp``):

* openjij: ``H(s) = s H_p + Γ (1 - s) Σ σ^x``; a sweep at ``s`` uses the classical weight
  ``(s β / P) E`` and the ring coupling ``K = -½ ln tanh(β Γ (1-s) / P)``, Metropolis per
  spin, even then odd Trotter slices; ``s`` follows the quartic schedule
  ``s⁴ (35 - 84 s + 70 s² - 20 s³)`` from 0 to 1 over ``num_sweeps`` (Morita–Nishimori);
  the read returns its lowest-energy slice. There is no global move.
* ours: fixed β; ``Γ`` lowered from Γ_max to Γ_min (``--schedule``), ``(β/P) E`` and
  ``K = -½ ln tanh(βΓ/P)``; single-spin moves (all slices of a colour at once) plus
  global moves; the read returns its lowest-energy replica.
* Shared: ``beta`` (openjij's final β = our β), ``trotter``, ``num_sweeps``,
  ``num_reads``. openjij's ``gamma`` is its own default (1.0) unless ``--oj-gamma``.

Seeds: openjij reseeds its engine and its initial state with the *same* integer seed for
every read, so ``sample(..., num_reads=R, seed=k)`` returns R identical reads. To get
distinct but reproducible reads we call it once per read with ``seed = base + r``
(``sample(..., num_reads=1)``). Ours: ``seed`` gives the whole sample set, reads distinct.

Large dense models (``--large``): n = 64 and 256, where ground states cannot be
enumerated. The reference energy of an instance is the lowest energy found by ANY method:
a long dwave-samplers ``SimulatedAnnealingSampler`` run (default geometric β schedule,
``--ref-reads`` reads of ``--ref-sweeps`` sweeps) and every read of ours and openjij. A read
"finds" it when ``E ≤ E_ref + rel_tol·|E_ref|`` (``--rel-tol``, default 1e-6: the same
state, as couplings are continuous); the table also gives the mean residual energy
``⟨E⟩ - E_ref`` per instance, and how many of the reference run's reads reached E_ref
(how sure the reference is).

Threads: openjij's C++ core is built with OpenMP (libiomp5); ``--oj-threads`` (default 1)
sets ``OMP_NUM_THREADS`` before openjij is imported, so it runs single-threaded unless
asked otherwise. Ours uses XLA's CPU thread pool (2 threads here).

Run:  python benchmarks/sqa_groundstate.py                         (success table, ~10 min on 2 cores)
      python benchmarks/sqa_groundstate.py --instances 4 --num-sweeps 100
      python benchmarks/sqa_groundstate.py --throughput-only        (n = 64 and 256, P=8, 64 reads)
      python benchmarks/sqa_groundstate.py --large --no-throughput  (n = 64, 256 vs a long-SA reference)
"""

from __future__ import annotations

import argparse
import os
import platform
import time

import jax
import jax.numpy as jnp
import numpy as np

jax.config.update("jax_enable_x64", True)  # float64 ground energies; samplers get float32 below

from isingattn import IsingModel  # noqa: E402
from isingattn.energy import cross_energy, energy, spin_table  # noqa: E402
from isingattn.inference.dimod import SQASampler  # noqa: E402
from isingattn.inference.mcmc.sqa import sqa_sample  # noqa: E402
from isingattn.instances import random_model  # noqa: E402


def ground_energy(h, J):
    """Exact ground energy of one model (float64) by meet-in-the-middle enumeration."""
    h, J = jnp.asarray(h, jnp.float64), jnp.asarray(J, jnp.float64)
    n = h.shape[-1]
    a = n // 2
    SA, SB = spin_table(a, jnp.float64), spin_table(n - a, jnp.float64)
    EA = energy(h[:a], J[:a, :a], SA)  # [2^a]
    EB = energy(h[a:], J[a:, a:], SB)  # [2^b]

    @jax.jit
    def chunk_min(SAc, EAc):
        return jnp.min(EAc[:, None] + EB[None, :] + cross_energy(J[:a, a:], SAc, SB))

    c = max(1, min(SA.shape[0], 2**22 // SB.shape[0]))  # rows of A per chunk: ≤ 4M energies at once
    return float(min(chunk_min(SA[i : i + c], EA[i : i + c]) for i in range(0, SA.shape[0], c)))


def make_instances(n, count, seed):
    rng = np.random.default_rng(seed)
    return [random_model(rng, n, h_scale=1 / np.sqrt(n), J_scale=1 / np.sqrt(n)) for _ in range(count)]


def _success(E, E0):
    return float(np.mean(np.asarray(E) <= E0 + 1e-9 * max(1.0, abs(E0))))


def run_ours(bqm, *, num_reads, num_sweeps, trotter, beta, schedule, seed, global_moves=True):
    ss = SQASampler(mode="anneal").sample(bqm, num_reads=num_reads, num_sweeps=num_sweeps, trotter=trotter, beta=beta,
                                         gamma_schedule=schedule, seed=seed, global_moves=global_moves)
    return ss.record.energy


def run_openjij(bqm, *, num_reads, num_sweeps, trotter, beta, gamma, seed):
    import openjij as oj

    sampler = oj.SQASampler()
    E = []
    for r in range(num_reads):  # one call per read: openjij repeats identical reads for an int seed
        res = sampler.sample(bqm, beta=beta, gamma=gamma, trotter=trotter, num_sweeps=num_sweeps, num_reads=1,
                             seed=seed + r, sparse=False)
        E.append(res.record.energy[0])
    return np.array(E)


def run_both(bqm, i, *, num_reads, num_sweeps, trotter, beta, schedule, oj_gamma, seed):
    """Instance ``i`` by ours and by openjij (each with its own seed): energies and wall times."""
    t = time.perf_counter()
    Eo = run_ours(bqm, num_reads=num_reads, num_sweeps=num_sweeps, trotter=trotter, beta=beta, schedule=schedule,
                  seed=1000 * seed + i)
    t_ours = time.perf_counter() - t
    t = time.perf_counter()
    Ej = run_openjij(bqm, num_reads=num_reads, num_sweeps=num_sweeps, trotter=trotter, beta=beta, gamma=oj_gamma,
                     seed=100000 * (seed + 1) + num_reads * i)
    return Eo, t_ours, Ej, time.perf_counter() - t


def compare(n=24, models=None, *, instances=20, num_reads=64, num_sweeps=1000, trotter=8, beta=5.0,
            schedule=("linear", 3.0, 0.01), oj_gamma=1.0, seed=0, verbose=False):
    """Per-instance success rates of ours and openjij. Returns a list of dict rows."""
    models = models if models is not None else make_instances(n, instances, seed)
    rows = []
    for i, (h, J) in enumerate(models):
        bqm = IsingModel(h, J).to_bqm()  # bqm.energy(s) == E(s)
        E0 = ground_energy(h, J)
        Eo, t_ours, Ej, t_oj = run_both(bqm, i, num_reads=num_reads, num_sweeps=num_sweeps, trotter=trotter, beta=beta,
                                        schedule=schedule, oj_gamma=oj_gamma, seed=seed)
        rows.append(dict(instance=i, E0=E0, ours=_success(Eo, E0), openjij=_success(Ej, E0), t_ours=t_ours, t_oj=t_oj,
                         ours_mean_gap=float(np.mean(Eo) - E0), oj_mean_gap=float(np.mean(Ej) - E0)))
        if verbose:
            r = rows[-1]
            print(f"  instance {i:2d}  E0 {E0:9.4f}  ours {r['ours']:.3f}  openjij {r['openjij']:.3f}  "
                  f"({t_ours:.1f}s / {t_oj:.1f}s)", flush=True)
    return rows


def print_table(rows, num_reads):
    print("| instance | E0 | ours P(ground) | openjij P(ground) | ours ⟨E⟩-E0 | openjij ⟨E⟩-E0 |")
    print("|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        print(f"| {r['instance']} | {r['E0']:.4f} | {r['ours']:.3f} | {r['openjij']:.3f} | {r['ours_mean_gap']:.4f} | {r['oj_mean_gap']:.4f} |")
    o = np.array([r["ours"] for r in rows])
    j = np.array([r["openjij"] for r in rows])
    se = lambda p: np.sqrt(np.sum(p * (1 - p) / num_reads)) / len(p)
    print(f"| **mean** | | **{o.mean():.3f}** ± {se(o):.3f} | **{j.mean():.3f}** ± {se(j):.3f} | "
          f"{np.mean([r['ours_mean_gap'] for r in rows]):.4f} | {np.mean([r['oj_mean_gap'] for r in rows]):.4f} |")
    ratio = o.mean() / j.mean() if j.mean() > 0 else float("inf")
    print(f"\nratio ours/openjij of mean success: {ratio:.3f};  instances where ours ≥ openjij: {int(np.sum(o >= j))}/{len(rows)}")
    print(f"wall time: ours {sum(r['t_ours'] for r in rows):.1f}s (incl. one compile), openjij {sum(r['t_oj'] for r in rows):.1f}s")


def throughput(ns=(64, 256), trotter=8, num_reads=64, num_sweeps=(200, 50), repeats=3, seed=0):
    """Spin-update proposals per second (reads · P · n · sweeps / wall) on one dense model per
    n; ours and openjij timed round-robin (best of ``repeats``), compile excluded."""
    import openjij as oj

    print(f"\nthroughput: dense models, trotter={trotter}, {num_reads} reads; best of {repeats} round-robin, "
          f"compile excluded; openjij OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS', '(unset)')}")
    print("| n | sweeps | sampler | wall (s) | M spin updates / s | ours / openjij | compile (s) |")
    print("|---:|---:|---|---:|---:|---:|---:|")
    for n, sweeps in zip(ns, num_sweeps):
        h, J = random_model(np.random.default_rng(seed), n, h_scale=1 / np.sqrt(n))
        bqm = IsingModel(h, J).to_bqm()
        work = num_reads * trotter * n * sweeps
        h32, J32 = jnp.asarray(h, jnp.float32), jnp.asarray(J, jnp.float32)
        runs, compile_s = {}, {}
        for gm in (True, False):
            f = lambda k, gm=gm: sqa_sample(k, h32, J32, jnp.float32(5.0), num_reads=num_reads, trotter=trotter,
                                            num_sweeps=sweeps, gamma_schedule=("linear", 3.0, 0.01), mode="anneal",
                                            thermal_sweeps=0, global_moves=gm)[0]
            name = f"ours (JAX, float32, global moves {'on' if gm else 'off'})"
            t = time.perf_counter()
            f(jax.random.PRNGKey(0)).block_until_ready()
            compile_s[name] = time.perf_counter() - t
            runs[name] = lambda r, f=f: f(jax.random.PRNGKey(r + 1)).block_until_ready()
        oj_name = f"openjij SQASampler (C++, dense, {os.environ.get('OMP_NUM_THREADS', '?')} thread(s))"
        runs[oj_name] = lambda r: oj.SQASampler().sample(bqm, beta=5.0, gamma=1.0, trotter=trotter, num_sweeps=sweeps,
                                                         num_reads=num_reads, sparse=False)
        compile_s[oj_name] = 0.0
        best = {k: float("inf") for k in runs}
        for r in range(repeats):
            for k, f in runs.items():
                t = time.perf_counter()
                f(r)
                best[k] = min(best[k], time.perf_counter() - t)
        for k, t in best.items():
            print(f"| {n} | {sweeps} | {k} | {t:.3f} | {work / t / 1e6:.2f} | {best[oj_name] / t:.2f}x | {compile_s[k]:.1f} |")


# ---- large dense models: success against the best energy found by any method ----------------


def reference_energy(bqm, *, reads, sweeps, seed):
    """Lowest energy of a long dwave-samplers SA run and how many reads reached it."""
    from dwave.samplers import SimulatedAnnealingSampler

    E = SimulatedAnnealingSampler().sample(bqm, num_reads=reads, num_sweeps=sweeps, seed=seed).record.energy
    return float(E.min()), E


def compare_large(ns=(64, 256), instances=(4, 2), num_sweeps=(1000, 1000), *, num_reads=64, trotter=8, beta=5.0,
                  schedule=("linear", 3.0, 0.01), oj_gamma=1.0, ref_reads=(256, 64), ref_sweeps=(10000, 20000),
                  rel_tol=1e-6, seed=0):
    print(f"\nlarge dense models (h, J ~ N(0, 1/n)): {num_reads} reads, trotter {trotter}, beta {beta}; ours "
          f"gamma_schedule={schedule} with global moves, openjij gamma={oj_gamma}; reference = lowest energy of "
          f"dwave SA (geometric schedule) and of every read of both; success: E <= E_ref + {rel_tol:g}|E_ref|")
    print("| n | sweeps | instance | E_ref | SA reads at E_ref | ours P(E_ref) | openjij P(E_ref) | "
          "ours ⟨E⟩-E_ref | openjij ⟨E⟩-E_ref | ours (s) | openjij (s) |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    summary = []
    for n, count, sweeps, rr, rs in zip(ns, instances, num_sweeps, ref_reads, ref_sweeps):
        rows = []
        for i, (h, J) in enumerate(make_instances(n, count, seed + n)):
            bqm = IsingModel(h, J).to_bqm()
            E_sa, E_sa_all = reference_energy(bqm, reads=rr, sweeps=rs, seed=1000 + i)
            Eo, t_o, Ej, t_j = run_both(bqm, i, num_reads=num_reads, num_sweeps=sweeps, trotter=trotter, beta=beta,
                                        schedule=schedule, oj_gamma=oj_gamma, seed=seed)
            E_ref = min(E_sa, float(Eo.min()), float(Ej.min()))
            tol = rel_tol * abs(E_ref)
            hit = lambda E: float(np.mean(np.asarray(E) <= E_ref + tol))
            row = dict(ours=hit(Eo), oj=hit(Ej), gap_o=float(np.mean(Eo) - E_ref), gap_j=float(np.mean(Ej) - E_ref))
            rows.append(row)
            src = "" if E_ref >= E_sa - tol else " (below SA)"
            print(f"| {n} | {sweeps} | {i} | {E_ref:.4f}{src} | {int(np.sum(E_sa_all <= E_ref + tol))}/{rr} | "
                  f"{row['ours']:.3f} | {row['oj']:.3f} | {row['gap_o']:.4f} | {row['gap_j']:.4f} | {t_o:.1f} | {t_j:.1f} |",
                  flush=True)
        m = {k: np.mean([r[k] for r in rows]) for k in rows[0]}
        print(f"| {n} | {sweeps} | **mean** | | | **{m['ours']:.3f}** | **{m['oj']:.3f}** | **{m['gap_o']:.4f}** | "
              f"**{m['gap_j']:.4f}** | | |")
        summary.append((n, m))
    print()
    for n, m in summary:
        ok = m["ours"] >= m["oj"] and m["gap_o"] <= m["gap_j"]
        print(f"n={n}: success ours {m['ours']:.3f} vs openjij {m['oj']:.3f}; mean residual ours {m['gap_o']:.4f} vs "
              f"openjij {m['gap_j']:.4f}: {'ours >= openjij' if ok else 'ours < openjij on at least one measure'}")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=24)
    ap.add_argument("--instances", type=int, default=20)
    ap.add_argument("--num-reads", type=int, default=64)
    ap.add_argument("--num-sweeps", type=int, default=1000)
    ap.add_argument("--trotter", type=int, default=8)
    ap.add_argument("--beta", type=float, default=5.0)
    ap.add_argument("--schedule", nargs=3, default=["linear", "3.0", "0.01"], metavar=("KIND", "GMAX", "GMIN"))
    ap.add_argument("--oj-gamma", type=float, default=1.0)
    ap.add_argument("--oj-threads", default="1", help="OMP_NUM_THREADS for openjij ('' leaves it unset)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--throughput-only", action="store_true")
    ap.add_argument("--no-throughput", action="store_true")
    ap.add_argument("--large", action="store_true", help="n = 64 and 256 against a long-SA reference energy")
    ap.add_argument("--large-instances", type=int, nargs=2, default=[4, 2], metavar=("N64", "N256"))
    ap.add_argument("--large-sweeps", type=int, nargs=2, default=[1000, 1000], metavar=("N64", "N256"))
    ap.add_argument("--ref-sweeps", type=int, nargs=2, default=[10000, 20000], metavar=("N64", "N256"))
    ap.add_argument("--ref-reads", type=int, nargs=2, default=[256, 64], metavar=("N64", "N256"))
    ap.add_argument("--rel-tol", type=float, default=1e-6)
    args = ap.parse_args(argv)
    if args.oj_threads:
        os.environ["OMP_NUM_THREADS"] = args.oj_threads  # read once by libiomp5 when openjij is imported
    from importlib.metadata import version

    print(f"# {platform.machine()}, {os.cpu_count()} CPUs, jax {jax.__version__} ({jax.default_backend()}), "
          f"openjij {version('openjij')}, dwave-samplers {version('dwave-samplers')}, numpy {np.__version__}; "
          f"openjij OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS', '(unset)')}; "
          f"1-min load average {os.getloadavg()[0]:.2f}")
    sched = (args.schedule[0], float(args.schedule[1]), float(args.schedule[2]))
    if not args.throughput_only and not args.large:
        print(f"ground states: {args.instances} random dense n={args.n} instances (h, J ~ N(0, 1/n)), "
              f"{args.num_reads} reads, {args.num_sweeps} sweeps, trotter {args.trotter}, beta {args.beta}; "
              f"ours gamma_schedule={sched} with global moves, openjij gamma={args.oj_gamma} (quartic s schedule)")
        rows = compare(args.n, instances=args.instances, num_reads=args.num_reads, num_sweeps=args.num_sweeps,
                       trotter=args.trotter, beta=args.beta, schedule=sched, oj_gamma=args.oj_gamma, seed=args.seed,
                       verbose=True)
        print()
        print_table(rows, args.num_reads)
    if args.large and not args.throughput_only:
        compare_large(instances=tuple(args.large_instances), num_sweeps=tuple(args.large_sweeps),
                      num_reads=args.num_reads, trotter=args.trotter, beta=args.beta, schedule=sched,
                      oj_gamma=args.oj_gamma, ref_reads=tuple(args.ref_reads), ref_sweeps=tuple(args.ref_sweeps),
                      rel_tol=args.rel_tol, seed=args.seed)
    if not args.no_throughput:
        throughput()
    print(f"\n1-min load average at end {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
