"""End to end: `isingattn train brackets` writes a table that agrees with its own logs,
and training beats chance on a held-out set."""

import json
import os

import numpy as np

from isingattn.cli import main


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
