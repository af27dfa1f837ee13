"""``isingattn fit`` writes model.npz, model.bqm and fit.json as one set: a refit that fails or is
killed at any moment leaves the earlier set whole, and what a killed run leaves is swept on the next.
Plus the fit verb's bad inputs that used to run to a traceback or a misleading message."""

import json
import os
import signal
import subprocess
import sys
import time

import dimod
import numpy as np
import pytest

from isingattn.learn.io import load_model
from isingattn.cli import run

SET = ["fit.json", "model.bqm", "model.npz"]


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    d = tmp_path_factory.mktemp("fitset")
    rng = np.random.default_rng(0)
    x = np.where(rng.random((120, 4)) < 0.5, 1, -1)
    x[:, 1] = np.where(rng.random(120) < 0.7, x[:, 0], -x[:, 0])
    np.save(d / "d.npy", x)
    np.save(d / "cx.npy", x + 5j)
    # 21 spins: beyond the exact moment check (2^20 terms), so a subprocess run is mostly start-up
    np.save(d / "d21.npy", np.where(rng.random((60, 21)) < 0.5, 1, -1))
    (d / "empty.txt").write_text("")
    (d / "empty.csv").write_text("")
    return d


def _which_set(out):
    """The run that wrote the set in ``out`` ("mf" or "tap"), after checking the three files are
    whole and from that one run: fit.json's command, model.npz's meta and model.bqm's biases
    (the model's −β h) agree."""
    assert sorted(os.listdir(out)) == SET, os.listdir(out)
    info = json.loads((out / "fit.json").read_text())
    method = info["info"]["method"]
    assert f"--method {method}" in info["command"]
    model, meta = load_model(str(out / "model.npz"))
    assert meta["method"] == method
    with open(out / "model.bqm", "rb") as f:
        bqm = dimod.BinaryQuadraticModel.from_file(f)
    h = np.asarray(model.h) * float(model.beta)
    np.testing.assert_allclose([bqm.linear[i] for i in range(model.n)], -h, rtol=1e-12, atol=1e-12)
    return method


def _leftovers(out):
    parent = out.parent
    return sorted(p for p in os.listdir(parent) if p.startswith(".isingattn-")) + \
        sorted(p for p in os.listdir(out) if p.startswith(".isingattn-"))


def test_a_refit_that_fails_while_writing_leaves_the_earlier_set(folder, tmp_path, monkeypatch):
    out = tmp_path / "out"
    assert run(["fit", str(folder / "d21.npy"), "--method", "mf", "--out", str(out)]) == 0
    before = {n: (out / n).read_bytes() for n in SET}
    import dimod as _dimod

    def broken(self, *a, **k):  # the BQM's file fails after model.npz was written
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(_dimod.BinaryQuadraticModel, "to_file", broken)
    assert run(["fit", str(folder / "d21.npy"), "--method", "tap", "--out", str(out)]) == 2
    assert {n: (out / n).read_bytes() for n in SET} == before and _leftovers(out) == []


def test_out_is_checked_before_the_fit(folder, tmp_path, capsys):
    """A folder named model.npz (or model.bqm) in --out: refused at once, nothing replaced (it used
    to fit first, replace model.npz, then fail on model.bqm naming a temporary file)."""
    out = tmp_path / "out"
    assert run(["fit", str(folder / "d21.npy"), "--method", "mf", "--out", str(out)]) == 0
    capsys.readouterr()
    for name in ("model.npz", "model.bqm"):
        os.replace(out / name, tmp_path / "keep")
        (out / name).mkdir()
        start = time.perf_counter()
        assert run(["fit", str(folder / "d21.npy"), "--method", "plm", "--out", str(out)]) == 2
        err = capsys.readouterr().err.strip()
        assert err.count("\n") == 0 and f"{name} there is not a file" in err and time.perf_counter() - start < 1.0
        (out / name).rmdir()
        os.replace(tmp_path / "keep", out / name)
        assert _which_set(out) == "mf"
    (out / "notes.txt").write_text("mine")
    assert run(["fit", str(folder / "d21.npy"), "--method", "tap", "--out", str(out)]) == 2
    assert "holds other entries" in capsys.readouterr().err and (out / "notes.txt").read_text() == "mine"


def test_orphans_of_a_killed_run_are_swept_by_the_next(folder, tmp_path):
    """What a SIGKILL leaves (a temporary file inside --out from the old per-file writes, a
    half-written set folder beside it) is removed by the next run, which then succeeds."""
    out = tmp_path / "out"
    assert run(["fit", str(folder / "d21.npy"), "--method", "mf", "--out", str(out)]) == 0
    (out / ".isingattn-model.bqm.abc123.tmp").write_bytes(b"partial")
    stale = tmp_path / ".isingattn-out.new.xyz.tmp"
    stale.mkdir()
    (stale / "model.npz").write_bytes(b"partial")
    assert run(["fit", str(folder / "d21.npy"), "--method", "tap", "--out", str(out)]) == 0
    assert _which_set(out) == "tap" and _leftovers(out) == []


@pytest.mark.parametrize("argv, words", [
    (["fit", "{d}/d.npy", "--method", "pcd", "--seed", "99999999999999999999"], ["--seed", "2^63 - 1"]),
    (["compare", "--graph", "lattice:3x3", "--engines", "gibbs", "--seed", "99999999999999999999"], ["--seed"]),
    (["fit", "{d}/d.npy", "--method", "mf", "--l2", "3"], ["l2 = 3 must be below 1"]),
    (["fit", "{d}/empty.txt", "--method", "mf"], ["empty.txt", "holds no data"]),
    (["fit", "{d}/empty.csv", "--method", "mf"], ["empty.csv", "holds no data"]),
    (["fit", "{d}/cx.npy", "--method", "mf"], ["cx.npy", "complex"]),
    (["compare", "--graph", "lattice:3x3", "--engines", "gibbs", "--engine-kw", "gibbs:num_chains=0"],
     ["--engine-kw gibbs:num_chains=0: Gibbs: num_chains"]),
    (["compare", "--graph", "lattice:3x3", "--engines", "exact", "--reference", "gibbs", "--reference-kw",
      "num_chains=0"], ["--reference gibbs --reference-kw num_chains=0: Gibbs"]),
    (["compare", "--graph", "lattice:3x3", "--engines", "exact", "--reference", "gibbs", "--reference-kw",
      "num_chains"], ["--reference-kw expects key=value"]),
])
def test_bad_input_is_one_line_naming_it(folder, tmp_path, capsys, argv, words):
    argv = [a.format(d=folder) for a in argv]
    if argv[0] == "fit":
        argv += ["--out", str(tmp_path / "o")]
    try:
        code = run(argv)
    except SystemExit as e:  # argparse's own errors
        code = e.code
    err = capsys.readouterr().err.strip()
    assert code == 2 and err.count("\n") == 0, err
    for w in words:
        assert w in err, err
    assert "--engine-kw gibbs gibbs" not in err and not (tmp_path / "o").exists()


def test_a_fit_that_misses_says_so_in_fit_json_and_the_summary(folder, tmp_path, capsys):
    """exact at β = 1e-30 used to exit 0 with "converged": true and drop its inf moment error."""
    out = tmp_path / "out"
    assert run(["fit", str(folder / "d.npy"), "--method", "exact", "--beta", "1e-30", "--out", str(out)]) == 0
    io = capsys.readouterr()
    info = json.loads((out / "fit.json").read_text())["info"]
    assert info["converged"] is False and info["status"] == "moments missed"
    assert np.isfinite(info["moment_error"]) and info["moment_error"] > info["moment_tol"]
    assert "NOT converged" in io.out and io.err.startswith("isingattn fit: warning: ") and io.err.count("\n") == 1


@pytest.mark.slow
def test_ten_kills_at_random_moments_leave_the_old_set_or_the_new_set(folder, tmp_path):
    """A real ``isingattn fit`` subprocess killed (SIGKILL) 10 times at random moments over its run
    (delays from a seeded numpy Generator): after each, --out holds one whole set, the earlier or
    the new; the next run sweeps what the killed one left."""
    out = tmp_path / "out"
    cmd = lambda method: [sys.executable, "-m", "isingattn.cli", "fit", str(folder / "d21.npy"),
                          "--method", method, "--out", str(out)]
    subprocess.run(cmd("tap"), check=True, capture_output=True)  # a cold start (caches filled)
    start = time.perf_counter()
    subprocess.run(cmd("mf"), check=True, capture_output=True)
    full = time.perf_counter() - start  # a whole warm run: start-up, fit, write
    rng = np.random.default_rng(49)
    seen = []
    for k, delay in enumerate(rng.uniform(0.4, 1.0, size=10) * full):  # mostly the fit and the write
        method = ("tap", "mf")[k % 2]
        p = subprocess.Popen(cmd(method), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(delay)
        p.send_signal(signal.SIGKILL)
        p.wait()
        seen.append(_which_set(out))
        assert seen[-1] in ("mf", "tap")
    subprocess.run(cmd("tap"), check=True, capture_output=True)
    assert _which_set(out) == "tap" and _leftovers(out) == []
    print("sets after each kill:", seen)  # which kills landed after the swap (-s shows it)
