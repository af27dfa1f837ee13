"""Sample-based gradients against exact gradients, within their Monte Carlo error."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from isingattn import IsingModel
from isingattn.fluctuation import sample_marginals
from isingattn.inference.exact import Exact
from isingattn.testing import brute_force
from isingattn.instances import random_model


def _exact_samples(key, h, J, beta, S):
    """Independent draws from the exact Boltzmann distribution (float64 brute force)."""
    ref = brute_force(h, J, beta)
    idx = jax.random.choice(key, len(ref["probs"]), (S,), p=jnp.asarray(ref["probs"]))
    return jnp.asarray(ref["spins"][np.asarray(idx)])


@pytest.mark.parametrize("rao_blackwell", [False, True])
def test_sample_gradient_matches_exact_within_standard_error(rao_blackwell):
    rng = np.random.default_rng(0)
    n, beta, S, R = 6, 0.8, 4000, 12
    h, J = random_model(rng, n, h_scale=0.5, J_scale=0.6)
    c = jnp.asarray(rng.normal(size=n))

    def loss_exact(h, J, beta):
        return jnp.sum(c * Exact().marginals(IsingModel(h, J, beta)).mean)

    def loss_sampled(h, J, beta, s):
        return jnp.sum(c * sample_marginals(IsingModel(h, J, beta), s, rao_blackwell=rao_blackwell).mean)

    gh, gJ, gb = jax.grad(loss_exact, argnums=(0, 1, 2))(jnp.asarray(h), jnp.asarray(J), beta)
    grad = jax.jit(jax.grad(loss_sampled, argnums=(0, 1, 2)))
    reps = [grad(jnp.asarray(h), jnp.asarray(J), beta, _exact_samples(jax.random.PRNGKey(r), h, J, beta, S))
            for r in range(R)]
    for k, exact in enumerate([gh, gJ, gb]):
        est = np.stack([np.asarray(r[k]) for r in reps])  # R independent estimates
        mean, se = est.mean(0), est.std(0, ddof=1) / np.sqrt(R)
        # the estimator is unbiased up to O(1/S); allow 4 standard errors plus that bias scale
        tol = 4 * se + 4.0 / S
        assert np.all(np.abs(mean - np.asarray(exact)) <= tol), (k, np.abs(mean - exact).max(), tol.max())


def test_sample_marginals_masks_and_corr():
    rng = np.random.default_rng(1)
    s = jnp.asarray(rng.choice([-1.0, 1.0], size=(3, 50, 4)))
    mask = jnp.asarray([[True, True, False, True]] * 3)
    m = sample_marginals(IsingModel(jnp.zeros((3, 4)), jnp.zeros((4, 4)), mask=mask), s)
    ref = np.where(np.asarray(mask)[:, None, :], np.asarray(s), 0)
    np.testing.assert_allclose(m.mean, ref.mean(1), atol=1e-12)
    np.testing.assert_allclose(m.corr, np.einsum("bsj,bsk->bjk", ref, ref) / 50, atol=1e-12)


def test_rao_blackwell_mean_is_unbiased_and_less_noisy():
    rng = np.random.default_rng(2)
    n, beta, S, R = 7, 1.0, 200, 40
    h, J = random_model(rng, n, h_scale=1.5, J_scale=0.5)
    ref = brute_force(h, J, beta)["mean"]
    model = IsingModel(jnp.asarray(h), jnp.asarray(J), beta)
    plain, rb = [], []
    for r in range(R):
        s = _exact_samples(jax.random.PRNGKey(100 + r), h, J, beta, S)
        plain.append(np.asarray(sample_marginals(model, s).mean))
        rb.append(np.asarray(sample_marginals(model, s, rao_blackwell=True).mean))
    plain, rb = np.array(plain), np.array(rb)
    se = rb.std(0, ddof=1) / np.sqrt(R)
    assert np.all(np.abs(rb.mean(0) - ref) <= 4 * se)
    # E[Var(s_a | s_-a)] ≥ 0: the conditional mean never has more variance than s_a
    assert np.all(rb.var(0) <= plain.var(0))


@pytest.mark.parametrize("rao_blackwell", [False, True])
def test_shared_J_gets_the_summed_gradient_without_a_per_query_copy(rao_blackwell):
    """A J shared by Q queries: its gradient is the sum of the per-query gradients (computed
    here with J explicitly copied per query), and the backward pass never forms [Q, n, n]."""
    rng = np.random.default_rng(3)
    Q, n, S = 7, 5, 64
    h = jnp.asarray(rng.normal(size=(Q, n)))
    J = jnp.asarray(random_model(rng, n, J_scale=0.5)[1])
    s = jnp.asarray(rng.choice([-1.0, 1.0], size=(Q, S, n)))
    c = jnp.asarray(rng.normal(size=(Q, n)))

    def loss(J, Jq):
        return jnp.sum(c * sample_marginals(IsingModel(h, Jq if Jq is not None else J, 0.7), s,
                                            rao_blackwell=rao_blackwell).mean)

    shared = jax.grad(lambda J: loss(J, None))(J)
    copied = jax.grad(lambda Jq: loss(None, Jq))(jnp.broadcast_to(J, (Q, n, n)))
    np.testing.assert_allclose(shared, copied.sum(0), rtol=1e-12, atol=1e-12)
    from isingattn import fluctuation  # the estimator itself (Marginals.corr is per query by definition)

    mean = fluctuation._rb_mean if rao_blackwell else fluctuation._mean
    jaxpr = jax.make_jaxpr(jax.grad(lambda J: jnp.sum(c * mean(h, J, jnp.asarray(0.7), s))))(J)
    shapes = {tuple(v.aval.shape) for eqn in jaxpr.jaxpr.eqns for v in eqn.outvars}
    assert (Q, n, n) not in shapes
