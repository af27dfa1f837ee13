"""isingattn.onsager against independent references: brute-force enumeration of every state of
small tori (energies built from the project's periodic lattice graph, from IsingModel, and from
an explicit neighbour rule), Onsager's single-integral form of -βf under scipy quadrature, finite
differences, the universal finite-size term at K_C, and closed forms written out here."""

import functools
import itertools
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import integrate
from scipy.special import logsumexp

from isingattn import graphs
from isingattn.errors import IsingInputError
from isingattn.model import IsingModel
from isingattn.onsager import (
    K_C,
    onsager_energy,
    onsager_heat_capacity,
    onsager_log_z_per_spin,
    torus_energy,
    torus_heat_capacity,
    torus_log_z,
    yang_magnetization,
)
from isingattn.sparse import SparseCouplings

TORI = [(3, 3), (3, 4), (4, 3), (4, 4), (4, 5)]  # 4 × 3 and 3 × 4: which side is which
KS = np.array([0.05, 0.2, 0.4, K_C, 0.5, 0.7, 1.0, 2.0])  # both sides of K_C, and K_C itself


def _all_spins(n: int) -> np.ndarray:
    """All 2^n configurations, [2^n, n] int8 ±1."""
    idx = np.arange(2**n, dtype=np.int32)
    return (1 - 2 * ((idx[:, None] >> np.arange(n, dtype=np.int32)) & 1)).astype(np.int8)


@functools.cache
def _density_of_states(rows: int, cols: int):
    """Energy levels and their multiplicities of the rows × cols torus, by enumeration; the
    energy is built twice (project graph, explicit neighbour rule) and must agree state by state."""
    n = rows * cols
    s = _all_spins(n)
    # 1) the project's periodic lattice graph, each edge once
    edges = graphs.lattice((rows, cols), periodic=True).edges
    assert len(edges) == 2 * n  # no doubled bond for sides ≥ 3
    e_graph = -np.einsum("se,se->s", s[:, edges[:, 0]], s[:, edges[:, 1]], dtype=np.int32)
    # 2) explicit rule: site (r, c) = r·cols + c bonds to its right and lower neighbours, wrapping
    e_rule = np.zeros(len(s), np.int32)
    for r in range(rows):
        for c in range(cols):
            here = s[:, r * cols + c]
            e_rule -= here * (s[:, r * cols + (c + 1) % cols] + s[:, ((r + 1) % rows) * cols + c])
    np.testing.assert_array_equal(e_graph, e_rule)
    counts = np.bincount(e_rule + 2 * n)  # E ∈ [−2N, 2N]
    levels = np.flatnonzero(counts)
    assert counts.sum() == 2**n
    return (levels - 2 * n).astype(np.float64), counts[levels].astype(np.float64)


def _brute(rows: int, cols: int, K: float):
    """(ln Z, ⟨E⟩/N, K² Var(E)/N) with weights exp(-K E) over every state."""
    E, g = _density_of_states(rows, cols)
    logw = np.log(g) - K * E
    log_z = logsumexp(logw)
    p = np.exp(logw - log_z)
    mean = p @ E
    var = p @ (E - mean) ** 2
    n = rows * cols
    return log_z, mean / n, K**2 * var / n


def test_project_model_energy_matches_neighbour_rule():
    """The model users build, IsingModel with J from graphs.lattice(periodic=True), has the energy
    that the enumeration (and so Kaufman's formula) uses."""
    rows, cols = 3, 4
    n = rows * cols
    g = graphs.lattice((rows, cols), periodic=True)
    J = SparseCouplings(g, jnp.ones(g.E)).to_dense()
    model = IsingModel(jnp.zeros(n), J, beta=1.0)
    e_model = np.asarray(model.energy(jnp.asarray(_all_spins(n), jnp.float64)))
    np.testing.assert_allclose(e_model, np.round(e_model), atol=1e-12)
    levels, counts = np.unique(np.round(e_model).astype(np.int64), return_counts=True)
    E, g_counts = _density_of_states(rows, cols)
    np.testing.assert_array_equal(levels, E)
    np.testing.assert_array_equal(counts, g_counts)


@pytest.mark.parametrize("rows, cols", TORI)
def test_torus_log_z_equals_enumeration(rows, cols):
    ref = np.array([_brute(rows, cols, K)[0] for K in KS])
    got = np.asarray(torus_log_z(rows, cols, KS))  # vectorized over K
    np.testing.assert_allclose(got, ref, rtol=1e-12, atol=0)
    # scalar K, and a [2, 4] grid
    assert float(torus_log_z(rows, cols, float(K_C))) == pytest.approx(_brute(rows, cols, K_C)[0], rel=1e-12)
    np.testing.assert_allclose(np.asarray(torus_log_z(rows, cols, KS.reshape(2, 4))), ref.reshape(2, 4), rtol=1e-12)


def test_torus_under_jit():
    """Inside the caller's jit (K traced, sides static): the same values as the enumeration."""
    ref = np.array([_brute(3, 4, K)[0] for K in KS])
    jitted = jax.jit(torus_log_z, static_argnums=(0, 1))
    np.testing.assert_allclose(np.asarray(jitted(3, 4, jnp.asarray(KS))), ref, rtol=1e-12)


@pytest.mark.parametrize("rows, cols", TORI)
def test_torus_energy_and_heat_capacity_equal_enumeration(rows, cols):
    ref = np.array([_brute(rows, cols, K) for K in KS])
    np.testing.assert_allclose(np.asarray(torus_energy(rows, cols, KS)), ref[:, 1], rtol=1e-10, atol=1e-13)
    np.testing.assert_allclose(np.asarray(torus_heat_capacity(rows, cols, KS)), ref[:, 2], rtol=1e-10, atol=1e-13)
    # reverse mode through torus_log_z and torus_energy: ∂ln Z/∂K = −N⟨E⟩/N, ∂u/∂K = −c/K²
    log_z, vjp = jax.vjp(lambda k: torus_log_z(rows, cols, k), jnp.asarray(KS))
    np.testing.assert_allclose(-np.asarray(vjp(jnp.ones_like(log_z))[0]) / (rows * cols), ref[:, 1], rtol=1e-10)
    u, vjp = jax.vjp(lambda k: torus_energy(rows, cols, k), jnp.asarray(KS))
    np.testing.assert_allclose(-KS**2 * np.asarray(vjp(jnp.ones_like(u))[0]), ref[:, 2], rtol=1e-10)


def test_torus_large_lattice_is_stable():
    """256 × 256 from K = 0.01 to 2, where the correlation length is a few spacings: Onsager's
    limit to round-off, with ln 2 more above K_C (the torus holds both ordered phases), and
    the same energy and heat capacity."""
    K = np.array([0.01, 0.1, 0.3, 0.6, 1.0, 2.0])
    N = 256**2
    excess = np.asarray(torus_log_z(256, 256, K)) - N * np.asarray(onsager_log_z_per_spin(K))
    np.testing.assert_allclose(excess, np.where(K > K_C, np.log(2), 0.0), rtol=0, atol=1e-9)
    np.testing.assert_allclose(np.asarray(torus_energy(256, 256, K)), np.asarray(onsager_energy(K)), atol=1e-11)
    np.testing.assert_allclose(np.asarray(torus_heat_capacity(256, 256, K)), np.asarray(onsager_heat_capacity(K)),
                               rtol=1e-9, atol=1e-12)


def _onsager_quad(K: float) -> float:
    """-βf = ln(2 cosh 2K) + (1/π) ∫_0^{π/2} ln[½(1 + √(1 − k² sin²θ))] dθ, k = 2 sinh 2K / cosh² 2K,
    written as √(k'² + k² cos²θ) with k' = |1 − sinh² 2K| / cosh² 2K so that nothing cancels near K_C."""
    s = math.sinh(2 * K)
    k, kp = 2 * s / (1 + s * s), abs(1 - s * s) / (1 + s * s)
    pts = [kp * 10**j for j in range(12) if 0 < kp * 10**j < np.pi / 2]  # the kink of width k' at θ = π/2

    def f(phi):  # phi = π/2 − θ
        return math.log(0.5 * (1 + math.sqrt(kp * kp + k * k * math.sin(phi) ** 2)))

    val, _ = integrate.quad(f, 0, np.pi / 2, epsabs=1e-14, epsrel=1e-13, limit=500, points=pts or None)
    return math.log(2 * math.cosh(2 * K)) + val / np.pi


def test_onsager_log_z_matches_single_integral_form():
    Ks = [0.01, 0.1, 0.3, 0.43, K_C - 1e-6, K_C, K_C + 1e-6, 0.45, 0.6, 1.0, 2.0]
    ref = np.array([_onsager_quad(K) for K in Ks])
    np.testing.assert_allclose(np.asarray(onsager_log_z_per_spin(np.array(Ks))), ref, rtol=0, atol=5e-14)


@pytest.mark.parametrize("K", [0.3, 0.6])
def test_torus_approaches_onsager_exponentially_off_critical(K):
    """ln Z_L − L²(−βf) → 0 below K_C and → ln 2 above (two ordered phases), as e^{−L/ξ}."""
    inf = float(onsager_log_z_per_spin(K))
    Ls = np.array([16, 32, 64, 128])
    excess = np.array([float(torus_log_z(int(L), int(L), K)) for L in Ls]) - Ls**2 * inf
    err = np.abs(excess - (math.log(2) if K > K_C else 0.0))
    assert err[0] > 1e-9 and err[1] < 1e-3 * err[0]  # a factor > 1000 from L = 16 to 32
    assert err[2] < 1e-10 and err[3] < 1e-10  # then at float64 round-off of L²(−βf)


def test_torus_approaches_onsager_as_universal_term_at_critical():
    """At K_C, ln Z/N − (−βf) = C/L² + o(1/L²) on the L × L torus, with the universal
    C = ln[(θ₂ + θ₃ + θ₄)/(2η)] at τ = i (Ferdinand & Fisher 1969) ≈ 0.63991."""
    q = math.exp(-math.pi)  # theta nome at τ = i
    t2 = 2 * sum(q ** ((j + 0.5) ** 2) for j in range(10))
    t3 = 1 + 2 * sum(q ** (j * j) for j in range(1, 10))
    t4 = 1 + 2 * sum((-1) ** j * q ** (j * j) for j in range(1, 10))
    eta = math.gamma(0.25) / (2 * math.pi**0.75)  # Dedekind η(i)
    C = math.log((t2 + t3 + t4) / (2 * eta))
    inf = float(onsager_log_z_per_spin(K_C))
    err = [float(torus_log_z(L, L, K_C)) / L**2 - inf for L in (16, 32, 64, 128)]
    for L, e in zip((16, 32, 64, 128), err):
        assert abs(e * L**2 - C) < 0.2 / L**2
    assert all(3.99 < a / b < 4.01 for a, b in itertools.pairwise(err))  # shrinking as 1/L²


def test_onsager_energy_and_heat_capacity_against_finite_differences():
    """5-point differences of ln Z/N away from K_C: u = −∂(−βf)/∂K, c = K² ∂²(−βf)/∂K²."""
    Ks = np.array([0.1, 0.3, 0.38, 0.5, 0.6, 1.0])
    h = 5e-4
    f = [np.asarray(onsager_log_z_per_spin(Ks + j * h)) for j in (-2, -1, 0, 1, 2)]
    d1 = (f[0] - 8 * f[1] + 8 * f[3] - f[4]) / (12 * h)
    d2 = (-f[0] + 16 * f[1] - 30 * f[2] + 16 * f[3] - f[4]) / (12 * h**2)
    np.testing.assert_allclose(np.asarray(onsager_energy(Ks)), -d1, rtol=1e-10)
    np.testing.assert_allclose(np.asarray(onsager_heat_capacity(Ks)), Ks**2 * d2, rtol=5e-7)


# Series of -βf for the square lattice, the same coefficients at high and low temperature
# (Kramers–Wannier duality; Domb 1960): a_j for j = 2..6.
_SERIES = {2: 1.0, 3: 2.0, 4: 4.5, 5: 12.0, 6: 112.0 / 3.0}


def test_high_and_low_temperature_series():
    """−βf = 2K + Σ_j a_j u^j (u = e^{−4K}) and ln 2 + 2 ln cosh K + Σ_j a_j t^{2j} (t = tanh K), and
    the heat capacities differentiated from them by hand: the regimes where c is a small remainder."""
    for K in (2.0, 2.5, 3.0):  # from K = 2 on, the series' remainder (~130 u⁷) is below 1e-13 of c
        u = math.exp(-4 * K)
        f = 2 * K + sum(a * u**j for j, a in _SERIES.items())
        c = K**2 * sum(a * (4 * j) ** 2 * u**j for j, a in _SERIES.items())
        assert float(onsager_log_z_per_spin(K)) == pytest.approx(f, rel=1e-15, abs=1e-14)
        assert float(onsager_heat_capacity(K)) == pytest.approx(c, rel=1e-10, abs=0)
        if K <= 2.0:  # the torus's c degrades as 1e-16·e^{6K} beyond (documented)
            assert float(torus_heat_capacity(64, 64, K)) == pytest.approx(c, rel=1e-10, abs=0)
    for K in (1e-3, 1e-2, 0.05):
        t = math.tanh(K)
        sech2 = 1 - t * t  # dt/dK
        f = math.log(2) + 2 * math.log(math.cosh(K)) + sum(a * t ** (2 * j) for j, a in _SERIES.items())
        d2 = 2 * sech2 + sum(a * (2 * j * (2 * j - 1) * t ** (2 * j - 2) * sech2**2 - 4 * j * t ** (2 * j) * sech2)
                             for j, a in _SERIES.items())
        assert float(onsager_log_z_per_spin(K)) == pytest.approx(f, rel=1e-15, abs=1e-14)
        assert float(onsager_heat_capacity(K)) == pytest.approx(K**2 * d2, rel=1e-9, abs=0)
        assert float(torus_heat_capacity(64, 64, K)) == pytest.approx(K**2 * d2, rel=1e-9, abs=0)


def test_onsager_critical_point():
    """u(K_C) = −√2 (finite), c diverges as −(8K_C²/π) ln|1 − K/K_C| on both sides, +inf at K_C."""
    assert float(onsager_energy(K_C)) == pytest.approx(-math.sqrt(2), abs=1e-12)
    assert float(onsager_heat_capacity(K_C)) == math.inf
    amp = 8 * K_C**2 / math.pi
    for side in (-1, 1):
        c1, c2 = (float(onsager_heat_capacity(K_C * (1 + side * d))) for d in (1e-6, 1e-8))
        assert (c2 - c1) / math.log(100) == pytest.approx(amp, rel=1e-5)


def test_yang_magnetization():
    K = np.array([0.05, 0.3, K_C - 1e-9, K_C])
    np.testing.assert_array_equal(np.asarray(yang_magnetization(K)), 0.0)
    # by hand at K = 0.6: sinh 1.2 = 1.5094613554..., its 4th power 5.1914418706...,
    # 1 − 1/5.19144... = 0.80737528707..., to the 1/8: 0.97360866744...
    assert float(yang_magnetization(0.6)) == pytest.approx(0.9736086674403, abs=1e-12)
    # the same through t = tanh K: sinh 2K = 2t/(1 − t²)
    t = math.tanh(0.8)
    assert float(yang_magnetization(0.8)) == pytest.approx((1 - (1 - t * t) ** 4 / (16 * t**4)) ** 0.125, rel=1e-14)
    # increasing above K_C
    grid = K_C + np.geomspace(1e-8, 3.0, 8)
    m = np.asarray(yang_magnetization(grid))
    assert np.all(m > 0) and np.all(np.diff(m) > 0) and m[-1] < 1
    # → 1 as K → ∞: low-temperature series 1 − 2u² − 8u³ − 34u⁴ + O(u⁵), u = e^{−4K}
    for Kk in (1.5, 2.0, 3.0):
        u = math.exp(-4 * Kk)
        assert abs(float(yang_magnetization(Kk)) - (1 - 2 * u**2 - 8 * u**3 - 34 * u**4)) < 200 * u**5
    # critical exponent β = 1/8
    m1, m2 = (float(yang_magnetization(K_C + d)) for d in (1e-10, 1e-8))
    assert math.log(m2 / m1) / math.log(100) == pytest.approx(0.125, rel=1e-5)
    # gradient: 0 below K_C, the closed form's derivative above
    assert float(jax.grad(yang_magnetization)(0.3)) == 0.0
    h = 1e-5
    fd = (float(yang_magnetization(0.6 + h)) - float(yang_magnetization(0.6 - h))) / (2 * h)
    assert float(jax.grad(yang_magnetization)(0.6)) == pytest.approx(fd, rel=1e-8)


@pytest.mark.parametrize("rows, cols, what", [(2, 4, "rows"), (4, 2, "cols"), (1, 3, "rows"), (0, 3, "rows"),
                                              (-3, 3, "rows"), (3.0, 3, "rows"), (3, True, "cols"), ("4", 4, "rows")])
def test_bad_sides_raise(rows, cols, what):
    for fn in (torus_log_z, torus_energy, torus_heat_capacity):
        with pytest.raises(IsingInputError, match=rf"{what} must be an integer ≥ 3"):
            fn(rows, cols, 0.5)


@pytest.mark.parametrize("K", [0.0, -0.3, math.nan, math.inf, [0.2, -1.0], "0.5", 0.5 + 0.1j])
def test_bad_coupling_raises(K):
    fns = [functools.partial(torus_log_z, 4, 4), functools.partial(torus_energy, 4, 4),
           functools.partial(torus_heat_capacity, 4, 4), onsager_log_z_per_spin, onsager_energy,
           onsager_heat_capacity, yang_magnetization]
    for fn in fns:
        with pytest.raises(IsingInputError, match=r"K \(the coupling βJ\) must be"):
            fn(K)


def test_bad_coupling_under_jit_is_nan_without_a_callback():
    f = jax.jit(onsager_energy)
    assert bool(jnp.all(jnp.isnan(f(jnp.array([0.3, -0.1])))))  # eagerly: "K (the coupling βJ) must be finite and > 0"
    assert "callback" not in f.lower(jnp.array([0.3, -0.1])).as_text()


# ---- every K > 0 and any size: the series beyond the closed forms' range ------------------------

EXTREME_KS = np.array([1e-300, 1e-38, 1e-20, 1e-10, 1e-6, 1e-4, 3e-4, 1e-3, 0.01, 0.3, K_C, 2.5, 3.0, 4.0, 6.0,
                       20.0, 50.0, 1e3, 1e6])


@pytest.mark.parametrize("rows, cols", [(3, 3), (4, 4), (3, 5)])
def test_torus_at_extreme_couplings_equals_enumeration(rows, cols):
    """Far from K_C the closed form's derivatives were lost to rounding (u = −512 per spin at
    K = 1e-10, NaN from K = 20); the matched series agree with enumeration in float64 there."""
    ref = np.array([_brute(rows, cols, float(K)) for K in EXTREME_KS])
    log_z = np.asarray(torus_log_z(rows, cols, EXTREME_KS))
    u = np.asarray(torus_energy(rows, cols, EXTREME_KS))
    c = np.asarray(torus_heat_capacity(rows, cols, EXTREME_KS))
    np.testing.assert_allclose(log_z, ref[:, 0], rtol=1e-13)
    np.testing.assert_allclose(u, ref[:, 1], rtol=1e-9, atol=1e-15)
    np.testing.assert_allclose(c, ref[:, 2], rtol=5e-9, atol=1e-300)
    assert np.all((u >= -2) & (u <= 0)) and np.all(c >= 0)
    # reverse mode at K = 50 (NaN before): ∂ln Z/∂K = 2N, the ground states' bonds
    assert float(jax.grad(lambda k: torus_log_z(rows, cols, k))(50.0)) == pytest.approx(2 * rows * cols, rel=1e-12)


def test_torus_and_infinite_lattice_in_float32():
    """The float32 programs (what users get without x64): finite at every K, u in [−2, 0], c ≥ 0,
    and within float32's reach of the float64 enumeration (c to 2e-3: a remainder of larger terms)."""
    from isingattn.onsager import _log_z_taylor, _onsager_energy, _onsager_heat_capacity, _onsager_log_z

    K = EXTREME_KS[(EXTREME_KS > 1e-38) & (EXTREME_KS != K_C)].astype(np.float32)  # c(K_C) = +inf
    d0, d1, d2 = (np.asarray(x, np.float64) for x in _log_z_taylor(2, 4.0, 4, jnp.asarray(K)))
    ref = np.array([_brute(4, 4, float(k)) for k in K.astype(np.float64)])
    assert all(np.all(np.isfinite(x)) for x in (d0, d1, d2))
    np.testing.assert_allclose(d0, ref[:, 0], rtol=1e-6)
    np.testing.assert_allclose(-d1 / 16, ref[:, 1], rtol=2e-5, atol=1e-7)
    np.testing.assert_allclose(K.astype(np.float64) ** 2 * d2 / 16, ref[:, 2], rtol=2e-3, atol=1e-9)
    Kj = jnp.asarray(K)
    lz, u, c = (np.asarray(f(Kj), np.float64) for f in (_onsager_log_z, _onsager_energy, _onsager_heat_capacity))
    assert np.all(np.isfinite(lz)) and np.all(np.isfinite(u)) and np.all(np.isfinite(c))
    ref64 = [np.asarray(f(K.astype(np.float64))) for f in (onsager_log_z_per_spin, onsager_energy, onsager_heat_capacity)]
    np.testing.assert_allclose(lz, ref64[0], rtol=1e-6)
    np.testing.assert_allclose(u, ref64[1], rtol=1e-4, atol=1e-7)
    np.testing.assert_allclose(c, ref64[2], rtol=2e-3, atol=1e-9)


def test_infinite_lattice_at_extreme_couplings():
    """−βf, u and c at K from 1e-300 to 1e6: the series' closed forms (ln 2 + 2 ln cosh K + …,
    2K + e^{−8K} + …) to leading order, u in [−2, 0] (it was −6e21 at K = 1e-30, +1142 at 1e-20)
    and c ≥ 0; the series meet the elliptic forms at their thresholds."""
    K = EXTREME_KS
    lz, u, c = (np.asarray(f(K)) for f in (onsager_log_z_per_spin, onsager_energy, onsager_heat_capacity))
    small, large = K < 1e-4, K > 5
    np.testing.assert_allclose(lz[small], math.log(2) + K[small] ** 2, rtol=1e-12)
    np.testing.assert_allclose(u[small], -2 * K[small], rtol=1e-8)
    np.testing.assert_allclose(c[small], 2 * K[small] ** 2, rtol=1e-8, atol=1e-300)
    np.testing.assert_allclose(lz[large], 2 * K[large] + np.exp(-8 * K[large]), rtol=1e-15)
    np.testing.assert_allclose(u[large], -2 + 8 * np.exp(-8 * K[large]), rtol=1e-15)
    np.testing.assert_allclose(c[large], 64 * K[large] ** 2 * np.exp(-8 * K[large]), rtol=1e-5, atol=1e-300)
    assert np.all((u >= -2) & (u <= 0)) and np.all(c >= 0) and np.all(np.isfinite(lz))
    # continuity at the thresholds, each side computed by the other method
    for k0 in (0.01, 3.0):
        pair = np.array([np.nextafter(k0, 0.0), k0, np.nextafter(k0, 1.0)])
        for f, tol in ((onsager_log_z_per_spin, 1e-13), (onsager_energy, 1e-12), (onsager_heat_capacity, 1e-10)):
            a, b, c_ = np.asarray(f(pair))
            assert max(abs(a - b), abs(c_ - b)) <= tol * abs(b), (f.__name__, k0, a, b, c_)


def _thin_ring_reference(width: int, K: float):
    """ln λ, (ln λ)′ and (ln λ)″ of the largest eigenvalue of the column transfer matrix of a
    periodic strip ``width`` spins around (float64; the second derivative by perturbation theory):
    a torus of length L ≫ 1 has ln Z = L ln λ."""
    s = np.array(list(itertools.product([1, -1], repeat=width)), np.float64)
    ring = np.sum(s * np.roll(s, 1, axis=1), axis=1)
    a = 0.5 * (ring[:, None] + ring[None, :]) + s @ s.T  # the exponent per unit K
    shift = np.max(a)
    T = np.exp(K * (a - shift))
    lam, V = np.linalg.eigh(T)
    v, l0 = V[:, -1], lam[-1]
    d1 = v @ (a * T) @ v
    d2 = v @ (a * a * T) @ v + 2 * sum((v @ (a * T) @ V[:, k]) ** 2 / (l0 - lam[k]) for k in range(len(lam) - 1))
    return K * shift + np.log(l0), d1 / l0, d2 / l0 - (d1 / l0) ** 2


def test_long_thin_torus_against_its_transfer_matrix():
    """A 10^12 × 4 torus (an int32 overflow before): against the 16 × 16 transfer matrix, at
    K = 0.3 and at K = 3, where domain walls across the short side carry a quarter of c."""
    L, w = 10**12, 4
    for K in (0.3, 3.0):
        lz, d1, d2 = _thin_ring_reference(w, K)
        assert float(torus_log_z(L, w, K)) == pytest.approx(L * lz, rel=1e-12)
        assert float(torus_energy(w, L, K)) == pytest.approx(-d1 / w, rel=1e-12, abs=1e-15)
        assert float(torus_heat_capacity(L, w, K)) == pytest.approx(K**2 * d2 / w, rel=1e-3)
    with pytest.raises(IsingInputError, match="shorter side"):
        torus_log_z(2**25, 2**25, 0.3)


try:
    from hypothesis import given, settings, strategies as st
except ImportError:  # hypothesis is an optional test dependency
    given = None

if given is not None:
    _K_VALUES = st.one_of(st.floats(min_value=1e-300, max_value=1e6, allow_nan=False),
                          st.floats(min_value=1e-3, max_value=5.0), st.sampled_from([float(K_C), 0.01, 2.5, 3.0]))
    _SIDES = st.sampled_from([(3, 3), (3, 4), (4, 4), (4, 3)])

    @settings(max_examples=40)
    @given(sides=_SIDES, K=_K_VALUES)
    def test_property_torus_is_finite_physical_and_exact(sides, K):
        """Any valid K: ln Z, u and c finite, ln Z ≥ max(N ln 2, 2NK + ln 2), u in [−2, 0], c ≥ 0,
        and equal to the float64 enumeration of the 3×3 to 4×4 torus."""
        rows, cols = sides
        N = rows * cols
        lz, u, c = (float(f(rows, cols, K)) for f in (torus_log_z, torus_energy, torus_heat_capacity))
        assert all(math.isfinite(x) for x in (lz, u, c))
        assert lz >= max(N * math.log(2), 2 * N * K + math.log(2)) * (1 - 1e-14)
        assert -2 <= u <= 0 and c >= 0
        ref = _brute(rows, cols, K)
        assert lz == pytest.approx(ref[0], rel=1e-13)
        assert u == pytest.approx(ref[1], rel=1e-9, abs=1e-15)
        assert c == pytest.approx(ref[2], rel=5e-8, abs=1e-300)  # the series' truncation: ~e^{-8K} relative

    @settings(max_examples=40)
    @given(K=_K_VALUES)
    def test_property_infinite_lattice_is_finite_and_physical(K):
        """Any valid K: −βf finite and ≥ max(ln 2, 2K), u in [−2, 0], c ≥ 0 (+inf only at K_C)."""
        lz, u, c = (float(f(K)) for f in (onsager_log_z_per_spin, onsager_energy, onsager_heat_capacity))
        assert math.isfinite(lz) and lz >= max(math.log(2), 2 * K) * (1 - 1e-14)
        assert -2 <= u <= 0 and c >= 0 and (math.isfinite(c) or K == float(K_C))

    @settings(max_examples=30)
    @given(K=st.one_of(st.floats(max_value=0.0), st.just(float("nan")), st.just(float("inf")), st.text(max_size=3),
                       st.just(1 + 2j), st.booleans()),
           sides=st.one_of(_SIDES, st.tuples(st.integers(-3, 2), st.integers(3, 5)),
                           st.tuples(st.just(3.0), st.just(4))))
    def test_property_bad_arguments_raise_a_library_error(K, sides):
        """A coupling ≤ 0, non-finite, non-real or non-numeric, or a side below 3 or not an int:
        IsingInputError, never a value."""
        for f in (lambda k: torus_log_z(*sides, k), onsager_log_z_per_spin, onsager_energy):
            with pytest.raises(IsingInputError):
                f(K)
