"""Exact enumeration by meet in the middle (DESIGN.md §3).

Split the spins into halves A and B. With ``u[q,a] = exp(-β E_A(a))``,
``v[q,b] = exp(-β E_B(b))`` and the query-independent cross kernel
``K[a,b] = exp(-β E_AB(a,b))``, every quantity is a GEMM against K:

    Z_q = u_qᵀ K v_q,   P_q(b) ∝ (u_q K)_b v_qb,   P_q(a) ∝ u_qa (K v_q)_a.

Cost ``O(Q 2^n)`` dense GEMM work for Q queries sharing J, memory
``O(2^(n/2) (Q + 2^(n/2)))``; no ``[Q, 2^n]`` array is ever formed.

Stability: u, v and each column of K are shifted by their maxima, so every
product is ≤ 1 and nothing overflows. Underflow can still drop the dominant terms
when h and J favour different configurations (e.g. |h| ~ 1e3 against |J| ~ 1e2).
A rigorous bound on the mass lost to flushed terms is checked per query; the few
queries that fail it are recomputed in log space (``O(2^n)`` exps each), so the
result is finite and accurate for every finite input.

Several devices: ``Exact(mesh=...)`` splits the ``2^(n - n//2)`` B-half configurations
(the columns of K) over the mesh with ``jax.shard_map``. Each device builds only its
columns of K; the products over b and every normalization over b are combined across
devices (psum / pmax, shifted as log-sum-exp), so K's memory and the GEMM work are
divided by the number of devices. Same results up to float summation order.
"""

from __future__ import annotations

import math
from functools import partial
from typing import ClassVar, Optional

import equinox as eqx
import jax
import numpy as np
import jax.numpy as jnp
from jax import lax
from jax.custom_derivatives import SymbolicZero
from jax.scipy.special import logsumexp
from jax.sharding import Mesh, PartitionSpec as P

from isingattn import validate as V
from isingattn.energy import cross_energy, energy, spin_table
from isingattn.engine import Engine
from isingattn.errors import IsingInputError, TooManySpinsError
from isingattn.marginals import Label, Marginals, linear_response_corr
from isingattn.model import IsingModel

LOST_MASS_TOL = 1e-7  # relative mass the fast path may lose to underflow
# The one size limit of exact enumeration (2^n configurations, corr included), quoted everywhere: Exact's
# default max_n, compare's exact reference, IsingDistribution's exact draws and fit's automatic choice.
EXACT_MAX_N = 24


def _safe_log(x):
    pos = x > 0
    return jnp.where(pos, jnp.log(jnp.where(pos, x, 1.0)), -jnp.inf)


class Exact(Engine):
    """Exact marginals, ``log Z`` and (with ``corr=True``) pair correlations.

    Differentiable in ``h`` and ``J`` (forward and reverse mode) through a JVP rule built on the
    fluctuation identities (``_mitm_jvp``). Queries whose models share ``J``
    (broadcast batch axes of ``J``) share the ``2^n`` cross kernel. Causal models are
    solved in ~log2(n) prefix buckets by ``Engine.marginals`` (``isingattn.engine.CausalBuckets``).

    Cost grows as ``2^n``. Above ``max_n`` (default :data:`EXACT_MAX_N` = 24) it raises;
    use ``Banded`` (banded J), ``MeanField``, ``Gibbs`` or ``SQA`` instead, or raise ``max_n``
    if you have the memory.

    ``mesh`` (a ``jax.sharding.Mesh``, e.g. ``isingattn.sharding.data_mesh()``) splits
    the enumerated configurations over all its devices: memory and work per device drop
    by the device count. It pays off for large ``n`` and few queries; for many queries
    (training) leave it None and shard the batch instead (``isingattn.sharding``).
    """

    exact: ClassVar[bool] = True
    max_n: int = eqx.field(static=True, default=EXACT_MAX_N, converter=V.plain)
    corr: bool = eqx.field(static=True, default=False, converter=V.plain)
    mesh: Optional[Mesh] = eqx.field(static=True, default=None)

    def __check_init__(self):
        V.positive_int("max_n", self.max_n, owner="Exact")
        V.boolean("corr", self.corr, owner="Exact")
        if self.mesh is not None and not isinstance(self.mesh, Mesh):
            raise IsingInputError(
                f"mesh must be a jax.sharding.Mesh (e.g. isingattn.sharding.data_mesh()) or None; got {type(self.mesh).__name__}."
            )

    def _marginals(self, model: IsingModel, key: Optional[jax.Array]) -> Marginals:
        if model.n > self.max_n:
            raise TooManySpinsError(
                f"Exact enumerates 2^n configurations and is limited to n ≤ max_n = {self.max_n}; this model has "
                f"n = {model.n} spins. Use inference.Banded for banded couplings, or an approximate engine "
                "(MeanField, Gibbs, SQA), or raise max_n if you have the memory (2^n floats)."
            )
        return _solve_model(model.h, model.J, model.beta, model.mask, self.corr, self.mesh)


def _solve_model(h, J, beta, mask, want_corr: bool, mesh: Optional[Mesh] = None) -> Marginals:
    """Group the batch by shared J, solve, and restore the batch layout."""
    n = h.shape[-1]
    batch = jnp.broadcast_shapes(h.shape[:-1], J.shape[:-2], () if mask is None else mask.shape[:-1])
    r = len(batch)
    jb = (1,) * (r - (J.ndim - 2)) + J.shape[:-2]
    shared = [i for i in range(r) if jb[i] == 1 and batch[i] > 1]
    own = [i for i in range(r) if i not in shared]
    perm = own + shared
    G = math.prod(batch[i] for i in own)
    Q = math.prod(batch[i] for i in shared)

    def group(x, tail):  # [*batch, *tail] -> [G, Q, *tail]
        x = jnp.broadcast_to(x, batch + x.shape[x.ndim - tail :])
        x = jnp.transpose(x, perm + list(range(r, r + tail)))
        return x.reshape((G, Q) + x.shape[r:])

    Jg = jnp.broadcast_to(J.reshape(jb + (n, n)), tuple(batch[i] if i in own else 1 for i in range(r)) + (n, n))
    Jg = jnp.transpose(Jg, perm + [r, r + 1]).reshape(G, n, n)
    act = None if mask is None else group(mask, 1)

    def mean_fn(hg):
        return _solve_grouped(hg, Jg, beta, act, mesh)

    hg = group(h, 1)
    mean, log_z, stable = mean_fn(hg)
    corr = None
    if want_corr:
        corr = linear_response_corr(lambda x: mean_fn(x)[0], hg, mean, beta)  # [G, Q, n(j), n(k)]

    inv = [perm.index(i) for i in range(r)]
    tb = tuple(batch[i] for i in perm)

    def ungroup(x, tail):
        x = x.reshape(tb + x.shape[2:])
        return jnp.transpose(x, inv + list(range(r, r + tail)))

    return Marginals(
        mean=ungroup(mean, 1),
        corr=None if corr is None else ungroup(corr, 2),
        log_z=ungroup(log_z, 0),
        info={"stable_path": ungroup(stable, 0), "log_z_kind": Label("exact")},
    )


def _solve_grouped(h, J, beta, act, mesh: Optional[Mesh] = None):
    """h: [G, Q, n], J: [G, n, n], act: [G, Q, n] bool or None.
    Returns mean [G, Q, n], log_z [G, Q], stable_path [G, Q] (bool)."""
    G, Q, n = h.shape
    dt = h.dtype
    nA = n // 2
    SA, SB = spin_table(nA, dt), spin_table(n - nA, dt)
    J = (J + jnp.swapaxes(J, -1, -2)) / 2  # a no-op on valid input; makes the gradient w.r.t. J symmetric too
    const = jnp.zeros((G, Q), dt)
    p = None
    if act is not None:
        # Pin inactive spins to +1 and cancel the field they would leak onto the
        # active ones; K stays shared by every query even with per-query masks.
        p = (~act).astype(dt)
        h = jnp.where(act, h - jnp.einsum("gjk,gqk->gqj", J, p), 0.0)
        const = beta * jnp.einsum("gqj,gjk,gqk->gq", p, J, p) / 2  # -βE of the pinned pairs

    if mesh is None:
        mean, log_z, fail = _enumerate(h, J, beta, p, SA, SB)
    else:
        # Split the B configurations (K's columns) over every device of the mesh. Padding
        # rows (to a multiple of the device count) get zero weight through ``valid``.
        axes = tuple(mesh.axis_names)
        NB = SB.shape[0]
        pad = -NB % mesh.size
        SB = jnp.pad(SB, ((0, pad), (0, 0)), constant_values=1)
        valid = jnp.arange(NB + pad) < NB
        mean, log_z, fail = jax.shard_map(
            partial(_enumerate, axes=axes, nb=NB + pad), mesh=mesh,
            in_specs=(P(), P(), P(), P(), P(), P(axes), P(axes)), out_specs=P(),
        )(h, J, beta, p, SA, SB, valid)
    if act is not None:
        mean = jnp.where(act, mean, 0.0)
    return mean, log_z - const, fail


def _lse(x, axis, axes):
    """``logsumexp`` over ``axis``, an axis split over the mesh axes ``axes`` (None: not split)."""
    if axes is None:
        return logsumexp(x, axis=axis)
    m = lax.pmax(lax.stop_gradient(jnp.max(x, axis=axis)), axes)
    m = jnp.where(jnp.isfinite(m), m, 0.0)
    return jnp.log(lax.psum(jnp.sum(jnp.exp(x - jnp.expand_dims(m, axis)), axis=axis), axes)) + m


def _enumerate(h, J, beta, p, SA, SB, valid=None, *, axes=None, nb=None):
    """Marginals, log Z (before the pinned constant) and the stable-path flag of every query.

    p: [G, Q, n] pinned spins or None. With ``axes`` (inside ``shard_map``) SB and valid
    hold this device's share of the B configurations out of ``nb``; results are global."""
    nA = SA.shape[-1]
    dt = h.dtype
    JA, JB = J[:, None, None, :nA, :nA], J[:, None, None, nA:, nA:]
    logu = -beta * energy(h[:, :, None, :nA], JA, SA)  # (G, Q, NA)
    logv = -beta * energy(h[:, :, None, nA:], JB, SB)  # (G, Q, NB)
    logK = -beta * cross_energy(J[:, :nA, nA:], SA, SB)  # (G, NA, NB), shared by the Q queries
    if p is not None:
        # configurations that flip a pinned spin get zero weight
        okA = jnp.einsum("ak,gqk->gqa", (1 - SA) / 2, p[..., :nA]) < 0.5
        okB = jnp.einsum("bk,gqk->gqb", (1 - SB) / 2, p[..., nA:]) < 0.5
        logu = jnp.where(okA, logu, -jnp.inf)
        logv = jnp.where(okB, logv, -jnp.inf)
    if valid is not None:
        logv = jnp.where(valid, logv, -jnp.inf)

    if axes is None:
        return _mitm(logu, logv, logK)  # differentiated by its own JVP rule (GEMMs, no [Q, 2^n] residuals)

    tA, tB, lost = _fast_half_logits(logu, logv, logK, axes, nb)
    fail = lost > jnp.log(jnp.asarray(LOST_MASS_TOL, dt))
    tA, tB = lax.cond(jnp.any(fail), lambda: _log_space_fix(logu, logv, logK, fail, tA, tB, axes), lambda: (tA, tB))

    log_z = _lse(tB, -1, axes)  # = logsumexp(tA, axis=-1)
    mB = lax.psum(jnp.exp(tB - log_z[..., None]) @ SB, axes)
    return jnp.concatenate([jax.nn.softmax(tA, axis=-1) @ SA, mB], axis=-1), log_z, fail


def _tables(logu, logv):
    nA, nB = logu.shape[-1].bit_length() - 1, logv.shape[-1].bit_length() - 1
    return spin_table(nA, logu.dtype), spin_table(nB, logu.dtype)


def _mitm_core(logu, logv, logK):
    """Primal of ``_mitm``; also returns the half marginals PA [G,Q,NA], PB [G,Q,NB]."""
    SA, SB = _tables(logu, logv)
    tA, tB, lost = _fast_half_logits(logu, logv, logK)
    fail = lost > jnp.log(jnp.asarray(LOST_MASS_TOL, logu.dtype))
    tA, tB = lax.cond(jnp.any(fail), lambda: _log_space_fix(logu, logv, logK, fail, tA, tB), lambda: (tA, tB))
    log_z = logsumexp(tB, axis=-1)  # = logsumexp(tA, axis=-1)
    PA, PB = jax.nn.softmax(tA, axis=-1), jax.nn.softmax(tB, axis=-1)
    return jnp.concatenate([PA @ SA, PB @ SB], axis=-1), log_z, fail, PA, PB


@jax.custom_jvp
def _mitm(logu, logv, logK):
    """mean [G,Q,n], log Z [G,Q] and the fallback flag [G,Q] of p_q(a,b) ∝ exp(logu_q(a) + logK(a,b) + logv_q(b)).

    logu [G,Q,NA] and logv [G,Q,NB] are the per-query half log-weights (-βE of each
    half), logK [G,NA,NB] the shared cross kernel. Differentiated by ``_mitm_jvp``."""
    return _mitm_core(logu, logv, logK)[:3]


def _mitm_jvp(primals, tangents):
    """Tangents by the fluctuation identities: with δ(a,b) = du(a) + dv(b) + dK(a,b),
    d log Z = E[δ] and d⟨s⟩ = E[s δ] - ⟨s⟩ E[δ] (covariances, hence β Cov(s, s_b) for h and
    ½β Cov(s, s_b s_c) for J once the chain rule reaches them).

    The expectations factor through the shared kernel like the forward pass: with
    α_q(a) = exp(logu - max logu) ≤ 1, K̂ = exp(logK - column max) ≤ 1 and
    β_q(b) = exp(logv + column max + max logu - log Z), p_q(a,b) = α(a) K̂(a,b) β(b), so

        Σ_b p δ = PA du + α · [(β dv) K̂ᵀ + β (K̂ ⊙ dK)ᵀ],   Σ_a p δ = PB dv + β · [(α du) K̂ + α (K̂ ⊙ dK)]

    are four GEMMs of the forward's shape (two when J is not perturbed). The rule is linear
    in the tangents, so reverse mode is its transpose: again four GEMMs, with K̂'s cotangent
    ``K̂ ⊙ (αᵀ ct)`` summed over the queries inside the GEMM; nothing of size [Q, 2^n] is
    formed or saved. Products flushed to zero here are the ones the forward's lost-mass bound
    already counts (Σ_b β(b) is that bound's sum), so the fast tangents are as accurate as the
    fast marginals, and finite. Queries that took the log-space fallback get zero weight in the
    GEMMs and are redone one at a time in log space (recomputed in the backward pass)."""
    logu, logv, logK = primals
    du, dv, dK = tangents
    mean, log_z, fail, PA, PB = _mitm_core(logu, logv, logK)
    zero = lambda t: isinstance(t, SymbolicZero)
    f0 = np.zeros(fail.shape, jax.dtypes.float0)
    if zero(du) and zero(dv) and zero(dK):
        return (mean, log_z, fail), (jnp.zeros_like(mean), jnp.zeros_like(log_z), f0)
    SA, SB = _tables(logu, logv)
    ok = ~fail[..., None]
    mu = jnp.max(logu, axis=-1, keepdims=True)  # finite: the all-(+1) half is never pinned away
    rK = jnp.max(logK, axis=-2, keepdims=True)
    Kh = jnp.exp(logK - rK)
    al = jnp.where(ok, jnp.exp(logu - mu), 0.0)
    be = jnp.where(ok, jnp.exp(jnp.where(ok, logv + rK + mu - log_z[..., None], -jnp.inf)), 0.0)
    PAf, PBf = jnp.where(ok, PA, 0.0), jnp.where(ok, PB, 0.0)
    KhT = jnp.swapaxes(Kh, -1, -2)
    rowA, colB = 0.0, 0.0  # Σ_b p δ [G,Q,NA] and Σ_a p δ [G,Q,NB]
    if not zero(du):
        rowA = rowA + PAf * du
        colB = colB + be * ((al * du) @ Kh)
    if not zero(dv):
        colB = colB + PBf * dv
        rowA = rowA + al * ((be * dv) @ KhT)
    if not zero(dK):
        KdK = Kh * dK
        rowA = rowA + al * (be @ jnp.swapaxes(KdK, -1, -2))
        colB = colB + be * (al @ KdK)

    # Queries that took the fallback: one at a time in log space. Each step is checkpointed,
    # so reverse mode saves only the step's inputs (not its [NA, NB] weights) and recomputes.
    fA, fB = lax.cond(jnp.any(fail), lambda: _fix_tangents(logu, logv, logK, log_z, fail, *(
        None if zero(t) else t for t in (du, dv, dK))), lambda: (jnp.zeros_like(logu), jnp.zeros_like(logv)))
    rowA, colB = rowA + fA, colB + fB
    Ed = jnp.sum(rowA, axis=-1)
    dmean = jnp.concatenate([rowA @ SA, colB @ SB], axis=-1) - mean * Ed[..., None]
    return (mean, log_z, fail), (dmean, Ed, f0)


_mitm.defjvp(_mitm_jvp, symbolic_zeros=True)


def _fix_tangents(logu, logv, logK, log_z, fail, du, dv, dK):
    """Σ_b P δ [G,Q,NA] and Σ_a P δ [G,Q,NB] of the failing queries (zeros for the others),
    with P each query's [NA, NB] probabilities in log space and δ = du(a) + dv(b) + dK(a,b)
    (None: zero)."""
    G, Q, NA = logu.shape
    NB = logv.shape[-1]
    dt = logu.dtype
    du = jnp.zeros_like(logu) if du is None else du
    dv = jnp.zeros_like(logv) if dv is None else dv

    @jax.checkpoint
    def one(args):
        g, lu, lv, lz, f, a, b = args

        def run():
            c = jnp.exp(lu[:, None] + logK[g] + lv[None, :] - lz)
            d = a[:, None] + b[None, :]
            c = c * (d if dK is None else d + dK[g])
            return c.sum(1), c.sum(0)

        return lax.cond(f, run, lambda: (jnp.zeros(NA, dt), jnp.zeros(NB, dt)))

    flat = lambda z: z.reshape((G * Q,) + z.shape[2:])
    a, b = lax.map(one, (jnp.repeat(jnp.arange(G), Q), flat(logu), flat(logv), flat(log_z), flat(fail),
                         flat(du), flat(dv)))
    return a.reshape(G, Q, NA), b.reshape(G, Q, NB)


def _fast_half_logits(logu, logv, logK, axes=None, nb=None):
    """Unnormalized log marginals of the A and B halves by two shifted GEMMs.

    Returns tA [G,Q,NA], tB [G,Q,NB] and, per query, the log of a rigorous upper
    bound on the relative mass lost to float underflow. With ``axes`` the B axis is
    this device's share of ``nb`` columns: Y and the maxima over b are combined."""
    sg = lax.stop_gradient
    dt = logu.dtype
    mu = sg(jnp.max(logu, axis=-1, keepdims=True))  # (G,Q,1)
    rK = sg(jnp.max(logK, axis=-2, keepdims=True))  # (G,1,NB) column maxima
    K = jnp.exp(logK - rK)  # the one 2^n exp, shared by all queries
    w = logv + rK  # fold the column scales into v for the transposed product
    mw = sg(jnp.max(w, axis=-1, keepdims=True))
    if axes is not None:
        mw = lax.pmax(mw, axes)
    X = jnp.exp(logu - mu) @ K  # (G,Q,NB) Σ_a u_a K_ab, entries in [0, NA]
    Y = jnp.exp(w - mw) @ jnp.swapaxes(K, -1, -2)  # (G,Q,NA) Σ_b K_ab v_b, entries in [0, NB]
    if axes is not None:
        Y = lax.psum(Y, axes)
    sB = rK + logv + mu  # log scale of each X entry, times v_b
    sA = logu + mw
    tB = _safe_log(X) + sB
    tA = _safe_log(Y) + sA
    # Every flushed product is < tiny, so each X entry lost < NA * tiny in absolute terms.
    tiny = jnp.log(jnp.asarray(jnp.finfo(dt).tiny, dt))
    NA, NB = logu.shape[-1], nb or logv.shape[-1]
    lostB = tiny + jnp.log(float(NA)) + _lse(sB, -1, axes) - _lse(tB, -1, axes)
    lostA = tiny + jnp.log(float(NB)) + logsumexp(sA, axis=-1) - logsumexp(tA, axis=-1)
    lost = jnp.maximum(lostA, lostB)
    return tA, tB, jnp.where(jnp.isnan(lost), jnp.inf, lost)


def _log_space_fix(logu, logv, logK, fail, tA, tB, axes=None):
    """Recompute the failing queries in log space, one query at a time (B split over ``axes``)."""
    G, Q, NA = logu.shape

    @jax.checkpoint  # keep the backward pass from storing [Q, 2^n] residuals
    def stable(g, lu, lv):
        L = logK[g]
        return _lse(L + lv[None, :], 1, axes) + lu, logsumexp(L + lu[:, None], axis=0) + lv

    def one(args):
        g, lu, lv, f, a, b = args
        return lax.cond(f, lambda: stable(g, lu, lv), lambda: (a, b))

    gi = jnp.repeat(jnp.arange(G), Q)
    flat = lambda x: x.reshape((G * Q,) + x.shape[2:])
    a, b = lax.map(one, (gi, flat(logu), flat(logv), flat(fail), flat(tA), flat(tB)))
    return a.reshape(tA.shape), b.reshape(tB.shape)
