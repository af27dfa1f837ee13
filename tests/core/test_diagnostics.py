"""isingattn.diagnostics: the one set of MCMC diagnostics that Gibbs and SQA share,
against numpyro's numpy estimators (an independent implementation)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from numpyro.diagnostics import effective_sample_size as np_ess
from numpyro.diagnostics import split_gelman_rubin as np_rhat

from isingattn import diagnostics as D
from isingattn.errors import IsingInputError


def test_gibbs_and_sqa_use_the_one_diagnostics_module():
    from _layout import definers

    assert definers("split_gelman_rubin") == ["isingattn/diagnostics.py"]
    assert definers("effective_sample_size") == ["isingattn/diagnostics.py"]
    assert definers("_split_rhat") == []


@pytest.mark.parametrize("draws", [1, 2, 3])
def test_too_few_draws_give_nan_for_every_sampler(draws):
    # One convention (was: Gibbs' split R-hat raised for < 4 draws, SQA's gave NaN).
    x = np.random.default_rng(0).normal(size=(4, draws, 3))
    r = np.asarray(D.split_gelman_rubin(x))
    assert r.shape == (3,) and np.isnan(r).all()
    e = np.asarray(D.effective_sample_size(x))
    assert e.shape == (3,) and (np.isnan(e).all() if draws < 2 else np.allclose(e, np_ess(x)))


def test_no_chain_axis_raises():
    with pytest.raises(IsingInputError, match="chains, draws"):
        D.split_gelman_rubin(np.zeros(10))
    with pytest.raises(IsingInputError, match="chains, draws"):
        D.effective_sample_size(np.zeros(10))


def test_mcse_is_std_over_sqrt_numpyro_ess():
    rng = np.random.default_rng(1)
    C, N = 4, 200
    x = np.zeros((C, N, 2))
    e = rng.normal(size=(C, N, 2))
    for t in range(1, N):  # AR(1) chains
        x[:, t] = np.array([0.3, 0.8]) * x[:, t - 1] + e[:, t]
    ess = jax.jit(D.effective_sample_size)(x)
    ref = x.reshape(C * N, 2).std(0) / np.sqrt(np_ess(x))
    np.testing.assert_allclose(np.asarray(D.mcse(x, ess)), ref, rtol=1e-8)


def test_split_rhat_of_reads_as_chains_matches_numpyro_and_known_constants():
    # SQA's use: the energy trace of R reads over T tail sweeps, reads as chains.
    rng = np.random.default_rng(2)
    E = rng.normal(size=(8, 37, 2)).cumsum(1) * 0.1
    const = np.full((8, 37, 1), -3.0)
    x = np.concatenate([E, const, const], -1)
    known = np.array([True, True, True, False])
    r = np.asarray(jax.jit(D.split_gelman_rubin)(x, known))
    np.testing.assert_allclose(r[:2], np_rhat(E), rtol=1e-10)
    assert r[2] == 1.0 and np.isnan(r[3])


def test_field_pinned_is_the_bound_in_its_docstring():
    # spin 0: |h| = 5 > |J| = 0.5 by 4.5, 1 - tanh(4.5) ≈ 2.5e-4 ≤ 1/100; spin 1: |h| < Σ|J|
    h = jnp.array([5.0, 0.1, -2.0])
    J = jnp.array([[0.0, 0.5, 0.0], [0.5, 0.0, 0.3], [0.0, 0.3, 0.0]])
    got = np.asarray(D.field_pinned(h, J, 1.0, 100))
    margin = np.abs(np.asarray(h)) - np.abs(np.asarray(J)).sum(-1)
    ref = (margin > 0) & (1 - np.tanh(margin) <= 1 / 100)
    np.testing.assert_array_equal(got, ref)
    assert got.tolist() == [True, False, False]  # spin 2: margin 1.7, 1 - tanh(1.7) ≈ 0.065 > 0.01
    # an inactive neighbour exerts no field: with spin 1 masked, spin 2's margin is 2.0, not 1.7
    # (1 - tanh(2.0) ≈ 0.036 ≤ 1/20 < 1 - tanh(1.7) ≈ 0.066)
    assert not bool(D.field_pinned(h, J, 1.0, 20)[2])
    assert bool(D.field_pinned(h, J, 1.0, 20, jnp.array([True, False, True]))[2])


# --- spin draws: the packed-count path (what Gibbs runs) against numpyro ---------------


def _spin_chains(rng, C, N, flip):
    """±1 two-state Markov chains ``[C, N, len(flip)]``: each series flips with its own
    probability per draw (small: long autocorrelation, many lags before Geyer's sequence
    ends)."""
    flips = rng.random((C, N, len(flip))) < np.asarray(flip)
    start = rng.choice([-1.0, 1.0], size=(C, 1, len(flip)))
    return start * np.cumprod(np.where(flips, -1.0, 1.0), axis=1)


@pytest.mark.parametrize("C,N", [(1, 5), (1, 300), (4, 4), (3, 31), (4, 33), (2, 64), (5, 97), (64, 100), (4, 1000)])
def test_spin_diagnostics_equal_numpyro(C, N):
    rng = np.random.default_rng(C * 1000 + N)
    x = _spin_chains(rng, C, N, [0.5, 0.3, 0.1, 0.02, 0.7, 0.95])
    rhat, ess, err, const = (np.asarray(v) for v in jax.jit(D.spin_diagnostics)(x))
    constant = (x == x[:1, :1]).all((0, 1))  # short single chains can be (numpyro: NaN; ours: C·N)
    np.testing.assert_array_equal(const, constant)
    assert (ess[constant] == C * N).all() and (err[constant] == 0).all()
    x, rhat, ess, err = x[..., ~constant], rhat[~constant], ess[~constant], err[~constant]
    ref_ess = np_ess(x)
    np.testing.assert_allclose(ess, ref_ess, rtol=1e-10)
    if N >= 4:
        np.testing.assert_allclose(rhat, np_rhat(x), rtol=1e-10)
    with np.errstate(invalid="ignore"):  # flip 0.95 over few draws: numpyro's tau < 0, ESS < 0, MCSE NaN
        ref_err = x.reshape(C * N, -1).std(0) / np.sqrt(ref_ess)
    np.testing.assert_allclose(err, ref_err, rtol=1e-10)


def test_spin_ess_many_lags_and_fft_fallback_equal_numpyro():
    # flip 0.005: Geyer's sequence runs for hundreds of lags (several 32-lag blocks, then,
    # past direct_lags, the FFT); flip 0.3 ends within the first block
    rng = np.random.default_rng(7)
    x = _spin_chains(rng, 4, 2000, [0.005, 0.02, 0.3])
    ref = np_ess(x)
    for lags in (32, 96, 256, 4096):
        np.testing.assert_allclose(np.asarray(jax.jit(lambda x: D.spin_diagnostics(x, direct_lags=lags)[1])(x)),
                                   ref, rtol=1e-10)


def test_spin_diagnostics_float32_within_rounding_of_numpyro():
    rng = np.random.default_rng(3)
    x = _spin_chains(rng, 256, 1000, [0.5, 0.2, 0.05, 0.9]).astype(np.float32)
    rhat, ess, err, _ = jax.jit(D.spin_diagnostics)(x)
    assert ess.dtype == jnp.float32 and rhat.dtype == jnp.float32
    x64 = x.astype(np.float64)
    # float32 arithmetic on exact counts. The antithetic series (flip 0.9, tau ≈ 0.06) amplifies
    # rounding: there the float32 FFT path (effective_sample_size) is off by 6e-5, this one by 3e-5
    np.testing.assert_allclose(np.asarray(ess), np_ess(x64), rtol=1e-4)
    np.testing.assert_allclose(np.asarray(ess)[:3], np_ess(x64)[:3], rtol=5e-6)
    # as users run it (x64 off): C·N = 256000 draws, (C·N)² past int32 (overflowed once)
    with jax.enable_x64(False):
        _, ess32, err32, _ = jax.jit(D.spin_diagnostics)(x)
    np.testing.assert_allclose(np.asarray(ess32), np_ess(x64), rtol=1e-4)
    np.testing.assert_allclose(np.asarray(err32), x64.reshape(-1, 4).std(0) / np.sqrt(np_ess(x64)), rtol=1e-4)
    np.testing.assert_allclose(np.asarray(rhat), np_rhat(x64), rtol=1e-6)


def test_spin_diagnostics_constants_follow_the_one_convention():
    rng = np.random.default_rng(4)
    mixing = _spin_chains(rng, 3, 40, [0.4])
    x = np.concatenate([mixing, np.ones((3, 40, 1)), -np.ones((3, 40, 1)), np.zeros((3, 40, 1))], axis=-1)
    known = np.array([False, True, False, True])
    rhat, ess, err, const = (np.asarray(v) for v in D.spin_diagnostics(x, known))
    g_rhat, g_ess = np.asarray(D.split_gelman_rubin(x, known)), np.asarray(D.effective_sample_size(x, known))
    np.testing.assert_array_equal(const, np.asarray(D.is_constant(x)))
    assert const.tolist() == [False, True, True, True]
    # known constants: R-hat 1, ESS C·N, MCSE 0; an unexplained one (spin 2): NaN
    assert rhat[1] == rhat[3] == 1 and ess[1] == ess[3] == 120 and err[1] == err[3] == 0
    assert np.isnan([rhat[2], ess[2], err[2]]).all()
    np.testing.assert_allclose(rhat, g_rhat, rtol=1e-10)
    np.testing.assert_allclose(ess, g_ess, rtol=1e-10)
    # too few draws: NaN, as the generic estimators
    r, e, _, _ = D.spin_diagnostics(x[:, :3])
    assert np.isnan(np.asarray(r)).all() and np.allclose(np.asarray(e)[0], np_ess(x[:, :3, :1]))
    assert np.isnan(np.asarray(D.spin_diagnostics(x[:, :1])[1])).all()


def test_spin_diagnostics_batch_axes_and_jit_equal_eager():
    rng = np.random.default_rng(5)
    x = _spin_chains(rng, 4, 70, [0.3] * 6).reshape(4, 70, 2, 3)
    eager = D.spin_diagnostics(x)
    jitted = jax.jit(D.spin_diagnostics)(x)
    for a, b in zip(eager, jitted):
        assert a.shape == (2, 3)
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-14)  # XLA may fuse differently
    np.testing.assert_allclose(np.asarray(eager[1]), np_ess(x), rtol=1e-10)


@pytest.mark.parametrize("N", [5, 32, 33, 100])
def test_pack_spins_bits_and_unpack_roundtrip(N):
    # draw-major [N, chains, spins]; bit b of word j is draw 32j + b, the bits past N are 0
    rng = np.random.default_rng(N)
    x = rng.choice([-1.0, 1.0], size=(N, 3, 4))
    x[:, 1, 2] = 0.0  # a masked spin: zeros, read as -1
    W = np.asarray(jax.jit(D.pack_spins)(x)).astype(np.uint64)
    assert W.shape == (-(-N // 32), 3, 4)
    t = np.arange(32 * W.shape[0])
    bits = (W[t // 32] >> (t % 32)[:, None, None].astype(np.uint64)) & 1
    np.testing.assert_array_equal(bits[:N], x > 0)
    assert not bits[N:].any()
    back = np.asarray(D.unpack_spins(jnp.asarray(W.astype(np.uint32)), N, jnp.float64))
    np.testing.assert_array_equal(back, np.where(x == 0, -1.0, x))


def test_packed_diagnostics_in_series_chunks_equal_numpyro(monkeypatch):
    # a million-spin model's diagnostics run SERIES_WORDS // C series at a time (lax.map):
    # with chunks of 2 series, 7 series are 4 chunks, the last one padded
    rng = np.random.default_rng(8)
    x = _spin_chains(rng, 4, 300, [0.005, 0.3, 0.1, 0.5, 0.02, 0.7, 0.2])
    x[:, :, 3] = 1.0  # a constant, known, series inside a chunk
    monkeypatch.setattr(D, "SERIES_WORDS", 8)
    words = D.pack_spins(jnp.moveaxis(jnp.asarray(x), 1, 0))  # [Nw, C, F]
    rhat, ess, err, const = (np.asarray(v) for v in jax.jit(
        lambda w: D.packed_spin_diagnostics(w, 300, dtype=jnp.float64))(words))
    assert const.tolist() == [False, False, False, True, False, False, False]
    moving = ~const
    np.testing.assert_allclose(ess[moving], np_ess(x[..., moving]), rtol=1e-10)
    np.testing.assert_allclose(rhat[moving], np_rhat(x[..., moving]), rtol=1e-10)
    np.testing.assert_allclose(err[moving], x.reshape(1200, -1).std(0)[moving] / np.sqrt(np_ess(x[..., moving])), rtol=1e-10)
    assert ess[3] == 1200 and rhat[3] == 1 and err[3] == 0
