"""The Ising energy, written once and shared by the model and every engine.

Convention (DESIGN.md §1): ``E(s) = -Σ_j h_j s_j - Σ_{j<k} J_jk s_j s_k`` with ``J``
stored full, symmetric and zero on the diagonal, so the pair sum is ``½ sᵀ J s``.

Each term broadcasts on its own: evaluating a table of ``2^n`` configurations
(:func:`spin_table`) against ``Q`` field vectors costs ``O(Q 2^n n)`` for the fields
but only ``O(2^n n²)`` for a shared ``J``.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from isingattn.sparse import SparseCouplings


def field_energy(h, s):
    """``-Σ_j h_j s_j``.  h: [..., n], s: [..., n] (broadcast) -> [...]."""
    return -jnp.einsum("...j,...j->...", h, s)


def coupling_energy(J, s):
    """``-Σ_{j<k} J_jk s_j s_k = -½ sᵀ J s``.  J: [..., n, n] or
    :class:`~isingattn.sparse.SparseCouplings` (O(E)), s: [..., n] -> [...]."""
    if isinstance(J, SparseCouplings):
        return J.pair_energy(s)
    return -0.5 * jnp.einsum("...j,...jk,...k->...", s, J, s)


def cross_energy(J, s, t):
    """Coupling energy between two disjoint spin blocks, for every pair of rows of
    two configuration tables: ``-s_a ᵀ J t_b``.

    J: [..., n, m], s: [..., A, n], t: [..., B, m] -> [..., A, B] (two GEMMs).
    """
    return -(s @ J) @ jnp.swapaxes(t, -1, -2)


def local_field(h, J, s):
    """``h + J s``: the field on every spin, ``-∂E/∂s``; a flip of ``s_j`` changes the
    energy by ``2 s_j (h + J s)_j``.  h: [..., n], J: [..., n, n], s: [..., n] -> [..., n].

    ``J`` is symmetric, so this is ``s @ J``: with a shared ``J`` one GEMM over all
    chains and models. A :class:`~isingattn.sparse.SparseCouplings` ``J`` is a gather
    over its neighbour table instead, O(n · degree)."""
    if isinstance(J, SparseCouplings):
        return h + J.field(s)
    return h + jnp.einsum("...j,...jk->...k", s, J)


def local_field_rows(h, J, s):
    """``local_field`` of ``m`` spins in spin-major layout, for samplers that keep the
    spins as ``[n, ...]`` (chains and models trailing and contiguous, so a block of
    rows is one GEMM over all of them).

    h: [m, ...] their fields; J: [m, n] or [m, n, ...] their rows of J; s: [n, ...]
    -> [m, ...]."""
    if J.ndim == 2:  # one J for every chain and model: a plain GEMM
        return h + (J @ s.reshape(s.shape[0], -1)).reshape((J.shape[0],) + s.shape[1:])
    return h + jnp.einsum("mk...,k...->m...", J, s)


def energy(h, J, s):
    """Total energy ``E(s)``.  h: [..., n], J: [..., n, n], s: [..., n] -> [...]."""
    return field_energy(h, s) + coupling_energy(J, s)


def spins_from_index(idx, n: int, dtype=jnp.float32):
    """Configuration indices ``[...]`` -> spins ``[..., n]``: spin ``j`` is bit ``n-1-j``
    of the index, bit 0 is ``s = +1`` (row ``idx`` of :func:`spin_table`)."""
    bits = (idx[..., None] >> jnp.arange(n - 1, -1, -1, dtype=idx.dtype)) & 1
    return (1 - 2 * bits).astype(dtype)


def spin_table(n: int, dtype) -> jax.Array:
    """All ``2^n`` configurations as a ``[2^n, n]`` table of ±1 (row 0 is all +1), in the
    order of :func:`spins_from_index`; every enumerating engine uses this order."""
    return spins_from_index(jnp.arange(2**n, dtype=jnp.int32), n, dtype)
