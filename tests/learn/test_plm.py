"""Symmetric pseudo-likelihood (fit(method="plm")) against a reference written here: the
same objective in float64 numpy minimized by scipy's L-BFGS-B (to optimizer tolerance),
and against the true couplings of a strip model sampled exactly by enumeration."""

import numpy as np
import pytest

from isingattn import IsingModel, graphs
from isingattn.learn import fit, pseudo_log_likelihood
from isingattn.sparse import SparseCouplings

from _learn_refs import exact_samples, pl_objective, scipy_plm, symmetric


def _data(seed=0, n=6, S=400):
    rng = np.random.default_rng(seed)
    h = rng.normal(0, 0.3, n)
    J = np.triu(rng.normal(0, 0.4, (n, n)), 1)
    J = J + J.T
    return exact_samples(rng, h, J, S), rng


@pytest.mark.parametrize("l1", [0.0, 0.05])
def test_dense_plm_matches_scipy_on_the_same_objective(l1):
    s, rng = _data()
    p = rng.integers(1, 4, len(s)).astype(float)  # weights (counts) enter the objective too
    n = s.shape[1]
    edges = np.stack(np.triu_indices(n, 1), 1)
    beta, l2 = 0.8, 1e-3
    ref = scipy_plm(s.astype(float), p / p.sum(), beta, l2, edges, l1=l1)
    r = fit(s, method="plm", beta=beta, l1=l1, l2=l2, weights=p, tol=1e-10, dtype=np.float64, check_moments=False)
    assert r.info["converged"], r.info
    ours = np.concatenate([np.asarray(r.model.h), np.asarray(r.model.J)[edges[:, 0], edges[:, 1]]])
    np.testing.assert_allclose(ours, ref, atol=2e-6)
    if l1:
        assert np.sum(ref[n:] == 0) >= 1 and np.array_equal(ours[n:] == 0, ref[n:] == 0)  # the same zeros
    # the reported pseudo-log-likelihood is the objective's data term at the optimum
    f, _ = pl_objective(ours, s.astype(float), p / p.sum(), beta, 0.0, edges)
    np.testing.assert_allclose(r.info["pseudo_log_likelihood"], -f, rtol=1e-9)


@pytest.mark.parametrize("path", ["pattern counts", "samples"])
def test_graph_plm_matches_scipy_and_keeps_the_pattern(path, monkeypatch):
    """On a graph the couplings off it stay exactly 0, and the rest are the reference's
    optimum on the edge list (with weights, and with L1), from the pattern counts (the
    default at this degree) and from the samples; a networkx graph gives the same fit."""
    import isingattn.learn.data as data

    if path == "samples":
        monkeypatch.setattr(data, "PATTERN_ELEMENTS", 0)
    s, rng = _data(seed=1, n=8, S=300)
    g = graphs.lattice((2, 4))
    c = rng.integers(1, 4, len(s)).astype(float)
    for l1 in (0.0, 0.3):
        ref = scipy_plm(s.astype(float), c / c.sum(), 1.0, 1e-3, g.edges, l1=l1)
        r = fit(s, method="plm", graph=g, weights=c, l1=l1, l2=1e-3, tol=1e-10, dtype=np.float64,
                check_moments=False)
        assert r.info["plm_path"] == path and r.info["converged"], r.info
        J = np.asarray(r.model.J)
        np.testing.assert_allclose(J, symmetric(8, g.edges, ref[8:]), atol=2e-6)
        np.testing.assert_allclose(np.asarray(r.model.h), ref[:8], atol=2e-6)
    assert np.sum(ref[8:] == 0) >= 1 and np.array_equal(J[g.edges[:, 0], g.edges[:, 1]] == 0, ref[8:] == 0)
    r2 = fit(s, method="plm", graph=g.to_networkx(), weights=c, l1=l1, l2=1e-3, tol=1e-10, dtype=np.float64,
             check_moments=False)
    np.testing.assert_allclose(np.asarray(r2.model.J), J, atol=1e-9)


@pytest.mark.parametrize("path", ["pattern counts", "samples"])
def test_graph_moments_against_numpy(path, monkeypatch):
    """The data's moments on a graph's edges (from the pattern counts, or from the samples)
    against weighted numpy averages; the counts of each spin sum to 1."""
    import isingattn.learn.data as data

    if path == "samples":
        monkeypatch.setattr(data, "PATTERN_ELEMENTS", 0)
    rng = np.random.default_rng(11)
    g = graphs.lattice((3, 5))  # open: degrees 2-4, so padded neighbour slots too
    s = rng.choice(np.array([-1, 1], np.int8), size=(500, g.n), p=[0.3, 0.7])
    c = rng.integers(1, 5, len(s)).astype(float)
    d = data.prepare(s, graph=g, weights=c, dtype=np.float64)
    assert (d.patterns is not None) == (path == "pattern counts")
    q = c / c.sum()
    np.testing.assert_allclose(d.mean, q @ s, atol=1e-12)
    np.testing.assert_allclose(d.pair, q @ (s[:, g.edges[:, 0]] * s[:, g.edges[:, 1]]).astype(float), atol=1e-12)
    if d.patterns is not None:
        np.testing.assert_allclose(d.patterns[0].sum(1), 1.0, atol=1e-12)


def test_plm_recovers_a_strip_model_sampled_exactly():
    """A 2x6 strip (n = 12): 20,000 exact samples; PLM on the lattice graph recovers every
    coupling and field to 0.06 (about 3.5 standard errors, measured 0.02-0.03), and the
    error shrinks with more data."""
    rng = np.random.default_rng(3)
    g = graphs.lattice((2, 6))
    w = rng.uniform(0.2, 0.7, g.E) * rng.choice([-1, 1], g.E)
    h = rng.normal(0, 0.2, g.n)
    J = symmetric(g.n, g.edges, w)
    s = exact_samples(rng, h, J, 20000)
    errs = []
    for S in (1250, 20000):
        r = fit(s[:S], method="plm", graph=g, l2=0.0, dtype=np.float64, check_moments=False)
        Jf = np.asarray(r.model.J)
        errs.append(np.sqrt(np.mean((Jf[g.edges[:, 0], g.edges[:, 1]] - w) ** 2)))
    assert np.max(np.abs(Jf - J)) < 0.06 and np.max(np.abs(np.asarray(r.model.h) - h)) < 0.06
    assert errs[1] < errs[0] / 2, errs  # 16x the data: ~4x smaller


def test_float32_large_sparse_fit_is_sparse():
    """float32 PLM on a 12x12 lattice (n = 144, graph given) returns SparseCouplings."""
    rng = np.random.default_rng(5)
    s = rng.choice(np.array([-1, 1], np.int8), size=(200, 144))
    r = fit(s, method="plm", graph=graphs.lattice((12, 12)), dtype=np.float32, check_moments=False)
    assert isinstance(r.model.J, SparseCouplings) and r.model.dtype == np.float32
    assert r.info["converged"] and r.info["num_couplings"] == 264


@pytest.mark.parametrize("sparse", [False, True])
def test_pseudo_log_likelihood_against_brute_force(sparse):
    rng = np.random.default_rng(7)
    g = graphs.lattice((3, 3))
    w = rng.normal(0, 0.5, g.E)
    h = rng.normal(0, 0.5, 9)
    J = symmetric(9, g.edges, w)
    model = IsingModel(h, SparseCouplings(g, w) if sparse else J, beta=0.7)
    s = rng.choice([-1.0, 1.0], size=(50, 9))
    # p(s_i | rest) by brute force: the two configurations that differ in s_i
    E = lambda x: -x @ h - 0.5 * np.einsum("...i,ij,...j->...", x, J, x)
    ref = np.zeros(50)
    for i in range(9):
        flip = s.copy()
        flip[:, i] *= -1
        ref += -np.logaddexp(0.0, -0.7 * (E(flip) - E(s)))
    np.testing.assert_allclose(pseudo_log_likelihood(model, s, per_sample=True), ref, rtol=1e-10)
    wts = rng.uniform(0, 1, 50)
    np.testing.assert_allclose(pseudo_log_likelihood(model, s, weights=wts), wts @ ref / wts.sum(), rtol=1e-10)
