"""Parallel tempering (``"pt"``) against Gibbs, side by side in one run.

1. **Accuracy as users call it.** The 8×24 open strip (±1 couplings, ``h ~ N(0,
   0.3²)``, seed 0) at β = 1, 2, 3: ``PT()`` and ``Gibbs()`` with their defaults, the max and
   mean |error| of the marginals against the exact transfer matrix (the one written in
   tests/inference/mcmc/test_pt.py), ``converged``, and the wall time of the call (first
   call: compilation included, as a user sees it).
2. **Throughput.** 2D ±J periodic spin glasses (sparse couplings, colour-class sweeps),
   ``L×L`` at β = 2: spin updates per second of every replica (``R · chains · n · steps /
   wall``) for PT, against Gibbs with as many chains as PT has replicas × chains (the same
   batch), and dwave-samplers' SimulatedAnnealingSampler at a fixed β (one read per
   replica-chain) when it is installed. Both JAX engines with ``diagnostics=False,
   keep_samples=False``, timed after compilation, best of ``--repeats``.
3. **Round trips against the number of replicas** on the same spin glass: the round-trip
   rate (cold → hot → cold trips per step and chain) and the swap rates after adaptation.
4. **Targets, with the defaults as users call them** (``--targets``): ``inference.get("pt")`` on
   the 32×32 ±J torus at β = 2 (round trips per step and chain, against Syed et al.'s rate
   for energies that decorrelate between swaps, from the measured swap rates), and on the zero-field open 10×80 ±J strip at β = 3 (``strip_model(10, 80, 0,
   h_scale=0)``, sparse couplings unless ``--dense``): log Z against the exact transfer matrix,
   in units of the reported SE.

Run:  nice -n 19 python benchmarks/pt.py                (a few minutes on a 2-core CPU)
      nice -n 19 python benchmarks/pt.py --targets-only  (the defaults at the hard points)
      nice -n 19 python benchmarks/pt.py --sizes 32 64
"""

from __future__ import annotations

import argparse
import importlib.util
import pathlib
import time
import warnings

import jax
import jax.numpy as jnp
import numpy as np

from isingattn import IsingModel, inference
from isingattn.graphs import lattice
from isingattn.sparse import SparseCouplings

_TEST = pathlib.Path(__file__).resolve().parents[1] / "tests" / "inference" / "mcmc" / "test_pt.py"


def _reference():
    """``strip_model`` and ``transfer_exact`` from the test file (one exact reference)."""
    spec = importlib.util.spec_from_file_location("_pt_test_reference", _TEST)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.strip_model, mod.transfer_exact


def _timed(fn):
    t = time.perf_counter()
    out = fn()
    jax.block_until_ready(out)
    return out, time.perf_counter() - t


def accuracy_table():
    strip_model, transfer_exact = _reference()
    rows, cols = 8, 24
    h, J = strip_model(rows, cols, 0)
    print(f"## {rows}x{cols} open ±J strip, h ~ N(0, 0.3²): engines with their defaults, against the transfer matrix")
    print("| β | engine | max |err| | mean |err| | converged | max R-hat | round trips/step | wall s |")
    print("|---|---|---|---|---|---|---|---|")
    for beta in (1.0, 2.0, 3.0):
        mean, _, _ = transfer_exact(h, J, beta, rows, cols)
        model = IsingModel(jnp.asarray(h, jnp.float32), jnp.asarray(J, jnp.float32), beta)
        for name in ("pt", "gibbs"):
            eng = inference.get(name)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                out, dt = _timed(lambda: eng.marginals(model, key=jax.random.key(0)))
            err = np.abs(np.asarray(out.mean) - mean)
            r = np.asarray(out.info["r_hat"])
            rmax = np.nanmax(r) if np.isfinite(r).any() else float("nan")
            rt = f"{float(out.info['round_trip_rate']):.4f}" if "round_trip_rate" in out.info else "-"
            print(f"| {beta:g} | {name} | {err.max():.3f} | {err.mean():.4f} | {bool(out.info['converged'])} | "
                  f"{rmax:.3g}{' (NaN: frozen)' if np.isnan(r).any() else ''} | {rt} | {dt:.1f} |", flush=True)


def spin_glass(L, seed=0, beta=2.0):
    g = lattice((L, L), periodic=True)
    w = np.random.default_rng(seed).choice([-1.0, 1.0], g.E).astype(np.float32)
    return g, w, IsingModel(jnp.zeros(L * L, jnp.float32), SparseCouplings(g, jnp.asarray(w)), beta)


def throughput_table(sizes, R, C, steps, repeats):
    print(f"\n## ±J periodic spin glass, β = 2: spin updates per second (PT: {R} replicas x {C} chains; Gibbs: "
          f"{R * C} chains; {steps} steps after 100 warmup; best of {repeats})")
    print("| L | n | PT M/s | Gibbs M/s | PT / Gibbs | dwave SA M/s | PT / SA |")
    print("|---|---|---|---|---|---|---|")
    for L in sizes:
        g, w, model = spin_glass(L)
        n = L * L
        pt = inference.get("pt", num_warmup=100, num_samples=steps, num_chains=C, num_replicas=R, diagnostics=False,
                           keep_samples=False)
        gb = inference.get("gibbs", num_warmup=100, num_samples=steps, num_chains=R * C, diagnostics=False,
                           keep_samples=False)
        best = {}
        for name, eng in (("pt", pt), ("gibbs", gb)):
            eng.marginals(model, key=jax.random.key(0)).mean.block_until_ready()  # compile
        for rep in range(repeats):  # round-robin: both see the same background load
            for name, eng in (("pt", pt), ("gibbs", gb)):
                _, dt = _timed(lambda: eng.marginals(model, key=jax.random.key(rep + 1)).mean)
                best[name] = min(best.get(name, np.inf), dt)
        updates = R * C * n * (steps + 100)
        rate = {k: updates / v / 1e6 for k, v in best.items()}
        sa = _dwave_rate(g, w, n, R * C, steps + 100)
        sa_cols = f"{sa:.1f} | {rate['pt'] / sa:.2f}" if sa else "not installed | -"
        print(f"| {L} | {n} | {rate['pt']:.1f} | {rate['gibbs']:.1f} | {rate['pt'] / rate['gibbs']:.2f} | {sa_cols} |",
              flush=True)


def _dwave_rate(g, w, n, reads, sweeps):
    try:
        import dimod
        from dwave.samplers import SimulatedAnnealingSampler
    except ImportError:
        return None
    # SPIN BQM of E = -Σ J s s: quadratic = -J; fixed β = 2 for every sweep
    bqm = dimod.BQM({i: 0.0 for i in range(n)}, {(int(a), int(b)): -float(x) for (a, b), x in zip(g.edges, w)}, 0.0,
                    "SPIN")
    sa = SimulatedAnnealingSampler()
    kw = dict(num_reads=reads, beta_schedule_type="custom", beta_schedule=[2.0] * sweeps, seed=1)
    sa.sample(bqm, **{**kw, "num_reads": 2, "beta_schedule": [2.0] * 10})  # warm-up
    t = time.perf_counter()
    sa.sample(bqm, **kw)
    return reads * n * sweeps / (time.perf_counter() - t) / 1e6


def round_trip_table(L, replicas, C, steps):
    print(f"\n## Round trips against replicas: {L}x{L} ±J periodic spin glass, β = 2, {C} chains, "
          f"{steps} steps after 1000 warmup (ladder adapted, hot end β = 0)")
    print("| replicas | round trips / step / chain | swap rate min-max | wall s |")
    print("|---|---|---|---|")
    _, _, model = spin_glass(L)
    for R in replicas:
        eng = inference.get("pt", num_warmup=1000, num_samples=steps, num_chains=C, num_replicas=R, diagnostics=False,
                            keep_samples=False)
        out, dt = _timed(lambda: eng.marginals(model, key=jax.random.key(0)).info)
        sw = np.asarray(out["swap_rate"])
        print(f"| {R} | {float(out['round_trip_rate']):.5f} | {sw.min():.2f}-{sw.max():.2f} | {dt:.1f} |", flush=True)


def targets_table(seed=0, dense=False):
    strip_model, transfer_exact = _reference()
    print("\n## Targets: `inference.get(\"pt\")` as users call it (first call: compilation included)")
    print("| case | replicas | barrier Λ | round trips / step / chain | NRPT bound | swap rate min-max | "
          "log Z err | SE | err/SE | converged | wall s |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    cases = []
    _, _, torus = spin_glass(32, seed)
    cases.append(("32x32 ±J torus, β=2", torus, None))
    h, J = strip_model(10, 80, seed, h_scale=0.0)
    _, _, ref = transfer_exact(h, J, 3.0, 10, 80)
    strip = IsingModel(jnp.asarray(h, jnp.float32), jnp.asarray(J, jnp.float32), 3.0)
    if not dense:
        strip = strip.sparsified()
    cases.append((f"10x80 ±J open strip, h=0, β=3 ({'dense' if dense else 'sparse'} J)", strip, ref))
    for name, model, ref in cases:
        eng = inference.get("pt")
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            out, dt = _timed(lambda: eng.marginals(model, key=jax.random.key(seed)))
        info = out.info
        R = int(np.shape(info["ladder"])[-1])
        rt = float(info["round_trip_rate"])
        lam = float(info["barrier"]) if "barrier" in info else float("nan")
        sw = np.asarray(info["swap_rate"])
        # Syed et al.'s round-trip rate when the energies decorrelate between swaps (ELE):
        # 1 / (2 + 2 Σ r_i / (1 - r_i)), r_i each pair's rejection
        bound = 1 / (2 + 2 * np.sum((1 - sw) / np.maximum(sw, 1e-9)))
        err = float(out.log_z) - ref if ref is not None else float("nan")
        se = float(info["log_z_se"])
        print(f"| {name} | {R} | {lam:.1f} | {rt:.5f} | {bound:.5f} | {sw.min():.2f}-{sw.max():.2f} | "
              f"{err:+.3f} | {se:.3f} | {err / se:+.1f} | {bool(info['converged'])} ({len(caught)} warnings) | "
              f"{dt:.1f} |", flush=True)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--sizes", type=int, nargs="+", default=[32])
    p.add_argument("--replicas", type=int, default=16)
    p.add_argument("--chains", type=int, default=4)
    p.add_argument("--steps", type=int, default=400)
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("--rt-replicas", type=int, nargs="*", default=[16, 32, 64], help="none: skip the round-trip table")
    p.add_argument("--rt-steps", type=int, default=20000)
    p.add_argument("--skip-accuracy", action="store_true")
    p.add_argument("--targets-only", action="store_true", help="only the table of targets (part 4)")
    p.add_argument("--dense", action="store_true", help="the targets' strip with dense J (as the issue measured it)")
    a = p.parse_args()
    if a.targets_only:
        return targets_table(dense=a.dense)
    if not a.skip_accuracy:
        accuracy_table()
    throughput_table(a.sizes, a.replicas, a.chains, a.steps, a.repeats)
    if a.rt_replicas:
        round_trip_table(a.sizes[0], a.rt_replicas, a.chains, a.rt_steps)


if __name__ == "__main__":
    main()
