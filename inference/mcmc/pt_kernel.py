"""The pure kernel of non-reversible parallel tempering (Syed, Bouchard-Côté, Deligiannidis
& Doucet 2021): ``R`` replicas of every chain at a ladder of inverse temperatures
``β_0 > β_1 > ... > β_{R-1}`` (``β_0`` the model's, the cold end; ``β_{R-1}`` the hot end).

One step (:func:`pt_step`, also named ``step``; ``init`` is :func:`pt_init`) is

1. one heat-bath sweep of every replica at its own β: the Gibbs kernel
   (:func:`~isingattn.inference.mcmc.gibbs_kernel.sweep_with_thresholds`), with the replicas
   a batch axis of ONE sweep. β enters a heat-bath sweep only through its thresholds
   ``logistic / 2β`` (:func:`~isingattn.inference.mcmc.gibbs_kernel.sweep_thresholds`), so a
   ladder is a threshold array, and every block GEMM runs over replicas × chains × models;
2. the deterministic even–odd swap round: at even steps the pairs ``(0,1), (2,3), ...``,
   at odd steps ``(1,2), (3,4), ...`` each swap their states with probability
   ``min(1, exp((β_i - β_{i+1}) (E_i - E_{i+1})))``. Alternating the parity (instead of
   picking pairs at random, reversible PT) makes each state's walk along the ladder
   persistent, so a round trip takes O(R) swap rounds instead of O(R²).

Round trips are counted on the states themselves: each replica slot carries the end of the
ladder its state last visited (``last_end``), swapped with the state; a state that arrives at
the cold end having visited the hot end since it last left the cold end completes a trip.

Shapes: the replica axis leads, ``spins [R, ..., n]``, ``energy [R, ...]`` (the ``...``
are chains and models, as in :class:`~isingattn.inference.mcmc.gibbs_kernel.GibbsState`);
``betas`` broadcast against ``energy`` (``[R]`` padded with size-1 axes, or ``[R, ...]``: a
ladder per model). The engine's loop (:mod:`~isingattn.inference.mcmc.pt`) runs the same two
functions with the spins spin-major, ``[n, R, ...]`` (``axis=1``).
"""

from __future__ import annotations

from typing import NamedTuple, Optional, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from isingattn import prng
from isingattn.energy import energy
from isingattn.inference.mcmc.gibbs_kernel import GibbsState, init_spins, sweep_thresholds, sweep_with_thresholds

NONE, COLD, HOT = 0, 1, 2  # last_end: the end of the ladder a state visited last


class PTState(NamedTuple):
    """State of a batch of tempered chains.

    * spins: ``[R, ..., n]`` in {-1, +1} (0: an inactive spin, never changed); replica ``r``
      samples at ``betas[r]``.
    * energy: ``[R, ...]``, the energy of each replica's spins.
    * last_end: ``[R, ...]`` int32, the ladder end (``COLD``, ``HOT`` or ``NONE``) the state in
      that slot visited last; swapped along with the spins.
    """

    spins: jax.Array
    energy: jax.Array
    last_end: jax.Array


class PTInfo(NamedTuple):
    """Diagnostics of one step.

    * accept_prob: ``[R-1, ...]``, ``min(1, exp((β_i - β_{i+1})(E_i - E_{i+1})))`` of every
      adjacent pair after the sweep, whether or not the pair was proposed this step (its
      mean is the swap rate; ``1 -`` it, the rejection rate the ladder adapts on).
    * swapped: ``[R-1, ...]`` bool, the pairs that swapped.
    * round_trips: ``[...]`` int32, 1 where a state completed a cold → hot → cold trip.
    """

    accept_prob: jax.Array
    swapped: jax.Array
    round_trips: jax.Array


def safe_beta(betas, dtype):
    """β clipped to the smallest normal number: at β = 0 a heat-bath threshold
    ``logistic / 2β`` is ±inf, i.e. a fair coin (the uniform distribution, exactly), where
    ``1 / 0`` would give ``inf · 0 = NaN`` for the rare logistic draw of exactly 0."""
    return jnp.maximum(jnp.asarray(betas, dtype), jnp.finfo(dtype).tiny)


def pt_init(key, betas, shape, active=None, dtype=jnp.float32, h=None, J=None) -> PTState:
    """Uniformly random spins ``[R, *shape]`` (``R = len(betas)``; inactive spins 0), their
    energies (when ``h`` and ``J`` are given; else zeros) and no ladder end visited yet."""
    R = np.shape(betas)[0]
    s = init_spins(key, (R,) + tuple(shape), active, dtype).spins
    E = energy(h, J, s) if h is not None else jnp.zeros(s.shape[:-1], dtype)
    return PTState(s, E, jnp.full(s.shape[:-1], NONE, jnp.int32))


def _partner(x, up, down, axis: int):
    """``x`` with slot ``r`` replaced by slot ``r+1`` where ``up[r]`` and by ``r-1`` where
    ``down[r]`` (replicas on ``axis``; ``up``/``down [R, ...]`` broadcast against ``x``)."""
    return jnp.where(up, jnp.roll(x, -1, axis), jnp.where(down, jnp.roll(x, 1, axis), x))


def swap_round(u, spins, E, last_end, betas, parity, axis: int = 0):
    """The even–odd swap round after a sweep.

    Args:
        u: ``[R-1, ...]`` uniforms on [0, 1) (shaped like ``E[1:]``).
        spins: replicas on ``axis`` (0: ``[R, ..., n]``; 1: spin-major ``[n, R, ...]``).
        E, last_end: ``[R, ...]``; betas: broadcast against ``E``; parity: 0 or 1 (traced ok),
            the pairs ``(i, i+1)`` with ``i % 2 == parity`` are proposed.
    Returns:
        ``(spins, E, last_end, PTInfo)`` after the swaps.
    """
    R = E.shape[0]
    betas = jnp.asarray(betas, E.dtype)
    betas = betas.reshape((R,) + (1,) * (E.ndim - 1)) if betas.ndim == 1 else betas
    log_a = (betas[:-1] - betas[1:]) * (E[:-1] - E[1:])  # [R-1, ...]
    prob = jnp.exp(jnp.minimum(log_a, 0.0))
    pair = jnp.arange(R - 1).reshape((R - 1,) + (1,) * (E.ndim - 1))
    swap = (pair % 2 == parity) & (u < prob)
    no = jnp.zeros_like(swap[:1])
    up, down = jnp.concatenate([swap, no]), jnp.concatenate([no, swap])  # [R, ...]: slot r takes r+1 / r-1
    if axis:  # spin-major [n, R, ...]: the masks [R, ...] gain a leading spin axis
        s_up, s_down = up[None], down[None]
    else:  # [R, ..., n]: a trailing one
        s_up, s_down = up[..., None], down[..., None]
    spins = _partner(spins, s_up, s_down, axis)
    E = _partner(E, up, down, 0)
    last_end = _partner(last_end, up, down, 0)
    # the ends: a state at the hot end has visited it (after having visited the cold one);
    # one arriving at the cold end from the hot end completes a round trip
    trips = (last_end[0] == HOT).astype(jnp.int32)
    hot = jnp.where(last_end[-1] == COLD, HOT, last_end[-1])
    last_end = last_end.at[-1].set(hot).at[0].set(COLD)
    return spins, E, last_end, PTInfo(prob, swap, trips)


def pt_step(key, state: PTState, h, J, betas, parity, classes: Optional[Sequence[Sequence[int]]] = None):
    """One step of non-reversible PT: a heat-bath sweep of every replica at its β, then the
    swap round of ``parity`` (see the module docstring).

    Args:
        key: PRNG key (one for the whole batch).
        state: :class:`PTState` with spins ``[R, ..., n]``.
        h, J: ``h [..., n]``, ``J [..., n, n]`` or :class:`~isingattn.sparse.SparseCouplings`:
            broadcast against one replica's spins ``[..., n]``.
        betas: ``[R]`` (decreasing, ``β ≥ 0``) or ``[R, ...]`` broadcast against
            ``state.energy``.
        parity: 0 (pairs ``(0,1), (2,3), ...``) or 1 (``(1,2), ...``); alternate it.
        classes: the sweep's colour classes, as for
            :func:`~isingattn.inference.mcmc.gibbs_kernel.gibbs_sweep` (None: systematic).
    Returns:
        ``(PTState, PTInfo)``.
    """
    s = state.spins
    dtype = s.dtype
    R = s.shape[0]
    k_sweep, k_swap = jax.random.split(key)
    b = jnp.asarray(betas, dtype)
    b = b.reshape((R,) + (1,) * (state.energy.ndim - 1)) if b.ndim == 1 else b
    t = sweep_thresholds(k_sweep, s.shape, dtype, safe_beta(b, dtype)[..., None])
    s = sweep_with_thresholds(t, GibbsState(s), h, J, classes)[0].spins
    E = energy(h, J, s)
    u = prng.uniform(k_swap, (R - 1,) + E.shape[1:], dtype)
    s, E, last_end, info = swap_round(u, s, E, state.last_end, b, parity)
    return PTState(s, E, last_end), info


# The uniform kernel names every chain kernel has (blackjax style): ``init`` and a pure ``step(key, state, ...)``.
init = pt_init
step = pt_step
