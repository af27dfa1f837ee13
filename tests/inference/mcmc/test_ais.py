"""Annealed importance sampling (isingattn.inference.mcmc.ais) against independent references:
float64 brute force for small models, Kaufman's exact partition function of the torus
(isingattn.onsager, itself tested against brute force), and statistics over keys computed
here (never the estimator's own claim of its accuracy)."""

import jax
import numpy as np
import pytest

from isingattn import IsingInputError, IsingModel
from isingattn.inference.mcmc import AIS
from isingattn.instances import random_model
from isingattn.testing import brute_force


def _small(seed=0, n=6, beta=1.0):
    h, J = random_model(np.random.default_rng(seed), n, h_scale=0.5)
    return h, J, IsingModel(h, J, beta=beta)


def test_z_is_unbiased_over_keys():
    """E[Ẑ] = Z: the mean over 64 keys of Ẑ/Z is 1 within 4 standard errors of that mean
    (the spread over keys, computed here). A short anneal makes the weights vary, so the
    test has power: log Ẑ alone is visibly biased low."""
    h, J, model = _small()
    ref = brute_force(h, J, 1.0)["log_z"]
    eng = AIS(num_chains=8, num_temps=8)
    ratios = np.array([np.exp(float(eng.marginals(model, key=jax.random.key(k)).log_z) - ref) for k in range(64)])
    se = ratios.std(ddof=1) / np.sqrt(len(ratios))
    assert abs(ratios.mean() - 1) <= 4 * se, (ratios.mean(), se)
    assert se < 0.05  # the test resolves a bias of a few percent


def test_standard_error_is_honest_and_marginals_agree():
    """Over 24 keys, z = (log Ẑ - log Z) / SE behaves like a standard normal: mean(z²) within
    the central 99.8% of χ²₂₄/24. Marginals within 4 standard errors from the weights' ESS."""
    h, J, model = _small(seed=1, n=8, beta=1.2)
    ref = brute_force(h, J, 1.2)
    eng = AIS(num_chains=64, num_temps=24)
    z, errs = [], []
    for k in range(24):
        out = eng.marginals(model, key=jax.random.key(100 + k))
        z.append((float(out.log_z) - ref["log_z"]) / float(out.info["log_z_se"]))
        p = np.asarray(out.info["weights"])
        ess = 1.0 / np.sum(p**2)  # Kish, from the raw weights
        s = np.asarray(out.samples)
        sd = np.sqrt(np.maximum(1 - ref["mean"] ** 2, 1e-12))
        errs.append(np.abs(np.asarray(out.mean) - ref["mean"]) / (sd / np.sqrt(ess)))
        assert s.shape == (64, 8)
    m2 = np.mean(np.square(z))
    assert 0.4 <= m2 <= 2.0, (m2, z)
    assert np.max(errs) <= 4.5, np.max(errs)  # 192 spin-estimates: the largest |z| of normals stays below 4.5


def test_batched_masked_and_sparse_agree_with_brute_force():
    rng = np.random.default_rng(3)
    h = rng.normal(0, 0.5, (2, 7))
    _, J = random_model(rng, 7, graph="chain", J_scale=0.8)
    mask = np.ones((2, 7), bool)
    mask[1, [2, 5]] = False
    model = IsingModel(h, J, beta=1.0, mask=mask)
    ref = np.array([brute_force(h[b], J, 1.0, mask[b])["log_z"] for b in range(2)])
    out = AIS(num_chains=256, num_temps=64).marginals(model, key=jax.random.key(5))
    assert out.log_z.shape == (2,) and out.info["log_z_se"].shape == (2,)
    se = np.asarray(out.info["log_z_se"])
    assert np.all(np.abs(np.asarray(out.log_z) - ref) <= 4 * se + 1e-9), (np.asarray(out.log_z) - ref, se)
    assert np.all(np.asarray(out.mean)[1, [2, 5]] == 0)
    sparse = AIS(num_chains=256, num_temps=64).marginals(model.sparsified(), key=jax.random.key(5))  # coloured sweeps
    se = np.asarray(sparse.info["log_z_se"])
    assert np.all(np.abs(np.asarray(sparse.log_z) - ref) <= 4 * se + 1e-9), (np.asarray(sparse.log_z) - ref, se)


def test_gradient_of_log_z_is_beta_times_the_weighted_mean():
    h, J, model = _small(seed=2)
    eng = AIS(num_chains=32, num_temps=8)
    key = jax.random.key(1)
    g = jax.grad(lambda hh: eng.marginals(IsingModel(hh, J, 0.7), key=key).log_z)(h)
    out = eng.marginals(IsingModel(h, J, 0.7), key=key)
    np.testing.assert_allclose(np.asarray(g), 0.7 * np.asarray(out.mean), rtol=1e-10, atol=1e-12)


def test_bad_settings_are_refused():
    with pytest.raises(IsingInputError):
        AIS(num_chains=1)
    with pytest.raises(IsingInputError):
        AIS(num_temps=0)
    with pytest.raises(IsingInputError):
        AIS(spacing="cubic")


def _torus(L, K):
    from isingattn import graphs

    g = graphs.lattice([L, L], periodic=True)
    return IsingModel(np.zeros(g.n), graphs.random_couplings(jax.random.key(0), g, "ferro", 1.0, dtype=np.float64),
                      beta=K)


@pytest.mark.run_bound
@pytest.mark.slow
def test_standard_error_is_honest_on_a_16x16_torus():
    """Over 20 keys on a 16×16 torus at K = 0.35 (disordered), z = (log Ẑ - log Z_Kaufman) / SE:
    mean(z²) within the central 99.8% of χ²₂₀/20 ([0.37, 2.2]); Kaufman's value is tested
    against brute force in tests/core/test_onsager.py."""
    from isingattn import onsager

    ref = float(onsager.torus_log_z(16, 16, 0.35))
    eng = AIS(num_chains=64, num_temps=256)
    model = _torus(16, 0.35)
    z = []
    for k in range(20):
        out = eng.marginals(model, key=jax.random.key(200 + k))
        z.append((float(out.log_z) - ref) / float(out.info["log_z_se"]))
    assert 0.37 <= np.mean(np.square(z)) <= 2.2, z


# At K_c and in the ordered phase the single-spin (Gibbs) anneal leaves a few chains carrying the
# weight and its SE is not honest (off by 2.7 to 72 SE: benchmarks/README.md, "log Z from every
# engine", issue 28): it is not run here, where it would only be an xfail; the Swendsen–Wang
# transition carries the chains through the transition (the cases below).
K_C = 0.4406867935097715


@pytest.mark.run_bound
@pytest.mark.slow
@pytest.mark.parametrize("K, transition", [(0.3, "gibbs"), (K_C, "swendsen-wang"), (0.6, "swendsen-wang")])
def test_log_z_on_a_32x32_torus_agrees_with_kaufman(K, transition):
    from isingattn import onsager

    # Swendsen–Wang: half the chains (its move costs more; 64 × 1024 gave |z| <= 2.8 over 10 keys at K_c and 0.6)
    eng = AIS(num_chains=128 if transition == "gibbs" else 64, num_temps=1024, transition=transition)
    out = eng.marginals(_torus(32, K), key=jax.random.key(7))
    err = float(out.log_z) - float(onsager.torus_log_z(32, 32, K))
    assert abs(err) <= 4 * float(out.info["log_z_se"]), (err, float(out.info["log_z_se"]))


@pytest.mark.run_bound
@pytest.mark.slow
def test_swendsen_wang_transition_standard_error_is_honest_on_a_16x16_torus_at_K_c():
    """As test_standard_error_is_honest_on_a_16x16_torus, at the critical coupling, where the
    Gibbs anneal's SE is not honest: over 16 keys z = (log Ẑ - log Z_Kaufman) / SE has mean(z²)
    within the central 99.8% of χ²₁₆/16 ([0.25, 2.45]). (Over 60 other keys: 0.84.)"""
    from isingattn import onsager

    ref = float(onsager.torus_log_z(16, 16, K_C))
    eng = AIS(num_chains=64, num_temps=256, transition="swendsen-wang")
    model = _torus(16, K_C)
    z = []
    for k in range(16):
        out = eng.marginals(model, key=jax.random.key(200 + k))
        z.append((float(out.log_z) - ref) / float(out.info["log_z_se"]))
    assert 0.25 <= np.mean(np.square(z)) <= 2.45, z


def test_swendsen_wang_transition_batched_masked_sparse_with_fields_agrees_with_brute_force():
    """Ferromagnetic couplings with fields of both signs (the ghost spin's bonds), a masked
    batch member, dense and sparse: log Z within 4 SE of float64 brute force."""
    rng = np.random.default_rng(4)
    h = rng.normal(0, 0.5, (2, 7))
    J = np.abs(random_model(rng, 7, graph="chain", J_scale=0.8)[1])
    J[0, 6] = J[6, 0] = 0.5  # a ring: a loop for the clusters
    mask = np.ones((2, 7), bool)
    mask[1, [2, 5]] = False
    model = IsingModel(h, J, beta=1.0, mask=mask)
    ref = np.array([brute_force(h[b], J, 1.0, mask[b])["log_z"] for b in range(2)])
    eng = AIS(num_chains=256, num_temps=32, transition="swendsen-wang")
    for m in (model, model.sparsified()):
        out = eng.marginals(m, key=jax.random.key(6))
        se = np.asarray(out.info["log_z_se"])
        assert out.log_z.shape == (2,) and np.all(np.asarray(out.info["negative_couplings"]) == 0)
        assert np.all(np.abs(np.asarray(out.log_z) - ref) <= 4 * se + 1e-9), (np.asarray(out.log_z) - ref, se)
        assert np.all(np.asarray(out.mean)[1, [2, 5]] == 0)


def test_swendsen_wang_transition_refuses_negative_couplings_and_unknown_transitions():
    h, J, model = _small()  # random signs
    for m in (model, model.sparsified()):
        with pytest.raises(IsingInputError, match="transition=.swendsen-wang.*negative"):
            AIS(transition="swendsen-wang").marginals(m, key=jax.random.key(0))
    with pytest.raises(IsingInputError, match="transition"):
        AIS(transition="metropolis")
