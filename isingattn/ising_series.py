"""High- and low-temperature series of the square-lattice Ising model, and where they replace
the closed forms of :mod:`isingattn.onsager`: beyond a coupling threshold the closed forms lose
their derivatives (and in float32 overflow), and the series, matched to them at the threshold,
keep every value and derivative finite and accurate for any ``K > 0``."""

from __future__ import annotations

import math

import jax.numpy as jnp

__all__ = ["ONSAGER_SERIES_K", "TORUS_SERIES_K", "clamp", "log_cosh", "log_cosh_any", "phi_high_K", "phi_low_K",
           "torus_series_high_K", "torus_series_low_K", "walls"]

# Beyond these couplings the closed forms lose the derivatives (the heat capacity is a small
# remainder of terms of size N K or N ln K) and, in float32, overflow (sinh 2K): there the
# high- and low-temperature series take over (torus_series_low_K, torus_series_high_K), matched to the
# closed form at the threshold. Chosen where the series' truncation error and the closed
# form's rounding error cross (checked against enumeration in the tests).
TORUS_SERIES_K = {4: (0.01, 1.5), 8: (3e-4, 2.5)}  # (below, above) by the float's size in bytes
ONSAGER_SERIES_K = {4: (0.1, 1.0), 8: (0.01, 3.0)}


def clamp(K, lo, hi):
    """``K`` limited to ``[lo, hi]`` with the whole derivative inside, none outside (``jnp.clip``
    splits it at a tie, which the derivatives at a threshold would inherit)."""
    return jnp.where(K < lo, lo, jnp.where(K > hi, hi, K))


def log_cosh(K):
    """``ln cosh K = −½ ln(1 − tanh² K)``, accurate (with its derivatives) as ``K → 0``."""
    return -0.5 * jnp.log1p(-jnp.tanh(K) ** 2)


def torus_series_low_K(m, n, K):
    """High-temperature series of the ``m × n`` torus (``t = tanh K``):
    ``ln Z = N ln 2 + 2N ln cosh K + r_3 t³ + (N + r_4) t⁴ + O(t⁵)``, with ``r_k`` the rings of
    length ``k`` that wrap a side of ``k`` (a closed graph of ``k`` bonds) and ``N`` plaquettes."""
    t = jnp.tanh(K)
    N = m * n
    r3 = jnp.where(n == 3, m, 0.0) + jnp.where(m == 3, n, 0.0)
    r4 = jnp.where(n == 4, m, 0.0) + jnp.where(m == 4, n, 0.0)
    return N * math.log(2.0) + 2.0 * N * log_cosh(K) + r3 * t**3 + (N + r4) * t**4


def log_cosh_any(x):
    """``ln cosh x`` for any ``x ≥ 0``, accurate at both ends (and finite in every branch)."""
    small = x < 1.0
    xs = jnp.where(small, x, 0.0)
    xl = jnp.where(small, 1.0, x)
    return jnp.where(small, log_cosh(xs), xl + jnp.log1p(jnp.exp(-2.0 * xl)) - math.log(2.0))


def walls(length, side, K):
    """``ln`` of the gas of domain walls across a side of ``side`` spins (each ``side`` broken
    bonds, ``y = e^{−2 side K}``) along a periodic ``length``: walls come in pairs, so
    ``ln[((1 + y)^L + (1 − y)^L) / 2] = (L/2) ln(1 − y²) + ln cosh(L atanh y)``. It is ``C(L, 2) y²``
    for a short torus and grows like ``L y`` along a long thin one, where no fixed series holds."""
    y = jnp.exp(-2.0 * side * K)
    return 0.5 * length * jnp.log1p(-y * y) + log_cosh_any(length * jnp.arctanh(y))


def torus_series_high_K(m, n, K):
    """Low-temperature series of the ``m × n`` torus (``u = e^{−4K}``): ``ln Z = ln 2 + 2NK +
    N u² + 2N u³ + walls + O(u⁴)``: the two ground states, one flipped spin (4 broken bonds,
    ``N`` ways), two neighbours (6 bonds, ``2N``), and domain walls across each side
    (:func:`walls`: ``u³`` terms on a side of 3, and the whole answer on a long thin torus)."""
    u = jnp.exp(-4.0 * K)
    N = m * n
    return (math.log(2.0) + 2.0 * N * K + N * u**2 + 2.0 * N * u**3 + walls(m, n, K) + walls(n, m, K))


def phi_low_K(K):
    """High-temperature series of ``−βf`` (``t = tanh K``): ``ln 2 + 2 ln cosh K + t⁴ + 2t⁶ +
    (9/2) t⁸ + O(t¹⁰)`` (closed polygons per site: 1 of 4 bonds, 2 of 6, 7 of 8, less the
    disjoint pairs of squares counted by the logarithm)."""
    t = jnp.tanh(K)
    return math.log(2.0) + 2.0 * log_cosh(K) + t**4 + 2.0 * t**6 + 4.5 * t**8


def phi_high_K(K):
    """Low-temperature series of ``−βf`` (``u = e^{−4K}``): ``2K + u² + 2u³ + (9/2) u⁴ + O(u⁵)``
    (the same coefficients as above: the lattice is self-dual)."""
    u = jnp.exp(-4.0 * K)
    return 2.0 * K + u**2 + 2.0 * u**3 + 4.5 * u**4
