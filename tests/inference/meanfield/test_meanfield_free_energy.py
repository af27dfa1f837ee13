"""MeanField's ``log_z``: the naive (Gibbs–Bogoliubov), TAP (Plefka) and Bethe free
energies, against independent references: the float64 brute force
``isingattn.testing.brute_force`` (numpy enumeration), dwave-samplers'
``TreeDecompositionSampler`` (exact variable elimination, its ``log_partition_function``)
and central finite differences.

Bounds, and why:
* naive ≤ exact for every model (the Gibbs–Bogoliubov bound holds at every ``m``, so also
  for a fixed point that did not converge); only rounding may break it (allowed 1e-10).
* At weak coupling (scale ``s``) naive misses the O(s²) Onsager term and TAP the O(s³)
  Plefka terms, so the mean error ratio err(2s)/err(s) → 4 and 8. At s = 0.025 → 0.05 we
  measured 3.86 and 7.96; allowed ±20% (as test_meanfield.py for the marginals).
* Bethe is exact on trees and forests: 1e-11 absolute in float64 (measured ≤ 1.1e-14 at
  n ≤ 16; 1.4e-12 on |log Z| ≈ 3.3e3 for the 3,000-spin tree); float32 1e-5 (measured
  ≤ 1.5e-6 absolute, 1.3e-7 relative).
* Derivatives: ∂log Z/∂h = β m at the fixed point (rounding only); ∂log Z/∂(J, β) equal
  central differences (step 1e-5: truncation ~1e-10, fixed-point error tol/step ~1e-8);
  the envelope rule equals the total derivative of Φ(x*(θ), θ) through the implicit
  differentiation of the fixed point; the Hessian in h equals β ∂m/∂h and differences of
  the gradient.
"""

import warnings

import jax
import jax.numpy as jnp
import networkx as nx
import numpy as np
import pytest

from isingattn import IsingModel
from isingattn.graphs import lattice
from isingattn.inference.banded.engine import Banded
from isingattn.inference.exact.engine import Exact
from isingattn.inference.meanfield import free_energy
from isingattn.inference.meanfield.bp import bp_map
from isingattn.inference.meanfield.engine import METHODS, MeanField
from isingattn.inference.meanfield.fixed_point import DampedFixedPoint
from isingattn.instances import random_model
from isingattn.sparse import CouplingGraph, SparseCouplings
from isingattn.testing import brute_force

TIGHT = {"tol": 1e-13, "max_iter": 5000}
KIND = {"naive": "lower_bound", "tap": "approximation", "bp": "approximation"}


def exact_log_z(h, J, beta, mask=None):
    """brute_force log Z over a batch: h [..., n], J [..., n, n], mask [..., n] (broadcast)."""
    n = h.shape[-1]
    batch = np.broadcast_shapes(h.shape[:-1], J.shape[:-2], () if mask is None else mask.shape[:-1])
    hb, Jb = np.broadcast_to(h, batch + (n,)), np.broadcast_to(J, batch + (n, n))
    mb = None if mask is None else np.broadcast_to(mask, batch + (n,))
    out = np.zeros(batch)
    for idx in np.ndindex(*batch):
        out[idx] = brute_force(hb[idx], Jb[idx], beta, None if mb is None else mb[idx])["log_z"]
    return out


def quiet(engine, model):
    """marginals without convergence warnings (strong couplings on purpose)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return engine.marginals(model)


def tree_bqm(graph, h, w):
    import dimod

    bqm = dimod.BinaryQuadraticModel("SPIN")  # E = -h·s - Σ_edges w s_i s_j
    bqm.add_linear_from_array(-np.asarray(h, np.float64))
    bqm.add_quadratic_from(zip(graph.edges[:, 0].tolist(), graph.edges[:, 1].tolist(), (-np.asarray(w)).tolist()))
    return bqm


def forest_graph(rng, n):
    """A forest on n spins: a path, a star and a random tree, side by side, plus two isolated spins."""
    sizes = [5, 4, n - 11]
    parts = [nx.path_graph(sizes[0]), nx.star_graph(sizes[1] - 1),
             nx.random_labeled_tree(sizes[2], seed=int(rng.integers(1 << 30)))]
    edges, off = [], 0
    for size, G in zip(sizes, parts):
        edges += [(a + off, b + off) for a, b in G.edges()]
        off += size
    perm = rng.permutation(n)  # scatter the components over the spin indices
    return CouplingGraph(n, perm[np.array(edges)])


def tree_dense(rng, n, kind):
    G = {"path": nx.path_graph(n), "star": nx.star_graph(n - 1)}.get(kind) or nx.random_labeled_tree(
        n, seed=int(rng.integers(1 << 30)))
    edges = list(G.edges())
    if kind == "forest":  # cut two edges of a random tree
        edges = [edges[k] for k in sorted(rng.choice(len(edges), len(edges) - 2, replace=False))]
    J = np.zeros((n, n))
    for a, b in edges:
        J[a, b] = J[b, a] = rng.normal()
    return J


# ---- naive is a lower bound; TAP beats it at weak coupling ---------------------------------


def test_naive_is_a_lower_bound():
    """Random dense models (n = 10, 3 seeds × 5 coupling scales), all spins active and masked."""
    rng = np.random.default_rng(20)
    n, beta = 10, 1.0
    scales = [0.05, 0.2, 0.5, 1.0, 2.0]
    h = rng.normal(size=(3, len(scales), n))
    J = np.stack([np.stack([random_model(rng, n, J_scale=s)[1] for s in scales]) for _ in range(3)])
    mask = rng.random((3, len(scales), n)) < 0.7
    eng = MeanField(method="naive")
    for m in (None, mask):
        out = quiet(eng, IsingModel(h, J, beta, m))
        assert out.info["log_z_kind"] == "lower_bound" and out.log_z.shape == (3, len(scales))
        gap = exact_log_z(h, J, beta, m) - np.asarray(out.log_z)
        assert np.all(gap >= -1e-10), gap.min()  # measured: min gap 2.1e-3, max 14 (scale 2)


def test_tap_beats_naive_at_weak_coupling_with_the_expected_orders():
    rng = np.random.default_rng(12)
    K, n, beta = 8, 8, 1.0
    h = rng.normal(size=(K, n))
    G = np.triu(rng.normal(size=(K, n, n)), 1)
    G = G + np.swapaxes(G, -1, -2)
    scales = np.array([0.025, 0.05])
    J = scales[:, None, None, None] * G  # [2, K, n, n]
    ref = exact_log_z(h, J, beta)
    err = {}
    for method in ("naive", "tap"):
        out = MeanField(method=method, **TIGHT).marginals(IsingModel(h, J, beta))
        assert bool(jnp.all(out.info["converged"]))
        assert out.info["log_z_kind"] == KIND[method]
        err[method] = np.abs(np.asarray(out.log_z) - ref)  # [2, K]
    assert np.all(err["tap"] < err["naive"]), err  # per instance, both scales (measured: ≥ 33x)
    for method, order in (("naive", 2), ("tap", 3)):
        e = err[method].mean(-1)
        ratio = e[1] / e[0]
        assert abs(ratio / 2**order - 1) < 0.2, f"{method}: log Z error ratio {ratio:.2f}, expected {2**order} ± 20% ({e})"


# ---- Bethe is exact on trees and forests ---------------------------------------------------


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_bethe_exact_on_trees_and_forests_dense(dtype):
    """Path, star, random tree and a forest (dense J [4, n, n]), each with and without a mask
    (a masked tree is a forest)."""
    rng = np.random.default_rng(21)
    n, beta = 10, 0.8
    J = np.stack([tree_dense(rng, n, k) for k in ("path", "star", "tree", "forest")])
    h = rng.normal(size=(2, 4, n))
    mask = np.ones((2, 4, n), bool)
    mask[1] = rng.random((4, n)) < 0.7
    out = MeanField(method="bp", **({} if dtype == np.float32 else TIGHT)).marginals(
        IsingModel(h.astype(dtype), J.astype(dtype), beta, mask))
    assert out.log_z.dtype == dtype and out.log_z.shape == (2, 4) and out.info["log_z_kind"] == "approximation"
    assert bool(jnp.all(out.info["converged"]))
    ref = exact_log_z(h.astype(dtype), J.astype(dtype), beta, mask)
    tol = {"atol": 1e-11, "rtol": 0} if dtype == np.float64 else {"atol": 1e-5, "rtol": 1e-5}  # measured: 2e-15; 1.1e-6
    np.testing.assert_allclose(out.log_z, ref, **tol)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_bethe_exact_on_a_forest_sparse(dtype):
    """A sparse forest (path, star, random tree and two isolated spins, n = 16) with batched
    weights: O(E) from the edge list; equal to brute force and to the dense form."""
    rng = np.random.default_rng(22)
    n, beta = 16, 0.9
    g = forest_graph(rng, n)
    w = rng.normal(size=(3, g.E)).astype(dtype)
    h = rng.normal(size=(3, n)).astype(dtype)
    J = SparseCouplings(g, w)
    eng = MeanField(method="bp", **({} if dtype == np.float32 else TIGHT))
    out = eng.marginals(IsingModel(h, J, beta))
    assert out.log_z.dtype == dtype and out.log_z.shape == (3,)
    ref = exact_log_z(h, np.asarray(J.to_dense()), beta)
    tol = {"atol": 1e-11, "rtol": 0} if dtype == np.float64 else {"atol": 1e-5, "rtol": 1e-5}
    np.testing.assert_allclose(out.log_z, ref, **tol)
    dense = eng.marginals(IsingModel(h, J.to_dense(), beta))
    np.testing.assert_allclose(out.log_z, dense.log_z, **tol)


def test_bethe_equals_tree_decomposition_on_a_3000_spin_tree():
    """dwave-samplers' TreeDecompositionSampler reports log Σ exp(-β E_bqm) as
    info["log_partition_function"]: first checked against brute force on a tiny tree (its β
    convention), then sparse BP on a random tree of 3,000 spins against it."""
    samplers = pytest.importorskip("dwave.samplers")
    rng = np.random.default_rng(23)
    beta = 0.7

    def tree(n):
        G = nx.random_labeled_tree(n, seed=int(rng.integers(1 << 30)))
        g = CouplingGraph(n, np.array(list(G.edges())))
        return g, rng.normal(size=n), rng.normal(size=g.E)

    def tds(g, h, w):
        ss = samplers.TreeDecompositionSampler().sample(tree_bqm(g, h, w), beta=beta, marginals=True, num_reads=1)
        return ss.info["log_partition_function"]

    g, h, w = tree(8)
    ref = brute_force(h, np.asarray(SparseCouplings(g, w).to_dense()), beta)["log_z"]
    assert tds(g, h, w) == pytest.approx(ref, abs=1e-12)  # measured: equal to the last bit

    g, h, w = tree(3000)
    out = MeanField(method="bp", tol=1e-12, max_iter=20000).marginals(IsingModel(h, SparseCouplings(g, w), beta))
    assert bool(out.info["converged"])
    ref = tds(g, h, w)
    np.testing.assert_allclose(float(out.log_z), ref, rtol=1e-13, atol=0)  # measured: 1.4e-12 on 3287.1


# ---- derivatives ---------------------------------------------------------------------------


def loopy_sparse(rng):
    """A 3 x 3 lattice (loops), weights batched [2, E]."""
    g = lattice((3, 3))
    return g, rng.normal(size=(2, g.n)) * 0.7, rng.normal(size=(2, g.E)) * 0.4


@pytest.mark.parametrize("method", METHODS)
def test_log_z_derivatives_dense(method):
    """∂/∂h = β m; a directional derivative in (h, symmetric J, β) equals central differences;
    and the envelope rule equals the total derivative of Φ(x*(θ), θ) through the implicit
    differentiation of the fixed point (naive/TAP: Φ at the engine's mean; BP: at messages
    from the same solver)."""
    rng = np.random.default_rng(24)
    n, beta = 7, 0.9
    h, J = random_model(rng, n, h_scale=0.7)
    eng = MeanField(method=method, **TIGHT)
    lz = jax.jit(lambda h, J, b: eng.marginals(IsingModel(h, J, b)).log_z)
    out = eng.marginals(IsingModel(h, J, beta))
    gh, gJ, gb = jax.jit(jax.grad(lz, argnums=(0, 1, 2)))(h, J, beta)
    np.testing.assert_allclose(gh, beta * np.asarray(out.mean), atol=1e-13, rtol=0)
    np.testing.assert_allclose(gJ, np.swapaxes(gJ, -1, -2), atol=1e-14)  # symmetric, 0 diagonal, like Exact's
    np.testing.assert_array_equal(np.diagonal(gJ), 0.0)

    vh, vJ, vb = rng.normal(size=n), np.triu(rng.normal(size=(n, n)), 1), 0.5
    vJ = vJ + vJ.T
    eps = 1e-5
    fd = (lz(h + eps * vh, J + eps * vJ, beta + eps * vb) - lz(h - eps * vh, J - eps * vJ, beta - eps * vb)) / (2 * eps)
    np.testing.assert_allclose(gh @ vh + np.sum(gJ * vJ) + gb * vb, fd, atol=1e-8)  # measured: ≤ 5e-10

    if method == "bp":
        def plain(h, J, b):
            F, _ = bp_map(h, J, b)
            u, _ = DampedFixedPoint(0.5, TIGHT["tol"], TIGHT["max_iter"], 0).fixed_point(F, jnp.zeros((n, n)))
            return free_energy.bethe_dense(u, (h, J, b, None))
    else:
        def plain(h, J, b):
            m = eng.marginals(IsingModel(h, J, b)).mean
            return free_energy.mean_field(m, (h, J, b, None), tap=method == "tap")
    ph, pJ, pb = jax.jit(jax.grad(plain, argnums=(0, 1, 2)))(h, J, beta)
    off = 1 - np.eye(n)
    np.testing.assert_allclose(float(plain(h, J, beta)), float(out.log_z), atol=1e-12)
    np.testing.assert_allclose(ph, gh, atol=1e-11)  # measured: ≤ 2e-13
    np.testing.assert_allclose((pJ + pJ.T) / 2 * off, gJ, atol=1e-11)
    np.testing.assert_allclose(pb, gb, atol=1e-11)


@pytest.mark.parametrize("method", METHODS)
def test_log_z_derivatives_sparse(method):
    """On a loopy sparse lattice (batched weights): ∂/∂h = β m; ∂/∂w_e is β⟨s_i s_j⟩ of the
    method (naive β m_i m_j, TAP plus β² w_e (1 - m_i²)(1 - m_j²), BP β times the Bethe pair
    correlation of corr=True); ∂/∂w_e for every edge and ∂/∂β equal central differences of
    the returned log Z."""
    rng = np.random.default_rng(25)
    g, h, w = loopy_sparse(rng)
    beta = 0.9
    eng = MeanField(method=method, **TIGHT)
    lz = jax.jit(lambda h, w, b: jnp.sum(eng.marginals(IsingModel(h, SparseCouplings(g, w), b)).log_z))
    out = eng.marginals(IsingModel(h, SparseCouplings(g, w), beta))
    assert out.info["log_z_kind"] == KIND[method] and out.log_z.shape == (2,)
    gh, gw, gb = jax.jit(jax.grad(lz, argnums=(0, 1, 2)))(h, w, beta)
    np.testing.assert_allclose(gh, beta * np.asarray(out.mean), atol=1e-13, rtol=0)
    m, (i, j) = np.asarray(out.mean), g.edges.T
    if method == "bp":
        corr = MeanField(method="bp", corr=True, **TIGHT).marginals(IsingModel(h, SparseCouplings(g, w).to_dense(), beta)).corr
        expect = beta * np.asarray(corr)[:, i, j]
    else:
        expect = beta * m[:, i] * m[:, j]
        if method == "tap":
            expect = expect + beta**2 * w * (1 - m[:, i] ** 2) * (1 - m[:, j] ** 2)
    np.testing.assert_allclose(gw, expect, atol=1e-12)
    eps = 1e-5
    E = np.eye(g.E)
    fd_w = np.stack([(lz(h, w + eps * E[e], beta) - lz(h, w - eps * E[e], beta)) / (2 * eps) for e in range(g.E)], -1)
    # one perturbed edge in both models at once: the sum of the two models' derivatives
    np.testing.assert_allclose(gw.sum(0), fd_w, atol=1e-8)  # measured: ≤ 2e-10
    fd_b = (lz(h, w, beta + eps) - lz(h, w, beta - eps)) / (2 * eps)
    np.testing.assert_allclose(gb, fd_b, atol=1e-8)
    # the sparse form equals the dense one, derivatives included
    dense = lambda h, w, b: jnp.sum(eng.marginals(IsingModel(h, SparseCouplings(g, w).to_dense(), b)).log_z)
    np.testing.assert_allclose(lz(h, w, beta), dense(h, w, beta), atol=1e-11)
    gd = jax.grad(dense, argnums=(0, 1, 2))(h, w, beta)
    for a, b in zip((gh, gw, gb), gd):
        np.testing.assert_allclose(a, b, atol=1e-11)


@pytest.mark.parametrize("method", ["naive", "bp"])
def test_log_z_hessian_is_the_susceptibility(method):
    """∂²log Z/∂h∂h = β ∂m/∂h (the rule's ∂Φ/∂h = βm carries m's implicit derivative), and it
    equals central differences of the gradient."""
    rng = np.random.default_rng(26)
    n, beta = 6, 0.8
    h, J = random_model(rng, n, h_scale=0.7)
    eng = MeanField(method=method, **TIGHT)
    lz = lambda h: eng.marginals(IsingModel(h, J, beta)).log_z
    H = jax.jit(jax.hessian(lz))(h)
    chi = jax.jit(jax.jacfwd(lambda h: eng.marginals(IsingModel(h, J, beta)).mean))(h)
    np.testing.assert_allclose(H, beta * chi, atol=1e-12)
    grad = jax.jit(jax.grad(lz))
    eps = 1e-5
    fd = np.stack([(grad(h + eps * e) - grad(h - eps * e)) / (2 * eps) for e in np.eye(n)], -1)
    np.testing.assert_allclose(H, fd, atol=1e-8)  # measured: ≤ 2e-11


def test_float32_saturated_fields_give_finite_log_z_and_gradients():
    """Fields and couplings far beyond tanh's float32 range (m rounds to ±1): the entropy of
    a saturated spin is 0, and no atanh(±1) is differentiated (the envelope rule)."""
    rng = np.random.default_rng(27)
    h, J = random_model(rng, 8, h_scale=100.0, J_scale=50.0, graph="chain")  # a tree: BP is exact
    h, J = h.astype(np.float32), J.astype(np.float32)
    ref = brute_force(h, J, 1.0)["log_z"]
    for method in METHODS:
        eng = MeanField(method=method)
        lz = lambda h, J, eng=eng: quiet(eng, IsingModel(h, J, 1.0)).log_z
        val = lz(h, J)
        g = jax.grad(lz, argnums=(0, 1))(h, J)
        assert val.dtype == jnp.float32 and bool(jnp.isfinite(val)), method
        assert all(bool(jnp.all(jnp.isfinite(x))) for x in g), method
        if method == "bp":
            np.testing.assert_allclose(val, ref, rtol=1e-5)


# ---- batches, masks, causal models ---------------------------------------------------------


@pytest.mark.parametrize("method", METHODS)
def test_batched_masked_log_z(method):
    """h [3, 2, n], J [2, n, n] shared over the first axis, a per-model mask: log_z [3, 2];
    a masked model's log Z equals that of the model with its inactive spins deleted (dense,
    and sparse for the batch's first row)."""
    rng = np.random.default_rng(28)
    n, beta = 6, 1.0
    h = rng.normal(size=(3, 2, n))
    J = np.stack([random_model(rng, n, J_scale=0.4)[1] for _ in range(2)])
    mask = rng.random((3, 2, n)) < 0.7
    mask[0, 0] = True
    mask[2, 1, :4] = [True, False, True, False]
    eng = MeanField(method=method, **TIGHT)
    out = eng.marginals(IsingModel(h, J, beta, mask))
    assert out.log_z.shape == (3, 2) and out.info["log_z_kind"] == KIND[method]
    for a, b in [(1, 0), (2, 1)]:
        idx = np.flatnonzero(mask[a, b])
        sub = eng.marginals(IsingModel(h[a, b, idx], J[b][np.ix_(idx, idx)], beta))
        np.testing.assert_allclose(float(out.log_z[a, b]), float(sub.log_z), atol=1e-11)
    if method == "bp":  # all masked: log Z of no spins is 0
        none = eng.marginals(IsingModel(h[0, 0], J[0], beta, np.zeros(n, bool)))
        assert float(none.log_z) == 0.0
    sparse = eng.marginals(IsingModel(h, SparseCouplings(CouplingGraph(n, np.argwhere(np.triu(J[0] != 0, 1))),
                                                         J[:, np.triu(J[0] != 0, 1)]), beta, mask))
    np.testing.assert_allclose(sparse.log_z, out.log_z, atol=1e-11)


@pytest.mark.parametrize("method", METHODS)
def test_causal_log_z(method):
    """A causal model (h [B, n queries, n]) gives log_z [B, n] through the causal buckets;
    query i's log Z is that of spins 0..i (the same fields with the prefix as a mask), and
    log_z_kind passes the buckets (also for Exact; Banded is natively causal)."""
    rng = np.random.default_rng(29)
    B, n, beta = 2, 6, 1.0
    h = rng.normal(size=(B, n, n))
    J = random_model(rng, n, J_scale=0.3)[1]
    eng = MeanField(method=method, **TIGHT)
    out = eng.marginals(IsingModel(h, J, beta, causal=True))
    assert out.log_z.shape == (B, n) and out.info["log_z_kind"] == KIND[method]
    assert bool(jnp.all(out.info["converged"]))
    prefix = np.broadcast_to(np.tril(np.ones((n, n), bool)), (B, n, n))
    ref = eng.marginals(IsingModel(h, J, beta, prefix))
    np.testing.assert_allclose(out.log_z, ref.log_z, atol=1e-11)
    if method == "bp":  # the same convention as the exact engines
        ex = Exact().marginals(IsingModel(h, J, beta, causal=True))
        assert ex.log_z.shape == (B, n) and ex.info["log_z_kind"] == "exact"
        np.testing.assert_allclose(ex.log_z, exact_log_z(h, J, beta, prefix), atol=1e-10)
        chain = np.triu(np.tril(J, 1), 1)
        chain = chain + chain.T
        bd = Banded(bandwidth=1).marginals(IsingModel(h, chain, beta, causal=True))
        assert bd.log_z.shape == (B, n) and bd.info["log_z_kind"] == "exact"
        np.testing.assert_allclose(eng.marginals(IsingModel(h, chain, beta, causal=True)).log_z, bd.log_z, atol=1e-11)


def test_log_z_kind_survives_jit():
    """info["log_z_kind"] is static pytree data: a whole Marginals comes out of jax.jit."""
    rng = np.random.default_rng(30)
    h, J = random_model(rng, 5)
    for eng, kind in ((MeanField(method="naive"), "lower_bound"), (Exact(), "exact")):
        out = jax.jit(lambda m, eng=eng: eng.marginals(m))(IsingModel(h, J, 1.0))
        assert out.info["log_z_kind"] == kind and isinstance(out.info["log_z_kind"], str)
        assert out.log_z.shape == ()
