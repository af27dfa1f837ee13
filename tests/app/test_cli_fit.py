"""``isingattn fit``: the files it writes, checked against independent references, and its
bad inputs (one line, exit status 2, nothing written)."""

import itertools
import json
import os

import dimod
import numpy as np
import pytest

from isingattn.learn import fit
from isingattn.learn.io import load_model
from isingattn.cli import run


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    """500 rows of 0/1 over 6 spins with some correlation, in every format the verb reads."""
    d = tmp_path_factory.mktemp("fitdata")
    rng = np.random.default_rng(0)
    x = (rng.random((500, 6)) < 0.5).astype(int)
    x[:, 1] = np.where(rng.random(500) < 0.8, x[:, 0], x[:, 1])  # spins 0 and 1 agree 90% of the time
    np.savetxt(d / "d.csv", x, fmt="%d", delimiter=",")
    np.savetxt(d / "d.txt", 2 * x - 1, fmt="%d")
    np.save(d / "d.npy", 2 * x - 1)
    np.savez(d / "d.npz", samples=x)
    return d, 2 * x - 1


@pytest.mark.parametrize("fmt", ["csv", "txt", "npy", "npz"])
def test_fit_writes_the_model_the_library_fits_and_a_bqm_with_its_energies(tmp_path, data, fmt, capsys):
    folder, s = data
    out = tmp_path / "out"
    assert run(["fit", str(folder / f"d.{fmt}"), "--method", "plm", "--beta", "0.5", "--out", str(out)]) == 0
    assert sorted(os.listdir(out)) == ["fit.json", "model.bqm", "model.npz"]
    model, meta = load_model(str(out / "model.npz"))
    ref = fit(s, method="plm", beta=0.5).model  # the same data read by numpy in the test
    np.testing.assert_allclose(np.asarray(model.h), np.asarray(ref.h), rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(np.asarray(model.J), np.asarray(ref.J), rtol=1e-6, atol=1e-7)
    assert meta["method"] == "plm" and float(model.beta) == 0.5
    # the BQM is β·E in dimod's SPIN convention: compare with -β(h·s + Σ_{i<j} J_ij s_i s_j) in numpy
    with open(out / "model.bqm", "rb") as f:
        bqm = dimod.BinaryQuadraticModel.from_file(f)
    h, J = np.asarray(model.h, np.float64), np.asarray(model.J, np.float64)
    for conf in itertools.product([-1, 1], repeat=6):
        c = np.asarray(conf, float)
        want = -0.5 * (h @ c + 0.5 * c @ J @ c)
        assert bqm.energy(dict(enumerate(conf))) == pytest.approx(want, abs=1e-5)
    info = json.load(open(out / "fit.json"))["info"]
    assert info["method"] == "plm" and info["n"] == 6 and info["num_samples"] == 500
    assert "wrote" in capsys.readouterr().out


def test_fit_on_a_graph_keeps_only_its_couplings(tmp_path, data):
    folder, s = data
    out = tmp_path / "g"
    assert run(["fit", str(folder / "d.npy"), "--method", "exact", "--graph", "lattice:2x3", "--out", str(out)]) == 0
    model, _ = load_model(str(out / "model.npz"))
    J = np.asarray(model.J.to_dense() if hasattr(model.J, "to_dense") else model.J)
    allowed = np.zeros((6, 6), bool)
    for i, j in [(0, 1), (1, 2), (3, 4), (4, 5), (0, 3), (1, 4), (2, 5)]:
        allowed[i, j] = allowed[j, i] = True
    assert np.all(J[~allowed] == 0) and np.abs(J[0, 1]) > 0.5  # spins 0 and 1 agree: a strong coupling


@pytest.mark.parametrize("case,expect", [
    ("values", "outside both alphabets"),
    ("text", "could not be read as comma-separated numbers"),
    ("missing", "no such file"),
    ("graph-size", "has 9 spins but"),
    ("graph-spec", "unknown graph spec"),
    ("one-row", "at least 2"),
    ("npz-many", "name the data array 'samples'"),
    ("3d", "expected a 2-D table"),
])
def test_bad_input_is_one_line_exit_2_and_nothing_written(tmp_path, data, capsys, case, expect):
    folder, _ = data
    bad = tmp_path / "bad.csv"
    argv = ["fit", str(bad), "--method", "plm", "--out", str(tmp_path / "out")]
    if case == "values":
        np.savetxt(bad, [[0, 1, 2], [1, 0, 1]], fmt="%d", delimiter=",")
    elif case == "text":
        bad.write_text("a,b\n1,2\n")
    elif case == "missing":
        pass
    elif case in ("graph-size", "graph-spec"):
        argv[1] = str(folder / "d.csv")
        argv += ["--graph", "lattice:3x3" if case == "graph-size" else "hexagon:3"]
    elif case == "one-row":
        np.savetxt(bad, [[0, 1, 1]], fmt="%d", delimiter=",")
    elif case == "npz-many":
        argv[1] = str(tmp_path / "bad.npz")
        np.savez(argv[1], a=np.ones((3, 2)), b=np.ones((3, 2)))
    elif case == "3d":
        argv[1] = str(tmp_path / "bad.npy")
        np.save(argv[1], np.ones((2, 3, 4)))
    assert run(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("isingattn: error: ") and expect in err[0], err
    assert not (tmp_path / "out").exists()
