"""Banded on sparse coupling graphs (issue 12): the bandwidth read from the graph (or from a
concrete dense J) with ``Banded(bandwidth=None)``, lattice strips solved from the edge list
without a dense J, and the bad-input errors.

References: the float64 brute force ``isingattn.testing.brute_force`` (n ≤ 16), dwave-samplers'
``TreeDecompositionSampler`` (a 64 x 8 strip) and a row-by-row transfer matrix written here in
numpy (a 5000 x 3 strip, whose dense J would exceed the 1 GiB densify limit).
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from isingattn import IsingModel, graphs
from isingattn.errors import IsingInputError
from isingattn.inference.banded import Banded
from isingattn.sparse import CouplingGraph, SparseCouplings
from isingattn.testing import brute_force

TOL = 1e-10


def strip(shape, seed, scale=0.7, batch=()):
    """An open row-major lattice strip with Gaussian couplings and fields (float64)."""
    g = graphs.lattice(shape)
    J = graphs.random_couplings(jax.random.key(seed), g, "gaussian", scale, batch=batch, dtype=jnp.float64)
    h = 0.5 * jax.random.normal(jax.random.key(seed + 1), batch + (g.n,), jnp.float64)
    return g, h, J


def row_transfer(h, edges, weights, W, beta):
    """Exact ``(mean [n], log Z)`` of a row-major strip of rows of ``W`` spins, in numpy float64:
    the state is a whole row (2^W values), rows coupled to the next by a 2^W x 2^W matrix (an
    independent factorization of Banded's spin-by-spin window). Every edge must lie within a
    row or between consecutive rows."""
    h, weights = np.asarray(h, np.float64), np.asarray(weights, np.float64)
    n = h.size
    L = n // W
    S = 1 - 2 * ((np.arange(2**W)[:, None] >> np.arange(W)[None, :]) & 1)  # [2^W, W] row configurations
    i, j = edges[:, 0], edges[:, 1]
    ri, rj = i // W, j // W
    assert np.all((rj == ri) | (rj == ri + 1))
    intra = np.zeros((L, W, W))
    inter = np.zeros((L, W, W))  # inter[r]: row r-1 (axis 1) to row r (axis 2)
    same = rj == ri
    np.add.at(intra, (ri[same], i[same] % W, j[same] % W), weights[same])
    np.add.at(inter, (rj[~same], i[~same] % W, j[~same] % W), weights[~same])
    u = beta * (S @ h.reshape(L, W).T).T + beta * np.einsum("xa,rab,xb->rx", S, intra, S)  # [L, 2^W]
    T = beta * np.einsum("xa,rab,yb->rxy", S, inter, S)  # [L, 2^W (row r-1), 2^W (row r)]
    la = np.zeros((L, 2**W))  # log forward messages (row r included)
    la[0] = u[0]
    for r in range(1, L):
        m = la[r - 1][:, None] + T[r]
        la[r] = u[r] + np.logaddexp.reduce(m, axis=0)
    lb = np.zeros((L, 2**W))  # log backward messages (rows after r)
    for r in range(L - 2, -1, -1):
        lb[r] = np.logaddexp.reduce(T[r + 1] + (u[r + 1] + lb[r + 1])[None, :], axis=1)
    log_z = np.logaddexp.reduce(la[-1])
    p = np.exp(la + lb - log_z)  # [L, 2^W] row marginals
    return (p @ S).reshape(n), log_z


# ---- (a) the bandwidth read from the graph: exact against brute force ----------------------------


@pytest.mark.parametrize("shape", [(5, 3), (4, 4), (16, 1)])
def test_strip_with_bandwidth_from_graph_matches_brute_force(shape):
    """A batch of 2 weight sets on an open L x W strip: Banded(bandwidth=None) reads W from the
    graph and, on both paths (blocked GEMMs and the per-spin sweep), gives brute force's
    marginals and log Z to 1e-10."""
    beta = 0.9
    g, h, J = strip(shape, seed=sum(shape), batch=(2,))
    assert g.bandwidth == shape[1]
    model = IsingModel(h, J, beta=beta)
    assert Banded(bandwidth=None)._prepare(model).bandwidth == shape[1]
    Jd = np.asarray(J.to_dense())
    refs = [brute_force(np.asarray(h[b]), Jd[b], beta) for b in range(2)]
    for path in ("auto", "sweep"):
        out = Banded(bandwidth=None, path=path).marginals(model)
        for b, ref in enumerate(refs):
            np.testing.assert_allclose(out.mean[b], ref["mean"], atol=TOL, err_msg=f"{path} mean {b}")
            np.testing.assert_allclose(out.log_z[b], ref["log_z"], atol=TOL, rtol=0, err_msg=f"{path} log_z {b}")


def test_bandwidth_from_dense_J_and_gradient_on_edges():
    """The same strip as a concrete dense J: bandwidth=None reads 4 from its nonzeros and gives
    brute force's marginals. On the edge list, d log Z / d w_e = β ⟨s_i s_j⟩ (brute force) on
    every edge, to 1e-10, through the band scattered from the edges."""
    beta = 0.9
    g, h, J = strip((4, 4), seed=17)
    Jd = np.asarray(J.to_dense())
    ref = brute_force(np.asarray(h), Jd, beta)
    dense = IsingModel(h, Jd, beta=beta)
    assert Banded(bandwidth=None)._prepare(dense).bandwidth == 4
    np.testing.assert_allclose(Banded(bandwidth=None).marginals(dense).mean, ref["mean"], atol=TOL)
    grad = jax.jit(jax.grad(lambda w: Banded(bandwidth=None).marginals(IsingModel(h, SparseCouplings(g, w),
                                                                                   beta=beta)).log_z))
    i, j = g.edges[:, 0], g.edges[:, 1]
    np.testing.assert_allclose(grad(J.weights), beta * ref["corr"][i, j], atol=TOL)


def test_masked_sparse_strip_matches_brute_force():
    """A mask removes spins (and their edges) from the sparse strip as from a dense J."""
    beta = 1.1
    g, h, J = strip((4, 4), seed=7)
    mask = np.ones(g.n, bool)
    mask[[2, 5, 11]] = False
    out = Banded(bandwidth=None).marginals(IsingModel(h, J, beta=beta, mask=jnp.asarray(mask)))
    ref = brute_force(np.asarray(h), np.asarray(J.to_dense()), beta, mask=mask)
    np.testing.assert_allclose(out.mean, ref["mean"], atol=TOL)
    np.testing.assert_allclose(out.log_z, ref["log_z"], atol=TOL, rtol=0)


# ---- (b) large strips ---------------------------------------------------------------------------


def test_64x8_strip_under_jit_matches_tree_decomposition():
    """n = 512, bandwidth 8: Banded(bandwidth=None) inside jax.jit (traced weights: the
    bandwidth comes from the static graph) equals dwave-samplers' TreeDecompositionSampler
    (elimination in row-major order) in every marginal and in log Z."""
    samplers = pytest.importorskip("dwave.samplers")
    dimod = pytest.importorskip("dimod")
    beta = 0.8
    g, h, J = strip((64, 8), seed=11)
    run = jax.jit(lambda w: Banded(bandwidth=None).marginals(IsingModel(h, SparseCouplings(g, w), beta=beta)))
    out = run(J.weights)
    bqm = dimod.BinaryQuadraticModel("SPIN")  # E = -h.s - Σ_edges w s_i s_j, built from the edge list
    bqm.add_linear_from_array(-np.asarray(h))
    bqm.add_quadratic_from(zip(g.edges[:, 0].tolist(), g.edges[:, 1].tolist(), (-np.asarray(J.weights)).tolist()))
    ss = samplers.TreeDecompositionSampler().sample(bqm, beta=beta, marginals=True, num_reads=1,
                                                    elimination_order=list(range(g.n)))
    p_up = ss.info["variable_marginals"]
    ref = np.array([2 * p_up[k] - 1 for k in range(g.n)])
    np.testing.assert_allclose(out.mean, ref, atol=1e-9)
    np.testing.assert_allclose(out.log_z, ss.info["log_partition_function"], rtol=1e-12)


def test_long_strip_runs_without_a_dense_J():
    """A 5000 x 3 strip (n = 15,000): its dense J would take 1.7 GiB, over the 1 GiB densify
    limit, so Banded must work from the edge list. Marginals and log Z equal the numpy row
    transfer matrix (float64)."""
    beta = 0.8
    g, h, J = strip((5000, 3), seed=13)
    model = IsingModel(h, J, beta=beta)
    assert model.dense_J_bytes > 2**30
    out = Banded(bandwidth=None).marginals(model)
    ref_m, ref_lz = row_transfer(h, g.edges, J.weights, 3, beta)
    np.testing.assert_allclose(out.mean, ref_m, atol=1e-9)
    np.testing.assert_allclose(out.log_z, ref_lz, rtol=1e-12)


# ---- (c) bad input ------------------------------------------------------------------------------


def test_bandwidth_below_the_graphs_raises_naming_both():
    """A 6 x 4 strip has bandwidth 4: Banded(bandwidth=3) refuses it with IsingInputError naming
    3 and 4, eagerly and also under jax.jit (the graph is static; before, a traced model
    reached only equinox's runtime check)."""
    g, h, J = strip((6, 4), seed=3)
    eng = Banded(bandwidth=3)
    with pytest.raises(IsingInputError, match=r"bandwidth=3\).*distance 4"):
        eng.marginals(IsingModel(h, J))
    with pytest.raises(IsingInputError, match=r"bandwidth=3\).*distance 4"):
        jax.jit(lambda w: eng.marginals(IsingModel(h, SparseCouplings(g, w))).mean)(J.weights)
    # an edge is part of the pattern whatever its weight: a zero weight at distance 4 is refused too
    g2 = CouplingGraph(6, [(0, 1), (1, 5)])
    with pytest.raises(IsingInputError, match=r"bandwidth=3\).*distance 4"):
        eng.marginals(IsingModel(jnp.zeros(6), SparseCouplings(g2, jnp.array([0.5, 0.0]))))


def test_bandwidth_none_with_traced_dense_J_raises():
    """Under jax.jit a dense J's zeros are unknown: bandwidth=None says to pass bandwidth."""
    _, h, J = strip((4, 3), seed=5)
    eng = Banded(bandwidth=None)
    with pytest.raises(IsingInputError, match=r"traced.*Pass bandwidth=w"):
        jax.jit(lambda J: eng.marginals(IsingModel(h, J)).mean)(J.to_dense())


def test_bandwidth_none_beyond_the_limit_raises():
    """A 3 x 25 strip numbered along its long side has bandwidth 25 > 20: refused with a message
    naming 25, the limit and the fix (the short side last)."""
    g = graphs.lattice((3, 25))
    eng = Banded(bandwidth=None)
    with pytest.raises(IsingInputError, match=r"distance 25.*at most 20.*short side"):
        eng.marginals(IsingModel(jnp.zeros(g.n), SparseCouplings(g, jnp.ones(g.E))))


def test_prepared_resolves_the_bandwidth_for_jit():
    """Engine.prepared(model) reads what the engine needs from a concrete model (here
    Banded's bandwidth from a dense J's zeros), so the result runs under jax.jit, where the
    same engine unprepared refuses the traced J; the marginals equal brute force."""
    rng = np.random.default_rng(5)
    n = 10
    J = np.triu(rng.normal(size=(n, n)), 1) * (np.abs(np.subtract.outer(np.arange(n), np.arange(n))) <= 3)
    h = rng.normal(size=n)
    model = IsingModel(h, J + J.T, beta=0.8)
    engine = Banded(bandwidth=None)
    with pytest.raises(IsingInputError, match="traced"):
        jax.jit(lambda m: engine.marginals(m).mean)(model)
    ready = engine.prepared(model)
    assert ready.bandwidth == 3
    mean = jax.jit(lambda m: ready.marginals(m).mean)(model)
    np.testing.assert_allclose(np.asarray(mean), brute_force(h, J + J.T, 0.8)["mean"], atol=1e-10)
