"""Planar: exact zero-field log Z and edge correlations by Pfaffians, on planar graphs and the
square-lattice torus.

Independent references, all written here or in isingattn.onsager: float64 brute force over the
2^n states (n ≤ 16: lattices, tori and planar glasses in shuffled labellings, with bridges and
cut vertices), Kaufman's formula for the uniform torus across K_c, a row-by-row transfer matrix
on long strips and cylinders (numpy), and central differences of log Z for the edge
correlations; then the refusals.
"""

import itertools
import math

import jax
import jax.numpy as jnp
import networkx as nx
import numpy as np
import pytest

from isingattn import IsingModel, graphs
from isingattn.engine import from_spec, get, to_spec
from isingattn.errors import IsingInputError
from isingattn.inference.planar import Planar
from isingattn.onsager import K_C, torus_log_z
from isingattn.sparse import CouplingGraph, SparseCouplings

F64 = 1e-11  # absolute on log Z (|log Z| ≲ 60 here)
CORR = 1e-9  # absolute on correlations: entries of K⁻¹ from the LU (1e-10 measured on the wheel's hub at β = 2)
# On the torus the correlations are a weighted sum over the four Pfaffians of entries of K_ab⁻¹ from
# Woodbury on the planar part; on the frustrated 4x4 glass at β = 2 the ratios Pf(K_ab)/Pf(K_planar)
# are ~1e-2 and cond(G + C⁻¹) ~4e5, so round-off reaches 2.6e-8 (measured).
TORUS_CORR = 1e-7


def brute(n, edges, w, beta, mask=None):
    """float64 log Z and ⟨s_i s_j⟩ per edge, over every state of the active spins."""
    act = np.ones(n, bool) if mask is None else np.asarray(mask)
    S = np.ones((2 ** int(act.sum()), n))
    S[:, act] = np.array(list(itertools.product([-1.0, 1.0], repeat=int(act.sum()))))
    e = np.asarray(edges)
    on = act[e[:, 0]] & act[e[:, 1]]
    pair = S[:, e[:, 0]] * S[:, e[:, 1]]
    lw = beta * (pair[:, on] * np.asarray(w)[on]).sum(1)
    top = lw.max()
    p = np.exp(lw - top)
    return top + math.log(p.sum()), (p[:, None] * pair).sum(0) / p.sum()


def glass(g, seed, scale=1.0):
    """±J couplings times uniform magnitudes in [0.5, 1.5] (no two alike: a generic glass)."""
    r = np.random.default_rng(seed)
    return r.choice([-1.0, 1.0], g.E) * r.uniform(0.5, 1.5, g.E) * scale


def shuffled(G, seed):
    """A networkx graph as a CouplingGraph with its nodes relabelled at random."""
    G = nx.convert_node_labels_to_integers(G)
    perm = np.random.default_rng(seed).permutation(G.number_of_nodes())
    return CouplingGraph(G.number_of_nodes(), [[perm[a], perm[b]] for a, b in G.edges()])


def planar_zoo():
    """Planar graphs of ≤ 16 spins beyond the lattice: triangulated (degree 6), a wheel (a hub of
    degree 10), two 4-cycles joined by a bridge with a pendant spin, two triangles sharing a spin
    (a cut vertex), a random maximal planar graph and an outerplanar fan, plus isolated spins."""
    two_squares = nx.cycle_graph(4)
    two_squares.add_edges_from([(0, 10), (10, 11), (11, 12), (12, 13), (13, 10), (2, 14)])
    bowtie = nx.Graph([(0, 1), (1, 2), (2, 0), (2, 3), (3, 4), (4, 2)])
    bowtie.add_nodes_from([5, 6])
    pts = np.random.default_rng(3).random((12, 2))
    from scipy.spatial import Delaunay

    tri = Delaunay(pts).simplices
    delaunay = nx.Graph([(int(a), int(b)) for s in tri for a, b in itertools.combinations(s, 2)])
    fan = nx.Graph([(0, k) for k in range(1, 9)] + [(k, k + 1) for k in range(1, 8)])
    return {"triangular": nx.triangular_lattice_graph(2, 5), "wheel": nx.wheel_graph(11), "bridge": two_squares,
            "bowtie": bowtie, "delaunay": delaunay, "fan": fan}


@pytest.mark.parametrize("name", ["lattice 4x4", "torus 4x4", "cylinder 3x5", *planar_zoo()])
@pytest.mark.parametrize("beta", [0.5, 2.0])
def test_against_brute_force(name, beta):
    if name == "lattice 4x4":
        g = graphs.lattice((4, 4))
    elif name == "torus 4x4":
        g = graphs.lattice((4, 4), periodic=True)
    elif name == "cylinder 3x5":  # periodic rows only: a torus graph with no vertical wrap
        t = graphs.lattice((3, 5), periodic=True)
        keep = ~((t.edges[:, 1] - t.edges[:, 0]) == 10)
        g = CouplingGraph(15, t.edges[keep])
    else:
        g = shuffled(planar_zoo()[name], seed=len(name))
    w = glass(g, seed=len(name) + int(10 * beta))
    torus = name.startswith(("torus", "cylinder"))
    out = Planar(edge_corr=True).marginals(IsingModel(np.zeros(g.n), SparseCouplings(g, w), beta=beta))
    ref_lz, ref_corr = brute(g.n, g.edges, w, beta)
    assert out.info["graph_kind"] == ("torus" if torus else "lattice" if name.startswith("lattice") else "planar")
    assert abs(float(out.log_z) - ref_lz) < F64
    assert np.all(np.asarray(out.mean) == 0)
    np.testing.assert_allclose(out.info["edge_corr"], ref_corr, rtol=0, atol=TORUS_CORR if torus else CORR)
    np.testing.assert_array_equal(out.info["edges"], g.edges)


TORI = [(4, 4), (3, 7), (8, 8), (16, 16), (32, 32), pytest.param((64, 64), marks=pytest.mark.slow)]


@pytest.mark.parametrize("shape", TORI)
def test_torus_against_kaufman(shape):
    """The four-Pfaffian sum against Kaufman's formula (its four products), below, at and
    above K_c; the larger tori at fewer couplings (each K costs a sparse LU and 2(L+M) solves;
    benchmarks/planar.py --torus runs 128 x 128)."""
    g = graphs.lattice(shape, periodic=True)
    Ks = [K_C] if g.n > 1024 else [0.9 * K_C, K_C, 1.1 * K_C] if g.n > 256 else [0.2, 0.9 * K_C, K_C, 1.1 * K_C, 2.0]
    for K in Ks:
        out = Planar().marginals(IsingModel(np.zeros(g.n), SparseCouplings(g, np.ones(g.E)), beta=K))
        ref = float(torus_log_z(*shape, K))
        assert abs(float(out.log_z) - ref) <= 1e-8 * abs(ref), (shape, K)


def transfer_log_z(L, W, right, down, beta, periodic, diag=None):
    """log Z of an L-row, W-column strip, row by row over the 2^W states of a row: ``right[r, c]``
    couples (r, c)-(r, c+1) (c = W-1: the wrap to column 0 when ``periodic``), ``down[r, c]``
    couples (r, c)-(r+1, c) and ``diag[r, c]`` (optional, c < W-1) couples (r, c)-(r+1, c+1)."""
    rows = np.array(list(itertools.product([-1.0, 1.0], repeat=W)))
    nxt = np.roll(rows, -1, axis=1)
    span = W if periodic else W - 1
    log_v = np.zeros(rows.shape[0])
    for r in range(L):
        log_v = log_v + beta * (rows[:, :span] * nxt[:, :span] * right[r, :span]).sum(1)
        if r < L - 1:
            A = log_v[:, None] + beta * (rows[:, None, :] * rows[None, :, :] * down[r]).sum(-1)
            if diag is not None:
                A = A + beta * (rows[:, None, :-1] * rows[None, :, 1:] * diag[r, :-1]).sum(-1)
            top = A.max(0)
            log_v = top + np.log(np.exp(A - top).sum(0))
    top = log_v.max()
    return top + math.log(np.exp(log_v - top).sum())


@pytest.mark.parametrize("periodic", [False, True])
def test_strips_against_transfer_matrix(periodic):
    """A 60 × 5 strip (open) and cylinder (the rows wrap around: the torus path with no vertical
    wrap), random Gaussian couplings, at β = 1 and 3."""
    L, W = 60, 5
    n = L * W
    idx = np.arange(n).reshape(L, W)
    r = np.random.default_rng(7 + periodic)
    right, down = r.normal(size=(L, W)), r.normal(size=(L - 1, W))
    span = W if periodic else W - 1
    edges = [(idx[i, c], idx[i, (c + 1) % W]) for i in range(L) for c in range(span)]
    edges += [(idx[i, c], idx[i + 1, c]) for i in range(L - 1) for c in range(W)]
    w = [right[i, c] for i in range(L) for c in range(span)] + [down[i, c] for i in range(L - 1) for c in range(W)]
    g = CouplingGraph(n, edges)
    for beta in (1.0, 3.0):
        out = Planar().marginals(IsingModel(np.zeros(n), SparseCouplings(g, np.array(w)), beta=beta))
        assert out.info["graph_kind"] == ("torus" if periodic else "lattice")
        ref = transfer_log_z(L, W, right, down, beta, periodic)
        assert abs(float(out.log_z) - ref) <= 1e-10 * abs(ref)


def test_general_path_against_transfer_matrix():
    """The networkx path on larger graphs: a 30 × 4 triangular strip (cities of degree 6) and a
    30 × 4 square strip, both relabelled at random (so no lattice is recognised), Gaussian
    couplings at β = 1.5, against the transfer matrix over the original rows."""
    L, W, beta = 30, 4, 1.5
    idx = np.arange(L * W).reshape(L, W)
    r = np.random.default_rng(5)
    right, down, diag = r.normal(size=(L, W)), r.normal(size=(L - 1, W)), r.normal(size=(L - 1, W))
    for triangular in (False, True):
        pairs = [((i, c), (i, c + 1), right[i, c]) for i in range(L) for c in range(W - 1)]
        pairs += [((i, c), (i + 1, c), down[i, c]) for i in range(L - 1) for c in range(W)]
        if triangular:
            pairs += [((i, c), (i + 1, c + 1), diag[i, c]) for i in range(L - 1) for c in range(W - 1)]
        perm = r.permutation(L * W)
        g = CouplingGraph(L * W, [(perm[idx[a]], perm[idx[b]]) for a, b, _ in pairs])
        w = np.array([x for _, _, x in pairs])
        out = Planar().marginals(IsingModel(np.zeros(g.n), SparseCouplings(g, w), beta=beta))
        assert out.info["graph_kind"] == "planar"
        ref = transfer_log_z(L, W, right, down, beta, False, diag if triangular else None)
        assert abs(float(out.log_z) - ref) <= 1e-10 * abs(ref)


@pytest.mark.parametrize("name", ["lattice 10x10", "torus 6x7", "delaunay"])
def test_edge_corr_against_finite_differences(name):
    """⟨s_i s_j⟩ = ∂ log Z / ∂(βJ_e), against central differences of Planar's own log Z on a
    glass at β = 1.5 (step 1e-5: truncation ~1e-10 · third derivative); on the torus, wrap edges
    among the checked ones."""
    if name == "delaunay":
        g = shuffled(planar_zoo()["delaunay"], 1)
    else:
        g = graphs.lattice((10, 10) if name.startswith("lattice") else (6, 7), periodic=name.startswith("torus"))
    w = glass(g, seed=11)
    beta, step = 1.5, 1e-5
    eng = Planar()
    lz = lambda w: float(eng.marginals(IsingModel(np.zeros(g.n), SparseCouplings(g, w), beta=beta)).log_z)
    corr = Planar(edge_corr=True).marginals(IsingModel(np.zeros(g.n), SparseCouplings(g, w), beta=beta)).info["edge_corr"]
    d = g.edges[:, 1] - g.edges[:, 0]
    wraps = np.flatnonzero((d > 1) & (d != 7))[:2] if name.startswith("torus") else []
    for e in [*np.random.default_rng(0).choice(g.E, 6, replace=False), *wraps]:
        d = np.zeros(g.E)
        d[e] = step / beta
        fd = (lz(w + d) - lz(w - d)) / (2 * step)
        assert abs(fd - corr[e]) < 1e-6, (e, fd, corr[e])


def test_dense_batch_mask_and_registry():
    """A dense batched J gives the sparse results; a masked spin leaves the graph (brute force over
    the active ones); ``get("planar")`` builds the engine."""
    g = graphs.lattice((3, 4))
    w = np.stack([glass(g, 1), glass(g, 2)])
    J = np.asarray(SparseCouplings(g, w).to_dense())
    mask = np.ones((2, g.n), bool)
    mask[1, 5] = False
    out = get("planar", edge_corr=True).marginals(IsingModel(np.zeros(g.n), J, beta=1.3, mask=mask))
    assert out.log_z.shape == (2,) and out.mean.shape == (2, g.n)
    edges = out.info["edges"]  # the dense J's nonzero pairs, row-major
    assert sorted(map(tuple, edges.tolist())) == sorted(map(tuple, g.edges.tolist()))
    for b in range(2):
        lz, corr = brute(g.n, edges, J[b][edges[:, 0], edges[:, 1]], 1.3, mask[b])
        assert abs(out.log_z[b] - lz) < F64
        on = mask[b][edges[:, 0]] & mask[b][edges[:, 1]]
        np.testing.assert_allclose(out.info["edge_corr"][b][on], corr[on], atol=CORR)


def test_refusals():
    g = graphs.lattice((4, 4))
    J = SparseCouplings(g, np.ones(g.E))
    with pytest.raises(IsingInputError, match="zero-field.*junction-tree.*'pa'"):
        Planar().marginals(IsingModel(np.full(g.n, 0.1), J))
    for G in (nx.complete_graph(5), nx.complete_bipartite_graph(3, 3), nx.grid_graph((3, 3, 3))):
        k = shuffled(G, 0)
        with pytest.raises(IsingInputError, match="neither.*junction-tree.*'pa'"):
            Planar().marginals(IsingModel(np.zeros(k.n), SparseCouplings(k, np.ones(k.E))))
    with pytest.raises(IsingInputError, match="concrete model"):
        jax.jit(lambda w: Planar().marginals(IsingModel(jnp.zeros(g.n), SparseCouplings(g, w))).mean)(jnp.ones(g.E))
    with pytest.raises(IsingInputError, match="edge_corr"):
        Planar(edge_corr="yes")


def test_causal_float32_and_spec():
    """Causal queries (prefix by prefix) against brute force over each prefix; a float32 model
    still gets a float64 log Z (float32 is only the model's storage: the weights are read as
    they are); the engine's spec round-trips. (The first causal call compiles the template's
    bucketing: a 4-spin model keeps that short.)"""
    g = graphs.lattice((2, 2))
    w = glass(g, 5)
    J = np.asarray(SparseCouplings(g, w).to_dense())
    out = Planar().marginals(IsingModel(np.zeros((g.n, g.n)), J, beta=0.7, causal=True))
    for i in range(g.n):
        assert abs(out.log_z[i] - brute(g.n, g.edges, w, 0.7, np.arange(g.n) <= i)[0]) < F64
    w32 = w.astype(np.float32)
    out = Planar().marginals(IsingModel(np.zeros(g.n, np.float32), SparseCouplings(g, w32), beta=0.7))
    assert out.log_z.dtype == np.float64 and out.mean.dtype == np.float32
    assert abs(float(out.log_z) - brute(g.n, g.edges, w32.astype(np.float64), np.float32(0.7))[0]) < F64
    assert from_spec(to_spec(Planar(edge_corr=True))) == Planar(edge_corr=True)
