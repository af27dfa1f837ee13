"""DimodEngine(calibrate=True): a sampler at a hidden fixed β is rescaled until its reads
follow the model's β (Exact / brute-force marginals within 4 standard errors from an ESS
computed here); calibration that cannot reach the target warns and says why in info."""

import numpy as np
import pytest

pytest.importorskip("dwave.system")
pytest.importorskip("dwave.samplers")
from _hidden_beta import GroundStateSampler, HiddenBetaSampler, dense_model, z_scores
from _hidden_beta import run_recording_warnings as _run
from isingattn.inference.dimod.specs import declared_ranges, DimodCalibrationWarning
from isingattn.inference.dimod.engine import DimodEngine

from isingattn.errors import IsingInputError, IsingTypeError
from isingattn.model import IsingModel
from isingattn.testing import brute_force

HIDDEN, TARGET, READS = 2.5, 1.0, 2000


def test_calibrated_hidden_beta_reaches_exact_marginals():
    h, J = dense_model(8, 0)
    model = IsingModel(h, J, beta=TARGET)
    exact = brute_force(h, J, TARGET)["mean"]
    cal, _ = _run(DimodEngine(HiddenBetaSampler(HIDDEN), num_reads=READS, calibrate=True), model)
    z, se = z_scores(cal.samples, exact)
    assert np.max(np.abs(z)) < 4, (np.asarray(cal.mean) - exact, se)
    info = {k: np.asarray(v) for k, v in cal.info.items()}
    assert info["calibrated"] and info["at_beta"] and not info["ground_only"]
    assert info["beta_eff_lo"] < TARGET < info["beta_eff_hi"]
    # the scale found is target / hidden: the hidden β read off the programmed problem
    assert info["beta_eff_lo"] / info["scale_J"] < HIDDEN < info["beta_eff_hi"] / info["scale_J"]
    assert 1 <= info["calibration_iterations"] <= 5 and info["calibration_error"] <= 0.05

    # uncalibrated, the same sampler is far off, and its β_eff interval covers the hidden β
    raw, w = _run(DimodEngine(HiddenBetaSampler(HIDDEN), num_reads=READS, estimate_beta=True), model)
    assert any("no temperature parameter" in str(x.message) for x in w)
    z_raw, _ = z_scores(raw.samples, exact)
    assert np.max(np.abs(z_raw)) > 10
    assert np.asarray(raw.info["beta_eff_lo"]) < HIDDEN < np.asarray(raw.info["beta_eff_hi"])
    assert not np.asarray(raw.info["at_beta"])


def test_one_scale_calibration_and_batch():
    """split=False (one scale for h and J) over a batch of two models with different targets."""
    h, J = dense_model(6, 1)
    for beta in (0.5, 1.2):  # one target per call, a batch of two models in each
        m = IsingModel(np.stack([h, -h]), J, beta=float(beta))
        out, _ = _run(DimodEngine(HiddenBetaSampler(HIDDEN, seed=2), num_reads=READS, calibrate=True, split=False), m)
        for b in range(2):
            z, _ = z_scores(np.asarray(out.samples)[b], brute_force(m.h[b], J, float(beta))["mean"])
            assert np.max(np.abs(z)) < 4
        np.testing.assert_allclose(np.asarray(out.info["scale_h"]), np.asarray(out.info["scale_J"]))
        assert np.all(np.asarray(out.info["calibrated"]))


def test_ground_state_sampler_cannot_be_calibrated():
    h, J = dense_model(6, 2)
    out, w = _run(DimodEngine(GroundStateSampler(), num_reads=50, calibrate=True), IsingModel(h, J))
    msgs = [str(x.message) for x in w if issubclass(x.category, DimodCalibrationWarning)]
    assert msgs and "only local minima" in msgs[0]
    assert not np.asarray(out.info["calibrated"]) and np.asarray(out.info["ground_only"])
    assert np.asarray(out.info["beta_eff"]) == np.inf and not np.asarray(out.info["at_beta"])


def test_declared_range_too_narrow_is_reported():
    """A hot hidden sampler (β0 = 0.2) needs the problem scaled up 5x; the declared
    h_range/j_range allow 1.5x: calibration stops at the limit and says so."""
    h, J = dense_model(6, 3)
    amax = max(np.abs(h).max(), np.abs(J).max())
    props = {"h_range": [-1.5 * amax, 1.5 * amax], "j_range": [-1.5 * amax, 1.5 * amax]}
    assert declared_ranges(HiddenBetaSampler(0.2, properties=props)) == (1.5 * amax, 1.5 * amax)
    out, w = _run(DimodEngine(HiddenBetaSampler(0.2, properties=props), num_reads=500, calibrate=True),
                  IsingModel(h, J))
    msgs = [str(x.message) for x in w if issubclass(x.category, DimodCalibrationWarning)]
    assert msgs and "beyond the h/J range" in msgs[0]
    info = {k: np.asarray(v) for k, v in out.info.items()}
    assert info["at_range_limit"] and not info["calibrated"]
    assert np.abs(h * info["scale_h"]).max() <= 1.5 * amax * (1 + 1e-9)
    assert np.abs(J * info["scale_J"]).max() <= 1.5 * amax * (1 + 1e-9)


def test_bad_settings_say_what_was_expected():
    s = HiddenBetaSampler(1.0)
    with pytest.raises(IsingTypeError, match="calibrate must be True or False"):
        DimodEngine(s, calibrate="yes")
    with pytest.raises(IsingInputError, match="calibration_rtol"):
        DimodEngine(s, calibrate=True, calibration_rtol=0.0)
    with pytest.raises(IsingInputError, match="beta_level"):
        DimodEngine(s, estimate_beta=True, beta_level=95)
    with pytest.raises(IsingInputError, match="calibration_steps"):
        DimodEngine(s, calibrate=True, calibration_steps=0)
    with pytest.raises(IsingInputError, match="embedding composites"):
        DimodEngine(s, chain_strength=2.0)


def test_extra_reads_sorted_by_energy_are_subsampled_at_random():
    """A sampler returning more reads than asked for, sorted by energy: the engine keeps a
    random subset (the first num_reads would be the coldest ones) in random order."""
    from _hidden_beta import SortedExactSampler

    h, J = dense_model(6, 5)
    out, _ = _run(DimodEngine(SortedExactSampler(1.0), num_reads=READS), IsingModel(h, J, beta=1.0))
    z, _ = z_scores(out.samples, brute_force(h, J, 1.0)["mean"])
    assert np.max(np.abs(z)) < 4
