"""Boltzmann attention against closed forms and a float64 brute force."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from isingattn import IsingInputError
from isingattn.attention import boltzmann_attention
from isingattn.inference.exact import Exact
from isingattn.testing import brute_force
from isingattn.instances import random_model


def _qkv(rng, B=2, H=2, T=6, d=4, dtype=np.float64):
    q, k, v = (jnp.asarray(rng.normal(size=(B, H, T, d)), dtype) for _ in range(3))
    return q, k, v


def _scores(q, k):
    q, k = np.asarray(q, np.float64), np.asarray(k, np.float64)
    return np.einsum("bhid,bhjd->bhij", q, k) / np.sqrt(q.shape[-1])


def test_softmax_matches_jax_dot_product_attention():
    rng = np.random.default_rng(0)
    q, k, v = _qkv(rng, dtype=np.float32)
    out, w = boltzmann_attention(q, k, v, variant="softmax", causal=True)
    sw = lambda x: jnp.swapaxes(x, 1, 2)  # jax wants (B, T, N, H)
    ref = sw(jax.nn.dot_product_attention(sw(q), sw(k), sw(v), is_causal=True))
    np.testing.assert_allclose(out, ref, atol=1e-5, rtol=0)
    np.testing.assert_allclose(w.sum(-1), 1.0, atol=1e-6)


@pytest.mark.parametrize("causal", [True, False])
def test_h_variant_is_normalized_sigmoid(causal):
    rng = np.random.default_rng(1)
    q, k, v = _qkv(rng)
    bias = jnp.asarray([0.3, -0.7])  # one per head
    out, w = boltzmann_attention(q, k, v, variant="h", causal=causal, bias=bias, beta=1.0)
    h = _scores(q, k) + np.asarray(bias)[None, :, None, None]
    a = 1 / (1 + np.exp(-2 * h))
    T = h.shape[-1]
    if causal:
        a = a * np.tril(np.ones((T, T)))
    ref_w = a / a.sum(-1, keepdims=True)
    np.testing.assert_allclose(w, ref_w, atol=1e-12)
    np.testing.assert_allclose(out, ref_w @ np.asarray(v), atol=1e-12)


def test_hJ_with_zero_couplings_equals_h_variant():
    rng = np.random.default_rng(2)
    q, k, v = _qkv(rng)
    J = jnp.zeros((2, 6, 6))
    o1, w1 = boltzmann_attention(q, k, v, J, variant="hJ", engine=Exact(), bias=jnp.asarray([0.1, 0.2]))
    o2, w2 = boltzmann_attention(q, k, v, variant="h", bias=jnp.asarray([0.1, 0.2]))
    np.testing.assert_allclose(w1, w2, atol=1e-12)
    np.testing.assert_allclose(o1, o2, atol=1e-12)


@pytest.mark.parametrize("causal", [True, False])
def test_hJ_matches_brute_force(causal):
    rng = np.random.default_rng(3)
    B, H, T = 2, 2, 7
    q, k, v = _qkv(rng, B, H, T)
    J = np.stack([random_model(rng, T, J_scale=0.8)[1] for _ in range(H)])
    beta = 0.7
    out, w = boltzmann_attention(q, k, v, jnp.asarray(J), variant="hJ", engine=Exact(), causal=causal, beta=beta)
    h = _scores(q, k)
    ref = np.zeros((B, H, T, T))
    for b in range(B):
        for hd in range(H):
            for i in range(T):
                vis = np.arange(T) <= i if causal else np.ones(T, bool)
                m = brute_force(h[b, hd, i], J[hd], beta, vis)["mean"]
                a = np.where(vis, (1 + m) / 2, 0)
                ref[b, hd, i] = a / a.sum()
    np.testing.assert_allclose(w, ref, atol=1e-10)
    np.testing.assert_allclose(out, ref @ np.asarray(v), atol=1e-10)


def test_J_variant_is_uniform():
    rng = np.random.default_rng(4)
    q, k, v = _qkv(rng)
    J = jnp.asarray(np.stack([random_model(rng, 6, J_scale=2.0)[1] for _ in range(2)]))
    _, w = boltzmann_attention(q, k, v, J, variant="J", engine=Exact(), causal=True)
    T = 6
    ref = np.tril(np.ones((T, T))) / np.arange(1, T + 1)[:, None]
    np.testing.assert_allclose(w, np.broadcast_to(ref, w.shape), atol=1e-12)


def test_gradient_wrt_J_matches_finite_differences():
    rng = np.random.default_rng(5)
    q, k, v = _qkv(rng, 1, 1, 5, 3)
    A = jnp.asarray(rng.normal(size=(1, 5, 5)) * 0.5)
    sym = lambda A: (A + jnp.swapaxes(A, -1, -2)) / 2 * (1 - jnp.eye(5))
    c = jnp.asarray(rng.normal(size=(1, 1, 5, 3)))

    def f(A):
        out, _ = boltzmann_attention(q, k, v, sym(A), variant="hJ", engine=Exact())
        return jnp.sum(out * c)

    f = jax.jit(f)
    g = jax.jit(jax.grad(f))(A)
    eps = 1e-6
    for (i, j) in [(0, 1), (1, 3), (2, 4), (4, 0)]:
        E = jnp.zeros_like(A).at[0, i, j].set(eps)
        fd = (f(A + E) - f(A - E)) / (2 * eps)
        np.testing.assert_allclose(g[0, i, j], fd, rtol=1e-6, atol=1e-9)


def test_bad_inputs():
    rng = np.random.default_rng(6)
    q, k, v = _qkv(rng)
    with pytest.raises(IsingInputError, match="variant"):
        boltzmann_attention(q, k, v, variant="bogus")
    with pytest.raises(IsingInputError, match="engine"):
        boltzmann_attention(q, k, v, variant="hJ")
    with pytest.raises(IsingInputError, match=r"J must be"):
        boltzmann_attention(q, k, v, jnp.zeros((2, 5, 5)), variant="hJ", engine=Exact())
    with pytest.raises(IsingInputError, match="causal"):
        boltzmann_attention(q, k[..., :4, :], v[..., :4, :], variant="softmax", causal=True)
    with pytest.raises(IsingInputError, match="expected q"):
        boltzmann_attention(q, k[..., :3], v, variant="softmax")
    J = jnp.asarray(rng.normal(size=(2, 6, 6)))  # not symmetric
    with pytest.raises(ValueError, match="symmetric"):
        boltzmann_attention(q, k, v, J, variant="hJ", engine=Exact())


def test_rows_with_no_key_on_fall_back_to_uniform_with_finite_gradients():
    class AllDown:  # an engine whose estimate says every spin is -1 (as a small sample can)
        def marginals(self, model, *, key=None):
            from isingattn import Marginals

            return Marginals(mean=jnp.zeros(model.batch_shape + (model.n,)) - 1 + 0 * model.h)

    rng = np.random.default_rng(7)
    q, k, v = _qkv(rng, 1, 1, 4, 3)
    f = lambda q: boltzmann_attention(q, k, v, jnp.zeros((1, 4, 4)), variant="hJ", engine=AllDown())
    out, w = f(q)
    ref = np.tril(np.ones((4, 4))) / np.arange(1, 5)[:, None]
    np.testing.assert_allclose(w[0, 0], ref, atol=1e-12)
    g = jax.grad(lambda q: f(q)[0].sum())(q)
    assert np.all(np.isfinite(np.asarray(g)))
