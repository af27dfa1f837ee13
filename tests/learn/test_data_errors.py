"""Every bad input to fit and the scores gets an IsingInputError (or IsingTypeError) whose
message names the problem; 0/1 data and constant spins get a DataWarning; and what
importing and using isingattn.learn loads."""

import subprocess
import sys
import warnings

import jax
import networkx as nx
import numpy as np
import pytest

from isingattn import IsingInputError, IsingModel, IsingTypeError, graphs
from isingattn.learn import DataWarning, fit, log_likelihood, pseudo_log_likelihood

GOOD = np.array([[1, -1, 1], [-1, -1, 1], [1, 1, -1], [-1, 1, 1]], np.int8)


@pytest.mark.parametrize("samples, match", [
    (np.array([[1, 2, 1], [1, -1, 1]]), "outside both alphabets"),
    (np.array([[1, 0, -1], [1, -1, 1]]), "-1, 0 and \\+1 together"),
    (np.array([[0.5, 1, 1], [1, -1, 1]]), "outside both alphabets"),
    (np.array([[np.nan, 1, 1], [1, -1, 1]]), "non-finite.*row 0, column 0"),
    (np.array([1, -1, 1]), "shape \\[S, n\\].*1 axes"),
    (np.ones((2, 2, 3)), "shape \\[S, n\\].*3 axes"),
    (np.array([[1, -1, 1]]), "1 sample.*at least 2"),
    (np.zeros((5, 0)), "no spins"),
])
def test_bad_samples(samples, match):
    with pytest.raises(IsingInputError, match=match):
        fit(samples, method="mf")


def test_bad_sample_types():
    with pytest.raises(IsingTypeError, match="numeric"):
        fit([["a", "b"], ["c", "d"]], method="mf")
    with pytest.raises(IsingTypeError, match="real"):
        fit(GOOD + 1j, method="mf")


@pytest.mark.parametrize("weights, match", [
    (np.ones(3), "shape \\[S\\] = \\(4,\\)"),
    (np.array([1, -1, 1, 1.0]), "non-negative.*weights\\[1\\] = -1"),
    (np.array([1, np.nan, 1, 1.0]), "finite"),
    (np.array([0, 0, 0, 1.0]), "at least 2 must be positive"),
])
def test_bad_weights(weights, match):
    with pytest.raises(IsingInputError, match=match):
        fit(GOOD, method="mf", weights=weights)


def test_bits_are_converted_with_a_warning_and_fit_the_same():
    bits = (GOOD > 0).astype(np.int64)
    with pytest.warns(DataWarning, match="0/1 values; converted to spins by s = 2x - 1"):
        a = fit(bits, method="plm", check_moments=False)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        b = fit(GOOD, method="plm", check_moments=False)
    np.testing.assert_array_equal(np.asarray(a.model.J), np.asarray(b.model.J))
    with pytest.warns(DataWarning):
        c = fit(bits.astype(bool), method="plm", check_moments=False)
    np.testing.assert_array_equal(np.asarray(c.model.J), np.asarray(b.model.J))


def test_constant_spin_is_named_and_kept_finite_by_l2():
    s = GOOD.copy()
    s[:, 1] = 1
    with pytest.warns(DataWarning, match="1 spin\\(s\\) are constant in the data: 1 \\(always \\+1\\)"):
        r = fit(s, method="exact", l2=1e-3)
    h, J = np.asarray(r.model.h), np.asarray(r.model.J)
    assert np.all(np.isfinite(h)) and np.all(np.isfinite(J)) and 2 < h[1] < 10
    for method in ("plm", "mf", "tap"):
        with pytest.warns(DataWarning):
            assert np.all(np.isfinite(np.asarray(fit(s, method=method, check_moments=False).model.h)))
    with pytest.raises(IsingInputError, match="never change sign.*Pass l2 > 0"):
        fit(s, method="plm", l2=0.0)


@pytest.mark.parametrize("kwargs, error, match", [
    (dict(method="ml"), IsingInputError, "method must be one of"),
    (dict(method="plm", beta=0.0), IsingInputError, "beta must be"),
    (dict(method="plm", l2=-1.0), IsingInputError, "l2 must be"),
    (dict(method="plm", l1="0.1"), IsingTypeError, "l1 must be"),
    (dict(method="plm", tol=0), IsingInputError, "tol must be"),
    (dict(method="plm", max_iter=1.5), IsingTypeError, "max_iter"),
    (dict(method="plm", num_steps=10), IsingInputError, "unknown option\\(s\\) \\['num_steps'\\]"),
    (dict(method="mf", l1=0.1), IsingInputError, "no L1 penalty"),
    (dict(method="pcd"), IsingInputError, "needs key="),
    (dict(method="pcd", key=jax.random.key(0), sampler="sqa"), IsingInputError, "sampler must be one of"),
    (dict(method="pcd", key=jax.random.key(0), sampler="pt", num_replicas=1), IsingInputError, "num_replicas >= 2"),
    (dict(method="pcd", key=3), IsingTypeError, "key"),
    (dict(method="plm", graph=graphs.lattice((2, 2))), IsingInputError, "graph has 4 spins but the samples have n = 3"),
    (dict(method="plm", graph=nx.path_graph(4)), IsingInputError, "4 nodes but the samples have n = 3"),
    (dict(method="plm", graph=[(0, 1)]), IsingTypeError, "graph must be None"),
    (dict(method="exact", engine="gibbs"), IsingInputError, "engine must be None"),
    (dict(method="exact", engine="banded"), IsingInputError, "Banded needs a graph"),
    (dict(method="plm", init=np.zeros(2)), IsingInputError, "init must be 6 finite numbers"),
    (dict(method="plm", dtype=np.int32), IsingTypeError, "floating dtype"),
])
def test_bad_settings(kwargs, error, match):
    with pytest.raises(error, match=match):
        fit(GOOD, **kwargs)


def test_networkx_graph_with_labels_and_a_self_loop():
    G = nx.Graph([("a", "b"), ("b", "c")])
    r = fit(GOOD, method="plm", graph=G, check_moments=False)  # nodes in column order
    J = np.asarray(r.model.J)
    assert J[0, 2] == 0 and J[0, 1] != 0 and J[1, 2] != 0
    G.add_edge("a", "a")
    with pytest.raises(IsingInputError, match="self-loop on node 'a'"):
        fit(GOOD, method="plm", graph=G)


def test_exact_refuses_what_it_cannot_enumerate():
    s = np.random.default_rng(0).choice(np.array([-1, 1], np.int8), size=(10, 30))
    with pytest.raises(IsingInputError, match="needs an exact log Z.*2\\^30"):
        fit(s, method="exact")


def test_scores_refuse_bad_input():
    m = IsingModel(np.zeros(3), np.zeros((3, 3)))
    with pytest.raises(IsingInputError, match="3 columns|has n = 3"):
        pseudo_log_likelihood(m, np.ones((2, 4)))
    with pytest.raises(IsingInputError, match="outside both alphabets"):
        log_likelihood(m, np.full((2, 3), 3))
    with pytest.raises(IsingInputError, match="scores one model"):
        pseudo_log_likelihood(IsingModel(np.zeros((2, 3)), np.zeros((3, 3))), GOOD)
    with pytest.raises(IsingTypeError, match="must be an IsingModel"):
        log_likelihood("model", GOOD)
    big = IsingModel(np.zeros(40), np.zeros((40, 40)) + 0.01 - 0.01 * np.eye(40))
    with pytest.raises(IsingInputError, match="needs a key"):
        log_likelihood(big, np.ones((2, 40)))
    with pytest.raises(IsingInputError, match="gives no log Z"):
        log_likelihood(m, GOOD, engine="gibbs", key=jax.random.key(0))


def _loaded(code):
    probe = (f"{code}\nimport sys\nprint(sorted({{m.split('.')[0] for m in sys.modules}} & "
             "{'numpyro', 'dimod', 'arviz', 'networkx', 'sklearn'}))")
    return subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout.strip()


def test_import_and_fits_load_no_heavy_library():
    """isingattn.learn stays out of `import isingattn`; importing it, a PLM fit and a PCD fit
    on a lattice (bipartite: its colouring needs no networkx) load none of numpyro, dimod,
    arviz, networkx or scikit-learn."""
    assert _loaded("import isingattn; import sys; assert 'isingattn.learn' not in sys.modules") == "[]"
    code = ("import numpy as np; from isingattn import graphs; from isingattn.learn import fit\n"
            "s = np.random.default_rng(0).choice(np.array([-1, 1]), size=(50, 6))\n"
            "fit(s, method='plm', graph=graphs.lattice((2, 3)), check_moments=False)\n"
            "import jax\n"
            "fit(s, method='pcd', graph=graphs.lattice((2, 3)), key=jax.random.key(0), num_steps=2, check_moments=False)")
    assert _loaded(code) == "[]"
