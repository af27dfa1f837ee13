"""DimodEngine through EmbeddingComposite(MockDWaveSampler) on a Pegasus graph, the mock's
sampler replaced by fixed-β simulated annealing the engine is not told about: calibrated
marginals match Exact at the model's β (4 SE, ESS computed here), chain breaks are
reported, reads with broken chains are discarded and flagged, and the chain strength
defaults to uniform torque compensation."""

import numpy as np
import pytest

pytest.importorskip("dwave.system")
pytest.importorskip("dwave.samplers")
from _hidden_beta import HiddenBetaSampler, dense_model, z_scores
from _hidden_beta import run_recording_warnings as _run
from dwave.embedding.chain_strength import uniform_torque_compensation
from dwave.system import EmbeddingComposite
from dwave.system.testing import MockDWaveSampler
from isingattn.inference.dimod.specs import ChainBreakWarning, declared_ranges
from isingattn.inference.dimod.engine import DimodEngine

from isingattn.errors import IsingInputError
from isingattn.model import IsingModel
from isingattn.testing import brute_force

HIDDEN, TARGET, READS = 2.5, 1.0, 2000


def _qpu(num_sweeps=2000, seed=3):
    # fixed-β Metropolis must flip whole chains: 2000 sweeps mix the embedded n=8 problem
    return EmbeddingComposite(MockDWaveSampler(topology_type="pegasus", topology_shape=[3], parameter_warnings=False,
                                               substitute_sampler=HiddenBetaSampler(HIDDEN, num_sweeps, seed)))


def test_calibrated_embedded_sampler_reaches_exact_marginals():
    h, J = dense_model(8, 0)
    model = IsingModel(h, J, beta=TARGET)
    exact = brute_force(h, J, TARGET)["mean"]
    out, w = _run(DimodEngine(_qpu(), num_reads=READS, calibrate=True), model)
    z, se = z_scores(out.samples, exact)
    assert np.max(np.abs(z)) < 4, (np.asarray(out.mean) - exact, se)
    info = {k: np.asarray(v) for k, v in out.info.items()}
    assert info["calibrated"] and info["chains_intact"]
    assert info["beta_eff_lo"] < TARGET < info["beta_eff_hi"]
    assert info["beta_eff_lo"] / info["scale_J"] < HIDDEN < info["beta_eff_hi"] / info["scale_J"]
    # chains do break here, and those reads were left out (not majority-voted in)
    assert 0 < info["chain_break_fraction"] < info["broken_reads"] < 1
    assert not any(issubclass(x.category, ChainBreakWarning) for x in w)
    # the mock declares h_range [-4, 4], j_range [-1, 1]: the programmed problem stays inside
    h_max, j_max = declared_ranges(_qpu())
    assert (h_max, j_max) == (4.0, 1.0)
    assert np.abs(h).max() * info["scale_h"] <= h_max and np.abs(J).max() * info["scale_J"] <= j_max


def test_uncalibrated_embedded_sampler_is_off_and_reports_hidden_beta():
    h, J = dense_model(8, 0)
    out, _ = _run(DimodEngine(_qpu(), num_reads=READS, estimate_beta=True), IsingModel(h, J, beta=TARGET))
    z, _ = z_scores(out.samples, brute_force(h, J, TARGET)["mean"])
    assert np.max(np.abs(z)) > 10
    assert np.asarray(out.info["beta_eff_lo"]) < HIDDEN < np.asarray(out.info["beta_eff_hi"])


def test_default_chain_strength_is_uniform_torque_compensation():
    seen = []
    sampler = _qpu(num_sweeps=50)
    orig = sampler.sample

    def spy(bqm, **kw):
        seen.append(kw.get("chain_strength"))
        return orig(bqm, **kw)

    sampler.sample = spy
    h, J = dense_model(6, 1)
    _run(DimodEngine(sampler, num_reads=20), IsingModel(h, J))
    assert seen and all(c is uniform_torque_compensation for c in seen)


def test_broken_chains_are_flagged_when_too_few_reads_hold():
    """A chain strength of 1e-3 breaks nearly every chain: after chain_break_rounds calls the
    engine falls short of intact reads, fills with broken ones and says so."""
    h, J = dense_model(8, 2)
    eng = DimodEngine(_qpu(num_sweeps=50), num_reads=200, chain_strength=1e-3, chain_break_rounds=2)
    out, w = _run(eng, IsingModel(h, J))
    assert any(issubclass(x.category, ChainBreakWarning) for x in w)
    assert not np.asarray(out.info["chains_intact"])
    assert np.asarray(out.info["broken_reads"]) > 0.5


def test_chain_strength_must_be_positive():
    with pytest.raises(IsingInputError, match="chain_strength must be a positive number or a callable"):
        DimodEngine(_qpu(), chain_strength=-1.0)
