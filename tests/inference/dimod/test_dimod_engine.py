"""DimodEngine: dimod samplers at the model's β, against the float64 brute force."""

import dimod
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from isingattn import IsingModel
from isingattn.inference.dimod.engine import DimodEngine
from isingattn.testing import brute_force
from isingattn.instances import random_model

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
    # eager (no host callback) and jit (pure_callback) draw the same reads from the same key
    eager = eng.marginals(IsingModel(jnp.asarray(hs), jnp.asarray(J), beta, mask=mask), key=jax.random.PRNGKey(1))
    np.testing.assert_array_equal(m, eager.mean)
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


def test_gradient_is_the_exact_covariance_within_standard_error():
    """jax.grad through the engine (as training takes it): d⟨s_i⟩/dh_j = β Cov(s_i, s_j), and
    d⟨s_i⟩/dβ = Cov(s_i, -E), against the float64 brute force, with the standard error of a
    sample covariance from exact draws (TreeDecompositionSampler samples exp(-βE) exactly)."""
    rng = np.random.default_rng(3)
    n, beta, reads = 4, 0.7, 4000
    h, J = rng.normal(size=n) * 0.6, random_model(rng, n)[1]
    eng = DimodEngine(dwave.TreeDecompositionSampler(), num_reads=reads)
    key = jax.random.PRNGKey(0)
    jac = np.asarray(jax.jacrev(lambda h: eng.marginals(IsingModel(h, J, beta), key=key).mean)(jnp.asarray(h)))
    ref = brute_force(h, J, beta)
    p, S, m = ref["probs"], ref["spins"], ref["mean"]
    d = S - m
    cov = np.einsum("c,ci,cj->ij", p, d, d)
    # Var of one read's centred product (s_i - m_i)(s_j - m_j), over reads
    var = np.einsum("c,ci,cj->ij", p, d**2, d**2) - cov**2
    se = beta * np.sqrt(var / reads)
    assert np.all(np.abs(jac - beta * cov) <= 4 * se + 1e-3), (jac, beta * cov)
    g_beta = float(jax.grad(lambda b: eng.marginals(IsingModel(h, J, b), key=key).mean.sum())(beta))
    E = -S @ h - 0.5 * np.einsum("ci,ij,cj->c", S, J, S)
    dE = E - p @ E
    x = d.sum(1) * -dE  # one read's contribution to Cov(sum_i s_i, -E)
    se_b = np.sqrt((p @ x**2 - (p @ x) ** 2) / reads)
    assert abs(g_beta - p @ x) <= 4 * se_b + 1e-3, (g_beta, p @ x)
