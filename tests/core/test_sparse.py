"""Sparse couplings (isingattn.sparse) and the graphs built on them (isingattn.graphs),
against dense numpy references, dimod's own energies and closed-form edge counts."""

import dimod
import jax
import jax.numpy as jnp
import networkx as nx
import numpy as np
import pytest

from isingattn import IsingInputError, IsingModel, IsingTypeError, graphs
from isingattn.sparse import CouplingGraph, SparseCouplings, from_dense
from isingattn.inference.banded import Banded
from isingattn.inference.exact import Exact
from isingattn.inference.mcmc import Gibbs, SQA
from isingattn.inference.meanfield import MeanField


def _random_graph(rng, n, p):
    iu = np.argwhere(np.triu(rng.random((n, n)) < p, 1))
    return CouplingGraph(n, iu[rng.permutation(len(iu))])  # edges in no particular order


def _dense(graph, w):
    """numpy reference of SparseCouplings.to_dense: a loop over edges."""
    J = np.zeros(w.shape[:-1] + (graph.n, graph.n))
    for e, (i, j) in enumerate(graph.edges):
        J[..., i, j] = J[..., j, i] = w[..., e]
    return J


def test_field_energy_and_dense_form_match_numpy():
    rng = np.random.default_rng(0)
    g = _random_graph(rng, 30, 0.15)
    w = rng.normal(size=(3, g.E))  # a batch of 3 weight vectors on one graph
    J = SparseCouplings(g, jnp.asarray(w))
    ref = _dense(g, w)
    np.testing.assert_array_equal(np.asarray(J.to_dense()), ref)
    assert J.shape == (3, 30, 30) and J.dtype == jnp.float64
    s = rng.choice([-1.0, 1.0], size=(5, 3, 30))  # chains x models x spins
    np.testing.assert_allclose(np.asarray(J.field(jnp.asarray(s))), np.einsum("bij,cbj->cbi", ref, s), atol=1e-12)
    h = rng.normal(size=(3, 30))
    dense = IsingModel(h, ref)
    sparse = IsingModel(h, J)
    np.testing.assert_allclose(np.asarray(sparse.energy(s)), np.asarray(dense.energy(s)), atol=1e-12)
    # dimod's own energies of the model's BQM, exported without densifying
    for q in range(3):
        bqm = sparse.to_bqm(index=q)
        assert bqm.num_interactions == int(np.count_nonzero(w[q]))
        np.testing.assert_allclose(bqm.energies((s[:, q], list(range(30)))), np.asarray(sparse.energy(s))[:, q], atol=1e-12)


def test_degree_table_and_masked_couplings():
    g = graphs.lattice((3, 4))
    np.testing.assert_array_equal(g.degree.reshape(3, 4), [[2, 3, 3, 2], [3, 4, 4, 3], [2, 3, 3, 2]])
    assert g.max_degree == 4
    w = jnp.arange(1.0, g.E + 1.0)
    mask = np.ones(12, bool)
    mask[5] = False
    m = IsingModel(np.zeros(12), SparseCouplings(g, w), mask=mask)
    h, J = m.masked_parameters()
    ref = _dense(g, np.asarray(w)) * mask[:, None] * mask[None, :]
    np.testing.assert_array_equal(np.asarray(J.to_dense()), ref)


def test_graph_input_errors():
    with pytest.raises(IsingInputError, match="itself"):
        CouplingGraph(3, [[0, 1], [2, 2]])
    with pytest.raises(IsingInputError, match="more than once"):
        CouplingGraph(3, [[0, 1], [1, 0]])
    with pytest.raises(IsingInputError, match=r"0\.\.2"):
        CouplingGraph(3, [[0, 3]])
    with pytest.raises(IsingInputError, match=r"\[E, 2\]"):
        CouplingGraph(3, [0, 1, 2])
    with pytest.raises(IsingTypeError, match="integer"):
        CouplingGraph(3, [[0.5, 1.0]])
    with pytest.raises(IsingInputError, match="E = 1"):
        SparseCouplings(CouplingGraph(3, [[0, 1]]), [1.0, 2.0])
    with pytest.raises(IsingInputError, match="graph of 3 spins"):
        IsingModel(np.zeros(4), SparseCouplings(CouplingGraph(3, [[0, 1]]), [1.0]))
    with pytest.raises(IsingInputError, match="NaN or inf"):
        IsingModel(np.zeros(3), SparseCouplings(CouplingGraph(3, [[0, 1]]), [np.nan]))
    with pytest.raises(IsingInputError, match="unknown graph spec"):
        graphs.parse("lattice:axb")
    with pytest.raises(IsingInputError, match="periodic"):
        graphs.lattice((2, 5), periodic=True)


def test_invalid_weights_under_jit_give_nan():
    g = CouplingGraph(3, [[0, 1], [1, 2]])
    f = jax.jit(lambda w: IsingModel(jnp.zeros(3), SparseCouplings(g, w)).energy(jnp.ones(3)))
    assert float(f(jnp.array([1.0, 2.0]))) == -3.0
    assert bool(jnp.isnan(f(jnp.array([1.0, jnp.inf]))))  # eagerly: "J contains NaN or inf"


@pytest.mark.parametrize("shape,periodic", [((5, 7), False), ((5, 7), True), ((4, 3, 6), False), ((3, 3, 3), True), ((9,), False)])
def test_lattice_edge_counts_closed_form_and_networkx(shape, periodic):
    g = graphs.lattice(shape, periodic=periodic)
    n = int(np.prod(shape))
    # open: Σ_axes (L_a - 1) n / L_a ; periodic: one edge per spin per axis
    expect = n * len(shape) if periodic else sum(n // L * (L - 1) for L in shape)
    assert g.E == expect
    ref = nx.grid_graph(dim=list(reversed(shape)), periodic=periodic)  # nodes (x_0, ..., x_last)
    relabel = {v: int(np.ravel_multi_index(v if isinstance(v, tuple) else (v,), shape)) for v in ref.nodes}
    ref = nx.relabel_nodes(ref, relabel)
    assert set(map(tuple, g.edges.tolist())) == {tuple(sorted(e)) for e in ref.edges}


def test_strip_bandwidth_is_its_width():
    g = graphs.lattice((10, 4))
    assert int(np.max(g.edges[:, 1] - g.edges[:, 0])) == 4


def test_annealer_and_random_graphs():
    pytest.importorskip("dwave_networkx")
    import dwave_networkx as dnx

    for g, ref in ((graphs.pegasus(3), dnx.pegasus_graph(3)), (graphs.chimera(2), dnx.chimera_graph(2)),
                   (graphs.zephyr(2), dnx.zephyr_graph(2))):
        assert (g.n, g.E) == (ref.number_of_nodes(), ref.number_of_edges())
    r = graphs.random_regular(jax.random.key(0), 100, 3)
    assert r.E == 150 and np.all(r.degree == 3)
    assert graphs.random_regular(jax.random.key(0), 100, 3) == r  # the same key, the same graph
    er = graphs.erdos_renyi(jax.random.key(1), 2000, 0.002)
    assert abs(er.E - 0.002 * 2000 * 1999 / 2) < 5 * np.sqrt(0.002 * 2000 * 1999 / 2)
    assert graphs.parse("pegasus:3") == graphs.pegasus(3)
    assert graphs.parse("lattice:4x5:periodic") == graphs.lattice((4, 5), periodic=True)


def test_random_couplings_distribution():
    g = graphs.lattice((64, 64), periodic=True)
    pm = np.asarray(graphs.random_couplings(jax.random.key(0), g, "pm", 0.5).weights)
    assert set(np.unique(pm)) == {-0.5, 0.5} and abs(pm.mean()) < 4 * 0.5 / np.sqrt(g.E)
    gs = np.asarray(graphs.random_couplings(jax.random.key(1), g, "gaussian", 2.0).weights)
    assert abs(gs.std() - 2.0) < 4 * 2.0 / np.sqrt(2 * g.E)


def test_from_bqm_and_networkx_choose_the_form_and_round_trip():
    rng = np.random.default_rng(3)
    g = graphs.lattice((16, 16))
    w = rng.normal(size=g.E)
    h = rng.normal(size=g.n)
    bqm = dimod.BinaryQuadraticModel({i: -h[i] for i in range(g.n)},
                                     {(int(i), int(j)): -w[e] for e, (i, j) in enumerate(g.edges)}, 0.0, dimod.SPIN)
    auto = IsingModel.from_bqm(bqm)
    assert auto.is_sparse and auto.J.graph.E == g.E  # 480 of 32,640 pairs: sparse
    dense = IsingModel.from_bqm(bqm, sparse=False)
    assert not dense.is_sparse
    np.testing.assert_allclose(np.asarray(auto.densified().J), np.asarray(dense.J), atol=0)
    s = rng.choice([-1.0, 1.0], size=(4, g.n))
    np.testing.assert_allclose(np.asarray(auto.energy(s)), bqm.energies((s, list(auto.labels))), atol=1e-10)
    G = auto.to_networkx()
    assert G.number_of_edges() == g.E
    back = IsingModel.from_networkx(G)
    assert back.is_sparse
    np.testing.assert_allclose(np.asarray(back.energy(s)), np.asarray(auto.energy(s)), atol=1e-12)
    small = IsingModel.from_bqm(dimod.BinaryQuadraticModel({0: 1.0, 1: 0.0}, {(0, 1): 0.5}, 0.0, dimod.SPIN))
    assert not small.is_sparse  # n < 64: dense
    assert IsingModel.from_bqm(bqm.change_vartype(dimod.BINARY, inplace=False), sparse=True).is_sparse
    with pytest.raises(IsingTypeError, match="sparse must be"):
        IsingModel.from_bqm(bqm, sparse="yes")


def test_a_million_spins_fit_in_memory_and_export_without_densifying():
    g = graphs.lattice((1024, 1024), periodic=True)
    J = graphs.random_couplings(jax.random.key(0), g, "pm")
    m = IsingModel(jnp.zeros(g.n, jnp.float32), J)  # dense J would be 4 TiB
    s = jnp.ones(g.n, jnp.float32)
    assert float(m.energy(s)) == pytest.approx(-float(np.asarray(J.weights, np.float64).sum()), abs=1e-3)
    with pytest.raises(IsingInputError, match="GiB"):  # an engine without a sparse path refuses clearly
        Exact().marginals(m)


def test_sparsified_round_trip():
    rng = np.random.default_rng(4)
    g = _random_graph(rng, 12, 0.3)
    J = _dense(g, rng.normal(size=(2, g.E)))
    sp = from_dense(J)
    assert sp.graph.E == g.E
    np.testing.assert_array_equal(np.asarray(sp.to_dense()), J)
    m = IsingModel(np.zeros((2, 12)), J)
    assert m.sparsified().is_sparse and m.sparsified().densified().J.shape == (2, 12, 12)


@pytest.mark.parametrize("shape,periodic", [((4, 6), False), ((3, 5), True)])  # bipartite; odd cycles (greedy)
def test_gibbs_sparse_sweep_makes_the_textbook_moves(shape, periodic):
    """Given the same thresholds, the sparse colour-class sweep makes exactly the decisions
    of a loop over the classes in order, spin by spin, with fields h + J s of the current
    spins (a dense numpy J), and the dense colour-class sweep makes the same ones."""
    from isingattn.inference.mcmc.coloring import color_classes
    from isingattn.inference.mcmc.gibbs_kernel import GibbsState, sweep_with_thresholds

    rng = np.random.default_rng(1)
    g = graphs.lattice(shape, periodic=periodic)
    J = SparseCouplings(g, jnp.asarray(rng.normal(size=(2, g.E))))  # two models
    Jd = _dense(g, np.asarray(J.weights))
    classes = color_classes(J)
    assert len(classes) == 2 if not periodic else len(classes) >= 3  # exact 2-colouring; greedy on odd cycles
    h = rng.normal(size=g.n)
    s = rng.choice([-1.0, 1.0], size=(3, 2, g.n))  # chains x models x spins
    s[0, 1, 4] = 0.0  # an inactive spin stays 0
    t = rng.logistic(size=s.shape) / 2
    new = np.asarray(sweep_with_thresholds(jnp.asarray(t), GibbsState(jnp.asarray(s)), h, J, classes)[0].spins)
    dense = np.asarray(sweep_with_thresholds(jnp.asarray(t), GibbsState(jnp.asarray(s)), h, jnp.asarray(Jd), classes)[0].spins)
    ref = s.copy()
    for c in classes:
        f = h + np.einsum("bij,cbj->cbi", Jd, ref)  # fields from the spins before this class
        for i in c:
            ref[..., i] = np.abs(ref[..., i]) * np.where(f[..., i] > t[..., i], 1.0, -1.0)
    np.testing.assert_array_equal(new, ref)
    np.testing.assert_array_equal(dense, ref)
    for c in classes:  # a proper colouring
        assert not np.any(Jd[0][np.ix_(c, c)])


@pytest.mark.parametrize("P", [1, 3])
def test_sqa_class_sweep_sparse_equals_dense_and_the_textbook_moves(P):
    """Given the same noise, the colour-class SQA sweep makes the moves of a loop over the
    classes in order and their spins one at a time (ring colours, then the global move,
    fields h + J s of the current spins), on sparse and on dense couplings alike."""
    from isingattn.inference.mcmc.coloring import color_classes
    from isingattn.inference.mcmc.sqa_kernel import SQAState, _ring_colours, sweep_with_noise, trotter_coupling

    rng = np.random.default_rng(P)
    g = graphs.lattice((3, 4))
    J = SparseCouplings(g, jnp.asarray(rng.normal(size=g.E)))
    Jd = _dense(g, np.asarray(J.weights))
    classes = color_classes(J)
    R, beta, gamma = 2, 1.1, 0.6
    h = rng.normal(size=g.n)
    s = rng.choice([-1.0, 1.0], size=(R, P, g.n))
    E1 = rng.exponential(size=(R, P, g.n))
    Eg = rng.exponential(size=(R, g.n))
    run = lambda JJ: np.asarray(sweep_with_noise(jnp.asarray(E1), jnp.asarray(Eg), SQAState(jnp.asarray(s)), h, JJ,
                                                 beta, gamma, P, classes=classes)[0].spins)
    sparse, dense = run(J), run(jnp.asarray(Jd))
    bp, K = beta / P, float(trotter_coupling(beta, gamma, P))
    ref = s.copy()
    for r in range(R):
        for c in classes:
            for i in c:
                f = h[i] + ref[r] @ Jd[:, i]  # [P]
                for col in _ring_colours(P):
                    x = ref[r, :, i].copy()
                    nb = np.roll(x, 1) + np.roll(x, -1) if P > 1 else np.zeros(P)
                    dS = 2 * bp * x * f + np.where(nb == 0, 0.0, 2 * K * x * nb)
                    ref[r, :, i] = np.where(col & (dS < E1[r, :, i]), -x, x)
                if 2 * bp * np.sum(ref[r, :, i] * f) < Eg[r, i]:
                    ref[r, :, i] *= -1
    np.testing.assert_array_equal(sparse, ref)
    np.testing.assert_array_equal(dense, ref)


def test_bp_on_a_ten_thousand_spin_tree_matches_tree_decomposition():
    """BP is exact on trees: on a random tree of 10,000 spins, MeanField(method='bp') on the
    edge list agrees with dwave-samplers' TreeDecompositionSampler marginals to 1e-5."""
    from dwave.samplers import TreeDecompositionSampler

    rng = np.random.default_rng(5)
    n = 10_000
    parent = np.array([rng.integers(0, i) for i in range(1, n)])
    g = CouplingGraph(n, np.stack([parent, np.arange(1, n)], axis=1))
    J = SparseCouplings(g, jnp.asarray(rng.normal(0, 0.8, g.E)))
    h = rng.normal(0, 0.5, n)
    model = IsingModel(h, J)
    out = MeanField(method="bp", tol=1e-12, max_iter=5000).marginals(model)
    assert bool(out.info["converged"])
    ss = TreeDecompositionSampler().sample(model.to_bqm(), beta=1.0, marginals=True, num_reads=1)
    p_up = ss.info["variable_marginals"]  # {v: P(s_v = +1)}
    ref = np.array([2 * p_up[v] - 1 for v in range(n)])
    np.testing.assert_allclose(np.asarray(out.mean), ref, atol=1e-5)


@pytest.mark.parametrize("method", ["naive", "tap", "bp"])
def test_meanfield_on_edges_equals_dense_with_gradients(method):
    """The edge-list mean field is the dense one: means and the gradient with respect to
    every coupling (the sparse weights' gradient is the dense J's gradient on the edges,
    summed over both orientations)."""
    rng = np.random.default_rng(6)
    g = graphs.lattice((4, 5), periodic=True)
    w = jnp.asarray(rng.normal(0, 0.3, (2, g.E)))
    h = jnp.asarray(rng.normal(0, 0.5, (2, g.n)))
    eng = MeanField(method=method, tol=1e-12, max_iter=3000)
    loss = lambda m: jnp.sum(eng.marginals(m).mean * jnp.arange(g.n))
    sp = lambda w: loss(IsingModel(h, SparseCouplings(g, w)))
    de = lambda Jd: loss(IsingModel(h, Jd))
    Jd = SparseCouplings(g, w).to_dense()
    np.testing.assert_allclose(sp(w), de(Jd), rtol=1e-10)
    gd = np.asarray(jax.grad(de)(Jd))
    i, j = g.edges[:, 0], g.edges[:, 1]
    np.testing.assert_allclose(np.asarray(jax.grad(sp)(w)), gd[:, i, j] + gd[:, j, i], atol=1e-9)


@pytest.mark.run_bound
@pytest.mark.parametrize("name", ["gibbs", "sqa"])
def test_samplers_on_a_strip_agree_with_banded_within_4_mcse(name):
    """Gibbs and thermal SQA on the edge list of an open 64 x 8 strip (512 spins, row-major:
    bandwidth 8) agree with Banded's exact marginals within 4 MCSE, the MCSE from numpyro's
    ESS of the engine's own draws (computed here, not by the engine)."""
    from numpyro.diagnostics import effective_sample_size

    g = graphs.lattice((64, 8))
    J = graphs.random_couplings(jax.random.key(3), g, "gaussian", 0.5, dtype=jnp.float64)
    h = jax.random.normal(jax.random.key(4), (g.n,), jnp.float64) * 0.3
    model = IsingModel(h, J)
    exact = np.asarray(Banded(bandwidth=8).marginals(model).mean)
    if name == "gibbs":
        eng, C = Gibbs(num_warmup=200, num_samples=1500, num_chains=8), 8
    else:
        eng, C = SQA(num_sweeps=50, trotter=4, num_reads=1000, thermal_sweeps=100), 1
    out = eng.marginals(model, key=jax.random.key(5))
    s = np.asarray(out.samples).reshape(C, -1, g.n)  # Gibbs: chain-major; SQA: independent reads
    with np.errstate(invalid="ignore", divide="ignore"):
        ess = np.asarray(effective_sample_size(s))
    ess = np.where(np.isfinite(ess) & (ess > 0), np.minimum(ess, s.shape[0] * s.shape[1]), 1.0)
    se = np.sqrt(s.reshape(-1, g.n).var(0) / ess) + 1.0 / (s.shape[0] * s.shape[1])  # + one draw's resolution
    z = np.abs(np.asarray(out.mean) - exact) / se
    print(f"{name}: max |z| {z.max():.2f}, mean ESS {ess.mean():.0f}")
    assert np.max(z) < 4, np.max(z)
