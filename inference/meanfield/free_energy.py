"""Free energies ``log Z`` at the mean-field fixed points, for
:class:`~isingattn.inference.meanfield.engine.MeanField` (``Marginals.log_z``).

Conventions: ``E(s) = -Σ h_i s_i - Σ_{i<j} J_ij s_i s_j``, ``log Z = log Σ_s exp(-βE(s))``
over the active spins (``h`` and ``J`` arrive masked; an inactive spin adds nothing).

* naive (Gibbs–Bogoliubov), at the magnetizations ``m``:
  ``log Z_MF = Σ_i H(m_i) + β Σ_i h_i m_i + β Σ_{i<j} J_ij m_i m_j``, with
  ``H(m) = -p log p - q log q``, ``p, q = (1 ± m)/2`` (nats). The expected ``-βE`` plus
  the entropy of a product distribution: a lower bound on ``log Z`` for *every*
  ``m ∈ [-1, 1]^n``, and the best one at the fixed point.
* TAP (second-order Plefka): ``log Z_MF + (β²/2) Σ_{i<j} J_ij² (1 - m_i²)(1 - m_j²)``.
  Its stationarity condition is exactly MeanField's TAP map. Not a bound.
* Bethe, at BP's cavity-field messages ``u_{k→i}`` (``H_i = h_i + Σ_k u_{k→i}``,
  ``c_{i\\j} = H_i - u_{j→i}``):
  ``log Z_Bethe = Σ_{(ij)} log Z_ij + Σ_i (1 - d_i) log Z_i``, with the node and pair
  normalizations of the beliefs ``Z_i = 2 cosh βH_i`` and
  ``Z_ij = Σ_{s_i, s_j} exp(βJ_ij s_i s_j + βc_{i\\j} s_i + βc_{j\\i} s_j)``
  (Yedidia, Freeman & Weiss 2005; invariant to the messages' normalization). It is
  evaluated as ``Σ_i log Z_i + Σ_{(ij)} Δ_ij``, ``Δ_ij = log Z_ij - log Z_i - log Z_j``,
  each ``Δ_ij`` in a form that is exactly 0 for a zero coupling (``u = 0`` both ways), so
  the dense form's ``n²`` message pairs, most of them often uncoupled, add no rounding.
  Exact on trees and forests.

Each is a function ``Φ(x; θ)`` of the fixed-point state ``x`` and the parameters
``θ = (h, J, β, active)``, stationary in ``x`` at the fixed point. :func:`at_fixed_point`
differentiates it by that fact (the envelope theorem): ``d log Z/dθ = ∂Φ/∂θ`` with ``x``
held, e.g. ``∂ log Z/∂h_i = β m_i``, ``∂ log Z/∂J_ij = β m_i m_j`` (naive) or ``β`` times
the Bethe pair correlation (BP). No adjoint solve is needed for a gradient of ``log Z``,
no ``atanh(m)`` of a saturated spin is ever differentiated, and second derivatives are
exact: the rule's ``∂Φ/∂θ`` depends on ``x``, whose own derivative is the implicit one of
the fixed point (``∂² log Z/∂h∂h = β ∂m/∂h``).
"""

from __future__ import annotations

import functools
import math

import jax
import jax.numpy as jnp
import numpy as np
from jax.scipy.special import xlogy

from isingattn.energy import coupling_energy, energy
from isingattn.sparse import CouplingGraph, SparseCouplings

KINDS = {"naive": "lower_bound", "tap": "approximation", "bp": "approximation"}  # info["log_z_kind"]


@functools.partial(jax.custom_jvp, nondiff_argnums=(0,))
def at_fixed_point(phi, x, params):
    """``phi(x, params)``, differentiated as a function stationary in ``x``: its tangent
    is ``∂phi/∂params · dparams`` at the given ``x`` (whose tangent is ignored)."""
    return phi(x, params)


@at_fixed_point.defjvp
def _at_fixed_point_jvp(phi, primals, tangents):
    x, params = primals
    return jax.jvp(lambda p: phi(x, p), (params,), (tangents[1],))


def log_z(method: str, x, h, J, beta, act):
    """``log Z [...]`` of ``method`` at its fixed-point state ``x`` (magnetizations
    ``[..., n]``, or BP messages: ``[..., n, n]`` dense, ``[..., n, d]`` sparse). ``h``
    ``[..., n]`` and ``J`` (dense ``[..., n, n]`` symmetric with zero diagonal, or
    sparse) masked; ``act`` ``[..., n]`` bool or None (all active)."""
    a = None if act is None else act.astype(h.dtype)
    params = (h, J, beta, a)
    if method == "bp":
        phi = bethe_sparse if isinstance(J, SparseCouplings) else bethe_dense
    else:
        phi = functools.partial(mean_field, tap=method == "tap")
    return at_fixed_point(phi, x, params)


# ---- naive / TAP ---------------------------------------------------------------------------


def binary_entropy(m):
    """``H((1 + m)/2)`` in nats, 0 at ``m = ±1``."""
    p, q = (1 + m) / 2, (1 - m) / 2
    return -xlogy(p, p) - xlogy(q, q)


def mean_field(m, params, tap: bool):
    """Gibbs–Bogoliubov ``Σ H(m_i) - βE(m)``, plus the TAP (Onsager) term when ``tap``."""
    h, J, beta, a = params
    ent = binary_entropy(m)
    if a is not None:
        ent = ent * a
    out = jnp.sum(ent, axis=-1) - beta * energy(h, J, m)
    if tap:  # (β²/2) Σ_{i<j} J_ij² v_i v_j = -(β²/2)·coupling_energy(J², v), v = 1 - m²
        J2 = J.with_weights(J.weights**2) if isinstance(J, SparseCouplings) else J * J
        out = out - 0.5 * beta**2 * coupling_energy(J2, 1 - m * m)
    return out


# ---- Bethe ---------------------------------------------------------------------------------


def _log_cosh(x):
    return jnp.abs(x) + jnp.log1p(jnp.exp(-2 * jnp.abs(x))) - math.log(2.0)


def _log_cosh_2(x):
    return jnp.logaddexp(x, -x)  # log 2cosh x


def pair_gain(K, a, b=None):
    """``log Σ_{s,t} e^{K st + a s + b t} - log 2cosh a - log 2cosh b``
    ``= log cosh K + log(1 + tanh K tanh a tanh b)``; with ``b`` None (``b = +∞``) it is
    ``log cosh(a + K) - log cosh a``. Exactly 0 at ``K = 0``, finite and accurate for every
    finite input: ``log1p`` where ``tanh K tanh a tanh b ≥ -½``, else the log-sum-exp form
    ``log(e^K cosh(a+b) + e^{-K} cosh(a-b))/2 - log cosh a - log cosh b``, which has no
    ``log(1 - 1)`` when the product rounds to -1."""
    tb = 1.0 if b is None else jnp.tanh(b)
    t = jnp.tanh(K) * jnp.tanh(a) * tb
    near = t >= -0.5
    small = _log_cosh(K) + jnp.log1p(jnp.where(near, t, 0.0))
    if b is None:
        far = _log_cosh(a + K) - _log_cosh(a)
    else:
        far = (jnp.logaddexp(K + _log_cosh(a + b), -K + _log_cosh(a - b)) - math.log(2.0)
               - _log_cosh(a) - _log_cosh(b))
    return jnp.where(near, small, far)


def _edge_gain(K, ci, cj, vi, vj):
    """``Δ_ij = log Z_ij - log Z_i - log Z_j`` from ``β``-scaled cavity fields ``ci = βc_{i\\j}``,
    ``cj = βc_{j\\i}`` and messages ``vi = βu_{j→i}``, ``vj = βu_{i→j}`` (``βH_i = ci + vi``)."""
    return pair_gain(K, ci, cj) - pair_gain(vi, ci) - pair_gain(vj, cj)


def _node_sum(H, beta, a):
    node = _log_cosh_2(beta * H)
    if a is not None:
        node = node * a
    return jnp.sum(node, axis=-1)


def bethe_dense(u, params):
    """Bethe ``log Z`` at dense messages ``u [..., n(k), n(i)]`` (``u_{k→i}``): O(n²)."""
    h, J, beta, a = params
    n = h.shape[-1]
    H = h + jnp.sum(u, axis=-2)  # [..., n]
    ut = jnp.swapaxes(u, -1, -2)  # ut[i, j] = u_{j→i}
    c = beta * (H[..., :, None] - ut)  # c[i, j] = βc_{i\j}
    delta = _edge_gain(beta * J, c, jnp.swapaxes(c, -1, -2), beta * ut, beta * u)  # [..., i, j], symmetric
    off = 1 - jnp.eye(n, dtype=h.dtype)
    if a is not None:
        off = off * a[..., :, None] * a[..., None, :]
    return _node_sum(H, beta, a) + 0.5 * jnp.sum(delta * off, axis=(-1, -2))


@functools.lru_cache(maxsize=16)
def edge_slots(graph: CouplingGraph):
    """``(fi, fj)`` ``[E]``: for edge ``e = (i, j)`` the flat index in the ``[n, d]``
    neighbour table of ``j`` in ``i``'s row (``u_{j→i}``) and of ``i`` in ``j``'s row
    (``u_{i→j}``). Host-side, once per graph."""
    slot = graph.slot.reshape(-1)
    flat = np.flatnonzero(slot < graph.E)
    e = slot[flat]
    first = (flat // graph.max_degree) == graph.edges[e, 0]
    fi, fj = np.empty(graph.E, np.int64), np.empty(graph.E, np.int64)
    fi[e[first]], fj[e[~first]] = flat[first], flat[~first]
    return fi, fj


def bethe_sparse(u, params):
    """Bethe ``log Z`` at sparse messages ``u [..., n, d]`` (``u[i, k] = u_{nbr(i,k)→i}``,
    the layout of :func:`~isingattn.inference.meanfield.bp.bp_map_sparse`): O(n + E), from
    the edge list."""
    h, J, beta, a = params
    g = J.graph
    fi, fj = edge_slots(g)
    i, j = g.edges[:, 0], g.edges[:, 1]
    H = h + jnp.sum(u, axis=-1)  # [..., n]
    flat = u.reshape(u.shape[:-2] + (-1,))
    vi, vj = beta * flat[..., fi], beta * flat[..., fj]  # βu_{j→i}, βu_{i→j}: [..., E]
    BH = beta * H
    delta = _edge_gain(beta * J.weights, BH[..., i] - vi, BH[..., j] - vj, vi, vj)
    return _node_sum(H, beta, a) + jnp.sum(delta, axis=-1)
