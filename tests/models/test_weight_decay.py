"""What AdamW decays: matrices only by default (nanoGPT), J by choice, everything for the
committed grid's runs; each checked against a closed form or the unmasked optimizer."""

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from isingattn.errors import IsingInputError
from isingattn.models.train import TrainConfig, _optimizer
from isingattn.models.transformer import Config, Transformer


def _params(n_layers=1):
    m = Transformer(Config(vocab_size=4, seq_len=6, n_out=6, d_model=8, variant="hJ", n_layers=n_layers),
                    key=jax.random.PRNGKey(0))
    m = jax.tree_util.tree_map(lambda x: x + 0.5 if eqx.is_array(x) else x, m)  # every leaf nonzero (J_raw, biases)
    return eqx.filter(m, eqx.is_array)


def _named(tree):
    return {jax.tree_util.keystr(k): np.asarray(v) for k, v in jax.tree_util.tree_flatten_with_path(tree)[0]}


def _layer(l, *names):
    return {f".blocks[{l}].{n}" for n in names}


EMB = {".tok_emb", ".pos_emb", ".head"}
MATS = ("attn.w_qkv", "attn.w_out", "mlp.w1", "mlp.w2")


@pytest.mark.parametrize("mode,n_layers,decayed", [
    ("matrices", 1, EMB | _layer(0, *MATS)),
    ("matrices+J", 1, EMB | _layer(0, *MATS, "attn.J_raw")),
    ("all", 1, None),
    ("matrices", 2, EMB | _layer(0, *MATS) | _layer(1, *MATS)),
    ("matrices+J", 2, EMB | _layer(0, *MATS, "attn.J_raw") | _layer(1, *MATS, "attn.J_raw")),
    ("all", 2, None)])
def test_zero_gradient_step_decays_exactly_the_chosen_arrays(mode, n_layers, decayed):
    tc = TrainConfig(steps=10, warmup=0, lr=0.1, weight_decay=0.5, weight_decay_on=mode)
    p = _params(n_layers)
    if decayed is not None:  # every array is named above or is a gain/bias that must stay put
        assert decayed < set(_named(p)), sorted(decayed - set(_named(p)))
    opt = _optimizer(tc)
    zeros = jax.tree_util.tree_map(jnp.zeros_like, p)
    updates, _ = opt.update(zeros, opt.init(p), p)
    lr0 = float(optax.warmup_cosine_decay_schedule(0.0, tc.lr, 0, tc.steps, tc.lr * 0.1)(0))
    for name, u in _named(updates).items():
        x = _named(p)[name]
        if decayed is None or name in decayed:  # AdamW with a zero gradient: p <- p - lr * wd * p
            np.testing.assert_allclose(u, -lr0 * tc.weight_decay * x, rtol=1e-6, err_msg=name)
        else:
            np.testing.assert_array_equal(u, 0.0, err_msg=name)


def test_all_is_the_unmasked_optimizer_runs_used():
    tc = TrainConfig(steps=10, warmup=2, weight_decay_on="all")
    sched = optax.warmup_cosine_decay_schedule(0.0, tc.lr, tc.warmup, tc.steps, tc.lr * 0.1)
    old = optax.chain(optax.clip_by_global_norm(tc.grad_clip), optax.adamw(sched, weight_decay=tc.weight_decay))
    new = _optimizer(tc)
    p = _params()
    sa, sb, pa, pb = old.init(p), new.init(p), p, p
    for i in range(4):
        g = jax.tree_util.tree_map(lambda x: jnp.sin(x * (i + 1)), pa)
        ua, sa = old.update(g, sa, pa)
        ub, sb = new.update(g, sb, pb)
        pa, pb = optax.apply_updates(pa, ua), optax.apply_updates(pb, ub)
    for a, b in zip(jax.tree_util.tree_leaves(pa), jax.tree_util.tree_leaves(pb)):
        np.testing.assert_array_equal(a, b)


def test_bad_mode_is_refused():
    with pytest.raises(IsingInputError, match="weight_decay_on"):
        TrainConfig(weight_decay_on="everything")
