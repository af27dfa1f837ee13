"""Digitized diabatic quantum annealing (``inference/dqa.py``) against independent references.

* The Trotterized circuit against a dense-matrix solution of the time-dependent
  Schrödinger equation (scipy's DOP853 on the full ``2^n`` Hamiltonian, built from Kronecker
  products, with its own numpy energy table): first-order (Lie) error ∝ dt, second-order
  (Strang) ∝ dt²; the norm is preserved.
* The fast-anneal theory ``P(z) ≈ 2^-n [1 - κ Σ_j (E(z) - E(z^(j)))]``, ``κ = τ²/12``, against
  the exact ``|ψ|²``: the error is O(τ⁴) (it falls 16× when τ halves), and the effective
  temperatures approach ``β_h = 2κ``, ``β_J = 4κ``.
* Maximum pseudo-likelihood recovers a known ``(β_h, β_J)`` from exact Boltzmann samples
  within 4 sandwich standard errors, and its standard errors match the spread of
  replicate fits; on the exact Boltzmann distribution it is exact.
* Calibrated DQA marginals against brute force at a small β: shots are iid, so the Monte
  Carlo SE is ``sd/sqrt(ESS)`` with ESS from numpyro (≈ the number of shots), and the
  sampler's approximation error is measured exactly from ``|ψ|²`` (it is O(β²), see
  ``test_calibration_bias_is_second_order``).
* Reproducibility, masks, gradients under jit inside ``boltzmann_attention``, and dimod's
  sampler conformance suite for ``DQASampler``.
"""

import unittest
import warnings

import dimod
import dimod.testing
import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.integrate
from numpyro.diagnostics import effective_sample_size

from isingattn import IsingModel, TooManySpinsError
from isingattn.errors import IsingInputError
from isingattn.inference.dqa.engine import DQA
from isingattn.inference.dimod import DQASampler
from isingattn.inference.dqa.circuit import evolve, fast_anneal_theory, flip_energy_sum, kappa, schedule_coefficients
from isingattn.inference.dqa.pseudolikelihood import pseudo_likelihood_beta
from isingattn.energy import spins_from_index
from isingattn.energy import spin_table
from isingattn.testing import all_spins, brute_force
from isingattn.instances import random_model


def _energy_table(h, J):
    """Independent numpy energy of every basis state, in the order of ``testing.all_spins``."""
    S = all_spins(len(h))
    return -S @ h - 0.5 * np.einsum("ci,ij,cj->c", S, J, S), S


def _dense_hx(n):
    X, I = np.array([[0.0, 1.0], [1.0, 0.0]]), np.eye(2)
    Hx = np.zeros((2**n, 2**n))
    for j in range(n):
        op = np.ones((1, 1))
        for k in range(n):
            op = np.kron(op, X if k == j else I)  # qubit 0 is the most significant factor
        Hx -= op
    return Hx


def test_spin_ordering_matches_spin_table_and_testing():
    n = 5
    idx = jnp.arange(2**n)
    np.testing.assert_array_equal(spins_from_index(idx, n, jnp.float64), spin_table(n, jnp.float64))
    np.testing.assert_array_equal(spin_table(n, jnp.float64), all_spins(n))


@pytest.mark.parametrize("order,expected_ratio", [(1, 2.0), (2, 4.0)])
def test_trotter_against_dense_schrodinger(order, expected_ratio):
    rng = np.random.default_rng(0)
    n, tau = 4, 2.0
    h, J = random_model(rng, n)
    E, _ = _energy_table(h, J)
    Hx, Hz = _dense_hx(n), np.diag(E)

    def rhs(t, y):
        s = t / tau
        return -1j * ((1 - s) * Hx + s * Hz) @ y

    psi0 = np.full(2**n, 2 ** (-n / 2), complex)
    ref = scipy.integrate.solve_ivp(rhs, (0, tau), psi0, method="DOP853", rtol=1e-12, atol=1e-13).y[:, -1]
    errs = []
    for K in (8, 16, 32):
        phase, mix = schedule_coefficients(tau, K, "linear", order)
        psi = np.asarray(evolve(jnp.asarray(E), phase, mix))
        assert abs(np.linalg.norm(psi) - 1) < 1e-12
        errs.append(np.abs(psi - ref).max())
    ratios = np.array(errs[:-1]) / np.array(errs[1:])
    # global error C dt^order: halving dt divides it by 2^order (up to higher-order terms)
    assert np.all(np.abs(ratios / expected_ratio - 1) < 0.1), (errs, ratios)
    assert errs[-1] < (0.02 if order == 1 else 1e-3)


def test_custom_schedule_and_kappa():
    rng = np.random.default_rng(1)
    h, J = random_model(rng, 3)
    E, _ = _energy_table(h, J)
    lin = schedule_coefficients(1.5, 16, "linear", 2)
    cus = schedule_coefficients(1.5, 16, lambda s: (1 - s, s), 2)
    np.testing.assert_allclose(evolve(jnp.asarray(E), *lin), evolve(jnp.asarray(E), *cus), atol=1e-14)
    # κ of the circuit -> τ²/12 with O(dt²) corrections
    for tau in (0.5, 2.0):
        assert abs(kappa(tau, 512) / (tau**2 / 12) - 1) < 1e-4
    with pytest.raises(IsingInputError, match="schedule"):
        schedule_coefficients(1.0, 8, "cosine")
    with pytest.raises(IsingInputError, match="order"):
        DQA(order=3)
    with pytest.raises(IsingInputError, match="tau"):
        DQA(tau=-1.0)


def test_fast_anneal_theory_against_exact_state():
    rng = np.random.default_rng(1)
    n = 8
    h, J = random_model(rng, n)
    E, S = _energy_table(h, J)
    # D(z) = Σ_j (E(z) - E(z^(j))) = -2 h·s - 4 Σ_{j<k} J s s (so β_h = 2κ, β_J = 4κ)
    D = -2 * S @ h - 2 * np.einsum("ci,ij,cj->c", S, J, S)
    np.testing.assert_allclose(flip_energy_sum(jnp.asarray(E)), D, atol=1e-10)
    errs, dev_h, dev_J = [], [], []
    for tau in (0.4, 0.2, 0.1):
        phase, mix = schedule_coefficients(tau, 64, "linear", 2)
        p = np.abs(np.asarray(evolve(jnp.asarray(E), phase, mix))) ** 2
        k = tau**2 / 12
        theory = (1 - k * D) / 2**n
        np.testing.assert_allclose(fast_anneal_theory(jnp.asarray(E), k), theory, atol=1e-15)
        errs.append(np.abs(p - theory).max() * 2**n)
        fit = pseudo_likelihood_beta(jnp.asarray(h), jnp.asarray(J), jnp.asarray(S), jnp.asarray(p))
        dev_h.append(abs(float(fit.beta_h) / (2 * k) - 1))
        dev_J.append(abs(float(fit.beta_J) / (4 * k) - 1))
    ratios = np.array(errs[:-1]) / np.array(errs[1:])
    assert np.all((ratios > 10) & (ratios < 22)), (errs, ratios)  # O(τ⁴): 16x per halving
    assert errs[-1] < 2e-4
    # relative deviation of the effective β from 2κ, 4κ is O(τ²): ~4x per halving
    assert dev_h[-1] < 2e-3 and dev_J[-1] < 5e-3 and dev_h[0] > 3 * dev_h[-1] and dev_J[0] > 3 * dev_J[-1]


def test_pseudo_likelihood_recovers_known_beta():
    rng = np.random.default_rng(2)
    n, S, R = 6, 2000, 40
    h, J = random_model(rng, n, h_scale=0.7, J_scale=0.8)
    bh, bJ = 0.7, 1.3
    ref = brute_force(h * bh / bJ, J, bJ)  # p ∝ exp(β_h h·s + β_J Σ J s s)
    # population PL on the exact Boltzmann distribution: Boltzmann conditionals are exactly
    # logistic, so the maximizer is the true β
    exact = pseudo_likelihood_beta(jnp.asarray(h), jnp.asarray(J), jnp.asarray(ref["spins"]), jnp.asarray(ref["probs"]))
    np.testing.assert_allclose([exact.beta_h, exact.beta_J], [bh, bJ], rtol=1e-8)
    # R independent sample sets, fitted as one batch
    idx = rng.choice(len(ref["probs"]), size=(R, S), p=ref["probs"])
    fit = pseudo_likelihood_beta(jnp.asarray(h), jnp.asarray(J), jnp.asarray(ref["spins"][idx]))
    assert bool(jnp.all(fit.converged))
    for est, se, true in [(fit.beta_h, fit.se_h, bh), (fit.beta_J, fit.se_J, bJ)]:
        est, se = np.asarray(est), np.asarray(se)
        assert abs(est[0] - true) <= 4 * se[0]
        assert abs(est.mean() - true) <= 4 * se.mean() / np.sqrt(R)
        # the sandwich SE matches the replicate spread (its own relative SE ≈ 1/sqrt(2(R-1)))
        assert abs(est.std(ddof=1) / se.mean() - 1) <= 4 / np.sqrt(2 * (R - 1))
    # no couplings: β_J is not identifiable and is reported as NaN
    fit0 = pseudo_likelihood_beta(jnp.asarray(h), jnp.zeros((n, n)), jnp.asarray(ref["spins"][idx[0]]))
    assert np.isnan(float(fit0.beta_J)) and np.isfinite(float(fit0.beta_h))


def _weak_model(seed=5, n=6):
    return random_model(np.random.default_rng(seed), n, h_scale=0.5, J_scale=0.5 / np.sqrt(n))


def test_calibrated_marginals_against_exact_within_mcse_plus_bias():
    n, beta, shots = 6, 0.3, 4096
    h, J = _weak_model(n=n)
    ref = brute_force(h, J, beta)
    model = IsingModel(h, J, beta)
    samples, probs, info = DQA(num_shots=shots).run(model, key=jax.random.PRNGKey(0))
    assert bool(info["calibrated"])
    assert abs(float(info["beta_h_state"]) - beta) <= 0.05 * beta and abs(float(info["beta_J_state"]) - beta) <= 0.05 * beta
    # the effective β of the shots agrees with the target within its SE (and the state's fit)
    for k in ("beta_h", "beta_J"):
        assert abs(float(info[k]) - float(info[k + "_state"])) <= 4 * float(info[k + "_se"])
    m = DQA(num_shots=shots).marginals(model, key=jax.random.PRNGKey(0))
    np.testing.assert_array_equal(m.samples, samples)  # same key, same shots
    s = np.asarray(samples)  # [S, n]
    ess = np.asarray(effective_sample_size(s[None]))  # one chain of iid shots: ESS ≈ S
    assert np.all(ess > 0.5 * shots)
    se = s.std(0, ddof=1) / np.sqrt(ess)
    # approximation error of the sampler, exactly: marginals of |ψ|² against brute force
    bias = np.abs(np.asarray(probs) @ ref["spins"] - ref["mean"])
    err = np.abs(np.asarray(m.mean) - ref["mean"])
    assert np.all(err <= 4 * se + bias), (err, se, bias)
    # the bias is below the first-order truncation that a fast anneal implements
    # (P ≈ 2^-n (1 - βE) has marginals βh; Boltzmann has βh + β² Jh + O(β³))
    assert np.all(bias <= np.abs(beta * h - ref["mean"]).max())
    # KL to Boltzmann (from |ψ|²) is far below the uniform baseline
    assert float(info["kl"]) < 0.01 * float(info["kl_uniform"])


def test_calibration_bias_is_second_order():
    """The exact |ψ|² of the calibrated anneal has marginal bias O(β²) and KL O(β⁴)."""
    h, J = _weak_model()
    betas = jnp.asarray([0.3, 0.15], jnp.float64)
    bias, kl = [], []
    for beta in betas:
        ref = brute_force(h, J, float(beta))
        _, probs, info = DQA(num_shots=8).run(IsingModel(h, J, beta), key=jax.random.PRNGKey(0))
        bias.append(np.abs(np.asarray(probs) @ ref["spins"] - ref["mean"]).max())
        kl.append(float(info["kl"]))
    assert 3.0 < bias[0] / bias[1] < 5.0, bias  # 4x per halving of β
    assert 10.0 < kl[0] / kl[1] < 22.0, kl  # 16x


@pytest.mark.slow
def test_calibrate_from_samples_reaches_target_within_se():
    """Hardware-style calibration from shots only: the chosen scales put the exact effective β
    within the statistical resolution of one set of shots."""
    h, J = _weak_model(n=8)
    beta = 0.3
    _, _, info = DQA(num_shots=4096, calibrate_from="samples").run(IsingModel(h, J, beta), key=jax.random.PRNGKey(7))
    for k in ("beta_h", "beta_J"):
        assert abs(float(info[k + "_state"]) - beta) <= 4 * float(info[k + "_se"]), (k, info[k + "_state"], info[k + "_se"])


@pytest.mark.slow
def test_long_anneal_calibrates_where_a_short_one_saturates():
    """At β = 1 on unit-scale dense models a τ = 1 anneal cannot reach the target (its
    effective β saturates near 0.2), while the default τ = 12 calibrates and gets far closer
    to Boltzmann (module docstring; numbers in benchmarks/dqa.py)."""
    rng = np.random.default_rng(3)
    hs, Js = zip(*[random_model(rng, 10) for _ in range(4)])
    model = IsingModel(np.stack(hs), np.stack(Js), 1.0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        _, _, short = DQA(tau=1.0, num_shots=8).run(model, key=jax.random.PRNGKey(0))
    _, _, long = DQA(num_shots=8).run(model, key=jax.random.PRNGKey(0))
    assert not np.any(np.asarray(short["calibrated"])) and np.all(np.asarray(long["calibrated"]))
    assert np.all(np.asarray(long["kl"]) < 0.2 * np.asarray(short["kl"]))
    assert np.all(np.asarray(long["kl"]) < 0.05 * np.asarray(long["kl_uniform"]))


def test_raw_anneal_reports_theory_temperatures_and_batches():
    rng = np.random.default_rng(3)
    n, tau = 5, 0.15  # relative O(τ²) corrections to 2κ, 4κ: ~1.5% here (6% at τ = 0.3)
    hs, Js = zip(*[random_model(rng, n) for _ in range(3)])
    model = IsingModel(np.stack(hs), np.stack(Js)[0])  # 3 models sharing J
    eng = DQA(tau=tau, calibrate=False, num_shots=4096)
    samples, probs, info = eng.run(model, key=jax.random.PRNGKey(1))
    assert samples.shape == (3, 4096, n) and probs.shape == (3, 2**n)
    k = kappa(tau, 32)
    np.testing.assert_allclose(info["kappa"], k)
    np.testing.assert_allclose(info["beta_h_state"], 2 * k, rtol=0.03)
    np.testing.assert_allclose(info["beta_J_state"], 4 * k, rtol=0.03)
    np.testing.assert_allclose(info["scale_h"], 1.0)
    # distinct streams per model: identical models in a batch get different shots
    same = IsingModel(np.stack([hs[0], hs[0]]), Js[0])
    s2, _, _ = eng.run(same, key=jax.random.PRNGKey(1))
    assert not np.array_equal(s2[0], s2[1])
    s3, _, _ = eng.run(same, key=jax.random.PRNGKey(1))
    np.testing.assert_array_equal(s2, s3)
    s4, _, _ = eng.run(same, key=jax.random.PRNGKey(2))
    assert not np.array_equal(s2, s4)


def test_mask_removes_spins():
    rng = np.random.default_rng(4)
    n = 5
    h, J = random_model(rng, n)
    mask = np.array([True, False, True, True, False])
    eng = DQA(num_shots=64)
    m = eng.marginals(IsingModel(h, J, 0.4, mask=mask), key=jax.random.PRNGKey(0))
    assert np.all(np.asarray(m.mean)[~mask] == 0)
    _, p_full, info_full = eng.run(IsingModel(h, J, 0.4, mask=mask), key=jax.random.PRNGKey(0))
    idx = np.flatnonzero(mask)
    _, p_red, info_red = eng.run(IsingModel(h[idx], J[np.ix_(idx, idx)], 0.4), key=jax.random.PRNGKey(0))
    # inactive qubits stay in |+>: |ψ|² is the reduced model's, times a uniform factor
    marg = np.asarray(p_full).reshape((2,) * n).sum(axis=tuple(np.flatnonzero(~mask))).reshape(-1)
    np.testing.assert_allclose(marg, p_red, atol=1e-12)
    np.testing.assert_allclose(info_full["kl"], info_red["kl"], atol=1e-10)


def test_input_errors():
    model = IsingModel(np.zeros(3), np.zeros((3, 3)))
    with pytest.raises(IsingInputError, match="key"):
        DQA().marginals(model)
    with pytest.raises(TooManySpinsError, match="max_n"):
        DQA(max_n=2).marginals(model, key=jax.random.PRNGKey(0))


def test_unreachable_beta_warns():
    """A short anneal cannot reach a large β·|E|: calibration saturates, flags and warns."""
    h, J = random_model(np.random.default_rng(3), 5)
    with pytest.warns(RuntimeWarning, match="calibration did not reach"):
        out = DQA(tau=1.0, num_shots=8).marginals(IsingModel(h, J, 2.0), key=jax.random.PRNGKey(0))
    assert not bool(out.info["calibrated"])
    assert float(out.info["beta_h_state"]) < 1.0


# Training DQA inside causal attention under jit is checked by value, against Exact, in
# test_conformance::test_gradients_through_boltzmann_attention_agree_with_exact[dqa].


# ---- dimod --------------------------------------------------------------------------------


@dimod.testing.load_sampler_bqm_tests(DQASampler)
class TestDQASamplerConformance(unittest.TestCase):
    """dimod's shipped conformance tests (BQMs of 0-3 variables), collected by pytest."""


def test_sampler_reads_energies_and_seed():
    h, J = random_model(np.random.default_rng(6), 4)
    bqm = IsingModel(h, J).to_bqm()
    sampler = DQASampler()
    ss = sampler.sample(bqm, num_reads=50, seed=3, beta=0.5)
    assert len(ss) == 50 and ss.info["seed"] == 3 and ss.info["calibrate"]
    assert abs(ss.info["beta_h_state"] - 0.5) <= 0.05 * 0.5
    dimod.testing.assert_sampleset_energies(ss, bqm)
    again = sampler.sample(bqm, num_reads=50, seed=3, beta=0.5)
    np.testing.assert_array_equal(ss.record.sample, again.record.sample)
    other = sampler.sample(bqm, num_reads=50, seed=4, beta=0.5)
    assert not np.array_equal(ss.record.sample, other.record.sample)
    binary = sampler.sample(bqm.binary, num_reads=5, seed=0)
    assert binary.vartype is dimod.BINARY and set(np.unique(binary.record.sample)) <= {0, 1}
    dimod.testing.assert_sampleset_energies(binary, bqm.binary)
    assert "num_reads" in sampler.parameters and "seed" in sampler.parameters
    assert sampler.properties["max_num_variables"] == 20


def test_sampler_rejects_too_many_variables_and_bad_parameters():
    bqm = dimod.BinaryQuadraticModel({i: 0.1 for i in range(21)}, {}, 0.0, dimod.SPIN)
    with pytest.raises(TooManySpinsError, match="20 variables"):
        DQASampler().sample(bqm)
    with pytest.raises(IsingInputError, match="beta"):
        DQASampler().sample(bqm, beta=-1.0)
    with pytest.raises(IsingInputError, match="unknown"):
        DQASampler(temperature=1.0)
    with pytest.raises(IsingInputError, match="target beta"):
        DQASampler().sample(dimod.BQM({"a": 1.0}, {}, 0.0, "SPIN"), calibrate=True)
