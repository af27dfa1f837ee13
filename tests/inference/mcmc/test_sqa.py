"""Path-integral SQA (isingattn.inference.mcmc.sqa) against independent references.

* The kernel at fixed Γ against the Trotter weight enumerated over all ``2^(nP)`` ring
  configurations (float64): replica magnetizations, ring correlations and spatial
  correlations, with and without global moves, for an even and an odd ring.
* ``mode="thermal"`` against ``brute_force`` (exact Boltzmann at β) on dense and chain
  models.
* The engine's sample gradient against Exact's autodiff gradient (slow).
* ``SQASampler`` against dimod's shipped conformance tests, seeds and reads.
* ``mode="anneal"`` against openjij's SQASampler on ground-state search (slow).

Tolerances are 4 Monte Carlo standard errors with the standard error from the effective
sample size over reads (numpyro's estimator); reads are independent chains, so their
ESS is close to the number of reads. Compilation dominates the fast tests, so each test
compiles one jitted wrapper and batches its cases (β and model values are traced).
"""

from functools import partial
import unittest

import dimod
import dimod.testing
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from numpyro.diagnostics import effective_sample_size

import isingattn
from isingattn import IsingInputError, IsingModel, IsingTypeError
from isingattn.energy import energy
from isingattn.engine import ConvergenceWarning
from isingattn.inference.exact import Exact
from isingattn.inference.mcmc.sqa import SQA
from isingattn.inference.dimod import SQASampler
from isingattn.inference.mcmc.sqa_kernel import sqa_init, sqa_sweep, trotter_coupling
from isingattn.testing import all_spins, brute_force
from isingattn.instances import random_model


def mcse(x):
    """Monte Carlo standard error of the mean over axis 0 (reads), ESS over reads."""
    x = np.asarray(x, np.float64)
    flat = x.reshape(x.shape[0], -1)
    sd = flat.std(0, ddof=1)
    var = sd > 0  # the ESS of a constant statistic is undefined (0/0); its SE is 0
    ess = np.ones_like(sd)
    ess[var] = np.asarray(effective_sample_size(flat[None][..., var]))  # reads as one chain: [1, R, m]
    se = sd / np.sqrt(np.maximum(ess, 1.0))
    return se.reshape(x.shape[1:])


def assert_within_4se(samples, ref, what):
    """samples [R, ...] (per-read statistic), ref [...]: |mean - ref| ≤ 4 MCSE."""
    est, se = np.asarray(samples).mean(0), mcse(samples)
    err = np.abs(est - ref)
    # a statistic that is constant in every read (e.g. s_i² = 1) has se = 0 and must match exactly
    assert np.all(err <= 4 * se + 1e-12), (what, float(err.max()), float((err / np.maximum(se, 1e-300)).max()))


# ---- the kernel at fixed Γ against the enumerated Trotter weight ---------------------------------


def trotter_reference(h, J, beta, gamma, P):
    """Exact moments of exp[-(β/P) Σ_k E(s^k) + K Σ_k Σ_i s_i^k s_i^{k+1}] by enumeration."""
    n = len(h)
    S = all_spins(n * P).reshape(-1, P, n)  # [2^(nP), P, n]
    K = -0.5 * np.log(np.tanh(beta * gamma / P))
    E = np.asarray(energy(jnp.asarray(h), jnp.asarray(J), jnp.asarray(S)))  # [C, P]
    ring = np.sum(S * np.roll(S, -1, axis=1), axis=(1, 2))
    logw = -beta / P * E.sum(1) + K * ring
    p = np.exp(logw - logw.max())
    p /= p.sum()
    return dict(m=p @ S.mean(1),  # ⟨s_i⟩ averaged over replicas (all equivalent on the ring)
                ring=p @ (S * np.roll(S, -1, axis=1)).mean(1),  # ⟨s_i^k s_i^{k+1}⟩
                pair=np.einsum("c,ckj,ckl->jl", p, S, S) / P)  # ⟨s_j^k s_l^k⟩


@partial(jax.jit, static_argnames=("P", "reads", "sweeps", "global_moves"))
def _fixed_gamma_chains(key, h, J, beta, gamma, *, P, reads, sweeps, global_moves):
    n = h.shape[-1]
    k0, k1 = jax.random.split(key)
    spins = jax.random.rademacher(k0, (reads, P, n), h.dtype)

    def body(st, t):
        st, info = sqa_sweep(jax.random.fold_in(k1, t), st, h, J, beta, gamma, P, global_moves=global_moves)
        return st, info.acceptance_global.mean()

    st, accg = jax.lax.scan(body, sqa_init(spins), jnp.arange(sweeps))
    return st, accg


@pytest.mark.parametrize("P,global_moves", [(4, True), (3, False)])
def test_kernel_samples_the_trotter_weight(P, global_moves):
    rng = np.random.default_rng(3)
    n, beta, gamma, reads = 3, 1.0, 0.6, 3000
    h, J = random_model(rng, n, h_scale=0.7, J_scale=0.8)
    st, accg = _fixed_gamma_chains(jax.random.PRNGKey(P), jnp.asarray(h), jnp.asarray(J), beta, gamma,
                                   P=P, reads=reads, sweeps=60, global_moves=global_moves)
    s = np.asarray(st.spins)  # [R, P, n]: final states of independent chains
    assert (float(accg[-1]) > 0) == global_moves
    ref = trotter_reference(h, J, beta, gamma, P)
    assert_within_4se(s.mean(1), ref["m"], "replica magnetization")
    assert_within_4se((s * np.roll(s, -1, axis=1)).mean(1), ref["ring"], "ring correlation")
    assert_within_4se(np.einsum("rkj,rkl->rjl", s, s) / P, ref["pair"], "pair correlation")


@pytest.mark.parametrize("P", [1, 2, 3, 4])
def test_blocked_sweep_equals_one_spin_at_a_time(P):
    """Given the same noise, the blocked sweep makes exactly the moves of the textbook
    loop over spins (ring colours, then the global move) with fields h + J s from the
    current spins; n = 6 is one full block and a partial one."""
    from isingattn.inference.mcmc.sqa_kernel import _ring_colours, SQAState, sweep_with_noise

    rng = np.random.default_rng(P)
    n, R, beta, gamma = 6, 3, 1.3, 0.7
    h, J = random_model(rng, n, J_scale=0.8)
    s = rng.choice([-1.0, 1.0], size=(R, P, n))
    E1 = rng.exponential(size=(n, P, R))
    Eg = rng.exponential(size=(n, R))
    bp, K = beta / P, float(trotter_coupling(beta, gamma, P))
    new, info = sweep_with_noise(jnp.asarray(np.moveaxis(E1, (0, 1), (-1, -2))), jnp.asarray(Eg.T),
                                 SQAState(jnp.asarray(s)), h, J, beta, gamma, P)
    ref, ns, ng = s.copy(), np.zeros((P, R)), np.zeros(R)
    for r in range(R):
        for i in range(n):
            f = h[i] + ref[r] @ J[:, i]  # [P]
            for c in _ring_colours(P):
                x = ref[r, :, i].copy()
                nb = np.roll(x, 1) + np.roll(x, -1) if P > 1 else np.zeros(P)
                dS = 2 * bp * x * f + np.where(nb == 0, 0.0, 2 * K * x * nb)
                acc = c & (dS < E1[i, :, r])
                ref[r, :, i] = np.where(acc, -x, x)
                ns[:, r] += acc
            if 2 * bp * np.sum(ref[r, :, i] * f) < Eg[i, r]:
                ref[r, :, i] *= -1
                ng[r] += 1
    np.testing.assert_array_equal(np.asarray(new.spins), ref)
    np.testing.assert_allclose(info.acceptance_single, ns.sum(0) / (n * P))
    np.testing.assert_allclose(info.acceptance_global, ng / n)


def test_trotter_coupling_limits():
    beta, P = 1.0, 8
    for g in (1e-6, 0.3, 2.0, 40.0):
        x = beta * g / P
        np.testing.assert_allclose(trotter_coupling(beta, g, P), -0.5 * np.log(np.tanh(x)), rtol=1e-12)
    assert np.isinf(trotter_coupling(beta, 0.0, P))
    assert 0 <= float(trotter_coupling(beta, 1e4, P)) < 1e-300  # free replicas


# ---- thermal mode against exact Boltzmann --------------------------------------------------------

THERMAL = dict(num_sweeps=100, trotter=4, gamma_schedule=("geometric", 3.0, 0.01), num_reads=2000, thermal_sweeps=30)


@partial(jax.jit, static_argnames=("global_moves",))
def _thermal(key, h, J, beta, global_moves=True):
    return SQA(**THERMAL, global_moves=global_moves).marginals(IsingModel(h, J, beta), key=key)


def _thermal_case(beta, global_moves):
    rng = np.random.default_rng(11)
    n = 8
    hs, Js = zip(*[random_model(rng, n, h_scale=0.5, J_scale=0.6, graph=g) for g in ("dense", "chain")])
    h, J = np.stack(hs), np.stack(Js)  # a batch of 2 models
    out = _thermal(jax.random.PRNGKey(int(10 * beta)), jnp.asarray(h), jnp.asarray(J), beta, global_moves)
    assert bool(jnp.all(out.info["converged"])), out.info["rhat_energy"]
    samples = np.asarray(out.samples)  # [2, R, n]
    for b in range(2):
        ref = brute_force(h[b], J[b], beta)
        s = samples[b]
        assert_within_4se(s, ref["mean"], f"mean, model {b}, β={beta}")
        assert_within_4se(np.einsum("rj,rk->rjk", s, s), ref["corr"], f"corr, model {b}, β={beta}")
        np.testing.assert_allclose(out.mean[b], s.mean(0), atol=1e-12)


@pytest.mark.parametrize("beta", [0.5, 1.0])
def test_thermal_mode_matches_exact(beta):
    _thermal_case(beta, True)


@pytest.mark.slow
@pytest.mark.parametrize("beta", [0.5, 1.0])
def test_thermal_mode_without_global_moves_matches_exact(beta):
    _thermal_case(beta, False)


# ---- engine protocol ------------------------------------------------------------------------------

SMALL = dict(num_sweeps=20, trotter=4, num_reads=16, mode="anneal")


def test_engine_batched_masked_jitted_reproducible():
    """Anneal mode through the registry: batch [2, 3] with shared J and a mask, in jit."""
    rng = np.random.default_rng(5)
    n = 5
    h = jnp.asarray(rng.normal(size=(2, 3, n)))
    _, J = random_model(rng, n)
    mask = jnp.asarray(rng.random((2, 3, n)) < 0.7)
    eng = isingattn.inference.get("sqa", **SMALL)
    f = jax.jit(lambda key, h: eng.marginals(IsingModel(h, jnp.asarray(J), 1.0, mask=mask), key=key))
    a = f(jax.random.PRNGKey(0), h)
    b = f(jax.random.PRNGKey(0), h)
    c = f(jax.random.PRNGKey(1), h)
    assert a.mean.shape == (2, 3, n) and a.samples.shape == (2, 3, 16, n)
    assert a.info["energy"].shape == (2, 3, 16) and a.info["acceptance_single"].shape == (2, 3)
    np.testing.assert_array_equal(a.samples, b.samples)
    assert not np.array_equal(a.samples, c.samples)
    m = np.asarray(mask)
    assert np.all(np.asarray(a.mean)[~m] == 0) and np.all(np.asarray(a.samples)[np.broadcast_to(~m[..., None, :], a.samples.shape)] == 0)
    spins = jnp.where(a.samples == 0, 1.0, a.samples)  # inactive spins are reported as 0
    assert set(np.unique(np.asarray(spins))) <= {-1.0, 1.0}
    # the reported energies are the model's energies of the returned (lowest-replica) samples
    E = IsingModel(h[..., None, :], J, mask=mask[..., None, :]).energy(spins)
    np.testing.assert_allclose(a.info["energy"], E, atol=1e-9)


def test_engine_errors():
    m = IsingModel(jnp.zeros(3), jnp.zeros((3, 3)))
    with pytest.raises(ValueError, match="PRNG key"):
        SQA(**SMALL).marginals(m)
    for bad in (dict(mode="sample"), dict(trotter=0), dict(num_reads=2.5), dict(gamma_schedule=("cubic", 1.0, 0.1)),
                dict(gamma_schedule=("geometric", 1.0, 0.0)), dict(gamma_schedule=("linear", 0.1, 1.0)), dict(beta=-1.0),
                dict(thermal_sweeps=-1), dict(gamma_schedule=3.0)):
        with pytest.raises((IsingInputError, IsingTypeError)):
            SQA(**bad)


@pytest.mark.parametrize("dtype", [jnp.float64, jnp.float32])
def test_frozen_reads_are_not_converged(dtype):
    """|J| = 1e3 ferromagnet, small field: each read freezes in a phase at its first tail
    sweep. With one read, its tail energy is one constant, which the split R-hat alone
    scores 1 (converged) even when the phase is the wrong one (brute force: ⟨s⟩ = +0.995).
    64 tail sweeps make the jitted mean exact, as in the case seen. Frozen spins flag it."""
    n = 6
    h, J = 0.5 * np.ones(n), 1e3 * (1 - np.eye(n))
    ref = brute_force(h, J, 1.0)["mean"]
    eng = SQA(num_reads=1, num_sweeps=200, thermal_sweeps=64)
    model = IsingModel(jnp.asarray(h, dtype), jnp.asarray(J, dtype), 1.0)
    for seed in range(3):
        with pytest.warns(ConvergenceWarning, match="kept one value"):
            out = eng.marginals(model, key=jax.random.PRNGKey(seed))
        assert np.all(np.abs(np.asarray(out.mean)) == 1)  # one frozen read: ±1, not an estimate of ref
        assert not bool(out.info["converged"]) and np.isnan(float(out.info["rhat_energy"]))
        assert np.asarray(out.info["frozen"]).all()
    assert np.all(ref > 0.99)


@pytest.mark.parametrize("thermal_sweeps", [50, 64])
def test_constant_energy_that_is_explained_is_converged(thermal_sweeps):
    """No false alarm: spins pinned by |h| = 1e3 (brute force ⟨s⟩ = 1 to 1e-800) and a
    zero model, whose reads move freely at one energy, are converged with R-hat 1
    (before, 50 sweeps gave inf or 1 depending on how XLA rounded a mean of constants)."""
    n = 5
    for h, J in [(1e3 * np.ones(n), np.zeros((n, n))), (np.zeros(n), np.zeros((n, n)))]:
        out = SQA(num_reads=8, num_sweeps=100, thermal_sweeps=thermal_sweeps).marginals(
            IsingModel(jnp.asarray(h), jnp.asarray(J), 1.0), key=jax.random.PRNGKey(0))
        assert bool(out.info["converged"]) and float(out.info["rhat_energy"]) == 1.0
        assert not np.asarray(out.info["frozen"]).any()
        if h[0]:
            np.testing.assert_array_equal(out.mean, brute_force(h, J, 1.0)["mean"])


def test_engine_warns_and_flags_an_unconverged_tail(monkeypatch):
    """The warning plumbing, with the sampler stubbed out (no compilation)."""
    import isingattn.inference.mcmc.sqa as sqa_mod

    def stub(key, h, J, beta, **config):
        batch = jnp.broadcast_shapes(h.shape[:-1], J.shape[:-2])
        s = jnp.ones(batch + (config["num_reads"], h.shape[-1]), h.dtype)
        return s, {"rhat_energy": jnp.full(batch, 1.5), "converged": jnp.zeros(batch, bool)}

    monkeypatch.setattr(sqa_mod, "sqa_sample", stub)
    m = IsingModel(jnp.zeros((2, 3)), jnp.zeros((3, 3)))
    with pytest.warns(ConvergenceWarning, match="R-hat"):
        out = SQA(num_reads=4).marginals(m, key=jax.random.PRNGKey(0))
    assert out.info["converged"].shape == (2,) and not bool(out.info["converged"].any())
    np.testing.assert_array_equal(out.mean, 1.0)


def test_trains_inside_boltzmann_attention():
    """jit(value_and_grad) through boltzmann_attention with the SQA engine: the J-gradient is
    symmetric and nonzero (its values against Exact: test_conformance, per engine)."""
    rng = np.random.default_rng(2)
    B, H, T, d = 2, 2, 4, 3
    q, k, v = (jnp.asarray(rng.normal(size=(B, H, T, d))) for _ in range(3))
    J = jnp.asarray(rng.normal(size=(H, T, T)) * 0.3)
    J = (J + jnp.swapaxes(J, -1, -2)) / 2 * (1 - jnp.eye(T))
    eng = SQA(num_sweeps=10, trotter=2, num_reads=32, thermal_sweeps=8)

    def loss(J, q, key):
        out, w = isingattn.boltzmann_attention(q, k, v, J, engine=eng, key=key)
        return jnp.sum(out**2)

    val, (gJ, gq) = jax.jit(jax.value_and_grad(loss, argnums=(0, 1)))(J, q, jax.random.PRNGKey(0))
    np.testing.assert_allclose(gJ, np.swapaxes(gJ, -1, -2), atol=1e-12)  # symmetric couplings, symmetric gradient
    assert np.any(np.asarray(gJ) != 0)


@pytest.mark.slow
def test_sample_gradient_matches_exact_within_standard_error():
    rng = np.random.default_rng(7)
    n, beta, reps = 5, 0.8, 10
    h, J = (jnp.asarray(x) for x in random_model(rng, n, h_scale=0.5, J_scale=0.6))
    c = jnp.asarray(rng.normal(size=n))
    eng = SQA(num_sweeps=100, trotter=4, gamma_schedule=("geometric", 3.0, 0.01), num_reads=2000, thermal_sweeps=30)
    S = eng.num_reads

    def loss(h, J, beta, key=None, engine=Exact()):
        return jnp.sum(c * engine.marginals(IsingModel(h, J, beta), key=key).mean)

    exact = jax.grad(loss, argnums=(0, 1, 2))(h, J, beta)
    grad = jax.jit(jax.grad(lambda h, J, beta, key: loss(h, J, beta, key, eng), argnums=(0, 1, 2)))
    reps = [grad(h, J, beta, jax.random.PRNGKey(100 + r)) for r in range(reps)]
    for k, ex in enumerate(exact):
        est = np.stack([np.asarray(r[k]) for r in reps])
        assert np.all(np.isfinite(est))
        # the fluctuation estimator's covariance uses the sample mean: E[est] = (S-1)/S · exact
        target = np.asarray(ex) * (S - 1) / S
        se = est.std(0, ddof=1) / np.sqrt(len(est))
        assert np.all(np.abs(est.mean(0) - target) <= 4 * se + 1e-12), (k, np.abs(est.mean(0) - target).max())


# ---- dimod sampler ---------------------------------------------------------------------------------


@dimod.testing.load_sampler_bqm_tests(SQASampler)
class TestSQASamplerConformance(unittest.TestCase):
    """dimod's shipped Sampler tests (empty, 1-3 variable BQMs, SPIN/BINARY, 3 BQM classes)."""


def test_sampler_seed_reproducible_reads_distinct():
    bqm = dimod.BQM({i: 0.0 for i in range(16)}, {}, 0.0, "SPIN")  # 2^16 equally likely states
    sampler = SQASampler()  # the defaults: shares its compilation with the conformance tests
    a, b, c = (sampler.sample(bqm, seed=s) for s in (3, 3, 4))
    np.testing.assert_array_equal(a.record.sample, b.record.sample)
    assert not np.array_equal(a.record.sample, c.record.sample)
    assert len({tuple(r) for r in a.record.sample}) == len(a) == 10  # every read distinct
    d = sampler.sample(bqm)  # seed=None draws one and reports it
    np.testing.assert_array_equal(sampler.sample(bqm, seed=d.info["seed"]).record.sample, d.record.sample)
    assert set(sampler.parameters) >= {"num_reads", "num_sweeps", "trotter", "beta", "gamma_schedule", "mode", "seed"}
    assert sampler.properties["modes"] == ("anneal", "thermal")
    with pytest.raises(IsingInputError):
        sampler.sample(bqm, seed=-1)
    with pytest.raises(IsingInputError):
        sampler.sample(bqm, beta=0.0)
    with pytest.warns(dimod.exceptions.SamplerUnknownArgWarning):
        sampler.sample(bqm, seed=1, not_a_parameter=3)


def test_sampler_binary_and_labels():
    Q = {("a", "a"): -1.0, ("b", "b"): 2.0, ("a", "b"): -3.0, (("x",), "a"): 0.5}
    ss = SQASampler().sample_qubo(Q, seed=0, beta=5.0)  # β is traced: no new compilation
    assert ss.vartype is dimod.BINARY and set(ss.variables) == {"a", "b", ("x",)}
    dimod.testing.assert_sampleset_energies(ss, dimod.BQM.from_qubo(Q))
    assert ss.first.energy == min(dimod.ExactSolver().sample_qubo(Q).record.energy)


# ---- ground states against openjij (a small version of benchmarks/sqa_groundstate.py) --------------


@pytest.mark.slow
def test_anneal_finds_ground_states_at_least_as_often_as_openjij():
    openjij = pytest.importorskip("openjij")
    import importlib.util, pathlib

    path = pathlib.Path(__file__).resolve().parents[3] / "benchmarks" / "sqa_groundstate.py"
    spec = importlib.util.spec_from_file_location("sqa_groundstate", path)
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    rows = bench.compare(n=16, instances=4, num_reads=64, num_sweeps=200, trotter=8, seed=1)
    ours = np.array([r["ours"] for r in rows])
    oj = np.array([r["openjij"] for r in rows])
    R = 64
    # success rates are binomial: SE of the difference of the two means over instances
    se = np.sqrt(np.sum(ours * (1 - ours) / R + oj * (1 - oj) / R)) / len(rows)
    assert ours.mean() >= oj.mean() - 4 * max(se, 1.0 / (R * len(rows))), (ours, oj)


def test_sampler_runs_the_public_kernel():
    """sqa_sample is its public pure kernel in a loop: the same anneal replayed with
    sqa_sweep(fold_in(key, t), ...) from the same initial spins ends in the same state."""
    from isingattn import prng
    from isingattn.inference.mcmc.sqa_kernel import gamma_values
    from isingattn.inference.mcmc.sqa import sqa_sample

    rng = np.random.default_rng(7)
    n, P, R, T = 7, 3, 4, 12
    h, J = (jnp.asarray(x) for x in random_model(rng, n, J_scale=0.8))
    key = jax.random.PRNGKey(5)
    schedule = ("linear", 2.0, 0.0)
    samples, _ = sqa_sample(key, h, J, 1.3, num_reads=R, trotter=P, num_sweeps=T, gamma_schedule=schedule,
                            mode="thermal", thermal_sweeps=0)
    k_init, k_anneal, _ = jax.random.split(key, 3)
    s = jnp.where(prng.uniform(k_init, (n, P, R), h.dtype) < 0.5, -1.0, 1.0)
    state = sqa_init(jnp.moveaxis(s, (0, 1), (-1, -2)))  # [R, P, n]
    for t, g in enumerate(gamma_values(schedule, T)):
        state, _ = sqa_sweep(jax.random.fold_in(k_anneal, t), state, h, J, 1.3, g)
    np.testing.assert_array_equal(samples, state.spins[:, 0])  # thermal mode keeps replica 0
