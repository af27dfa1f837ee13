"""The message layouts of Banded's blocked transfer (``banded_vjp``), and the GEMMs of one step in each.

**Layouts.** Messages are ``[G, O, P, A, C, RC, rb]``: G the batch along which J varies, O the
offset classes (below), P the pair (value, tangent), ``(A, C)`` the window state, RC rows per
class, rb sequences of the chunk; rows last, so that work along states vectorizes along them.
For ``L = 2k`` the state after an even step is stored ``(y, s)`` (newest block first) and after
an odd step ``(s, y)``: the GEMM of an even step contracts the leading block, that of an odd
step the trailing one (batched over the other), and both write the next layout directly, with
no transposes. Reductions over states are written as trees of slices (XLA fuses them into one
pass; its reduce over a major axis is slow on the CPU).
"""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
from isingattn.inference.banded.band import CAUSAL_GROUPS
from jax import lax

# causal: groups of steps, each over the rows still live at its start: work (1 + 1/G)/2 of full chains, and
# G scans per pass to compile. Chains of 32 steps or more (T = 128 at w = 8) get twice banded_blocked's.
LONG_CHAIN = 32


def tree(x, axis: int, op):
    """Reduce ``axis`` by halving slices (one fused pass; sizes are powers of 2)."""
    while x.shape[axis] > 1:
        h = x.shape[axis] // 2
        x = op(lax.slice_in_dim(x, 0, h, axis=axis), lax.slice_in_dim(x, h, 2 * h, axis=axis))
    return jnp.squeeze(x, axis)


def tree_sum(x, axis):
    return tree(x, axis, jnp.add)


class Plan:
    """Static shapes of one call, and the step algebra in the alternating layouts.

    Messages are ``[G, O, P, A, C, R]``; the state after step b is in layout ``q = b % 2``: for
    ``L = 2k``, q = 0 stores ``(A, C) = (y, s)`` (newest block first) and q = 1 stores ``(s, y)``; for
    ``L = k`` the state is ``(y, 1)`` in both."""

    def __init__(self, L, k, nb, G, O, RC, rb, causal):
        self.L, self.k, self.nb, self.causal = L, k, nb, causal  # nb even
        self.G, self.O, self.RC, self.rb = G, O, RC, rb
        self.nk, self.ns, self.nL = 2**k, 2 ** (L - k), 2**L
        self.alt = self.ns > 1
        pairs = nb // 2
        ng = min(CAUSAL_GROUPS * (2 if nb >= LONG_CHAIN else 1), pairs) if causal else 1
        bounds = [2 * ((g * pairs) // ng) for g in range(ng + 1)]
        # causal: row rc ends at step rc, and the rows live in group g are rc >= its first step
        self.groups = [(b0, b1, b0 if causal else 0) for b0, b1 in zip(bounds[:-1], bounds[1:])]
        self.end = np.arange(RC) if causal else np.full(RC, nb - 1)

    def rows(self, lo):
        return (self.RC - lo) * self.rb

    def end_rows(self, lo):  # end step of every row (rc, rb) of the rows rc >= lo
        return np.repeat(self.end[lo:], self.rb).astype(np.int32)

    def first(self, q):  # does the state of layout q hold y in its leading axis?
        return not self.alt or q == 0

    def bcast(self, T, q):
        """A table ``T [G, O, s, y]`` against messages ``[G, O, A, C, R]`` in layout q."""
        T = jnp.swapaxes(T, -1, -2) if self.first(q) else T
        return T[..., None]

    def bcast_y(self, d, q):
        """Per-row ``d [G, O, y, R]`` against messages in layout q."""
        return d[:, :, :, None] if self.first(q) else d[:, :, None]

    def features(self, q, dt):
        """``[k+1, A·C]``: the spins y_t of every state of layout q, and a row of ones."""
        Sk = 1.0 - 2.0 * ((np.arange(self.nk)[:, None] >> np.arange(self.k - 1, -1, -1)[None, :]) & 1)  # = spin_table
        y = Sk[:, None, :] if self.first(q) else Sk[None, :, :]
        y = np.broadcast_to(y, ((self.nk, self.ns) if self.first(q) else (self.ns, self.nk)) + (self.k,))
        return jnp.asarray(np.concatenate([y.reshape(-1, self.k).T, np.ones((1, self.nL))]), dt)

    def gemm(self, a, K, q):
        """Forward at step b (layout q): the state after b-1 ``a [G, O, A, C, R]`` and ``K [G, O, l, nk+1]``
        (K1 and a column of ones) -> ``Σ_l K1(l, y) a(l, s)`` in layout q and ``Σ_l a(l, s)`` ``[G, O, ns, R]``."""
        G, O, A, C, R = a.shape
        nk = self.nk
        if self.first(q):  # contract the leading block
            out = lax.dot_general(K, a.reshape(G, O, A, C * R), (((2,), (2,)), ((0, 1), (0, 1))))
            out = out.reshape(G, O, nk + 1, C, R)
            return out[:, :, :nk], out[:, :, nk]
        Kb = jnp.broadcast_to(K[:, :, None], (G, O, A) + K.shape[2:])  # contract the trailing block
        out = lax.dot_general(Kb, a, (((3,), (3,)), ((0, 1, 2), (0, 1, 2))))  # [G, O, A, nk+1, R]
        return out[:, :, :, :nk], out[:, :, :, nk]

    def gemm_back(self, v, K, q):
        """Backward at step b: ``v`` in layout q and ``K [G, O, nk+1, y]`` (K1 and its column sums) -> the state
        after b-1 with one more entry along l, holding ``Σ_l`` of it (see ``split``)."""
        G, O, A, C, R = v.shape
        if self.first(q):  # y leads
            out = lax.dot_general(K, v.reshape(G, O, A, C * R), (((3,), (2,)), ((0, 1), (0, 1))))
            return out.reshape(G, O, self.nk + 1, C, R)
        Kb = jnp.broadcast_to(K[:, :, None], (G, O, A) + K.shape[2:])  # y trails
        return lax.dot_general(Kb, v, (((4,), (3,)), ((0, 1, 2), (0, 1, 2))))  # [G, O, A, nk+1, R]

    def gemm_plain_back(self, v, K1, q):
        """Backward at step b: ``v`` in layout q and ``K1 [G, O, l, y]`` -> ``Σ_y K1(l, y) v(s, y)``, the state after
        step b-1 (layout 1-q)."""
        G, O, A, C, R = v.shape
        if self.first(q):  # y leads
            out = lax.dot_general(K1, v.reshape(G, O, A, C * R), (((3,), (2,)), ((0, 1), (0, 1))))
            return out.reshape(G, O, self.nk, C, R)
        Kb = jnp.broadcast_to(K1[:, :, None], (G, O, A) + K1.shape[2:])  # y trails
        return lax.dot_general(Kb, v, (((4,), (3,)), ((0, 1, 2), (0, 1, 2))))  # [G, O, A, l, R]

    def state_shape(self, q, R):
        A, C = ((self.nk, self.ns) if q == 0 else (self.ns, self.nk)) if self.alt else (self.nk, 1)
        return (self.G, self.O, A, C, R)

    def split(self, out, q):
        """``gemm_back``'s output at step b+1 -> the state after step b (layout q) and its sums ``[G, O, ns, R]``."""
        nk = self.nk
        if not self.alt or q == 1:  # made by a leading-y step: the extra entry is along A
            return out[:, :, :nk], out[:, :, nk]
        return out[:, :, :, :nk], out[:, :, :, nk]

    def rows_gemm(self, prev, yq, q):
        """``Σ_{s, rows} prev(l, s) yq(s, y)`` -> ``[G, O, l, y]``: prev the state after step b-1, yq in layout q."""
        G, O, A, C, R = yq.shape
        if self.first(q):  # prev (l, s), yq (y, s): contract s and the rows
            return lax.dot_general(prev.reshape(G, O, A, C * R), yq.reshape(G, O, A, C * R),
                                   (((3,), (3,)), ((0, 1), (0, 1))))
        out = lax.dot_general(prev, yq, (((4,), (4,)), ((0, 1, 2), (0, 1, 2))))  # prev (s, l), yq (s, y)
        # the sum over s apart: XLA:CPU fuses it into the dot as a slow kernel (40x)
        return tree_sum(lax.optimization_barrier(out), 2)

    def project(self, X, q):
        """``X [G, O, A, C, R]`` -> ``[G, O, k+1, R]``: ``Σ_x y_t(x) X(x)`` and ``Σ_x X(x)``."""
        G, O, A, C, R = X.shape
        F = jnp.broadcast_to(self.features(q, X.dtype), (G, O, self.k + 1, A * C))
        return lax.dot_general(F, X.reshape(G, O, A * C, R), (((3,), (2,)), ((0, 1), (0, 1))))

    def window_sums(self, X, w, q):
        """``Σ_rows X(s, y) w`` -> ``[G, O, s, y]``: X in layout q, w ``[G, O, R]``."""
        G, O, A, C, R = X.shape
        out = lax.dot_general(X.reshape(G, O, A * C, R), w, (((3,), (2,)), ((0, 1), (0, 1)))).reshape(G, O, A, C)
        return jnp.swapaxes(out, -1, -2) if self.first(q) else out

    def initial(self, R, dt):
        """The state before step 0 (layout 1): every window spin +1, no couplings."""
        A, C = (self.ns, self.nk) if self.alt else (self.nk, 1)
        return jnp.zeros((self.G, self.O, A, C, R), dt).at[:, :, 0, 0].set(1.0)

    def carry0(self, R, dt):
        """A ``gemm_back`` output of the shape the last step (layout 1) splits: its values are never used."""
        A, C = (self.nk + 1, self.ns) if self.alt else (self.nk + 1, 1)
        return jnp.zeros((self.G, self.O, A, C, R), dt)
