"""Symmetric pseudo-likelihood maximization (plmDCA's objective for Ising spins), ``method="plm"``.

Minimizes over ``h [n]`` and the shared couplings ``w [E]`` (``J_ij = J_ji = w_e``: one
parameter per pair, as in the symmetric plmDCA of Ekeberg, Lövkvist, Weigt & Aurell 2013)

    f(h, w) = -Σ_s p_s Σ_i log σ(2β s_i (h_i + Σ_j J_ij s_j)) + l2 (‖h‖² + ‖w‖²) + l1 ‖w‖₁,

with ``p_s`` the normalized sample weights. The conditionals are
:func:`isingattn.learn.score.conditional_log_probs` (the one local field of
:mod:`isingattn.energy`), so every spin is one column of one computation:

* all pairs (no graph): the local fields of a chunk of samples are one GEMM ``s J``
  ``[B, n] × [n, n]`` and the gradient one more, ``O(S n²)`` work per evaluation;
* a graph: spin ``i``'s conditional depends on the data only through its local pattern,
  ``(s_i, s_nbr(i, 1), ..., s_nbr(i, d))``, one of ``P = 2^(d+1)`` values. So the weighted
  counts ``c [n, P]`` of the patterns are sufficient statistics (:func:`pattern_counts`, one
  pass over the data when it is prepared, :func:`~isingattn.learn.data.pattern_counts`), and an evaluation is ``O(n P d)``, not ``O(S E)``: the
  fields of all patterns are one GEMM ``W [n, d] × X [d, P]`` (:class:`PatternObjective`).
  Used where ``P ≤ S / 2`` and the counts stay small (``data.PATTERN_ELEMENTS``): low degrees
  (a lattice: ``P = 32``). Otherwise the local field is a gather over the neighbour table,
  ``O(S E)`` work, and the samples are processed in chunks whose ``[B, n, degree]`` gathers
  stay near 128 MiB. Either way the memory is the data (``S × n`` int8) plus ``O(n P + E)``
  or ``O(n + E)``: a 100×100 lattice never forms an ``n × n`` array.

The problem is convex; L-BFGS (OWL-QN with ``l1``, :mod:`isingattn.learn.optimize`) stops
at ``‖gradient‖_∞ ≤ tol``.
"""

from __future__ import annotations

from typing import NamedTuple, Optional

import jax
import jax.numpy as jnp
import numpy as np

from isingattn.sparse import CouplingGraph, SparseCouplings
from isingattn.learn.data import Data, chunk_rows, padded_chunks
from isingattn.learn.exact_ml import coupling_mask, start
from isingattn.learn.optimize import minimize
from isingattn.learn.score import conditional_log_probs, spin_log_conditionals

__all__ = ["PLMObjective", "PatternObjective", "fit_plm", "plm_chunks"]


class PLMObjective(NamedTuple):
    """``fg(x, args)`` of the penalized negative pseudo-log-likelihood (hashable: fits with
    the same ``n``, graph and shapes share one compiled program).

    args: ``(xs, ps [K, B], i [E], j [E], beta, l2)``: the samples in ``K`` chunks of ``B``
    (padding rows have weight 0), int8, ``[K, B, n]`` for all pairs and spin-major
    ``[K, n, B]`` on a graph (:func:`plm_chunks`), and the edge list."""

    n: int
    graph: Optional[CouplingGraph]  # None: all pairs (dense J)

    def __call__(self, x, args):
        xs, ps, i, j, beta, l2 = args
        n, dt = self.n, x.dtype
        h, w = x[:n], x[n:]

        if self.graph is None:
            def loss(h, J, s8, q):  # s8 [B, n]: one GEMM for the fields of the chunk
                return -jnp.sum(q[:, None] * conditional_log_probs(h, J, beta, s8.astype(dt)))

            params = (h, jnp.zeros((n, n), dt).at[i, j].set(w).at[j, i].set(w))
        else:
            from isingattn.inference.mcmc.sweep import sparse_field_rows, sparse_spin_major

            graph = self.graph
            nbr, rows = jnp.asarray(graph.nbr), jnp.arange(n)

            def loss(h, w, s8, q):  # s8 [n, B] spin-major: the neighbours' rows are contiguous gathers
                s_t = s8.astype(dt)
                h_t, W_t = sparse_spin_major(h, SparseCouplings(graph, w), 1)  # [n, 1], [n, d, 1]
                f_t = sparse_field_rows(h_t, W_t, nbr, rows, s_t)  # [n, B]
                return -jnp.sum(q[None, :] * spin_log_conditionals(s_t, f_t, beta))

            params = (h, w)
        vg = jax.value_and_grad(loss, argnums=(0, 1))

        def body(c, xq):
            v, g = vg(*params, *xq)
            return (c[0] + v,) + tuple(a + b for a, b in zip(c[1:], g)), None

        zeros = (jnp.zeros((), dt),) + tuple(jnp.zeros_like(p) for p in params)
        (f, gh, gJ), _ = jax.lax.scan(body, zeros, (xs, ps))
        gw = gJ[i, j] + gJ[j, i] if self.graph is None else gJ
        g = jnp.concatenate([gh, gw]) + 2 * l2 * x
        return f + l2 * (x @ x), g


class PatternObjective(NamedTuple):
    """``fg(x, args)`` of the same objective as :class:`PLMObjective` on a graph, from the
    pattern counts. args: ``(counts [n, P], X [P, d+1] ±1, beta, l2)`` (:func:`pattern_counts`);
    column 0 of ``X`` is the spin itself, column ``k`` its ``k``-th neighbour in ``graph.nbr``."""

    n: int
    graph: CouplingGraph

    def __call__(self, x, args):
        counts, X, beta, l2 = args
        n, dt = self.n, x.dtype

        def loss(h, w):
            W = SparseCouplings(self.graph, w).neighbour_weights()  # [n, d], 0 on padding
            f = h[:, None] + W @ X[:, 1:].T.astype(dt)  # [n, P]: the field of every pattern
            return -jnp.sum(counts * spin_log_conditionals(X[:, 0].astype(dt)[None], f, beta))

        f, (gh, gw) = jax.value_and_grad(loss, argnums=(0, 1))(x[:n], x[n:])
        return f + l2 * (x @ x), jnp.concatenate([gh, gw]) + 2 * l2 * x


def plm_chunks(data: Data):
    """The samples and weights in chunks sized for the work arrays: ``[K, B, n]`` (all
    pairs) or spin-major ``[K, n, B]`` (a graph), and ``[K, B]``."""
    S, n = data.spins.shape
    graph = data.pattern.graph
    d = graph.max_degree if graph is not None else 1
    B = chunk_rows(S, 3 * n * d)
    if graph is None:
        xs = padded_chunks(data.spins, B, 1)
    else:  # spin-major chunks, filled in place (one copy of the data)
        K = -(-S // B)
        xs = np.ones((K, n, B), np.int8)
        for k in range(K):
            block = data.spins[k * B:(k + 1) * B]
            xs[k, :, :len(block)] = block.T
    return xs, padded_chunks(data.p, B, 0)


def fit_plm(data: Data, *, beta: float, l1: float, l2: float, tol: Optional[float], max_iter: Optional[int],
            progress, init=None):
    """``method="plm"`` (module docstring). Returns ``(h [n], w [E], info)``; ``info`` holds the
    optimizer's record and ``pseudo_log_likelihood``, the final mean ``Σ_i log p(s_i | s_-i)``."""
    pattern, dt = data.pattern, data.dtype
    n = pattern.n
    if tol is None:
        tol = 1e-6 if dt == np.float64 else 1e-4
    max_iter = 1000 if max_iter is None else max_iter
    pc = data.patterns
    if pc is not None:  # sufficient statistics: O(n 2^(d+1)) per evaluation
        args = (pc[0], pc[1], np.asarray(beta, dt), np.asarray(l2, dt))
        fg = PatternObjective(n, pattern.graph)
    else:
        xs, ps = plm_chunks(data)
        args = (xs, ps, pattern.edges[:, 0], pattern.edges[:, 1], np.asarray(beta, dt), np.asarray(l2, dt))
        fg = PLMObjective(n, pattern.graph)
    x0 = start(data, beta, init, 'fit(method="plm")')
    mask = coupling_mask(pattern, dt)
    x, _, info = minimize(fg, x0, args, tol=tol, max_iter=max_iter, l1=l1, l1_mask=mask, progress=progress,
                          desc="fit plm", cheap=pc is not None)
    h, w = x[:n], x[n:]
    penalty = float(l2 * (x @ x) + l1 * np.sum(np.abs(w)))
    info.update(tol=tol, pseudo_log_likelihood=-(info["objective"] - penalty),
                plm_path="pattern counts" if pc is not None else "samples")
    return h, w, info
