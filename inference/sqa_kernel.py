"""The path-integral (Trotter-ring) kernel SQA runs: the state, the Metropolis sweep over
every replica (pure: ``sqa_sweep(key, state, ...)``), the ring coupling and the Γ schedules.
How a sweep is computed is described in the docstring of inference/sqa.py."""

from __future__ import annotations

from typing import NamedTuple, Optional

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from isingattn import prng
from isingattn import validate as V
from isingattn.energy import local_field_rows
from isingattn.errors import IsingInputError

SCHEDULES = ("linear", "geometric")
SWEEP_BLOCK = 4


class SQAState(NamedTuple):
    """State of the Trotter ring.

    spins: ``[..., P, n]`` in {-1, +1}; axis -2 is the replica index ``k`` (periodic).
    A sweep computes the local fields it needs from the spins (exactly, per block), so
    the state holds no fields.
    """

    spins: jax.Array


class SQAInfo(NamedTuple):
    """Diagnostics of one sweep, ``[...]`` (batch of the state without ``P, n``).

    acceptance_single: fraction of accepted single-spin moves (over replicas and spins).
    acceptance_global: fraction of accepted global moves (over spins); 0 when disabled.
    """

    acceptance_single: jax.Array
    acceptance_global: jax.Array


def trotter_coupling(beta, gamma, P: int):
    """``K = -½ ln tanh(βΓ/P)``, computed stably for small and large ``βΓ/P``.

    ``K → ∞`` as ``Γ → 0`` (replicas lock) and ``K → 0`` as ``Γ → ∞`` (free replicas).
    """
    x = beta * gamma / P
    e = jnp.exp(-2.0 * x)
    # tanh x = (1 - e)/(1 + e) with e = exp(-2x): log1p / expm1 keep both limits accurate
    return 0.5 * (jnp.log1p(e) - jnp.log(-jnp.expm1(-2.0 * x)))


def sqa_init(spins) -> SQAState:
    """State from spins ``[..., P, n]`` (a single classical configuration: ``P = 1``)."""
    return SQAState(spins=spins)


def _ring_colours(P: int):
    """Boolean masks ``[P]`` of replicas that do not neighbour each other on the ring."""
    k = np.arange(P)
    if P == 1:
        return [k == 0]
    if P % 2 == 0:
        return [k % 2 == 0, k % 2 == 1]
    last = k == P - 1  # odd ring: replica P-1 neighbours both 0 and P-2
    return [(k % 2 == 0) & ~last, k % 2 == 1, last]


def _spin_major(h, J, r: int):
    """``h_t [n, 1, *batch]`` and ``J_t`` (``[n, n]`` when one J serves every read and
    model, else ``[n, n, 1, *batch]``) for spins ``[n, P, *batch]`` with ``r`` batch axes."""
    n = J.shape[-1]
    h = h.reshape((1,) * max(r - (h.ndim - 1), 0) + h.shape)
    h_t = jnp.moveaxis(h, -1, 0)[:, None]
    if all(d == 1 for d in J.shape[:-2]):
        return h_t, J.reshape(n, n)
    J = J.reshape((1,) * max(r - (J.ndim - 2), 0) + J.shape)
    return h_t, jnp.moveaxis(J, (-2, -1), (0, 1))[:, :, None]


def _update_spins(G, s, E1, Eg, J_in, bp, K, P: int, global_moves: bool):
    """All moves of ``b`` consecutive spins, in order (spin-major, spins on axis 0,
    replicas on axis 1): for each spin, the single-spin Metropolis moves of every
    replica (one ring colour at a time) and then the global move.

    G: ``[b, P, ...]`` the spins' local fields with the block's OLD spins; s: old
    spins ``[b, P, ...]`` (0 = inactive: every move leaves it 0); E1 ``[b, P, ...]``,
    Eg ``[b, ...]``: exponential noise ``-log u`` (a move with action change ``ΔS`` is
    accepted iff ``ΔS < E``, i.e. ``u < exp(-ΔS)``); J_in ``[b, b, ...]`` couplings
    inside the block. Returns the new spins and the counts of accepted single-spin
    moves ``[P, ...]`` and of global moves ``[...]``.

    Spin ``i`` sees the spins ``j < i`` of the block already moved:
    ``F_i = G_i + Σ_{j<i} J_ij (s_j' - s_j)`` (``F_i`` does not depend on ``s_i``).
    Replicas are unrolled into ``P`` rows (the ring is static index arithmetic and the
    global move a sum of rows), so the block is elementwise over reads and models: no
    reduction for XLA to fuse (and recompute) inside it, which measured 10x slower.
    """
    colours = [np.flatnonzero(c) for c in _ring_colours(P)]
    new, d = [], []
    acc_s = [jnp.zeros(s.shape[2:], s.dtype) for _ in range(P)]
    acc_g = jnp.zeros(s.shape[2:], s.dtype)
    for i in range(G.shape[0]):
        f = G[i]
        for j in range(i):
            f = f + J_in[i, j] * d[j]
        f = [f[k] for k in range(P)]
        x = [s[i, k] for k in range(P)]
        for c in colours:  # replicas of one colour do not neighbour each other: simultaneous moves
            for k in c:
                dS = 2.0 * bp * x[k] * f[k]
                if P > 1:
                    nb = x[k - 1] + x[(k + 1) % P]
                    # nb == 0 when the neighbours disagree: no ring cost, and no inf*0 at Γ = 0
                    dS = dS + jnp.where(nb == 0, 0.0, 2.0 * K * x[k] * nb)
                acc = dS < E1[i, k]
                x[k] = jnp.where(acc, -x[k], x[k])
                acc_s[k] = acc_s[k] + acc.astype(s.dtype)
        if global_moves:
            accg = 2.0 * bp * sum(x[k] * f[k] for k in range(P)) < Eg[i]  # the ring term is invariant
            x = [jnp.where(accg, -x[k], x[k]) for k in range(P)]
            acc_g = acc_g + accg.astype(s.dtype)
        new.append(jnp.stack(x))
        d.append(new[i] - s[i])
    return jnp.stack(new), jnp.stack(acc_s), acc_g


def _sweep_t(E1, Eg, s_t, h_t, J_t, bp, K, global_moves: bool):
    """One sweep in spin-major layout: ``s_t, E1 [n, P, ...]``, ``Eg [n, ...]``, ``h_t``,
    ``J_t`` from :func:`_spin_major`. ``SWEEP_BLOCK`` spins at a time: one GEMM gives a
    block's fields from the CURRENT spins (exact: no rounding drift), then
    :func:`_update_spins`. Returns ``(s_t, acc_s [P, ...], acc_g [...])``."""
    n, P = s_t.shape[:2]
    b = min(SWEEP_BLOCK, n)
    nb, rem = divmod(n, b)
    split = lambda x: x[: nb * b].reshape((nb, b) + x.shape[1:])  # leading axis: block
    J_in = jnp.stack([J_t[k * b : (k + 1) * b, k * b : (k + 1) * b] for k in range(nb)])
    move = lambda G, s, e1, eg, jin: _update_spins(G, s, e1, eg, jin, bp, K, P, global_moves)

    def block(carry, x):
        s_t, acc_s, acc_g = carry
        k, h_k, J_k, Jin_k, e1, eg = x
        G = local_field_rows(h_k, J_k, s_t)  # [b, P, ...]
        new, a_s, a_g = move(G, lax.dynamic_slice_in_dim(s_t, k * b, b, axis=0), e1, eg, Jin_k)
        return (lax.dynamic_update_slice_in_dim(s_t, new, k * b, axis=0), acc_s + a_s, acc_g + a_g), None

    zero = jnp.zeros(s_t.shape[1:], s_t.dtype)
    (s_t, acc_s, acc_g), _ = lax.scan(block, (s_t, zero, zero[0]),
                                      (jnp.arange(nb), split(h_t), split(J_t), J_in, split(E1), split(Eg)))
    if rem:  # the last n % b spins: one more, smaller block
        G = local_field_rows(h_t[nb * b :], J_t[nb * b :], s_t)
        tail, a_s, a_g = move(G, s_t[nb * b :], E1[nb * b :], Eg[nb * b :], J_t[nb * b :, nb * b :])
        s_t = lax.dynamic_update_slice_in_dim(s_t, tail, nb * b, axis=0)
        acc_s, acc_g = acc_s + a_s, acc_g + a_g
    return s_t, acc_s, acc_g


def _exp_noise(key, shape, dtype):
    """``-log u``, exponential noise of the Metropolis tests (isingattn.prng: fused Threefry)."""
    return -jnp.log(prng.uniform(key, shape, dtype))


def sqa_sweep(key, state: SQAState, h, J, beta, gamma, P: Optional[int] = None, *, global_moves: bool = True):
    """One sweep of the path-integral Metropolis kernel.

    Args:
        key: PRNG key (one for the whole state: every spin, replica and batch element
            draws its own uniform from it).
        state: :class:`SQAState` with spins ``[..., P, n]``.
        h: fields ``[..., n]``; J: symmetric zero-diagonal couplings ``[..., n, n]``
            (both broadcast against the state's batch).
        beta: inverse temperature (scalar); gamma: transverse field Γ ≥ 0 (scalar).
        P: Trotter number; must equal ``state.spins.shape[-2]`` (inferred when None).
            ``P = 1`` is plain classical Metropolis at β (no ring).
        global_moves: also propose flipping spin ``i`` in every replica.

    Returns:
        ``(new_state, SQAInfo)``. Pure: the same key gives the same result.
    """
    spins = state.spins
    n = spins.shape[-1]
    if P is None:
        P = spins.shape[-2]
    if spins.shape[-2] != P:
        raise IsingInputError(f"state has {spins.shape[-2]} replicas on axis -2 but P = {P}. Pass P = spins.shape[-2].")
    dt = spins.dtype
    batch = spins.shape[:-2]
    bp, K = _ring_constants(beta, gamma, P, dt)
    h_t, J_t = _spin_major(jnp.asarray(h, dt), jnp.asarray(J, dt), len(batch))
    k1, k2 = jax.random.split(key)
    E1 = _exp_noise(k1, (n, P) + batch, dt)  # one proposal per (spin, replica)
    Eg = _exp_noise(k2, (n,) + batch, dt)
    s_t = jnp.moveaxis(spins, (-1, -2), (0, 1))  # [n, P, *batch]
    s_t, acc_s, acc_g = _sweep_t(E1, Eg, s_t, h_t, J_t, bp, K, global_moves)
    spins = jnp.moveaxis(s_t, (0, 1), (-1, -2))
    info = SQAInfo(acceptance_single=acc_s.sum(0) / max(n * P, 1), acceptance_global=acc_g / max(n, 1))
    return sqa_init(spins), info


def _ring_constants(beta, gamma, P: int, dt):
    """``(β/P, K)`` of the Trotter weight."""
    beta = jnp.asarray(beta, dt)
    return beta / P, trotter_coupling(beta, jnp.asarray(gamma, dt), P)


# ---- schedules and the full run ---------------------------------------------------------------


def gamma_values(schedule, num_sweeps: int) -> np.ndarray:
    """Γ for each sweep, float64 ``[num_sweeps]``, from ``(kind, Γ_max, Γ_min)``."""
    kind, gmax, gmin = _check_schedule(schedule)
    if num_sweeps == 1:
        return np.array([gmin])
    if kind == "linear":
        return np.linspace(gmax, gmin, num_sweeps)
    return np.geomspace(gmax, gmin, num_sweeps)


def _check_schedule(schedule):
    try:
        kind, gmax, gmin = schedule
    except (TypeError, ValueError):
        raise IsingInputError(
            f"gamma_schedule must be a tuple (kind, gamma_max, gamma_min) with kind in {SCHEDULES}; got {schedule!r}. "
            "Example: ('linear', 3.0, 0.01)."
        ) from None
    V.choice("gamma_schedule kind", kind, SCHEDULES, owner="SQA")
    # numbers, not strings or bools (float("3") would pass them)
    gmax = V.float_in("gamma_schedule gamma_max", gmax, owner="SQA")
    gmin = V.float_in("gamma_schedule gamma_min", gmin, owner="SQA")
    if not (np.isfinite(gmax) and np.isfinite(gmin) and gmax >= gmin >= 0 and gmax > 0):
        raise IsingInputError(
            f"gamma_schedule needs finite gamma_max ≥ gamma_min ≥ 0 and gamma_max > 0; got ({gmax}, {gmin}). "
            "Γ is lowered from gamma_max to gamma_min."
        )
    if kind == "geometric" and gmin <= 0:
        raise IsingInputError(f"a geometric schedule needs gamma_min > 0; got {gmin}. Use e.g. 1e-3, or kind='linear'.")
    return kind, gmax, gmin
