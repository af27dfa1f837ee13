"""Config.n_layers: one layer is bit for bit the model of before (parameters, outputs, leaf
order, committed checkpoints); several layers are causal, wired as pre-LN residual blocks,
and differentiated correctly (central finite differences in float64)."""

import json
import os
import pathlib
import sys
import warnings

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from isingattn.errors import IsingInputError, RunFolderError
from isingattn.models.transformer import Config, Transformer

ROOT = str(pathlib.Path(__file__).resolve().parents[2])
DATA = os.path.join(ROOT, "tests", "data")
sys.path.insert(0, DATA)
import make_transformer_reference as ref  # noqa: E402  (the generator of the frozen arrays; same configs)

sys.path.remove(DATA)


def _cfg(**kw):
    base = dict(vocab_size=5, seq_len=6, n_out=6, d_model=8, n_heads=2, n_layers=2)
    base.update(kw)
    return Config(**base)


def _perturb(m, seed=0):
    """Every array leaf plus N(0, 0.3²) noise, so J, field biases and gains are all nonzero."""
    leaves, tree = jax.tree_util.tree_flatten(m)
    rng = np.random.default_rng(seed)
    return jax.tree_util.tree_unflatten(tree, [x + 0.3 * rng.normal(size=x.shape) for x in leaves])


def _tokens(cfg, batch=2, seed=1):
    return jnp.asarray(np.random.default_rng(seed).integers(0, cfg.vocab_size, (batch, cfg.seq_len)))


# -- n_layers = 1 is the old model ---------------------------------------------------------------------------------

@pytest.mark.parametrize("name", list(ref.CASES))
def test_one_layer_is_bit_identical_to_the_model_before_n_layers(name):
    # tests/data/transformer_reference.npz was written by the one-layer Transformer of commit ea047a5: the
    # same key must give the same parameters in the same leaf order (checkpoint.load matches leaves by
    # position) and the same logits, attention weights (B, H, T, T) and fields, bit for bit. Rounding also
    # depends on the XLA build and flags (the default optimization level vs conftest's level 0 moves the
    # initial draws by 1 ulp) and on the CPU XLA compiles for (another x86-64 moved the logits by 1e-15), so
    # under another environment what is left to check is agreement to rounding: any change of key use, leaf
    # order or wiring moves these values by O(1).
    kw, seed = ref.CASES[name]
    stored = np.load(os.path.join(DATA, "transformer_reference.npz"))
    same_build = str(stored["env"]) == ref.environment()
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="Gibbs:")  # 16 samples do not mix; only reproducibility matters
        got = ref.outputs(kw, seed)
    want = {k.split("/", 1)[1]: stored[k] for k in stored.files if k.startswith(name + "/")}
    assert set(got) == set(want)
    for k in want:
        assert got[k].shape == want[k].shape and got[k].dtype == want[k].dtype, k
        if same_build:
            np.testing.assert_array_equal(got[k], want[k], err_msg=k)
        else:
            np.testing.assert_allclose(got[k], want[k], rtol=1e-12, atol=1e-13, err_msg=k)


def test_committed_one_layer_checkpoint_loads_and_evaluates_as_trained():
    # results/reproduce/brackets/T8/model-hJ-s0.npz was trained and evaluated by the one-layer code. Its
    # metadata has no n_layers; loaded now, it must give the J that learned-J.json recorded and the test
    # accuracy its metadata recorded, on the same regenerated test set.
    from isingattn.models.app.experiments import cell_data, grid, select
    from isingattn.models.saved import load_transformer
    from isingattn.models.train import evaluate

    folder = os.path.join(ROOT, "results", "reproduce", "brackets", "T8")  # 97.9%: not at the ceiling
    cell = select(grid(), "brackets", 8, ffn=True)[0]
    _, data_for_seed, _ = cell_data(cell)
    test = data_for_seed(0)[1]
    with jax.enable_x64(False):  # trained in float32, as the command line runs
        model, meta = load_transformer(os.path.join(folder, "model-hJ-s0.npz"))
        J = np.asarray(model.attn.couplings())[0]
        r = evaluate(model, test.tokens, test.targets)
    assert "n_layers" not in meta["model"] and model.config.n_layers == 1 and len(model.blocks) == 1
    learned = json.load(open(os.path.join(folder, "learned-J.json")))["seeds"]["0"]
    np.testing.assert_array_equal(J, np.asarray(learned))
    assert r["count"] == meta["metrics"]["eval_count"]
    assert round(r["acc"] * r["count"]) == round(meta["metrics"]["test_acc"] * r["count"])
    np.testing.assert_allclose(r["loss"], meta["metrics"]["test_loss"], rtol=1e-5)


def test_committed_cell_and_checkpoint_spec_still_match_one_layer():
    # A folder trained before n_layers existed: its cell.json (no "layers") and its run spec (no
    # model.n_layers) are one-layer, so the grid's cell resumes there; a 2-layer cell is refused.
    # (T12, not T8: T8's cell.json also predates J_param, which LEGACY_CELL does not fill in.)
    from isingattn.models.checkpoint import read_meta
    from isingattn.models.app.experiments import _check_cell, cell_data, grid, select
    from isingattn.models.runs import run_spec, saved_spec, spec_differences

    folder = os.path.join(ROOT, "results", "reproduce", "brackets", "T12")
    cell = select(grid(), "brackets", 12, ffn=True)[0]
    assert "layers" not in json.load(open(os.path.join(folder, "cell.json")))
    _check_cell(cell, folder)  # reads only
    import dataclasses

    with pytest.raises(RunFolderError, match="layers: 1 -> 2"):
        _check_cell(dataclasses.replace(cell, layers=2), folder)
    vocab, _, _ = cell_data(cell)
    saved = saved_spec(read_meta(os.path.join(folder, "model-hJ-s0.npz")))
    wanted = run_spec(cell.config("hJ", vocab), cell.train_config(), 0)
    assert wanted["model"]["n_layers"] == 1
    assert spec_differences(saved["model"], wanted["model"]) == []
    assert spec_differences(saved["train"], wanted["train"]) == []


def test_extra_layers_leave_the_first_layer_and_embeddings_as_one_layer_draws_them():
    key = jax.random.PRNGKey(4)
    one, two = Transformer(_cfg(n_layers=1), key=key), Transformer(_cfg(n_layers=2), key=key)
    for get in (lambda m: m.tok_emb, lambda m: m.pos_emb, lambda m: m.head, lambda m: m.blocks[0]):
        for a, b in zip(jax.tree_util.tree_leaves(get(one)), jax.tree_util.tree_leaves(get(two))):
            np.testing.assert_array_equal(a, b)
    # layer 1 has its own draws (no key reused): its matrices differ from layer 0's
    for name in ("w_qkv", "w_out"):
        assert not np.allclose(getattr(two.blocks[0].attn, name), getattr(two.blocks[1].attn, name))
    assert not np.allclose(two.blocks[0].mlp.w1, two.blocks[1].mlp.w1)


def test_first_layer_names_reach_blocks_0_and_tree_at_works_through_them():
    m = Transformer(_cfg(), key=jax.random.PRNGKey(0))
    assert m.attn is m.blocks[0].attn and m.ln1 is m.blocks[0].ln1
    assert m.ln2 is m.blocks[0].ln2 and m.mlp is m.blocks[0].mlp
    new = eqx.tree_at(lambda t: t.attn.J_raw, m, jnp.ones_like(m.attn.J_raw))
    np.testing.assert_array_equal(new.blocks[0].attn.J_raw, 1.0)
    np.testing.assert_array_equal(new.blocks[1].attn.J_raw, 0.0)
    assert Transformer(_cfg(ffn=False), key=jax.random.PRNGKey(0)).mlp is None


@pytest.mark.parametrize("bad", [0, -1, 1.5, True, "2"])
def test_bad_n_layers_is_refused(bad):
    with pytest.raises(IsingInputError, match="n_layers must be a positive integer"):
        _cfg(n_layers=bad)


# -- several layers ----------------------------------------------------------------------------------------------

def test_two_layers_are_two_pre_ln_residual_blocks_in_order():
    # The forward pass composed by hand from the modules: x + attn(ln1(x)), then x + mlp(ln2(x)), layer by layer.
    cfg = _cfg()
    m = _perturb(Transformer(cfg, key=jax.random.PRNGKey(1)))
    toks = _tokens(cfg, batch=3)
    logits, weights = m(toks, return_weights=True)
    B, T, H = 3, cfg.seq_len, cfg.n_heads
    assert logits.shape == (B, T, cfg.n_out) and weights.shape == (B, 2 * H, T, T)
    x = m.tok_emb[toks] + m.pos_emb[:T]
    ws = []
    for b in m.blocks:
        a, w = b.attn(b.ln1(x))
        x = x + a
        x = x + jax.nn.gelu(b.ln2(x) @ b.mlp.w1) @ b.mlp.w2
        ws.append(w)
    np.testing.assert_allclose(logits, m.ln_f(x) @ m.head, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(weights.reshape(B, 2, H, T, T), np.stack(ws, 1), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(weights.sum(-1), 1.0, rtol=1e-12)
    np.testing.assert_array_equal(np.triu(np.asarray(weights), 1), 0.0)  # causal in every layer
    # the fields of layer 1 are those of its input, the output of layer 0
    x0 = m.tok_emb[toks] + m.pos_emb[:T]
    x1, _ = m.blocks[0](x0)
    np.testing.assert_allclose(m.attention_fields(toks, 1), m.blocks[1].attn.fields(m.blocks[1].ln1(x1)),
                               rtol=1e-12, atol=1e-12)
    with pytest.raises(IsingInputError, match="layer must be an integer in 0..1"):
        m.attention_fields(toks, 2)


@pytest.mark.parametrize("variant", ["hJ", "softmax"])
def test_two_layers_are_causal(variant):
    # A change at position t may reach every output at t or later through both layers, never one before t.
    cfg = _cfg(variant=variant)
    m = _perturb(Transformer(cfg, key=jax.random.PRNGKey(2)))
    toks = _tokens(cfg, batch=3)
    for t in (1, 4):
        changed = toks.at[:, t].set((toks[:, t] + 1) % cfg.vocab_size)
        a, b = m(toks), m(changed)
        np.testing.assert_allclose(a[:, :t], b[:, :t], rtol=0, atol=1e-12)
        assert (np.abs(np.asarray(a[:, t:] - b[:, t:])).max(axis=(0, 2)) > 1e-6).all()  # each later position moves


def test_gradient_of_a_second_layer_parameter_matches_finite_differences():
    cfg = _cfg(vocab_size=4, seq_len=5, n_out=5, d_model=4, n_heads=1, ffn_mult=2)
    m = _perturb(Transformer(cfg, key=jax.random.PRNGKey(3)), seed=3)
    toks = _tokens(cfg, batch=2, seed=3)
    targets = jnp.asarray(np.random.default_rng(4).integers(0, cfg.n_out, (2, cfg.seq_len)))

    @eqx.filter_jit
    def loss(model):
        lp = jax.nn.log_softmax(model(toks))
        return -jnp.take_along_axis(lp, targets[..., None], -1).mean()

    g = eqx.filter_grad(loss)(m)
    eps = 1e-6
    for where, idx in ((lambda t: t.blocks[1].attn.J_raw, (0, 3, 1)), (lambda t: t.blocks[1].attn.w_qkv, (2, 5)),
                       (lambda t: t.blocks[1].attn.field_bias, (0,))):
        x = where(m)
        plus = eqx.tree_at(where, m, x.at[idx].add(eps))
        minus = eqx.tree_at(where, m, x.at[idx].add(-eps))
        fd = (float(loss(plus)) - float(loss(minus))) / (2 * eps)
        assert abs(fd) > 1e-4  # the parameter matters: the comparison is not 0 == 0
        np.testing.assert_allclose(float(where(g)[idx]), fd, rtol=1e-6)


def test_query_model_reads_the_chosen_layer():
    from isingattn.models.query_model import query_model

    cfg = _cfg(variant="hJ", vocab_size=4)
    m = _perturb(Transformer(cfg, key=jax.random.PRNGKey(5)))
    meta = {"chars": "([)]"}
    toks = jnp.asarray([[0, 1, 3, 2]])
    for layer in (0, 1):
        ising = query_model(m, meta, "([])", 3, head=1, layer=layer)
        np.testing.assert_array_equal(ising.h, np.asarray(m.attention_fields(toks, layer))[0, 1, 3, :4])
        np.testing.assert_array_equal(ising.J, np.asarray(m.blocks[layer].attn.couplings(4))[1, :4, :4])
    with pytest.raises(IsingInputError, match="--layer must be in 0..1"):
        query_model(m, meta, "([])", 3, layer=2)


def test_layers_option_reaches_the_model_config():
    from isingattn.cli import build_parser
    from isingattn.cli import cell_from_args

    args = build_parser().parse_args(["train", "brackets", "--layers", "2", "--heads", "4", "--d-model", "16"])
    cell = cell_from_args(args, "brackets")
    cfg = cell.config("hJ", 6)
    assert (cell.layers, cfg.n_layers, cfg.n_heads) == (2, 2, 4)
    with pytest.raises(SystemExit):
        build_parser().parse_args(["train", "brackets", "--layers", "0"])
