"""Swendsen–Wang (engine "swendsen-wang", its kernel and its dimod sampler) against
independent references only: brute-force float64 marginals of small models, and Kaufman's
exact energy of finite periodic lattices at K_c (isingattn.onsager). Standard errors come
from ESS values this file computes with ArviZ from the returned samples and energy trace,
never from the engine's own estimates. Tolerance: 4 SE.
"""

import unittest
import warnings

import arviz as az
import dimod
import dimod.testing
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from isingattn import IsingModel
from isingattn.engine import get, to_spec, from_spec
from isingattn.errors import IsingInputError
from isingattn.graphs import lattice
from isingattn.inference.dimod.sw_sampler import SwendsenWangSampler, ferromagnetic_gauge
from isingattn.inference.mcmc.swendsen_wang import SwendsenWang
from isingattn.inference.mcmc.swendsen_wang_kernel import SwendsenWangState, swendsen_wang_sweep
from isingattn.onsager import K_C, torus_energy
from isingattn.sparse import SparseCouplings, from_dense
from isingattn.testing import brute_force_batch


def _by_chain(samples, C):
    """Engine samples [*batch, C*D, n] -> [C, D, *batch, n]."""
    s = np.asarray(samples, np.float64)
    *batch, S, n = s.shape
    s = s.reshape(tuple(batch) + (C, S // C, n))
    return np.moveaxis(s, (-3, -2), (0, 1))


def _ess(x):
    """ArviZ's ESS of the mean, x [C, D, ...] -> [...] (NaN-free: constant series get C·D)."""
    C, D = x.shape[:2]
    flat = x.reshape(C, D, -1)
    out = np.empty(flat.shape[2])
    for k in range(flat.shape[2]):
        series = flat[:, :, k]
        out[k] = C * D if np.all(series == series[0, 0]) else float(az.ess(series, method="mean"))
    return out.reshape(x.shape[2:])


def _assert_means(m, exact, C):
    """|mean - exact| ≤ 4 SE for every spin, SE = std / sqrt(ESS) with ArviZ's ESS."""
    x = _by_chain(m.samples, C)
    std = x.reshape((-1,) + x.shape[2:]).std(0)
    se = std / np.sqrt(_ess(x))
    err = np.abs(np.asarray(m.mean, np.float64) - exact)
    assert np.all(err <= 4 * se + 1e-12), (err.max(), (err / np.maximum(se, 1e-300)).max())


def _ferro(rng, n, scale):
    J = np.triu(np.abs(rng.normal(0, scale, (n, n))), 1)
    return J + J.T


# ---- small models against brute force --------------------------------------------------------------


def test_dense_batch_with_fields_and_mask_vs_brute_force():
    rng = np.random.default_rng(0)
    n, C = 10, 4
    J = _ferro(rng, n, 0.25)
    h = rng.normal(0, 0.4, (2, n))  # fields of both signs: ghost bonds of both signs
    mask = np.ones((2, n), bool)
    mask[1, 3] = False
    model = IsingModel(jnp.asarray(h, jnp.float32), jnp.asarray(J, jnp.float32), 1.0, mask=jnp.asarray(mask))
    m = SwendsenWang(num_warmup=50, num_samples=2000, num_chains=C).marginals(model, key=jax.random.key(0))
    ref = brute_force_batch(h, J, 1.0, mask)
    _assert_means(m, ref["mean"], C)
    assert float(m.mean[1, 3]) == 0.0 and bool(np.all(np.asarray(m.info["converged"])))
    # the energy trace is the energy of the kept draws (masked spins are 0 in the samples)
    E = np.asarray(m.info["energy"])  # [*batch, C, D]
    assert E.shape == (2, C, 2000)
    s = np.asarray(m.samples, np.float64)  # [2, C*D, n], chain-major
    want = -np.einsum("bn,bsn->bs", h, s) - 0.5 * np.einsum("bsi,ij,bsj->bs", s, J, s)
    np.testing.assert_allclose(E.reshape(2, -1), want, rtol=1e-5, atol=1e-4)


def test_sparse_lattice_vs_brute_force():
    rng = np.random.default_rng(1)
    n, C = 12, 4
    g = lattice((3, 4), periodic=False)
    J = np.asarray(SparseCouplings(g, jnp.asarray(rng.uniform(0.2, 0.6, g.E), jnp.float32)).to_dense())
    h = rng.normal(0, 0.3, n).astype(np.float32)
    sparse = IsingModel(jnp.asarray(h), from_dense(J), 1.0)  # edges in the order i < j of the dense pairs
    eng = SwendsenWang(num_warmup=50, num_samples=2000, num_chains=C, diagnostics=False)  # the test's own ESS
    m = eng.marginals(sparse, key=jax.random.key(2))
    _assert_means(m, brute_force_batch(h, J, 1.0)["mean"], C)


def test_kernel_under_jit_dense_equals_sparse():
    """The pure kernel keeps ±1 and 0 (masked); a complete graph as an edge list (pairs i < j in
    order) draws the same words as dense J: the same move."""
    rng = np.random.default_rng(3)
    n = 6
    J = jnp.asarray(_ferro(rng, n, 0.5), jnp.float32)
    h = jnp.asarray(rng.normal(0, 0.5, n), jnp.float32)
    s = jnp.asarray(rng.choice([-1.0, 1.0], (3, 5, n)), jnp.float32).at[..., 0].set(0.0)

    @jax.jit
    def both(k, s):
        return (swendsen_wang_sweep(k, SwendsenWangState(s), h, J, 1.0),
                swendsen_wang_sweep(k, SwendsenWangState(s), h, from_dense(np.asarray(J)), 1.0))

    (st, info), (sp, sp_info) = both(jax.random.key(0), s)
    assert st.spins.shape == s.shape and info.flip_rate.shape == (3, 5) and info.num_clusters.shape == (3, 5)
    assert bool(jnp.all(st.spins[..., 0] == 0)) and bool(jnp.all(jnp.abs(st.spins[..., 1:]) == 1))
    np.testing.assert_array_equal(np.asarray(sp.spins), np.asarray(st.spins))
    np.testing.assert_array_equal(np.asarray(sp_info.num_clusters), np.asarray(info.num_clusters))


@pytest.mark.slow
def test_kernel_vmapped_over_keys():
    rng = np.random.default_rng(4)
    n = 6
    J = jnp.asarray(_ferro(rng, n, 0.5), jnp.float32)
    s = jnp.asarray(rng.choice([-1.0, 1.0], (3, n)), jnp.float32)
    keys = jax.random.split(jax.random.key(1), 3)
    vs, info = jax.vmap(lambda k, s: swendsen_wang_sweep(k, SwendsenWangState(s), jnp.zeros(n), J, 1.0))(keys, s)
    assert vs.spins.shape == s.shape and info.rounds.shape == (3,)
    one, _ = swendsen_wang_sweep(keys[1], SwendsenWangState(s[1]), jnp.zeros(n), J, 1.0)
    np.testing.assert_array_equal(np.asarray(vs.spins[1]), np.asarray(one.spins))


# ---- the exact torus at K_c ----------------------------------------------------------------------------


def _torus_energy_check(L, C, draws, warmup, seed):
    g = lattice((L, L), periodic=True)
    model = IsingModel(jnp.zeros(L * L, jnp.float32), SparseCouplings(g, jnp.ones(g.E, jnp.float32)), K_C)
    # diagnostics=False: the test computes its own ESS, and the engine's diagnostics double the compile time
    eng = SwendsenWang(num_warmup=warmup, num_samples=draws, num_chains=C, keep_samples=False, diagnostics=False)
    m = eng.marginals(model, key=jax.random.key(seed))
    E = np.asarray(m.info["energy"], np.float64) / (L * L)  # per spin, J = 1: the units of torus_energy
    assert E.shape == (C, draws)
    ess = float(az.ess(E, method="mean"))
    se = E.std() / np.sqrt(ess)
    exact = float(torus_energy(L, L, K_C))
    assert abs(E.mean() - exact) <= 4 * se, (E.mean(), exact, se, ess)
    # the point of clusters: τ_int(E) = draws / ESS stays small at criticality (measured ~5 at 16², ~9 at
    # 64²; heat-bath Gibbs: ~160 at 64², benchmarks/swendsen_wang.py)
    assert ess > C * draws / 25, ess
    return m


@pytest.mark.run_bound
def test_torus_16_energy_at_kc():
    _torus_energy_check(16, 4, 1000, 50, seed=0)


@pytest.mark.run_bound
@pytest.mark.slow
def test_torus_64_energy_at_kc():
    _torus_energy_check(64, 4, 2000, 100, seed=1)


@pytest.mark.run_bound
@pytest.mark.slow
def test_torus_16_dense_energy_at_kc():
    L = 16
    g = lattice((L, L), periodic=True)
    model = IsingModel(jnp.zeros(L * L), SparseCouplings(g, jnp.ones(g.E)).to_dense(), K_C)
    m = SwendsenWang(num_samples=500, num_chains=4, keep_samples=False, diagnostics=False).marginals(model, key=jax.random.key(5))
    E = np.asarray(m.info["energy"], np.float64) / (L * L)
    se = E.std() / np.sqrt(float(az.ess(E, method="mean")))
    assert abs(E.mean() - float(torus_energy(L, L, K_C))) <= 4 * se


# ---- refusals ---------------------------------------------------------------------------------------


def test_frustrated_model_refused_dense_sparse_and_flagged_under_jit():
    J = jnp.asarray([[0, 1, -1, 0], [1, 0, 1, -2], [-1, 1, 0, 1], [0, -2, 1, 0.0]])
    model = IsingModel(jnp.zeros(4), J, 1.0)
    with pytest.raises(IsingInputError, match="has 2 negative coupling"):
        get("swendsen-wang").marginals(model, key=jax.random.key(0))
    with pytest.raises(IsingInputError, match="has 2 negative coupling"):
        get("swendsen-wang").marginals(model.sparsified(), key=jax.random.key(0))
    # traced couplings cannot be read: a negative one is reported and makes converged False
    eng = SwendsenWang(num_warmup=2, num_samples=8, num_chains=2)
    run = jax.jit(lambda J: eng.marginals(IsingModel(jnp.zeros(4), J, 1.0), key=jax.random.key(0)).info)
    info = run(J)
    assert int(info["negative_couplings"]) == 2 and not bool(info["converged"])


def test_registry_and_settings():
    eng = get("swendsen-wang", num_samples=64, thin=2)
    assert isinstance(eng, SwendsenWang) and from_spec(to_spec(eng)) == eng
    with pytest.raises(IsingInputError, match="draws per chain"):
        SwendsenWang(num_samples=6, thin=2)


# ---- dimod -------------------------------------------------------------------------------------------


@dimod.testing.load_sampler_bqm_tests(SwendsenWangSampler)
class TestSwendsenWangSamplerConformance(unittest.TestCase):
    """dimod's shipped Sampler tests (empty, 1-3 variable BQMs, SPIN/BINARY, 3 BQM classes; the
    3-variable path has an antiferromagnetic coupling, sampled through a gauge)."""


def test_sampler_refuses_frustrated_and_gauges_unfrustrated():
    sampler = SwendsenWangSampler(num_reads=2000, num_sweeps=20)
    with pytest.raises(IsingInputError, match="3 antiferromagnetic coupling"):
        sampler.sample_ising({}, {(0, 1): 1.0, (1, 2): 1.0, (0, 2): 1.0})  # the triangle antiferromagnet
    # an antiferromagnetic chain with a field: brute force over its 8 states
    h, J = {0: 0.3, 1: -0.2, 2: 0.1}, {(0, 1): 0.5, (1, 2): -0.4}
    ss = sampler.sample_ising(h, J, seed=1, beta=1.0)
    assert ss.info["gauge_flips"] > 0
    exact = dimod.ExactSolver().sample_ising(h, J)
    p = np.exp(-exact.record.energy)
    p /= p.sum()
    order = [exact.variables.index(v) for v in ss.variables]
    want = (p[:, None] * exact.record.sample[:, order]).sum(0)
    got = ss.record.sample.mean(0)  # independent reads: SE = std / sqrt(reads)
    se = ss.record.sample.std(0) / np.sqrt(len(ss))
    assert np.all(np.abs(got - want) <= 4 * se), (got, want)
    tau, frustrated = ferromagnetic_gauge(3, np.array([[0, 1], [1, 2], [0, 2]]), np.array([-1.0, -1.0, 1.0]))
    assert frustrated == 0 and tau[0] * tau[1] == -1 and tau[1] * tau[2] == -1
