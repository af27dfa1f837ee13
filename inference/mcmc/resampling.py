"""Sequential Monte Carlo's building blocks, pure and on the device: resampling of a weighted
population (systematic, residual, multinomial), the weights' effective-sample-size fraction, and
the adaptive step ``Δβ`` that keeps that fraction at a target. Population annealing
(:mod:`~isingattn.inference.mcmc.pa`) runs on them."""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax import lax

from isingattn.errors import IsingInputError

__all__ = ["RESAMPLING", "adaptive_step", "ess_fraction", "resample", "systematic_indices"]

RESAMPLING = ("systematic", "residual", "multinomial")
BISECTION_STEPS = 40  # halvings of the step: 2^-40 of the remaining β, below float32's resolution


def systematic_indices(u, p):
    """Systematic resampling of normalized weights ``p [R]`` with one uniform ``u`` in
    [0, 1): replica ``i`` of the new population is the one whose cumulative-weight interval
    holds ``(u + i)/R``. Returns ``[R]`` int32 indices (sorted). Replica ``r`` gets
    ``floor(R p_r)`` or ``ceil(R p_r)`` offspring, ``R p_r`` on average over ``u``."""
    R = p.shape[-1]
    c = jnp.cumsum(p)
    pos = (u + jnp.arange(R, dtype=p.dtype)) / R * c[-1]  # scaled to the sum: no overrun from rounding
    return jnp.clip(jnp.searchsorted(c, pos, side="right"), 0, R - 1).astype(jnp.int32)


def resample(key, log_w, scheme: str = "systematic"):
    """Indices ``[R]`` of a resampled population from unnormalized log weights ``[R]``, each
    replica drawn ``R w_r`` times in expectation (``w`` normalized). ``scheme``: one of
    ``"systematic"``, ``"residual"``, ``"multinomial"``."""
    R = log_w.shape[-1]
    p = jax.nn.softmax(log_w)
    if scheme == "systematic":
        return systematic_indices(jax.random.uniform(key, (), p.dtype), p)
    if scheme == "multinomial":
        return jax.random.categorical(key, log_w, shape=(R,)).astype(jnp.int32)
    if scheme == "residual":
        counts = jnp.floor(R * p)
        fixed = jnp.repeat(jnp.arange(R, dtype=jnp.int32), counts.astype(jnp.int32), total_repeat_length=R)
        rest = jnp.maximum(R * p - counts, 0)  # the residual weights: R - Σ floor(R p) draws from them
        drawn = jax.random.categorical(key, jnp.log(rest), shape=(R,)).astype(jnp.int32)
        return jnp.where(jnp.arange(R) < counts.sum(), fixed, drawn)
    raise IsingInputError(f"resampling must be one of {RESAMPLING}; got {scheme!r}.")


def ess_fraction(log_w):
    """``(Σw)² / (R Σw²)`` of log weights ``[..., R]``: 1 for equal weights, ``1/R`` for one."""
    R = log_w.shape[-1]
    return jnp.exp(2 * jax.nn.logsumexp(log_w, axis=-1) - jax.nn.logsumexp(2 * log_w, axis=-1)) / R


def adaptive_step(E, remaining, target):
    """The step ``Δβ`` in ``[0, remaining]`` whose weights ``exp(-Δβ E)`` (``E [R]``) have an
    ESS fraction of ``target``: ``remaining`` itself when that keeps the fraction at or
    above the target, else the bisection's value (the fraction falls as the step grows)."""
    E = E - jnp.min(E)  # the fraction does not depend on a shift of E; this keeps exp in range

    def frac(d):
        return ess_fraction(-d * E)

    def halve(_, lohi):
        lo, hi = lohi
        mid = 0.5 * (lo + hi)
        ok = frac(mid) >= target
        return jnp.where(ok, mid, lo), jnp.where(ok, hi, mid)

    lo, hi = lax.fori_loop(0, BISECTION_STEPS, halve, (jnp.zeros_like(remaining), remaining))
    return jnp.where(frac(remaining) >= target, remaining, 0.5 * (lo + hi))
