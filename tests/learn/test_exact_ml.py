"""Exact maximum likelihood (fit(method="exact")) on data drawn in the test by brute-force
enumeration from a known n = 12 model: the fitted model's moments (brute force again, not
the engine's) equal the data's, and the error in J shrinks as 1/sqrt(S). And the scores:
log_likelihood against brute force, exact and by AIS."""

import jax
import numpy as np
import pytest

from isingattn import IsingModel, graphs
from isingattn.learn import fit, log_likelihood
from isingattn.sparse import SparseCouplings
from isingattn.testing import brute_force

from _learn_refs import exact_samples, moments, symmetric

N = 12


def _model(seed=0):
    rng = np.random.default_rng(seed)
    h = rng.normal(0, 0.3, N)
    J = np.triu(rng.normal(0, 0.25, (N, N)), 1)
    return h, J + J.T, rng


def test_exact_ml_matches_moments_and_converges_as_one_over_sqrt_S():
    """Three nested data sets (1,000, 4,000, 16,000 samples): every fit matches the data's
    moments to 1e-4 (the tolerance), and the RMS error of J falls about 2x per 4x data
    (the ratio over 16x is 1/4 in expectation; allowed 1/8..1/2)."""
    h, J, rng = _model()
    s = exact_samples(rng, h, J, 16000)
    iu = np.triu_indices(N, 1)
    errs = []
    for S in (1000, 4000, 16000):
        r = fit(s[:S], method="exact", l2=0.0, dtype=np.float64)
        assert r.info["converged"] and r.info["engine"] == "Exact", r.info
        bf = brute_force(np.asarray(r.model.h), np.asarray(r.model.J))
        m, C = moments(s[:S])
        err = max(np.max(np.abs(bf["mean"] - m)), np.max(np.abs(bf["corr"] - C)[iu]))
        assert err <= 1e-4, err
        assert abs(r.info["moment_error"] - err) < 1e-6  # the reported error is the real one
        errs.append(np.sqrt(np.mean((np.asarray(r.model.J)[iu] - J[iu]) ** 2)))
    assert 1 / 8 < errs[2] / errs[0] < 1 / 2, errs
    assert errs[0] > errs[1] > errs[2], errs


def test_exact_ml_on_the_exact_distribution_recovers_the_model():
    """Weights = the model's own probabilities over all 2^n configurations: the maximum
    likelihood is the model itself (to the tolerance)."""
    h, J, _ = _model(1)
    bf = brute_force(h, J, 0.9)
    r = fit(bf["spins"], weights=bf["probs"], method="exact", beta=0.9, l2=0.0, tol=1e-8, dtype=np.float64)
    np.testing.assert_allclose(np.asarray(r.model.J), J, atol=1e-6)
    np.testing.assert_allclose(np.asarray(r.model.h), h, atol=1e-6)
    np.testing.assert_allclose(r.info["log_likelihood"], bf["probs"] @ np.log(bf["probs"]), rtol=1e-10)


def test_banded_exact_ml_on_a_strip():
    """A 3x4 strip with the lattice graph: Banded is cheaper than Exact and is chosen; the
    fitted moments on the graph match the data's (brute force), the other couplings are 0."""
    rng = np.random.default_rng(2)
    g = graphs.lattice((3, 4))
    w = rng.uniform(-0.5, 0.5, g.E)
    h = rng.normal(0, 0.2, g.n)
    s = exact_samples(rng, h, symmetric(12, g.edges, w), 3000)
    r = fit(s, method="exact", graph=g, l2=1e-3, dtype=np.float64, tol=1e-7)
    assert r.info["engine"] == "Banded" and r.info["converged"]
    Jf = np.asarray(r.model.J)
    assert np.all(Jf[symmetric(12, g.edges, np.ones(g.E)) == 0] == 0)
    bf = brute_force(np.asarray(r.model.h), Jf)
    m, C = moments(s)
    # with l2 the stationarity condition is moments + 2 l2 θ / β = data moments
    np.testing.assert_allclose(bf["mean"] + 2e-3 * np.asarray(r.model.h), m, atol=1e-6)
    np.testing.assert_allclose(bf["corr"][g.edges[:, 0], g.edges[:, 1]] + 2e-3 * Jf[g.edges[:, 0], g.edges[:, 1]],
                               C[g.edges[:, 0], g.edges[:, 1]], atol=1e-6)


def test_log_likelihood_exact_and_ais_against_brute_force():
    h, J, rng = _model(3)
    model = IsingModel(h, J, beta=1.1)
    bf = brute_force(h, J, 1.1)
    s = exact_samples(rng, h, J * 1.0, 300, beta=1.1)
    idx = np.array([int("".join("0" if v > 0 else "1" for v in row), 2) for row in s])
    ref = np.log(bf["probs"][idx])
    ll = log_likelihood(model, s, per_sample=True)
    assert ll.kind == "exact" and float(ll.log_z_se) == 0.0
    np.testing.assert_allclose(ll.value, ref, rtol=1e-10)
    np.testing.assert_allclose(log_likelihood(model, s).value, ref.mean(), rtol=1e-10)
    np.testing.assert_allclose(log_likelihood(model, s).sample_se, ref.std() / np.sqrt(300), rtol=1e-8)
    # AIS when asked (n = 12 would be exact): an estimate with a standard error, within 4 SE + 0.02
    est = log_likelihood(model, s, engine="ais", key=jax.random.key(0))
    assert est.kind == "estimate" and est.engine == "AIS" and float(est.log_z_se) > 0
    assert abs(float(est.value) - ref.mean()) <= 4 * float(est.log_z_se) + 0.02, (est, ref.mean())
    # sparse couplings are scored the same way
    sp = IsingModel(h, SparseCouplings(graphs.lattice((3, 4)), np.zeros(17)), beta=1.1)
    np.testing.assert_allclose(log_likelihood(sp, s).value, np.mean(1.1 * s @ h) - np.sum(np.log(2 * np.cosh(1.1 * h))),
                               rtol=1e-10)
