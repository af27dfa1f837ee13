"""End to end: `isingattn train brackets` writes a table that agrees with its own logs,
and training beats chance on a held-out set."""

import json
import os

import equinox as eqx
import numpy as np

from isingattn.cli import main, run


def test_train_brackets_end_to_end(tmp_path, capsys):
    out = str(tmp_path / "run")
    rc = main(["train", "brackets", "--seq-len", "6", "--steps", "300", "--seeds", "2", "--variants", "softmax,h",
               "--d-model", "16", "--types", "2", "--n-train", "400", "--n-test", "100", "--eval-every", "100",
               "--out", out, "--no-progress"])
    assert rc == 0
    for f in ["cell.json", "commands.txt", "metrics.jsonl", "summary.md", "summary.csv", "results.json"]:
        assert os.path.exists(os.path.join(out, f))
    recs = [json.loads(l) for l in open(os.path.join(out, "metrics.jsonl"))]
    final = {(r["variant"], r["seed"]): r["test_acc"] for r in recs if r["step"] == 300}
    assert len(final) == 4 and len(recs) == 12
    results = json.load(open(os.path.join(out, "results.json")))
    for (v, s), acc in final.items():
        assert results[v][str(s)] == acc
    printed = capsys.readouterr().out
    sm = np.mean([final[("softmax", 0)], final[("softmax", 1)]]) * 100
    assert f"| softmax | 2 | {sm:.2f} ±" in printed
    # Chance at a closing bracket of a length-6 word is at most 1/3 (≤ 3 earlier opens
    # to choose from); a trained softmax model must do far better on unseen strings.
    assert min(final[("softmax", 0)], final[("softmax", 1)]) > 0.8


TINY = ["--seq-len", "4", "--types", "2", "--d-model", "8", "--seeds", "1", "--n-train", "40", "--n-test", "20",
        "--eval-every", "2", "--no-progress"]


def test_restart_replaces_a_folder_that_holds_another_configuration(tmp_path, capsys):
    """A second run with another --lr is refused (one line, exit 2); --restart retrains from scratch,
    so its numbers equal those of a fresh run with that --lr in a new folder."""
    out, fresh = str(tmp_path / "run"), str(tmp_path / "fresh")
    base = ["train", "brackets", *TINY, "--variants", "softmax", "--steps", "4"]
    assert run([*base, "--out", out]) == 0
    capsys.readouterr()
    assert run([*base, "--lr", "0.01", "--out", out]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err and "lr" in err and "--restart" in err
    assert run([*base, "--lr", "0.01", "--out", out, "--restart"]) == 0
    assert run([*base, "--lr", "0.01", "--out", fresh]) == 0
    rows = lambda d: [{k: v for k, v in json.loads(l).items() if k != "wall_s"}
                      for l in open(os.path.join(d, "metrics.jsonl"))]
    assert rows(out) == rows(fresh) and len(rows(out)) == 2  # steps 2 and 4, once each


def test_analyze_writes_under_runs_not_next_to_the_checkpoint(tmp_path, capsys, monkeypatch):
    import jax

    from isingattn.models import checkpoint
    from isingattn.models.saved import config_to_dict
    from isingattn.models.transformer import Config, Transformer

    config = Config(vocab_size=4, seq_len=5, n_out=5, d_model=8, variant="hJ")
    model = Transformer(config, key=jax.random.PRNGKey(0))
    J_raw = jax.random.normal(jax.random.PRNGKey(1), model.attn.J_raw.shape)
    model = eqx.tree_at(lambda m: m.attn.J_raw, model, J_raw)
    folder = tmp_path / "results" / "brackets" / "T4"
    path = folder / "ckpt-hJ-s0.npz"
    checkpoint.save(str(path), model, {"model": config_to_dict(config), "step": 0})
    monkeypatch.chdir(tmp_path)
    assert run(["analyze", os.path.relpath(path, tmp_path)]) == 0
    assert sorted(p.name for p in folder.iterdir()) == ["ckpt-hJ-s0.npz"]  # results/ untouched
    an = tmp_path / "runs" / "analyze" / "brackets-T4-ckpt-hJ-s0"
    assert sorted(p.name for p in an.iterdir()) == ["J-head0.png", "summary.json"]
    J = np.asarray(model.attn.couplings())[0].astype(np.float64)
    s = json.load(open(an / "summary.json"))["head0"]
    np.testing.assert_allclose(s["distance_profile"], [np.diag(J, d).mean() for d in range(1, 5)], atol=1e-6)
    assert str(an.relative_to(tmp_path)) in capsys.readouterr().out


def test_train_brackets_hard_passes_its_data_options_to_the_cell(tmp_path, capsys):
    """`train brackets-hard` trains the Cell its flags describe: the same numbers as
    run_cell on that Cell, the task's defaults where a flag is left out, and a bad
    value is one line with exit status 2."""
    from isingattn.models.app.experiments import Cell, run_cell

    flags = ["--seq-len", "7", "--types", "2", "--d-model", "8", "--seeds", "1", "--n-train", "60", "--n-test", "20",
             "--steps", "4", "--eval-every", "2", "--variants", "softmax", "--no-progress"]
    out = tmp_path / "cli"
    assert main(["train", "brackets-hard", *flags, "--nested", "--out", str(out)]) == 0
    cell = json.load(open(out / "cell.json"))
    assert (cell["task"], cell["filler"], cell["split"], cell["interleaved"]) == ("brackets-hard", 0.25, "shape", False)
    same = Cell("brackets-hard", "brackets-hard", 7, variants=("softmax",), seeds=1, steps=4, eval_every=2, d_model=8,
                types=2, n_train=60, n_test=20, interleaved=False)
    assert run_cell(same, str(tmp_path / "api"), progress=False)["softmax"][0] == \
        json.load(open(out / "results.json"))["softmax"]["0"]
    capsys.readouterr()
    for bad, says in ((["--filler", "1.5"], "filler must be"), (["--filler", "0"], "seq_len must be an even"),
                      (["--types", "5"], "--types 5")):
        assert run(["train", "brackets-hard", *flags, *bad, "--out", str(tmp_path / "bad")]) == 2
        err = capsys.readouterr().err.strip()
        assert says in err and len(err.splitlines()) == 1
