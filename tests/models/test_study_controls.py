"""The study controls' model options against independent references: the position-pair field
(``Config.pair_bias``), dropout, the validation split of brackets, and the MQAR task."""

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from isingattn.errors import IsingInputError
from isingattn.models import brackets, mqar
from isingattn.models.train import decay_mask
from isingattn.models.transformer import Config, Transformer

T = 6


def _pair(variant, pair_bias=True, **kw):
    cfg = Config(vocab_size=5, seq_len=T, n_out=T, d_model=8, n_heads=2, variant=variant, pair_bias=pair_bias, **kw)
    return Transformer(cfg, key=jax.random.PRNGKey(1))


@pytest.mark.parametrize("variant", ["softmax", "h", "hJ"])
def test_pair_field_at_zero_is_the_model_without_it_bit_for_bit(variant):
    tokens = jax.random.randint(jax.random.PRNGKey(2), (3, T), 0, 5)
    on, off = _pair(variant), _pair(variant, pair_bias=False)
    assert on.attn.pair_bias.shape == (2, T, T) and off.attn.pair_bias is None
    assert np.array_equal(np.asarray(on(tokens)), np.asarray(off(tokens)))


def test_pair_field_enters_the_fields_per_head_and_pair_and_gets_gradients():
    m = _pair("h")
    B = jax.random.normal(jax.random.PRNGKey(3), (2, T, T))
    mb = eqx.tree_at(lambda t: t.attn.pair_bias, m, B)
    tokens = jax.random.randint(jax.random.PRNGKey(4), (2, T), 0, 5)
    x = m.ln1(m.embed(tokens))
    np.testing.assert_allclose(np.asarray(mb.attn.fields(x)), np.asarray(m.attn.fields(x) + B[None]), atol=1e-6)

    def loss(b):
        return jnp.sum(eqx.tree_at(lambda t: t.attn.pair_bias, m, b)(tokens) ** 2)

    g = np.asarray(jax.grad(loss)(B))
    causal = np.tril(np.ones((T, T), bool))
    assert np.all(g[:, ~causal] == 0)  # a key after its query is masked: no gradient
    assert np.count_nonzero(g[:, causal]) > 0.9 * g[:, causal].size
    i, j, eps = 4, 2, 1e-3  # one entry by central differences
    e = jnp.zeros_like(B).at[0, i, j].set(eps)
    fd = (loss(B + e) - loss(B - e)) / (2 * eps)
    assert abs(float(fd) - g[0, i, j]) < 1e-2 * max(1.0, abs(float(fd)))


def test_pair_field_is_not_weight_decayed_and_J_variant_ignores_it():
    mask = decay_mask(_pair("softmax"), "matrices")
    assert mask.blocks[0].attn.pair_bias is False and mask.blocks[0].attn.w_qkv is True
    m = _pair("J")
    mb = eqx.tree_at(lambda t: t.attn.pair_bias, m, jnp.ones((2, T, T)))
    tokens = jnp.zeros((1, T), jnp.int32)
    assert np.array_equal(np.asarray(m(tokens)), np.asarray(mb(tokens)))


def test_dropout_only_with_a_key_and_inverted_scaling():
    tokens = jax.random.randint(jax.random.PRNGKey(5), (4, T), 0, 5)
    plain, drop = _pair("softmax", pair_bias=False), _pair("softmax", pair_bias=False, dropout=0.3)
    assert np.array_equal(np.asarray(plain(tokens)), np.asarray(drop(tokens)))  # evaluation: nothing dropped
    k = jax.random.PRNGKey(6)
    assert np.array_equal(np.asarray(plain(tokens, dropout_key=k)), np.asarray(plain(tokens)))  # rate 0
    assert not np.allclose(np.asarray(drop(tokens, dropout_key=k)), np.asarray(drop(tokens)))
    from isingattn.models.transformer import dropout

    x = jnp.ones((200, 200))
    y = np.asarray(dropout(x, 0.25, jax.random.PRNGKey(7)))
    np.testing.assert_allclose(y[y != 0], 1 / 0.75, rtol=1e-6)  # kept entries scaled, so the mean is kept
    assert abs((y == 0).mean() - 0.25) < 0.01
    with pytest.raises(IsingInputError, match="dropout"):
        Config(vocab_size=5, seq_len=T, n_out=T, dropout=1.0)


def _shape_set(tokens, interleaved=True):
    return {r.tobytes() for r in brackets.shapes(tokens, 3, interleaved)}


@pytest.mark.parametrize("seed", [0, 1])
def test_validation_split_holds_unseen_shapes_apart_from_test_and_train(seed):
    kw = dict(filler=0.25, split="shape", interleaved=True)
    key = jax.random.PRNGKey(seed)
    d = brackets.make_data(key, 12, 300, 200, None, 3, n_valid=150, **kw)
    d0 = brackets.make_data(key, 12, 300, 200, None, 3, **kw)
    assert d0.valid is None and len(d.valid.tokens) == 150
    assert np.array_equal(d.train.tokens, d0.train.tokens) and np.array_equal(d.test.tokens, d0.test.tokens)
    v = _shape_set(d.valid.tokens)
    assert not v & _shape_set(d.train.tokens) and not v & _shape_set(d.test.tokens)
    strings = lambda x: {r.tobytes() for r in x}
    assert not strings(d.valid.tokens) & (strings(d.train.tokens) | strings(d.test.tokens))
    assert np.array_equal(d.valid.targets, brackets.match_targets(d.valid.tokens, 3, True))
    s = brackets.make_data(key, 12, 300, 200, None, 3, n_valid=100)  # string split: unseen strings
    assert not strings(s.valid.tokens) & (strings(s.train.tokens) | strings(s.test.tokens))


def test_mqar_every_query_recalls_the_value_paired_with_its_key_brute_force():
    T, N, V = 32, 5, 21
    d = mqar.make_data(jax.random.PRNGKey(0), T, N, V, n_train=300, n_test=50, n_valid=20)
    K = (V - 1) // 2
    for split in (d.train, d.test, d.valid):
        for toks, tg in zip(split.tokens, split.targets):
            context = {}
            for p in range(N):  # the pairs: distinct keys 1..K, values K+1..2K
                k, v = int(toks[2 * p]), int(toks[2 * p + 1])
                assert 1 <= k <= K and K < v <= 2 * K and k not in context
                context[k] = v
            asked = [t for t in range(T) if tg[t] >= 0]
            assert sorted(int(toks[t]) for t in asked) == sorted(context)  # every key queried once
            for t in asked:
                assert t >= 2 * N and tg[t] == context[int(toks[t])] and toks[t + 1] == tg[t]
            rest = [t for t in range(2 * N, T) if t not in asked and t - 1 not in asked]
            assert all(toks[t] == 0 for t in rest)
    assert not np.array_equal(d.train.tokens[:50], d.test.tokens)
    with pytest.raises(IsingInputError, match="T ≥ 4"):
        mqar.check(15, 4, 21)
    with pytest.raises(IsingInputError, match="distinct"):
        mqar.check(64, 11, 21)
