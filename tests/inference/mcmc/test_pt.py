"""Parallel tempering (isingattn.inference.mcmc.pt) against independent references only: an
exact transfer matrix for open strips written HERE (not the Banded engine), float64 brute
force for small models (isingattn.testing), Kaufman's torus partition function
(isingattn.onsager, itself tested against brute force), and effective sample sizes computed
here from the returned samples with ArviZ (never the engine's own ESS or MCSE)."""

import itertools
import unittest

import arviz as az
import dimod
import dimod.testing
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from isingattn import IsingInputError, IsingModel, IsingTypeError, inference
from isingattn.engine import from_spec, to_spec
from isingattn.graphs import lattice
from isingattn.inference.dimod.pt_sampler import PTSampler
from isingattn.inference.mcmc import ParallelTempering
from isingattn.inference.mcmc.houdayer import houdayer_move
from isingattn.inference.mcmc.pt_kernel import COLD, NONE, PTState, pt_init, pt_step, swap_round
from isingattn.inference.mcmc.pt_ladder import adapt_ladder
from isingattn.inference.mcmc.pt_ladder import PILOT_RUNGS, TARGET_REJECT, barrier, replicas_for_barrier
from isingattn.onsager import torus_log_z
from isingattn.sparse import SparseCouplings
from isingattn.testing import brute_force

# ---- the exact reference: a transfer matrix over the columns of an open strip --------------


def strip_model(rows, cols, seed=0, h_scale=0.3):
    """±1 couplings on an open ``rows × cols`` grid (spin ``r·cols + c``), ``h ~ N(0, h_scale²)``."""
    rng = np.random.default_rng(seed)
    n = rows * cols
    J = np.zeros((n, n))
    for r in range(rows):
        for c in range(cols):
            i = r * cols + c
            if c + 1 < cols:
                J[i, i + 1] = J[i + 1, i] = rng.choice([-1.0, 1.0])
            if r + 1 < rows:
                J[i, i + cols] = J[i + cols, i] = rng.choice([-1.0, 1.0])
    return rng.normal(0, h_scale, n), J


def transfer_exact(h, J, beta, rows, cols):
    """Exact ``(mean [n], ⟨E⟩, log Z)`` of the strip in float64: forward–backward over its
    columns, each column a state of ``2^rows`` configurations."""
    X = np.array(list(itertools.product([1.0, -1.0], repeat=rows)))  # [S, rows]
    col = lambda c: np.arange(rows) * cols + c
    loc, pair = [], []  # -E inside column c [S]; -E between columns c and c+1 [S, S]
    for c in range(cols):
        I = col(c)
        loc.append(X @ h[I] + 0.5 * np.einsum("sa,ab,sb->s", X, J[np.ix_(I, I)], X))
        if c + 1 < cols:
            pair.append(X @ J[np.ix_(I, col(c + 1))] @ X.T)
    la = [beta * loc[0]]  # log forward messages (column c's own weight included)
    for c in range(1, cols):
        la.append(np.logaddexp.reduce(la[-1][:, None] + beta * pair[c - 1], axis=0) + beta * loc[c])
    lb = [np.zeros(len(X))] * cols  # log backward messages
    for c in range(cols - 2, -1, -1):
        lb[c] = np.logaddexp.reduce(beta * pair[c] + (beta * loc[c + 1] + lb[c + 1])[None, :], axis=1)
    log_z = np.logaddexp.reduce(la[-1])
    mean, E = np.zeros(rows * cols), 0.0
    for c in range(cols):
        p = np.exp(la[c] + lb[c] - log_z)
        mean[col(c)] = p @ X
        E -= p @ loc[c]
        if c + 1 < cols:
            pp = np.exp(la[c][:, None] + beta * pair[c] + (beta * loc[c + 1] + lb[c + 1])[None, :] - log_z)
            E -= np.sum(pp * pair[c])
    return mean, E, log_z


def test_transfer_matrix_is_brute_force():
    h, J = strip_model(3, 4, seed=5)
    mean, E, log_z = transfer_exact(h, J, 0.8, 3, 4)
    ref = brute_force(h, J, 0.8)
    S, p = ref["spins"], ref["probs"]
    np.testing.assert_allclose(mean, ref["mean"], atol=1e-12)
    np.testing.assert_allclose(E, p @ (-S @ h - 0.5 * np.einsum("ci,ij,cj->c", S, J, S)), atol=1e-10)
    np.testing.assert_allclose(log_z, ref["log_z"], atol=1e-10)


# ---- the statistical checks, with ESS from ArviZ --------------------------------------------

RARE_FLIPS = 100  # sign changes (50 excursions) below which a spin's ESS is not estimable from its series
RARE_MINORITY = 0.005  # ... or a minority state this rare (|⟨s⟩| > 0.99): its excursions are rare cluster events
RARE_TOL = 0.02  # ... such a spin's marginal is then within this of the reference


def _ess(x):
    """ArviZ's bulk ESS of ``x [chains, draws]``."""
    return float(az.ess(np.asarray(x, np.float64)))


def check_marginals_and_energy(out, num_chains, mean_ref, energy_ref, n_sd=4.0):
    """Every marginal and ⟨E⟩ within ``n_sd`` Monte Carlo standard errors, the MCSE from an ESS
    computed here. A spin whose draws changed sign fewer than ``RARE_FLIPS`` times in all
    chains, or whose minority sign is rarer than ``RARE_MINORITY``, has no estimable
    correlation time: its few excursions are rare moves of a cluster frozen into the ground
    state, correlated across draws far beyond what its series shows (measured on the 6×40
    strip at β = 2: an error of 0.003 at "4.1 MCSE"). It must then be within ``RARE_TOL``."""
    S = np.asarray(out.samples, np.float64)
    S = S.reshape((num_chains, -1) + S.shape[-1:])  # chain-major [C, D, n]
    est = np.asarray(out.mean, np.float64)
    np.testing.assert_allclose(est, S.mean((0, 1)), atol=1e-5)  # the mean is the samples' mean
    flips = (np.diff(S, axis=1) != 0).sum((0, 1))
    bad = []
    for i in range(S.shape[-1]):
        err = abs(est[i] - mean_ref[i])
        if flips[i] < RARE_FLIPS or (1 - abs(est[i])) / 2 < RARE_MINORITY:
            if err > RARE_TOL:
                bad.append((i, "rare", err))
            continue
        mcse = S[:, :, i].std() / np.sqrt(_ess(S[:, :, i]))
        if err > n_sd * mcse:
            bad.append((i, err, mcse))
    assert not bad, bad
    E = np.asarray(out.info["energy"], np.float64)  # [C, D]
    assert E.shape == S.shape[:2]
    mcse_E = E.std() / np.sqrt(_ess(E))
    assert abs(E.mean() - energy_ref) <= n_sd * mcse_E, (E.mean(), energy_ref, mcse_E)
    return S


def _strip(rows, cols, beta, seed=0, dtype=jnp.float32):
    h, J = strip_model(rows, cols, seed)
    return h, J, IsingModel(jnp.asarray(h, dtype), jnp.asarray(J, dtype), beta)


# One small engine shared by the fast cases (one compilation).
FAST = ParallelTempering(num_warmup=200, num_samples=1500, num_chains=4, num_replicas=6)


def test_small_strip_marginals_energy_and_log_z():
    """A 3×8 ±J strip at β = 2 (frustrated, slow for single-spin moves)."""
    rows, cols, beta = 3, 8, 2.0
    h, J, model = _strip(rows, cols, beta, seed=1)
    mean, E, log_z = transfer_exact(h, J, beta, rows, cols)
    out = FAST.marginals(model, key=jax.random.key(0))
    check_marginals_and_energy(out, FAST.num_chains, mean, E)
    se = float(out.info["log_z_se"])
    assert 0 < se < 0.5 and abs(float(out.log_z) - log_z) <= 4 * se, (float(out.log_z), log_z, se)
    info = out.info
    assert info["log_z_kind"] == "estimate"
    assert info["swap_rate"].shape == (FAST.num_replicas - 1,) and np.all(np.asarray(info["swap_rate"]) > 0.1)
    lad = np.asarray(info["ladder"])
    assert lad.shape == (6,) and lad[0] == pytest.approx(beta) and lad[-1] == 0 and np.all(np.diff(lad) < 0)
    assert float(info["round_trip_rate"]) > 0
    assert info["energy"].shape == (4, 1500) and info["flip_rate"].shape == (4,)
    for k in ("r_hat", "ess", "mcse", "frozen"):
        assert info[k].shape == (rows * cols,)
    assert bool(info["converged"])


STRIPS = [(8, 24), (6, 40)]
# Every case runs long: compiled at level 1 (tests/conftest.py, run_bound). The 6×40 strip has a
# slow cluster at its end. At 4,000 draws its β = 2 case was marginal: it passed at the suite's
# level 0 with key 1, and at level 1 (other rounding, another path) three spins of the cluster
# (57, 227, 230) ended 4.2-4.9 MCSE out. With 8,000 draws it passed keys 1-3 at level 1 and key 1
# at level 0 (2026-12-06).
STRIP_CASES = [pytest.param(rows, cols, beta, marks=pytest.mark.run_bound, id=f"{beta}-{rows}-{cols}")
               for rows, cols in STRIPS for beta in (1.0, 2.0, 3.0)]


@pytest.mark.slow
@pytest.mark.parametrize("rows,cols,beta", STRIP_CASES)
def test_strip_defaults_against_transfer_matrix(rows, cols, beta):
    """PT on the strips of issue 29: every marginal and ⟨E⟩ within 4 MCSE (ESS computed
    here). On the 8×24 strip at β = 2, the issue's target, the engine as users call it,
    ``inference.get("pt")``, gets every marginal within 0.08 of exact. (The 6×40 strip at β = 2 has a slow
    cluster at its end, which needs more draws: see STRIP_CASES.)"""
    h, J, model = _strip(rows, cols, beta)
    mean, E, log_z = transfer_exact(h, J, beta, rows, cols)
    target = (rows, cols, beta) == (8, 24, 2.0)
    # The target case runs the defaults (16,000 draws); the others a quarter of them, half
    # on the 6×40 strip (the bound is still 4 MCSE from this test's own ESS, so it widens with
    # fewer draws, honestly).
    eng = inference.get("pt") if target else ParallelTempering(num_warmup=500, num_samples=8000 if cols == 40 else 4000)
    out = eng.marginals(model, key=jax.random.key(1))
    check_marginals_and_energy(out, 4, mean, E)
    if target:
        assert np.abs(np.asarray(out.mean) - mean).max() <= 0.08
    se = float(out.info["log_z_se"])
    assert abs(float(out.log_z) - log_z) <= 4 * se, (float(out.log_z), log_z, se)


# ---- log Z against Kaufman -------------------------------------------------------------------


def _torus(L, K, sparse):
    g = lattice((L, L), periodic=True)
    J = SparseCouplings(g, jnp.ones(g.E, jnp.float32))
    return IsingModel(jnp.zeros(L * L, jnp.float32), J if sparse else J.to_dense(), K)


@pytest.mark.run_bound
@pytest.mark.slow
def test_log_z_16x16_torus_kaufman():
    out = ParallelTempering(num_replicas=32, num_warmup=1000, num_samples=4000).marginals(_torus(16, 0.6, sparse=True), key=jax.random.key(3))
    ref, se = float(torus_log_z(16, 16, 0.6)), float(out.info["log_z_se"])
    assert 0 < se < 1.0 and abs(float(out.log_z) - ref) <= 4 * se, (float(out.log_z), ref, se)


HOT = ParallelTempering(num_warmup=100, num_samples=2000, num_replicas=4, beta_min=0.1)


def _hot_case():
    rows, cols, beta = 2, 5, 1.0
    h, J, model = _strip(rows, cols, beta, seed=3)
    return h, J, beta, model, brute_force(h, J, beta)


def test_log_z_with_a_hot_end_above_zero():
    """``beta_min > 0``: the last stepping stone is a mean over fresh uniform draws."""
    h, J, beta, model, ref = _hot_case()
    out = HOT.marginals(model, key=jax.random.key(4))
    se = float(out.info["log_z_se"])
    assert abs(float(out.log_z) - ref["log_z"]) <= 4 * se, (float(out.log_z), ref["log_z"], se)
    assert float(out.info["ladder"][-1]) == pytest.approx(0.1)


@pytest.mark.slow
def test_log_z_gradient_is_the_moments():
    """The gradient of log Z is the sampled moments: ∂/∂β = -⟨E⟩, ∂/∂h = β⟨s⟩ (brute force)."""
    h, J, beta, model, ref = _hot_case()
    S, p = ref["spins"], ref["probs"]
    E_ref = p @ (-S @ h - 0.5 * np.einsum("ci,ij,cj->c", S, J, S))
    f = lambda h_, b_: HOT.marginals(IsingModel(h_, model.J, b_), key=jax.random.key(4)).log_z
    g_h, g_b = jax.grad(f, argnums=(0, 1))(model.h, model.beta)
    assert abs(float(g_b) + E_ref) < 0.3, (float(g_b), -E_ref)
    np.testing.assert_allclose(np.asarray(g_h), beta * ref["mean"], atol=0.1)


# ---- batches, masks, sparse ------------------------------------------------------------------


def test_batched_masked_sparse_agree_with_brute_force():
    """Two models (one with two spins masked) on a sparse 3×3 lattice, one run: each within
    4 MCSE of brute force, its log Z within 4 SE; masked spins are 0 and not counted."""
    g = lattice((3, 3))
    rng = np.random.default_rng(7)
    w = rng.choice([-1.0, 1.0], (2, g.E))
    h = rng.normal(0, 0.3, (2, 9))
    mask = np.ones((2, 9), bool)
    mask[1, [2, 6]] = False
    beta = 1.5
    model = IsingModel(jnp.asarray(h, jnp.float32), SparseCouplings(g, jnp.asarray(w, jnp.float32)), beta,
                       mask=jnp.asarray(mask))
    out = FAST.marginals(model, key=jax.random.key(6))
    S = np.asarray(out.samples)
    assert S.shape == (2, 4 * 1500, 9) and out.info["ladder"].shape == (2, 6)
    assert np.all(np.asarray(out.mean)[1, [2, 6]] == 0)
    for b in range(2):
        Jd = np.asarray(SparseCouplings(g, w[b]).to_dense())
        ref = brute_force(h[b], Jd, beta, mask[b])
        mean = np.zeros(9)
        mean[mask[b]] = ref["mean"][mask[b]] if ref["mean"].shape == (9,) else ref["mean"]
        act = np.flatnonzero(mask[b])
        sub = type(out)(mean=out.mean[b][act], samples=out.samples[b][:, act], info={"energy": out.info["energy"][b]})
        Ss = ref["spins"]
        Es = -Ss @ h[b][act] - 0.5 * np.einsum("ci,ij,cj->c", Ss, Jd[np.ix_(act, act)], Ss)
        check_marginals_and_energy(sub, 4, mean[act], ref["probs"] @ Es)
        se = float(out.info["log_z_se"][b])
        assert abs(float(out.log_z[b]) - ref["log_z"]) <= 4 * se, (b, float(out.log_z[b]), ref["log_z"], se)


def test_same_key_same_result():
    _, _, model = _strip(3, 8, 2.0, seed=1)  # the model and engine of the first test: no new compilation
    a, b, c = (FAST.marginals(model, key=jax.random.key(k)) for k in (9, 9, 10))
    np.testing.assert_array_equal(np.asarray(a.samples), np.asarray(b.samples))
    assert not np.array_equal(np.asarray(a.samples), np.asarray(c.samples))


@pytest.mark.slow
def test_under_jit():
    _, _, model = _strip(3, 8, 2.0, seed=1)
    a = FAST.marginals(model, key=jax.random.key(9))
    jitted = jax.jit(lambda m, k: FAST.marginals(m, key=k).mean)
    np.testing.assert_allclose(np.asarray(jitted(model, jax.random.key(9))), np.asarray(a.mean), atol=1e-6)


# ---- the kernel ------------------------------------------------------------------------------


def test_swaps_transport_states_along_the_ladder():
    """With every swap accepted (equal β) the even–odd rounds move each state one rung per
    step, so a state crosses R rungs in R steps: the non-reversible sweep of the ladder."""
    R, C = 6, 2
    s = jnp.arange(R, dtype=jnp.float32)[:, None, None] * jnp.ones((R, C, 3))
    E, last = jnp.zeros((R, C)), jnp.full((R, C), NONE).at[0].set(COLD)
    trips = 0
    for t in range(2 * R):
        s, E, last, info = jax.jit(swap_round)(jnp.zeros((R - 1, C)), s, E, last, jnp.ones(R), t % 2)
        trips = trips + info.round_trips
        assert np.all(np.asarray(info.swapped)[t % 2 :: 2]) and not np.any(np.asarray(info.swapped)[1 - t % 2 :: 2])
    np.testing.assert_array_equal(np.asarray(s[:, 0, 0]), np.arange(R))  # every state back after 2R steps
    assert np.all(np.asarray(trips) == 1)  # the state that started cold went hot and came back


def test_swap_acceptance_is_the_metropolis_ratio():
    u = jnp.full((1, 1), 0.5)
    s = jnp.stack([jnp.ones((1, 2)), -jnp.ones((1, 2))])
    last = jnp.zeros((2, 1), jnp.int32)
    # (β_0 - β_1)(E_0 - E_1) = (2 - 1)(-3 - 0) = -3: probability e^-3 < 0.5, refused
    _, _, _, info = swap_round(u, s, jnp.array([[-3.0], [0.0]]), last, jnp.array([2.0, 1.0]), 0)
    assert float(info.accept_prob[0, 0]) == pytest.approx(np.exp(-3)) and not bool(info.swapped[0, 0])
    # the colder replica holds the higher energy: always accepted
    s2, E2, _, info = swap_round(u, s, jnp.array([[1.0], [0.0]]), last, jnp.array([2.0, 1.0]), 0)
    assert bool(info.swapped[0, 0]) and float(E2[0, 0]) == 0.0 and float(s2[0, 0, 0]) == -1.0


def test_adapt_ladder_equalizes_rejection():
    betas = jnp.linspace(2.0, 0.0, 5)
    new = adapt_ladder(betas, jnp.array([0.8, 0.1, 0.1, 0.2]))
    assert float(new[0]) == 2.0 and float(new[-1]) == 0.0 and np.all(np.diff(np.asarray(new)) < 0)
    assert float(new[1]) > 1.5 + 0.5 * 0.5  # the costly cold pair gets rungs packed closer


def test_pt_step_kernel_samples_a_small_model():
    """The public kernel alone (``pt_step``, blackjax style), 3 replicas × 256 chains of a
    5-spin model at β = 1.5: the cold replica's mean within 4 standard errors of brute force
    (independent chains' final states)."""
    rng = np.random.default_rng(11)
    h = rng.normal(0, 0.5, 5)
    J = np.triu(rng.choice([-1.0, 1.0], (5, 5)), 1)
    J = J + J.T
    hj, Jj = jnp.asarray(h, jnp.float32), jnp.asarray(J, jnp.float32)
    betas = jnp.array([1.5, 0.7, 0.0])
    state = pt_init(jax.random.key(0), betas, (256, 5), h=hj, J=Jj)
    assert isinstance(state, PTState) and state.spins.shape == (3, 256, 5)

    @jax.jit
    def run(state):
        def body(t, st):
            return pt_step(jax.random.fold_in(jax.random.key(1), t), st, hj, Jj, betas, t % 2)[0]
        return jax.lax.fori_loop(0, 60, body, state)

    state = run(state)
    ref = brute_force(h, J, 1.5)["mean"]
    s = np.asarray(state.spins[0])
    se = np.sqrt(np.maximum(1 - ref**2, 1e-3) / 256)
    assert np.all(np.abs(s.mean(0) - ref) <= 4 * se), (s.mean(0), ref)
    E = np.asarray(state.energy)
    np.testing.assert_allclose(E[0], -s @ h - 0.5 * np.einsum("ci,ij,cj->c", s, J, s), atol=1e-4)


# ---- configuration, registry, bad input -------------------------------------------------------


def test_registered_and_spec_round_trip():
    eng = inference.get("pt", num_replicas=4, ladder=[1.0, 0.5, 0.2, 0.0])
    assert isinstance(eng, ParallelTempering) and eng.ladder == (1.0, 0.5, 0.2, 0.0)
    assert from_spec(to_spec(eng)) == eng and to_spec(eng)["name"] == "pt"
    assert isinstance(inference.get("pt"), ParallelTempering)


@pytest.mark.parametrize("config,match", [
    (dict(num_replicas=1), "num_replicas"),
    (dict(num_replicas=0), "num_replicas"),
    (dict(beta_min=-0.1), "beta_min"),
    (dict(num_samples=6, thin=4), "draws"),
    (dict(num_replicas=16, ladder=[1.0, 0.5]), "ladder"),  # wrong length for 16 replicas
    (dict(ladder=[1.0]), "ladder"),  # one rung
    (dict(num_replicas=3, ladder=[0.9, 0.5, 0.0]), "ladder"),  # does not start at 1
    (dict(num_replicas=3, ladder=[1.0, 0.5, 0.6]), "ladder"),  # not decreasing
    (dict(num_replicas=3, ladder=[1.0, 0.5, -0.1]), "ladder"),
    (dict(schedule="random"), "schedule"),
    (dict(num_chains="4"), "num_chains"),
    (dict(adapt_rounds=0), "adapt_rounds"),
    (dict(rhat_threshold=1.0), "rhat_threshold"),
    (dict(mesh=4), "jax.sharding.Mesh"),  # a mesh whose devices do not divide num_chains: tests/core/test_sharding.py
])
def test_bad_configuration_is_refused(config, match):
    with pytest.raises(IsingInputError, match=match):
        ParallelTempering(**config)


def test_bad_ladder_type_and_bad_calls():
    with pytest.raises(IsingTypeError, match="ladder"):
        ParallelTempering(num_replicas=2, ladder=["1", "0"])
    with pytest.raises(IsingInputError, match="setting"):
        inference.get("pt", replicas=4)
    h, J, model = _strip(2, 2, 1.0)
    with pytest.raises(IsingInputError, match="key"):
        FAST.marginals(model)
    with pytest.raises(IsingTypeError, match="IsingModel"):
        FAST.marginals((h, J), key=jax.random.key(0))


# ---- dimod -----------------------------------------------------------------------------------

SAMPLER = PTSampler(num_reads=512, num_sweeps=50, num_replicas=4)  # one compilation for every dimod test


def test_pt_sampler_api_and_energies():
    dimod.testing.assert_sampler_api(SAMPLER)
    assert set(SAMPLER.parameters) == set(PTSampler.DEFAULTS) | {"seed"}
    for vartype in (dimod.SPIN, dimod.BINARY):
        bqm = dimod.BQM({"a": 0.5, 1: -0.3, (2, "x"): 0.1}, {("a", 1): -1.0, (1, (2, "x")): 0.4}, 0.7, dimod.SPIN)
        bqm = bqm.change_vartype(vartype, inplace=False)
        ss = SAMPLER.sample(bqm, seed=3)
        assert len(ss) == 512 and ss.vartype is vartype and set(ss.variables) == set(bqm.variables)
        dimod.testing.assert_sampleset_energies(ss, bqm)
        assert set(ss.info) >= {"seed", "beta", "ladder", "swap_rate", "round_trip_rate", "log_z", "log_z_se"}
    a, b = (SAMPLER.sample(bqm, seed=5) for _ in range(2))
    np.testing.assert_array_equal(a.record.sample, b.record.sample)
    with pytest.raises(IsingInputError):
        SAMPLER.sample(bqm, beta=0.0)
    with pytest.raises(IsingInputError):
        PTSampler(num_replicas=1)


def test_pt_sampler_samples_at_its_beta():
    """Reads are independent chains: the mean spin over 512 reads within 4 SE of brute force."""
    bqm = dimod.BQM({0: 0.4, 1: -0.2, 2: 0.0}, {(0, 1): -1.0, (1, 2): 0.8}, 0.0, dimod.SPIN)
    ss = SAMPLER.sample(bqm, beta=1.3, seed=1)
    h = np.array([-0.4, 0.2, 0.0])  # SPIN view: h = -linear, J = -quadratic
    J = np.zeros((3, 3))
    J[0, 1] = J[1, 0] = 1.0
    J[1, 2] = J[2, 1] = -0.8
    ref = brute_force(h, J, 1.3)["mean"]
    s = ss.record.sample[:, [ss.variables.index(v) for v in (0, 1, 2)]].astype(float)
    assert np.all(np.abs(s.mean(0) - ref) <= 4 * np.sqrt((1 - ref**2) / 512)), (s.mean(0), ref)


class _ConformancePT(PTSampler):
    """PTSampler with the small settings above, as a class: dimod names its tests by the
    sampler's repr, and an instance's repr holds its address, which differs between xdist
    workers (they must collect the same test ids)."""

    def __init__(self):
        super().__init__(num_reads=512, num_sweeps=50, num_replicas=4)


@dimod.testing.load_sampler_bqm_tests(_ConformancePT)
class TestPTSamplerConformance(unittest.TestCase):
    """dimod's shipped Sampler tests (empty, 1-3 variable BQMs, SPIN/BINARY, 3 BQM classes)."""


# ---- the ladder sized to the model, Houdayer's cluster move ------------------------------------

def test_houdayer_move_keeps_the_pair_energy():
    """The kernel alone on a 6×6 open ±J lattice, 12 random pairs: the flipped sites are one
    whole connected component of the ``q = -1`` sites (networkx), flipped in both replicas
    (after the whole-replica flip where most sites disagree); each replica's energy change is
    the returned ``delta_a`` and the pair's sum is unchanged (float64 energies here)."""
    import networkx as nx

    g = lattice((6, 6))
    rng = np.random.default_rng(3)
    w = rng.choice([-1.0, 1.0], g.E)
    Jd = np.asarray(SparseCouplings(g, w).to_dense(), np.float64)
    a, b = (rng.choice([-1.0, 1.0], (36, 12)) for _ in range(2))  # node-major [n, pairs]
    b[:, 0] = a[:, 0]  # a pair that agrees everywhere: no move
    a2, b2, info = jax.jit(houdayer_move, static_argnums=4)(jax.random.key(0), jnp.asarray(a, jnp.float32),
                                                            jnp.asarray(b, jnp.float32), jnp.asarray(w, jnp.float32), g)
    a2, b2 = np.asarray(a2, np.float64), np.asarray(b2, np.float64)
    E = lambda s: -0.5 * np.einsum("im,ij,jm->m", s, Jd, s)
    np.testing.assert_allclose(E(a2) + E(b2), E(a) + E(b), atol=1e-9)
    np.testing.assert_allclose(E(a2) - E(a), np.asarray(info.delta_a), atol=1e-4)
    G = g.to_networkx()
    for m in range(12):
        bb = -b[:, m] if np.sum(a[:, m] * b[:, m] < 0) > 18 else b[:, m]
        neg = np.flatnonzero(a[:, m] * bb < 0)
        flipped = np.flatnonzero(a2[:, m] != a[:, m])
        np.testing.assert_array_equal(flipped, np.flatnonzero(b2[:, m] != bb))
        assert info.size[m] == flipped.size
        if neg.size == 0:
            assert flipped.size == 0
            continue
        comps = [sorted(c) for c in nx.connected_components(G.subgraph(neg.tolist()))]
        assert flipped.tolist() in comps, (m, flipped, comps)
    assert int(info.size[0]) == 0


ZERO_FIELD = (4, 12, 3.0, 2)  # rows, cols, β, seed of the zero-field strip below


def _zero_field_strip():
    rows, cols, beta, seed = ZERO_FIELD
    _, J = strip_model(rows, cols, seed=seed, h_scale=0.0)
    return J, IsingModel(jnp.zeros(rows * cols, jnp.float32), jnp.asarray(J, jnp.float32), beta).sparsified()


def _independent_spins(beta):
    """48 uncoupled spins with ``h = 1`` on the zero-field strip's graph (all couplings 0, so
    one pilot program serves both tests): ``σ(β) = √48 sech β``, so the barrier is ``Λ =
    √(48/π) · gd(β)`` (gd the Gudermannian)."""
    J = _zero_field_strip()[1].J
    model = IsingModel(jnp.ones(48, jnp.float32), J.with_weights(jnp.zeros_like(J.weights)), beta)
    return model, np.sqrt(48 / np.pi) * 2 * np.arctan(np.tanh(beta / 2))


def test_ladder_size_follows_the_barrier():
    """``num_replicas=None`` sizes the ladder from a pilot run's energy spread: on independent
    spins (closed form above) ``R = ⌈Λ / ½⌉ + 1`` within one rung; the trapezoid of the exact
    ``σ`` on the pilot's grid gives ``Λ`` to 1%."""
    model, lam = _independent_spins(3.0)
    grid = np.linspace(3.0, 0.0, PILOT_RUNGS)
    assert float(barrier(grid, np.sqrt(48) / np.cosh(grid))) == pytest.approx(lam, rel=0.01)
    want = int(np.ceil(lam / TARGET_REJECT)) + 1
    assert replicas_for_barrier(lam) == want
    eng = ParallelTempering().prepared(model)
    assert abs(eng.num_replicas - want) <= 1, (eng.num_replicas, want, lam)
    assert eng.houdayer is False  # a field: no cluster move
    assert replicas_for_barrier(1e6) == 128 and replicas_for_barrier(0.1) == 4


def test_zero_field_strip_sized_ladder_and_houdayer_against_transfer_matrix():
    """A zero-field 4×12 ±J strip at β = 3 (sparse couplings, colour-class sweeps; frozen for
    single-spin moves) with the ladder sized by the pilot and Houdayer's move on by default:
    every marginal (exactly 0) and ⟨E⟩ within 4 MCSE (ESS computed here), log Z within 4 SE of the transfer matrix, and
    the adapted swap rates near ``1 - TARGET_REJECT``. (Without the engine's diagnostics:
    half the compile time; the test computes its own ESS.)"""
    rows, cols, beta, _ = ZERO_FIELD
    J, model = _zero_field_strip()
    mean, E, log_z = transfer_exact(np.zeros(rows * cols), J, beta, rows, cols)
    eng = ParallelTempering(num_warmup=300, num_samples=2000, diagnostics=False, keep_samples=True)
    prep = eng.prepared(model)
    assert prep.houdayer is True and prep.cluster_graph == model.J.graph
    out = eng.marginals(model, key=jax.random.key(5))
    R = out.info["ladder"].shape[-1]
    assert R == prep.num_replicas and 4 <= R <= 128
    check_marginals_and_energy(out, 4, mean, E)
    se = float(out.info["log_z_se"])
    assert 0 < se < 0.5 and abs(float(out.log_z) - log_z) <= 4 * se, (float(out.log_z), log_z, se)
    sw = np.asarray(out.info["swap_rate"])
    assert sw.min() > 0.2 and abs(sw.mean() - (1 - TARGET_REJECT)) < 0.2, sw
    assert float(out.info["round_trip_rate"]) * 2000 >= 20  # round trips per chain
    assert out.corr is None and out.info["energy"].shape == (4, 2000)  # sparse: no dense correlations


@pytest.mark.parametrize("config,match", [(dict(houdayer=True, num_chains=3), "even"),
                                          (dict(houdayer=1.5), "houdayer")])
def test_houdayer_settings_are_checked(config, match):
    with pytest.raises((IsingInputError, IsingTypeError), match=match):
        ParallelTempering(**config)


def test_houdayer_refused_on_a_model_with_fields():
    _, _, model = _strip(2, 2, 1.0)
    with pytest.raises(IsingInputError, match="without fields"):
        ParallelTempering(houdayer=True, num_replicas=4).prepared(model)


def test_pilot_runs_once_per_model_content(monkeypatch):
    """The sizing pilot (a fixed key, so its answer is the model's) runs once per model content:
    a second call on an equal model reuses its size, a changed field runs it again. The pilot
    itself is replaced by a stand-in that counts its calls (no compile)."""
    from isingattn.inference.mcmc import pt as pt_mod

    calls = []

    def fake_pilot(key, h, J, beta, active, shape, **kw):
        calls.append(1)
        G = kw["num_replicas"]
        return {"ladder": np.linspace(1.0, 0.0, G), "energy_sd": np.full(G, 3.0)}  # Λ = 3/√π

    monkeypatch.setattr(pt_mod, "pilot_run", fake_pilot)
    monkeypatch.setattr(pt_mod, "_PILOT_SIZES", {})
    h, J = np.zeros(6), np.triu(np.ones((6, 6)), 1)
    engine = ParallelTempering()
    R = engine._sized(IsingModel(h, J + J.T, beta=1.0))
    assert R == replicas_for_barrier(3.0 / np.sqrt(np.pi)) and len(calls) == 1
    assert engine._sized(IsingModel(h.copy(), J + J.T, beta=1.0)) == R and len(calls) == 1  # equal content
    engine._sized(IsingModel(h + 0.1, J + J.T, beta=1.0))
    engine._sized(IsingModel(h, J + J.T, beta=2.0))
    assert len(calls) == 3  # a changed field, a changed β: each its own pilot
