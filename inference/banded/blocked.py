"""The blocked path of the Banded engine: the static check of where it applies, and the dispatch to the
native CPU kernel (``native``) or the XLA graph with its hand-written VJP (``vjp``)."""

from __future__ import annotations

import numpy as np
from isingattn.inference.banded import native as banded_native
from isingattn.inference.banded.band import BLOCK_MAX, MAX_BLOCKS, block_len
from isingattn.inference.banded.vjp import blocked


def blocked_layout(h_shape, J_shape, w: int, causal: bool, user_mask, want_corr: bool):
    """Static check whether the blocked path applies; returns ``(lead, k)`` or None.

    The batch is split into ``lead`` dims and ``k`` trailing "row" dims over which J is
    shared (broadcast), so that one block step is a GEMM ``[rows, 2^L] @ [2^L, 2^L]``. Causal
    models use the query axis as the row axis (J must not vary along it)."""
    n = h_shape[-1]
    if want_corr or user_mask is not None or n == 0:
        return None
    L, k = block_len(n, w)
    if L + k > BLOCK_MAX or -(-n // k) > MAX_BLOCKS:
        return None
    batch = tuple(np.broadcast_shapes(h_shape[:-1], J_shape[:-2]))
    jb = (1,) * (len(batch) - (len(J_shape) - 2)) + tuple(J_shape[:-2])
    if causal:
        if not batch or batch[-1] != n or jb[-1] != 1:
            return None
        k = 1
    else:
        k = 0
        while k < len(batch) and jb[len(batch) - 1 - k] == 1:
            k += 1
    return batch, jb, k


def blocked_solve(h, J, beta, w: int, causal: bool, layout):
    """Exact ``mean``, ``log_z`` and the underflow bound ``lost`` (as ``_scaled``) by forward–backward that adds
    ``k`` spins per step to a window of ``L ≥ w`` spins (``L = 2k``, or ``L = k``), with a hand-written VJP:
    :func:`isingattn.inference.banded.vjp.blocked` (the algorithm, its derivation and its layouts are there).
    ``layout`` from :func:`blocked_layout`."""
    if banded_native.applies(h, beta, w):  # the same forward–backward as a CPU kernel
        return banded_native.native(h, J, beta, w, causal, layout)
    return blocked(h, J, beta, w, causal, layout)
