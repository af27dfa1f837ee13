"""The band of ``J`` and the block sizes of Banded's blocked path, shared by its XLA graph
(``vjp``, ``plan``), its native kernel (``native``) and the dispatch (``blocked``)."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np

from isingattn.sparse import SparseCouplings


def band(J, w):
    """Couplings of each spin to the ``w`` spins before it, in window order.

    J: [..., n, n] or :class:`~isingattn.sparse.SparseCouplings` -> [..., n, w] with
    ``out[..., t, k] = J_{t, t-w+k}`` (0 before spin 0). Dense: symmetrized, so the gradient
    w.r.t. ``J`` is symmetric like ``Exact``'s. Sparse: a scatter of the weights of the edges
    within distance ``w`` (the caller checks that no edge is farther), O(n w), never dense."""
    if isinstance(J, SparseCouplings):
        g = J.graph
        i, j = g.edges[:, 0], g.edges[:, 1]
        near = np.flatnonzero(j - i <= w)  # static: the graph is numpy
        out = jnp.zeros(J.weights.shape[:-1] + (g.n, w), J.dtype)
        return out.at[..., j[near], w - (j - i)[near]].set(J.weights[..., near])
    n = J.shape[-1]
    t = np.arange(n)[:, None]
    src = t - w + np.arange(w)[None, :]  # (n, w)
    ok = src >= 0
    src = np.where(ok, src, 0)
    lower = jnp.take_along_axis(J, jnp.broadcast_to(src, J.shape[:-2] + (n, w)), axis=-1)
    upper = jnp.take_along_axis(jnp.swapaxes(J, -1, -2), jnp.broadcast_to(src, J.shape[:-2] + (n, w)), axis=-1)
    return jnp.where(ok, (lower + upper) / 2, 0.0)


BLOCK_MIN = 4  # spins per block at least (fewer GEMM steps for small w)
BLOCK_MAX = 16  # 2^(L+k) entries per step table
MAX_BLOCKS = 128  # every step's forward message is kept: beyond this, the per-spin sweep (O(sqrt(n)) of them)
CAUSAL_GROUPS = 4  # causal: groups of steps over the rows still live, work (1 + 1/G)/2 of full chains; compile time ~ G


def block_len(n: int, w: int) -> tuple:
    """``(L, k)``: a window of ``L ≥ w`` spins advanced ``k`` spins per step (``k`` divides ``L``).
    Cost per spin ``~2^(L+k) / k``: ``L = 2k`` for ``w ≥ 6`` (``w = 8``: ``k = 4``), else ``L = k``;
    one step of all ``n`` spins when ``n ≤ L``."""
    k = -(-w // 2) if w >= 6 else max(w, BLOCK_MIN)
    L = 2 * k if w >= 6 else k
    return (n, n) if n <= L else (L, k)
