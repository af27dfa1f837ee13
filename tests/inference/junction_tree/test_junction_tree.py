"""JunctionTree (``isingattn.inference.junction_tree``) against independent references: the
float64 brute force on random graphs (n ≤ 14), dwave-samplers' ``TreeDecompositionSampler``
(marginals, ``interaction_marginals``, ``log_partition_function``) on Chimera C3, a king's graph
8 × 24 and a lattice with fields, a chi-square test of the exact samples against the brute-force
probabilities, and central finite differences of the brute-force log Z for the gradients. Plus
the refusals (a graph too wide for the memory budget, a traced dense J without a graph)."""


import jax
import jax.numpy as jnp
import networkx as nx
import numpy as np
import pytest

from isingattn import IsingModel, graphs, inference
from isingattn.engine import from_spec, to_spec
from isingattn.errors import IsingInputError
from isingattn.inference.junction_tree import JunctionTree, sample_junction_tree
from isingattn.inference.junction_tree.order import HEURISTICS, heuristic_order
from isingattn.inference.junction_tree.plan import Plan
from isingattn.sparse import CouplingGraph, SparseCouplings
from isingattn.testing import brute_force, brute_force_batch, chi_square_p

TOL = 1e-10
P_MIN = 1e-3  # chi-square p-value below which the draws are rejected


def random_dense(seed, n, p, batch=(3,), beta_h=1.0):
    """Gaussian fields and couplings on an Erdős–Rényi graph, float64: (h [*batch, n], J [*batch, n, n])."""
    rng = np.random.default_rng(seed)
    on = np.triu(rng.random((n, n)) < p, 1)
    A = np.triu(rng.normal(size=batch + (n, n)), 1) * on
    return beta_h * rng.normal(size=batch + (n,)), A + np.swapaxes(A, -1, -2)


def edge_values(x, J):
    e = np.argwhere(np.triu(np.any(np.asarray(J).reshape(-1, *J.shape[-2:]) != 0, axis=0), 1))
    return x[..., e[:, 0], e[:, 1]]


# ---- the plan alone (no JAX) ------------------------------------------------------------------


def test_plans_of_every_heuristic_eliminate_each_spin_once():
    """Every heuristic gives a permutation; the width of the natural order of a band is at most
    its bandwidth, and min-fill finds width 1 on a tree (a path numbered out of order)."""
    g = graphs.lattice((6, 3))
    for h in HEURISTICS:
        order = heuristic_order(h, g.n, g.edges)
        assert sorted(order) == list(range(g.n))
        p = Plan(g.n, g.edges, order, h)
        assert sorted(p.order.tolist()) == list(range(g.n))
    assert Plan(g.n, g.edges, heuristic_order("natural", g.n, g.edges)).treewidth <= 3
    perm = np.random.default_rng(0).permutation(12)
    path = np.stack([perm[:-1], perm[1:]], axis=1)
    assert Plan(12, path, heuristic_order("min-fill", 12, path)).treewidth == 1


# ---- against the float64 brute force -----------------------------------------------------------


@pytest.mark.parametrize("seed, n, p", [(0, 9, 0.45), (1, 14, 0.4)])
def test_matches_brute_force_on_random_graphs(seed, n, p):
    h, J = random_dense(seed, n, p)
    out = JunctionTree().marginals(IsingModel(h, J, 0.9))
    ref = brute_force_batch(h, J, 0.9)
    np.testing.assert_allclose(out.mean, ref["mean"], atol=TOL)
    np.testing.assert_allclose(out.log_z, ref["log_z"], rtol=TOL)
    np.testing.assert_allclose(out.info["edge_corr"], edge_values(ref["corr"], J), atol=TOL)
    assert out.info["log_z_kind"] == "exact"


def test_full_corr_mask_and_a_disconnected_graph():
    """corr=True (linear response through both passes), a per-model mask (a removed spin adds
    nothing to log Z) and a graph of several components, each its own root."""
    h, J = random_dense(3, 10, 0.5)
    J[..., :4, 4:] = J[..., 4:, :4] = 0  # two components
    mask = np.ones((3, 10), bool)
    mask[1, [2, 7]] = False
    out = JunctionTree(corr=True).marginals(IsingModel(h, J, 1.3, mask))
    ref = brute_force_batch(h, J, 1.3, mask)
    np.testing.assert_allclose(out.mean, ref["mean"], atol=TOL)
    np.testing.assert_allclose(out.log_z, ref["log_z"], rtol=TOL)
    np.testing.assert_allclose(out.corr, ref["corr"], atol=1e-9)
    assert nx.number_connected_components(nx.from_numpy_array(J[0] != 0)) > 1


# ---- against dwave-samplers' TreeDecompositionSampler -----------------------------------------


def tree_decomposition(model):
    """(m [n], edge ⟨s_i s_j⟩ [E] in the graph's edge order, log Z) of one sparse model."""
    samplers = pytest.importorskip("dwave.samplers")
    ss = samplers.TreeDecompositionSampler().sample(model.to_bqm(), beta=float(model.beta), marginals=True,
                                                    num_reads=1)
    n, edges = model.n, model.J.graph.edges
    m = np.array([2 * ss.info["variable_marginals"][v] - 1 for v in range(n)])
    pair = {tuple(sorted((int(a), int(b)))): p for (a, b), p in ss.info["interaction_marginals"].items()}
    c = []
    for a, b in edges.tolist():
        p = pair[(a, b)]
        c.append(p[(1, 1)] + p[(-1, -1)] - p[(1, -1)] - p[(-1, 1)])
    return m, np.array(c), ss.info["log_partition_function"]


def king_graph(rows, cols) -> CouplingGraph:
    G = nx.grid_2d_graph(rows, cols)
    G.add_edges_from(((i, j), (i + 1, j + d)) for i in range(rows - 1) for j in range(cols) for d in (-1, 1)
                     if 0 <= j + d < cols)
    G = nx.convert_node_labels_to_integers(G, ordering="sorted")
    return CouplingGraph(G.number_of_nodes(), np.asarray(G.edges))


@pytest.mark.parametrize("name", ["chimera3", "king8x24", "lattice5x6"])
def test_matches_tree_decomposition_sampler(name):
    g = {"chimera3": lambda: graphs.chimera(3), "king8x24": lambda: king_graph(8, 24),
         "lattice5x6": lambda: graphs.lattice((5, 6))}[name]()
    key = jax.random.key(len(name))
    J = graphs.random_couplings(key, g, "gaussian", 0.8, batch=(2,), dtype=jnp.float64)
    h = 0.6 * jax.random.normal(jax.random.fold_in(key, 1), (2, g.n), jnp.float64)
    model = IsingModel(h, J, 0.9)
    out = JunctionTree().marginals(model)
    for q in range(2):
        one = IsingModel(h[q], SparseCouplings(g, J.weights[q]), 0.9)
        m, c, lz = tree_decomposition(one)
        np.testing.assert_allclose(out.mean[q], m, atol=1e-9)
        np.testing.assert_allclose(out.info["edge_corr"][q], c, atol=1e-9)
        np.testing.assert_allclose(out.log_z[q], lz, rtol=1e-11)


# ---- exact samples -----------------------------------------------------------------------------


def test_samples_pass_chi_square_against_brute_force():
    """Two models of a 7-spin graph with a triangle (a clique of three), one with a masked spin:
    the configuration counts of 20,000 draws each against the exact probabilities."""
    h, J = random_dense(5, 7, 0.5, batch=(2,), beta_h=0.7)
    mask = np.ones((2, 7), bool)
    mask[1, 4] = False
    draws = np.asarray(sample_junction_tree(IsingModel(h, J, 1.0, mask), key=jax.random.key(3), num_samples=20_000))
    assert draws.shape == (20_000, 2, 7)
    assert np.all(draws[:, 1, 4] == 1)
    for q in range(2):
        ref = brute_force(h[q], J[q], 1.0, mask[q])
        keep = np.flatnonzero(mask[q])
        assert chi_square_p(draws[:, q][:, keep], ref["probs"]) > P_MIN


# ---- gradients -----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def small_model():
    h, J = random_dense(7, 8, 0.5, batch=())
    return h, J, 0.8, JunctionTree().prepared(IsingModel(h, J, 0.8))  # prepared: the graph, for a traced J


def test_gradients_match_finite_differences_of_brute_force(small_model):
    """d log Z / d(h, J, β) (the custom VJP: the moments) against central differences of the
    float64 brute-force log Z."""
    h, J, beta, eng = small_model
    f = lambda h, J, b: eng.marginals(IsingModel(h, J, b)).log_z
    gh, gJ, gb = jax.grad(f, argnums=(0, 1, 2))(jnp.asarray(h), jnp.asarray(J), jnp.asarray(beta))
    lz = lambda h, J, b: brute_force(h, J, b)["log_z"]
    eps = 1e-5
    for i in (0, 5):
        d = np.eye(8)[i] * eps
        np.testing.assert_allclose(gh[i], (lz(h + d, J, beta) - lz(h - d, J, beta)) / (2 * eps), atol=1e-8)
    a, b = np.argwhere(np.triu(J, 1) != 0)[0]
    dJ = np.zeros_like(J)
    dJ[a, b] = dJ[b, a] = eps
    # J_ab and J_ba are one coupling: the two symmetric entries share its derivative
    np.testing.assert_allclose(gJ[a, b] + gJ[b, a], (lz(h, J + dJ, beta) - lz(h, J - dJ, beta)) / (2 * eps),
                               atol=1e-8)
    np.testing.assert_allclose(gb, (lz(h, J, beta + eps) - lz(h, J, beta - eps)) / (2 * eps), atol=1e-8)


@pytest.mark.slow
def test_second_order_gradients_match_finite_differences(small_model):
    """d Σ c·⟨s⟩ / dh (autodiff through both passes) against central differences of the
    brute-force means."""
    h, J, beta, eng = small_model
    c = np.random.default_rng(0).normal(size=8)
    g2 = jax.grad(lambda h: jnp.dot(eng.marginals(IsingModel(h, J, beta)).mean, c))(jnp.asarray(h))
    mean = lambda h: brute_force(h, J, beta)["mean"] @ c
    eps = 1e-5
    for i in (1, 3):
        d = np.eye(8)[i] * eps
        np.testing.assert_allclose(g2[i], (mean(h + d) - mean(h - d)) / (2 * eps), atol=1e-7)


# ---- configuration, jit and refusals -----------------------------------------------------------


def test_registry_spec_orders_and_jit():
    """get('junction-tree'), a JSON spec round trip, a user order, and a prepared engine under
    jax.jit on a traced dense J (without it, every pair is taken as coupled: refused at n = 40)."""
    eng = inference.get("junction-tree", order="min-degree")
    assert from_spec(to_spec(eng)) == eng
    h, J = random_dense(0, 9, 0.45)  # the graph of the first brute-force case: its plans are cached
    model = IsingModel(h, J, 0.9)
    ref = brute_force_batch(h, J, 0.9)
    out = JunctionTree(order=list(range(9))[::-1]).marginals(model)
    np.testing.assert_allclose(out.mean, ref["mean"], atol=TOL)
    assert out.info["elimination_order"].shape == (3, 9)
    with pytest.raises(IsingInputError, match="every spin 0..8 exactly once"):
        JunctionTree(order=[0, 1, 2]).marginals(model)
    big = np.zeros((3, 40, 40))
    with pytest.raises(IsingInputError, match="width 39 .* traced"):  # a traced dense J: every pair
        jax.jit(lambda J: JunctionTree().marginals(IsingModel(np.zeros(40), J, 0.9)).log_z)(big)
    prepared = JunctionTree().prepared(model)
    lz = jax.jit(lambda J: prepared.marginals(IsingModel(h, J, 0.9)).log_z)(J)
    np.testing.assert_allclose(lz, ref["log_z"], rtol=TOL)


def test_a_graph_too_wide_for_the_budget_is_refused_with_its_width_and_memory():
    g = graphs.erdos_renyi(jax.random.key(0), 60, 0.5)
    model = IsingModel(np.zeros(g.n), SparseCouplings(g, np.ones(g.E)), 1.0)
    with pytest.raises(IsingInputError, match=r"width \d+ .* needs [\d.e+]+ GiB .* max_bytes = 2 GiB"):
        JunctionTree().marginals(model)
    with pytest.raises(IsingInputError, match="max_bytes"):
        JunctionTree(max_bytes=2**10).marginals(IsingModel(*random_dense(0, 9, 0.45)))
