"""Pfaffians of real skew-symmetric matrices in float64, on the host (numpy/scipy).

* :func:`slog_pfaffian`: sign and ``log|Pf|`` of a small dense matrix (Parlett–Reid
  elimination with pivoting, ``O(n³)``), the one place a Pfaffian's *sign* is computed.
* :class:`SparseSkew`: ``log|Pf(K)| = ½ log|det K|`` of a large sparse ``K`` from scipy's
  sparse LU (SuperLU), and solves with it (entries of ``K⁻¹``).
* :func:`update_ratio`: ``Pf(K + Δ) / Pf(K)``, signed, for ``Δ`` supported on a few rows
  and columns ``S`` (the wrap-around edges of a torus), from ``G = (K⁻¹)_SS`` alone.
"""

from __future__ import annotations

import math

import numpy as np
import scipy.sparse as sp
from scipy.sparse.linalg import splu

_SOLVE_CHUNK = 16  # right-hand sides per sparse solve (SuperLU's per-column cost grows with wider blocks)


def slog_pfaffian(A) -> tuple[float, float]:
    """``(sign, log|Pf(A)|)`` of a dense real skew-symmetric ``A [2m, 2m]`` (``(0, -inf)`` when
    singular; ``(1, 0)`` for ``m = 0``).

    Parlett–Reid: eliminate two rows and columns at a time with a pivot of largest modulus
    from the first column (a congruence ``P A Pᵀ`` costs a sign per swap), so ``Pf`` is the
    product of the pivots; in log form, so that no size overflows."""
    A = np.array(A, dtype=np.float64, copy=True)
    n = A.shape[0]
    if A.ndim != 2 or A.shape[1] != n or n % 2:
        raise ValueError(f"slog_pfaffian needs a square matrix of even size; got shape {A.shape}.")
    sign, logabs = 1.0, 0.0
    for k in range(0, n - 1, 2):
        kp = k + 1 + int(np.argmax(np.abs(A[k + 1:, k])))
        if kp != k + 1:  # swap rows and columns k+1 <-> kp: Pf changes sign
            A[[k + 1, kp], :] = A[[kp, k + 1], :]
            A[:, [k + 1, kp]] = A[:, [kp, k + 1]]
            sign = -sign
        piv = A[k, k + 1]
        if piv == 0.0:
            return 0.0, -math.inf
        sign *= math.copysign(1.0, piv)
        logabs += math.log(abs(piv))
        if k + 2 < n:
            tau = A[k, k + 2:] / piv
            col = A[k + 2:, k + 1]
            A[k + 2:, k + 2:] += np.outer(tau, col) - np.outer(col, tau)
    return sign, logabs


class SparseSkew:
    """A sparse LU of a real skew-symmetric ``K [N, N]`` (scipy.sparse, float64), for
    ``log|Pf(K)|`` and solves.

    SuperLU with partial pivoting (``K``'s diagonal is zero) and a minimum-degree column order
    on ``KᵀK``'s pattern: with pivoting, that order keeps the fill near the planar
    ``O(N log N)`` (on the lattice's ``K``, ``K + Kᵀ``'s order fills 50 times more)."""

    def __init__(self, K):
        self.K = sp.csc_matrix(K, dtype=np.float64)
        self.N = self.K.shape[0]
        self.lu = splu(self.K, permc_spec="MMD_ATA") if self.N else None

    @property
    def log_abs_pf(self) -> float:
        """``½ log|det K|`` (``-inf`` when ``K`` is singular)."""
        if not self.N:
            return 0.0
        d = np.abs(self.lu.U.diagonal())
        with np.errstate(divide="ignore"):
            return 0.5 * float(np.sum(np.log(d)))

    def columns(self, cols, rows=None):
        """``K⁻¹[rows, cols]`` (``rows`` None: all ``N``), by solves in chunks of columns."""
        cols = np.asarray(cols, np.int64)
        out = np.empty((self.N if rows is None else len(rows), cols.size))
        for a in range(0, cols.size, _SOLVE_CHUNK):
            c = cols[a:a + _SOLVE_CHUNK]
            rhs = np.zeros((self.N, c.size))
            rhs[c, np.arange(c.size)] = 1.0
            x = self.lu.solve(rhs)
            out[:, a:a + c.size] = x if rows is None else x[rows]
        return out

    def entries(self, rows, cols):
        """``K⁻¹[rows[k], cols[k]]`` for every ``k`` (``[k]``), solving once per distinct column."""
        rows, cols = np.asarray(rows, np.int64), np.asarray(cols, np.int64)
        uniq, which = np.unique(cols, return_inverse=True)
        out = np.empty(rows.size)
        for a in range(0, uniq.size, _SOLVE_CHUNK):
            c = uniq[a:a + _SOLVE_CHUNK]
            rhs = np.zeros((self.N, c.size))
            rhs[c, np.arange(c.size)] = 1.0
            x = self.lu.solve(rhs)
            k = np.flatnonzero((which >= a) & (which < a + c.size))
            out[k] = x[rows[k], which[k] - a]
        return out


def woodbury_core(G, c):
    """``G + C⁻¹`` for the block ``C`` of :func:`update_ratio`: the matrix whose Pfaffian gives the
    ratio and whose inverse gives ``(K + Δ)⁻¹ = K⁻¹ - K⁻¹ U (G + C⁻¹)⁻¹ Uᵀ K⁻¹`` (Woodbury)."""
    c = np.asarray(c, np.float64)
    M = np.array(G, dtype=np.float64, copy=True)
    i = np.arange(c.size)
    M[2 * i, 2 * i + 1] -= 1.0 / c
    M[2 * i + 1, 2 * i] += 1.0 / c
    return M


def update_ratio(G, c) -> tuple[float, float]:
    """``(sign, log|r|)`` of ``r = Pf(K + Δ) / Pf(K)``, where ``Δ`` couples the pairs
    ``(S[2e], S[2e+1])`` by ``Δ[S[2e], S[2e+1]] = c[e]`` (and ``-c[e]`` transposed) and
    ``G = K⁻¹[S, S]``, ``S`` ordered pair by pair (``2k`` nodes, every ``c[e] ≠ 0``).

    With ``C`` the ``2k × 2k`` skew block of ``Δ`` on ``S``, ``Pf(K + U C Uᵀ) = Pf(K) · (-1)^k
    Pf(C) Pf(G + C⁻¹)`` (the Pfaffian form of the matrix determinant lemma: both sides are
    polynomials in ``C`` whose squares agree, and they agree at ``C → 0``); ``Pf(C) = Π c``
    and ``C⁻¹`` is block-diagonal with ``-1/c`` above the diagonal."""
    c = np.asarray(c, np.float64)
    k = c.size
    if k == 0:
        return 1.0, 0.0
    s, log_pf = slog_pfaffian(woodbury_core(G, c))
    sign = s * (-1.0) ** k * float(np.prod(np.sign(c)))
    return sign, log_pf + float(np.sum(np.log(np.abs(c))))
