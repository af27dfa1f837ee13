"""Bad input to IsingDistribution's sampling and traced log_prob, thermo.scan and to_bqm's index:
a library error that says what was expected (they raised raw TypeErrors, or returned NaN or a
finite log-probability for a non-spin value)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from isingattn.distribution import IsingDistribution
from isingattn.engine import get
from isingattn.errors import IsingInputError, IsingTypeError
from isingattn.model import IsingModel
from isingattn import thermo


@pytest.fixture(scope="module")
def dist():
    J = 0.3 * (jnp.ones((4, 4)) - jnp.eye(4))
    return IsingDistribution(jnp.array([0.1, -0.2, 0.0, 0.3]), J, validate_args=True)


def test_traced_log_prob_follows_numpyros_validate_sample(dist):
    """Under jit a value off {−1, +1}^n gets −inf with validate_args (numpyro's convention), and
    a spin value the exact log-probability (enumerated here)."""
    lp = jax.jit(dist.log_prob)
    assert float(lp(jnp.full(4, 0.5))) == -np.inf
    s = np.array([1.0, -1.0, -1.0, 1.0])
    allspins = np.array(np.meshgrid(*[[-1.0, 1.0]] * 4)).reshape(4, -1).T
    h, J = np.asarray(dist.h), np.asarray(dist.J)
    e = lambda x: x @ h + 0.5 * np.einsum("...i,ij,...j->...", x, J, x)
    ref = e(s) - np.log(np.sum(np.exp(e(allspins))))
    assert float(lp(jnp.asarray(s))) == pytest.approx(ref, rel=1e-12)
    with pytest.raises(IsingInputError, match="spins -1 or \\+1"):
        dist.log_prob(np.full(4, 0.5))  # concrete: always checked


@pytest.mark.parametrize("shape, error", [((2.5,), IsingTypeError), ((-1,), IsingInputError), (3, IsingTypeError)])
def test_sample_shape_is_checked(dist, shape, error):
    with pytest.raises(error, match="sample_shape"):
        dist.sample(jax.random.key(0), shape)


def test_thermo_scan_checks_its_arguments():
    m = IsingModel(jnp.zeros(3), jnp.zeros((3, 3)), beta=1.0)
    with pytest.raises(IsingInputError, match="betas must be"):
        thermo.scan(m, get("exact"), ["a"])
    with pytest.raises(IsingTypeError, match="engine must be an Engine"):
        thermo.scan(m, 3, [1.0])
    masked = IsingModel(jnp.zeros(3), jnp.zeros((3, 3)), beta=1.0, mask=jnp.zeros(3, bool))
    with pytest.raises(IsingInputError, match="no active spin"):
        thermo.scan(masked, get("exact"), [1.0])


def test_to_bqm_index_is_checked():
    b = IsingModel(jnp.zeros((3, 4)), jnp.zeros((3, 4, 4)), beta=1.0)
    with pytest.raises(IsingInputError, match="out of range"):
        b.to_bqm(index=5)
    with pytest.raises(IsingTypeError, match="integer"):
        b.to_bqm(index=1.5)
    assert b.to_bqm(index=-1).num_variables == 4
