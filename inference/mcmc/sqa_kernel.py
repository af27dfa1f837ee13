"""The path-integral (Trotter-ring) kernel that SQA runs: the state, the pure Metropolis
sweep over every replica (``sqa_sweep(key, state, ...)``) with its ring block update, the
ring coupling and the Γ schedules. The scan over spins is the shared skeleton of
inference/mcmc/sweep.py; the moves are described in the docstring of inference/mcmc/sqa.py."""

from __future__ import annotations

from functools import partial
from typing import NamedTuple, Optional

import jax
import jax.numpy as jnp
import numpy as np

from isingattn import prng
from isingattn import validate as V
from isingattn.energy import local_field_rows
from isingattn.errors import IsingInputError
from isingattn.sparse import SparseCouplings
from isingattn.inference.mcmc.sweep import blocked_sweep, sparse_field_rows, sparse_spin_major, spin_major

SCHEDULES = ("linear", "geometric")


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


def ring_update(G, s, noise, J_in, *, bp, K, P: int, global_moves: bool):
    """The block update that :func:`sqa_sweep` plugs into
    :func:`~isingattn.inference.mcmc.sweep.blocked_sweep` (with ``bp = β/P``, ``K``, ``P`` and
    ``global_moves`` bound): all moves of ``b`` consecutive spins, in order (spin-major,
    spins on axis 0, replicas on axis 1): for each spin, the single-spin Metropolis
    moves of every replica (one ring colour at a time) and then the global move.

    G: ``[b, P, ...]`` the spins' local fields with the block's OLD spins; s: old
    spins ``[b, P, ...]`` (0 = inactive: every move leaves it 0); noise ``(E1, Eg)``,
    E1 ``[b, P, ...]``, Eg ``[b, ...]``: exponential noise ``-log u`` (a move with action
    change ``ΔS`` is accepted iff ``ΔS < E``, i.e. ``u < exp(-ΔS)``); J_in ``[b, b, ...]``
    couplings inside the block. Returns the new spins and the counts
    ``(accepted single-spin moves [P, ...], accepted global moves [...])``.

    Spin ``i`` sees the spins ``j < i`` of the block already moved:
    ``F_i = G_i + Σ_{j<i} J_ij (s_j' - s_j)`` (``F_i`` does not depend on ``s_i``).
    Replicas are unrolled into ``P`` rows (the ring is static index arithmetic and the
    global move a sum of rows), so the block is elementwise over reads and models: no
    reduction for XLA to fuse (and recompute) inside it, which measured far slower.
    """
    E1, Eg = noise
    new, d = [], []
    acc_s = [jnp.zeros(s.shape[2:], s.dtype) for _ in range(P)]
    acc_g = jnp.zeros(s.shape[2:], s.dtype)
    for i in range(G.shape[0]):
        f = G[i]
        for j in range(i):
            f = f + J_in[i, j] * d[j]
        x, a_s, a_g = spin_moves([f[k] for k in range(P)], [s[i, k] for k in range(P)], [E1[i, k] for k in range(P)],
                                 Eg[i], bp=bp, K=K, P=P, global_moves=global_moves)
        acc_s = [acc_s[k] + a_s[k] for k in range(P)]
        acc_g = acc_g + a_g
        new.append(jnp.stack(x))
        d.append(new[i] - s[i])
    return jnp.stack(new), (jnp.stack(acc_s), acc_g)


def spin_moves(f, x, E1, Eg, *, bp, K, P: int, global_moves: bool):
    """The moves of one spin (or of several mutually uncoupled spins at once): the
    single-spin Metropolis move in every replica, one ring colour at a time, then the
    global move. Each argument is a list of ``P`` replica rows of any common shape:
    ``f`` the local fields (they do not depend on the spin itself), ``x`` the spins
    (0 = inactive: kept 0), ``E1`` the noise ``-log u``; ``Eg`` one row of global-move
    noise. Returns the new rows, the accepted single moves per replica and the accepted
    global moves (as the spins' dtype)."""
    x = list(x)
    dt = x[0].dtype
    acc_s = [None] * P
    for c in _ring_colours(P):  # replicas of one colour do not neighbour each other: simultaneous moves
        for k in np.flatnonzero(c):
            dS = 2.0 * bp * x[k] * f[k]
            if P > 1:
                nb = x[k - 1] + x[(k + 1) % P]
                # nb == 0 when the neighbours disagree: no ring cost, and no inf*0 at Γ = 0
                dS = dS + jnp.where(nb == 0, 0.0, 2.0 * K * x[k] * nb)
            acc = dS < E1[k]
            x[k] = jnp.where(acc, -x[k], x[k])
            acc_s[k] = acc.astype(dt)
    acc_g = jnp.zeros_like(x[0])
    if global_moves:
        accg = 2.0 * bp * sum(x[k] * f[k] for k in range(P)) < Eg  # the ring term is invariant
        x = [jnp.where(accg, -x[k], x[k]) for k in range(P)]
        acc_g = accg.astype(dt)
    return x, acc_s, acc_g


def class_sweep(field_rows, E1_t, Eg_t, s_t, classes, *, bp, K, P: int, global_moves: bool):
    """One sweep by colour classes in spin-major layout ``s_t, E1_t [n, P, ...]``,
    ``Eg_t [n, ...]``: the spins of a class are mutually uncoupled, so their moves
    (:func:`spin_moves`) run at once, from fields ``field_rows(i, s_t) -> [m, P, ...]`` of
    the current spins (a gather for sparse couplings, rows of a GEMM for dense ones).
    Returns ``(s_t, (accepted single moves [P, ...], accepted global moves [...]))``."""
    acc_s = jnp.zeros(s_t.shape[1:], s_t.dtype)
    acc_g = jnp.zeros(s_t.shape[2:], s_t.dtype)
    for c in classes:
        i = np.asarray(c, np.int32)
        f, x, e = field_rows(i, s_t), s_t[i], E1_t[i]  # [m, P, ...]
        x, a_s, a_g = spin_moves([f[:, k] for k in range(P)], [x[:, k] for k in range(P)], [e[:, k] for k in range(P)],
                                 Eg_t[i], bp=bp, K=K, P=P, global_moves=global_moves)
        s_t = s_t.at[i].set(jnp.stack(x, axis=1), unique_indices=True, indices_are_sorted=True)
        acc_s = acc_s + jnp.stack([a.sum(0) for a in a_s])
        acc_g = acc_g + a_g.sum(0)
    return s_t, (acc_s, acc_g)


def _exp_noise(key, shape, dtype):
    """``-log u``, exponential noise of the Metropolis tests (isingattn.prng: fused Threefry)."""
    return -jnp.log(prng.uniform(key, shape, dtype))


def sqa_sweep(key, state: SQAState, h, J, beta, gamma, P: Optional[int] = None, *, global_moves: bool = True,
              classes=None):
    """One sweep of the path-integral Metropolis kernel.

    Args:
        key: PRNG key (one for the whole state: every spin, replica and batch element
            draws its own uniform from it).
        state: :class:`SQAState` with spins ``[..., P, n]``.
        h: fields ``[..., n]``; J: symmetric zero-diagonal couplings ``[..., n, n]``, or a
            :class:`~isingattn.sparse.SparseCouplings` (both broadcast against the
            state's batch).
        beta: inverse temperature (scalar); gamma: transverse field Γ ≥ 0 (scalar).
        P: Trotter number; must equal ``state.spins.shape[-2]`` (inferred when None).
            ``P = 1`` is plain classical Metropolis at β (no ring).
        global_moves: also propose flipping spin ``i`` in every replica.
        classes: ``None``, the systematic scan ``0..n-1`` (dense J), or the static
            classes of a proper colouring (``inference.coloring.color_classes``), each
            moved at once; sparse couplings need them.

    Returns:
        ``(new_state, SQAInfo)``. Pure: the same key gives the same result.
    """
    spins = state.spins
    n, dt, batch = spins.shape[-1], spins.dtype, spins.shape[:-2]
    k1, k2 = jax.random.split(key)
    # drawn spin-major [n, P, *batch], the layout the sweep runs in (the moves cancel)
    E1 = _exp_noise(k1, (n, spins.shape[-2]) + batch, dt)  # one proposal per (spin, replica)
    Eg = _exp_noise(k2, (n,) + batch, dt) if global_moves else jnp.zeros((n,) + batch, dt)
    return sweep_with_noise(jnp.moveaxis(E1, (0, 1), (-1, -2)), jnp.moveaxis(Eg, 0, -1), state, h, J, beta, gamma,
                            P, global_moves=global_moves, classes=classes)


def sweep_with_noise(E1, Eg, state: SQAState, h, J, beta, gamma, P: Optional[int] = None, *, global_moves: bool = True,
                     classes=None):
    """:func:`sqa_sweep` with its noise given: exponential variates ``-log u``,
    ``E1 [..., P, n]`` (single-spin moves, the state's layout) and ``Eg [..., n]``
    (global moves), so that a test or a run can supply them."""
    spins = state.spins
    n = spins.shape[-1]
    if P is None:
        P = spins.shape[-2]
    if spins.shape[-2] != P:
        raise IsingInputError(f"state has {spins.shape[-2]} replicas on axis -2 but P = {P}. Pass P = spins.shape[-2].")
    sparse = isinstance(J, SparseCouplings)
    if sparse and classes is None:
        raise IsingInputError("an SQA sweep on sparse couplings needs colour classes: pass "
                              "classes=inference.coloring.color_classes(J).")
    dt = spins.dtype
    batch = spins.shape[:-2]
    bp, K = _ring_constants(beta, gamma, P, dt)
    to_t = lambda x: jnp.moveaxis(x, (-1, -2), (0, 1))  # [..., P, n] -> [n, P, ...]
    s_t, E1_t, Eg_t = to_t(spins), to_t(E1), jnp.moveaxis(Eg, -1, 0)
    if sparse:
        h_t, W_t = sparse_spin_major(jnp.asarray(h, dt), J.astype(dt), len(batch))
        h_t, W_t = h_t[:, None], W_t[:, :, None]  # replica axis 1 of [n, P, *batch] (shared by replicas)
        rows = lambda i, s_t: sparse_field_rows(h_t, W_t, J.graph.nbr, i, s_t)
    else:
        h_t, J_t = spin_major(jnp.asarray(h, dt), jnp.asarray(J, dt), len(batch))
        h_t, J_t = h_t[:, None], (J_t[:, :, None] if J_t.ndim > 2 else J_t)  # replica axis 1 of [n, P, *batch]
        rows = lambda i, s_t: local_field_rows(h_t[i], J_t[i], s_t)
    if classes is None:
        update = partial(ring_update, bp=bp, K=K, P=P, global_moves=global_moves)
        zero = jnp.zeros((P,) + batch, dt)
        s_t, (acc_s, acc_g) = blocked_sweep(update, s_t, h_t, J_t, (E1_t, Eg_t), (zero, zero[0]))
    else:
        s_t, (acc_s, acc_g) = class_sweep(rows, E1_t, Eg_t, s_t, classes, bp=bp, K=K, P=P, global_moves=global_moves)
    info = SQAInfo(acceptance_single=acc_s.sum(0) / max(n * P, 1), acceptance_global=acc_g / max(n, 1))
    return sqa_init(jnp.moveaxis(s_t, (0, 1), (-1, -2))), info


def _ring_constants(beta, gamma, P: int, dt):
    """``(β/P, K)`` of the Trotter weight."""
    beta = jnp.asarray(beta, dt)
    return beta / P, trotter_coupling(beta, jnp.asarray(gamma, dt), P)


# ---- schedules and the full run ---------------------------------------------------------------


def gamma_values(schedule, num_sweeps: int) -> np.ndarray:
    """Γ for each sweep, float64 ``[num_sweeps]``, from ``(kind, Γ_max, Γ_min)``."""
    kind, gmax, gmin = check_schedule(schedule)
    if num_sweeps == 1:
        return np.array([gmin])
    if kind == "linear":
        return np.linspace(gmax, gmin, num_sweeps)
    return np.geomspace(gmax, gmin, num_sweeps)


def check_schedule(schedule):
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
