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
A constant spin's magnetization is clipped to ``±(1 - l2)``, so its field stays finite; the
ridge must therefore be below 1 (it is also on the scale of ``C``, whose diagonal is
``1 - m_i² ≤ 1``), and ``l2 ≥ 1`` is refused.

How well the fit holds is judged on the moments of the approximation itself
(:func:`approximation_moments`): the self-consistent means, found by iterating the
mean-field (or TAP) equation from the data's means, and the pair moments
``⟨s_i s_j⟩ = χ_ij + m_i m_j`` of its linear response ``χ``. Both must reproduce the data
(:func:`isingattn.learn.fit` compares them, and the exact moments where an exact engine is cheap).
"""

from __future__ import annotations

import numpy as np

from isingattn.errors import IsingInputError
from isingattn.learn.data import Data, chunk_rows

__all__ = ["fit_mf"]


def _moments(data: Data):
    """``m [n]`` and ``C [n, n]`` of the data (weighted, float64 numpy), in chunks of samples.
    ``C`` is summed from centred samples, so constant columns give exactly 0 (the ridge's
    inverse would amplify the rounding of ``⟨s sᵀ⟩ - m mᵀ`` into couplings)."""
    S, n = data.spins.shape
    B = chunk_rows(S, n)
    p = data.p.astype(np.float64)
    p = p / p.sum()
    m, C = np.zeros(n), np.zeros((n, n))
    for a in range(0, S, B):
        m += p[a:a + B] @ data.spins[a:a + B].astype(np.float64)
    for a in range(0, S, B):
        d, q = data.spins[a:a + B].astype(np.float64) - m, p[a:a + B]
        C += (d * q[:, None]).T @ d
    return m, C


def approximation_moments(g, K, tap: bool, m0, iterations: int = 500):
    """The moments of the fitted parameters (``g = βh [n]``, ``K = βJ [n, n]``, float64) under
    the approximation that fitted them: the means ``m [n]`` that solve the mean-field (``tap``:
    TAP) equation, iterated from ``m0`` (the data's means) with damping, and the pair moments
    ``[n, n]`` ``χ + m mᵀ`` of its linear response ``χ``. Returns ``(m, pair, residual)``, the
    last the equation's final ``max |m - tanh(·)|`` (not small: no fixed point was reached)."""
    m = np.asarray(m0, np.float64)
    f = np.zeros_like(m)
    for _ in range(iterations):
        f = g + K @ m - (m * ((K * K) @ (1 - m * m)) if tap else 0.0)
        new = np.tanh(f)
        if np.max(np.abs(new - m), initial=0.0) < 1e-13:
            m = new
            break
        m = 0.5 * (m + new)
    f = g + K @ m - (m * ((K * K) @ (1 - m * m)) if tap else 0.0)
    residual = float(np.max(np.abs(np.tanh(f) - m), initial=0.0))
    one = np.maximum(1 - m * m, 1e-300)
    inv = -K - (2 * K * K * np.outer(m, m) if tap else 0.0)
    diag = 1 / one + ((K * K) @ (1 - m * m) if tap else 0.0)
    inv[np.diag_indices_from(inv)] = diag
    with np.errstate(all="ignore"):
        try:
            chi = np.linalg.inv(inv)
        except np.linalg.LinAlgError:
            chi = np.full_like(inv, np.nan)
    return m, chi + np.outer(m, m), residual


def fit_mf(data: Data, *, beta: float, l2: float, tap: bool):
    """``method="mf"`` (``tap=False``) or ``"tap"`` (module docstring). Returns ``(h, w, info)``
    (numpy, in the data's dtype); the algebra is float64."""
    pattern = data.pattern
    n = pattern.n
    if l2 >= 1:
        raise IsingInputError(f"fit(method=\"{'tap' if tap else 'mf'}\"): l2 = {l2:g} must be below 1: it is the ridge "
                              "C + l2 I on correlations whose diagonal is 1 - m² ≤ 1, and a constant spin's mean is "
                              "clipped to ±(1 - l2). Use e.g. l2 = 1e-4 (the default), or 0.1 for strong smoothing.")
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
    mean, pair, residual = approximation_moments(g, Kp, tap, m)
    with np.errstate(invalid="ignore"):  # against the data's own moments (m above is clipped)
        gap = max(float(np.max(np.abs(mean - data.mean.astype(np.float64)))),
                  float(np.max(np.abs(pair[i, j] - data.pair.astype(np.float64)), initial=0.0)))
    info.update(iterations=0, grad_norm=None, converged=bool(np.all(np.isfinite(g)) and np.all(np.isfinite(Kp))),
                status="closed form", dropped_weight=dropped,
                approximation_moment_error=gap if np.isfinite(gap) else float("inf"),
                approximation_residual=residual)
    dt = data.dtype
    return (g / beta).astype(dt), (K[i, j] / beta).astype(dt), info
