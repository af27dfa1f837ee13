"""Digitized diabatic quantum annealing (``inference.DQA``): which distribution it samples,
how well calibration reaches a target β, and what it costs (DESIGN.md §3).

Sections (each prints a markdown table):

1. Raw anneal (``calibrate=False``) of a fixed dense n=10 model (``random_model`` seed 3,
   ``h ~ N(0,1)``, ``J ~ N(0,1/n)``), and of the same model scaled by 1/4: effective ``β_h``, ``β_J`` by maximum pseudo-likelihood
   on the exact ``|ψ|²`` and on 4096 shots (± sandwich SE), against the fast-anneal theory
   ``β_h = 2κ``, ``β_J = 4κ`` (``κ`` of the circuit, → ``τ²/12``).
2. The largest effective ``β_h`` an anneal of duration ``τ`` reaches for that model when the
   programmed scale ``c`` (``h' = c h``, ``J' = c J / 2``) is swept: the reach of calibration.
3. Calibrated DQA on 4 random dense n=12 models at β ∈ {0.3, 0.5, 1}: KL(Boltzmann‖|ψ|²),
   the uniform baseline KL(Boltzmann‖uniform), the largest marginal bias of the exact
   ``|ψ|²`` against Exact, and the calibrated ``β_h``, ``β_J``, for τ ∈ {1, 4, 12}.
4. Runtime: n=12, 1024 shots, a batch of 64 models (float32), compile and run time with and
   without calibration; inverse-CDF sampling against ``jax.random.categorical``.

Run:  python benchmarks/dqa.py          (a few minutes on a 2-core CPU)
"""

from __future__ import annotations

import argparse
import time
import warnings

import jax
import jax.numpy as jnp
import numpy as np

from isingattn import IsingModel
from isingattn.inference.dqa.engine import _energy_tables, DQA
from isingattn.inference.dqa.circuit import measure, evolve, kappa, schedule_coefficients
from isingattn.inference.dqa.pseudolikelihood import pseudo_likelihood_beta
from isingattn.energy import spin_table
from isingattn.testing import brute_force
from isingattn.instances import random_model


def section_raw(n=10, taus=(0.25, 0.5, 1.0, 2.0, 4.0, 12.0), K=32, scale=1.0):
    h, J = random_model(np.random.default_rng(3), n)
    model = IsingModel(scale * h, scale * J)
    print(f"\n### 1. Raw anneal, dense n={n} (h, J × {scale:g}), num_steps={K}, order=2\n")
    print("| τ | κ (circuit) | 2κ | β_h (|ψ|²) | β_h (4096 shots) | 4κ | β_J (|ψ|²) | β_J (4096 shots) |")
    print("|---|---|---|---|---|---|---|---|")
    for tau in taus:
        _, _, info = DQA(tau=tau, num_steps=K, calibrate=False, num_shots=4096).run(model, key=jax.random.PRNGKey(0))
        k = kappa(tau, K)
        f = lambda x: float(np.asarray(x))
        print(f"| {tau:g} | {k:.4g} | {2*k:.4g} | {f(info['beta_h_state']):.4g} | {f(info['beta_h']):.3f} ± {f(info['beta_h_se']):.3f} "
              f"| {4*k:.4g} | {f(info['beta_J_state']):.4g} | {f(info['beta_J']):.3f} ± {f(info['beta_J_se']):.3f} |")


def section_reach(n=10, taus=(1.0, 4.0, 12.0), K=32):
    h, J = random_model(np.random.default_rng(3), n)
    Eh, EJ = _energy_tables(IsingModel(h, J))
    S = spin_table(n, jnp.float64)
    cs = np.geomspace(0.01, 30, 40)
    print(f"\n### 2. Reach: largest effective β over programmed scales c (h' = c h, J' = c J/2), dense n={n}\n")
    print("| τ | max β_h | at c | max β_J | at c | slope dβ_h/dc at c→0 | theory 2κ |")
    print("|---|---|---|---|---|---|---|")
    for tau in taus:
        ph, mx = schedule_coefficients(tau, K)
        p = jnp.abs(evolve(cs[:, None] * (Eh + 0.5 * EJ), ph, mx)) ** 2
        fit = pseudo_likelihood_beta(jnp.asarray(h)[None], jnp.asarray(J)[None], S, p)
        bh, bJ = np.asarray(fit.beta_h), np.asarray(fit.beta_J)
        i, j = np.nanargmax(bh), np.nanargmax(bJ)
        print(f"| {tau:g} | {bh[i]:.3f} | {cs[i]:.3g} | {bJ[j]:.3f} | {cs[j]:.3g} | {bh[0] / cs[0]:.3f} | {2 * kappa(tau, K):.3f} |")


def section_calibrated(n=12, betas=(0.3, 0.5, 1.0), taus=(1.0, 4.0, 12.0), K=32, models=4):
    rng = np.random.default_rng(3)
    hs, Js = zip(*[random_model(rng, n) for _ in range(models)])
    h, J = np.stack(hs), np.stack(Js)
    print(f"\n### 3. Calibrated DQA (calibration_steps=3, from |ψ|²), {models} dense n={n} models\n")
    print("| β | τ | KL(p_β‖|ψ|²) mean (max) | KL(p_β‖uniform) mean | max marginal bias of |ψ|² | β_h range | β_J range | calibrated |")
    print("|---|---|---|---|---|---|---|---|")
    for beta in betas:
        refs = [brute_force(h[i], J[i], beta) for i in range(models)]
        for tau in taus:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                _, p, info = DQA(tau=tau, num_steps=K, num_shots=16).run(IsingModel(h, J, beta), key=jax.random.PRNGKey(0))
            p = np.asarray(p)
            bias = max(np.abs(p[i] @ refs[i]["spins"] - refs[i]["mean"]).max() for i in range(models))
            kl, klu = np.asarray(info["kl"]), np.asarray(info["kl_uniform"])
            bh, bJ = np.asarray(info["beta_h_state"]), np.asarray(info["beta_J_state"])
            print(f"| {beta:g} | {tau:g} | {kl.mean():.4f} ({kl.max():.4f}) | {klu.mean():.3f} | {bias:.3f} | "
                  f"{bh.min():.3f}–{bh.max():.3f} | {bJ.min():.3f}–{bJ.max():.3f} | {int(np.asarray(info['calibrated']).sum())}/{models} |")


def section_runtime(n=12, M=64, shots=1024, repeats=3):
    rng = np.random.default_rng(0)
    hs, Js = zip(*[random_model(rng, n) for _ in range(M)])
    h, J = jnp.asarray(np.stack(hs), jnp.float32), jnp.asarray(np.stack(Js), jnp.float32)
    print(f"\n### 4. Runtime: n={n}, {shots} shots, {M} models, float32, {jax.device_count()} × {jax.devices()[0].platform}\n")
    print("| configuration | compile (s) | run (s, best of %d) |" % repeats)
    print("|---|---|---|")
    for name, eng in [("calibrate=False", DQA(calibrate=False, num_shots=shots)),
                      ("calibrate=True (3 steps, default)", DQA(num_shots=shots))]:
        f = jax.jit(lambda h, J, key: eng.run(IsingModel(h, J, 0.5), key=key)[0])
        t = time.perf_counter()
        f(h, J, jax.random.PRNGKey(0)).block_until_ready()
        tc = time.perf_counter() - t
        ts = []
        for r in range(repeats):
            t = time.perf_counter()
            f(h, J, jax.random.PRNGKey(r + 1)).block_until_ready()
            ts.append(time.perf_counter() - t)
        print(f"| {name} | {tc:.2f} | {min(ts):.3f} |")
    probs = jax.nn.softmax(jax.random.normal(jax.random.PRNGKey(0), (M, 2**n)), -1)
    cdf = jax.jit(lambda k, p: measure(k, p, shots))
    cat = jax.jit(lambda k, p: jax.vmap(lambda kk, pp: jax.random.categorical(kk, jnp.log(pp), shape=(shots,)))(
        jax.random.split(k, M), p))
    for name, f in [("sampling only: inverse CDF (used)", cdf), ("sampling only: jax.random.categorical", cat)]:
        f(jax.random.PRNGKey(0), probs).block_until_ready()
        ts = []
        for r in range(repeats):
            t = time.perf_counter()
            f(jax.random.PRNGKey(r), probs).block_until_ready()
            ts.append(time.perf_counter() - t)
        print(f"| {name} | – | {min(ts):.3f} |")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sections", default="1,2,3,4")
    args = ap.parse_args()
    jax.config.update("jax_enable_x64", True)  # sections 1-3 in float64; section 4 builds float32 arrays
    s = set(args.sections.split(","))
    if "1" in s:
        section_raw()
        section_raw(scale=0.25)
    if "2" in s:
        section_reach()
    if "3" in s:
        section_calibrated()
    if "4" in s:
        section_runtime()


if __name__ == "__main__":
    main()
