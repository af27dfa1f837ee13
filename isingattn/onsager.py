"""Exact references for the ferromagnetic 2D Ising model on the square lattice, with no field.

Convention (DESIGN.md §1): spins ``s ∈ {-1, +1}``, ``E(s) = -J Σ_{bonds} s_i s_j`` (each
nearest-neighbour bond once), ``p(s) ∝ exp(-β E)``. Everything here is a function of the
coupling ``K = βJ`` (``J = 1``, so ``K = β``); energies are in units of ``J`` and per spin.

* Finite ``rows × cols`` torus (Kaufman 1949): :func:`torus_log_z`, :func:`torus_energy`,
  :func:`torus_heat_capacity`. This is the partition function of
  ``IsingModel(zeros(n), J, beta=K)`` with ``J`` the couplings of
  ``graphs.lattice((rows, cols), periodic=True)`` at weight 1, so engines can be checked
  against it at any size.
* Infinite lattice (Onsager 1944, Yang 1952): :func:`onsager_log_z_per_spin` (``-βf``),
  :func:`onsager_energy`, :func:`onsager_heat_capacity`, :func:`yang_magnetization`.
  The critical coupling is :data:`K_C` ``= ½ ln(1 + √2) ≈ 0.4407``.

All functions are JAX, vectorized over ``K`` (any shape), jit-friendly (``rows`` and
``cols`` are static Python ints) and differentiable in ``K``. They compute in the default
float type: float64 needs ``jax.config.update("jax_enable_x64", True)``. Far from ``K_C``, where
the closed forms lose their derivatives to rounding (and, in float32, overflow), the high- and
low-temperature series take over, matched at a threshold; so every value is finite for any
``K > 0`` and any size, the energy per spin stays in ``[−2, 0]`` and heat capacities ``≥ 0``.
In float32 ``ln Z`` is good to ~3e-7 relative, but the heat capacities, small remainders of
larger terms, to ~1e-3 at worst: use float64 for references. ``K`` must be finite and positive (the
ferromagnet); bad input raises :class:`~isingattn.errors.IsingInputError` (eagerly when
``K`` is concrete; under ``jit`` a bad ``K`` makes the values NaN, :func:`isingattn.validate.nan_where`).
"""

from __future__ import annotations

import functools
import math

import jax
import jax.numpy as jnp
import numpy as np

from isingattn import validate as V
from isingattn.ising_series import (ONSAGER_SERIES_K, TORUS_SERIES_K, clamp, phi_high_K, phi_low_K, torus_series_high_K,
                                    torus_series_low_K)
from isingattn.errors import IsingInputError

__all__ = ["K_C", "onsager_energy", "onsager_heat_capacity", "onsager_log_z_per_spin", "torus_energy",
           "torus_heat_capacity", "torus_log_z", "yang_magnetization"]

K_C = 0.5 * math.log(1.0 + math.sqrt(2.0))
"""Critical coupling of the square lattice, ``sinh 2K_C = 1``."""

_QUAD_NODES = 256  # Gauss–Legendre nodes for Onsager's integral (64 already agree to round-off)
_AGM_STEPS = 40  # the AGM converges quadratically: ~15 steps even for k' = 1e-300


# ---- input checks ------------------------------------------------------------------------------

_MAX_SHORT_SIDE = 2**24  # the product over the shorter side is a loop of that many steps


def _sides(rows, cols):
    """``(m, n)``: ``m`` the longer side as a float (any size: ``N = m n`` never meets an
    integer's range), ``n`` the shorter, the loop's trip count (``Z`` is symmetric in the sides)."""
    rows, cols = _side("rows", rows), _side("cols", cols)
    m, n = max(rows, cols), min(rows, cols)
    if n > _MAX_SHORT_SIDE:
        raise IsingInputError(f"torus sides {rows} × {cols}: the shorter side is above {_MAX_SHORT_SIDE} (Kaufman's "
                              "products run over it); at that size use onsager_log_z_per_spin, the infinite lattice, "
                              "times N.")
    return float(m), n


def _side(name: str, v) -> int:
    if not (isinstance(v, (int, np.integer)) and not isinstance(v, bool) and v >= 3):
        raise IsingInputError(
            f"{name} must be an integer ≥ 3 (a side of the periodic lattice); got {v!r}. A periodic side of 2 "
            "would join the same pair twice and one of 1 would couple a spin to itself: "
            "graphs.lattice(..., periodic=True) refuses the first and drops the second, so no "
            "project model matches Kaufman's formula there.")
    return int(v)


def _evaluate(fn, K, post=None) -> jax.Array:
    """``post(k, fn(k))`` on a coupling ``K`` checked finite and > 0, in the default float type
    (float64 under x64), ``K`` of any shape.

    ``fn`` (jitted) sees ``K`` flattened and padded with ones to a power-of-two length (≥ 8), so that
    it compiles once per length bucket rather than per shape (a compile costs far more than
    these formulas); ``post`` (plain arithmetic) finishes on the host when ``K`` is concrete.
    Traced ``K`` (inside the caller's ``jit``/``grad``) is checked by NaN poisoning (no host callback);
    concrete ``K`` in numpy, raising :class:`IsingInputError`."""
    post = post or (lambda k, v: v)
    if isinstance(K, jax.core.Tracer):
        K = K.astype(jnp.promote_types(K.dtype, jnp.result_type(float)))
        # "K (the coupling βJ) must be finite and > 0 (the ferromagnet)", as NaN (no host callback)
        K = V.nan_where(K, ~jnp.all(jnp.isfinite(K) & (K > 0)))
        shape, size = K.shape, K.size
        k = jnp.concatenate([K.reshape(-1), jnp.ones(_bucket(size) - size, K.dtype)])
        return post(k, fn(k))[:size].reshape(shape)
    try:
        k = np.asarray(K)
    except (TypeError, ValueError) as err:
        raise IsingInputError(f"K (the coupling βJ) must be a real number or array; got {type(K).__name__} ({err}).") from None
    if not (np.issubdtype(k.dtype, np.floating) or np.issubdtype(k.dtype, np.integer)) or k.dtype == bool:
        raise IsingInputError(f"K (the coupling βJ) must be a real number or array; got dtype {k.dtype}.")
    bad = ~(np.isfinite(k) & (k > 0))
    if np.any(bad):
        raise IsingInputError(f"K (the coupling βJ) must be finite and > 0 (the ferromagnet); got {k[bad].ravel()[0]!r}"
                              + (f" among {k.size} values." if k.size > 1 else "."))
    dtype = jnp.promote_types(k.dtype, jnp.result_type(float)) if np.issubdtype(k.dtype, np.floating) \
        else jnp.result_type(float)
    shape, size = k.shape, k.size
    k = np.concatenate([k.astype(dtype).ravel(), np.ones(_bucket(size) - size, dtype)])
    with np.errstate(over="ignore", invalid="ignore"):  # e.g. inf heat capacity at K_C stays inf
        out = post(k, np.asarray(fn(k)))
    return jnp.asarray(out[:size].reshape(shape))


def _energy_bounds(u):
    """The ferromagnet's energy per spin lies in ``[−2, 0]``: rounding is not let out of it."""
    xp = jnp if isinstance(u, jax.Array) else np
    return xp.where(u < -2.0, -2.0, xp.where(u > 0.0, 0.0, u))  # where, not clip: full gradient at a tie


def _nonnegative(c):
    """A heat capacity is a variance: rounding is not let below 0 (``+inf`` at ``K_C`` stays)."""
    xp = jnp if isinstance(c, jax.Array) else np
    return xp.where(c < 0.0, 0.0, c)


def _bucket(size: int) -> int:
    """Padded length: a power of two, at least 8 (scalars and short grids share one program)."""
    return max(8, 1 << max(size - 1, 0).bit_length())


# ---- finite torus (Kaufman 1949) -------------------------------------------------------------

def _torus_log_z_matched(m, n, K):
    """:func:`_torus_log_z` between the series thresholds, continued by the series beyond
    (``ln Z(K) = ln Z(K₀) + S(K) − S(K₀)``, ``K₀`` the threshold), so every value and
    derivative stays finite and accurate for any ``K > 0``."""
    lo, hi = TORUS_SERIES_K[jnp.dtype(K.dtype).itemsize]
    mf, nf = jnp.asarray(m, K.dtype), jnp.asarray(n, K.dtype)
    k0 = clamp(K, lo, hi)  # the closed form only ever sees a K where it is accurate
    below = jnp.where(K < lo, K, lo)
    above = jnp.where(K > hi, K, hi)
    return (_torus_log_z(m, n, k0) + torus_series_low_K(mf, nf, below) - torus_series_low_K(mf, nf, jnp.full_like(K, lo))
            + torus_series_high_K(mf, nf, above) - torus_series_high_K(mf, nf, jnp.full_like(K, hi)))


def _torus_log_z(m, n, K):
    """ln Z of the ``m × n`` torus (see :func:`torus_log_z`; ``K`` checked). ``m``, ``n`` may be
    traced: the products over ``r`` are a loop, so one compiled program serves every size.

    The heat capacity is a small second derivative of large terms (``ln Z ≈ 2NK`` at large ``K``,
    ``≈ (N/2) ln 4K + …`` at small ``K``), so the sums are arranged to keep every K-derivative
    accurate: the linear part ``2NK`` is split off exactly, each ``γ_l = 2K + ρ_l`` with ``ρ_l``
    computed directly, and the products ``Z_2, Z_3, Z_4`` enter as ratios to ``Z_1`` summed
    factor by factor (never as differences of the O(NK) logs of the products).
    """
    mf, nf = jnp.asarray(m, K.dtype), jnp.asarray(n, K.dtype)
    s = jnp.sinh(2.0 * K)
    y = jnp.exp(-2.0 * K)
    one_minus_y2 = -jnp.expm1(-4.0 * K)
    # cosh γ_l = cosh 2K coth 2K − cos θ_l = 1 + w_l, θ_l = πl/n, with w_l = (s−1)²/s + 2 sin²(θ_l/2)
    # (s = sinh 2K): no cancellation near K_C, where w_l → 0.
    A = (s - 1.0) ** 2 / s

    def gamma_rho(l):  # (m γ_l / 2, m ρ_l / 2) for l ≥ 1
        half_theta = np.pi * l / (2.0 * nf)
        w = A + 2.0 * jnp.sin(half_theta) ** 2
        gamma = 2.0 * jnp.arcsinh(jnp.sqrt(0.5 * w))  # arccosh(1 + w), accurate for small w
        # ρ = γ − 2K = ln[e^{−2K}(cosh γ + sinh γ)]: with y = e^{−2K}, y cosh γ = ½ + g and
        # e^ρ − 1 = 2g − y² / (y cosh γ + y sinh γ), all of it small at large K.
        g = -0.5 * y**2 + 2.0 * y**2 / one_minus_y2 - y * jnp.cos(2.0 * half_theta)
        rho = jnp.log1p(2.0 * g - y**2 / (0.5 + g + y * jnp.sqrt(w * (w + 2.0))))
        return 0.5 * mf * gamma, 0.5 * mf * rho

    def body(r, sums):  # factor r: l = 2r+1 (Z_1, Z_2) and l = 2r (Z_3, Z_4; r = 0 after the loop)
        rho_sum, rest1, d2, d3, d4 = sums
        rf = jnp.asarray(r, K.dtype)
        x, xr = gamma_rho(2.0 * rf + 1.0)
        xe, xer = gamma_rho(jnp.maximum(2.0 * rf, 1.0))
        ex = jnp.exp(-2.0 * x)
        log_cosh_ratio = (xer - xr) + jnp.log1p(jnp.exp(-2.0 * xe)) - jnp.log1p(ex)  # ln[cosh xe / cosh x]
        log_sinh_cosh = (xer - xr) + jnp.log(-jnp.expm1(-2.0 * xe)) - jnp.log1p(ex)  # ln[sinh xe / cosh x]
        later = r > 0
        return (rho_sum + xr, rest1 + jnp.log1p(ex), d2 + jnp.log(-jnp.expm1(-2.0 * x)) - jnp.log1p(ex),
                d3 + jnp.where(later, log_cosh_ratio, 0.0), d4 + jnp.where(later, log_sinh_cosh, 0.0))

    zero = jnp.zeros_like(K)
    rho_sum, rest1, d2, d3, d4 = jax.lax.fori_loop(0, n, body, (zero,) * 5)
    # ln Z_1 = Σ_r ln 2cosh(mγ_{2r+1}/2) = NK + Σ_r [mρ_{2r+1}/2 + ln(1 + e^{−mγ_{2r+1}})]
    # γ_0 = 2K + ln tanh K is signed: it changes sign at K_C, and with it Z_4. Its factor over Z_1's r = 0 one:
    log_tanh = jnp.log(jnp.tanh(K))
    x0 = 0.5 * mf * (2.0 * K + log_tanh)
    ax0 = jnp.abs(x0)
    x1, x1r = gamma_rho(1.0)
    ax0_minus_x1 = 0.5 * mf * jnp.where(x0 >= 0, log_tanh, -4.0 * K - log_tanh) - x1r  # |x0| − x1, 2K split off
    ex1 = jnp.exp(-2.0 * x1)
    d3 = d3 + ax0_minus_x1 + jnp.log1p(jnp.exp(-2.0 * ax0)) - jnp.log1p(ex1)
    d4 = d4 + ax0_minus_x1 - jnp.log1p(ex1)  # |Z_4|/Z_1 ≤ e^{d4}: 2 sinh x0 = e^{|x0|} f0 with f0 below
    # f0 = e^{2 min(x0,0)} − e^{−2 max(x0,0)} ∈ (−1, 1): signed, smooth through x0 = 0 (K = K_C), no overflow.
    f0 = jnp.exp(2.0 * jnp.minimum(x0, 0.0)) - jnp.exp(-2.0 * jnp.maximum(x0, 0.0))
    top = jax.lax.stop_gradient(jnp.maximum(jnp.maximum(0.0, d2), jnp.maximum(d3, d4)))
    # Z_1 ≥ |Z_2| and Z_3 ≥ |Z_4| factor by factor, so the sum is ≥ e^{−top}: no cancellation.
    total = jnp.exp(-top) + jnp.exp(d2 - top) + jnp.exp(d3 - top) + f0 * jnp.exp(d4 - top)
    N = mf * nf
    # ½ ln(2 sinh 2K)^N = NK + (N/2) ln(1 − e^{−4K}); with ln Z_1's NK: the 2NK of the ground states.
    return (-math.log(2.0) + 2.0 * N * K + 0.5 * N * jnp.log(one_minus_y2) + rho_sum + rest1
            + top + jnp.log(total))


def _taylor(f, K, order: int) -> list:
    """``[f(K), f'(K), …, f^(order)(K)]`` for an elementwise ``f``, by nested forward mode (a tangent
    of ones gives the diagonal, as each ``K`` is its own lattice)."""
    if order == 0:
        return [f(K)]
    lower, higher = jax.jvp(lambda k: _taylor(f, k, order - 1), (K,), (jnp.ones_like(K),))
    return lower + [higher[-1]]


@functools.partial(jax.jit, static_argnums=0)
def _log_z_taylor(order: int, m, n, K) -> list:
    """``ln Z`` and its first ``order`` K-derivatives: one compiled program for all of them and
    for every size (the compile costs far more than running it)."""
    return _taylor(functools.partial(_torus_log_z_matched, m, n), K, order)


@functools.partial(jax.custom_jvp, nondiff_argnums=(0,))
def _dlog_z(order: int, m, n, K):
    """``∂^order ln Z / ∂K^order``, differentiable in every mode: the loop over ``r`` has a traced
    trip count, which reverse mode cannot run through, so the rule below gives ``jvp``/``grad``
    of any order through the next order instead (from the same compiled program up to order 2)."""
    return _log_z_taylor(max(order, 2), m, n, K)[order]


@_dlog_z.defjvp
def _dlog_z_jvp(order, primals, tangents):
    m, n, K = primals
    return _dlog_z(order, m, n, K), _dlog_z(order + 1, m, n, K) * tangents[2]


def torus_log_z(rows: int, cols: int, K) -> jax.Array:
    """Exact ``ln Z`` of the ``rows × cols`` periodic square lattice with uniform coupling ``K``
    and no field (Kaufman 1949), ``Z = Σ_s exp(K Σ_{bonds} s_i s_j)`` over ``N = rows·cols`` spins.

    With ``m = rows``, ``n = cols`` and ``cosh γ_l = cosh 2K coth 2K − cos(πl/n)`` (``l ≥ 1``),
    ``γ_0 = 2K + ln tanh K`` (negative above ``K_C``)::

        Z = ½ (2 sinh 2K)^{N/2} [Π_r 2cosh(mγ_{2r+1}/2) + Π_r 2sinh(mγ_{2r+1}/2)
                                 + Π_r 2cosh(mγ_{2r}/2)   + Π_r 2sinh(mγ_{2r}/2)],  r = 0..n−1.

    Evaluated in log space (O(min(rows, cols)) work per ``K``; one compiled program for all
    sizes; the sides may be as large as you like, the shorter up to 2^24). Beyond
    ``0.01 ≤ K ≤ 1.5`` (float32) or ``3e-4 ≤ K ≤ 2.5`` (float64) it is continued by the high-
    temperature series (``t = tanh K``, to ``t⁴``, with the rings around a side of 3 or 4) or the
    low-temperature one (``u = e^{−4K}``, to ``u³``, with the gas of domain walls across each
    side, which a long thin torus needs), matched to the closed form there: finite and
    differentiable for every ``K > 0``. It is the partition function of ``IsingModel(0, J, beta=K)`` with
    ``J`` the unit couplings of ``graphs.lattice((rows, cols), periodic=True)``. Above ``K_C``
    it includes both ordered phases: ``ln Z − N(−βf) → ln 2`` (see :func:`onsager_log_z_per_spin`).

    Args:
        rows, cols: side lengths, Python integers ≥ 3.
        K: coupling ``βJ > 0``, any shape ``[...]``.

    Returns:
        ``[...]``: ``ln Z`` (total, not per spin).
    """
    m, n = _sides(rows, cols)
    return _evaluate(functools.partial(_dlog_z, 0, m, n), K)


def torus_energy(rows: int, cols: int, K) -> jax.Array:
    """Mean energy per spin of the ``rows × cols`` torus, ``u = ⟨E⟩/N = −(1/N) ∂ln Z/∂K``
    (in units of ``J``; :func:`torus_log_z` differentiated in forward mode).
    ``K``: ``[...]`` → ``[...]``."""
    m, n = _sides(rows, cols)
    return _evaluate(functools.partial(_dlog_z, 1, m, n), K, lambda k, d: _energy_bounds(-d / (m * n)))


def torus_heat_capacity(rows: int, cols: int, K) -> jax.Array:
    """Heat capacity per spin of the ``rows × cols`` torus, ``c = (K²/N) ∂²ln Z/∂K² = K² Var(E)/N``
    (units of ``k_B``; :func:`torus_log_z` differentiated twice in forward mode).
    ``K``: ``[...]`` → ``[...]``.

    ``c`` is a small remainder of larger terms at both ends (``c ≈ 2K²`` as ``K → 0``,
    ``∝ K² e^{−8K}`` as ``K → ∞``), so it comes from the series there (see
    :func:`torus_log_z`): in float64 it is good to ~1e-10 relative for ``K ≤ 2``, and to
    ~5e-8 above (the series' truncation, ``~e^{−8K}`` relative, peaks just beyond its threshold
    on the smallest tori); in float32 to ~2e-3. Never negative."""
    m, n = _sides(rows, cols)
    return _evaluate(functools.partial(_dlog_z, 2, m, n), K, lambda k, d: _nonnegative(k**2 * d / (m * n)))


# ---- infinite lattice (Onsager 1944, Yang 1952) ----------------------------------------------

@functools.cache
def _gauss_legendre(n: int):
    x, w = np.polynomial.legendre.leggauss(n)
    return 0.5 * (x + 1.0), 0.5 * w  # on [0, 1]


def onsager_log_z_per_spin(K) -> jax.Array:
    """``lim ln Z / N = −βf`` of the infinite square lattice (Onsager 1944)::

        −βf = ½ ln(2 sinh 2K) + (1/2π) ∫_0^π γ(θ) dθ,   cosh γ(θ) = cosh 2K coth 2K − cos θ,

    the ``N → ∞`` limit of :func:`torus_log_z`. ``γ(θ) ≈ √(a² + θ²)`` near ``θ = 0`` with
    ``a → 0`` at ``K_C`` (the origin of the ``(K − K_C)² ln|K − K_C|`` singularity), so a plain
    rule converges slowly there; the substitution ``θ = a sinh t`` unfolds that scale and
    256-node Gauss–Legendre in ``t`` is accurate to ~1e-14 at every ``K``. Below ``K = 0.01``
    and above ``K = 3`` (float32: 0.1 and 1) the series ``ln 2 + 2 ln cosh K + t⁴ + 2t⁶ + (9/2)t⁸``
    (``t = tanh K``) and ``2K + u² + 2u³ + (9/2)u⁴`` (``u = e^{−4K}``) take over, as they do for
    :func:`onsager_energy` and :func:`onsager_heat_capacity` (the closed forms' derivatives are lost
    to rounding there: ``u`` left ``[−2, 0]`` and ``c`` went negative).
    On the ``L × L`` torus, ``ln Z − N(−βf)`` goes to 0 below ``K_C`` and to ``ln 2`` (the two
    ordered phases) above it, both exponentially fast in ``L``; at ``K_C`` it stays ≈ 0.6399.
    ``K``: ``[...]`` → ``[...]``.
    """
    return _evaluate(_onsager_log_z, K)


def _onsager_matched(formula, order: int):
    """``formula(K)`` (``order`` 0: ``−βf``, 1: ``u``, 2: ``c``) between the series
    thresholds, the series beyond them; each piece sees only arguments where it is finite."""
    def fn(K):
        lo, hi = ONSAGER_SERIES_K[jnp.dtype(K.dtype).itemsize]
        mid = formula(clamp(K, lo, hi))

        def series(phi, k):
            d = _taylor(phi, k, order)[order]
            return d if order == 0 else -d if order == 1 else k**2 * d

        low = series(phi_low_K, jnp.where(K < lo, K, lo))
        high = series(phi_high_K, jnp.where(K > hi, K, hi))
        return jnp.where(K < lo, low, jnp.where(K > hi, high, mid))

    return jax.jit(fn)


def _onsager_log_z_formula(K):
    Kx = K[..., None]
    s = jnp.sinh(2.0 * Kx)
    A = (s - 1.0) ** 2 / s
    # γ(θ) = 2 asinh √(A/2 + sin²(θ/2)) has branch points at θ = ±i a, a = 2 asinh √(A/2). The change
    # of variables is exact for any a > 0, so its a is floored (a = 0 at K_C) and carries no gradient.
    a = jax.lax.stop_gradient(jnp.maximum(2.0 * jnp.arcsinh(jnp.sqrt(0.5 * A)), 1e-12))
    T = jnp.arcsinh(np.pi / a)
    x, w = _gauss_legendre(_QUAD_NODES)
    t = T * x
    theta = a * jnp.sinh(t)
    gam = 2.0 * jnp.arcsinh(jnp.sqrt(0.5 * A + jnp.sin(0.5 * theta) ** 2))
    integral = T[..., 0] * jnp.sum(w * gam * a * jnp.cosh(t), -1)
    return 0.5 * jnp.log(2.0 * jnp.sinh(2.0 * K)) + integral / (2.0 * np.pi)


_onsager_log_z = _onsager_matched(_onsager_log_z_formula, 0)


def _elliptic_K(kp, k2, one_minus_kp):
    """Complete elliptic integrals of modulus ``k``: ``K(k)`` and ``K(k) − E(k)``, by the AGM of
    ``(1, k')``, with ``K − E = K Σ_n 2^{n−1} c_n²`` (``c_0 = k``, ``c_{n+1} = (a_n − b_n)/2``).
    ``k'``, ``k²`` and ``1 − k'`` come in separately, each computed without cancellation, so
    nothing is lost as ``k → 1`` (``K_C``) or ``k → 0`` (``K → 0`` or ``∞``, where ``c`` is a
    small difference of these terms)."""
    def step(i, abw):
        a, b, acc, weight = abw  # weight = 2^{i-1}
        return 0.5 * (a + b), jnp.sqrt(a * b), acc + weight * (0.5 * (a - b)) ** 2, 2.0 * weight

    # the first step by hand: c_1 = (1 − k')/2
    init = (0.5 * (1.0 + kp), jnp.sqrt(kp), 0.5 * k2 + (0.5 * one_minus_kp) ** 2, 2.0 * jnp.ones_like(kp))
    a, _, acc, _ = jax.lax.fori_loop(1, _AGM_STEPS, step, init)
    K1 = np.pi / (2.0 * a)
    return K1, K1 * acc


def _onsager_parts(K):
    s = jnp.sinh(2.0 * K)
    q = 1.0 + s**2  # cosh² 2K
    # k = 2 sinh 2K / cosh² 2K, k' = |1 − s²|/(1 + s²), and 2 tanh² 2K − 1 = (s² − 1)/(s² + 1) = ±k';
    # 1 − k' = 2/(1 + s²) above K_C and 2s²/(1 + s²) below.
    kappa = (s**2 - 1.0) / q
    one_minus_kp = jnp.where(s > 1.0, 2.0, 2.0 * s**2) / q
    K1, K_minus_E = _elliptic_K(jnp.abs(kappa), 4.0 * s**2 / q**2, one_minus_kp)
    return s, kappa, K1, K_minus_E


def onsager_energy(K) -> jax.Array:
    """Energy per spin of the infinite lattice (Onsager 1944), in units of ``J``::

        u = −coth 2K [1 + (2/π)(2 tanh² 2K − 1) K₁(k)],   k = 2 sinh 2K / cosh² 2K,

    ``K₁`` the complete elliptic integral of the first kind (modulus ``k``; scipy's
    ``ellipk(m)`` takes ``m = k²``). Continuous at ``K_C`` (``u = −√2``), where ``K₁`` diverges
    logarithmically and its prefactor vanishes. ``K``: ``[...]`` → ``[...]``.
    """
    return _evaluate(_onsager_energy, K, lambda k, u: _energy_bounds(u))


def _onsager_energy_formula(K):
    _, kappa, K1, _ = _onsager_parts(K)
    # kappa·K1 → 0 at K_C: the AGM of (1, 0) stays finite after _AGM_STEPS steps, so no 0·∞ here.
    return -(1.0 / jnp.tanh(2.0 * K)) * (1.0 + (2.0 / np.pi) * kappa * K1)


_onsager_energy = _onsager_matched(_onsager_energy_formula, 1)


def onsager_heat_capacity(K) -> jax.Array:
    """Heat capacity per spin of the infinite lattice, ``c = −K² du/dK`` (units of ``k_B``)::

        c = (4/π)(K coth 2K)² {K₁(k) − E₁(k) − (1 − tanh² 2K)[π/2 + (2 tanh² 2K − 1) K₁(k)]},

    ``E₁`` the complete elliptic integral of the second kind. It diverges logarithmically at
    ``K_C``, ``c ≈ −(8K_C²/π) ln|1 − K/K_C|``; ``+inf`` exactly there. ``K``: ``[...]`` → ``[...]``.
    """
    return _evaluate(_onsager_heat_capacity, K, lambda k, c: _nonnegative(c))


def _onsager_heat_capacity_formula(K):
    s, kappa, K1, K_minus_E = _onsager_parts(K)
    sech2 = 1.0 / (1.0 + s**2)  # 1 − tanh² 2K
    c = (4.0 / np.pi) * (K / jnp.tanh(2.0 * K)) ** 2 * (K_minus_E - sech2 * (0.5 * np.pi + kappa * K1))
    return jnp.where(kappa == 0, jnp.inf, c)


_onsager_heat_capacity = _onsager_matched(_onsager_heat_capacity_formula, 2)


def yang_magnetization(K) -> jax.Array:
    """Spontaneous magnetization per spin of the infinite lattice (Yang 1952)::

        M = (1 − sinh⁻⁴ 2K)^{1/8} for K > K_C,   0 for K ≤ K_C.

    ``K``: ``[...]`` → ``[...]``; its derivative is infinite just above ``K_C`` (``M ∝ (K − K_C)^{1/8}``).
    """
    return _evaluate(_yang, K)


@jax.jit
def _yang(K):
    s = jnp.sinh(2.0 * K)
    ordered = s > 1.0
    # Double where: the unused branch sees a safe argument, so no NaN enters the gradient.
    x = jnp.where(ordered, 1.0 - s**-4, 1.0)
    return jnp.where(ordered, x**0.125, 0.0)
