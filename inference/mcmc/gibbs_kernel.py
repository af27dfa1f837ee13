"""The heat-bath kernel that Gibbs runs: the chain state, the pure sweep
(``step(key, state, ...)``, also named ``gibbs_sweep``) with its heat-bath block update,
the colour-class sweep and initial spins (``init``, also ``init_spins``). The systematic
scan is the shared skeleton of :mod:`~isingattn.inference.mcmc.sweep`; the run loop
around the sweeps is :mod:`~isingattn.inference.mcmc.driver`."""

from __future__ import annotations

from typing import NamedTuple, Optional, Sequence

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from isingattn import prng
from isingattn.energy import local_field
from isingattn.errors import IsingInputError
from isingattn.sparse import SparseCouplings
from isingattn.inference.mcmc.sweep import blocked_sweep, sparse_field_rows, sparse_spin_major, spin_major


class GibbsState(NamedTuple):
    """State of a batch of chains.

    spins: ``[..., n]`` in {-1, +1}; 0 marks an inactive (masked) spin, which the
        kernel never changes. Leading axes are any mix of chains and models; ``h``
        and ``J`` broadcast against them.
    """

    spins: jax.Array


class GibbsInfo(NamedTuple):
    """Diagnostics of one sweep.

    flip_rate: ``[...]``, the fraction of active spins that changed sign. A
        heat-bath update is always accepted, so this is the analogue of an
        acceptance rate: near 0 means the chain is frozen.
    delta_energy: ``[...]``, ``E(new) - E(old)``. A move of ``s_i`` by ``d_i`` changes the
        energy by ``-d_i f_i``, with ``f_i`` the local field the update saw, so the
        energy trace costs one multiply-add per spin, not an energy per sweep.
    """

    flip_rate: jax.Array
    delta_energy: jax.Array


def _class_table(classes, n: int):
    """Padded ``[K, m]`` index table and validity mask of the update classes."""
    if classes is None:
        return np.arange(n, dtype=np.int32)[:, None], np.ones((n, 1), bool)
    m = max(len(c) for c in classes)
    # Pad with the class's own first index: reads of a duplicate are harmless and its
    # update is multiplied by valid = False, so scatter-adds of duplicates add 0.
    idx = np.array([list(c) + [c[0]] * (m - len(c)) for c in classes], dtype=np.int32)
    valid = np.array([[True] * len(c) + [False] * (m - len(c)) for c in classes])
    return idx, valid


def heat_bath_update(G, s, noise, J_in):
    """The heat-bath block update that :func:`gibbs_sweep` plugs into
    :func:`~isingattn.inference.mcmc.sweep.blocked_sweep`: ``b`` consecutive spins, in order,
    for every chain and model (spin-major: the block's spins on axis 0).

    G: ``[b, ...]`` their local fields with the block's OLD spins; s: ``[b, ...]`` old
    spins (0 = inactive, kept 0); noise: ``(t,)``, thresholds ``[b, ...]`` from
    :func:`sweep_thresholds`; J_in: ``[b, b, ...]`` couplings inside the block. Returns
    the new spins and, as the count, the block's energy change ``-Σ_i (s_i' - s_i) f_i``
    ``[...]`` (flips are counted per sweep).

    Spin ``i`` sees the spins ``j < i`` of the block already updated:
    ``f_i = G_i + Σ_{j<i} J_ij (s_j' - s_j)``. Unrolled, this is ONE elementwise XLA
    fusion over chains and models (b(b-1)/2 multiply-adds each); up to b = 8 XLA keeps
    it one fusion, at b = 16 it splits it and recomputes (measured).
    """
    (t,) = noise
    new, d = [], []
    dE = 0.0
    for i in range(G.shape[0]):
        f = G[i]
        for j in range(i):
            f = f + J_in[i, j] * d[j]
        a = jnp.abs(s[i])
        new.append(jnp.where(f > t[i], a, -a))
        d.append(new[i] - s[i])
        dE = dE - d[i] * f
    return jnp.stack(new), dE


def sweep_thresholds(key, shape, dtype, beta):
    """The noise of one sweep: ``logistic / 2β``, ``[*shape]``. Spin ``i`` becomes +1
    iff its local field exceeds its threshold, which happens with probability
    ``sigmoid(2β f_i)``: the heat-bath rule, with no transcendental in the sweep."""
    return prng.logistic(key, shape, dtype) * (0.5 / jnp.asarray(beta, dtype))


def gibbs_sweep(key, state: GibbsState, h, J, beta, classes: Optional[Sequence[Sequence[int]]] = None):
    """One heat-bath sweep: every active spin is resampled once from its conditional
    ``p(s_i = +1 | rest) = sigmoid(2β (h_i + Σ_j J_ij s_j))``.

    Args:
        key: PRNG key (one key for the whole array of chains given).
        state: :class:`GibbsState` with spins ``[..., n]``.
        h: fields ``[..., n]``, J: couplings ``[..., n, n]`` (symmetric, zero
            diagonal), both broadcast against ``state.spins``; beta: scalar > 0.
        classes: static sequence of index sequences partitioning ``range(n)``,
            visited in order; spins of one class are updated in parallel and must
            be pairwise uncoupled. ``None``: systematic scan ``0, 1, ..., n-1``.

    Returns:
        ``(GibbsState, GibbsInfo)``. Cost ``O(n²)`` per model: for the systematic
        scan, :func:`~isingattn.inference.mcmc.sweep.blocked_sweep` with the heat-bath
        update (``n / SWEEP_BLOCK`` field GEMMs plus one small fusion per block); for
        classes, one field GEMM and an ``O(n · |class|)`` update per class.
    """
    t = sweep_thresholds(key, state.spins.shape, state.spins.dtype, beta)
    return sweep_with_thresholds(t, state, h, J, classes)


def sweep_with_thresholds(t, state: GibbsState, h, J, classes=None):
    """:func:`gibbs_sweep` with its noise given: ``t [..., n]`` from :func:`sweep_thresholds`
    (so that a run can draw the noise of many sweeps at once)."""
    s = state.spins
    new_t, dE, flips = spin_major_sweep(jnp.moveaxis(t, -1, 0), jnp.moveaxis(s, -1, 0), h, J, classes)
    rate = flips / jnp.maximum(jnp.abs(s).sum(-1), 1)
    return GibbsState(jnp.moveaxis(new_t, 0, -1)), GibbsInfo(rate, dE)


def spin_major_sweep(t_t, s_t, h, J, classes=None):
    """The sweep of :func:`sweep_with_thresholds` in the layout the run loop carries: spins and
    thresholds spin-major, ``[n, ...]`` (chains and models trailing). Returns the new spins
    ``[n, ...]``, the energy change ``[...]`` and the number of spins flipped ``[...]``."""
    n, r = s_t.shape[0], s_t.ndim - 1
    dtype = s_t.dtype
    if isinstance(J, SparseCouplings):
        J = J.astype(dtype)
    else:
        J = jnp.asarray(J, dtype)
        J = J.reshape((1,) * max(r - (J.ndim - 2), 0) + J.shape)  # batch axes aligned with the spins'
    h = jnp.asarray(h, dtype)

    if isinstance(J, SparseCouplings):
        if classes is None:
            raise IsingInputError("a Gibbs sweep on sparse couplings needs colour classes (they are what makes it "
                                  "parallel): pass classes=color_classes(J) or a proper colouring of J.graph.")
        return _sparse_class_sweep(t_t, s_t, h, J, classes)
    if classes is None:  # the shared blocked scan
        h_t, J_t = spin_major(h, J, r)
        new_t, dE = blocked_sweep(heat_bath_update, s_t, h_t, J_t, (t_t,), jnp.zeros(s_t.shape[1:], dtype))
    else:  # colour classes: every spin of a class at once (they are mutually uncoupled)
        s = jnp.moveaxis(s_t, 0, -1)
        field = jnp.broadcast_to(local_field(h, J, s), s.shape)  # once per sweep: no rounding drift builds up
        # a class's fields, thresholds and coupling rows are leading-axis gathers
        f_t = jnp.moveaxis(field, -1, 0)
        a_t = jnp.abs(s_t)  # 1 active, 0 inactive (held at 0)
        J_t = jnp.moveaxis(J, (-2, -1), (0, 1))  # [i, k, *batch]: row i of J, over spins k
        idx, valid = _class_table(classes, n)
        pad = (slice(None),) + (None,) * r

        def step(carry, cls):
            s_t, f, dE = carry
            i, ok = cls  # [m] indices of the class, [m] validity
            new = jnp.where(f[i] > t_t[i], a_t[i], -a_t[i])
            d = (new - s_t[i]) * ok.astype(dtype)[pad]  # [m, ...]: 0 or ±2; 0 for padding
            dE = dE - jnp.sum(d * f[i], axis=0)
            return (s_t.at[i].add(d), f + jnp.einsum("mk...,m...->k...", J_t[i], d), dE), None

        (new_t, _, dE), _ = lax.scan(step, (s_t, f_t, jnp.zeros(s_t.shape[1:], dtype)),
                                     (jnp.asarray(idx), jnp.asarray(valid)))
    return new_t, dE, 0.5 * jnp.abs(new_t - s_t).sum(0)


def _sparse_class_sweep(t_t, s_t, h, J: SparseCouplings, classes):
    """The colour-class sweep on sparse couplings, spin-major: ``t_t, s_t [n, ...]``
    (thresholds, spins; chains and models trailing), ``h [..., n]``. A class's fields are
    gathers over the neighbour table, ``h_i + Σ_k w_ik s_{nbr(i, k)}``: O(|class| · degree)
    per class, O(n · degree) = O(E) per sweep, with no dense ``J`` anywhere. Returns the new
    spins ``[n, ...]``, the energy change and the flips ``[...]``.

    A spin flips where the sign of ``f - t`` differs from its own; each flip changes the energy
    by ``2 s f``. Both sums over the class are one product with a row of ones (a GEMV): XLA
    fuses a plain column sum into the field's gather and computes the gather twice."""
    h_t, W_t = sparse_spin_major(h, J, s_t.ndim - 1)  # [n, *batch'], [n, d, *batch']
    rest = s_t.shape[1:]
    sums = 0.0
    for c in classes:  # few classes (a colouring); each is one gather, one fused update, one scatter
        i = np.asarray(c, np.int32)
        f = sparse_field_rows(h_t, W_t, J.graph.nbr, i, s_t)  # [m, ...]
        old = s_t[i]
        flip = (f > t_t[i]) != (old > 0)  # an inactive spin (0) stays 0 whatever flip says
        m = len(c)
        both = jnp.concatenate([jnp.where(flip, 2 * old * f, 0).reshape(m, -1),
                                jnp.where(flip, jnp.abs(old), 0).reshape(m, -1)], axis=1)
        sums = sums + jnp.ones((1, m), s_t.dtype) @ both
        s_t = s_t.at[i].set(jnp.where(flip, -old, old), unique_indices=True, indices_are_sorted=True)
    M = int(np.prod(rest, dtype=int))
    sums = jnp.broadcast_to(sums, (1, 2 * M))
    return s_t, sums[0, :M].reshape(rest), sums[0, M:].reshape(rest)


def init_spins(key, shape, active=None, dtype=jnp.float32) -> GibbsState:
    """Uniformly random ±1 spins of ``shape`` (``[..., n]``); inactive spins are 0."""
    s = jax.random.rademacher(key, shape, dtype=dtype)
    if active is not None:
        s = jnp.where(active, s, jnp.zeros((), dtype))
    return GibbsState(s)


# The uniform kernel names every chain kernel has (blackjax style): ``init`` and a pure ``step(key, state, ...)``.
init = init_spins
step = gibbs_sweep
