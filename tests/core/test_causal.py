"""Causal models solved bucket by bucket (``isingattn.causal``): float64 brute force,
unbucketed runs of the same model as a masked one, and Monte Carlo standard errors."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from isingattn import IsingModel
from isingattn.causal import by_prefix, causal_buckets, prefix_models
from isingattn.marginals import Marginals
from isingattn.testing import brute_force_batch
from isingattn.inference.dqa import DQA
from isingattn.inference.exact import Exact
from isingattn.inference.mcmc import Gibbs, SQA



@pytest.mark.parametrize("n", list(range(1, 41)))
def test_buckets_partition_the_prefix_lengths(n):
    b = causal_buckets(n)
    lengths = [L for lo, hi in b for L in range(lo, hi + 1)]
    assert lengths == list(range(1, n + 1))
    assert len(b) <= 2 + np.log2(n)


def _model(rng, n=7, B=2, J_per_query=False, with_mask=False):
    h = rng.normal(size=(B, n, n))
    J = rng.normal(size=(B, n if J_per_query else 1, n, n)) * 0.5
    J = (J + np.swapaxes(J, -1, -2)) * (1 - np.eye(n))
    mask = rng.random((B, n, n)) > 0.25 if with_mask else None
    return h, J, mask


def _brute(sub, _key):
    r = brute_force_batch(sub.h, sub.J, float(sub.beta), None if sub.mask is None else np.asarray(sub.mask))
    return Marginals(**{k: jnp.asarray(v) for k, v in r.items()})


@pytest.mark.parametrize("J_per_query", [False, True])
@pytest.mark.parametrize("with_mask", [False, True])
def test_by_prefix_equals_brute_force_of_the_whole_model(J_per_query, with_mask):
    h, J, mask = _model(np.random.default_rng(1 + 2 * J_per_query + with_mask), J_per_query=J_per_query,
                        with_mask=with_mask)
    n = h.shape[-1]
    out = by_prefix(_brute, IsingModel(h, J, 0.8, mask, causal=True))
    tri = np.tril(np.ones((n, n), bool))
    ref = brute_force_batch(h, J, 0.8, tri if mask is None else tri & mask)
    for k in ("mean", "corr", "log_z"):
        np.testing.assert_allclose(np.asarray(getattr(out, k)), ref[k], atol=1e-12, err_msg=k)


def test_buckets_get_distinct_keys_from_one_key():
    h, J, _ = _model(np.random.default_rng(0))
    seen = []

    def solve(sub, k):
        seen.append(np.asarray(jax.random.key_data(k)) if jnp.issubdtype(k.dtype, jax.dtypes.prng_key) else np.asarray(k))
        return _brute(sub, k)

    by_prefix(solve, IsingModel(h, J, causal=True), jax.random.PRNGKey(3))
    first = [s.tobytes() for s in seen]
    by_prefix(solve, IsingModel(h, J, causal=True), jax.random.PRNGKey(3))
    assert [s.tobytes() for s in seen[len(first):]] == first  # same key, same bucket keys
    assert len(set(first)) == len(causal_buckets(h.shape[-1]))


def test_exact_gradients_through_buckets_equal_the_unbucketed_masked_solve():
    h, J, mask = _model(np.random.default_rng(5), with_mask=True)
    n = h.shape[-1]
    w = np.random.default_rng(6).normal(size=h.shape)
    tri = np.tril(np.ones((n, n), bool))

    def loss(h, J, causal):
        m = IsingModel(h, J, 0.9, mask if causal else mask & tri, causal=causal)
        return jnp.sum(w * Exact().marginals(m).mean)

    g_bucketed = jax.grad(loss, argnums=(0, 1))(h, J, True)
    g_masked = jax.grad(loss, argnums=(0, 1))(h, J, False)
    for a, b in zip(g_bucketed, g_masked):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), atol=1e-10)


def test_prefix_models_shapes():
    h, J, _ = _model(np.random.default_rng(0), n=9)
    for lo, hi, sub in prefix_models(IsingModel(h, J, causal=True)):
        assert sub.n == hi and sub.batch_shape == (2, hi - lo + 1) and not sub.causal
        assert np.array_equal(np.broadcast_to(sub.active(), (2, hi - lo + 1, hi))[0], np.tril(np.ones((9, 9), bool))[lo - 1 : hi, :hi])


def test_dqa_state_is_the_same_with_and_without_buckets():
    """Inactive qubits stay in |+> and decouple, so the exact |psi|^2 diagnostics (KL to
    the Boltzmann distribution, effective temperatures) agree with the unbucketed run."""
    h, J, _ = _model(np.random.default_rng(2), n=6, B=1)
    tri = np.tril(np.ones((6, 6), bool))
    eng = DQA(calibrate=False, num_shots=8, tau=3.0)
    a = eng.marginals(IsingModel(h, J, 0.5, causal=True), key=jax.random.PRNGKey(0)).info
    b = eng.marginals(IsingModel(h, J, 0.5, tri), key=jax.random.PRNGKey(0)).info
    for k in ("kl", "kl_reverse"):
        np.testing.assert_allclose(np.asarray(a[k]), np.asarray(b[k]), rtol=1e-9, atol=1e-12, err_msg=k)
    # an iterative pseudo-likelihood fit: equal to its stopping tolerance (~1e-8)
    np.testing.assert_allclose(np.asarray(a["beta_h_state"]), np.asarray(b["beta_h_state"]), rtol=1e-6)


@pytest.mark.parametrize("name", ["gibbs", "sqa"])
def test_causal_samplers_within_four_standard_errors_of_exact(name):
    h, J, _ = _model(np.random.default_rng(4), n=6, B=1)
    model = IsingModel(h * 0.7, J, 0.8, causal=True)
    ref = np.asarray(Exact().marginals(model).mean)
    eng = (Gibbs(num_warmup=100, num_samples=1000, num_chains=4) if name == "gibbs"
           else SQA(num_sweeps=50, num_reads=512, thermal_sweeps=30))
    out = eng.marginals(model, key=jax.random.PRNGKey(1))
    again = eng.marginals(model, key=jax.random.PRNGKey(1))
    np.testing.assert_array_equal(np.asarray(out.samples), np.asarray(again.samples))
    samples = np.asarray(out.samples)
    ess = np.asarray(out.info["ess"]) if "ess" in out.info else samples.shape[-2]
    se = samples.std(-2) / np.sqrt(ess)
    err = np.abs(np.asarray(out.mean) - ref)
    active = np.tril(np.ones((6, 6), bool))[None]
    assert np.all(err[~active] == 0)
    assert np.all(err[active] <= 4 * np.maximum(se, 1.0 / samples.shape[-2])[active]), err.max()
