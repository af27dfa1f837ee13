"""Issue 32's parts: their statistics against scipy and by hand, their cells' names and seeds, and a
tiny part run end to end (MQAR scored on a validation split, seeds from seed0, no checkpoints kept)."""

import dataclasses
import json
import math
from pathlib import Path

import numpy as np
import pytest

from isingattn_study import capacity, parts
from isingattn.models.app.experiments import Cell
from isingattn_study.parts import grid, run_cell


def test_the_parts_statistics_match_scipy():
    """The parts' tables use the report's statistics (study/isingattn_study/stats.py): checked here on their inputs."""
    from scipy import stats

    from isingattn.models.app.report import mean_ci
    from isingattn_study.stats import paired_p, sign_test

    rng = np.random.default_rng(0)
    for n in (3, 5, 10):
        d = rng.normal(0.3, 1.0, n)
        w, l, _, p = sign_test(d)
        assert (w, l) == (int((d > 0).sum()), int((d < 0).sum()))
        assert p == pytest.approx(stats.binomtest(w, w + l, 0.5).pvalue)
        assert paired_p(*mean_ci(list(d)), n) == pytest.approx(stats.ttest_1samp(d, 0).pvalue)
    assert sign_test([1, 2, 3, 4, 5])[3] == pytest.approx(0.0625)  # "ahead on every seed" of 5
    assert sign_test([0.0, 1.0])[:2] == (1, 0)  # ties dropped


def test_holm_by_hand():
    from isingattn_study.stats import holm

    ps = [0.01, 0.04, 0.03, math.nan, 0.2]
    # sorted: 0.01*4 = 0.04, 0.03*3 = 0.09, 0.04*2 = 0.08 -> 0.09 (monotone), 0.2*1 = 0.2
    assert holm(ps)[:3] == pytest.approx([0.04, 0.09, 0.09]) and math.isnan(holm(ps)[3])
    assert holm(ps)[4] == pytest.approx(0.2)


def test_part_cells_are_in_the_grid_with_distinct_names():
    names = [c.name for c in grid()]
    assert len(names) == len(set(names))
    mine = [c for c in grid() if c.part in parts.PARTS]
    assert {c.part for c in mine} >= {"pairwise", "seeds10", "tuning", "tuned", "mqar"}
    assert all(c.seed0 == 5 for c in mine if c.part == "seeds10")
    assert len([c for c in mine if c.part == "tuning" and c.seq_len == 16]) == len(parts.SWEEP) == 12
    assert len([c for c in mine if c.part == "tuning" and c.seq_len == 64]) == 12
    assert all(c.heldout == "valid" for c in mine if c.part == "tuning")
    pair = [c for c in mine if c.part == "pairwise"]
    assert all(set(c.variants) == {"softmax", "h"} for c in pair if c.pair_bias)
    assert all(c.variants == ("hJ",) for c in pair if not c.pair_bias)  # hJ rerun under today's code


def test_param_counts_add_J_for_hJ_only():
    rows = capacity.param_counts()
    assert len(rows) == 2 * 3 * 2 * 2
    r = next(r for r in rows if (r["T"], r["d_model"], r["layers"], r["heads"]) == (16, 64, 1, 1))
    assert r["J"] == 16 * 16 and r["hJ"] - r["softmax/h"] == r["J"]
    r64 = next(r for r in rows if (r["T"], r["d_model"], r["layers"], r["heads"]) == (64, 32, 2, 4))
    assert r64["J"] == 2 * 4 * 9  # toeplitz, band 8: 9 weights per head and layer


def test_a_tiny_mqar_part_cell_runs_on_validation_from_seed0_and_writes_its_readme(tmp_path):
    tiny = dict(steps=20, eval_every=10, d_model=8, batch_size=8, n_train=64, n_test=16, layers=2)
    cell = Cell("mqar", "mqar", 16, variants=("softmax", "h"), seeds=2, seed0=3, pairs=2, mqar_vocab=9,
                heldout="valid", **tiny)
    out = tmp_path / "mqar" / cell.name.split("/", 1)[1]
    res = run_cell(cell, str(out), progress=False)
    assert set(res["softmax"]) == {3, 4} and not list(out.glob("ckpt-*.npz"))
    rows = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    assert {r["eval_count"] for r in rows} == {16 * 2}  # 16 validation strings, 2 queries each
    again = run_cell(cell, str(out), progress=False)  # resumed from the log alone: nothing retrained
    assert again == res and len((out / "metrics.jsonl").read_text().splitlines()) == len(rows)
    text = (tmp_path / "mqar" / "README.md").read_text()
    assert "hJ − softmax" in text and "(n=2)" in text and "Still training" not in text
    assert "**Not yet run**" in text and "mqar/T256-toeplitz8-2x1-n16-v65-d32" in text  # none of the grid's are here
    (out / "results.json").unlink()  # as a cell still training: its finished runs are read from the log
    text = parts.write_part(str(tmp_path), "mqar")
    assert "Still training" in text and "(n=2)" in text
    # compute: the cell's wall_time.json; killed before it wrote one, its 4 runs' time as the log has it
    assert parts.compute(str(tmp_path))["mqar"] == (4, json.load(open(out / "wall_time.json"))["seconds"], 1)
    (out / "wall_time.json").unlink()
    seconds = sum(max(r["wall_s"] for r in rows if (r["variant"], r["seed"]) == k)
                  for k in {(r["variant"], r["seed"]) for r in rows})
    assert parts.compute(str(tmp_path))["mqar"] == (4, pytest.approx(seconds, rel=1e-12), 1)
    line = next(x for x in parts.compute_table(str(tmp_path)).splitlines() if x.startswith("| 6 | mqar |"))
    cols = [c.strip() for c in line.strip("|").split("|")]
    hours = seconds / 3600
    assert cols[3:] == ["4", f"{hours:.1f}", f"{2 * hours:.1f}", "1"]


def test_a_full_J_mqar_cell_pairs_with_the_toeplitz_cells_softmax_and_h_and_shows_while_its_first_run_trains(tmp_path):
    tiny = dict(steps=20, eval_every=10, d_model=8, batch_size=8, n_train=64, n_test=16, layers=2, seeds=2,
                pairs=2, mqar_vocab=9)
    base = Cell("mqar", "mqar", 16, variants=("softmax", "h"), J_param="toeplitz", J_band=2, engine="banded",
                engine_kw=(("bandwidth", 2),), **tiny)
    full = Cell("mqar", "mqar", 16, variants=("hJ",), engine="meanfield", engine_kw=(("method", "tap"),), **tiny)
    other = Cell("mqar", "mqar", 16, variants=("softmax",), pairs=3, mqar_vocab=9, seeds=2,
                 **{k: v for k, v in tiny.items() if k not in ("pairs", "mqar_vocab", "seeds")})
    folder = {c: tmp_path / "mqar" / c.name.split("/", 1)[1] for c in (base, full, other)}
    assert len(set(folder.values())) == 3
    ran = {c: run_cell(c, str(folder[c]), progress=False) for c in (base, other)}
    folder[full].mkdir(parents=True)  # started: its cell.json written, no run finished yet
    (folder[full] / "cell.json").write_text(json.dumps(dataclasses.asdict(full)))
    text = parts.write_part(str(tmp_path), "mqar")
    assert f"**Still training** (their finished runs only are shown): mqar/{folder[full].name}" in text
    ran[full] = run_cell(full, str(folder[full]), progress=False)
    text = parts.write_part(str(tmp_path), "mqar")
    section = text.split("through meanfield tap")[1].split("###")[0]
    # softmax and h from the toeplitz cell of the same pairs and vocabulary, not the 3-pair cell's softmax
    d = [100 * (ran[full]["hJ"][s] - ran[base]["softmax"][s]) for s in (0, 1)]
    assert f"| hJ − softmax | 2 (0–1) | {np.mean(d):.2f} ± " in section
    assert "softmax and h are the runs of the same seeds in the toeplitz cell" in section


def test_compare_rows_pairs_by_common_seeds_by_hand():
    from isingattn_study.pairing import compare_rows

    a = {0: 0.90, 1: 0.95, 2: 0.80, 7: 0.5}  # seed 7 has no partner: left out
    b = {0: 0.88, 1: 0.90, 2: 0.81}
    text = compare_rows([("a − b", a, b)])
    d = np.array([2.0, 5.0, -1.0])  # points
    half = 4.302652729911275 * d.std(ddof=1) / np.sqrt(3)  # t(0.975, 2)
    assert "| a − b | 3 (0–2) |" in text and f"{d.mean():.2f} ± {half:.2f}" in text and "| 2/1 |" in text


def test_compare_rows_gives_no_test_for_one_seed_and_leaves_it_out_of_holm():
    from isingattn_study.pairing import compare_rows

    one = compare_rows([("one", {7: 0.5}, {7: 0.4}), ("three", {0: 0.9, 1: 0.95, 2: 0.8}, {0: 0.88, 1: 0.9, 2: 0.81})])
    assert "| one | 1 (7–7) | 10.00 | — | — | 1/0 |" in one
    alone = compare_rows([("three", {0: 0.9, 1: 0.95, 2: 0.8}, {0: 0.88, 1: 0.9, 2: 0.81})])
    assert one.splitlines()[-1] == alone.splitlines()[-1]  # Holm over one test, not two


def test_capacity_cells_name_their_width():
    cap = [c for c in grid() if c.part == "capacity"]
    assert len({c.name for c in cap}) == len(cap) == len(parts.CAPACITY) + len(parts.CAPACITY64)
    assert len(parts.CAPACITY) == 10  # 12 shapes at T = 16, 2 in other parts (brackets-hard, depth)
    assert {(c.d_model, c.layers, c.heads) for c in cap}.isdisjoint({(64, 1, 1), (64, 2, 4)})
    assert "capacity/T16-d32" in {c.name for c in cap} and "capacity/T16-2x4-d128" in {c.name for c in cap}
    assert all(c.engine == "banded" and c.J_param == "toeplitz" for c in cap if c.seq_len == 64)
    assert all(c.d_model == 64 for c in grid() if c.part not in ("capacity", "mqar"))  # older names unchanged


def test_a_diverged_variant_is_not_retried(monkeypatch, tmp_path):
    """A (cell, variant) in DIVERGED is dropped when its cell runs again; the other variants still run."""
    cell = Cell("tuning", "brackets-hard", 16, variants=("softmax", "h", "hJ"), seeds=1, lr=1e-2)
    ran = []
    monkeypatch.setattr(parts, "cells", lambda: [cell])
    monkeypatch.setattr(parts, "run_cell", lambda c, out, **kw: ran.append(c.variants))
    monkeypatch.setattr(parts, "write_part", lambda root, part: None)
    monkeypatch.setattr(parts, "DIVERGED", {(cell.name, "h"): 5})
    parts.main(["--cell", cell.name, "--root", str(tmp_path)])
    parts.main(["--cell", cell.name, "--root", str(tmp_path), "--variants", "h"])  # nothing left to run
    assert ran == [("softmax", "hJ")]


def test_a_variant_dropped_after_it_diverged_keeps_its_finished_seeds(tmp_path):
    """A finished cell whose results.json lacks a variant that diverged on a later seed: the seeds that variant
    finished come from metrics.jsonl (in the task's metric), results.json wins where both hold a run, and the
    README pairs hJ with them and counts them as finished runs."""
    from isingattn.models.app.cells import load_cells

    def write(cell, results, logged):
        folder = tmp_path / cell.name
        folder.mkdir(parents=True)
        (folder / "cell.json").write_text(json.dumps(dataclasses.asdict(cell)))
        (folder / "results.json").write_text(json.dumps(results))
        rows = [{"step": step, "variant": v, "seed": s, "wall_s": 60.0 * step / cell.steps, **metric}
                for (v, s), metric in logged.items() for step in (cell.steps // 2, cell.steps)]
        rows.append({"step": cell.steps // 2, "variant": "h", "seed": 2, "wall_s": 30.0, "test_acc": 0.9})  # diverged
        (folder / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))

    mq = Cell("mqar", "mqar", 16, variants=("softmax", "hJ"), seeds=3, steps=20, pairs=2, mqar_vocab=9, d_model=8)
    acc = {v: {0: a, 1: a + 0.02, 2: a + 0.01} for v, a in (("softmax", 0.30), ("hJ", 0.40))}
    write(mq, {v: {str(s): x for s, x in r.items()} for v, r in acc.items()},
          {**{(v, s): {"test_acc": x} for v, r in acc.items() for s, x in r.items()},
           ("h", 0): {"test_acc": 0.37}, ("h", 1): {"test_acc": 0.41}})
    sh = Cell("shakespeare", "shakespeare", 4, variants=("hJ",), seeds=1, steps=20)
    write(sh, {"hJ": {"0": 5.0}}, {("hJ", 0): {"test_ppl": 9.0, "test_acc": 0.1},
                                   ("h", 0): {"test_ppl": 6.5, "test_acc": 0.2}})
    got = {str(Path(c["folder"]).relative_to(tmp_path)): c["results"] for c in load_cells(str(tmp_path))}
    assert got[mq.name] == {**acc, "h": {0: 0.37, 1: 0.41}}  # h's seed 2 did not finish
    assert got[sh.name] == {"hJ": {0: 5.0}, "h": {0: 6.5}}  # perplexity, and results.json's hJ
    text = parts.write_part(str(tmp_path), "mqar")
    d = [100 * (acc["hJ"][s] - h) for s, h in ((0, 0.37), (1, 0.41))]
    assert f"| hJ − h | 2 (0–1) | {np.mean(d):.2f} ± " in text and "(n=2)" in text
    assert parts.compute(str(tmp_path))["mqar"][0] == 8  # 3 softmax, 3 hJ, 2 h
