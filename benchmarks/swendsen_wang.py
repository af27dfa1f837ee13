"""Swendsen–Wang at the critical point: time to a given accuracy, not only moves per second.

Problem: the ferromagnetic ``L × L`` torus (``J = 1``, no field) at ``K_c = ½ ln(1 + √2)``,
float32, ``L`` = 64 and 256 (``--sizes``). Three samplers, side by side in one run:

* ``swendsen-wang``: this package's engine loop (:func:`isingattn.inference.mcmc.swendsen_wang.run_chains`,
  the jitted loop of ``SwendsenWang``: moves, packed draws and the energy of every draw),
  ``--chains`` chains vectorized;
* ``gibbs``: this package's Gibbs engine loop (:func:`isingattn.inference.mcmc.gibbs.run_chains`
  with the lattice's two colour classes, the fastest schedule on a lattice) for the rate;
  its energy trace comes from the same kernel (``sweep_with_thresholds``) in a loop that
  records ``E`` after every sweep;
* ``openjij``: openjij's C++ Swendsen–Wang (``Algorithm_SwendsenWang_run`` on a
  ``CSRSparse`` graph: what ``SASampler(updater="swendsen wang")`` runs) at fixed β, one
  chain (openjij runs reads one after another), timed without a callback; its energy
  trace from a second run with a per-sweep callback.

Gibbs and openjij start from equilibrium states that Swendsen–Wang produced (a Gibbs chain
started at random would need ~τ_exp ∝ L^2.17 sweeps to equilibrate; at 256² that is
longer than this benchmark).

Columns: chain-sweeps per second (a Swendsen–Wang move counts as one sweep), the
integrated autocorrelation time of the energy ``τ_int(E) = (chains · draws) / ESS`` with
ArviZ's ESS of the mean, and ``ESS(E)/s`` = chain-sweeps per second / ``τ_int``. Each rate
is the best of ``--repeats`` timed runs after compilation, round-robin over the samplers so
that all see the same background load. ``⟨E⟩/N`` is checked against Kaufman's exact value
(``isingattn.onsager.torus_energy``) so that a fast wrong sampler cannot win.

Targets: ``τ_int(E)`` of Swendsen–Wang ≥ 10× smaller than Gibbs'; its sweeps per second
≥ 2× openjij's.

Run:  python benchmarks/swendsen_wang.py                 (about 5 minutes on a 2-core CPU)
      python benchmarks/swendsen_wang.py --sizes 64 --repeats 1
"""

from __future__ import annotations

import argparse
import os
import platform
import time

import arviz as az
import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from isingattn.energy import energy
from isingattn.graphs import lattice
from isingattn.inference.mcmc import gibbs as gibbs_mod
from isingattn.inference.mcmc import swendsen_wang as sw_mod
from isingattn.inference.mcmc.coloring import color_classes
from isingattn.inference.mcmc.gibbs_kernel import GibbsState, sweep_thresholds, sweep_with_thresholds
from isingattn.onsager import K_C, torus_energy
from isingattn.sparse import SparseCouplings

TARGET_TAU = 10.0  # Gibbs' τ_int(E) / Swendsen–Wang's
TARGET_OPENJIJ = 2.0  # Swendsen–Wang sweeps per second / openjij's


def _load() -> str:
    try:
        return " ".join(f"{x:.2f}" for x in os.getloadavg())
    except OSError:
        return "?"


def _tau(trace) -> tuple[float, float]:
    """(τ_int, ESS) of an energy trace ``[chains, draws]`` (ArviZ's ESS of the mean)."""
    trace = np.asarray(trace, np.float64)
    ess = float(az.ess(trace, method="mean"))
    return trace.size / ess, ess


def _best(fn, repeats):
    return min(_timed(fn) for _ in range(repeats))


def _timed(fn) -> float:
    t = time.perf_counter()
    jax.block_until_ready(fn())
    return time.perf_counter() - t


def bench(L: int, args) -> dict:
    n = L * L
    g = lattice((L, L), periodic=True)
    h = jnp.zeros(n, jnp.float32)
    J = SparseCouplings(g, jnp.ones(g.E, jnp.float32))
    beta = jnp.float32(K_C)
    C = args.chains
    exact = float(torus_energy(L, L, K_C))
    rows = {}

    # ---- Swendsen–Wang: the engine loop ------------------------------------------------------
    D = args.sw_draws[L]

    @jax.jit
    def sw_run(key):
        return sw_mod.run_chains(key, h, J, beta, None, (n,), num_warmup=args.warmup, num_samples=D, num_chains=C)

    words, E_sw, _, rounds = sw_run(jax.random.key(0))  # compile, and equilibrium states for the others
    last = np.asarray(jax.block_until_ready(words))[(D - 1) // 32, :, :] >> np.uint32((D - 1) % 32) & 1
    s_eq = jnp.asarray(2.0 * last - 1.0, jnp.float32)  # [C, n]: the last draw of every chain

    # ---- Gibbs: the engine loop for the rate, the same kernel with an energy trace ------------
    classes = color_classes(J)
    G, Gc = args.gibbs_sweeps[L], args.gibbs_chains[L]

    @jax.jit
    def gibbs_run(key):  # the rate: the engine's loop, args.gibbs_rate_sweeps sweeps of C chains
        return gibbs_mod.run_chains(key, h, J, beta, None, (n,), num_warmup=0, num_samples=args.gibbs_rate_sweeps,
                                    num_chains=C, classes=classes)

    Jt = J.with_table()

    @jax.jit
    def gibbs_trace(key, s):  # τ: G sweeps of Gc chains, the energy after every sweep
        def step(s, k):
            t = sweep_thresholds(k, s.shape, s.dtype, beta)
            s = sweep_with_thresholds(t, GibbsState(s), h, Jt, classes)[0].spins
            return s, energy(h, Jt, s)

        return lax.scan(step, s, jax.random.split(key, G))[1]  # [G, Gc]

    jax.block_until_ready(gibbs_run(jax.random.key(1)))

    # ---- openjij: C++ Swendsen–Wang at fixed β ------------------------------------------------
    oj = None
    if not args.skip_openjij:
        import openjij.cxxjij as cj
        import openjij.model.model as ojm

        bqm = ojm.BinaryQuadraticModel({}, {(int(i), int(j)): -1.0 for i, j in g.edges}, 0.0, "SPIN", sparse=True)
        graph, _ = bqm.get_cxxjij_ising_graph()
        start = [int(x) for x in np.asarray(s_eq[0], np.int64)]

        def oj_run(seed, sweeps, callback=None):
            system = cj.system.make_classical_ising(start, graph)
            if callback is None:
                cj.algorithm.Algorithm_SwendsenWang_run(system, seed, [(float(K_C), sweeps)])
            else:
                cj.algorithm.Algorithm_SwendsenWang_run(system, seed, [(float(K_C), sweeps)], callback)
            return system

        oj = oj_run

    times = {"sw": [], "gibbs": [], "oj": []}
    for r in range(args.repeats):  # round-robin: every sampler sees the same background load
        times["sw"].append(_timed(lambda: sw_run(jax.random.key(10 + r))))
        times["gibbs"].append(_timed(lambda: gibbs_run(jax.random.key(20 + r))))
        if oj is not None:
            t = time.perf_counter()
            oj(30 + r, args.openjij_sweeps[L])
            times["oj"].append(time.perf_counter() - t)

    # traces and τ
    tau_sw, ess_sw = _tau(np.asarray(E_sw).T)  # [C, D]
    rows["swendsen-wang"] = dict(rate=C * (args.warmup + D) / min(times["sw"]), tau=tau_sw,
                                 mean=float(np.mean(E_sw)) / n, draws=f"{C}x{D}", extra=f"labelling rounds ≤ {int(rounds)}")
    E_g = np.asarray(gibbs_trace(jax.random.key(2), s_eq[:Gc])).T  # [Gc, G]
    tau_g, _ = _tau(E_g)
    short = " (trace < 50 τ: τ is a lower bound)" if G < 50 * tau_g else ""
    rows["gibbs"] = dict(rate=C * args.gibbs_rate_sweeps / min(times["gibbs"]), tau=tau_g, mean=float(E_g.mean()) / n,
                         draws=f"{Gc}x{G}", extra=f"colour classes, from SW's equilibrium states{short}")
    if oj is not None:
        edges = g.edges
        trace = []
        oj(40, args.openjij_trace[L], lambda system, b: trace.append(-float(np.sum((lambda s: s[edges[:, 0]] * s[edges[:, 1]])(np.asarray(system.spin)[:n])))))
        tau_o, _ = _tau(np.asarray(trace)[None])
        rows["openjij"] = dict(rate=args.openjij_sweeps[L] / min(times["oj"]), tau=tau_o, mean=float(np.mean(trace)) / n,
                               draws=f"1x{len(trace)}", extra="one chain, from an SW equilibrium state")
    for r in rows.values():
        r["ess_rate"] = r["rate"] / r["tau"]
    return dict(L=L, exact=exact, rows=rows)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--sizes", type=int, nargs="+", default=[64, 256])
    p.add_argument("--chains", type=int, default=16, help="chains vectorized in one run (both JAX samplers)")
    p.add_argument("--warmup", type=int, default=50, help="Swendsen–Wang warmup moves (from random spins)")
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("--skip-openjij", action="store_true")
    args = p.parse_args(argv)
    args.sw_draws = {64: 1000, 256: 200}
    args.gibbs_sweeps = {64: 10000, 256: 5000}  # the energy trace
    args.gibbs_chains = {64: 8, 256: 4}
    args.gibbs_rate_sweeps = 100
    args.openjij_sweeps = {64: 1000, 256: 100}  # timed
    args.openjij_trace = {64: 2000, 256: 600}
    for L in args.sizes:
        for d in (args.sw_draws, args.gibbs_sweeps, args.gibbs_chains, args.openjij_sweeps, args.openjij_trace):
            d.setdefault(L, d[min(d, key=lambda k: abs(k - L))])

    print(f"Swendsen–Wang at K_c on L×L tori; float32; {platform.processor() or platform.machine()}, "
          f"{os.cpu_count()} CPUs, jax {jax.__version__} on {jax.devices()[0].platform}; load average at start {_load()}")
    ok = True
    for L in args.sizes:
        out = bench(L, args)
        rows = out["rows"]
        print(f"\nL = {L} (n = {L * L}), exact ⟨E⟩/N = {out['exact']:.5f} (Kaufman)")
        print(f"{'sampler':<15}{'draws':>11}{'sweeps/s':>12}{'τ_int(E)':>11}{'ESS(E)/s':>11}{'⟨E⟩/N':>10}  notes")
        for name, r in rows.items():
            print(f"{name:<15}{r['draws']:>11}{r['rate']:>12.1f}{r['tau']:>11.2f}{r['ess_rate']:>11.2f}"
                  f"{r['mean']:>10.5f}  {r['extra']}")
        sw, gb = rows["swendsen-wang"], rows["gibbs"]
        tau_ratio = gb["tau"] / sw["tau"]
        print(f"τ_int(E): Gibbs / SW = {tau_ratio:.1f}x (target ≥ {TARGET_TAU:.0f}x)"
              f"{'' if tau_ratio >= TARGET_TAU else '  MISSED'}; ESS(E)/s: SW / Gibbs = {sw['ess_rate'] / gb['ess_rate']:.1f}x")
        ok &= tau_ratio >= TARGET_TAU
        if "openjij" in rows:
            oj = rows["openjij"]
            ratio = sw["rate"] / oj["rate"]
            print(f"sweeps/s: SW / openjij = {ratio:.2f}x (target ≥ {TARGET_OPENJIJ:.0f}x)"
                  f"{'' if ratio >= TARGET_OPENJIJ else '  MISSED'}; ESS(E)/s: SW / openjij = "
                  f"{sw['ess_rate'] / oj['ess_rate']:.2f}x")
            ok &= ratio >= TARGET_OPENJIJ
    print(f"\nload average at end {_load()}")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
