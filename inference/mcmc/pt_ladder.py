"""The ladder of parallel tempering: its size from the model, its starting rungs and their
adaptation (Syed, Bouchard-Côté, Deligiannidis & Doucet, JRSS B 84, 2022 — "non-reversible
parallel tempering", §5).

**The communication barrier.** Between rungs ``β`` and ``β + dβ`` a swap is rejected with
probability ``λ(β) dβ``, ``λ(β) = ½ E|V - V'|`` for two independent energies ``V, V'`` at
β; for a Gaussian energy of spread ``σ(β)`` that is ``σ(β)/√π``. Its integral ``Λ = ∫_0^β
λ`` is the barrier: a ladder of ``R`` rungs placed so that every pair rejects equally
(:func:`adapt_ladder`) rejects ``r = Λ / (R - 1)`` per pair, and a state's round trip takes
about ``2 + 2Λ / (1 - r)`` swap rounds. Round trips per unit of work (``R`` sweeps a round)
are best near ``r = ½``, i.e. ``R ≈ 2Λ + 1`` (Syed et al.'s rule of thumb), when the
sweeps between swaps decorrelate the energies; at the cold rungs of a glass they do not,
and a state's walk along the ladder is slower than that. The default aims a little
lower, ``TARGET_REJECT = 0.4`` (swap rates about 0.6, 25% more rungs).

**The size from the model** (:func:`barrier`, :func:`replicas_for_barrier`): a short pilot
run at a fixed linear grid of ``PILOT_RUNGS`` β gives ``σ(β)`` at each, ``Λ`` is their
trapezoidal integral, and ``R = ⌈Λ / TARGET_REJECT⌉ + 1`` within ``[MIN_REPLICAS,
MAX_REPLICAS]``. The engine runs the pilot on the host before compiling its run
(``ParallelTempering(num_replicas=None)``, the default), since ``R`` is a shape.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np

ADAPT_FRACTION = 0.75  # of the warmup spent adapting the ladder (the rest equilibrates at the final one)
TARGET_REJECT = 0.4  # per adjacent pair after adaptation: R ≈ 2.5Λ + 1
MIN_REPLICAS, MAX_REPLICAS = 4, 128
PILOT_RUNGS = 24  # the pilot's linear grid of β from the model's to 0
PILOT_WARMUP, PILOT_STEPS = 200, 400  # its steps (tempered: the grid's rungs swap)


def initial_ladder(beta, R: int, beta_min: float, fractions, dtype):
    """The starting ladder ``[R]`` at the model's ``beta`` (traced ok): ``beta · fractions``
    when given; else linear from β to 0 (near β = 0 the barrier grows about linearly in β,
    with the spread of the energy) or geometric from β to ``min(beta_min, β)``."""
    beta = jnp.asarray(beta, dtype)
    if fractions is not None:
        return beta * jnp.asarray(fractions, dtype)
    if beta_min == 0:
        return beta * jnp.linspace(1.0, 0.0, R, dtype=dtype)
    hot = jnp.minimum(jnp.asarray(beta_min, dtype), beta)
    return beta * (hot / beta) ** jnp.linspace(0.0, 1.0, R, dtype=dtype)


def round_lengths(num_warmup: int, rounds: int) -> list:
    """Lengths of the adaptation rounds: doubling, summing to ``ADAPT_FRACTION`` of the
    warmup (each round's swap statistics come from a chain twice as long as the last's)."""
    A = int(num_warmup * ADAPT_FRACTION)
    w = 2.0 ** np.arange(rounds)
    cuts = np.floor(np.cumsum(w) / w.sum() * A).astype(int)
    return [int(x) for x in np.diff(np.concatenate([[0], cuts])) if x > 0]


def adapt_ladder(betas, reject, floor: float = 1e-4):
    """Syed et al.'s ladder update: the β that split the communication barrier evenly.

    The barrier ``Λ`` is the cumulated rejection rate along the ladder, ``Λ(β_k) = Σ_{i<k}
    r_i`` with ``r_i`` the mean rejection ``1 - min(1, exp(...))`` of pair ``(i, i+1)``;
    between rungs it is linear in β. The new ladder puts rung ``k`` where ``Λ = k Λ_total /
    (R-1)``, so that every pair rejects about equally often; the ends stay.

    Args:
        betas: ``[R, ...]`` decreasing along axis 0; reject: ``[R-1, ...]`` in [0, 1]
            (``floor`` keeps ``Λ`` strictly increasing, so a pair that never rejects is not
            collapsed onto a point).
    Returns:
        ``[R, ...]``, decreasing, with the same ends.
    """
    R = betas.shape[0]
    r = jnp.maximum(reject, floor).astype(betas.dtype)
    lam = jnp.concatenate([jnp.zeros_like(r[:1]), jnp.cumsum(r, axis=0)])  # [R, ...], increasing
    frac = jnp.linspace(0.0, 1.0, R, dtype=betas.dtype)
    flat_b = betas.reshape(R, -1).T
    flat_l = lam.reshape(R, -1).T
    new = jax.vmap(lambda lam_, b_: jnp.interp(frac * lam_[-1], lam_, b_))(flat_l, flat_b).T.reshape(betas.shape)
    return new.at[0].set(betas[0]).at[-1].set(betas[-1])


def barrier(betas, energy_sd):
    """``Λ = ∫ σ(β)/√π dβ`` by the trapezoid rule over a grid: ``betas [G, ...]`` (any
    order) and the energy's standard deviation at each, ``energy_sd [G, ...]`` -> ``[...]``
    (traced ok)."""
    lam = jnp.asarray(energy_sd) / math.sqrt(math.pi)
    return jnp.abs(jnp.sum(0.5 * (lam[1:] + lam[:-1]) * jnp.diff(jnp.asarray(betas), axis=0), axis=0))


def replicas_for_barrier(lam) -> int:
    """The ladder size for a barrier ``Λ`` (the largest over a batch): ``⌈Λ / TARGET_REJECT⌉ +
    1`` replicas, so that each adapted pair rejects about ``TARGET_REJECT``, within
    ``[MIN_REPLICAS, MAX_REPLICAS]``."""
    lam = float(np.max(np.nan_to_num(np.asarray(lam, np.float64), nan=0.0)))
    return int(np.clip(math.ceil(lam / TARGET_REJECT) + 1, MIN_REPLICAS, MAX_REPLICAS))
