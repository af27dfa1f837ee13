"""DQASampler's reverse anneal (D-Wave's ``initial_state`` + ``anneal_schedule``) and Ocean's
parameters on it, against independent references: the exact time-ordered evolution of the
same schedule (exact exponentials of H(s) in float64 on the 2^n Hilbert space, energies from dimod),
the initial states themselves (reversal point s = 1, zero-length anneals), and the reads
of the uninterrupted run.

Cost: one 3-spin BQM and one ``num_steps`` throughout, so the module compiles one program."""

import json

import dimod
import numpy as np
import pytest
import scipy.stats

from isingattn.errors import IsingInputError, IsingTypeError
from isingattn.inference.dimod import DQASampler
from isingattn.inference.dimod.dqa_sampler import _evolve  # the sampler's compiled circuit
from isingattn.inference.dimod.ocean import READS_PER_CALL
from isingattn.inference.dqa import circuit

K = 128  # Trotter steps of every anneal here: one compiled program for the module
BQM = dimod.BQM({"a": 0.4, "b": -0.3, "c": 0.2}, {("a", "b"): -1.0, ("b", "c"): 0.8, ("a", "c"): 0.5}, 0.25,
                dimod.SPIN)
LABELS = ["a", "b", "c"]
REVERSE = [[0.0, 1.0], [2.0, 0.3], [3.0, 0.3], [5.0, 1.0]]  # down to s = 0.3, a pause, back up
STATES = np.array([[1, -1, 1], [-1, -1, -1]])


@pytest.fixture(scope="module")
def sampler():
    return DQASampler(num_steps=K)


def exact_propagator(bqm, labels, schedule, pieces=2000):
    """``U [2^n, 2^n]``, the time-ordered evolution of ``H(s) = -(1 - s) Σ_j X_j + s·diag(E)``
    along the piecewise-linear ``s(t)`` of ``schedule``, as ``pieces`` midpoint exponentials,
    each exact (``exp(-i dt H) = V e^{-i dt w} Vᵀ`` from ``eigh``, float64; error
    ``O(T³/pieces²)``), and the basis table ``[2^n, n]`` (spin j is bit n-1-j, bit 0 ↔ +1):
    a reverse anneal from basis state ``b`` ends in ``U[:, b]``."""
    n = len(labels)
    table = 1 - 2 * ((np.arange(2**n)[:, None] >> np.arange(n - 1, -1, -1)) & 1)
    E = bqm.energies((table, labels))  # dimod's own energies of every basis state
    X = np.array([[0.0, 1.0], [1.0, 0.0]])
    Hx = sum(-np.kron(np.kron(np.eye(2**j), X), np.eye(2 ** (n - j - 1))) for j in range(n))
    t, s = np.asarray(schedule, np.float64).T
    dt = t[-1] / pieces
    U = np.eye(2**n, dtype=complex)
    for k in range(pieces):
        sk = np.interp((k + 0.5) * dt, t, s)
        w, V = np.linalg.eigh((1 - sk) * Hx + sk * np.diag(E))
        U = (V * np.exp(-1j * dt * w)) @ V.T @ U
    return U, table


@pytest.fixture(scope="module")
def exact():
    """The reference law of a reverse anneal from each basis state: column ``b`` of ``|U|²``."""
    U, table = exact_propagator(BQM, LABELS, REVERSE)
    return np.abs(U) ** 2, table


def index_of(state, table):
    return int(np.flatnonzero((table == state).all(1))[0])


def test_reversal_point_one_returns_every_initial_state_exactly(sampler):
    hold = [[0.0, 1.0], [5.0, 1.0]]  # s = 1 throughout: no transverse field
    ss = sampler.sample(BQM, initial_states=(STATES, LABELS), initial_states_generator="tile", num_reads=6,
                        anneal_schedule=hold, seed=0)
    got = ss.record.sample[:, [ss.variables.index(v) for v in LABELS]]
    np.testing.assert_array_equal(got, STATES[np.arange(6) % 2])
    assert ss.info["anneal"] == "reverse" and ss.info["initial_states_evolved"] == 2
    json.dumps(ss.to_serializable())  # info included (the schedule, the timing)
    binary = BQM.change_vartype(dimod.BINARY, inplace=False)  # 0/1 states of a BINARY BQM, returned as 0/1
    ss = sampler.sample(binary, initial_states=((STATES + 1) // 2, LABELS), anneal_schedule=hold, num_reads=2, seed=0)
    np.testing.assert_array_equal(ss.record.sample[:, [ss.variables.index(v) for v in LABELS]], (STATES + 1) // 2)
    dimod.testing.assert_sampleset_energies(ss, binary)


def test_the_circuit_follows_the_exact_evolution_of_the_reverse_schedule(exact):
    # the Trotterized circuit that the sampler runs (its compiled program), against the exact one
    P, table = exact
    path = circuit.AnnealPath(circuit.check_anneal_schedule(REVERSE))
    phase, mix = circuit.schedule_coefficients(path.duration, K, path, 2)
    E = BQM.energies((table, LABELS)) - BQM.offset
    for state in STATES:
        b = index_of(state, table)
        p = np.abs(np.asarray(_evolve(np.asarray(E, np.float64), phase, mix, b))) ** 2
        np.testing.assert_allclose(p, P[:, b], atol=2e-3)
        assert P[b, b] < 0.9  # the reverse anneal does leave its initial state


def test_reverse_anneal_reads_follow_the_exact_evolution(sampler, exact):
    P, table = exact
    R = 1024
    ss = sampler.sample(BQM, initial_states=(STATES, LABELS), initial_states_generator="tile", num_reads=R,
                        anneal_schedule=REVERSE, seed=11)
    assert ss.info["initial_states_evolved"] == 2  # one evolution per distinct initial state
    dimod.testing.assert_sampleset_energies(ss, BQM)
    reads = ss.record.sample[:, [ss.variables.index(v) for v in LABELS]]
    for k, start in enumerate(STATES):
        p_ref = P[:, index_of(start, table)]
        mine = reads[k::2]  # tile: read r starts in STATES[r % 2]
        counts = np.array([(mine == row).all(1).sum() for row in table])
        # Pearson's χ² against the exact law, 7 degrees of freedom, at p = 1e-4 (a fixed seed)
        chi2 = np.sum((counts - len(mine) * p_ref) ** 2 / (len(mine) * p_ref))
        assert chi2 < scipy.stats.chi2.ppf(1 - 1e-4, 2**3 - 1), (start, counts, p_ref)


def test_interrupt_seed_and_random_starts(sampler):
    R = 3 * READS_PER_CALL
    kw = dict(initial_states=(STATES[:1], LABELS), anneal_schedule=REVERSE, num_reads=R)  # 'random': the rest random
    full = sampler.sample(BQM, seed=5, **kw)
    assert full.info["interrupted"] is False
    again = sampler.sample(BQM, seed=5, **kw)
    np.testing.assert_array_equal(full.record.sample, again.record.sample)
    other = sampler.sample(BQM, seed=6, **kw)
    assert not np.array_equal(full.record.sample, other.record.sample)
    asked = []
    cut = sampler.sample(BQM, seed=5, interrupt_function=lambda: asked.append(1) or len(asked) == 2, **kw)
    assert len(asked) == 2 and cut.info["interrupted"] is True
    # exactly the first reads of the full run (sample sets keep the read order: not aggregated)
    np.testing.assert_array_equal(cut.record.sample, full.record.sample[:2 * READS_PER_CALL])
    # no initial states at all: every read starts at random (at most 8 distinct states to evolve)
    free = sampler.sample(BQM, anneal_schedule=REVERSE, num_reads=R, seed=1)
    assert 1 < free.info["initial_states_evolved"] <= 8


def test_capped_cache_evolves_again_and_gives_the_same_reads(sampler, monkeypatch):
    from isingattn.inference.dimod import dqa_sampler

    kw = dict(initial_states=(STATES, LABELS), initial_states_generator="tile", anneal_schedule=REVERSE, num_reads=6,
              seed=2)
    full = sampler.sample(BQM, **kw)
    monkeypatch.setattr(dqa_sampler, "CDF_CACHE_BYTES", 8 * 2**3)  # room for one final state of 3 spins
    capped = sampler.sample(BQM, **kw)
    assert (full.info["initial_states_evolved"], capped.info["initial_states_evolved"]) == (2, 6)  # tile alternates
    np.testing.assert_array_equal(capped.record.sample, full.record.sample)


@pytest.mark.parametrize("vartype", [dimod.SPIN, dimod.BINARY])
def test_a_zero_length_anneal_returns_the_initial_states(vartype):
    bqm = BQM.change_vartype(vartype, inplace=False)
    states = STATES if vartype is dimod.SPIN else (STATES + 1) // 2
    for schedule in (None, REVERSE):  # nothing runs, whatever the schedule
        ss = DQASampler(num_steps=0).sample(bqm, initial_states=(states, LABELS), anneal_schedule=schedule,
                                            num_reads=2, seed=0)
        np.testing.assert_array_equal(ss.record.sample[:, [ss.variables.index(v) for v in LABELS]], states)
    # a forward anneal of no steps measures |+>^n: uniformly random reads
    ss = DQASampler(num_steps=0).sample(bqm, num_reads=64, seed=0)
    assert len(np.unique(ss.record.sample, axis=0)) == 8


def test_bad_reverse_anneal_input_is_refused(sampler):
    rev = dict(anneal_schedule=REVERSE)
    with pytest.raises(IsingInputError, match="initial_states must give a value to each"):
        sampler.sample(BQM, initial_states=(STATES[:, :2], LABELS[:2]), **rev)
    with pytest.raises(IsingInputError, match=r"values in \{-1, 1\}; got 0"):
        sampler.sample(BQM, initial_states=(np.array([[1, 0, 1]]), LABELS), **rev)
    with pytest.raises(IsingInputError, match=r"values in \{0, 1\}; got 2"):
        sampler.sample(BQM.binary, initial_states=(np.array([[1, 2, 1]]), LABELS), **rev)
    with pytest.raises(IsingInputError, match="needs an anneal_schedule that starts and ends at s = 1"):
        sampler.sample(BQM, initial_states=(STATES, LABELS))  # as on the QPU: no reverse schedule
    with pytest.raises(IsingInputError, match="needs an anneal_schedule that starts and ends at s = 1"):
        sampler.sample(BQM, initial_states=(STATES, LABELS), anneal_schedule=[[0, 0], [5, 1]])
    for bad, what in (([[0, 1]], "at least 2"), ([[0, 0.5], [5, 1]], "start at s = 0"), ([[0, 1], [5, 0.5]], "end at 1"),
                      ([[0, 1], [0, 0.5], [1, 1]], "increase"), ([[1, 1], [2, 1]], "start at 0"),
                      ([[0, 1], [1, float("nan")], [2, 1]], "finite"), ([[0, 0], [2, 0.6], [3, 0.4], [4, 1]], "rise"),
                      ("fast", "at least 2"), ([[0, 1], [2, 1.5], [3, 1]], r"in \[0, 1\]")):
        with pytest.raises(IsingInputError, match=what):
            sampler.sample(BQM, anneal_schedule=bad)
        with pytest.raises(IsingInputError, match=what):
            DQASampler(anneal_schedule=bad)
    with pytest.raises(IsingInputError, match="not calibrated"):
        sampler.sample(BQM, beta=1.0, **rev)
    with pytest.raises(IsingInputError, match="not calibrated"):
        sampler.sample(BQM, calibrate=True, **rev)
    with pytest.raises(IsingTypeError, match="interrupt_function must be None or a callable"):
        sampler.sample(BQM, interrupt_function=1, **rev)
    with pytest.raises(IsingInputError, match="initial_states_generator must be one of"):
        sampler.sample(BQM, initial_states_generator="zeros", **rev)
    with pytest.raises(IsingInputError, match="initial_states_generator='none' needs initial_states"):
        sampler.sample(BQM, initial_states_generator="none", **rev)
    with pytest.raises(IsingInputError, match="num_steps"):
        sampler.sample(BQM, num_steps=-1)
