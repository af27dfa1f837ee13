"""isingattn.marginals.linear_response_corr, the one linear-response rule that Exact,
Banded and MeanField use for ``corr``, against closed forms."""

import jax.numpy as jnp
import numpy as np

from isingattn import energy
from isingattn.marginals import linear_response_corr
from isingattn.testing import all_spins, brute_force


def _exact_mean(J, beta):
    """m(h) [..., n] by enumeration in JAX (differentiable in h)."""
    S = energy.spin_table(J.shape[-1], jnp.float64)

    def mean(h):
        logw = -beta * energy.energy(h[..., None, :], J, S)  # [..., 2^n]
        p = jnp.exp(logw - logw.max(-1, keepdims=True))
        return (p / p.sum(-1, keepdims=True)) @ S

    return mean


def test_two_spins_closed_form_and_brute_force():
    beta, c = 0.7, 0.9
    J = jnp.array([[0.0, c], [c, 0.0]])
    h = jnp.zeros((3, 2)).at[1].set(jnp.array([0.4, -0.2])).at[2].set(jnp.array([1.5, 0.3]))
    f = _exact_mean(J, beta)
    corr = np.asarray(linear_response_corr(f, h, f(h), beta))
    assert corr.shape == (3, 2, 2)
    np.testing.assert_allclose(corr[0, 0, 1], np.tanh(beta * c), rtol=1e-12)  # h = 0: <s0 s1> = tanh(βJ)
    for q in range(3):
        np.testing.assert_allclose(corr[q], brute_force(np.asarray(h[q]), np.asarray(J), beta)["corr"], atol=1e-12)


def test_spin_table_defined_once_in_the_order_of_the_references():
    from _layout import definers

    assert definers("spin_table") == ["isingattn/energy.py"]
    assert definers("spins_from_index") == ["isingattn/energy.py"]
    np.testing.assert_array_equal(energy.spin_table(4, jnp.float64), all_spins(4))
