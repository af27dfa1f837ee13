"""Ground-state search: our ``SQASampler(mode="anneal")`` against openjij's ``SQASampler``
at equal sweeps, Trotter number and reads (issue 3), plus spin-update throughput.

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

Run:  python benchmarks/sqa_groundstate.py                         (success table, ~10 min on 2 cores)
      python benchmarks/sqa_groundstate.py --instances 4 --num-sweeps 100
      python benchmarks/sqa_groundstate.py --throughput-only        (n=64, P=8, 64 reads)
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
from isingattn.energy import cross_energy, energy  # noqa: E402
from isingattn.inference.exact import spin_table  # noqa: E402
from isingattn.inference.sqa import SQASampler, sqa_sample  # noqa: E402
from isingattn.testing import random_model  # noqa: E402


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


def compare(n=24, models=None, *, instances=20, num_reads=64, num_sweeps=1000, trotter=8, beta=5.0,
            schedule=("linear", 3.0, 0.01), oj_gamma=1.0, seed=0, verbose=False):
    """Per-instance success rates of ours and openjij. Returns a list of dict rows."""
    models = models if models is not None else make_instances(n, instances, seed)
    rows = []
    for i, (h, J) in enumerate(models):
        bqm = IsingModel(h, J).to_bqm()  # bqm.energy(s) == E(s)
        E0 = ground_energy(h, J)
        t = time.perf_counter()
        Eo = run_ours(bqm, num_reads=num_reads, num_sweeps=num_sweeps, trotter=trotter, beta=beta, schedule=schedule,
                      seed=1000 * seed + i)
        t_ours = time.perf_counter() - t
        t = time.perf_counter()
        Ej = run_openjij(bqm, num_reads=num_reads, num_sweeps=num_sweeps, trotter=trotter, beta=beta, gamma=oj_gamma,
                         seed=100000 * (seed + 1) + num_reads * i)
        t_oj = time.perf_counter() - t
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


def throughput(n=64, trotter=8, num_reads=64, num_sweeps=200, repeats=3, seed=0):
    """Spin-update proposals per second (reads · P · n · sweeps / wall) on one dense model."""
    import openjij as oj

    h, J = random_model(np.random.default_rng(seed), n, h_scale=1 / np.sqrt(n))
    bqm = IsingModel(h, J).to_bqm()
    work = num_reads * trotter * n * num_sweeps
    out = []
    h32, J32 = jnp.asarray(h, jnp.float32), jnp.asarray(J, jnp.float32)
    for gm in (True, False):
        f = lambda k: sqa_sample(k, h32, J32, jnp.float32(5.0), num_reads=num_reads, trotter=trotter, num_sweeps=num_sweeps,
                                 gamma_schedule=("linear", 3.0, 0.01), mode="anneal", thermal_sweeps=0, global_moves=gm)
        t = time.perf_counter()
        f(jax.random.PRNGKey(0))[0].block_until_ready()
        compile_s = time.perf_counter() - t
        ts = []
        for r in range(repeats):
            t = time.perf_counter()
            f(jax.random.PRNGKey(r + 1))[0].block_until_ready()
            ts.append(time.perf_counter() - t)
        out.append((f"ours (JAX, float32, global moves {'on' if gm else 'off'})", min(ts), compile_s))
    for sparse in (False, True):
        ts = []
        for r in range(repeats):
            t = time.perf_counter()
            oj.SQASampler().sample(bqm, beta=5.0, gamma=1.0, trotter=trotter, num_sweeps=num_sweeps, num_reads=num_reads,
                                   sparse=sparse)
            ts.append(time.perf_counter() - t)
        out.append((f"openjij SQASampler (C++, sparse={sparse})", min(ts), 0.0))
    print(f"\nthroughput: dense n={n}, trotter={trotter}, {num_reads} reads, {num_sweeps} sweeps "
          f"= {work / 1e6:.1f} M single-spin proposals per run; best of {repeats}, compile excluded")
    print("| sampler | wall (s) | M spin updates / s | compile (s) |")
    print("|---|---:|---:|---:|")
    for name, t, c in out:
        print(f"| {name} | {t:.3f} | {work / t / 1e6:.2f} | {c:.1f} |")


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
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--throughput-only", action="store_true")
    ap.add_argument("--no-throughput", action="store_true")
    args = ap.parse_args(argv)
    from importlib.metadata import version

    print(f"# {platform.machine()}, {os.cpu_count()} CPUs, jax {jax.__version__} ({jax.default_backend()}), "
          f"openjij {version('openjij')}, numpy {np.__version__}")
    if not args.throughput_only:
        sched = (args.schedule[0], float(args.schedule[1]), float(args.schedule[2]))
        print(f"ground states: {args.instances} random dense n={args.n} instances (h, J ~ N(0, 1/n)), "
              f"{args.num_reads} reads, {args.num_sweeps} sweeps, trotter {args.trotter}, beta {args.beta}; "
              f"ours gamma_schedule={sched} with global moves, openjij gamma={args.oj_gamma} (quartic s schedule)")
        rows = compare(args.n, instances=args.instances, num_reads=args.num_reads, num_sweeps=args.num_sweeps,
                       trotter=args.trotter, beta=args.beta, schedule=sched, oj_gamma=args.oj_gamma, seed=args.seed,
                       verbose=True)
        print()
        print_table(rows, args.num_reads)
    if not args.no_throughput:
        throughput()


if __name__ == "__main__":
    main()
