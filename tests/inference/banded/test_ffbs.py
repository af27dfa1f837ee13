"""Forward-filtering backward-sampling (``isingattn.inference.banded.ffbs``) against the float64
brute force: the draws' configuration counts pass a chi-square test against the exact
probabilities (the test computes its p-value), with and without a mask, batched, and with a
window wider than the couplings need. Plus the refusals."""

import jax
import numpy as np
import pytest

from isingattn import IsingModel
from isingattn.errors import IsingInputError
from isingattn.graphs import lattice
from isingattn.inference.banded.ffbs import sample_banded
from isingattn.testing import brute_force, chi_square_p

P_MIN = 1e-3  # chi-square p-value below which the draws are rejected


def strip_model(seed, shape=(4, 2)):
    """Random fields and nearest-neighbour couplings on an open lattice strip (row-major order:
    bandwidth ``shape[1]``), float64."""
    g = lattice(shape)
    rng = np.random.default_rng(seed)
    J = np.zeros((g.n, g.n))
    J[g.edges[:, 0], g.edges[:, 1]] = rng.normal(0, 0.6, g.E)
    return rng.normal(0, 0.4, g.n), J + J.T


@pytest.mark.parametrize("bandwidth", [None, 4])
def test_draws_pass_chi_square_against_brute_force(bandwidth):
    h, J = strip_model(0)
    draws = sample_banded(IsingModel(h, J, beta=1.3), key=jax.random.key(1), num_samples=30000, bandwidth=bandwidth)
    assert draws.shape == (30000, 8) and set(np.unique(np.asarray(draws))) == {-1.0, 1.0}
    assert chi_square_p(draws, brute_force(h, J, 1.3)["probs"]) > P_MIN


def test_masked_batched_draws_pass_chi_square():
    h, J = strip_model(2)
    h = np.stack([h, -h])  # two models sharing J
    mask = np.ones((2, 8), bool)
    mask[1, [2, 5]] = False
    draws = np.asarray(sample_banded(IsingModel(h, J, beta=1.0, mask=mask), key=jax.random.key(3), num_samples=30000))
    assert draws.shape == (30000, 2, 8)
    assert (draws[:, 1, ~mask[1]] == 1).all()  # inactive spins are reported as +1
    for b in range(2):
        act = mask[b]
        ref = brute_force(h[b], J, 1.0, act)
        assert chi_square_p(draws[:, b][:, act], ref["probs"]) > P_MIN, b


def test_same_key_same_draws_and_refusals():
    h, J = strip_model(4)
    model = IsingModel(h, J)
    a = sample_banded(model, key=jax.random.key(5), num_samples=10)
    np.testing.assert_array_equal(a, sample_banded(model, key=jax.random.key(5), num_samples=10))
    with pytest.raises(IsingInputError, match="distance 2"):
        sample_banded(model, key=jax.random.key(0), num_samples=10, bandwidth=1)
    with pytest.raises(IsingInputError, match="bandwidth"):
        sample_banded(model, key=jax.random.key(0), num_samples=10, bandwidth=17)
    with pytest.raises(IsingInputError, match="num_samples"):
        sample_banded(model, key=jax.random.key(0), num_samples=0)
    with pytest.raises(IsingInputError, match="causal"):
        sample_banded(IsingModel(np.zeros((8, 8)), J, causal=True), key=jax.random.key(0), num_samples=10)
