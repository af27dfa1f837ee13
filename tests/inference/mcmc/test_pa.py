"""Population annealing (isingattn.inference.mcmc.pa) against independent references:
float64 brute force for small models, Kaufman's exact partition function of the torus
(isingattn.onsager), exact expectations of the resampling schemes, and standard errors
the tests compute themselves from the spread over independent populations (never the
estimator's own claim of its accuracy)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from isingattn import IsingInputError, IsingModel
from isingattn.engine import ConvergenceWarning
from isingattn.inference import PopulationAnnealing, get
from isingattn.inference.mcmc.resampling import adaptive_step, ess_fraction, resample, systematic_indices
from isingattn.instances import random_model
from isingattn.testing import brute_force

K_C = 0.4406867935097715


@pytest.fixture(scope="module")
def glassy_batch():
    """Two 8-spin models with couplings of both signs and fields, one with two spins masked,
    run once by a Gibbs-move engine: 16 populations of 64 replicas."""
    rng = np.random.default_rng(0)
    h = rng.normal(0, 0.5, (2, 8))
    _, J = random_model(rng, 8, J_scale=0.6)
    mask = np.ones((2, 8), bool)
    mask[1, [2, 5]] = False
    model = IsingModel(h, J, beta=1.2, mask=mask)
    ref = [brute_force(h[b], J, 1.2, mask[b]) for b in range(2)]
    eng = PopulationAnnealing(num_replicas=64, num_populations=16, min_families=4)
    return model, ref, eng, eng.marginals(model, key=jax.random.key(1))


def test_log_z_and_marginals_agree_with_brute_force(glassy_batch):
    """log Z within 4 SE, and every mean within 4.5 SE, where the SEs are the spread over the
    independent populations computed here (log Z: the 15 that follow the pilot's ladder;
    means: all 16); the reported SE is at least that spread."""
    model, ref, eng, out = glassy_batch
    assert eng.prepared(model).moves == "gibbs"  # negative couplings: heat-bath moves
    P, R = 16, 64
    log_zp = np.asarray(out.info["log_z_populations"])
    assert log_zp.shape == (2, P)
    est = np.asarray(out.info["log_z_estimating"])
    assert np.array_equal(est, np.broadcast_to(np.arange(P) > 0, (2, P)))  # population 0 is the pilot
    lz = log_zp[:, 1:]
    se = lz.std(axis=1, ddof=1) / np.sqrt(P - 1)
    np.testing.assert_allclose(np.asarray(out.log_z), np.log(np.mean(np.exp(lz), axis=1)), rtol=1e-12)
    assert np.all(np.asarray(out.info["log_z_se"]) >= se * (1 - 1e-9))
    err = np.asarray(out.log_z) - np.array([r["log_z"] for r in ref])
    assert np.all(np.abs(err) <= 4 * se), (err, se)
    s = np.asarray(out.samples)
    assert s.shape == (2, P * R, 8)
    per_pop = s.reshape(2, P, R, 8).mean(axis=2)  # [batch, P, n]
    m_se = per_pop.std(axis=1, ddof=1) / np.sqrt(P)
    for b in range(2):
        act = np.asarray(ref[b]["active"], bool)
        d = np.abs(np.asarray(out.mean)[b][act] - ref[b]["mean"][act])
        assert np.all(d <= 4.5 * m_se[b][act] + 1e-6), (d, m_se[b][act])
        assert np.all(np.asarray(out.mean)[b][~act] == 0) and np.all(s[b][:, ~act] == 0)
    assert np.all(np.asarray(out.info["converged"]))


def test_adaptive_ladder_keeps_the_target_ess(glassy_batch):
    """Every step but the last has weights whose ESS fraction is the target (0.9) in the pilot
    population, to the bisection's precision; every population follows the pilot's ladder,
    which rises from 0 to β in num_temps steps. (The other populations' ESS fractions scatter
    around the target: their weights did not choose the step.)"""
    model, _, eng, out = glassy_batch
    ess = np.asarray(out.info["ess"])  # [batch, P, T]
    ladder = np.asarray(out.info["ladder"])  # [batch, P, T + 1]
    temps = np.asarray(out.info["num_temps"])
    for b in range(2):
        for p in range(ess.shape[1]):
            k = np.sum(np.isfinite(ess[b, p]))
            assert 2 <= k == temps[b]
            if p == 0:
                np.testing.assert_allclose(ess[b, p, : k - 1], eng.target_ess, atol=1e-4)
                assert ess[b, p, k - 1] >= eng.target_ess - 1e-4
            lad = ladder[b, p, : k + 1]
            assert lad[0] == 0 and np.all(np.diff(lad) > 0) and lad[-1] == pytest.approx(1.2, rel=1e-12)
            assert np.all(np.isnan(ladder[b, p, k + 1:]))
        np.testing.assert_array_equal(ladder[b], np.broadcast_to(ladder[b, 0], ladder[b].shape))  # one ladder


def test_moves_adapt_in_rounds_until_the_pilot_decorrelates(glassy_batch):
    """Every step makes whole rounds of moves_per_temp moves, at least one and at most
    max_moves_per_temp; a step stops early only once the pilot's autocorrelation is at or
    below the threshold, and at the cap otherwise (moves_capped counts those); the budget
    and the mean are the sums of the recorded moves. All populations make the pilot's moves."""
    model, _, eng, out = glassy_batch
    moves = np.asarray(out.info["moves"])  # [batch, P, T]
    dec = np.asarray(out.info["decorrelation"])
    temps = np.asarray(out.info["num_temps"])
    lo, hi = eng.moves_per_temp, eng.max_moves_per_temp
    for b in range(2):
        m, d = moves[b, 0, : temps[b]], dec[b, 0, : temps[b]]
        assert np.all(m % lo == 0) and np.all((m >= lo) & (m <= hi))
        assert np.all(moves[b, :, temps[b]:] == 0) and np.all(moves[b] == moves[b, :1])
        early = m + lo <= hi
        assert np.all(d[early] <= eng.decorrelation) and np.all(np.isfinite(d))
        assert int(out.info["moves_capped"][b]) == np.sum(d > eng.decorrelation)
        assert float(out.info["sweeps"][b]) == moves[b].sum() * eng.num_replicas
        assert float(out.info["moves_per_temp"][b]) == pytest.approx(moves[b].sum() / (16 * temps[b]))
    assert moves.max() > lo  # the glass at β = 1.2 needed more than one round somewhere


def test_autocorrelation_against_numpy():
    """The decorrelation measure against a float64 numpy transcription of its definition
    (connected spin autocorrelation over the population, masked spins left out, and the
    energies' correlation; the larger), and its two ends: 1 for an unmoved population, about
    0 (within 4.5 SE of the null, 1/sqrt(R)) for an independent one."""
    from isingattn.inference.mcmc.pa_kernel import autocorrelation

    rng = np.random.default_rng(11)
    R, n = 512, 30
    s0 = np.where(rng.random((R, n)) < 0.7, 1.0, -1.0)
    s0[:, :3] = 0  # masked
    flip = rng.random((R, n)) < 0.2
    s = np.where(flip, -s0, s0)
    E0 = rng.normal(size=R)
    E = 0.3 * E0 + rng.normal(size=R)
    m0, m = s0.mean(0), s.mean(0)
    spin = ((s0 * s).mean(0) - m0 * m).sum() / ((s0 * s0).mean(0) - m0 * m0).sum()
    en = np.corrcoef(E0, E)[0, 1]
    got = float(autocorrelation(jnp.asarray(s0), jnp.asarray(s), jnp.asarray(E0), jnp.asarray(E)))
    assert got == pytest.approx(max(spin, en), abs=1e-12)
    assert float(autocorrelation(jnp.asarray(s0), jnp.asarray(s0), jnp.asarray(E0), jnp.asarray(E0))) == pytest.approx(1)
    s1 = np.where(rng.random((R, n)) < 0.7, 1.0, -1.0)
    s1[:, :3] = 0
    null = float(autocorrelation(jnp.asarray(s0), jnp.asarray(s1), jnp.asarray(E0), jnp.asarray(rng.normal(size=R))))
    assert abs(null) <= 4.5 / np.sqrt(R)


def test_same_key_same_result_and_other_key_differs(glassy_batch):
    model, _, eng, out = glassy_batch
    again = eng.marginals(model, key=jax.random.key(1))
    np.testing.assert_array_equal(np.asarray(again.samples), np.asarray(out.samples))
    np.testing.assert_array_equal(np.asarray(again.log_z), np.asarray(out.log_z))
    other = eng.marginals(model, key=jax.random.key(2))
    assert not np.array_equal(np.asarray(other.log_z), np.asarray(out.log_z))


def test_adaptive_step_solves_for_the_target():
    """The bisection's step gives weights with ESS fraction = target (float64 energies);
    a step that already keeps the target is taken whole."""
    E = jnp.asarray(np.random.default_rng(3).normal(0, 5.0, 512))
    d = adaptive_step(E, jnp.asarray(10.0), 0.9)
    assert 0 < float(d) < 10
    assert float(ess_fraction(-d * E)) == pytest.approx(0.9, abs=1e-9)
    assert float(adaptive_step(E, jnp.asarray(1e-6), 0.9)) == 1e-6


def test_systematic_resampling_offspring_are_exactly_r_w_on_average():
    """Averaged over a fine grid of u (the one uniform of systematic resampling) the
    offspring counts are R·w exactly (each count is floor or ceil of R·w, and the grid
    average is within 1/grid of the integral)."""
    rng = np.random.default_rng(5)
    p = rng.dirichlet(np.full(12, 0.7))
    grid = 8192
    u = (np.arange(grid) + 0.5) / grid
    idx = jax.vmap(lambda uu: systematic_indices(uu, jnp.asarray(p)))(jnp.asarray(u))
    counts = np.stack([np.bincount(np.asarray(i), minlength=12) for i in idx])
    assert np.all(counts >= np.floor(12 * p) - 1e-9) and np.all(counts <= np.ceil(12 * p) + 1e-9)
    np.testing.assert_allclose(counts.mean(0), 12 * p, atol=2 / grid)


@pytest.mark.parametrize("scheme", ["residual", "multinomial"])
def test_random_resampling_offspring_are_r_w_in_expectation(scheme):
    """Over 4000 keys the mean offspring counts are R·w within 4.5 standard errors (the
    spread over keys, computed here); residual resampling keeps floor(R·w) copies always."""
    rng = np.random.default_rng(6)
    p = rng.dirichlet(np.full(12, 0.7))
    log_w = jnp.asarray(np.log(p) + 3.0)  # unnormalized
    idx = jax.vmap(lambda k: resample(k, log_w, scheme))(jax.random.split(jax.random.key(7), 4000))
    counts = np.asarray(jax.vmap(lambda i: jnp.bincount(i, length=12))(idx))
    se = counts.std(0, ddof=1) / np.sqrt(len(counts))
    nz = se > 0
    assert np.all(np.abs(counts.mean(0) - 12 * p)[nz] <= 4.5 * se[nz]), (counts.mean(0), 12 * p, se)
    assert np.all(np.abs(counts.mean(0) - 12 * p)[~nz] < 1e-9)
    if scheme == "residual":
        assert np.all(counts >= np.floor(12 * p))


def test_swendsen_wang_moves_on_an_8x8_torus_agree_with_kaufman():
    """A ferromagnetic torus at K_c (sparse couplings): moves='auto' picks Swendsen–Wang,
    and log Z is within 4 SE of Kaufman's exact value (tests/core/test_onsager.py checks
    Kaufman against brute force); the SE is the spread over 8 populations."""
    from isingattn import graphs, onsager

    g = graphs.lattice([8, 8], periodic=True)
    model = IsingModel(np.zeros(g.n), graphs.random_couplings(jax.random.key(0), g, "ferro", 1.0, dtype=np.float64),
                       beta=K_C)
    eng = get("pa", num_replicas=128, num_populations=8, min_families=10)
    assert eng.prepared(model).moves == "swendsen-wang"
    out = eng.marginals(model, key=jax.random.key(3))
    ref = float(onsager.torus_log_z(8, 8, K_C))
    log_zp = np.asarray(out.info["log_z_populations"])[1:]  # after the pilot
    se = log_zp.std(ddof=1) / np.sqrt(7)
    assert abs(float(out.log_z) - ref) <= 4 * se, (float(out.log_z) - ref, se)
    assert int(out.info["negative_couplings"]) == 0 and bool(out.info["converged"])
    assert float(out.info["families_eff"]) > 10


def test_target_se_adds_populations_until_reached_or_the_maximum():
    """One compiled batch program for both models: at β = 0.001 the first batch meets the
    target; at β = 1 it cannot, so the run stops at max_populations and warns."""
    h, J = random_model(np.random.default_rng(8), 6)
    eng = PopulationAnnealing(num_replicas=32, num_populations=4, target_se=1e-3, max_populations=8, min_families=1)
    easy = eng.marginals(IsingModel(h, J, beta=1e-3), key=jax.random.key(0))
    assert int(easy.info["num_populations"]) == 4 and bool(easy.info["target_se_reached"])
    assert float(easy.info["log_z_se"]) <= 1e-3
    with pytest.warns(ConvergenceWarning, match="target_se"):
        hard = eng.marginals(IsingModel(h, J, beta=1.0), key=jax.random.key(0))
    lz = np.asarray(hard.info["log_z_populations"])
    assert lz.shape == (8,) and int(hard.info["num_populations"]) == 8
    est = np.asarray(hard.info["log_z_estimating"])
    assert np.array_equal(est, np.arange(8) % 4 > 0)  # each batch has its own pilot
    assert lz[1:4].std(ddof=1) / np.sqrt(3) > 1e-3  # the first batch alone missed the target: a second was added
    assert not bool(hard.info["target_se_reached"]) and not bool(hard.info["converged"])
    ref = brute_force(h, J, 1.0)["log_z"]
    assert abs(float(hard.log_z) - ref) <= 4 * lz[est].std(ddof=1) / np.sqrt(6)


def test_bad_settings_are_refused():
    PopulationAnnealing(num_populations=2, fractions=(0.5, 1.0))  # a fixed ladder needs no pilot
    for bad in [dict(num_populations=1), dict(num_populations=2), dict(num_replicas=1), dict(target_ess=1.0),
                dict(target_ess=0.0),
                dict(resampling="stratified"), dict(moves="metropolis"), dict(fractions=(0.5, 0.4, 1.0)),
                dict(fractions=(0.5, 0.9)), dict(fractions=(0.0, 1.0)), dict(target_se=-1.0),
                dict(target_se=0.1, max_populations=2), dict(max_temps=0), dict(moves_per_temp=0),
                dict(moves_per_temp=4, max_moves_per_temp=3), dict(decorrelation=1.0), dict(decorrelation=-0.1),
                dict(mesh=4)]:
        with pytest.raises(IsingInputError):
            PopulationAnnealing(**bad)
    h, J = random_model(np.random.default_rng(9), 5)  # couplings of both signs
    with pytest.raises(IsingInputError, match="negative"):
        PopulationAnnealing(moves="swendsen-wang").marginals(IsingModel(h, J), key=jax.random.key(0))
    with pytest.raises(IsingInputError, match="key"):
        PopulationAnnealing().marginals(IsingModel(h, J))


def test_fixed_ladder_uses_every_population_and_agrees_with_brute_force():
    """With fractions there is no pilot: all 8 populations estimate log Z, which is within
    4 SE (the spread over the 8, computed here) of brute force; each follows the ladder."""
    h, J = random_model(np.random.default_rng(12), 6, J_scale=0.6)
    fr = tuple(np.linspace(0, 1, 13)[1:].tolist())
    out = PopulationAnnealing(num_replicas=64, num_populations=8, fractions=fr, min_families=4).marginals(
        IsingModel(h, J, beta=1.0), key=jax.random.key(4))
    assert np.all(np.asarray(out.info["log_z_estimating"]))
    lz = np.asarray(out.info["log_z_populations"])
    se = lz.std(ddof=1) / np.sqrt(8)
    assert abs(float(out.log_z) - brute_force(h, J, 1.0)["log_z"]) <= 4 * se
    np.testing.assert_allclose(np.asarray(out.info["ladder"])[:, 1:], np.broadcast_to(fr, (8, 12)), rtol=1e-6)
    assert int(out.info["num_temps"]) == 12
