"""isingattn.thermo.scan against float64 brute force: the exact engine's energy and heat
capacity to numerical precision, a sampler's within 4 of the standard errors computed here
from the returned samples' energies."""

import jax
import numpy as np
import pytest

from isingattn import IsingInputError, IsingModel, thermo
from isingattn.inference.exact import Exact
from isingattn.inference.mcmc import Gibbs
from isingattn.instances import random_model
from isingattn.testing import all_spins

BETAS = [0.3, 0.7, 1.2]


def _exact_thermo(h, J, beta):
    S = all_spins(len(h))
    E = -S @ h - 0.5 * np.einsum("ci,ij,cj->c", S, J, S)
    logw = -beta * E
    logz = np.logaddexp.reduce(logw)
    p = np.exp(logw - logz)
    n = len(h)
    m = np.abs(S.sum(1)) / n
    u = p @ E
    return dict(log_z=logz, energy=u / n, heat_capacity=beta**2 * (p @ E**2 - u**2) / n, abs_magnetization=p @ m,
                susceptibility=beta * n * (p @ m**2 - (p @ m) ** 2))


def _model():
    h, J = random_model(np.random.default_rng(0), 8, h_scale=0.3, J_scale=0.5)
    return h, J, IsingModel(h, J, beta=1.0)


def test_exact_engine_scan_matches_brute_force():
    h, J, model = _model()
    sc = thermo.scan(model, Exact(), BETAS)
    for i, b in enumerate(BETAS):
        ref = _exact_thermo(h, J, b)
        assert sc.log_z[i] == pytest.approx(ref["log_z"], abs=1e-10)
        assert sc.free_energy[i] == pytest.approx(-ref["log_z"] / (b * 8), abs=1e-10)
        assert sc.energy[i] == pytest.approx(ref["energy"], abs=1e-9)
        assert sc.heat_capacity[i] == pytest.approx(ref["heat_capacity"], abs=1e-5)
    assert np.all(np.isnan(sc.abs_magnetization)) and np.all(sc.log_z_se == 0)


def test_sampler_scan_within_four_standard_errors():
    h, J, model = _model()
    sc = thermo.scan(model, Gibbs(num_warmup=100, num_samples=2000, num_chains=4), BETAS, key=jax.random.key(3))
    for q in ("energy", "heat_capacity", "abs_magnetization", "susceptibility"):
        ref = np.array([_exact_thermo(h, J, b)[q] for b in BETAS])
        got, se = getattr(sc, q), getattr(sc, q + "_se")
        assert np.all(np.abs(got - ref) <= 4 * se), (q, got, ref, se)
    assert np.all(np.isnan(sc.log_z))


def test_bad_input_is_refused():
    _, _, model = _model()
    with pytest.raises(IsingInputError):
        thermo.scan(model, Exact(), [0.5, -1.0])
    with pytest.raises(IsingInputError):
        thermo.scan(model, Gibbs(), [0.5])  # a sampler without a key
    with pytest.raises(IsingInputError):
        thermo.scan(IsingModel(np.zeros((2, 3)), np.zeros((3, 3))), Exact(), [0.5])
