"""`isingattn evaluate`: a checkpoint scored on its rebuilt held-out set, through its own engine or another.

References: the accuracy the training run recorded through Exact (a different code path: the training
loop, on the set built then), and Banded(T-1), a different exact algorithm, for the engine override."""

import json

import jax
import pytest

from isingattn.models import checkpoint
from isingattn.errors import IsingInputError
from isingattn.inference import get
from isingattn.cli import run
from isingattn.models.app.evaluate import describe, evaluate_checkpoint
from isingattn.models.app.experiments import cell_data, grid, select
from isingattn.models.saved import config_from_dict, load_transformer
from isingattn.models.transformer import Transformer

T8 = "results/reproduce/brackets-hard/T8/model-hJ-s0.npz"  # exact-trained hJ, brackets-hard, T = 8, seed 0


@pytest.fixture(autouse=True)
def _float32():
    with jax.enable_x64(False):  # the committed checkpoints are float32, as users train them
        yield


def test_own_engine_reproduces_the_recorded_accuracy_and_set():
    meta = checkpoint.read_meta(T8)
    r = evaluate_checkpoint(T8)
    assert r["engine"] == "exact" and r["metric"] == "test_acc" and r["seed"] == 0
    assert r["count"] == meta["metrics"]["eval_count"]  # the same held-out positions as in training
    assert r["mean"] == pytest.approx(meta["metrics"]["test_acc"], abs=1e-12)
    assert r["recorded"] == meta["metrics"]["test_acc"]
    assert r["ci95"] is None


def test_engine_override_is_used_and_agrees_with_another_exact_algorithm():
    exact = evaluate_checkpoint(T8, keys=2)
    banded = evaluate_checkpoint(T8, engine=get("banded", bandwidth=7), keys=2)  # exact for full J at T = 8
    assert banded["engine"] == "banded" and banded["engine_spec"]["config"]["bandwidth"] == 7
    assert banded["values"] == pytest.approx(exact["values"], abs=1e-9)
    assert exact["values"][0] == exact["values"][1]  # a deterministic engine ignores the key


def test_a_sampling_engine_differs_by_key_and_repeats_with_the_same_key():
    gibbs = get("gibbs", num_samples=8, num_warmup=4, num_chains=1)
    a = evaluate_checkpoint(T8, engine=gibbs, keys=3)
    b = evaluate_checkpoint(T8, engine=gibbs, keys=3)
    assert a["values"] == b["values"]
    assert len(set(a["values"])) > 1
    assert a["engine"] == "gibbs" and a["ci95"] > 0
    assert "95% CI over 3 keys" in describe(a)


def test_cell_data_builds_the_data_metadata_the_committed_runs_recorded():
    for name in ("brackets-hard/T8", "brackets-hard/T16"):
        cell = select(grid(), name=name)[0]
        spec = checkpoint.read_meta(f"results/reproduce/{name}/model-hJ-s0.npz")["spec"]
        assert cell_data(cell)[2] == spec["data"]


def test_a_checkpoint_of_another_held_out_set_is_refused(tmp_path):
    model, meta = load_transformer(T8)
    meta["metrics"] = {**meta["metrics"], "eval_count": meta["metrics"]["eval_count"] - 1}
    path = str(tmp_path / "other.npz")
    checkpoint.save(path, model, meta)
    with pytest.raises(IsingInputError, match="rebuilt held-out set has 5994"):
        evaluate_checkpoint(path)
    # mid-training, with periodic evaluations on the first 100 examples only: another set, not refused
    limited = {**meta, "step": 300, "spec": {**meta["spec"], "train": {**meta["spec"]["train"], "eval_limit": 100}}}
    checkpoint.save(path, model, limited)
    r = evaluate_checkpoint(path)
    assert r["recorded"] is None and r["count"] == 5994
    for data, needle in (({"task": "brackets"}, "spec.data.chars"), ({**meta["spec"]["data"], "task": "nope"}, "one of"),
                         ({**meta["spec"]["data"], "depth": "3"}, "spec.data.depth")):
        checkpoint.save(path, model, {**meta, "spec": {**meta["spec"], "data": data}})
        with pytest.raises(IsingInputError, match=needle):
            evaluate_checkpoint(path)
    del meta["spec"]
    checkpoint.save(path, model, meta)
    with pytest.raises(IsingInputError, match="predates saved run specs"):
        evaluate_checkpoint(path)
    with pytest.raises(IsingInputError, match="predates saved run specs"):  # a committed checkpoint of that age
        evaluate_checkpoint("results/reproduce/brackets/T8/model-hJ-s0.npz")


def test_a_closed_form_variant_runs_no_engine_and_refuses_one(tmp_path):
    _, meta = load_transformer(T8)
    soft = {**meta["model"], "variant": "softmax"}
    meta = {**meta, "model": soft, "spec": {**meta["spec"], "model": soft}, "metrics": {}}
    path = str(tmp_path / "softmax.npz")
    checkpoint.save(path, Transformer(config_from_dict(soft), key=jax.random.PRNGKey(1)), meta)
    r = evaluate_checkpoint(path)
    assert r["engine"] is None and r["variant"] == "softmax" and "no engine" in describe(r)
    with pytest.raises(IsingInputError, match="no engine runs"):
        evaluate_checkpoint(path, engine=get("exact"))


def test_cli_writes_json_and_refuses_bad_input_with_one_line(tmp_path, capsys):
    out = tmp_path / "r.json"
    assert run(["evaluate", T8, "--engine", "exact", "--json", str(out)]) == 0
    assert "test_acc 99.87%" in capsys.readouterr().out
    saved = json.loads(out.read_text())
    assert saved["checkpoint"] == T8 and saved["count"] == 5994
    for argv, needle in ((["evaluate", str(tmp_path / "missing.npz")], "no checkpoint"),
                         (["evaluate", T8, "--engine-kw", "num_samples=8"], "needs --engine"),
                         (["evaluate", T8, "--engine", "nope"], "unknown engine"),
                         (["evaluate", T8, "--keys", "0"], "positive integer"),
                         (["evaluate", T8, "--data", "x.txt"], "Drop --data")):
        assert run(argv) == 2
        err = capsys.readouterr().err
        assert needle in err and len(err.strip().splitlines()) == 1
