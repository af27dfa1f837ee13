"""A fit is flagged when it misses: ``converged`` is True only when the fitted model reproduces the
data's moments within ``moment_tol``, checked here against a float64 enumeration of the model
(independent of the library's engines), and a fit that misses warns by how much. Plus the
degenerate inputs that used to come back wrong with ``converged=True``."""

import itertools
import warnings

import networkx as nx
import numpy as np
import pytest

from isingattn.engine import ConvergenceWarning
from isingattn.errors import IsingInputError, IsingTypeError
from isingattn.learn import fit


def _brute_moments(model):
    """``(⟨s⟩ [n], ⟨s sᵀ⟩ [n, n])`` of an unbatched dense model by enumeration, float64 numpy."""
    h, J, beta = (np.asarray(x, np.float64) for x in (model.h, model.J, model.beta))
    s = np.array(list(itertools.product([-1.0, 1.0], repeat=h.shape[0])))
    logw = beta * (s @ h + 0.5 * np.einsum("si,ij,sj->s", s, J, s))
    p = np.exp(logw - logw.max())
    p /= p.sum()
    return p @ s, (s * p[:, None]).T @ s


def _data_moments(x, weights=None):
    s = np.where(np.asarray(x) > 0, 1.0, -1.0)
    p = np.ones(len(s)) if weights is None else np.asarray(weights, np.float64) / np.max(weights)
    p = p / p.sum()
    return p @ s, (s * p[:, None]).T @ s


def _gap(model, x, weights=None):
    """The largest moment error over the means and all pairs (the default pattern)."""
    m, C = _brute_moments(model)
    md, Cd = _data_moments(x, weights)
    iu = np.triu_indices(len(m), 1)
    return max(np.max(np.abs(m - md)), np.max(np.abs(C[iu] - Cd[iu]), initial=0.0))


def _fit(x, **kw):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        r = fit(x, **kw)
    return r, [w for w in caught if issubclass(w.category, ConvergenceWarning)]


@pytest.fixture(scope="module")
def data():
    rng = np.random.default_rng(0)
    x = np.where(rng.random((200, 5)) < 0.5, 1, -1)
    x[:, 1] = np.where(rng.random(200) < 0.6, x[:, 0], -x[:, 0])  # a weak correlation
    return x


def test_mf_on_identical_rows_reproduces_the_rows(data):
    """Every row the same: the ridge's inverse used to blow the rounding of ⟨ssᵀ⟩ − mmᵀ into
    couplings of 2.2 that negated every mean (moment error 2.0, converged True)."""
    x = np.tile(data[:1], (50, 1))
    for method in ("mf", "tap"):
        r, warned = _fit(x, method=method)
        assert _gap(r.model, x) < 1e-3 and r.info["converged"] and not warned
        assert np.all(np.sign(_brute_moments(r.model)[0]) == data[0])


def test_mf_with_a_duplicated_column_is_flagged(data):
    x = data.copy()
    x[:, 3] = x[:, 2]
    r, warned = _fit(x, method="mf")
    gap = _gap(r.model, x)
    assert gap > r.info["moment_tol"] and not r.info["converged"] and r.info["status"] == "moments missed"
    assert len(warned) == 1 and "does not reproduce the data" in str(warned[0].message)
    assert r.info["moment_error"] == pytest.approx(gap, rel=1e-6)


@pytest.mark.parametrize("method", ["mf", "tap"])
@pytest.mark.parametrize("l2", [1.0, 1.5, 3.0])
def test_mf_refuses_a_ridge_of_one_or_more(data, method, l2):
    """l2 ≥ 1 inverted the clip ±(1 − l2): every mean −0.5 at l2 = 1.5, every field 0 at 1."""
    with pytest.raises(IsingInputError, match="l2 = .* must be below 1"):
        fit(data, method=method, l2=l2)


def test_weights_that_overflow_their_sum_give_the_unweighted_fit(data):
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)  # no NumPy overflow warning either
        huge = fit(data, method="mf", weights=np.full(len(data), 1e308), check_moments=False)
    plain = fit(data, method="mf", check_moments=False)
    np.testing.assert_allclose(np.asarray(huge.model.h), np.asarray(plain.model.h), rtol=1e-12)
    np.testing.assert_allclose(np.asarray(huge.model.J), np.asarray(plain.model.J), rtol=1e-12, atol=1e-15)


@pytest.mark.parametrize("method", ["exact", "plm"])
def test_a_penalty_that_outweighs_the_data_is_flagged(data, method):
    """At β = 1e-4 the default l2 pulls the moments off by ~0.17 (they read converged True)."""
    r, warned = _fit(data, method=method, beta=1e-4)
    gap = _gap(r.model, data)
    assert gap > 0.1 and not r.info["converged"] and len(warned) == 1
    assert r.info["moment_error"] == pytest.approx(gap, rel=1e-6)
    ok, warned = _fit(data, method=method)  # β = 1: the same fit reproduces the moments
    assert ok.info["converged"] and not warned and _gap(ok.model, data) <= ok.info["moment_tol"]


def test_exact_at_tiny_beta_reports_a_finite_moment_error(data):
    """β = 1e-30: the gradient / β overflowed to moment_error = inf with converged True."""
    r, warned = _fit(data, method="exact", beta=1e-30)
    assert np.isfinite(r.info["moment_error"]) and not r.info["converged"] and warned
    assert r.info["moment_error"] == pytest.approx(_gap(r.model, data), rel=1e-6)


def test_a_multigraph_with_a_parallel_edge_is_refused(data):
    g = nx.MultiGraph()
    g.add_nodes_from(range(5))
    g.add_edges_from([(0, 1), (1, 2), (2, 3)])
    simple = fit(data, method="mf", graph=g, check_moments=False)  # no parallel edge: as a Graph
    ref = fit(data, method="mf", graph=nx.Graph(g), check_moments=False)
    np.testing.assert_array_equal(np.asarray(simple.model.J), np.asarray(ref.model.J))
    g.add_edge(1, 0)
    with pytest.raises(IsingInputError, match="more than one edge between nodes 0 and 1"):
        fit(data, method="mf", graph=g)


try:
    from hypothesis import given, settings, strategies as st
except ImportError:  # hypothesis is an optional test dependency
    given = None

if given is not None:
    S, N = 24, 4

    @st.composite
    def _inputs(draw):
        bits = np.array(draw(st.lists(st.booleans(), min_size=S * N, max_size=S * N))).reshape(S, N)
        x = np.where(bits, 1, -1)
        shape = draw(st.sampled_from(["random", "duplicate", "constant", "identical", "bits", "anti"]))
        if shape == "duplicate":
            x[:, 1] = x[:, 0]
        elif shape == "anti":
            x[:, 1] = -x[:, 0]
        elif shape == "constant":
            x[:, 2] = 1
        elif shape == "identical":
            x[:] = x[0]
        elif shape == "bits":
            x = (x > 0).astype(int)
        weights = draw(st.sampled_from([None, "huge", "counts", "zeros"]))
        w = {None: None, "huge": np.full(S, 1e308), "counts": np.arange(1, S + 1, dtype=float),
             "zeros": np.r_[np.zeros(S - 1), 1.0]}[weights]
        return dict(samples=x, weights=w, method=draw(st.sampled_from(["mf", "tap", "exact", "plm"])),
                    l2=draw(st.sampled_from([0.0, 1e-4, 0.1, 0.5, 1.5])),
                    beta=draw(st.sampled_from([1e-3, 0.3, 1.0, 4.0])))

    @settings(max_examples=15)
    @given(kw=_inputs())
    def test_property_a_fit_is_a_library_error_or_honest(kw):
        """Every outcome of ``fit`` on small data (degenerate columns and rows, 0/1 bits, extreme
        weights, ridges and β) is an IsingInputError/IsingTypeError, or a result whose flags are
        true: converged only if the model's enumerated moments are within moment_tol of the
        data's, and a ConvergenceWarning whenever it is not converged."""
        x = kw.pop("samples")
        try:
            r, warned = _fit(x, **kw)
        except (IsingInputError, IsingTypeError) as e:
            assert str(e)
            return
        assert np.all(np.isfinite(np.asarray(r.model.h))) and np.all(np.isfinite(np.asarray(r.model.J)))
        gap = _gap(r.model, x, kw["weights"])
        if r.info["converged"]:
            assert gap <= r.info["moment_tol"] + 1e-9, (gap, r.info)
        else:
            assert warned or r.info["status"] != "moments missed", r.info
        if r.info["moment_error"] is not None:
            assert r.info["moment_error"] == pytest.approx(gap, rel=1e-6, abs=1e-9)
