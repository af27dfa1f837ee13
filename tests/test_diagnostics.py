"""isingattn.diagnostics: the one set of MCMC diagnostics that Gibbs and SQA share,
against numpyro's numpy estimators (an independent implementation)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from numpyro.diagnostics import effective_sample_size as np_ess
from numpyro.diagnostics import split_gelman_rubin as np_rhat

from isingattn import diagnostics as D
from isingattn.errors import IsingInputError
from isingattn.inference import gibbs, sqa


def test_gibbs_and_sqa_use_the_one_diagnostics_module():
    assert gibbs.split_gelman_rubin is D.split_gelman_rubin
    assert gibbs.effective_sample_size is D.effective_sample_size
    assert sqa.split_gelman_rubin is D.split_gelman_rubin
    assert not hasattr(sqa, "_split_rhat")


@pytest.mark.parametrize("draws", [1, 2, 3])
def test_too_few_draws_give_nan_for_every_sampler(draws):
    # One convention (was: Gibbs' split R-hat raised for < 4 draws, SQA's gave NaN).
    x = np.random.default_rng(0).normal(size=(4, draws, 3))
    r = np.asarray(D.split_gelman_rubin(x))
    assert r.shape == (3,) and np.isnan(r).all()
    e = np.asarray(D.effective_sample_size(x))
    assert e.shape == (3,) and (np.isnan(e).all() if draws < 2 else np.allclose(e, np_ess(x)))


def test_no_chain_axis_raises():
    with pytest.raises(IsingInputError, match="chains, draws"):
        D.split_gelman_rubin(np.zeros(10))
    with pytest.raises(IsingInputError, match="chains, draws"):
        D.effective_sample_size(np.zeros(10))


def test_mcse_is_std_over_sqrt_numpyro_ess():
    rng = np.random.default_rng(1)
    C, N = 4, 200
    x = np.zeros((C, N, 2))
    e = rng.normal(size=(C, N, 2))
    for t in range(1, N):  # AR(1) chains
        x[:, t] = np.array([0.3, 0.8]) * x[:, t - 1] + e[:, t]
    ess = jax.jit(D.effective_sample_size)(x)
    ref = x.reshape(C * N, 2).std(0) / np.sqrt(np_ess(x))
    np.testing.assert_allclose(np.asarray(D.mcse(x, ess)), ref, rtol=1e-8)


def test_split_rhat_of_reads_as_chains_matches_numpyro_and_known_constants():
    # SQA's use: the energy trace of R reads over T tail sweeps, reads as chains.
    rng = np.random.default_rng(2)
    E = rng.normal(size=(8, 37, 2)).cumsum(1) * 0.1
    const = np.full((8, 37, 1), -3.0)
    x = np.concatenate([E, const, const], -1)
    known = np.array([True, True, True, False])
    r = np.asarray(jax.jit(D.split_gelman_rubin)(x, known))
    np.testing.assert_allclose(r[:2], np_rhat(E), rtol=1e-10)
    assert r[2] == 1.0 and np.isnan(r[3])


def test_field_pinned_is_the_bound_in_its_docstring():
    # spin 0: |h| = 5 > |J| = 0.5 by 4.5, 1 - tanh(4.5) ≈ 2.5e-4 ≤ 1/100; spin 1: |h| < Σ|J|
    h = jnp.array([5.0, 0.1, -2.0])
    J = jnp.array([[0.0, 0.5, 0.0], [0.5, 0.0, 0.3], [0.0, 0.3, 0.0]])
    got = np.asarray(D.field_pinned(h, J, 1.0, 100))
    margin = np.abs(np.asarray(h)) - np.abs(np.asarray(J)).sum(-1)
    ref = (margin > 0) & (1 - np.tanh(margin) <= 1 / 100)
    np.testing.assert_array_equal(got, ref)
    assert got.tolist() == [True, False, False]  # spin 2: margin 1.7, 1 - tanh(1.7) ≈ 0.065 > 0.01
    # an inactive neighbour exerts no field: with spin 1 masked, spin 2's margin is 2.0, not 1.7
    # (1 - tanh(2.0) ≈ 0.036 ≤ 1/20 < 1 - tanh(1.7) ≈ 0.066)
    assert not bool(D.field_pinned(h, J, 1.0, 20)[2])
    assert bool(D.field_pinned(h, J, 1.0, 20, jnp.array([True, False, True]))[2])
