"""The experiment grid: cells run, resume without retraining, and the generated report
agrees with the run files it is built from."""

import csv
import json

import numpy as np
import pytest

from isingattn.errors import IsingInputError

from isingattn.cli import main
from isingattn.models.app.experiments import Cell, grid, run_cell, select
from isingattn_study.grid_report import write_report

TINY = dict(seeds=2, steps=40, eval_every=20, d_model=16, types=2, n_train=300, n_test=60)


def test_grid_selection_and_errors():
    full = grid()
    assert {c.part for c in full} == {"shakespeare", "brackets", "annealing", "brackets-hard", "annealing-hard", "annealing-qpu",
                                      "confounds", "positional", "depth", "shakespeare-long", "meanfield",
                                      "convergence"}  # issue 32's parts: parts.grid (tests/app/test_parts.py)
    assert len({c.name for c in full}) == len(full)  # every cell has its own folder
    assert sorted({c.seq_len for c in select(full, "shakespeare")}) == [4, 8, 12, 16]
    assert sorted({(c.seq_len, c.ffn) for c in select(full, "brackets")}) == [
        (T, f) for T in (8, 12, 16, 20) for f in (False, True)]
    assert all(c.seeds >= 5 for c in select(full, "brackets")) and all(c.seeds >= 3 for c in full)
    assert {c.engine for c in select(full, "annealing", 12)} == {"dqa", "sqa", "gibbs"}
    with pytest.raises(ValueError, match="--only"):
        select(full, "nope")
    with pytest.raises(IsingInputError, match="--seq-len must be one of 4, 8, 12, 16 for --only shakespeare"):
        select(full, "shakespeare", 20)
    with pytest.raises(IsingInputError, match="--engine must be one of"):
        select(full, engine="nonsense")
    with pytest.raises(IsingInputError, match="no cell matches"):  # each value exists, not together
        select(full, "annealing", 12, ffn=False)
    assert [c.name for c in select(full, name="annealing-qpu/T8-dimod-raw")] == ["annealing-qpu/T8-dimod-raw"]
    with pytest.raises(IsingInputError, match="--cell must name a cell"):
        select(full, name="annealing-qpu/T8")


def test_cells_resume_and_report(tmp_path):
    root = tmp_path / "results"
    cells = [Cell("brackets", "brackets", 6, variants=("softmax", "hJ"), **TINY),
             Cell("annealing", "brackets", 6, variants=("hJ",), engine="meanfield", **TINY)]
    results = [run_cell(c, str(root / c.name)) for c in cells]
    lines = (root / "brackets/T6/metrics.jsonl").read_text().count("\n")
    assert run_cell(cells[0], str(root / cells[0].name)) == results[0]  # resumed: nothing retrained
    assert (root / "brackets/T6/metrics.jsonl").read_text().count("\n") == lines

    text = write_report(str(root))
    res = json.load(open(root / "brackets/T6/results.json"))
    for v in ("softmax", "hJ"):
        assert sorted(res[v]) == ["0", "1"]
    acc = {v: np.array([res[v][s] for s in ("0", "1")]) * 100 for v in res}
    row = next(r for r in csv.DictReader(open(root / "brackets.csv")) if r["T"] == "6")
    assert float(row["hJ"]) == pytest.approx(acc["hJ"].mean())
    assert float(row["hJ_minus_base"]) == pytest.approx((acc["hJ"] - acc["softmax"]).mean())
    assert f"{acc['softmax'].mean():.2f} ±" in text
    # annealing rows are paired against exact-trained hJ of the same T, seeds and steps
    ann = next(csv.DictReader(open(root / "annealing.csv")))
    mf = np.array([json.load(open(root / "annealing/T6-meanfield/results.json"))["hJ"][s] for s in "01"]) * 100
    assert float(ann["hJ_minus_base"]) == pytest.approx((mf - acc["hJ"]).mean())
    for png in ("brackets-curves.png", "J-distance-profile.png", "brackets/T6/attention.png",
                "brackets/T6/J-hJ-s0.png"):
        assert (root / png).stat().st_size > 0
    # the small model-only copy is a checkpoint `isingattn analyze` reads
    assert main(["analyze", str(root / "brackets/T6/model-hJ-s0.npz"), "--out", str(tmp_path / "an")]) == 0


def test_report_only_rebuilds_the_committed_report_from_committed_files(tmp_path, monkeypatch):
    """A fresh clone has no checkpoints (they are not committed): the report must come out
    the same from the files that are, and the committed logs hold no duplicate rows.

    The markdown and CSVs do not depend on the pixels, so the ~100 figures are built but not
    rasterized, and the per-cell heatmaps and attention maps (most of the building time) not
    built at all; test_cells_resume_and_report draws and writes real ones."""
    import shutil
    from pathlib import Path

    from isingattn import analysis, atomic
    from isingattn_study import grid_report

    monkeypatch.setattr(atomic, "savefig", lambda fig, path, **kw: None)
    monkeypatch.setattr(analysis, "plot_couplings", lambda *a, **kw: None)
    monkeypatch.setattr(grid_report, "_draw_attention", lambda *a, **kw: None)

    committed = Path(__file__).parents[2] / "results" / "reproduce"
    root = tmp_path / "reproduce"
    shutil.copytree(committed, root, ignore=shutil.ignore_patterns("ckpt-*.npz", ".lock", ".isingattn-*"))
    write_report(str(root))
    for name in ["README.md"] + [p.name for p in committed.glob("*.csv")]:
        assert (root / name).read_text() == (committed / name).read_text(), name
    for log in committed.glob("*/*/metrics.jsonl"):
        keys = [(r["variant"], r["seed"], r["step"]) for r in map(json.loads, log.read_text().splitlines())]
        assert len(keys) == len(set(keys)), f"duplicate rows in {log}"


@pytest.mark.slow
def test_quick_reproduce_offline_runs_what_needs_no_download(tmp_path, monkeypatch, capsys, request):
    """No network, no --data, no $ISINGATTN_DATA, empty cache: the corpus cells are skipped
    and named with how to enable them; the rest runs, the report is written, exit 0."""
    import urllib.request

    from isingattn.models import shakespeare

    from isingattn.models.app import experiments

    tiny = dict(seeds=1, steps=20, eval_every=20, d_model=8, batch_size=16)
    cells = [Cell("shakespeare", "shakespeare", 4, variants=("softmax",), **tiny),
             Cell("brackets", "brackets", 6, variants=("softmax", "hJ"), types=2, n_train=200, n_test=40, **tiny),
             Cell("annealing", "brackets", 6, variants=("hJ",), types=2, n_train=200, n_test=40, engine="gibbs",
                  engine_kw=(("num_samples", 16), ("num_warmup", 8)), **tiny)]
    try:  # resolved before the environment is emptied; the second half needs it
        corpus = request.getfixturevalue("corpus")
    except pytest.skip.Exception as e:
        corpus, why = None, str(e)
    monkeypatch.setattr(experiments, "grid", lambda quick=False: cells)
    monkeypatch.delenv(shakespeare.ENV, raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "empty-cache"))

    def offline(*a, **k):
        raise OSError("network is unreachable")

    monkeypatch.setattr(urllib.request, "urlopen", offline)
    root = tmp_path / "quick"
    assert main(["reproduce", "--quick", "--out", str(root), "--no-progress"]) == 0
    out = capsys.readouterr().out
    assert "skipped 1 cell(s) that need the Tiny Shakespeare corpus: shakespeare/T4" in out
    assert "--data PATH or set ISINGATTN_DATA=PATH" in out
    assert (root / "README.md").exists() and not (root / "shakespeare" / "T4" / "results.json").exists()
    for c in cells[1:]:
        assert set(json.load(open(root / c.name / "results.json"))) == set(c.variants)
    logs = {c.name: (root / c.name / "metrics.jsonl").read_text() for c in cells[1:]}
    if corpus is None:
        pytest.skip(why)
    assert main(["reproduce", "--quick", "--out", str(root), "--no-progress", "--data", corpus]) == 0
    assert "skipped" not in capsys.readouterr().out
    assert set(json.load(open(root / "shakespeare/T4/results.json"))) == {"softmax"}
    assert {c: (root / c / "metrics.jsonl").read_text() for c in logs} == logs  # finished cells not retrained
    assert (tmp_path / "empty-cache" / "isingattn" / "tinyshakespeare.txt").exists()  # --data cached once
    recorded = (root / "shakespeare/T4/commands.txt").read_text()
    assert "--data $ISINGATTN_DATA" in recorded and corpus not in recorded  # no path outside the repository


def test_every_committed_cell_folder_matches_its_grid_cell():
    """Each committed folder under results/reproduce/<part>/T<T><tail> holds the cell the
    grid declares there (cell.json files written before a Cell field existed read as its
    legacy value), so `reproduce` resumes them instead of refusing them."""
    import os
    import pathlib

    from isingattn.models.app.experiments import _check_cell, grid

    root = os.path.join(str(pathlib.Path(__file__).resolve().parents[2]), "results", "reproduce")
    checked = 0
    for cell in grid():
        folder = os.path.join(root, cell.name)  # the name starts with the part
        if os.path.exists(os.path.join(folder, "cell.json")):
            _check_cell(cell, folder)
            checked += 1
    assert checked >= 18
