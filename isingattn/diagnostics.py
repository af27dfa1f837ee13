"""MCMC diagnostics in JAX, shared by every sampler (Gibbs, SQA): split R-hat, ESS,
the Monte Carlo standard error, and the rule that says which constant draws need no
mixing. Ports of ``numpyro.diagnostics`` (numpy-only), so they work under ``jit``.

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

import jax.numpy as jnp
from jax import lax

from isingattn.errors import IsingInputError

__all__ = ["split_gelman_rubin", "effective_sample_size", "mcse", "is_constant", "field_pinned"]


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
    coupling = (jnp.sum(jnp.abs(J), axis=-1) if active is None  # inactive spins (0) exert no field
                else jnp.einsum("...ik,...k->...i", jnp.abs(J), active.astype(J.dtype)))
    margin = jnp.abs(h) - coupling
    return (margin > 0) & (1 - jnp.tanh(beta * margin) <= 1.0 / num_draws)
