"""DimodEngine: dimod samplers at the model's β, against the float64 brute force."""

import dimod
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from isingattn import IsingModel
from isingattn.inference.dimod_engine import DimodEngine
from isingattn.testing import brute_force, random_model

dwave = pytest.importorskip("dwave.samplers")


@pytest.mark.parametrize("sampler,kw", [(dwave.SimulatedAnnealingSampler(), {"num_sweeps": 200}),
                                        (dwave.TreeDecompositionSampler(), {})])
def test_marginals_within_standard_error(sampler, kw):
    rng = np.random.default_rng(0)
    n, beta, reads = 6, 0.8, 3000
    hs = rng.normal(size=(2, n)) * 0.7
    _, J = random_model(rng, n)
    mask = np.array([[True] * n, [True, False, True, True, False, True]])
    eng = DimodEngine(sampler, num_reads=reads, **kw)
    run = jax.jit(lambda h, J, k: eng.marginals(IsingModel(h, J, beta, mask=mask), key=k).mean)
    m = np.asarray(run(jnp.asarray(hs), jnp.asarray(J), jax.random.PRNGKey(1)))
    for b in range(2):
        ref = brute_force(hs[b], J, beta, mask[b])["mean"]
        # reads are independent, so SE = sqrt(Var s / reads) = sqrt((1 - m²) / reads)
        se = np.sqrt((1 - ref**2) / reads)
        assert np.all(np.abs(m[b] - ref) <= 4 * se + 1e-12), (b, m[b], ref)
    assert np.all(m[1, ~mask[1]] == 0)
    # seeded by the key: same key, same samples; another key, other samples
    np.testing.assert_array_equal(m, run(jnp.asarray(hs), jnp.asarray(J), jax.random.PRNGKey(1)))
    if isinstance(sampler, dwave.SimulatedAnnealingSampler):
        assert not np.array_equal(m, run(jnp.asarray(hs), jnp.asarray(J), jax.random.PRNGKey(2)))


def test_sampler_without_temperature_warns():
    h, J = np.zeros(3), np.zeros((3, 3))
    with pytest.warns(UserWarning, match="no temperature"):
        m = DimodEngine(dimod.RandomSampler(), num_reads=10).marginals(IsingModel(h, J), key=jax.random.PRNGKey(0))
    assert not bool(m.info["at_beta"])


def test_requires_key_and_sampler():
    with pytest.raises(ValueError, match="key"):
        DimodEngine(num_reads=2).marginals(IsingModel(np.zeros(2), np.zeros((2, 2))))
    with pytest.raises(TypeError, match="dimod.Sampler"):
        DimodEngine(object())
