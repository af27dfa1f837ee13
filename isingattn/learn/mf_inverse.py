"""Closed-form inverse Ising from the connected correlations, ``method="mf"`` and ``"tap"``.

With ``m = ⟨s⟩_data``, ``C = ⟨s sᵀ⟩_data - m mᵀ`` and ``A = (C + l2 I)⁻¹`` (the ridge ``l2``
keeps ``C`` invertible when a spin is constant or the samples are few), in units of
``K = βJ`` and ``g = βh``:

* naive mean field (linear response of ``m_i = tanh(g_i + Σ_j K_ij m_j)``):
  ``K_ij = -A_ij`` (``i ≠ j``), ``g_i = atanh m_i - Σ_j K_ij m_j``;
* TAP (Kappen & Rodríguez 1998; Tanaka 1998): the linear response of the TAP equation
  ``m_i = tanh(g_i + Σ_j K_ij m_j - m_i Σ_j K_ij² (1 - m_j²))`` gives
  ``A_ij = -K_ij - 2 K_ij² m_i m_j``, solved for the root that tends to mean field as
  ``m → 0``: ``K_ij = -2 A_ij / (1 + sqrt(1 - 8 A_ij m_i m_j))``. Where the discriminant is
  negative (no real solution: strong coupling or large fields) it is clipped at 0
  (``K_ij = -2 A_ij``) and counted in ``info["tap_clipped"]``. The fields follow from the
  TAP equation, ``g_i = atanh m_i - Σ_j K_ij m_j + m_i Σ_j K_ij² (1 - m_j²)``.

Mean field is exact to first order in the couplings; TAP to second. A graph keeps the
couplings on its edges and drops the others (the inversion itself is dense, ``O(n³)``).
A constant spin's magnetization is clipped to ``±(1 - l2)``, so its field stays finite.
"""

from __future__ import annotations

import numpy as np

from isingattn.errors import IsingInputError
from isingattn.learn.data import Data, chunk_rows

__all__ = ["fit_mf"]


def _moments(data: Data):
    """``m [n]`` and ``C [n, n]`` of the data (weighted, float64 numpy), in chunks of samples."""
    S, n = data.spins.shape
    B = chunk_rows(S, n)
    p = data.p.astype(np.float64)
    m, second = np.zeros(n), np.zeros((n, n))
    for a in range(0, S, B):
        s, q = data.spins[a:a + B].astype(np.float64), p[a:a + B]
        m += q @ s
        second += (s * q[:, None]).T @ s
    return m, second - np.outer(m, m)


def fit_mf(data: Data, *, beta: float, l2: float, tap: bool):
    """``method="mf"`` (``tap=False``) or ``"tap"`` (module docstring). Returns ``(h, w, info)``
    (numpy, in the data's dtype); the algebra is float64."""
    pattern = data.pattern
    n = pattern.n
    m, C = _moments(data)
    try:
        A = np.linalg.inv(C + l2 * np.eye(n))
    except np.linalg.LinAlgError:
        A = np.full((n, n), np.nan)
    if not np.all(np.isfinite(A)):
        raise IsingInputError("the connected correlation matrix is singular (a spin is a copy of another, or constant): "
                              'raise l2 (its ridge) or use method="plm".')
    if l2 > 0:
        m = np.clip(m, -(1 - l2), 1 - l2)
    info = {}
    off = ~np.eye(n, dtype=bool)
    if tap:
        disc = 1 - 8 * A * np.outer(m, m)
        info["tap_clipped"] = int(np.sum(np.triu((disc < 0) & off, 1)))
        K = -2 * A / (1 + np.sqrt(np.maximum(disc, 0.0)))
    else:
        K = -A
    K = np.where(off, K, 0.0)
    i, j = pattern.edges[:, 0], pattern.edges[:, 1]
    Kp = np.zeros_like(K)  # the pattern's couplings only
    Kp[i, j] = K[i, j]
    Kp[j, i] = K[i, j]
    g = np.arctanh(m) - Kp @ m
    if tap:
        g = g + m * ((Kp * Kp) @ (1 - m * m))
    dropped = float(np.sqrt(max(np.sum(K * K) / 2 - np.sum(K[i, j] ** 2), 0.0))) if pattern.graph is not None else 0.0
    info.update(iterations=0, grad_norm=None, converged=bool(np.all(np.isfinite(g))), status="closed form",
                dropped_weight=dropped)
    dt = data.dtype
    return (g / beta).astype(dt), (K[i, j] / beta).astype(dt), info
