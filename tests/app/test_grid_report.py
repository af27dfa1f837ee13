"""Issue 13's cells in the grid and their report: which cells pair against which, and the
headline figure's numbers, checked against numpy on synthetic run files."""

import dataclasses
import json

import numpy as np
import pytest

from isingattn_study import headline
from isingattn.models.app.experiments import BAND, Cell, grid, select
from isingattn.models.app.cells import baseline, load_cells
from isingattn_study.grid_report import _rows, _sample_tokens, write_report
from isingattn.models.app.report import mean_ci


def test_study_cells_are_declared_as_issue_13_asks():
    cells = grid()
    hard = select(cells, "brackets-hard")
    exact = {(c.seq_len, c.ffn) for c in hard if c.engine == "exact"}
    assert exact == {(T, f) for T in (8, 16, 24) for f in (True, False)}
    assert all(c.seeds == 5 and c.weight_decay_on == "matrices" for c in hard)
    long = [c for c in hard if c.seq_len == 64]
    assert {(c.J_param, c.ffn) for c in long} == {(p, f) for p in ("toeplitz", "banded") for f in (True, False)}
    assert all(c.engine == "banded" and dict(c.engine_kw) == {"bandwidth": BAND} and c.J_band == BAND for c in long)
    assert {c.engine for c in select(cells, "annealing-hard")} == {"gibbs", "sqa", "dqa"}
    assert [c.weight_decay_on for c in select(cells, "confounds")] == ["matrices+J"]
    qpu = select(cells, "annealing-qpu")
    assert sorted(c.name for c in qpu) == ["annealing-qpu/T8-dimod-cal", "annealing-qpu/T8-dimod-cal-rb",
                                           "annealing-qpu/T8-dimod-raw"]
    assert all(dict(c.engine_kw)["sampler"] == "hidden-beta:2.5" for c in qpu)
    assert {(c.seq_len, c.layers, c.heads) for c in select(cells, "depth")} == {(16, 2, 4), (64, 2, 4)}
    pos = select(cells, "positional")
    assert [c.name for c in pos] == ["positional/T64-toeplitz8-relbias"] and pos[0].variants == ("softmax", "hJ", "h")
    assert pos[0].config("hJ", 7).rel_bias and not select(cells, "brackets-hard", 64)[0].config("hJ", 7).rel_bias
    lm = select(cells, "shakespeare-long")
    assert {c.seq_len for c in lm} == {16, 32, 64, 128, 256} and all(c.steps == 2000 and c.seeds == 3 for c in lm)
    conv = select(cells, "convergence")  # the T = 64 toeplitz cell, trained 3x as long
    assert [(c.name, c.steps, c.variants) for c in conv] == [("convergence/T64-toeplitz8", 6000, ("softmax", "hJ", "h"))]
    assert dataclasses.replace(conv[0], part="shakespeare-long", steps=2000, eval_every=100) in lm
    mf = select(cells, "meanfield")
    assert {(c.seq_len, dict(c.engine_kw)["method"]) for c in mf} == {(16, "tap"), (16, "bp"), (32, "tap"), (32, "bp"),
                                                                       (64, "tap")}
    for c in cells:  # every model builds: Banded is wide enough for each J, and every tail names what differs
        for v in c.variants:
            c.config(v, 65)
    assert Cell("x", "brackets-hard", 16, layers=2, heads=4, weight_decay_on="matrices+J").name == "x/T16-2x4-decayJ"


def _fake_cell(root, cell, results, steps=(50, 100)):
    """A finished cell's files as run_cell leaves them (without checkpoints)."""
    folder = root / cell.name
    folder.mkdir(parents=True)
    (folder / "cell.json").write_text(json.dumps(dataclasses.asdict(cell)))
    (folder / "results.json").write_text(json.dumps({v: {str(s): x for s, x in r.items()} for v, r in results.items()}))
    (folder / "wall_time.json").write_text('{"seconds": 1.0}')
    key = "test_ppl" if cell.task == "shakespeare" else "test_acc"
    with open(folder / "metrics.jsonl", "w") as f:
        for v, r in results.items():
            for s, x in r.items():
                for st in steps:
                    f.write(json.dumps({"variant": v, "seed": s, "step": st, key: x}) + "\n")


def test_pairing_and_headline_match_numpy(tmp_path):
    rng = np.random.default_rng(0)
    acc = lambda: {s: float(x) for s, x in enumerate(rng.uniform(0.5, 0.99, 5))}  # noqa: E731
    ppl = lambda: {s: float(x) for s, x in enumerate(rng.uniform(5, 9, 3))}  # noqa: E731
    band = dict(engine="banded", engine_kw=(("bandwidth", 8),), J_band=8)
    toe = Cell("brackets-hard", "brackets-hard", 64, J_param="toeplitz", **band)
    ban = Cell("brackets-hard", "brackets-hard", 64, J_param="banded", variants=("hJ",), **band)
    ex16 = Cell("brackets-hard", "brackets-hard", 16)
    ann = Cell("annealing-hard", "brackets-hard", 16, variants=("hJ",), engine="gibbs")
    lm = Cell("shakespeare-long", "shakespeare", 32, J_param="toeplitz", variants=("softmax", "hJ", "h"), steps=2000,
              **band)
    mf = Cell("meanfield", "shakespeare", 32, variants=("hJ",), steps=2000, engine="meanfield",
              engine_kw=(("method", "tap"),))  # no exact cell at T = 32: paired with shakespeare-long's softmax
    res = {toe: {v: acc() for v in ("softmax", "hJ", "h", "J")}, ban: {"hJ": acc()},
           ex16: {v: acc() for v in ("softmax", "hJ")}, ann: {"hJ": acc()}, lm: {v: ppl() for v in ("softmax", "hJ", "h")},
           mf: {"hJ": ppl()}}
    for c, r in res.items():
        _fake_cell(tmp_path, c, r)
    loaded = load_cells(str(tmp_path))
    by_name = {c.name: next(x for x in loaded if x["folder"].endswith(c.name)) for c in res}
    # the banded cell's hJ pairs with the toeplitz cell's softmax; annealing with exact-trained hJ
    assert baseline(by_name[ban.name], loaded) == (res[toe]["softmax"], "softmax")
    assert baseline(by_name[ann.name], loaded) == (res[ex16]["hJ"], "exact-trained hJ")

    write_report(str(tmp_path))
    assert (tmp_path / "headline.png").stat().st_size > 0
    rows = [r for p in ("brackets-hard", "shakespeare-long", "meanfield") for r in _rows(loaded, p)]
    got = {(label, pts[0][0]): pts[0][1:3] for (_, label), pts in headline.series(rows).items()}
    for c in (toe, ban, ex16):
        want = mean_ci([100 * (res[c]["hJ"][s] - res[toe if c is ban else c]["softmax"][s]) for s in range(5)])
        assert got[(f"brackets-hard, FFN on, J {c.J_param}", c.seq_len)] == pytest.approx(want)
    rel = [-(res[lm]["hJ"][s] / res[lm]["softmax"][s] - 1) * 100 for s in range(3)]
    g, h = got[("shakespeare-long, FFN on, J toeplitz", 32)]
    assert (g, h) == pytest.approx((np.mean(rel), mean_ci(rel)[1]))
    rel = [-(res[mf]["hJ"][s] / res[lm]["softmax"][s] - 1) * 100 for s in range(3)]
    assert got[("shakespeare-long, FFN on, J full through TAP", 32)] == pytest.approx((np.mean(rel), mean_ci(rel)[1]))
    # against h (J = 0): the banded cell's hJ pairs with the toeplitz cell's h, full J through TAP with
    # shakespeare-long's; a cell without h anywhere (T = 16) has no point
    got = {(label, pts[0][0]): pts[0][1:] for (_, label), pts in headline.series(rows, "h").items()}
    for c in (toe, ban):
        want = mean_ci([100 * (res[c]["hJ"][s] - res[toe]["h"][s]) for s in range(5)])
        assert got[(f"brackets-hard, FFN on, J {c.J_param}", 64)] == pytest.approx(want + (5,))
    assert ("brackets-hard, FFN on, J full", 16) not in got
    for c, label in ((lm, "J toeplitz"), (mf, "J full through TAP")):
        rel = [-(res[c]["hJ"][s] / res[lm]["h"][s] - 1) * 100 for s in range(3)]
        assert got[(f"shakespeare-long, FFN on, {label}", 32)] == pytest.approx(mean_ci(rel) + (3,))
    text = (tmp_path / "README.md").read_text()
    assert "## The paper's claim" in text and "vs exact-trained hJ (n=5)" in text
    assert "### Is the gain J's? hJ against h" in text
    # the report's table is the headline's with p, Holm's p and the sign test added (issue 32)
    line = headline.table(rows, "h").splitlines()[2]
    assert line.rsplit("|", 2)[0] in text and "| p (Holm) | hJ ahead (sign p) |" in text


def test_sample_tokens_fill_odd_lengths_with_the_filler():
    chars = "([{)]}."
    tok = _sample_tokens({"task": "brackets-hard", "seq_len": 7}, chars)
    assert "".join(chars[t] for t in tok[0]) == "([{.}])"
    assert "".join(chars[t] for t in _sample_tokens({"task": "brackets-hard", "seq_len": 4}, chars)[0]) == "([])"


def test_the_report_reads_only_finished_runs(tmp_path):
    """A folder where another process trains more seeds holds their checkpoints and log lines: the
    report's learned J, curves and wall time take only the runs in results.json."""
    import jax

    from isingattn.models import checkpoint
    from isingattn.models import Config, Transformer
    from isingattn_study.grid_report import _hj_couplings
    from isingattn.models.saved import config_to_dict

    cell = Cell("brackets-hard", "brackets-hard", 8, variants=("hJ",))
    _fake_cell(tmp_path, cell, {"hJ": {0: 0.9}})
    folder = tmp_path / cell.name
    with open(folder / "metrics.jsonl", "a") as f:  # seed 0 finished in 10 s; seed 1 is still training
        f.write(json.dumps({"variant": "hJ", "seed": 0, "step": 100, "test_acc": 0.9, "wall_s": 10.0}) + "\n")
        f.write(json.dumps({"variant": "hJ", "seed": 1, "step": 50, "test_acc": 0.5, "wall_s": 500.0}) + "\n")
    config = Config(vocab_size=6, seq_len=8, n_out=8, variant="hJ")
    for seed in (0, 1):
        model = Transformer(config, key=jax.random.PRNGKey(seed))
        meta = {"seed": seed, "step": 100 if seed == 0 else 50, "chars": "([{)]}", "model": config_to_dict(config)}
        checkpoint.save(str(folder / f"ckpt-hJ-s{seed}.npz"), model, meta)
    (loaded,) = load_cells(str(tmp_path))
    assert loaded["wall_s"] == 10.0  # not 510: seed 1's seconds belong to no reported run
    assert set(_hj_couplings(loaded)) == {0}
    assert set(json.load(open(folder / "learned-J.json"))["seeds"]) == {"0"}


def test_a_clone_keeps_the_learned_J_and_attention_of_runs_whose_checkpoints_are_gone(tmp_path):
    """Seeds 0-1 were trained in another clone (their J and attention are only in the committed
    files); seed 2 has a checkpoint here. The report adds seed 2 and loses nothing."""
    import jax

    from isingattn.models import checkpoint
    from isingattn.models import Config, Transformer
    from isingattn_study.grid_report import _attention_weights, _hj_couplings
    from isingattn.models.saved import config_to_dict

    cell = Cell("brackets-hard", "brackets-hard", 8, variants=("softmax", "hJ"))
    _fake_cell(tmp_path, cell, {"softmax": {0: 0.8, 1: 0.8, 2: 0.8}, "hJ": {0: 0.9, 1: 0.9, 2: 0.9}})
    folder = tmp_path / cell.name
    old = {s: np.full((8, 8), 0.1 * (s + 1)) for s in (0, 1)}
    (folder / "learned-J.json").write_text(json.dumps({"head": 0, "seeds": {str(s): J.tolist() for s, J in old.items()}}))
    stored_attention = {"labels": list("(([]))[]"), "weights": {"softmax": np.eye(8).tolist(), "hJ": np.eye(8).tolist()}}
    (folder / "attention.json").write_text(json.dumps(stored_attention))
    config = Config(vocab_size=6, seq_len=8, n_out=8, variant="hJ")
    model = Transformer(config, key=jax.random.PRNGKey(2))
    meta = {"seed": 2, "step": 100, "chars": "([{)]}", "model": config_to_dict(config)}
    checkpoint.save(str(folder / "ckpt-hJ-s2.npz"), model, meta)
    hj0 = Transformer(config, key=jax.random.PRNGKey(0))  # seed 0's hJ checkpoint only: softmax's map must stay
    checkpoint.save(str(folder / "ckpt-hJ-s0.npz"), hj0, {**meta, "seed": 0})
    (loaded,) = load_cells(str(tmp_path))
    Js = _hj_couplings(loaded)
    assert sorted(Js) == [0, 1, 2]
    np.testing.assert_array_equal(Js[1], old[1])  # from the file
    np.testing.assert_array_equal(Js[2], np.asarray(model.attn.couplings())[0])  # from the checkpoint
    assert sorted(json.load(open(folder / "learned-J.json"))["seeds"]) == ["0", "1", "2"]
    weights = _attention_weights(loaded)["weights"]
    assert weights["softmax"] == stored_attention["weights"]["softmax"]
    assert weights["hJ"] != stored_attention["weights"]["hJ"]  # redrawn from seed 0's checkpoint
    assert json.load(open(folder / "attention.json"))["weights"]["softmax"] == stored_attention["weights"]["softmax"]


def test_curves_keep_the_final_whole_set_evaluation_off_the_line(tmp_path):
    # Shakespeare's periodic evaluations use the first eval_limit held-out examples and the final one all of them:
    # one line through both would show a jump at the last step that is a change of data, not of the model.
    from isingattn_study.curves import logged_curves

    cell = Cell("shakespeare-long", "shakespeare", 32, variants=("hJ",), seeds=2, steps=300)
    folder = tmp_path / cell.name
    folder.mkdir(parents=True)
    (folder / "cell.json").write_text(json.dumps(dataclasses.asdict(cell)))
    (folder / "results.json").write_text(json.dumps({"hJ": {"0": 6.9, "1": 7.1}}))
    with open(folder / "metrics.jsonl", "w") as f:
        for s in (0, 1):
            for step, ppl, n in ((100, 9.0 + s, 2048), (200, 7.0 + s, 2048), (300, 6.9 + 0.2 * s, 9000)):
                f.write(json.dumps({"variant": "hJ", "seed": s, "step": step, "test_ppl": ppl, "eval_count": n}) + "\n")
    curves, final = logged_curves(load_cells(str(tmp_path))[0], "test_ppl")
    assert {k: sorted(v) for k, v in curves["hJ"].items()} == {100: [9.0, 10.0], 200: [7.0, 8.0]}
    assert sorted(final["hJ"]) == [(300, 6.9), (300, pytest.approx(7.1))]


def test_growth_of_the_gain_matches_welchs_test_on_the_seeds():
    # the change of the paired gain between two T is a difference of independent means: scipy's Welch test on
    # the per-seed gains themselves is the reference; growth() sees only each row's mean, half-width and n
    from scipy import stats

    rng = np.random.default_rng(3)
    gains = {16: rng.normal(4.4, 0.5, 5), 24: rng.normal(7.0, 3.0, 3), 64: rng.normal(5.0, 1.0, 1)}
    rows = []
    for T, g in gains.items():
        m, h = mean_ci(g)
        rows.append({"part": "brackets-hard", "base": "softmax", "ffn": True, "J_param": "full", "T": T,
                     "hJ_minus_base": m, "hJ_minus_base_ci95": h, "paired_seeds": len(g)})
    out = headline.growth(rows)
    assert [(r[2], r[3]) for r in out] == [(16, 24)]  # 24 -> 64: one seed at 64, no interval
    ref = stats.ttest_ind(gains[24], gains[16], equal_var=False)
    lo, hi = ref.confidence_interval(0.95)
    _, _, _, _, change, half, df = out[0]
    assert change == pytest.approx(gains[24].mean() - gains[16].mean())
    assert (change - half, change + half) == pytest.approx((lo, hi), rel=1e-9)
    assert df == pytest.approx(ref.df, rel=1e-9)
    assert "**" not in headline.growth_table(rows) or abs(change) > half


def test_headline_panels_hold_at_most_six_series_and_every_series_once():
    """Thirteen bracket series (as the committed grid has) are split over panels of at most MAX_SERIES, each
    series in exactly one; the figure is written."""
    rows = []
    for part, ffns, Js, Ts in (("brackets", (True, False), ("full",), (8, 12)),
                               ("brackets-hard", (True, False), ("full", "toeplitz", "banded"), (16, 64)),
                               ("depth", (True,), ("full", "toeplitz"), (16,)),
                               ("positional", (True,), ("toeplitz",), (64,)),
                               ("shakespeare-long", (True,), ("full", "toeplitz"), (32, 64))):
        for ffn in ffns:
            for J in Js:
                for T in Ts:
                    rows.append({"part": part, "base": "softmax", "ffn": ffn, "J_param": J, "T": T,
                                 "cell": f"{part}/T{T}", "hJ_minus_base": 1.0, "hJ_minus_base_ci95": 0.5, "paired_seeds": 5,
                                 "hJ_rel_pct": -1.0, "hJ_rel_pct_ci95": 0.5})
    labels = {label for (_, label) in headline.series(rows)}
    assert len([lab for lab in labels if not lab.startswith("shakespeare")]) == 11
    cols = headline.panels(rows)
    assert all(len(labs) <= headline.MAX_SERIES for _, _, labs in cols)
    shown = [lab for _, _, labs in cols for lab in labs]
    assert sorted(shown) == sorted(labels)  # each series in one panel, none lost


def test_curves_zoom_on_the_last_quarter_and_title_the_task(tmp_path, monkeypatch):
    """Under each cell's curves, a panel zooms in on the last quarter of training (from the last logged step
    at or before 75% of the steps); the figure's title gives the task and the settings its cells share."""
    from isingattn_study import curves

    cell = Cell("convergence", "shakespeare", 64, variants=("softmax", "hJ"), seeds=2, steps=800, J_param="toeplitz",
                engine="banded", engine_kw=(("bandwidth", 8),), J_band=8)
    _fake_cell(tmp_path, cell, {"softmax": {0: 6.0, 1: 6.1}, "hJ": {0: 5.9, 1: 6.0}}, steps=(200, 400, 600, 800))
    cells = load_cells(str(tmp_path))
    title = curves.part_title(cells, "convergence")
    assert title.startswith("Tiny Shakespeare, T=64, 800 steps") and "J toeplitz (band 8)" in title
    figs = []
    monkeypatch.setattr(curves.atomic, "savefig", lambda fig, path, **kw: figs.append(fig))
    curves.plot(cells, "convergence", str(tmp_path / "c.png"))
    full, zoom = figs[0].axes[:2]
    assert zoom.get_xlim()[0] == pytest.approx(600 - 16) and zoom.get_xlim()[1] == pytest.approx(816)
    assert zoom.get_title() == "zoom: steps 600–800" and full.get_title() == "T64-toeplitz8"
    lo, hi = zoom.get_ylim()
    assert hi - lo < full.get_ylim()[1] - full.get_ylim()[0]


def test_attention_maps_have_a_colour_bar(tmp_path, monkeypatch):
    """The maps share one colour scale, 0 to 1, shown by a colour bar."""
    from isingattn_study import grid_report

    cell = Cell("brackets-hard", "brackets-hard", 4, variants=("softmax", "hJ"))
    _fake_cell(tmp_path, cell, {"softmax": {0: 0.8}, "hJ": {0: 0.9}})
    att = {"labels": list("(())"), "weights": {"softmax": np.eye(4).tolist(), "hJ": (np.eye(4) / 2).tolist()}}
    (tmp_path / cell.name / "attention.json").write_text(json.dumps(att))
    figs = []
    monkeypatch.setattr(grid_report.atomic, "savefig", lambda fig, path, **kw: figs.append(fig))
    assert grid_report._attention_maps(load_cells(str(tmp_path)), str(tmp_path)) == [f"{cell.name}/attention.png"]
    (bar,) = [ax for ax in figs[0].axes if ax.get_label() == "<colorbar>"]
    assert bar.get_ylabel() == "attention weight" and bar.get_ylim() == (0.0, 1.0)
