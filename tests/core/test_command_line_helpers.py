"""The library functions behind the command line's verbs, called from Python: graph-built models
and their closed-form log Z, engine settings as text, output checks, a fit's folder, coupling
analysis, BQM files, bracket-string counts and recorded command lines. References: energies by
hand in float64, dimod's own file reader and energies, enumeration."""

import itertools
import json
import math
import os

import numpy as np
import pytest

from isingattn import atomic
from isingattn.errors import IsingInputError


def test_model_from_graph_builds_each_kind_and_names_the_graph_in_its_errors(tmp_path):
    import dimod
    import jax

    from isingattn.instances import model_from_graph, random_model

    m = model_from_graph("chain", n=5, seed=3, beta=0.5, h_scale=0.2)
    rng = np.random.default_rng(np.asarray(jax.random.key_data(jax.random.PRNGKey(3))).ravel())
    h, J = random_model(rng, 5, h_scale=0.2, graph="chain")
    np.testing.assert_allclose(np.asarray(m.h), h, rtol=1e-6)
    np.testing.assert_allclose(np.asarray(m.J), J, rtol=1e-6)
    assert float(m.beta) == 0.5
    sparse = model_from_graph("lattice:3x4", seed=1, couplings="ferro", J_scale=0.7, h_scale=0.0)
    assert sparse.n == 12 and sparse.is_sparse
    np.testing.assert_allclose(np.asarray(sparse.J.weights), 0.7)
    assert len(sparse.J.graph.edges) == 2 * 3 * 4 - 3 - 4  # open 3x4 lattice
    # a BQM file reads back as dimod wrote it
    bqm = dimod.BinaryQuadraticModel({0: 0.5, 1: -0.25, 2: 0.0}, {(0, 1): 0.3, (1, 2): -0.8}, 0.0, "SPIN")
    path = tmp_path / "m.bqm"
    with bqm.to_file() as f:
        path.write_bytes(f.read())
    read = model_from_graph(str(path), beta=2.0)
    back = read.to_bqm()
    assert read.n == 3 and back.linear == bqm.linear and back.quadratic == bqm.quadratic
    for graph, words in (("lattice:axb", "lattice:axb: "), (str(tmp_path / "none.bqm"), "no such file"),
                         (str(tmp_path / "m.bqm") + "x", "no such file")):
        with pytest.raises(IsingInputError, match=words) as e:
            model_from_graph(graph)
        assert str(e.value).startswith(graph)
    (tmp_path / "junk").write_text("not a bqm\n")
    with pytest.raises(IsingInputError, match="could not read it as a dimod BQM file"):
        model_from_graph(str(tmp_path / "junk"))


def test_exact_log_z_applies_only_to_a_fieldless_ferromagnetic_torus():
    """Its value against Kaufman's formula is checked through ``isingattn compare``
    (tests/core/test_compare.py); here, where it applies."""
    from isingattn.instances import exact_log_z

    graph = dict(graph="lattice:3x4:periodic", couplings="ferro", h_scale=0.0, J_scale=0.5, beta=0.8)
    for other in (dict(graph, couplings="pm"), dict(graph, h_scale=1.0), dict(graph, graph="lattice:3x4"),
                  dict(graph, graph="lattice:axb:periodic"), dict(graph, graph="dense")):
        assert exact_log_z(**other) is None


def test_engine_settings_from_text():
    from isingattn.engine import from_text, get, parse_settings

    assert parse_settings(" num_samples=200, schedule=colored ,x=0.5,y=null,z=true,") == {
        "num_samples": 200, "schedule": "colored", "x": 0.5, "y": None, "z": True}
    assert parse_settings("") == {}
    with pytest.raises(IsingInputError, match=r"^--kw expects key=value pairs.*got 'bogus'"):
        parse_settings("a=1,bogus", "--kw")
    engine, kw = from_text("gibbs", "num_chains=3")
    assert kw == {"num_chains": 3} and engine == get("gibbs", num_chains=3)
    with pytest.raises(IsingInputError, match="'bogus'"):
        from_text("exact", "bogus=1")


def test_check_writable_refuses_before_any_work(tmp_path):
    (tmp_path / "file").write_text("x")
    atomic.check_writable(str(tmp_path / "new" / "deeper"), "--out")  # created later: its ancestor is probed
    atomic.check_writable(str(tmp_path / "a.json"), "--json", is_file=True)
    with pytest.raises(IsingInputError, match=r"^--out .* is a file, not a folder\. Choose another --out\."):
        atomic.check_writable(str(tmp_path / "file" / "run"), "--out")
    with pytest.raises(IsingInputError, match=r"^path .* is a folder; give a file path\."):
        atomic.check_writable(str(tmp_path), is_file=True)
    assert sorted(os.listdir(tmp_path)) == ["file"]  # the probes leave nothing


def test_a_fits_folder_is_written_as_one_set_and_refused_when_it_holds_more(tmp_path, monkeypatch):
    import dimod

    from isingattn import IsingModel
    from isingattn.learn import FitResult
    from isingattn.learn.io import FIT_FILES, check_fit_folder, json_info, load_model, save_fit

    info = {"iterations": 7, "converged": False, "grad_norm": math.inf, "moment_error": math.nan,
            "trace": [1.0, -math.inf], "nested": {"a": math.nan}, "array": np.zeros(3), "status": "moments missed"}
    assert json_info(info) == {"iterations": 7, "converged": False, "grad_norm": "inf", "moment_error": "nan",
                               "trace": [1.0, "-inf"], "nested": {"a": "nan"}, "status": "moments missed"}
    h, J = np.array([0.5, -1.0, 0.25]), np.array([[0, 0.4, 0], [0.4, 0, -0.2], [0, -0.2, 0]])
    result = FitResult(IsingModel(h, J, beta=2.0), info)
    out = tmp_path / "fit"
    assert save_fit(str(out), result, method="plm", data="d.npy", command="isingattn fit d.npy") == json_info(info)
    assert sorted(os.listdir(out)) == sorted(FIT_FILES)
    model, meta = load_model(str(out / "model.npz"))
    assert meta == {"method": "plm", "data": "d.npy"}
    np.testing.assert_allclose(np.asarray(model.J), J)
    bqm = dimod.BinaryQuadraticModel.from_file(open(out / "model.bqm", "rb"))  # β·h and β·J at β = 1
    states = np.array(list(itertools.product((-1, 1), repeat=3)))
    energy = -states @ h - 0.5 * np.einsum("si,ij,sj->s", states, J, states)  # float64, by hand
    assert bqm.vartype is dimod.SPIN
    np.testing.assert_allclose(bqm.energies((states, [0, 1, 2])), 2.0 * energy, atol=1e-12)
    written = json.loads((out / "fit.json").read_text())
    assert written == {"command": "isingattn fit d.npy", "info": json_info(info)}
    save_fit(str(out), result, method="mf")  # a refit replaces the set
    assert load_model(str(out / "model.npz"))[1]["method"] == "mf"
    (out / "notes.txt").write_text("mine")
    with pytest.raises(IsingInputError, match=r"^--out .* holds other entries .*notes\.txt"):
        check_fit_folder(str(out), "--out")
    monkeypatch.chdir(out)
    with pytest.raises(IsingInputError, match="is the current folder or holds it"):
        save_fit(str(tmp_path), result, method="plm")
    assert (out / "notes.txt").read_text() == "mine"


def test_analyze_heads_writes_each_heads_summary_and_plot(tmp_path):
    from isingattn import analysis

    rng = np.random.default_rng(0)
    A = rng.normal(size=(1, 5, 5))
    J = np.triu(A, 1) + np.swapaxes(np.triu(A, 1), 1, 2)
    report, text = analysis.analyze_heads(J, str(tmp_path), label="variant hJ")
    assert sorted(os.listdir(tmp_path)) == ["J-head0.png", "summary.json"]
    assert json.loads((tmp_path / "summary.json").read_text()) == json.loads(json.dumps(report))
    for h in range(1):
        thr = 0.05 * np.abs(J[h]).max()
        assert report[f"head{h}"]["threshold"] == pytest.approx(thr)
        above = np.abs(J[h][np.triu_indices(5, 1)]) > thr
        assert report[f"head{h}"]["edges"] == int(above.sum())
        assert f"head {h} (variant hJ, T=5, |J| > {thr:.3g})" in text
    with pytest.raises(IsingInputError, match=r"J \[H, T, T\]"):
        analysis.analyze_heads(J[0], str(tmp_path))


def test_save_bqm_round_trips_through_dimods_reader(tmp_path):
    import dimod

    from isingattn.convert import save_bqm

    bqm = dimod.BinaryQuadraticModel({"a": 1.5, "b": -0.5}, {("a", "b"): 0.75}, 0.25, "SPIN")
    save_bqm(bqm, str(tmp_path / "q.bqm"))
    assert dimod.BinaryQuadraticModel.from_file(open(tmp_path / "q.bqm", "rb")) == bqm
    assert os.listdir(tmp_path) == ["q.bqm"]


@pytest.mark.parametrize("T, depth, types", [(2, 1, 1), (6, 3, 2), (6, 1, 2), (8, 2, 1), (5, 3, 2)])
def test_count_strings_matches_enumeration(T, depth, types):
    from isingattn.models.brackets import count_strings

    def ok(word):  # word: (kind, +1 open / -1 close) per step; balanced, matched kinds, nesting <= depth
        stack = []
        for kind, step in word:
            if step > 0:
                stack.append(kind)
                if len(stack) > depth:
                    return False
            elif not stack or stack.pop() != kind:
                return False
        return not stack

    letters = [(k, s) for k in range(types) for s in (1, -1)]
    assert count_strings(T, depth, types) == sum(ok(w) for w in itertools.product(letters, repeat=T))


def test_command_line_hides_the_corpus_path():
    from isingattn.models.runs import command_line

    assert command_line(["train", "shakespeare", "--data", "data/input.txt", "--steps", "2"]) == \
        "isingattn train shakespeare --data $ISINGATTN_DATA --steps 2"
    assert command_line(["train", "shakespeare", "--data=/x/input.txt"]) == \
        "isingattn train shakespeare --data=$ISINGATTN_DATA"
