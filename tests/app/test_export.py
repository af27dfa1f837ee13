"""`isingattn export-bqm` and `isingattn analyze` on a saved Transformer.

The exported BQM goes through dimod's own serialization to dwave-samplers'
TreeDecompositionSampler; its marginals, turned into attention weights, must equal
the weights the Transformer itself computes for that query."""

import json

import equinox as eqx
import jax
import numpy as np
import pytest

from isingattn.models import checkpoint
from isingattn.cli import main
from isingattn.models.saved import config_to_dict, load_transformer
from isingattn.models.transformer import Config, Transformer

CHARS = "abcdefgh"


def _saved_model(tmp_path, variant="hJ", T=7):
    config = Config(vocab_size=len(CHARS), seq_len=T, n_out=len(CHARS), d_model=16, variant=variant)
    model = Transformer(config, key=jax.random.PRNGKey(1))
    J_raw = jax.random.normal(jax.random.PRNGKey(2), model.attn.J_raw.shape) * 0.8
    model = eqx.tree_at(lambda m: m.attn.J_raw, model, J_raw)
    path = str(tmp_path / "model.npz")
    checkpoint.save(path, model, {"model": config_to_dict(config), "chars": CHARS, "step": 0})
    return model, path


@pytest.mark.parametrize("variant", ["hJ", "h"])
def test_export_bqm_marginals_match_attention(tmp_path, variant):
    dimod = pytest.importorskip("dimod")
    samplers = pytest.importorskip("dwave.samplers")
    model, path = _saved_model(tmp_path, variant)
    text, query = "hgfedcb", 5
    out = str(tmp_path / "q.bqm")
    assert main(["export-bqm", path, "--text", text, "--query", str(query), "--out", out]) == 0
    with open(out, "rb") as f:
        bqm = dimod.BinaryQuadraticModel.from_file(f)
    assert bqm.vartype is dimod.SPIN and sorted(bqm.variables) == list(range(query + 1))
    ss = samplers.TreeDecompositionSampler().sample(bqm, beta=model.config.beta, marginals=True, num_reads=1)
    m = np.array([2 * ss.info["variable_marginals"][j] - 1 for j in range(query + 1)])
    alpha = (1 + m) / 2
    tokens = np.array([[CHARS.index(c) for c in text]])
    _, weights = model(tokens, return_weights=True)  # (1, H, T, T)
    np.testing.assert_allclose(alpha / alpha.sum(), np.asarray(weights)[0, 0, query, : query + 1], atol=2e-5)
    np.testing.assert_allclose(np.asarray(weights)[0, 0, query, query + 1 :], 0.0)


def test_export_bqm_rejects_bad_input(tmp_path):
    _, path = _saved_model(tmp_path)
    out = str(tmp_path / "q.bqm")
    with pytest.raises(ValueError, match="vocabulary"):
        main(["export-bqm", path, "--text", "xyz", "--query", "1", "--out", out])
    with pytest.raises(ValueError, match="query"):
        main(["export-bqm", path, "--text", "abc", "--query", "3", "--out", out])
    with pytest.raises(ValueError, match="1..7"):
        main(["export-bqm", path, "--text", "abcdefgh", "--query", "0", "--out", out])
    bad = tmp_path / "bad.npz"
    bad.write_bytes(b"not a checkpoint")
    with pytest.raises(checkpoint.CheckpointError):
        main(["export-bqm", str(bad), "--text", "abc", "--query", "1", "--out", out])


def test_load_transformer_round_trip(tmp_path):
    model, path = _saved_model(tmp_path)
    loaded, meta = load_transformer(path)
    assert loaded.config == model.config and meta["chars"] == CHARS
    for a, b in zip(jax.tree_util.tree_leaves(model), jax.tree_util.tree_leaves(loaded)):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


def test_analyze_cli(tmp_path, capsys):
    model, path = _saved_model(tmp_path)
    out = tmp_path / "an"
    assert main(["analyze", path, "--out", str(out), "--threshold", "0.1"]) == 0
    s = json.load(open(out / "summary.json"))["head0"]
    J = np.asarray(model.attn.couplings())[0].astype(np.float64)
    T = len(J)
    np.testing.assert_allclose(s["distance_profile"], [np.diag(J, d).mean() for d in range(1, T)], atol=1e-6)
    iu = np.triu_indices(T, 1)
    strong = J[iu][np.abs(J[iu]) > 0.1]
    assert s["edges"] == len(strong)
    assert s["ferro"] == pytest.approx(np.mean(strong > 0))
    assert (out / "J-head0.png").stat().st_size > 0
    assert "mean J by distance" in capsys.readouterr().out
