"""The Transformer: causality, the J parametrization, and h/hJ consistency."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from isingattn.models import Config, Transformer
from isingattn.models.app.report import mean_ci, summary_rows
from isingattn.models.train import masked_xent


def _cfg(**kw):
    base = dict(vocab_size=5, seq_len=6, n_out=6, d_model=8, n_heads=2)
    base.update(kw)
    return Config(**base)


@pytest.mark.parametrize("variant", ["softmax", "hJ"])
def test_causal_future_tokens_do_not_leak(variant):
    m = Transformer(_cfg(variant=variant), key=jax.random.PRNGKey(0))
    m = eqx_set_J(m, np.random.default_rng(0))
    toks = jnp.asarray(np.random.default_rng(1).integers(0, 5, (3, 6)))
    changed = toks.at[:, 4:].set((toks[:, 4:] + 1) % 5)
    a, b = m(toks), m(changed)
    np.testing.assert_allclose(a[:, :4], b[:, :4], atol=1e-12)
    assert np.abs(np.asarray(a[:, 4:] - b[:, 4:])).max() > 1e-6


def eqx_set_J(m, rng):
    import equinox as eqx

    A = jnp.asarray(rng.normal(size=m.attn.J_raw.shape))
    return eqx.tree_at(lambda t: t.attn.J_raw, m, A)


def test_couplings_symmetric_zero_diagonal_and_start_at_zero():
    m = Transformer(_cfg(), key=jax.random.PRNGKey(0))
    np.testing.assert_array_equal(m.attn.couplings(), 0.0)
    m = eqx_set_J(m, np.random.default_rng(0))
    J = np.asarray(m.attn.couplings(5))
    assert J.shape == (2, 5, 5)
    np.testing.assert_allclose(J, np.swapaxes(J, -1, -2))
    np.testing.assert_array_equal(np.diagonal(J, axis1=-2, axis2=-1), 0.0)
    A = np.asarray(m.attn.J_raw)[:, :5, :5]
    np.testing.assert_allclose(J[:, 0, 1], (A[:, 0, 1] + A[:, 1, 0]) / 2)


def test_hJ_at_initialization_equals_h_variant():
    # J starts at zero, so the Ising marginals are independent spins: hJ == h exactly.
    toks = jnp.asarray(np.random.default_rng(2).integers(0, 5, (2, 6)))
    a = Transformer(_cfg(variant="hJ"), key=jax.random.PRNGKey(3))(toks)
    b = Transformer(_cfg(variant="h"), key=jax.random.PRNGKey(3))(toks)
    np.testing.assert_allclose(a, b, atol=1e-12)


def test_no_ffn_has_no_mlp_and_bad_config():
    m = Transformer(_cfg(ffn=False), key=jax.random.PRNGKey(0))
    assert m.mlp is None and m.ln2 is None
    with pytest.raises(ValueError, match="variant"):
        _cfg(variant="nope")
    with pytest.raises(ValueError, match="divisible"):
        _cfg(d_model=9)


def test_masked_xent_matches_numpy():
    rng = np.random.default_rng(0)
    logits = rng.normal(size=(2, 4, 3))
    targets = np.array([[-1, 0, 2, -1], [1, -1, -1, 2]])
    loss, correct, count = masked_xent(jnp.asarray(logits), jnp.asarray(targets))
    lp = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
    sel = [(0, 1, 0), (0, 2, 2), (1, 0, 1), (1, 3, 2)]
    np.testing.assert_allclose(loss, -np.mean([lp[b, t, c] for b, t, c in sel]), rtol=1e-12)
    assert int(count) == 4
    assert int(correct) == sum(logits[b, t].argmax() == c for b, t, c in sel)


def test_mean_ci_and_paired_difference():
    m, h = mean_ci([1.0, 2.0, 3.0])
    # t_{0.975, 2} = 0.95 / √(2·0.975·0.025) in closed form
    assert m == 2.0 and abs(h - 0.95 / np.sqrt(2 * 0.975 * 0.025) * 1.0 / np.sqrt(3)) < 1e-12
    rows = summary_rows({"softmax": {0: 0.5, 1: 0.6}, "hJ": {0: 0.6, 1: 0.8}})
    hj = rows[1]
    assert abs(hj["diff_vs_softmax"] - 0.15) < 1e-12
    # t_{0.975, 1} = tan(0.475π) (Cauchy)
    assert abs(hj["diff_ci95"] - np.tan(0.475 * np.pi) * np.std([0.1, 0.2], ddof=1) / np.sqrt(2)) < 1e-12
