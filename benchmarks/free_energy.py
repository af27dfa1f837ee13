"""log Z by population annealing against AIS (and PT) at equal sweep budgets, against exact
references, in one run; with ``--seeds`` over many keys, the calibration of the reported SE.

Cases (``--cases``):

* ``torus:L:K``: the periodic L×L ferromagnet at coupling K, against Kaufman's exact log Z
  (:func:`isingattn.onsager.torus_log_z`, float64);
* ``strip:ROWS:COLS:BETA[:HSCALE]``: an open ±J strip with fields ``h ~ N(0, HSCALE²)`` (0.3;
  0 for none), the model of tests/inference/mcmc/test_pt.py, against its exact transfer matrix
  (log Z and the marginals, float64).

Estimators (``--estimators``):

* ``pa``: ``get("pa")`` with its defaults (or ``--replicas``/``--populations``/``--moves-per-temp``/
  ``--max-moves-per-temp``/``--decorrelation``); its budget in replica-sweeps is ``info["sweeps"]``
  (every population's moves, the pilot included);
* ``ais``: ``AIS`` with ``--ais-chains`` chains and ``num_temps`` set so that
  ``chains · num_temps`` is PA's budget of the same key (one sweep per temperature),
  Swendsen–Wang moves on the tori, Gibbs on the strips (as PA's ``moves="auto"``);
* ``pt``: ``get("pt")`` with its defaults (its own budget; stepping-stone log Z).

Per run: the error against the exact value, the reported SE, ``z = error / SE``, wall and CPU
time (user + system of this process, compile included). The summary gives per case and
estimator the mean SE, RMS error, the share of ``|z| ≤ 2`` and mean ``z²`` (the calibration
targets: ≥ 0.9 and ≤ 1.5), and the ratio of PA's mean SE to this estimator's (the target
against AIS: ≤ 1/3).

* ``blackjax``: blackjax's ``adaptive_tempered_smc`` (the ``bench`` extra), one population of
  PA's ``R`` particles, ESS target 0.9, systematic resampling, its MCMC move our heat-bath
  sweep, ``P ×`` PA's mean moves per temperature of sweeps per step (about PA's budget: the
  sweeps column says); its log Z has no SE, and the notes give the ESS fractions its steps
  kept (its ESS solver's sign bug, #914, would show as fractions off the target).

Run:  python benchmarks/free_energy.py --cases torus:32:0.4406868 torus:32:0.6 --estimators pa
      python benchmarks/free_energy.py --cases torus:16:0.4406868 torus:16:0.6 --seeds 0 1 2 --estimators pa ais blackjax
      python benchmarks/free_energy.py --cases torus:16:0.4406868 --seeds $(seq 0 19) --estimators pa
"""

from __future__ import annotations

import argparse
import os
import platform
import resource
import sys
import time
import warnings
from types import SimpleNamespace
from typing import NamedTuple

import jax
import numpy as np

sys.path.insert(0, os.path.dirname(__file__))
from _table import table_lines  # noqa: E402
from pt import _reference  # noqa: E402  benchmarks/pt.py: the strip and its transfer matrix from the test file


def torus(L, K):
    """(model, exact log Z, exact means or None, moves for AIS)."""
    from isingattn import IsingModel, graphs, onsager

    g = graphs.lattice([L, L], periodic=True)
    J = graphs.random_couplings(jax.random.key(0), g, "ferro", 1.0, dtype=np.float32)
    with jax.enable_x64():
        ref = float(onsager.torus_log_z(L, L, np.float64(K)))
    return IsingModel(np.zeros(g.n, np.float32), J, beta=K), ref, None, "swendsen-wang"


def strip(rows, cols, beta, h_scale=0.3):
    from isingattn import IsingModel
    from isingattn.sparse import from_dense

    strip_model, transfer_exact = _reference()
    h, J = strip_model(rows, cols, 0, h_scale=h_scale)
    mean, _, log_z = transfer_exact(h, J, beta, rows, cols)
    return IsingModel(h.astype(np.float32), from_dense(J.astype(np.float32)), beta=beta), float(log_z), mean, "gibbs"


def case_model(spec):
    kind, *a = spec.split(":")
    if kind == "torus":
        return torus(int(a[0]), float(a[1]))
    if kind == "strip":
        return strip(int(a[0]), int(a[1]), float(a[2]), *(float(x) for x in a[3:]))
    raise SystemExit(f"free_energy.py: a case is torus:L:K or strip:ROWS:COLS:BETA[:HSCALE]; got {spec!r}")


def cpu_seconds():
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def run(engine, model, key):
    """(Marginals, wall s, cpu s) of one call, the first call's compile included."""
    t, c = time.perf_counter(), cpu_seconds()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the converged column says it
        out = jax.block_until_ready(engine.marginals(model, key=key))
    return out, time.perf_counter() - t, cpu_seconds() - c


def blackjax_smc(model, key, num_particles, num_mcmc_steps, target_ess=0.9):
    """blackjax's ``adaptive_tempered_smc`` from β = 0 to the model's β, its MCMC move our
    heat-bath sweep (``gibbs_kernel.gibbs_sweep``): ``(log Z, tempering steps, the ESS
    fractions its steps kept, the means)``. Prior: uniform over the spins (log prior 0,
    ``log Z_0 = n log 2``); log likelihood ``-β E(s)``. blackjax gives the MCMC step only the
    tempered log density ``λ · (-β E)``; the sweep needs ``λβ``, read back from that
    density at a fixed state of large ``|E|``."""
    import blackjax
    import jax.numpy as jnp
    from blackjax.smc.ess import log_ess
    from blackjax.smc.resampling import systematic

    from isingattn.energy import energy
    from isingattn.inference.mcmc import gibbs_kernel
    from isingattn.inference.mcmc.coloring import schedule_classes

    h, J, beta, n = model.h, model.J, float(model.beta), model.n
    classes = schedule_classes("systematic", J, None)
    if classes is not None:
        J = J.with_table()
    refs = np.where(np.random.default_rng(0).random((16, n)) < 0.5, -1.0, 1.0).astype(np.float32)
    refs[0] = 1.0
    e_refs = np.asarray(energy(h, J, jnp.asarray(refs)))
    s_ref = jnp.asarray(refs[np.argmax(np.abs(e_refs))])
    loglik = lambda s: -beta * energy(h, J, s)

    class State(NamedTuple):
        position: jax.Array

    def step(key, state, logdensity_fn):
        b = logdensity_fn(s_ref) / (-energy(h, J, s_ref))  # λβ
        new, _ = gibbs_kernel.gibbs_sweep(key, gibbs_kernel.GibbsState(state.position), h, J,
                                          jnp.maximum(b, jnp.finfo(jnp.float32).tiny), classes)
        return State(new.spins), None

    smc = blackjax.adaptive_tempered_smc(lambda s: jnp.zeros(()), loglik, step, lambda x, _: State(x), {},
                                         systematic, target_ess, num_mcmc_steps=num_mcmc_steps)
    k0, k1 = jax.random.split(key)
    state = smc.init(jnp.where(jax.random.bernoulli(k0, 0.5, (num_particles, n)), 1.0, -1.0))

    @jax.jit
    def run(key, state):
        def cond(c):
            return c[1].tempering_param < 1

        def body(c):
            k, st, lz, steps, ess = c
            lam = st.tempering_param
            new, info = smc.step(jax.random.fold_in(key, k), st)
            ll = jax.vmap(loglik)(st.particles)  # the weights' ESS, as the solver meant it (#914)
            ess = ess.at[k].set(jnp.exp(log_ess((new.tempering_param - lam) * ll)) / num_particles)
            return k + 1, new, lz + info.log_likelihood_increment, steps + 1, ess

        return jax.lax.while_loop(cond, body, (0, state, 0.0, 0, jnp.full((4096,), jnp.nan)))

    _, state, lz, steps, ess = jax.block_until_ready(run(k1, state))
    ess = np.asarray(ess)[: int(steps)]
    return float(lz) + n * np.log(2.0), int(steps), ess, np.asarray(state.particles).mean(0)


def main():
    from isingattn.inference import AIS, get

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cases", nargs="+", default=["torus:32:0.4406868", "torus:32:0.6"])
    ap.add_argument("--estimators", nargs="+", default=["pa", "ais"], choices=["pa", "ais", "pt", "blackjax"])
    ap.add_argument("--seeds", nargs="+", type=int, default=[0])
    ap.add_argument("--replicas", type=int, default=None)
    ap.add_argument("--populations", type=int, default=None)
    ap.add_argument("--moves-per-temp", type=int, default=None)
    ap.add_argument("--max-moves-per-temp", type=int, default=None)
    ap.add_argument("--decorrelation", type=float, default=None)
    ap.add_argument("--ais-chains", type=int, default=256)
    args = ap.parse_args()
    if {"ais", "blackjax"} & set(args.estimators) and "pa" not in args.estimators:
        raise SystemExit("free_energy.py: ais and blackjax run at PA's budget; list pa too")
    print(f"log Z: population annealing vs AIS at equal sweeps; jax {jax.__version__}, {jax.default_backend()}, "
          f"os.cpu_count() = {os.cpu_count()}, {platform.machine()}, 1-min load average {os.getloadavg()[0]:.2f}",
          flush=True)
    pa_cfg = {k: v for k, v in (("num_replicas", args.replicas), ("num_populations", args.populations),
                                ("moves_per_temp", args.moves_per_temp),
                                ("max_moves_per_temp", args.max_moves_per_temp),
                                ("decorrelation", args.decorrelation)) if v is not None}
    pa = get("pa", **pa_cfg)
    hdr = ["case", "estimator", "seed", "sweeps", "error", "SE", "z", "max |Δm|", "wall s", "cpu s", "converged",
           "notes"]
    rows, summary = [], {}
    for spec in args.cases:
        model, ref, ref_mean, moves = case_model(spec)
        for seed in args.seeds:
            key = jax.random.key(seed)
            budget = None
            for name in args.estimators:
                if name == "pa":
                    out, wall, cpu = run(pa, model, key)
                    P = int(out.info["num_populations"])
                    budget, pa_moves = int(out.info["sweeps"]), float(out.info["moves_per_temp"])
                    sweeps, notes = budget, (f"temps {int(out.info['num_temps'])}, moves/temp "
                                             f"{float(out.info['moves_per_temp']):.1f} (capped "
                                             f"{int(out.info['moves_capped'])}), families "
                                             f"{float(out.info['families_eff']):.0f}, P {P}, SE spread "
                                             f"{float(out.info['log_z_se_spread']):.3f} families "
                                             f"{float(out.info['log_z_se_families']):.3f}")
                elif name == "ais":
                    eng = AIS(num_chains=args.ais_chains, num_temps=max(1, round(budget / args.ais_chains)),
                              transition=moves)
                    out, wall, cpu = run(eng, model, key)
                    sweeps = eng.num_chains * eng.num_temps
                    notes = f"temps {eng.num_temps}, weight ESS {float(out.info['weight_ess']):.1f}"
                elif name == "blackjax":
                    # one population of PA's R particles, PA's moves per temperature times P: PA's
                    # budget when the two ladders have about as many steps (the sweeps say)
                    steps_per = max(1, round(float(pa_moves) * P))
                    t, c = time.perf_counter(), cpu_seconds()
                    lz, temps, ess, mean = blackjax_smc(model, key, pa.num_replicas, steps_per)
                    wall, cpu = time.perf_counter() - t, cpu_seconds() - c
                    out = SimpleNamespace(log_z=lz, mean=mean, info={"log_z_se": np.nan, "converged": True})
                    sweeps = pa.num_replicas * steps_per * temps
                    notes = (f"temps {temps}, {steps_per} sweeps/temp, step ESS fraction {ess[:-1].min():.3f}–"
                             f"{ess[:-1].max():.3f} (target 0.9; no SE)")
                else:
                    eng = get("pt")
                    out, wall, cpu = run(eng, model, key)
                    sweeps, notes = None, f"round trips/step {float(np.min(out.info['round_trip_rate'])):.2g}"
                err, se = float(np.asarray(out.log_z)) - ref, float(out.info["log_z_se"])
                dm = "" if ref_mean is None else f"{np.max(np.abs(np.asarray(out.mean) - ref_mean)):.3f}"
                rows.append([spec, name, str(seed), "" if sweeps is None else f"{sweeps:.3g}", f"{err:+.4f}",
                             f"{se:.4f}", f"{err / se:+.2f}", dm, f"{wall:.1f}", f"{cpu:.1f}",
                             str(bool(np.all(out.info["converged"]))), notes])
                summary.setdefault((spec, name), []).append((err, se, wall, cpu))
                print("  ".join(rows[-1]), flush=True)
    print()
    print("\n".join(table_lines(hdr, rows, left=3, group_col=0)))
    print()
    srows = []
    for (spec, name), v in summary.items():
        v = np.array(v)
        z = v[:, 0] / v[:, 1]
        ratio = (f"{np.mean(np.array(summary[(spec, 'pa')])[:, 1]) / np.mean(v[:, 1]):.3f}"
                 if (spec, "pa") in summary else "")
        srows.append([spec, name, str(len(v)), f"{np.mean(v[:, 1]):.4f}", f"{np.sqrt(np.mean(v[:, 0] ** 2)):.4f}",
                      f"{np.mean(v[:, 0]):+.4f}", f"{np.mean(np.abs(z) <= 2):.2f}", f"{np.mean(z ** 2):.2f}", ratio,
                      f"{np.median(v[:, 2]):.1f}", f"{np.median(v[:, 3]):.1f}"])
    print("\n".join(table_lines(["case", "estimator", "runs", "mean SE", "RMS error", "mean error", "|z| ≤ 2",
                                 "mean z²", "PA SE / SE", "wall s (median)", "cpu s (median)"], srows, left=2,
                                group_col=0)))
    print(f"(load average at end {os.getloadavg()[0]:.2f})")


if __name__ == "__main__":
    main()
