"""MCMC diagnostics in JAX, shared by every sampler (Gibbs, SQA): split R-hat, ESS,
the Monte Carlo standard error, and the rule that says which constant draws need no
mixing. Ports of ``numpyro.diagnostics`` (numpy-only), so they work under ``jit``.
For spin draws (Gibbs), :func:`spin_diagnostics` gives the same estimators from exact
counts on the draws packed 32 to a word, much faster than the FFT path on CPU.

One convention for every sampler. Draws are ``x [C, N, ...]`` (chains, draws, ...).

* Too few draws for the estimator (``N < 4`` for split R-hat, ``N < 2`` for ESS): the
  value is undefined, NaN, and fails every threshold. Fewer than two axes raises.
* A quantity with the same value in every draw of every chain (compared exactly: under
  jit a variance of constants can come out as ±1e-17 instead of 0) is 0/0 in both
  estimators. Where ``known`` (bool ``[...]``, broadcast) says that constant is the right
  answer without any mixing (a masked spin, a spin pinned by its field, see
  :func:`field_pinned`), R-hat is 1 and ESS is ``C·N``; elsewhere both are NaN, since
  chains that never moved say nothing about mixing. ``known=None`` treats every constant
  as known.
"""

from __future__ import annotations

import numpy as np
import jax.numpy as jnp
from jax import lax

from isingattn.errors import IsingInputError
from isingattn.sparse import SparseCouplings

__all__ = ["split_gelman_rubin", "effective_sample_size", "mcse", "is_constant", "field_pinned", "pack_spins",
           "unpack_spins", "spin_diagnostics", "packed_spin_diagnostics"]


def is_constant(x):
    """``x [C, N, ...]`` -> ``[...]``: every draw of every chain equal (tested exactly)."""
    return jnp.all(x == x[:1, :1], axis=(0, 1))


def _check(x, what: str):
    x = jnp.asarray(x)
    if x.ndim < 2:
        raise IsingInputError(f"{what} needs draws x [chains, draws, ...]; got shape {x.shape}.")
    return x


def _chain_variance_stats(x):
    C, N = x.shape[:2]
    var_within = x.var(axis=1, ddof=1).mean(0)
    var_estimator = var_within * (N - 1) / N
    if C > 1:
        var_estimator = var_estimator + x.mean(axis=1).var(axis=0, ddof=1)
    else:
        var_within = var_estimator
    return var_within, var_estimator


def split_gelman_rubin(x, known=None):
    """Split R-hat of ``x [C, N, ...]`` -> ``[...]``; the estimator of
    ``numpyro.diagnostics.split_gelman_rubin``. NaN where ``N < 4`` and for a constant
    that is not ``known`` (module docstring); ``inf`` where the split chains are each
    constant but differ."""
    x = _check(x, "split R-hat")
    if x.shape[1] < 4:
        return jnp.full(x.shape[2:], jnp.nan, x.dtype)
    const = is_constant(x)
    if known is not None:  # an unexplained constant: no R-hat (NaN fails every threshold)
        return jnp.where(const & ~known, jnp.nan, split_gelman_rubin(x))
    half = x.shape[1] // 2
    x = jnp.concatenate([x[:, :half], x[:, -half:]], axis=0)
    var_within, var_estimator = _chain_variance_stats(x)
    rhat = jnp.sqrt(var_estimator / jnp.where(var_within > 0, var_within, 1.0))
    return jnp.where(const, 1.0, jnp.where(var_within > 0, rhat, jnp.inf))


def _fft_next_fast_len(target: int) -> int:
    if target <= 2:
        return target
    while True:
        m = target
        for p in (2, 3, 5):
            while m % p == 0:
                m //= p
        if m == 1:
            return target
        target += 1


def effective_sample_size(x, known=None):
    """ESS of ``x [C, N, ...]`` -> ``[...]``; the estimator of
    ``numpyro.diagnostics.effective_sample_size`` (Geyer's initial monotone sequence on
    the FFT autocovariance, Stan's multi-chain ``rho``). NaN where ``N < 2``; constants as
    in the module docstring (``C·N`` where known, else NaN)."""
    x = _check(x, "ESS")
    if x.shape[1] < 2:
        return jnp.full(x.shape[2:], jnp.nan, x.dtype)
    if known is not None:
        return jnp.where(is_constant(x) & ~known, jnp.nan, effective_sample_size(x))
    return _ess_fft(x)


def _ess_fft(x):
    """The ESS of ``x [C, N ≥ 2, ...]`` with numpyro's estimator, by FFT (constants: ``C·N``)."""
    C, N = x.shape[:2]
    xt = jnp.moveaxis(x, 1, -1)  # [C, ..., N]
    c = xt - xt.mean(-1, keepdims=True)
    M2 = 2 * _fft_next_fast_len(N)
    f = jnp.fft.rfft(c, n=M2, axis=-1)
    # Only the chain average of the autocovariances is used, and the inverse FFT is
    # linear: average the power spectra first (one inverse FFT instead of C).
    power = (jnp.real(f) ** 2 + jnp.imag(f) ** 2).mean(0)
    gamma_mean = jnp.moveaxis(jnp.fft.irfft(power, n=M2, axis=-1)[..., :N] / N, -1, 0)  # [N, ...]
    var_within, var_estimator = _chain_variance_stats(x)
    const = is_constant(x) | (var_estimator <= 0)
    safe = jnp.where(const, 1.0, var_estimator)
    rho = 1.0 - (var_within - gamma_mean) / safe  # [N, ...]
    rho = rho.at[0].set(1.0)
    Rho = rho[:-1:2] + rho[1::2]
    Rho = jnp.concatenate([Rho[:1], lax.cummin(jnp.clip(Rho[1:], 0, None), axis=0)], axis=0)
    tau = -1.0 + 2.0 * Rho.sum(0)
    return jnp.where(const, float(C * N), C * N / tau)


def mcse(x, ess):
    """Monte Carlo standard error of the mean of ``x [C, N, ...]``: ``std / sqrt(ess)``
    over all ``C·N`` draws -> ``[...]`` (0 for a known constant, NaN where ESS is)."""
    x = jnp.asarray(x)
    var = x.reshape((x.shape[0] * x.shape[1],) + x.shape[2:]).var(0)
    return jnp.sqrt(var / ess)


def field_pinned(h, J, beta, num_draws: int, active=None):
    """``[..., n]``: spins pinned by their own field, whose constant draws are the right
    answer without any mixing: ``|h_i| > Σ_k |J_ik|`` (over active ``k``) so strongly that
    ``P(s_i ≠ sign h_i) ≤ (1 - tanh(β(|h_i| - Σ_k |J_ik|))) / 2 ≤ 1 / (2·num_draws)`` in
    every state of the rest. ``active [..., n]`` (bool or None): inactive spins exert no
    field. A caller also checks that the draws have the sign of ``h``."""
    if isinstance(J, SparseCouplings):  # Σ_k |J_ik| over the neighbour table (padding weighs 0)
        W = jnp.abs(J.neighbour_weights())  # [..., n, d]
        coupling = W.sum(-1) if active is None else jnp.einsum("...ik,...ik->...i", W, active.astype(W.dtype)[..., J.graph.nbr])
    else:
        coupling = (jnp.sum(jnp.abs(J), axis=-1) if active is None  # inactive spins (0) exert no field
                    else jnp.einsum("...ik,...k->...i", jnp.abs(J), active.astype(J.dtype)))
    margin = jnp.abs(h) - coupling
    return (margin > 0) & (1 - jnp.tanh(beta * margin) <= 1.0 / num_draws)


def known_constant(h, J, beta, plus, num_draws: int, active=None):
    """``[..., n]``: spins whose constant draws are the right answer without any mixing, the
    one rule of every sampler's ``frozen`` diagnostic: inactive spins (held at 0; ``active``
    None: every spin is active), and spins pinned by their own field (:func:`field_pinned`)
    whose constant draw has the sign of ``h`` (``plus [..., n]``: the draw is +1). Any other
    spin that never changed is frozen: chains that did not move are no evidence of mixing."""
    plus = jnp.asarray(plus)
    inactive = jnp.zeros(plus.shape, bool) if active is None else ~jnp.broadcast_to(active, plus.shape)
    pinned = jnp.broadcast_to(field_pinned(h, J, beta, num_draws, active), plus.shape)
    right_sign = jnp.where(plus, 1.0, -1.0) * jnp.sign(h) > 0
    return inactive | (pinned & right_sign)


# ---------------------------------------------------------------------------------
# Spin draws: the same estimators, from exact counts on draws packed 32 to a word
# ---------------------------------------------------------------------------------
#
# Gibbs' draws are spins: ±1 (or 0 throughout, a masked spin). Every statistic the
# estimators above need is then a count: a chain's sum is 2·(draws at +1) - N, and the
# lag-k sum Σ_t x_t x_{t+k} is (pairs) - 2·(pairs that differ). With each chain's draws
# packed along time into uint32 words, the counts are popcounts of XORs: one pass over
# the draws, then work on 1/32 of them. The ESS counts the lags 32 at a time and stops
# where Geyer's initial monotone sequence of every series has ended (its first pair sum
# ≤ 0: numpyro's sum adds only zeros after it), instead of an FFT of every draw.

WORD = 32  # draws per packed word
DIRECT_LAGS = 256  # lags counted before the ESS falls back to the FFT (a series mixing slower)
_ALL = np.uint32(0xFFFFFFFF)


def _low_bits(count):
    """uint32 words with the lowest ``count`` bits set (int ``count`` in [0, 32])."""
    count = jnp.asarray(count)
    low = (jnp.uint32(1) << jnp.minimum(count, WORD - 1).astype(jnp.uint32)) - 1
    return jnp.where(count >= WORD, _ALL, low)


def pack_spins(x):
    """Spin draws, draw-major ``x [N, ...]`` -> words ``[ceil(N/32), ...]`` uint32: bit ``b``
    of word ``j`` is ``x[32j + b] > 0``; the bits past ``N`` are 0.

    One loop step per word, each reading 32 consecutive draws: in place when the draws
    are stored draw-major, as the Gibbs loop stores them. (As one fused reduction over a
    chains-first view, XLA:CPU reads them strided, far slower.)"""
    N, lanes = x.shape[0], x.shape[1:]
    Nw = -(-N // WORD)
    shift = jnp.arange(WORD, dtype=jnp.uint32).reshape((WORD,) + (1,) * len(lanes))
    if N < WORD:
        return jnp.sum((x > 0).astype(jnp.uint32) << shift[:N], axis=0, dtype=jnp.uint32)[None]

    def word(j, W):
        start = jnp.minimum(j * WORD, N - WORD)  # the last word's slice ends at N: drop its first bits
        bits = (lax.dynamic_slice_in_dim(x, start, WORD, 0) > 0).astype(jnp.uint32) << shift
        packed = jnp.sum(bits, axis=0, dtype=jnp.uint32) >> (j * WORD - start).astype(jnp.uint32)
        return lax.dynamic_update_index_in_dim(W, packed, j, 0)

    return lax.fori_loop(0, Nw, word, jnp.zeros((Nw,) + lanes, jnp.uint32))


def _ones_before(W, cum, p):
    """``[len(p), C, F]`` int32: how many of each chain's first ``p`` draws are +1, for the
    positions ``p`` (int ``[P]``, 0..N). ``cum [Nw + 1, C, F]``: popcounts of whole words,
    cumulated (``cum[j]`` counts words ``< j``)."""
    j = p // WORD
    part = jnp.take(W, jnp.minimum(j, W.shape[0] - 1), axis=0) & _low_bits(p % WORD)[:, None, None]
    return jnp.take(cum, j, axis=0) + lax.population_count(part).astype(jnp.int32)


def unpack_spins(W, N: int, dtype):
    """Inverse of :func:`pack_spins`: words ``[ceil(N/32), ...]`` -> ±1 draws ``[N, ...]``
    of ``dtype`` (a series of zeros, a masked spin, comes back as -1)."""
    bits = (W[:, None] >> jnp.arange(WORD, dtype=jnp.uint32).reshape((WORD,) + (1,) * (W.ndim - 1))) & 1
    return (2 * bits.astype(dtype) - 1).reshape((-1,) + W.shape[1:])[:N]


def _differing_pairs(Wt, q, N: int, C: int):
    """``[32, F]`` int32: for the lags ``k = 32q + r`` (r = 0..31), the pairs ``(t, t + k)``
    of one chain whose draws differ, counted over ``t`` and the ``C`` chains. ``Wt [Nw + q_max
    + 1, C·F]``: the packed words, word-major, followed by zero words (so that words ``j + q +
    1`` exist). One word at a time, all 32 lags and every chain and series in parallel:
    XLA:CPU runs this many times faster than one fused reduction over words and chains."""
    Nw = -(-N // WORD)
    r = jnp.arange(WORD, dtype=jnp.uint32)[:, None]
    k = WORD * q + jnp.arange(WORD)

    def word(j, count):
        a, b = Wt[j + q][None], Wt[j + q + 1][None]
        later = jnp.where(r == 0, a, (a >> r) | (b << (WORD - r)))  # bit b: draw 32j + b + k
        valid = _low_bits(jnp.clip(N - k - WORD * j, 0, WORD))[:, None]  # t + k < N
        differ = lax.population_count((Wt[j][None] ^ later) & valid).astype(jnp.int32)
        return count + differ.reshape(WORD, C, -1).sum(1, dtype=jnp.int32)

    # summed over the chains word by word: the loop carries [32, F], not [32, C·F] (a fused
    # reduction that stays in cache; far faster at C = 16, F = 4096)
    return lax.fori_loop(0, Nw, word, jnp.zeros((WORD, Wt.shape[1] // C), jnp.int32))


def _weighted_ones_before(W, cum, weights):
    """``[32·Nw + 1, F]``: ``Σ_c weights[c] · (+1 draws among chain c's first p draws)`` for
    every position ``p = 0..32·Nw``. ``W [Nw, C, F]`` the packed words, ``cum`` as in
    :func:`_ones_before`, ``weights [C, F]`` float. One word and one chain at a time, the
    word's 32 positions at once (a float sum over the chain axis of ``[32, C, F]`` is 100x
    slower on XLA:CPU than this loop)."""
    Nw, C, F = W.shape
    low = _low_bits(jnp.arange(WORD))[:, None]  # position 32j + b: the word's lowest b bits

    def word(j, Q):
        def chain(c, acc):
            ones = cum[j, c][None] + lax.population_count(W[j, c][None] & low).astype(jnp.int32)  # [32, F]
            return acc + weights[c] * ones.astype(weights.dtype)

        row = lax.fori_loop(0, C, chain, jnp.zeros((WORD, F), weights.dtype))
        return lax.dynamic_update_slice_in_dim(Q, row, j * WORD, 0)

    Q = lax.fori_loop(0, Nw, word, jnp.zeros((Nw * WORD + 1, F), weights.dtype))
    return Q.at[-1].set(jnp.sum(weights * cum[-1].astype(weights.dtype), axis=0))


def _spin_moments(ones, n: int, dt):
    """Chain means ``m`` and ``1 - m²`` of ±1 draws from the counts of +1 among ``n``:
    ``1 - m² = 4 o (n - o) / n²``, without the cancellation of ``1 - m²`` in floats."""
    o = ones.astype(dt)
    return (2 * o - n) / n, 4 * o * (n - o) / (float(n) * n)  # float: n² overflows int32 for n = C·N


def _spin_variance_stats(means, one_minus_m2, n: int):
    """:func:`_chain_variance_stats` of ±1 draws from their chain means ``[C, F]`` alone
    (a chain's ``Σ (x - m)² = n (1 - m²)``)."""
    C = means.shape[0]
    var_within = (n * one_minus_m2 / (n - 1)).mean(0)
    var_estimator = var_within * (n - 1) / n
    if C > 1:
        var_estimator = var_estimator + means.var(axis=0, ddof=1)
    else:
        var_within = var_estimator
    return var_within, var_estimator


def spin_diagnostics(x, known=None, *, direct_lags: int = DIRECT_LAGS, words=None):
    """Split R-hat, ESS, MCSE and constancy of spin draws ``x [C, N, ...]``: four ``[...]``
    arrays, the values of ``split_gelman_rubin(x, known)``, ``effective_sample_size(x,
    known)``, ``mcse(x, ess)`` and ``is_constant(x)`` (the same estimators and the same
    conventions), computed from exact counts on the draws packed 32 to a word.

    ``x`` must be spin draws, as Gibbs makes them: every series (one entry of ``...``
    over all draws of all chains) is ±1, or 0 throughout (a masked spin). That is not
    checked; other values give wrong results.

    The ESS sums the autocovariances 32 lags at a time, until every series' initial
    monotone sequence has ended (numpyro's sum adds only zeros after its first pair sum
    ≤ 0); while some series has not ended after ``direct_lags`` lags, it is the FFT of
    :func:`effective_sample_size` instead. The counts are exact; the two paths agree to
    rounding (tests: against numpyro, float64 and float32). ``words [ceil(N/32), C, F]``:
    :func:`pack_spins` of the draws (``F`` the entries of ``...``), if the caller has them
    (then see :func:`packed_spin_diagnostics`, which needs no draws at all).
    """
    x = _check(x, "spin diagnostics")
    C, N = x.shape[:2]
    shape = x.shape[2:]
    dt = x.dtype if jnp.issubdtype(x.dtype, jnp.floating) else jnp.result_type(float)
    W = pack_spins(jnp.moveaxis(x.reshape(C, N, -1), 1, 0)) if words is None else words  # [Nw, C, F]
    known = None if known is None else jnp.broadcast_to(known, shape).reshape(-1)
    out = packed_spin_diagnostics(W, N, known, dtype=dt, direct_lags=direct_lags)
    return tuple(v.reshape(shape) for v in out)


def packed_spin_diagnostics(words, num_draws: int, known=None, *, dtype, direct_lags: int = DIRECT_LAGS):
    """:func:`spin_diagnostics` from the packed draws alone: ``words [ceil(N/32), C, F]``
    uint32 (:func:`pack_spins` of ``C`` chains' ``N = num_draws`` draws of ``F`` series;
    a masked series is all zero bits), ``known [F]`` bool or None. Returns R-hat, ESS,
    MCSE ``[F]`` of ``dtype`` and constancy ``[F]`` bool.

    The series are independent, so they are taken a chunk at a time (``lax.map``): the lag
    counts' ``[32, C, chunk]`` temporaries and the FFT fallback's ``[C, 2N, chunk]`` stay a
    fixed size (``SERIES_WORDS``, ``FFT_ELEMENTS``) however many spins there are (a
    million-spin lattice, or 4000 draws of 65,536 spins: 4 GiB for the fallback unchunked),
    and each chunk's lag loop stops when its own series have ended."""
    Nw, C, F = words.shape
    chunk = max(1, min(SERIES_WORDS // C, FFT_ELEMENTS // (C * 2 * num_draws)))
    run = lambda W: _packed_stats(W, num_draws, dtype, direct_lags)
    if F <= chunk:
        rhat, ess, err, const = run(words)
    else:
        k = -(-F // chunk)
        W = jnp.pad(words, ((0, 0), (0, 0), (0, k * chunk - F)))  # zero series: constant, sliced off
        W = jnp.moveaxis(W.reshape(Nw, C, k, chunk), 2, 0)
        rhat, ess, err, const = (v.reshape(-1)[:F] for v in lax.map(run, W))
    if known is not None:  # an unexplained constant: no R-hat, no ESS (module docstring)
        bad = const & ~known
        rhat, ess, err = (jnp.where(bad, jnp.nan, v) for v in (rhat, ess, err))
    return rhat, ess, err, const


SERIES_WORDS = 2**16  # chains × series per chunk of packed_spin_diagnostics (fastest on CPU)
FFT_ELEMENTS = 2**23  # chains × 2 draws × series per chunk: the FFT fallback's complex [C, 2N, chunk]


def _packed_stats(W, N: int, dt, direct_lags: int):
    """R-hat, ESS, MCSE and constancy ``[F]`` of packed spin draws ``W [Nw, C, F]``."""
    Nw, C, F = W.shape
    pop = lax.population_count(W).astype(jnp.int32)
    cum = jnp.concatenate([jnp.zeros_like(pop[:1]), jnp.cumsum(pop, axis=0)], axis=0)  # [Nw + 1, C, F]
    ones = cum[-1]  # [C, F]
    total = ones.sum(0)
    const = (total == 0) | (total == C * N)
    nan = jnp.full((F,), jnp.nan, dt)

    if N >= 4:  # split R-hat: the chains' halves as 2C chains of N // 2 draws
        half = N // 2
        o = _ones_before(W, cum, jnp.array([half, N - half]))
        split = jnp.concatenate([o[0], ones - o[1]], axis=0)  # +1 draws of each half
        vw, ve = _spin_variance_stats(*_spin_moments(split, half, dt), half)
        rhat = jnp.sqrt(ve / jnp.where(vw > 0, vw, 1.0))
        rhat = jnp.where(const, 1.0, jnp.where(vw > 0, rhat, jnp.inf)).astype(dt)
    else:
        rhat = nan

    if N >= 2:
        means, v = _spin_moments(ones, N, dt)  # [C, F]
        vw, ve = _spin_variance_stats(means, v, N)
        const_e = const | (ve <= 0)
        safe = jnp.where(const_e, 1.0, ve)
        msq, vsum, msum = (means * means).sum(0), v.sum(0), means.sum(0)
        Q = _weighted_ones_before(W, cum, means)  # [32·Nw + 1, F]
        pairs = N // 2  # numpyro's pair sums rho[2j] + rho[2j+1], j < N // 2
        blocks = min(-(-pairs // (WORD // 2)), max(1, direct_lags // WORD))
        Wt = jnp.concatenate([W.reshape(Nw, C * F), jnp.zeros((blocks + 1, C * F), W.dtype)], axis=0)

        def block(state):  # lags 32q .. 32q + 31: pairs 16q .. 16q + 15
            q, run_min, acc = state
            k = WORD * q + jnp.arange(WORD)
            kk = jnp.minimum(k, N)
            differ = _differing_pairs(Wt, q, N, C)  # Σ_c #{t: x_t ≠ x_{t+k}}
            # Σ_t (x_t - m)(x_{t+k} - m) = Σ x_t x_{t+k} - (N + k) m² + m (head + tail), with
            # Σ x_t x_{t+k} = N - k - 2·differ (the large terms cancel in (N - k)(1 - m²)), and
            # over the chains Σ_c m_c (head_c + tail_c) = 2 (Q[k] + Q[N] - Q[N - k]) - 2k Σ_c m_c
            # (head: Σ_{t<k} x_t, tail: Σ_{t≥N-k} x_t)
            kf = kk.astype(dt)[:, None]
            ends = 2 * (jnp.take(Q, kk, axis=0) + Q[N] - jnp.take(Q, N - kk, axis=0)) - 2 * kf * msum
            cov = (N - kf) * vsum - 2 * differ.astype(dt) - 2 * kf * msq + ends
            rho = 1.0 - (vw - cov / (C * N)) / safe
            rho = jnp.where(k[:, None] == 0, 1.0, rho)
            Rho = rho[0::2] + rho[1::2]  # [16, F]
            j = (WORD // 2) * q + jnp.arange(WORD // 2)
            first, valid = (j == 0)[:, None], (j < pairs)[:, None]
            mono = jnp.minimum(run_min, lax.cummin(jnp.where(first, jnp.inf, jnp.clip(Rho, 0, None)), axis=0))
            acc = acc + jnp.sum(jnp.where(valid, jnp.where(first, Rho, mono), 0.0), axis=0)
            return q + 1, mono[-1], acc

        def ended(state):
            q, run_min, _ = state
            return const_e | (run_min <= 0) | ((WORD // 2) * q >= pairs)

        state = (jnp.int32(0), jnp.full((F,), jnp.inf, dt), jnp.zeros((F,), dt))
        state = lax.while_loop(lambda s: (s[0] < blocks) & ~jnp.all(ended(s)), block, state)
        direct = (C * N) / (-1.0 + 2.0 * state[2])
        # the fallback unpacks the words: the draws themselves as an operand of the cond cost
        # XLA a copy of them, every call
        ess = lax.cond(jnp.all(ended(state)), lambda W: direct, lambda W: _ess_fft(jnp.moveaxis(unpack_spins(W, N, dt), 0, 1)), W)
        ess = jnp.where(const_e, float(C * N), ess)
        err = jnp.sqrt(_spin_moments(total, C * N, dt)[1] / ess)  # variance over all draws: 1 - m²
    else:
        ess = err = nan

    return rhat, ess, err, const
