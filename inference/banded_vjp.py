"""Banded's blocked forward–backward with a hand-written VJP (DESIGN.md §3, "Banded").

**The chain.** ``k`` spins are added per step to a window of ``L = 2k ≥ w`` spins (``L = k``
for small ``w``). Per row (one model: a query of one sequence), the window after step ``b``
is ``(s, y)`` (``y``: the ``k`` spins added at step ``b``; ``l``: the ``k`` oldest spins of
the window before it, which leave). The couplings of step ``b`` are pairwise, so its table
factorizes, ``K_b(l, s, y) = K1_b(l, y) K23_b(s, y)`` (``K1``: the new spins with the leaving
ones; ``K23``: with the rest of the window and among themselves), and a step is one plain GEMM
``[2^k, 2^k] @ [2^k, 2^(L-k)·rows]`` shared by every row with that ``J``, then elementwise work:

    α_b(s, y) = d_b(y) K23_b(s, y) Σ_l K1_b(l, y) α_{b-1}(l, s),        d_b(y) = exp(β h_b·y),
    β_{b-1}(l, s) = Σ_y K1_b(l, y) [K23_b(s, y) d_b(y) β_b(s, y)],     P_b = α_b β_b / z_b,

messages rescaled to max 1 after every step (``z_b = Σ α_b β_b``).

**The VJP.** With the cotangent ``g`` of the marginals, ``G = Σ_j g_j s_j``, and
``∂m_j/∂θ = β Cov(s_j, ∂E/∂θ)``, the VJP is ``ḡ_h(t) = β Cov(G, s_t)`` and, for a coupling,
``ḡ_C(t, u) = β Cov(G, s_t s_u)``: the derivative of ``⟨s_t⟩`` and ``⟨s_t s_u⟩`` along
``h + εg`` (the Hessian of ``log Z`` is symmetric). That is the tangent of forward–backward,
linear, with no second-order messages: ``α'`` and ``β'`` (``E[βG_{≤b} | x] α`` and
``E[βG_{>b} | x] β``, with the scales of ``α`` and ``β``),

    α'_b = d_b K23_b Σ_l K1_b α'_{b-1} + β (g_b·y) α_b,   β'_{b-1} = Σ_y K1_b K23_b d_b (β'_b + β (g_b·y) β_b),

so that ``E[βG f(x_b)] = Σ_x f (α'_b β_b + α_b β'_b) / z_b``. The couplings inside the window
``(s, y)`` get ``Σ_rows (W_b + ρ P_b)`` with ``W_b = (α'_b β_b + α_b β'_b) / z_b`` and
``ρ = β ḡ_{log Z} - E[βG]``; those between ``l`` and ``y`` (never in one window) get
``K1_b ⊙ Σ_rows [α_{b-1} ⊗ (V'_b + ρ V_b) + α'_{b-1} ⊗ V_b] / (M_b z_b)`` with
``V = K23 d β``, ``V' = K23 d (β' + β (g·y) β)``: one GEMM over the rows per step.

**Cost.** The primal is two transfers per step and row (``α``, ``β``). The backward pass
recomputes them alongside the tangents (``[α, α']`` forward and ``[β, β']`` backward, each one
GEMM over both) and adds the row contraction: four GEMMs of the same size. Nothing is kept
between the forward and the backward pass but the inputs: on a CPU, storing every step's
messages costs more in page faults and memory traffic than recomputing them. For the same
reason the rows are processed in chunks of sequences (``CHUNK_BYTES`` of messages per step),
whose buffers are reused chunk after chunk and stay in cache.

**Causal models** (query ``i`` sees spins ``0..i``): row ``i`` is front-padded with
``o = k - 1 - i mod k`` free spins so that its chain ends exactly at the end of step
``i // k``; the ``k`` offsets are ``k`` classes of rows with their own (shifted) tables, and no
step needs a table for a partial block. A row that has ended carries ``β = 0`` from then on,
so it contributes nothing. The steps run in ``CAUSAL_GROUPS`` scans, each over the rows still
live at its first step (work ``(1 + 1/G) / 2`` of full chains).

Layout: ``[G, O, a, P, c, RC, rb]``: G the batch along which J varies, O the offset classes,
``(a, c)`` the window state (``a``: its first ``k`` spins, the next step's ``l``), ``P`` the
pair (value, tangent), RC rows per class (causal: the step at which the row ends), rb the
sequences of the chunk; rows last, so that reductions over states vectorize along them.
"""

from __future__ import annotations

import math
from functools import partial

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from isingattn.energy import spin_table

CAUSAL_GROUPS = 4  # causal: scans over the rows still live, work (1 + 1/G)/2 of full chains; compile time ~ G
CHUNK_BYTES = 1 << 19  # messages per step and chunk of rows (~L2-sized): buffers reused chunk after chunk


def _guard(x, floor):
    """(x where x > floor else 1, 0 where x > floor else inf): a divisor and the flag of its failure."""
    ok = x > floor
    return jnp.where(ok, x, 1.0), jnp.where(ok, jnp.zeros_like(x), jnp.inf)


def _energies(C, L: int, k: int):
    """Step couplings ``C [..., k, L+k]`` (new spin ``t`` with window slot ``u < L``, and with new spin
    ``u - L``) -> ``E1 [..., 2^k (l), 2^k (y)]`` (new spins with the ``k`` oldest) and ``E23 [..., 2^(L-k) (s), 2^k (y)]``
    (with the rest of the window, and among themselves): ``E(l, s, y) = E1(l, y) + E23(s, y)``."""
    dt = C.dtype
    Sk, Ss = spin_table(k, dt), spin_table(L - k, dt)
    E1 = jnp.einsum("lu,...tu,yt->...ly", Sk, C[..., :k], Sk)
    intra = jnp.einsum("yu,...tu,yt->...y", Sk, C[..., L:], Sk)
    E23 = jnp.einsum("su,...tu,yt->...sy", Ss, C[..., k:L], Sk) + intra[..., None, :]
    return E1, E23


def _tables(C, beta, L: int, k: int):
    """``K1 = exp(β E1 - sh1)``, ``K23 = exp(β E23 - sh23)`` (entries ≤ 1) and the log of the scale ``sh1 + sh23``."""
    sg = lax.stop_gradient
    E1, E23 = _energies(C, L, k)
    sh1, sh23 = sg(jnp.max(beta * E1, axis=(-2, -1))), sg(jnp.max(beta * E23, axis=(-2, -1)))
    return jnp.exp(beta * E1 - sh1[..., None, None]), jnp.exp(beta * E23 - sh23[..., None, None]), sh1 + sh23


class _Plan:
    """Static shapes of one call."""

    def __init__(self, L, k, nb, G, O, RC, rb, nchunks, causal):
        self.L, self.k, self.nb, self.causal = L, k, nb, causal
        self.G, self.O, self.RC, self.rb, self.nchunks = G, O, RC, rb, nchunks
        self.nk, self.ns = 2**k, 2 ** (L - k)
        ng = min(CAUSAL_GROUPS, nb) if causal else 1
        bounds = [(g * nb) // ng for g in range(ng + 1)]
        # causal: row rc ends at step rc, and the rows live in group g are rc >= bounds[g]
        self.groups = [(b0, b1, b0 if causal else 0) for b0, b1 in zip(bounds[:-1], bounds[1:])]
        self.end = np.arange(RC) if causal else np.full(RC, nb - 1)

    # the window state is stored as [a, P, c] (a: its first k spins); elementwise work uses [s, P, y]
    # (y: its last k spins). For L = 2k these coincide; for L = k (c = 1) they are a transpose.
    def sy(self, x):
        return x if self.ns > 1 else jnp.swapaxes(x, 2, 4)

    def gemm(self, a, K1):
        """Forward: state ``[G, O, l, P, s, ...]`` -> ``Σ_l K1(l, y) a(l, ...)`` as ``[G, O, s, P, y, ...]``."""
        G, O = a.shape[:2]
        F = jnp.einsum("goly,golx->goyx", K1, a.reshape(G, O, self.nk, -1)).reshape(a.shape)
        return jnp.swapaxes(F, 2, 4)

    def gemm_back(self, v, K1):
        """Backward: ``v [G, O, s, P, y, ...]`` -> ``Σ_y K1(l, y) v(y, ...)``, the state ``[G, O, l, P, s, ...]``."""
        G, O = v.shape[:2]
        v = jnp.swapaxes(v, 2, 4)
        return jnp.einsum("goly,goyx->golx", K1, v.reshape(G, O, self.nk, -1)).reshape(v.shape)


def _field(hb, beta, k):
    """hb ``[G, O, k, rc, rb]`` -> ``d [G, O, 1, 1, 2^k (y), rc, rb]`` (max 1) and the log of its scale."""
    dshift = beta * jnp.abs(hb).sum(2)
    d = jnp.exp(beta * jnp.einsum("yt,gotrb->goyrb", spin_table(k, hb.dtype), hb) - dshift[:, :, None])
    return d[:, :, None, None], dshift


def _forward_chunk(p: _Plan, hs, K1, K23, sh, beta):
    """Primal of one chunk: hs [nb, G, O, k, RC, rb] -> m (like hs), log_z, lost [G, O, RC, rb]."""
    dt = hs.dtype
    G, O, RC, rb, k, nk, ns = p.G, p.O, p.RC, p.rb, p.k, p.nk, p.ns
    Sk = spin_table(k, dt)
    tiny = float(jnp.finfo(dt).tiny)
    log_k_tiny = math.log((2 * nk + 1) * tiny)  # each entry: ≤ 2^k flushed products and K's own flushes
    sg = lax.stop_gradient
    K23b = K23[:, :, :, :, None, :, None, None]  # [nb, G, O, s, 1, y, 1, 1]

    def fwd(carry, x, lo):
        a, c, b = carry  # state [G, O, nk, 1, ns, rc, rb] (max 1), log of its scale [G, O, rc, rb], step
        d, dshift = _field(x["h"], beta, k)
        g = p.gemm(a, x["K1"]) * x["K23"] * d  # [G, O, s, 1, y, rc, rb]
        Mx, flag = _guard(sg(jnp.max(g, axis=(2, 3, 4))), tiny)
        sa = jnp.sum(g, axis=(2, 3, 4)) / Mx
        alpha = g / Mx[:, :, None, None, None]
        c = c + jnp.log(Mx) + x["sh"][:, :, None, None] + dshift
        out = dict(alpha=alpha, Mx=Mx, flag=flag, la=jnp.log(sa))
        if p.causal:  # log Z of the rows that end at this step (row b - lo)
            tot, fz = _guard(lax.dynamic_index_in_dim(sa, b - lo, 2, keepdims=False), tiny)
            out.update(lz=lax.dynamic_index_in_dim(c, b - lo, 2, keepdims=False) + jnp.log(tot), fz=fz)
        return (p.sy(alpha), c, b + 1), out

    def bwd(carry, x):
        prop, Mb, bflag, b = carry  # β_b before its normalization by Mb ([s, P, y] layout), its guard flag
        live, start = (x["end"] > b)[:, None], (x["end"] == b)[:, None]  # [rc, 1]
        bm = jnp.where(live, prop / Mb[:, :, None, None, None], jnp.where(start, 1.0, 0.0).astype(dt))
        Mb, bflag = jnp.where(live, Mb, 1.0), jnp.where(live, bflag, 0.0)
        a = x["alpha"]
        Pn = (a * bm).sum((2, 3))  # [G, O, y, rc, rb]
        tot, flag = _guard(Pn.sum(2), math.sqrt(tiny))
        m = jnp.einsum("yt,goyrb->gotrb", Sk, Pn) / tot[:, :, None]
        lb, lt = sg(jnp.log(bm.sum((2, 3, 4)))), sg(jnp.log(tot))
        lost = (jnp.logaddexp(log_k_tiny - jnp.log(x["Mx"]) + lb - lt, log_k_tiny - jnp.log(Mb) + x["la"] - lt)
                + flag + x["flag"] + bflag)
        lost = jnp.where(x["end"][:, None] >= b, lost, -jnp.inf)  # rows that ended before: part of no result
        d, _ = _field(x["h"], beta, k)
        prop = p.sy(p.gemm_back(bm * x["K23"] * d, x["K1"]))
        Mb_new, bflag_new = _guard(sg(jnp.max(prop, axis=(2, 3, 4))), tiny)
        return (prop, Mb_new, bflag_new, b - 1), dict(m=m, lost=lost)

    # forward scans, group by group, each over the rows live at its first step
    a0 = jnp.zeros((G, O, nk, 1, ns, RC, rb), dt).at[:, :, 0, 0, 0].set(1.0)  # state layout, before spin 0
    carry = (a0, jnp.zeros((G, O, RC, rb), dt), jnp.int32(0))
    fouts, prev = [], 0
    for b0, b1, lo in p.groups:
        carry = (carry[0][..., lo - prev:, :], carry[1][..., lo - prev:, :], carry[2])
        xs = dict(h=hs[b0:b1, ..., lo:, :], K1=K1[b0:b1], K23=K23b[b0:b1], sh=sh[b0:b1])
        carry, out = lax.scan(partial(fwd, lo=lo), carry, xs)
        fouts.append(out)
        prev = lo
    if p.causal:  # row rc ends at step rc: its log Z was taken there
        log_z = jnp.moveaxis(jnp.concatenate([o["lz"] for o in fouts], axis=0), 0, 2)  # [G, O, RC, rb]
        fz = jnp.moveaxis(jnp.concatenate([o["fz"] for o in fouts], axis=0), 0, 2)
    else:
        tot, fz = _guard(carry[0].sum((2, 3, 4)), tiny)
        log_z = carry[1] + jnp.log(tot)

    # backward scans, last group first; the rows of an earlier group join with β = 0 until they start
    ms = [None] * len(fouts)
    lost = jnp.full((G, O, RC, rb), -jnp.inf, dt)
    rows = RC - p.groups[-1][2]
    bc = (jnp.zeros((G, O, ns, 1, nk, rows, rb), dt), jnp.ones((G, O, rows, rb), dt),
          jnp.zeros((G, O, rows, rb), dt), jnp.int32(p.nb - 1))
    for gi in range(len(fouts) - 1, -1, -1):
        b0, b1, lo = p.groups[gi]
        grow = RC - lo - bc[1].shape[2]  # rows that end in this group join
        pad = lambda x, v=0.0: jnp.pad(x, [(0, 0)] * (x.ndim - 2) + [(grow, 0), (0, 0)], constant_values=v)
        bc = (pad(bc[0]), pad(bc[1], 1.0), pad(bc[2]), bc[3])
        f = fouts[gi]
        xs = dict(h=hs[b0:b1, ..., lo:, :], K1=K1[b0:b1], K23=K23b[b0:b1], alpha=f["alpha"], Mx=f["Mx"],
                  flag=f["flag"], la=f["la"], end=jnp.broadcast_to(jnp.asarray(p.end[lo:], jnp.int32), (b1 - b0, RC - lo)))
        bc, out = lax.scan(bwd, bc, xs, reverse=True)
        ms[gi] = jnp.pad(out["m"], [(0, 0)] * 4 + [(lo, 0), (0, 0)])
        lost = jnp.logaddexp(lost, jnp.pad(jax.nn.logsumexp(out["lost"], axis=0),
                                           [(0, 0)] * 2 + [(lo, 0), (0, 0)], constant_values=-jnp.inf))
    m = jnp.concatenate(ms, axis=0)
    lost = sg(lost + fz)
    return m, log_z, jnp.where(jnp.isnan(lost), jnp.inf, lost)


def _backward_chunk(p: _Plan, hs, K1, K23, beta, m, gm, glz):
    """VJP of one chunk's (m, log_z) for cotangents gm [nb, G, O, k, RC, rb], glz [G, O, RC, rb]; m: the primal
    means. Returns gh (like hs) and the cotangents of the energies of every step, gE1 [nb, G, O, 2^k, 2^k] and
    gE23 [nb, G, O, 2^(L-k), 2^k], summed over the chunk's rows."""
    dt = hs.dtype
    G, O, RC, rb, k, nk, ns = p.G, p.O, p.RC, p.rb, p.k, p.nk, p.ns
    Sk = spin_table(k, dt)
    tiny = float(jnp.finfo(dt).tiny)
    K23b = K23[:, :, :, :, None, :, None, None]
    pair = np.arange(2)[:, None, None, None].astype(dt)  # [P, 1(y), 1, 1]: 0 value, 1 tangent
    gy_all = beta * jnp.einsum("yt,ngotrb->ngoyrb", Sk, gm)[:, :, :, None, None]  # β (g_b·y): [nb, G, O, 1, 1, y, RC, rb]

    # 1: [α, α'] forward, every step kept (the chunk's buffers are small)
    def fwd(a2, x):
        d, _ = _field(x["h"], beta, k)
        g = p.gemm(a2, x["K1"]) * x["K23"] * d  # [G, O, s, 2, y, rc, rb]
        Mx, _ = _guard(lax.stop_gradient(jnp.max(g[:, :, :, 0], axis=(2, 3))), tiny)
        g = g / Mx[:, :, None, None, None]
        a2 = g + pair * x["gy"] * g[:, :, :, :1]  # α'_b += β (g·y) α_b
        return p.sy(a2), (a2, Mx)

    a0 = jnp.zeros((G, O, nk, 2, ns, RC, rb), dt).at[:, :, 0, 0, 0].set(1.0)  # state layout, before spin 0
    carry, prev, fouts = a0, 0, []
    for b0, b1, lo in p.groups:
        carry = carry[..., lo - prev:, :]
        xs = dict(h=hs[b0:b1, ..., lo:, :], K1=K1[b0:b1], K23=K23b[b0:b1], gy=gy_all[b0:b1, ..., lo:, :])
        carry, out = lax.scan(fwd, carry, xs)
        fouts.append(out)
        prev = lo

    # 2: [β, β'] backward, combined with [α, α'] of the step and of the one before
    def bwd(carry, x):
        prop, Mb, b = carry
        live, start = (x["end"] > b)[:, None], (x["end"] == b)[:, None]
        b2 = jnp.where(live, prop / Mb[:, :, None, None, None], jnp.where(start, 1.0 - pair, 0.0).astype(dt))
        a2 = x["a2"]
        ab = (a2[:, :, :, :1] * b2).sum(2)  # [G, O, P, y, rc, rb]: Σ_s α β, Σ_s α β'
        z, _ = _guard(ab[:, :, 0].sum(2), math.sqrt(tiny))  # [G, O, rc, rb]
        Wy = ab[:, :, 1] + (a2[:, :, :, 1] * b2[:, :, :, 0]).sum(2)  # z E[βG ; y]
        EG = Wy.sum(2) / z
        rho = beta * x["glz"] - EG
        gh = jnp.einsum("yt,goyrb->gotrb", Sk, Wy) / z[:, :, None] + x["m"] * rho[:, :, None]
        d, _ = _field(x["h"], beta, k)
        v = b2 * x["K23"] * d  # V, K23 d β'
        v = v + pair * x["gy"] * v[:, :, :, :1]  # V' = K23 d (β' + β (g·y) β)
        # couplings inside the window (s, y): Σ_rows (W + ρ P) z = α' β + α (β' + ρ β)
        rho_ = rho[:, :, None, None, None]
        gE23 = jnp.sum((a2[:, :, :, 1] * b2[:, :, :, 0] + a2[:, :, :, 0] * (b2[:, :, :, 1] + rho_[:, :, 0] * b2[:, :, :, 0]))
                       / z[:, :, None, None], axis=(-2, -1))  # [G, O, s, y]
        # couplings between l and y: Σ_rows α_{b-1} ⊗ (V' + ρ V) + α'_{b-1} ⊗ V, over M z
        scale = 1.0 / (x["Mx"] * z)
        scale = jnp.where(jnp.isfinite(scale), scale, 0.0)[:, :, None, None, None]  # rows whose values are unused
        yq = (jnp.flip(v, axis=3) + (1 - pair) * rho_ * v[:, :, :, :1]) * scale
        prev_a = p.sy(x["a_prev"])  # [G, O, l, 2, s, rc, rb]
        gK1 = jnp.einsum("golx,goyx->goly", prev_a.reshape(G, O, nk, -1), jnp.swapaxes(yq, 2, 4).reshape(G, O, nk, -1))
        prop = p.sy(p.gemm_back(v, x["K1"]))
        Mb_new, _ = _guard(lax.stop_gradient(jnp.max(prop[:, :, :, 0], axis=(2, 3))), tiny)
        return (prop, Mb_new, b - 1), (gh, x["K1"] * gK1, gE23)

    ghs, gE1s, gE23s = [None] * len(fouts), [None] * len(fouts), [None] * len(fouts)
    rows = RC - p.groups[-1][2]
    bc = (jnp.zeros((G, O, ns, 2, nk, rows, rb), dt), jnp.ones((G, O, rows, rb), dt), jnp.int32(p.nb - 1))
    for gi in range(len(fouts) - 1, -1, -1):
        b0, b1, lo = p.groups[gi]
        grow = RC - lo - bc[1].shape[2]
        pad = lambda x, v=0.0: jnp.pad(x, [(0, 0)] * (x.ndim - 2) + [(grow, 0), (0, 0)], constant_values=v)
        bc = (pad(bc[0]), pad(bc[1], 1.0), bc[2])
        a2, Mx = fouts[gi]
        if gi:  # α of the step before: the previous group's last step, on this group's rows
            first = fouts[gi - 1][0][-1:, ..., lo - p.groups[gi - 1][2]:, :]
        else:
            first = p.sy(a0)[None]
        xs = dict(h=hs[b0:b1, ..., lo:, :], K1=K1[b0:b1], K23=K23b[b0:b1], gy=gy_all[b0:b1, ..., lo:, :],
                  a2=a2, a_prev=jnp.concatenate([first, a2[:-1]], axis=0), Mx=Mx, m=m[b0:b1, ..., lo:, :],
                  glz=jnp.broadcast_to(glz[..., lo:, :], (b1 - b0,) + glz[..., lo:, :].shape),
                  end=jnp.broadcast_to(jnp.asarray(p.end[lo:], jnp.int32), (b1 - b0, RC - lo)))
        bc, (gh, gE1, gE23) = lax.scan(bwd, bc, xs, reverse=True)
        ghs[gi], gE1s[gi], gE23s[gi] = jnp.pad(gh, [(0, 0)] * 4 + [(lo, 0), (0, 0)]), gE1, gE23
    return jnp.concatenate(ghs, axis=0), jnp.concatenate(gE1s, axis=0), jnp.concatenate(gE23s, axis=0)


def _core(plan: _Plan):
    """``(hs [nch, nb, G, O, k, RC, rb], C [nb, G, O, k, L+k], beta) -> (m, log_z, lost)`` (chunks first) with its VJP."""
    p = plan

    def primal(hs, C, beta):
        K1, K23, sh = _tables(C, beta, p.L, p.k)
        return lax.map(lambda hc: _forward_chunk(p, hc, K1, K23, sh, beta), hs)

    core = jax.custom_vjp(primal)

    def core_fwd(hs, C, beta):
        out = primal(hs, C, beta)
        return out, (hs, C, beta, out[0])

    def core_bwd(saved, cts):
        hs, C, beta, m = saved
        gm, glz, _ = cts
        K1, K23, _ = _tables(C, beta, p.L, p.k)

        def chunk(acc, x):
            hc, mc, gc, gzc = x
            gh, gE1, gE23 = _backward_chunk(p, hc, K1, K23, beta, mc, gc, gzc)
            return (acc[0] + gE1, acc[1] + gE23), gh

        zeros = (jnp.zeros(K1.shape, K1.dtype), jnp.zeros(K23.shape, K23.dtype))
        (gE1, gE23), gh = lax.scan(chunk, zeros, (hs, m, gm, glz))
        _, vjp = jax.vjp(lambda c: _energies(c, p.L, p.k), C)
        (gC,) = vjp((gE1, gE23))
        gbeta = (jnp.sum(hs * gh) + jnp.sum(C * gC)) / beta
        return gh, gC, gbeta.astype(beta.dtype).reshape(beta.shape)

    core.defvjp(core_fwd, core_bwd)
    return core


def blocked(h, J, beta, w: int, causal: bool, layout):
    """Exact ``mean [*batch, n]``, ``log_z [*batch]`` and the underflow bound ``lost [*batch]`` (log of
    the relative mass lost, as ``Banded``'s sweep reports it) of the models ``(h, J, beta)``, by the
    blocked forward–backward with the hand-written VJP. ``layout`` from ``_blocked_layout`` (not None)."""
    from isingattn.inference.banded_blocked import _band, _block_len

    batch, jb, _ = layout
    dt = h.dtype
    n = h.shape[-1]
    L, k = _block_len(n, w)
    nb = -(-n // k)
    N = nb * k
    nd = len(batch)
    vary = [d for d in range(nd) if jb[d] != 1]
    shared = [d for d in range(nd) if jb[d] == 1 and not (causal and d == nd - 1)]
    order = vary + shared + ([nd - 1] if causal else [])
    Gs, Rs = tuple(batch[d] for d in vary), tuple(batch[d] for d in shared)
    G, R = int(np.prod(Gs, dtype=np.int64)), int(np.prod(Rs, dtype=np.int64))
    hb = jnp.transpose(jnp.broadcast_to(h, batch + (n,)), order + [nd])
    Jw = _band(J, w).reshape(Gs + (n, w)).reshape(G, n, w)  # J's shared dims have size 1
    beta = jnp.asarray(beta, dt)
    O, RC = (k, nb) if causal else (1, 1)
    # rows per chunk: about CHUNK_BYTES of messages per step (whole sequences when causal)
    per_row = G * O * RC * 2**L * jnp.finfo(dt).bits // 8
    rb = int(max(1, min(R, CHUNK_BYTES // per_row)))
    nch = -(-R // rb)
    Rp = nch * rb
    rest = hb.shape[len(vary) + len(shared):]  # ([queries,] spins)
    hb = jnp.pad(hb.reshape((G, R) + rest), [(0, 0), (0, Rp - R)] + [(0, 0)] * len(rest))

    # fields of every step: row (o, rc) of class o is query i = rc k + k-1-o, front-padded by o free spins
    if causal:
        i, j = np.arange(n)[:, None], np.arange(n)[None, :]
        hq = jnp.pad(jnp.where(j <= i, hb, 0.0), [(0, 0), (0, 0), (0, N - n), (0, 0)])  # [G, Rp, N (queries), n]
        hv = jnp.stack([jnp.pad(hq[:, :, np.arange(nb) * k + k - 1 - o], [(0, 0)] * 3 + [(o, N)])[..., :N]
                        for o in range(k)], axis=2)  # [G, Rp, O, RC, N]
    else:
        hv = jnp.pad(hb, [(0, 0), (0, 0), (0, N - n)])[:, :, None, None]
    # [nch, nb, G, O, k, RC, rb]
    hs = hv.reshape(G, nch, rb, O, RC, nb, k).transpose(1, 5, 0, 3, 6, 4, 2)

    # couplings of step b for class o: C[b, t, u] between new spin bk+t-o and spin bk-L+u-o (u < L: the window)
    t, u = np.arange(k)[:, None], np.arange(L + k)[None, :]
    kk = u - t - L + w
    ok = (kk >= 0) & (kk < w)
    vrow = np.arange(nb)[:, None, None] * k + t[None]  # [nb, k, 1] virtual index of the new spin
    C = jnp.stack([jnp.where(ok, jnp.pad(Jw, [(0, 0), (o, N + k), (0, 0)])[:, vrow, np.clip(kk, 0, w - 1)[None]], 0.0)
                   for o in range(O)], axis=1)  # [G, O, nb, k, L+k]
    C = jnp.moveaxis(C, 2, 0)

    plan = _Plan(L, k, nb, G, O, RC, rb, nch, causal)
    m, log_z, lost = _core(plan)(hs, C, beta)  # [nch, nb, G, O, k, RC, rb], [nch, G, O, RC, rb]

    back = lambda x: jnp.moveaxis(x, 0, -2).reshape(x.shape[1:-1] + (Rp,))[..., :R]  # chunks -> rows
    m, log_z, lost = back(m), back(log_z), back(lost)  # [nb, G, O, k, RC, R], [G, O, RC, R]
    if causal:
        mv = m.transpose(1, 5, 2, 4, 0, 3).reshape(G, R, O, RC, N)  # virtual position v = bk + t
        mv = jnp.pad(mv, [(0, 0)] * 4 + [(0, k)])
        # class o = k-1-r holds the queries i = rc k + r; spin j sits at v = j + o
        mean = jnp.stack([mv[:, :, k - 1 - r, :, k - 1 - r:k - 1 - r + n] for r in range(k)], axis=3)
        mean = mean.reshape(G, R, N, n)[:, :, :n]
        mean = jnp.where(np.arange(n)[None, :] <= np.arange(n)[:, None], mean, 0.0)
        off = (np.arange(O) * math.log(2.0)).astype(dt)[None, :, None, None]  # the o free spins in front
        rows = lambda x: jnp.flip(x, axis=1).transpose(0, 3, 2, 1).reshape(G, R, N)[:, :, :n]
        log_z, lost = rows(log_z - off), rows(lost)
    else:
        mean = m.transpose(1, 5, 0, 3, 2, 4).reshape(G, R, N)[:, :, :n]
        log_z = log_z.reshape(G, R) - (N - n) * math.log(2.0)
        lost = lost.reshape(G, R)
    inv = list(np.argsort(order))
    shape = Gs + Rs + ((n,) if causal else ())
    mean = jnp.transpose(mean.reshape(shape + (n,)), inv + [nd])
    log_z = jnp.transpose(log_z.reshape(shape), inv)
    lost = jnp.transpose(lost.reshape(shape), inv)
    return mean, log_z, lost
