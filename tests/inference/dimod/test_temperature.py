"""The effective-temperature estimator (isingattn.inference.dimod.temperature): DQA's JAX fit and
DimodEngine's host fit agree with dwave-system's own maximum_pseudolikelihood on the
same samples, and the bootstrap interval covers the β the samples were drawn at."""

import numpy as np
import pytest

pytest.importorskip("dwave.system")
import dimod
from dwave.system.temperatures import (
    maximum_pseudolikelihood,
    maximum_pseudolikelihood_temperature,
)

from isingattn.errors import IsingInputError, IsingTypeError
from isingattn.model import IsingModel
from isingattn.inference.dimod.temperature import effective_beta, local_excitations
from isingattn.inference.dqa.pseudolikelihood import pseudo_likelihood_beta
from isingattn.testing import all_spins


def _model(n=7, seed=0):
    rng = np.random.default_rng(seed)
    h = rng.normal(size=n) * 0.6
    J = np.triu(rng.normal(size=(n, n)) * 0.4, 1)
    return h, J + J.T


def _exact_draws(h, J, beta_h, beta_J, S, seed):
    """S iid draws from exp(β_h h·s + β_J Σ_{j<k} J s s), by enumeration (the reference)."""
    spins = all_spins(len(h))
    logw = beta_h * spins @ h + 0.5 * beta_J * np.einsum("ci,ij,cj->c", spins, J, spins)
    p = np.exp(logw - logw.max())
    return spins[np.random.default_rng(seed).choice(len(p), S, p=p / p.sum())]


def _bqms(h, J):
    """The field and coupling parts of the model's BQM (dimod's sign: E = -h·s - Σ J s s)."""
    n = len(h)
    bh = dimod.BQM({i: -h[i] for i in range(n)}, {}, 0.0, "SPIN")
    bJ = dimod.BQM({i: 0.0 for i in range(n)}, {(i, k): -J[i, k] for i in range(n) for k in range(i + 1, n)}, 0.0, "SPIN")
    return bh, bJ


def test_local_excitations_are_dwave_effective_fields():
    from dwave.system.temperatures import effective_field

    h, J = _model()
    s = _exact_draws(h, J, 1.0, 1.0, 50, 1)
    eh, eJ = local_excitations(h, J, s)
    bqm = IsingModel(h, J).to_bqm()
    ref, labels = effective_field(bqm, (s, list(range(len(h)))), current_state_energy=True)
    np.testing.assert_allclose(eh + eJ, ref[:, np.argsort(labels)], atol=1e-12)


def test_dqa_estimator_agrees_with_dwave_system():
    """Separate scales β_h ≠ β_J (a fast anneal's freeze-out): DQA's pseudo_likelihood_beta,
    effective_beta and dwave-system's two-BQM maximum_pseudolikelihood (fed the BQMs and
    the sample set, so its own effective_field) find the same maximum."""
    h, J = _model()
    s = _exact_draws(h, J, 0.6, 1.3, 3000, 2)
    dqa = pseudo_likelihood_beta(h, J, s)
    assert bool(dqa.converged)
    ours = effective_beta(h, J, s, split=True, num_bootstrap=0)
    x, _ = maximum_pseudolikelihood(bqms=list(_bqms(h, J)), sampleset=(s, list(range(len(h)))),
                                    degenerate_fields=False)
    ref = -np.asarray(x)  # dwave's exponent is x·H, H = E
    np.testing.assert_allclose([float(dqa.beta_h), float(dqa.beta_J)], ref, rtol=1e-6)
    np.testing.assert_allclose([ours.beta_h, ours.beta_J], ref, rtol=1e-6)
    # and the fit is near the truth: within 4 of DQA's own sandwich standard errors
    assert abs(ref[0] - 0.6) < 4 * float(dqa.se_h) and abs(ref[1] - 1.3) < 4 * float(dqa.se_J)


def test_single_scale_is_dwave_temperature_and_interval_covers_truth():
    h, J = _model(seed=3)
    beta = 0.8
    s = _exact_draws(h, J, beta, beta, 2000, 4)
    est = effective_beta(h, J, s, split=False, num_bootstrap=200, seed=5)
    T, _ = maximum_pseudolikelihood_temperature(IsingModel(h, J).to_bqm(), (s, list(range(len(h)))))
    assert est.beta == pytest.approx(1 / T, rel=1e-6)
    assert est.beta_lo < beta < est.beta_hi
    assert est.beta_lo < est.beta < est.beta_hi and est.beta_se > 0
    assert np.isnan(est.beta_h) and np.isnan(est.beta_J)  # split=False fits one scale


def test_bootstrap_interval_width_matches_sample_size():
    """dwave-system's own bootstrap resamples num_bootstrap_samples reads, not S; ours
    resamples S: its SD matches the spread of the estimate over independent sample sets."""
    h, J = _model(n=6, seed=6)
    fits = [effective_beta(h, J, _exact_draws(h, J, 1.0, 1.0, 500, 100 + r), split=False, num_bootstrap=0).beta
            for r in range(30)]
    est = effective_beta(h, J, _exact_draws(h, J, 1.0, 1.0, 500, 7), split=False, num_bootstrap=300, seed=1)
    sd = np.std(fits, ddof=1)
    # the SD of an SD from 30 replicates is ~13%: allow a factor 1.6 either way
    assert sd / 1.6 < est.beta_se < 1.6 * sd


def test_ground_states_only_give_infinite_beta():
    h, J = _model(n=6)
    E = -(all_spins(6) @ h) - 0.5 * np.einsum("ci,ij,cj->c", all_spins(6), J, all_spins(6))
    s = np.repeat(all_spins(6)[[np.argmin(E)]], 40, 0)
    est = effective_beta(h, J, s, num_bootstrap=10)
    assert est.ground_only and est.beta == np.inf


def test_bad_input_says_what_was_expected():
    h, J = _model(n=5)
    s = _exact_draws(h, J, 1.0, 1.0, 20, 0)
    with pytest.raises(IsingInputError, match=r"expected h \[5\] and J \[5, 5\]"):
        effective_beta(h[:4], J, s)
    with pytest.raises(IsingInputError, match="±1"):
        effective_beta(h, J, (s + 1) / 2)
    with pytest.raises(IsingTypeError, match=r"\[S, n\]"):
        effective_beta(h, J, s[0])
    with pytest.raises(IsingInputError, match="num_bootstrap"):
        effective_beta(h, J, s, num_bootstrap=-1)
    with pytest.raises(IsingInputError, match="level"):
        effective_beta(h, J, s, level=95)
