"""The relative-position field (``Config.rel_bias``, ``boltzmann_attention(pos_bias=...)``), the
study's control for J as a locality prior: closed forms, finite differences, weight decay and
saved configs."""

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from isingattn.attention import boltzmann_attention
from isingattn.inference.exact import Exact
from isingattn.models import Config, Transformer
from isingattn.models.saved import config_from_dict, config_to_dict
from isingattn.models.train import decay_mask
from isingattn.models.runs import saved_spec

T, D = 5, 4


def _qkvp(seed=0):
    rng = np.random.default_rng(seed)
    q, k, v = (rng.normal(size=(2, T, D)) for _ in range(3))
    return q, k, v, rng.normal(size=(T, T))


def _scores(q, k, P):
    return np.einsum("bid,bjd->bij", q, k) / np.sqrt(D) + P


@pytest.mark.parametrize("variant", ["softmax", "h"])
def test_pos_bias_is_added_to_the_fields(variant):
    q, k, v, P = _qkvp()
    out, w = boltzmann_attention(q, k, v, variant=variant, pos_bias=P, beta=0.7)
    s = _scores(q, k, P)
    causal = np.tril(np.ones((T, T), bool))
    if variant == "softmax":
        e = np.where(causal, np.exp(s - s.max(-1, keepdims=True)), 0.0)
    else:
        e = np.where(causal, 1 / (1 + np.exp(-2 * 0.7 * s)), 0.0)  # (1 + tanh(βh)) / 2
    want = e / e.sum(-1, keepdims=True)
    np.testing.assert_allclose(w, want, rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(out, want @ v, rtol=1e-12, atol=1e-14)


def test_pos_bias_reaches_hJ_and_not_J():
    q, k, v, P = _qkvp(1)
    J = 0.3 * np.triu(np.random.default_rng(2).normal(size=(T, T)), 1)
    J = J + J.T
    _, w = boltzmann_attention(q, k, v, J, variant="hJ", engine=Exact(), pos_bias=P)
    from isingattn import IsingModel  # the reference: Exact's marginals of the fields q·k/sqrt(d) + P, by hand

    h = _scores(q, k, P)
    m = np.asarray(Exact().marginals(IsingModel(h, np.broadcast_to(J, (2, T, T, T)), causal=True)).mean)
    a = np.where(np.tril(np.ones((T, T), bool)), (1 + m) / 2, 0.0)
    np.testing.assert_allclose(w, a / a.sum(-1, keepdims=True), rtol=1e-10, atol=1e-12)
    _, wJ = boltzmann_attention(q, k, v, J, variant="J", engine=Exact(), pos_bias=P)
    _, wJ0 = boltzmann_attention(q, k, v, J, variant="J", engine=Exact())
    np.testing.assert_array_equal(wJ, wJ0)  # J keeps h ≡ 0


def _model(variant="softmax", rel_bias=True, seed=0):
    cfg = Config(vocab_size=5, seq_len=T, n_out=T, d_model=8, n_heads=2, variant=variant, rel_bias=rel_bias)
    m = Transformer(cfg, key=jax.random.PRNGKey(seed))
    if rel_bias:
        r = jnp.asarray(np.random.default_rng(seed + 1).normal(size=(2, T)))
        m = eqx.tree_at(lambda t: t.attn.rel_bias, m, r)
    return m


def test_position_fields_are_rel_bias_by_distance_and_enter_the_fields():
    m = _model("h")
    r = np.asarray(m.attn.rel_bias)
    P = np.asarray(m.attn.position_fields(T))
    for i in range(T):
        for j in range(i + 1):
            np.testing.assert_array_equal(P[:, i, j], r[:, i - j])
    toks = jnp.asarray(np.random.default_rng(3).integers(0, 5, (2, T)))
    off = eqx.tree_at(lambda t: t.attn.rel_bias, m, jnp.zeros_like(m.attn.rel_bias))
    diff = m.attention_fields(toks) - off.attention_fields(toks)  # (B, H, T, T)
    causal = np.tril(np.ones((T, T), bool))
    np.testing.assert_allclose(np.asarray(diff)[..., causal], np.broadcast_to(P, diff.shape)[..., causal], atol=1e-12)
    assert _model(rel_bias=False).attn.rel_bias is None and _model(rel_bias=False).attn.position_fields(T) is None


def test_rel_bias_gradient_matches_finite_differences_and_keeps_causality():
    m = _model("softmax")
    toks = jnp.asarray(np.random.default_rng(4).integers(0, 5, (2, T)))

    def loss(r):
        return jnp.sum(jnp.sin(eqx.tree_at(lambda t: t.attn.rel_bias, m, r)(toks)))

    r0 = m.attn.rel_bias
    g = np.asarray(jax.grad(loss)(r0))
    eps = 1e-6
    for idx in [(0, 0), (0, 2), (1, 4)]:
        e = jnp.zeros_like(r0).at[idx].set(eps)
        fd = (loss(r0 + e) - loss(r0 - e)) / (2 * eps)
        np.testing.assert_allclose(g[idx], fd, rtol=1e-6, atol=1e-9)
    changed = toks.at[:, 3:].set((toks[:, 3:] + 1) % 5)  # a bias by distance still sees no future token
    np.testing.assert_allclose(m(toks)[:, :3], m(changed)[:, :3], atol=1e-12)


def test_rel_bias_is_a_field_bias_for_weight_decay_and_saves_in_the_config():
    params = eqx.filter(_model("hJ"), eqx.is_array)
    for mode, want in (("matrices", False), ("matrices+J", False), ("all", True)):
        mask = decay_mask(params, mode)
        assert mask.attn.rel_bias is want, mode
        assert mask.attn.w_qkv is True
    cfg = _model("hJ").config
    assert config_from_dict(config_to_dict(cfg)) == cfg
    old = {"model": {k: v for k, v in config_to_dict(cfg).items() if k != "rel_bias"}, "train": {}, "seed": 0}
    assert saved_spec(old)["model"]["rel_bias"] is False  # checkpoints from before the field resume as rel_bias off


def test_rel_bias_option_reaches_the_model_config():
    from isingattn.cli import build_parser
    from isingattn.cli import cell_from_args

    for argv, want in ((["--rel-bias"], True), ([], False)):
        args = build_parser().parse_args(["train", "brackets-hard", "--seq-len", "8", *argv])
        cell = cell_from_args(args, "brackets-hard")
        assert cell.rel_bias is want and cell.config("softmax", 7).rel_bias is want
        assert cell.name.endswith("-relbias") is want
