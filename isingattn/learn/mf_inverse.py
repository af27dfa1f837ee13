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

import jax.numpy as jnp

from isingattn.errors import IsingInputError
from isingattn.learn.data import Data, chunk_rows, padded_chunks

__all__ = ["fit_mf"]


def _moments(data: Data):
    """``m [n]`` and ``C [n, n]`` of the data (weighted), in chunks of samples."""
    import jax

    S, n = data.spins.shape
    dt = data.dtype
    B = chunk_rows(S, n)

    @jax.jit
    def run(xs, ps):
        def body(c, xq):
            x, q = xq
            s = x.astype(dt)
            return c + (s * q[:, None]).T @ s, None

        second, _ = jax.lax.scan(body, jnp.zeros((n, n), dt), (xs, ps))
        return second

    second = run(padded_chunks(data.spins, B, 1), padded_chunks(data.p, B, 0))
    m = data.mean
    return m, second - jnp.outer(m, m)


def fit_mf(data: Data, *, beta: float, l2: float, tap: bool):
    """``method="mf"`` (``tap=False``) or ``"tap"`` (module docstring). Returns ``(h, w, info)``."""
    pattern = data.pattern
    n = pattern.n
    m, C = _moments(data)
    dt = C.dtype
    A = jnp.linalg.inv(C + l2 * jnp.eye(n, dtype=dt))
    if not bool(jnp.all(jnp.isfinite(A))):
        raise IsingInputError("the connected correlation matrix is singular (a spin is a copy of another, or constant): "
                              "raise l2 (its ridge) or use method=\"plm\".")
    m = jnp.clip(m, -(1 - l2), 1 - l2) if l2 > 0 else m
    info = {}
    if tap:
        mm = jnp.outer(m, m)
        disc = 1 - 8 * A * mm
        clipped = (disc < 0) & ~jnp.eye(n, dtype=bool)
        K = -2 * A / (1 + jnp.sqrt(jnp.maximum(disc, 0.0)))
        info["tap_clipped"] = int(jnp.sum(jnp.triu(clipped, 1)))
    else:
        K = -A
    K = K * (1 - jnp.eye(n, dtype=dt))
    i, j = pattern.edges[:, 0], pattern.edges[:, 1]
    Kp = jnp.zeros_like(K).at[i, j].set(K[i, j]).at[j, i].set(K[i, j])  # the pattern's couplings only
    g = jnp.arctanh(m) - Kp @ m
    if tap:
        g = g + m * ((Kp * Kp) @ (1 - m * m))
    info.update(iterations=0, grad_norm=None, converged=bool(jnp.all(jnp.isfinite(g))), status="closed form",
                dropped_weight=float(jnp.sqrt(jnp.sum(K * K) / 2 - jnp.sum(K[i, j] ** 2))) if pattern.graph is not None
                else 0.0)
    return g / beta, K[i, j] / beta, info
