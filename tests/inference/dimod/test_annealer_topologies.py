"""The dimod samplers on the sparse BQMs of annealer topologies (Chimera, Pegasus, Zephyr)
and Ocean's sampler parameters: energies and labels against dimod's own ``bqm.energies``,
planar ground states against dwave-samplers' ``PlanarGraphSolver``, ``initial_states``,
``interrupt_function``, ``info["timing"]`` and the errors of bad input.

Cost: one BQM holds one small instance of each topology (disjoint), so that each sampler
compiles one program for all three."""

import json
import warnings

import dimod
import dimod.testing
import jax
import networkx as nx
import numpy as np
import pytest
from dwave.samplers import PlanarGraphSolver

with warnings.catch_warnings():  # dwave-networkx announces its move to dwave-graphs
    warnings.simplefilter("ignore", DeprecationWarning)
    import dwave_networkx as dnx

from _xla import RUN_BOUND_OPTIONS
from isingattn.errors import IsingInputError
from isingattn.inference.dimod import DQASampler, SQASampler
from isingattn.inference.dimod.pt_sampler import PTSampler
from isingattn.inference.dimod.ocean import READS_PER_CALL
from isingattn.inference.dimod.samplers import anneal_beta
from isingattn.inference.dimod.sw_sampler import SwendsenWangSampler
from isingattn.inference.mcmc import SQA
from isingattn.model import IsingModel
from isingattn.sparse import SparseCouplings

SQA_FAST = dict(num_sweeps=50, trotter=4)  # the contract, not the quality: one program for the module's SQA tests
# One sampler of each family with Ocean's parameters, at settings that test the contract; each
# compiles one program for the module (READS_PER_CALL reads on the topologies' graph).
SAMPLERS = {"SQASampler": SQASampler(**SQA_FAST), "PTSampler": PTSampler(num_sweeps=20, num_replicas=4),
            "SwendsenWangSampler": SwendsenWangSampler(num_sweeps=5)}
OCEAN = pytest.mark.parametrize("name", list(SAMPLERS))


def topologies_bqm(seed, ferromagnetic=False):
    """Chimera C(3), Pegasus P(2) and Zephyr Z(1) as one SPIN BQM (disjoint; labels
    ``(topology, node)``): ±J couplings (all ferromagnetic when asked) and Gaussian fields."""
    rng = np.random.default_rng(seed)
    bqm = dimod.BQM(dimod.SPIN)
    for name, G in (("chimera", dnx.chimera_graph(3)), ("pegasus", dnx.pegasus_graph(2)),
                    ("zephyr", dnx.zephyr_graph(1))):
        bqm.add_linear_from(((name, v), float(rng.normal(0, 0.5))) for v in G.nodes)
        J = -np.ones(G.number_of_edges()) if ferromagnetic else rng.choice([-1.0, 1.0], G.number_of_edges())
        bqm.add_quadratic_from(((name, u), (name, v), float(j)) for (u, v), j in zip(G.edges, J))
    return bqm


@pytest.fixture(scope="module")
def spin_glass():
    return topologies_bqm(0)


def test_the_topologies_are_sampled_as_edge_lists(spin_glass):
    assert isinstance(IsingModel.from_bqm(spin_glass).J, SparseCouplings)
    assert len(spin_glass) == 72 + 40 + 48


@pytest.fixture(scope="module")
def ferromagnet():
    return topologies_bqm(1, ferromagnetic=True)


def bqm_for(name, spin_glass, ferromagnet):
    """Swendsen–Wang takes unfrustrated models only."""
    return ferromagnet if name == "SwendsenWangSampler" else spin_glass


@pytest.mark.parametrize("vartype", [dimod.SPIN, dimod.BINARY])
@OCEAN
def test_sparse_topologies_energies_labels_and_vartypes(name, vartype, spin_glass, ferromagnet, monkeypatch):
    sampler = SAMPLERS[name]
    bqm = bqm_for(name, spin_glass, ferromagnet).change_vartype(vartype, inplace=False)
    # nothing is densified: an O(n²) J would have to come from SparseCouplings.to_dense
    monkeypatch.setattr(SparseCouplings, "to_dense", lambda self: pytest.fail("a sparse BQM was densified"))
    ss = sampler.sample(bqm, num_reads=READS_PER_CALL, seed=3)  # the module's one program per sampler
    assert len(ss) == READS_PER_CALL and ss.vartype is vartype
    assert set(ss.variables) == set(bqm.variables)  # the labels (dimod sorts them where it can)
    dimod.testing.assert_sampleset_energies(ss, bqm)  # the returned energies are bqm.energies of the returned reads
    np.testing.assert_array_equal(ss.record.energy, bqm.energies((ss.record.sample, ss.variables)))
    assert set(ss.info["timing"]) == {"preprocessing_ns", "sampling_ns", "postprocessing_ns"}
    assert all(isinstance(t, int) and t >= 0 for t in ss.info["timing"].values())
    json.dumps(ss.to_serializable())  # info included: no NumPy arrays


@pytest.mark.parametrize("cls", [SQASampler, PTSampler, SwendsenWangSampler, DQASampler], ids=lambda c: c.__name__)
def test_every_sampler_passes_dimods_api_check(cls):
    sampler = cls()
    dimod.testing.assert_sampler_api(sampler)  # dimod's own conformance of parameters and properties
    json.dumps(sampler.properties)
    from dwave.samplers import PathIntegralAnnealingSampler

    # Ocean's names, as dwave-samplers' PathIntegralAnnealingSampler has them (DQA counts Trotter steps, not sweeps)
    ocean = {"num_reads", "seed", "initial_states", "initial_states_generator", "interrupt_function"}
    ocean |= {"num_steps"} if cls is DQASampler else {"num_sweeps"}
    assert ocean - {"num_steps"} <= set(PathIntegralAnnealingSampler().parameters) and ocean <= set(sampler.parameters)


def test_anneal_defaults_from_the_edge_list_equal_the_dense_ones(spin_glass):
    sparse, dense = (IsingModel.from_bqm(spin_glass, sparse=s) for s in (True, False))
    assert anneal_beta(sparse.h, sparse.J, 8) == pytest.approx(anneal_beta(dense.h, dense.J, 8), rel=1e-12)
    # and the dense rule of the docstring, computed here from the matrix: min(β_cold, β_mix)
    h, A = np.abs(np.asarray(dense.h, np.float64)), np.abs(np.asarray(dense.J, np.float64))
    terms = np.concatenate([h[:, None], A], 1)
    d = np.where(terms > 0, terms, np.inf).min(1)
    cold = np.log(np.sum(d == d.min()) / 0.01) / (2 * d.min())
    mix = 8 * np.log(100) / (2 * np.sqrt(np.mean(h**2 + (A**2).sum(1))))
    assert anneal_beta(sparse.h, sparse.J, 8) == pytest.approx(min(cold, mix), rel=1e-6)


@OCEAN
def test_seed_reproducible_reads_distinct_and_interrupt(name, spin_glass, ferromagnet):
    sampler, bqm = SAMPLERS[name], bqm_for(name, spin_glass, ferromagnet)
    R = 2 * READS_PER_CALL  # two calls of the module's compiled program
    full = sampler.sample(bqm, num_reads=R, seed=7)
    assert full.info["interrupted"] is False
    calls = []

    def stop():
        calls.append(1)
        return True

    cut = sampler.sample(bqm, num_reads=R, seed=7, interrupt_function=stop)
    assert len(calls) == 1 and cut.info["interrupted"] is True
    assert len(cut) == READS_PER_CALL  # the reads made before the interrupt
    # the same seed gives the same reads: exactly the first ones of the full run
    np.testing.assert_array_equal(cut.record.sample, full.record.sample[:READS_PER_CALL])
    dimod.testing.assert_sampleset_energies(cut, bqm)
    # nearly free reads (β = 1e-3: the same program, other weights) of 160 spins must all
    # differ from each other and from another seed's: every read draws its own random numbers
    hot = sampler.sample(bqm, num_reads=READS_PER_CALL, seed=7, beta=1e-3)
    other = sampler.sample(bqm, num_reads=READS_PER_CALL, seed=8, beta=1e-3)
    assert len({r.tobytes() for r in np.concatenate([hot.record.sample, other.record.sample])}) == R


@OCEAN
@pytest.mark.parametrize("vartype", [dimod.SPIN, dimod.BINARY])
def test_initial_states_are_honoured(name, vartype):
    bqm = dimod.BQM({"a": 0.5, 1: -0.3, (2, "x"): 0.1}, {("a", 1): -1.0, (1, (2, "x")): -0.4}, 0.0, dimod.SPIN)
    bqm.change_vartype(vartype)
    lo = -1 if vartype is dimod.SPIN else 0
    states = np.array([[1, lo, 1], [lo, lo, 1]], np.int8)
    sampler = type(SAMPLERS[name])(num_sweeps=0)  # no sweep: the initial states come back
    ss = sampler.sample(bqm, initial_states=(states, list(bqm.variables)), num_reads=2, seed=0)
    np.testing.assert_array_equal(ss.record.sample, states)
    dimod.testing.assert_sampleset_energies(ss, bqm)
    # in another variable order, as a list of dicts; 'tile' repeats them
    dicts = [dict(zip(bqm.variables, row.tolist())) for row in states]
    tiled = sampler.sample(bqm, initial_states=dicts[::-1], initial_states_generator="tile", num_reads=5, seed=0)
    np.testing.assert_array_equal(tiled.record.sample, states[[1, 0, 1, 0, 1]])
    # 'random' keeps the given states and fills the rest
    rand = sampler.sample(bqm, initial_states=dicts[:1], num_reads=4, seed=0)
    np.testing.assert_array_equal(rand.record.sample[0], states[0])
    assert set(np.unique(rand.record.sample)) <= {lo, 1}
    with pytest.raises(IsingInputError, match="initial_states_generator='none'"):
        sampler.sample(bqm, initial_states=dicts[:1], initial_states_generator="none", num_reads=2)


def zero_field(bqm):
    """``bqm`` without its fields (the same graph, edge for edge: the same compiled program)."""
    out = bqm.copy()
    for v in out.variables:
        out.set_linear(v, 0.0)
    return out


def test_pt_chains_start_at_the_initial_states(ferromagnet):
    # Each of the three components of the zero-field ferromagnet has two ground states (all up,
    # all down). Started there at β = 50, the cold replica stays: a flip costs e^{-100} or less,
    # and a swap brings down a state of higher energy with as little probability (its replicas
    # between start there too). Every read is then its initial state exactly.
    bqm = zero_field(ferromagnet)
    comp = np.array([["chimera", "pegasus", "zephyr"].index(v[0]) for v in bqm.variables])
    signs = np.array([[1, 1, 1], [-1, -1, -1], [1, -1, 1], [-1, 1, -1]])[np.arange(READS_PER_CALL) % 4]
    states = signs[:, comp]
    assert np.all(bqm.energies((states, bqm.variables)) == -bqm.num_interactions)  # ground states
    ss = SAMPLERS["PTSampler"].sample(bqm, initial_states=(states, list(bqm.variables)), num_reads=READS_PER_CALL,
                                      beta=50.0, seed=0)
    np.testing.assert_array_equal(ss.record.sample, states[:, [list(bqm.variables).index(v) for v in ss.variables]])


def test_swendsen_wang_chains_start_at_the_initial_states(ferromagnet):
    # At β = 50 without fields a move bonds every satisfied edge (p = 1 - e^{-100}) and no
    # other, and gives each cluster a fresh random sign: after one move from state s0 a read
    # is constant on each connected component of the graph of the edges s0 satisfies
    # (networkx's components), and nowhere else forced to agree.
    bqm = zero_field(ferromagnet)
    rng = np.random.default_rng(4)
    states = rng.choice([-1, 1], (READS_PER_CALL, len(bqm.variables)))
    ss = SwendsenWangSampler(num_sweeps=1).sample(bqm, initial_states=(states, list(bqm.variables)),
                                                   num_reads=READS_PER_CALL, beta=50.0, seed=0)
    pos = {v: i for i, v in enumerate(ss.variables)}
    col = {v: i for i, v in enumerate(bqm.variables)}
    split = 0
    for s0, read in zip(states, ss.record.sample):
        G = nx.Graph()
        G.add_nodes_from(bqm.variables)
        G.add_edges_from((u, v) for u, v in bqm.quadratic if s0[col[u]] == s0[col[v]])
        for c in nx.connected_components(G):
            assert len({read[pos[v]] for v in c}) == 1
        split += len({read[pos[v]] for v in bqm.variables}) > 1
    assert split == READS_PER_CALL  # hundreds of clusters: no read is uniform


def test_bad_input_gets_clear_errors():
    bqm = dimod.BQM({"a": 0.5, "b": -0.3}, {("a", "b"): -1.0}, 0.0, dimod.SPIN)
    sampler = SQASampler(**SQA_FAST)
    empty = sampler.sample(dimod.BQM(dimod.SPIN), num_reads=3, seed=0)  # dimod's contract: num_reads empty rows
    assert len(empty) == 3 and len(empty.variables) == 0 and set(empty.info["timing"]) >= {"sampling_ns"}
    for nan in (dimod.BQM({"a": np.nan, "b": 0.0}, {("a", "b"): 1.0}, 0.0, "SPIN"),
                dimod.BQM({"a": 0.0, "b": 0.0}, {("a", "b"): np.nan}, 0.0, "SPIN")):
        with pytest.raises(IsingInputError, match="NaN"):
            sampler.sample(nan, seed=0)


@OCEAN
def test_bad_ocean_parameters_get_clear_errors(name):
    bqm = dimod.BQM({"a": 0.5, "b": -0.3}, {("a", "b"): -1.0}, 0.0, dimod.SPIN)
    sampler = SAMPLERS[name]
    for states, what in (([[1, -1, 1]], "each of the BQM's 2 variables"), (([[1]], ["a"]), "each of the BQM's 2"),
                         (([[1, 0]], ["a", "b"]), r"values in \{-1, 1\}"),
                         (([[2, 1]], ["a", "b"]), r"values in \{-1, 1\}"),
                         ([[1, -1], [1]], "samples-like")):
        with pytest.raises(IsingInputError, match=what):
            sampler.sample(bqm, initial_states=states, num_reads=1, seed=0)
    with pytest.raises(IsingInputError, match="initial_states_generator must be one of"):
        sampler.sample(bqm, initial_states_generator="zeros", seed=0)
    with pytest.raises(TypeError, match="interrupt_function must be None or a callable"):
        sampler.sample(bqm, interrupt_function=True, seed=0)
    with pytest.raises(IsingInputError, match="num_sweeps"):
        sampler.sample(bqm, num_sweeps=-1, seed=0)


def test_dqa_refuses_annealer_sizes_naming_its_limit(spin_glass):
    with pytest.raises(IsingInputError, match="limited to 20 variables; this BQM has 160"):
        DQASampler().sample(spin_glass, seed=0)


@pytest.fixture
def fused_compile(monkeypatch):
    """This test's program compiled at backend level 1 with XLA:CPU's fusion emitters (the
    suite's fast-compile flags turn them off): the colour-class sweep's gathers ran several
    times slower without them. tests/conftest.py's run_bound override, one option more."""
    from jax._src import compiler  # private: should it move, the test still runs, only slower

    original = getattr(compiler, "get_compile_options", None)
    if original is None:
        return
    extra = {**RUN_BOUND_OPTIONS, "xla_cpu_use_fusion_emitters": True}

    def get_compile_options(*args, env_options_overrides=None, **kwargs):
        return original(*args, env_options_overrides={**extra, **(env_options_overrides or {})}, **kwargs)

    monkeypatch.setattr(compiler, "get_compile_options", get_compile_options)


def planar_instance(L, seed):
    """±J on an open ``L x L`` grid (h = 0) and its ground-state energy from PlanarGraphSolver."""
    G, rng = nx.grid_2d_graph(L, L), np.random.default_rng(seed)
    bqm = dimod.BQM.from_ising({v: 0.0 for v in G.nodes}, {(u, v): float(rng.choice([-1, 1])) for u, v in G.edges})
    return bqm, PlanarGraphSolver().sample(bqm, {v: v for v in G.nodes}).first.energy


# 24x24 is not run: on a quiet machine PlanarGraphSolver alone takes ~12 s there (its
# minimum-weight perfect matching is networkx's pure-Python blossom), and the cheapest of our
# samplers that reached its ground state on every seed tried (PTSampler, 16 reads of 8,000
# sweeps) ~10 s more; benchmarks/README.md, "Annealers on annealer topologies", has the numbers.
@pytest.mark.parametrize("L", [16])
def test_planar_ground_states_against_planar_graph_solver(L, fused_compile):
    bqm, ground = planar_instance(L, seed=L)
    ss = SQASampler(num_sweeps=2000).sample(bqm, num_reads=READS_PER_CALL, seed=0)
    dimod.testing.assert_sampleset_energies(ss, bqm)
    assert ss.record.energy.min() == ground


def test_engine_samples_as_a_sampleset():
    rng = np.random.default_rng(5)
    n = 6
    J = np.triu(rng.normal(size=(n, n)), 1)
    model = IsingModel(rng.normal(size=n), J + J.T, 1.0, labels=[("q", i) for i in range(n)],
                       mask=np.arange(n) != 2)
    out = SQA(num_reads=24, num_sweeps=20, trotter=2, mode="anneal").marginals(model, key=jax.random.PRNGKey(0))
    ss = out.to_sampleset(model)
    bqm = model.to_bqm()
    assert len(ss) == 24 and list(ss.variables) == list(bqm.variables) == [("q", i) for i in range(n) if i != 2]
    dimod.testing.assert_sampleset_energies(ss, bqm)
    np.testing.assert_array_equal(ss.record.sample, np.asarray(out.samples)[:, np.arange(n) != 2].astype(np.int8))
    json.dumps(ss.info)
    assert ss.aggregate().record.num_occurrences.sum() == 24 and len(ss.truncate(3)) == 3
    assert ss.lowest().first.energy == ss.record.energy.min()
    with pytest.raises(IsingInputError, match="needs samples"):
        out.__class__(mean=out.mean).to_sampleset(model)
