"""Banded's blocked forward–backward with a hand-written VJP (DESIGN.md §3, "Banded").

**The chain.** ``k`` spins are added per step to a window of ``L ≥ w`` spins (``L = 2k``, or
``L = k`` for small ``w``). Per row (one model: a query of one sequence) the window after step
``b`` is ``(s, y)`` (``y``: the ``k`` spins added at step ``b``; ``l``: the ``k`` oldest spins
of the window before it, which leave). The couplings are pairwise, so the step's table
factorizes, ``K_b(l, s, y) = K1_b(l, y) K23_b(s, y)`` (``K1``: the new spins with the leaving
ones; ``K23``: with the rest of the window and among themselves), and a step is one GEMM with
the ``[2^k, 2^k]`` table ``K1`` shared by every row with that ``J``, then elementwise work:

    α_b(s, y) = d_b(y) K23_b(s, y) Σ_l K1_b(l, y) α_{b-1}(l, s),        d_b(y) = exp(β h_b·y),
    β_{b-1}(l, s) = Σ_y K1_b(l, y) [K23_b(s, y) d_b(y) β_b(s, y)],     P_b = α_b β_b / z_b,

messages rescaled to max 1 after every step (``z_b = Σ α_b β_b``).

**The VJP.** With the cotangent ``g`` of the marginals, ``G = Σ_j g_j s_j``, and
``∂m_j/∂θ = β Cov(s_j, ∂E/∂θ)``, the VJP is ``ḡ_h(t) = β Cov(G, s_t)`` and, for a coupling,
``ḡ_C(t, u) = β Cov(G, s_t s_u)``: the derivatives of ``⟨s_t⟩`` and ``⟨s_t s_u⟩`` along
``h + εg`` (the Hessian of ``log Z`` is symmetric). That is the tangent of forward–backward:
linear, no second-order messages, only ``α'`` and ``β'`` (``E[βG_{≤b} | x] α`` and
``E[βG_{>b} | x] β``, with the scales of ``α`` and ``β``):

    α'_b = d_b K23_b Σ_l K1_b α'_{b-1} + β (g_b·y) α_b,   β'_{b-1} = Σ_y K1_b K23_b d_b (β'_b + β (g_b·y) β_b),

and ``E[βG f(x_b)] = Σ_x f (α'_b β_b + α_b β'_b) / z_b``. The couplings inside the window
``(s, y)`` get ``Σ_rows (W_b + ρ P_b)`` with ``W_b = (α'_b β_b + α_b β'_b) / z_b`` and
``ρ = β ḡ_{log Z} - E[βG]``; those between ``l`` and ``y`` (never in one window) get
``K1_b ⊙ Σ_rows [α_{b-1} ⊗ (V'_b + ρ V_b) + α'_{b-1} ⊗ V_b] / (M_b z_b)`` with
``V = K23 d β`` and ``V' = K23 d (β' + β (g·y) β)``: one GEMM over the rows per step.

**Cost and memory.** Nothing is kept between the forward and the backward pass but the inputs:
on a CPU, every megabyte of fresh buffer a call touches costs a page fault per 4 KiB (about
0.6 ms per MiB on the VM of benchmarks/README.md), more than recomputing it. So the steps come
in groups; a pass stores the message at the start of every group and recomputes a group's
messages just before they are needed. The primal is ``α`` (twice) and ``β``; the backward pass
``[α, α']`` (twice, one GEMM over both) and ``[β, β']``, plus the row contraction. The rows are
processed in chunks of sequences (``CHUNK_BYTES`` of messages per step), whose buffers are
reused chunk after chunk and stay in cache.

**Layouts.** Messages are ``[G, O, P, A, C, RC, rb]``: G the batch along which J varies, O the
offset classes (below), P the pair (value, tangent), ``(A, C)`` the window state, RC rows per
class, rb sequences of the chunk; rows last, so that work along states vectorizes along them.
For ``L = 2k`` the state after an even step is stored ``(y, s)`` (newest block first) and after
an odd step ``(s, y)``: the GEMM of an even step contracts the leading block, that of an odd
step the trailing one (batched over the other), and both write the next layout directly, with
no transposes. Reductions over states are written as trees of slices (XLA fuses them into one
pass; its reduce over a major axis is slow on the CPU).

**Causal models** (query ``i`` sees spins ``0..i``): row ``i`` is front-padded with
``o = k - 1 - i mod k`` free spins so that its chain ends exactly at the end of step ``i // k``;
the ``k`` offsets are ``k`` classes of rows with their own (shifted) tables, and no step needs a
table for a partial block. A row that has ended carries ``β = 0`` from then on, so it
contributes nothing. Each group of steps runs over the rows still live at its first step
(work ``(1 + 1/G) / 2`` of full chains for ``G = CAUSAL_GROUPS`` groups).
"""

from __future__ import annotations

import math
from functools import partial

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from isingattn.energy import spin_table

CAUSAL_GROUPS = 8  # causal: groups of steps over the rows still live, work (1 + 1/G)/2 of full chains
CHUNK_BYTES = 1 << 18  # messages per step and chunk of rows (L2-sized): buffers reused chunk after chunk


def _guard(x, floor):
    """(x where x > floor else 1, 0 where x > floor else inf): a divisor and the flag of its failure."""
    ok = x > floor
    return jnp.where(ok, x, 1.0), jnp.where(ok, jnp.zeros_like(x), jnp.inf)


def _tree(x, axis: int, op):
    """Reduce ``axis`` by halving slices (one fused pass; sizes are powers of 2)."""
    while x.shape[axis] > 1:
        h = x.shape[axis] // 2
        x = op(lax.slice_in_dim(x, 0, h, axis=axis), lax.slice_in_dim(x, h, 2 * h, axis=axis))
    return jnp.squeeze(x, axis)


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
    """Static shapes of one call, and the step algebra in the alternating layouts."""

    def __init__(self, L, k, nb, G, O, RC, rb, causal):
        self.L, self.k, self.nb, self.causal = L, k, nb, causal  # nb even
        self.G, self.O, self.RC, self.rb = G, O, RC, rb
        self.nk, self.ns = 2**k, 2 ** (L - k)
        self.alt = self.ns > 1  # L = 2k: alternating layouts; L = k: the state is y alone ([y, 1])
        pairs = nb // 2
        ng = min(CAUSAL_GROUPS if causal else max(1, math.isqrt(pairs)), pairs)
        bounds = [2 * ((g * pairs) // ng) for g in range(ng + 1)]
        # causal: row rc ends at step rc, and the rows live in group g are rc >= its first step
        self.groups = [(b0, b1, b0 if causal else 0) for b0, b1 in zip(bounds[:-1], bounds[1:])]
        self.end = np.arange(RC) if causal else np.full(RC, nb - 1)

    # layout of the state after step b: q = b % 2. alt: q = 0 -> (A, C) = (y, s), q = 1 -> (s, y). not alt: (y, 1).
    def older(self, q):  # axis of s (the block that stays one more step)
        return (4 if q == 0 else 3) if self.alt else 4

    def newer(self, q):  # axis of y
        return (3 if q == 0 else 4) if self.alt else 3

    def bcast(self, T, q):
        """A table ``T [G, O, s, y]`` broadcast against messages in layout q."""
        T = jnp.swapaxes(T, -1, -2) if self.newer(q) == 3 else T
        return T[:, :, None, :, :, None, None]

    def bcast_y(self, d, q):
        """Per-row ``d [G, O, y, rc, rb]`` broadcast against messages ``[G, O, P, A, C, rc, rb]`` in layout q."""
        return d[:, :, None, :, None] if self.newer(q) == 3 else d[:, :, None, None, :]

    def gemm(self, a, K1, q):
        """Forward: the state after step b-1 (layout 1-q) -> ``Σ_l K1(l, y) a(l, s)`` in layout q."""
        G, O, P = a.shape[:3]
        if not self.alt or q == 0:  # contract the leading block
            K = jnp.broadcast_to(K1[:, :, None], (G, O, P) + K1.shape[2:])
            out = lax.dot_general(K, a.reshape(G, O, P, self.nk, -1), (((3,), (3,)), ((0, 1, 2), (0, 1, 2))))
        else:  # contract the trailing block, batched over the leading one
            K = jnp.broadcast_to(K1[:, :, None, None], (G, O, P, self.ns) + K1.shape[2:])
            out = lax.dot_general(K, a.reshape(G, O, P, self.ns, self.nk, -1),
                                  (((4,), (4,)), ((0, 1, 2, 3), (0, 1, 2, 3))))
        return out.reshape(a.shape)

    def gemm_back(self, v, K1, q):
        """Backward: ``v`` in layout q -> ``Σ_y K1(l, y) v(s, y)``, the state after step b-1 (layout 1-q)."""
        G, O, P = v.shape[:3]
        if not self.alt or q == 0:  # y leads
            K = jnp.broadcast_to(K1[:, :, None], (G, O, P) + K1.shape[2:])
            out = lax.dot_general(K, v.reshape(G, O, P, self.nk, -1), (((4,), (3,)), ((0, 1, 2), (0, 1, 2))))
        else:  # y trails
            K = jnp.broadcast_to(K1[:, :, None, None], (G, O, P, self.ns) + K1.shape[2:])
            out = lax.dot_general(K, v.reshape(G, O, P, self.ns, self.nk, -1),
                                  (((5,), (4,)), ((0, 1, 2, 3), (0, 1, 2, 3))))
        return out.reshape(v.shape)

    def rows_gemm(self, prev, yq, q):
        """``Σ_{P, s, rows} prev(l, s) yq(s, y)`` -> ``[G, O, l, y]``: prev the state after step b-1, yq in layout q."""
        G, O, P = prev.shape[:3]
        if not self.alt or q == 0:  # prev (l, s), yq (y, s): contract s and the rows
            out = lax.dot_general(prev.reshape(G, O, P, self.nk, -1), yq.reshape(G, O, P, self.nk, -1),
                                  (((4,), (4,)), ((0, 1, 2), (0, 1, 2))))
            return out.sum(2)
        out = lax.dot_general(prev.reshape(G, O, P, self.ns, self.nk, -1), yq.reshape(G, O, P, self.ns, self.nk, -1),
                              (((5,), (5,)), ((0, 1, 2, 3), (0, 1, 2, 3))))  # prev (s, l), yq (s, y)
        return out.sum((2, 3))

    def initial(self, P, rows, dt):
        """The state before step 0 (layout 1): every window spin +1, no couplings."""
        A, C = (self.ns, self.nk) if self.alt else (self.nk, 1)
        return jnp.zeros((self.G, self.O, P, A, C, rows, self.rb), dt).at[:, :, 0, 0, 0].set(1.0)

    def state_shape(self, q, P, rows):
        A, C = ((self.nk, self.ns) if q == 0 else (self.ns, self.nk)) if self.alt else (self.nk, 1)
        return (self.G, self.O, P, A, C, rows, self.rb)


def _smax(x):  # [G, O, A, C, rc, rb] -> max over the state (A, C)
    return _tree(_tree(x, 3, jnp.maximum), 2, jnp.maximum)


def _ssum(x):
    return _tree(_tree(x, 3, jnp.add), 2, jnp.add)


def _field(hb, beta, k):
    """hb ``[G, O, k, rc, rb]`` -> ``d [G, O, 2^k (y), rc, rb]`` (max 1) and the log of its scale."""
    dshift = beta * jnp.abs(hb).sum(2)
    d = jnp.exp(beta * jnp.einsum("yt,gotrb->goyrb", spin_table(k, hb.dtype), hb) - dshift[:, :, None])
    return d, dshift


def _pairs(x):
    """Steps-first leaves [2n, ...] -> [n, 2, ...] (the scans take two steps at a time: one per layout)."""
    return jax.tree.map(lambda t: t.reshape((t.shape[0] // 2, 2) + t.shape[1:]), x)


def _unpairs(x):
    return jax.tree.map(lambda t: t.reshape((t.shape[0] * t.shape[1],) + t.shape[2:]), x)


def _alpha_scan(p: _Plan, start, xs, beta, tangent: bool, keep: bool):
    """α (and α' when ``tangent``: P = 2) through the steps of ``xs`` (pairs of steps) from the state ``start``.

    xs: h [pairs, 2, G, O, k, rc, rb], K1, K23 (and gy when tangent). Returns the last state and per step
    ``Mx`` (the normalizer), ``la`` (log Σα), the log-scale increment ``dc``, and the states when ``keep``."""
    dt = start.dtype
    tiny = float(jnp.finfo(dt).tiny)
    sg = lax.stop_gradient

    def step(a, x, q):
        d, dshift = _field(x["h"], beta, p.k)
        g = p.gemm(a, x["K1"], q) * p.bcast(x["K23"], q) * p.bcast_y(d, q)
        Mx, flag = _guard(sg(_smax(g[:, :, 0])), tiny)
        sa = _ssum(g[:, :, 0]) / Mx
        g = g / Mx[:, :, None, None, None]
        if tangent:  # α'_b += β (g·y) α_b
            g = g + np.arange(2).astype(dt)[:, None, None, None, None] * p.bcast_y(x["gy"], q) * g[:, :, :1]
        out = dict(Mx=Mx, flag=flag, la=jnp.log(sa), dc=jnp.log(Mx) + x["sh"][:, :, None, None] + dshift)
        if keep:
            out["a"] = g
        return g, out

    def body(a, x):
        a, o0 = step(a, jax.tree.map(lambda t: t[0], x), 0)
        a, o1 = step(a, jax.tree.map(lambda t: t[1], x), 1)
        return a, jax.tree.map(lambda u, v: jnp.stack([u, v]), o0, o1)

    last, out = lax.scan(body, start, xs)
    return last, out


def _group_inputs(p: _Plan, b0, b1, lo, hs, K1, K23, sh, extra=None):
    """Per-step inputs of steps b0..b1-1 on rows lo.., in pairs."""
    x = dict(h=hs[b0:b1, ..., lo:, :], K1=K1[b0:b1], K23=K23[b0:b1], sh=sh[b0:b1])
    for name, v in (extra or {}).items():
        x[name] = v[b0:b1, ..., lo:, :]
    return _pairs(x)


def _forward_chunk(p: _Plan, hs, K1, K23, sh, beta):
    """Primal of one chunk: hs [nb, G, O, k, RC, rb] -> m (like hs), log_z, lost [G, O, RC, rb]."""
    dt = hs.dtype
    G, O, RC, rb, k, nk = p.G, p.O, p.RC, p.rb, p.k, p.nk
    Sk = spin_table(k, dt)
    tiny = float(jnp.finfo(dt).tiny)
    log_k_tiny = math.log((2 * nk + 1) * tiny)  # each entry: ≤ 2^k flushed products and K's own flushes
    sg = lax.stop_gradient

    # 1: α forward, keeping the state at the start of every group and the log of the scales
    a, c, prev = p.initial(1, RC, dt), jnp.zeros((G, O, RC, rb), dt), 0
    starts, fouts, cs = [], [], []
    for b0, b1, lo in p.groups:
        a, c = a[..., lo - prev:, :], c[..., lo - prev:, :]
        starts.append(a)
        a, out = _alpha_scan(p, a, _group_inputs(p, b0, b1, lo, hs, K1, K23, sh), beta, False, False)
        out = _unpairs(out)
        c_steps = c + jnp.cumsum(out["dc"], axis=0)  # [steps, G, O, rc, rb]: log scale after each step
        c = c_steps[-1]
        fouts.append(out)
        cs.append(c_steps)
        prev = lo
    if p.causal:  # row rc ends at step rc: its log Z is taken there
        lz, fz = [], []
        for (b0, b1, lo), out, c_steps in zip(p.groups, fouts, cs):
            i = np.arange(b1 - b0)
            tot, f = _guard(jnp.exp(out["la"][i, :, :, i + b0 - lo]), tiny)  # [steps, G, O, rb]
            lz.append(c_steps[i, :, :, i + b0 - lo] + jnp.log(tot))
            fz.append(f)
        log_z = jnp.moveaxis(jnp.concatenate(lz), 0, 2)  # [G, O, RC, rb]
        fz = jnp.moveaxis(jnp.concatenate(fz), 0, 2)
    else:
        tot, fz = _guard(jnp.exp(fouts[-1]["la"][-1]), tiny)
        log_z = c + jnp.log(tot)

    # 2: β backward, group by group, each group's α recomputed from its start
    def bstep(carry, x, q):
        prop, Mb, bflag, b = carry  # β_b before its normalization by Mb (layout q), the flag of Mb
        live, start = (x["end"] > b)[:, None], (x["end"] == b)[:, None]  # [rc, 1]
        bm = jnp.where(live, prop / Mb[:, :, None, None, None], jnp.where(start, 1.0, 0.0).astype(dt))
        Mb, bflag = jnp.where(live, Mb, 1.0), jnp.where(live, bflag, 0.0)
        a = x["a"][:, :, 0]
        Pn = _tree(a * bm[:, :, 0], p.older(q) - 1, jnp.add)  # [G, O, y, rc, rb]
        tot, flag = _guard(_tree(Pn, 2, jnp.add), math.sqrt(tiny))
        m = jnp.einsum("yt,goyrb->gotrb", Sk, Pn) / tot[:, :, None]
        lb, lt = sg(jnp.log(_ssum(bm[:, :, 0]))), sg(jnp.log(tot))
        lost = (jnp.logaddexp(log_k_tiny - jnp.log(x["Mx"]) + lb - lt, log_k_tiny - jnp.log(Mb) + x["la"] - lt)
                + flag + x["flag"] + bflag)
        lost = jnp.where(x["end"][:, None] >= b, lost, -jnp.inf)  # rows that ended before: part of no result
        d, _ = _field(x["h"], beta, k)
        prop = p.gemm_back(bm * p.bcast(x["K23"], q) * p.bcast_y(d, q), x["K1"], q)
        Mb_new, bflag_new = _guard(sg(_smax(prop[:, :, 0])), tiny)
        return (prop, Mb_new, bflag_new, b - 1), dict(m=m, lost=lost)

    def bbody(carry, x):
        carry, o1 = bstep(carry, jax.tree.map(lambda t: t[1], x), 1)
        carry, o0 = bstep(carry, jax.tree.map(lambda t: t[0], x), 0)
        return carry, jax.tree.map(lambda u, v: jnp.stack([u, v]), o0, o1)

    ms = [None] * len(p.groups)
    lost = jnp.full((G, O, RC, rb), -jnp.inf, dt)
    rows = RC - p.groups[-1][2]
    bc = (jnp.zeros(p.state_shape(1, 1, rows), dt), jnp.ones((G, O, rows, rb), dt), jnp.zeros((G, O, rows, rb), dt),
          jnp.int32(p.nb - 1))
    for gi in range(len(p.groups) - 1, -1, -1):
        b0, b1, lo = p.groups[gi]
        grow = RC - lo - bc[1].shape[2]  # rows that end in this group join (β = 0 until their last step)
        pad = lambda x, v=0.0: jnp.pad(x, [(0, 0)] * (x.ndim - 2) + [(grow, 0), (0, 0)], constant_values=v)
        bc = (pad(bc[0]), pad(bc[1], 1.0), pad(bc[2]), bc[3])
        xs = _group_inputs(p, b0, b1, lo, hs, K1, K23, sh)
        _, out = _alpha_scan(p, starts[gi], xs, beta, False, True)
        f = _pairs(fouts[gi])
        xs.update(a=out["a"], Mx=f["Mx"], flag=f["flag"], la=f["la"],
                  end=jnp.broadcast_to(jnp.asarray(p.end[lo:], jnp.int32), ((b1 - b0) // 2, 2, RC - lo)))
        bc, out = lax.scan(bbody, bc, xs, reverse=True)
        out = _unpairs(out)
        ms[gi] = jnp.pad(out["m"], [(0, 0)] * 4 + [(lo, 0), (0, 0)])
        lost = jnp.logaddexp(lost, jnp.pad(jax.nn.logsumexp(out["lost"], axis=0),
                                           [(0, 0)] * 2 + [(lo, 0), (0, 0)], constant_values=-jnp.inf))
    m = jnp.concatenate(ms, axis=0)
    lost = sg(lost + fz)
    return m, log_z, jnp.where(jnp.isnan(lost), jnp.inf, lost)


def _backward_chunk(p: _Plan, hs, K1, K23, sh, beta, m, gm, glz):
    """VJP of one chunk's (m, log_z) for cotangents gm [nb, G, O, k, RC, rb], glz [G, O, RC, rb]; m: the primal
    means. Returns gh (like hs) and the cotangents of the energies of every step, gE1 [nb, G, O, 2^k, 2^k] and
    gE23 [nb, G, O, 2^(L-k), 2^k], summed over the chunk's rows."""
    dt = hs.dtype
    G, O, RC, rb, k, nk = p.G, p.O, p.RC, p.rb, p.k, p.nk
    Sk = spin_table(k, dt)
    tiny = float(jnp.finfo(dt).tiny)
    pair = np.arange(2).astype(dt)[:, None, None, None, None]  # [P, A, C, rc, rb]: 0 value, 1 tangent
    gy = beta * jnp.einsum("yt,ngotrb->ngoyrb", Sk, gm)  # β (g_b·y): [nb, G, O, y, RC, rb]
    glz_s = jnp.broadcast_to(glz, (p.nb,) + glz.shape)
    extra = dict(gy=gy)

    # 1: [α, α'] forward, keeping the state at the start of every group
    a, prev, starts = p.initial(2, RC, dt), 0, []
    for b0, b1, lo in p.groups:
        a = a[..., lo - prev:, :]
        starts.append(a)
        a, _ = _alpha_scan(p, a, _group_inputs(p, b0, b1, lo, hs, K1, K23, sh, extra), beta, True, False)
        prev = lo

    # 2: [β, β'] backward, group by group, each group's [α, α'] recomputed from its start
    def bstep(carry, x, q):
        prop, Mb, b = carry
        live, start = (x["end"] > b)[:, None], (x["end"] == b)[:, None]
        b2 = jnp.where(live, prop / Mb[:, :, None, None, None], jnp.where(start, 1.0 - pair, 0.0).astype(dt))
        a2 = x["a"]
        o = p.older(q) - 1  # the older axis with P removed
        ab = _tree(a2[:, :, :1] * b2, o + 1, jnp.add)  # [G, O, P, y, rc, rb]: Σ_s α β, Σ_s α β'
        z, _ = _guard(_tree(ab[:, :, 0], 2, jnp.add), math.sqrt(tiny))  # [G, O, rc, rb]
        a1b0 = a2[:, :, 1] * b2[:, :, 0]
        Wy = ab[:, :, 1] + _tree(a1b0, o, jnp.add)  # z E[βG ; y]: [G, O, y, rc, rb]
        EG = _tree(Wy, 2, jnp.add) / z
        rho = beta * x["glz"] - EG
        gh = jnp.einsum("yt,goyrb->gotrb", Sk, Wy) / z[:, :, None] + x["m"] * rho[:, :, None]
        d, _ = _field(x["h"], beta, k)
        v = b2 * p.bcast(x["K23"], q) * p.bcast_y(d, q)  # V, K23 d β'
        v = v + pair * p.bcast_y(x["gy"], q) * v[:, :, :1]  # V' = K23 d (β' + β (g·y) β)
        # couplings inside the window (s, y): Σ_rows (α' β + α (β' + ρ β)) / z
        w_sy = (a1b0 + a2[:, :, 0] * (b2[:, :, 1] + rho[:, :, None, None] * b2[:, :, 0])) / z[:, :, None, None]
        gE23 = w_sy.sum((-2, -1))
        gE23 = gE23 if p.older(q) == 3 else jnp.swapaxes(gE23, -1, -2)  # -> [G, O, s, y]
        # couplings between l and y: Σ_rows α_{b-1} ⊗ (V' + ρ V) + α'_{b-1} ⊗ V, over M z
        scale = 1.0 / (x["Mx"] * z)
        scale = jnp.where(jnp.isfinite(scale), scale, 0.0)[:, :, None, None, None]  # rows whose values are unused
        yq = (jnp.flip(v, axis=2) + (1 - pair) * rho[:, :, None, None, None] * v[:, :, :1]) * scale
        gK1 = p.rows_gemm(x["a_prev"], yq, q)
        prop = p.gemm_back(v, x["K1"], q)
        Mb_new, _ = _guard(lax.stop_gradient(_smax(prop[:, :, 0])), tiny)
        return (prop, Mb_new, b - 1), (gh, x["K1"] * gK1, gE23)

    def bbody(carry, x):
        carry, o1 = bstep(carry, jax.tree.map(lambda t: t[1], x), 1)
        carry, o0 = bstep(carry, jax.tree.map(lambda t: t[0], x), 0)
        return carry, jax.tree.map(lambda u, v: jnp.stack([u, v]), o0, o1)

    ghs, gE1s, gE23s = [None] * len(p.groups), [None] * len(p.groups), [None] * len(p.groups)
    rows = RC - p.groups[-1][2]
    bc = (jnp.zeros(p.state_shape(1, 2, rows), dt), jnp.ones((G, O, rows, rb), dt), jnp.int32(p.nb - 1))
    for gi in range(len(p.groups) - 1, -1, -1):
        b0, b1, lo = p.groups[gi]
        grow = RC - lo - bc[1].shape[2]
        pad = lambda x, v=0.0: jnp.pad(x, [(0, 0)] * (x.ndim - 2) + [(grow, 0), (0, 0)], constant_values=v)
        bc = (pad(bc[0]), pad(bc[1], 1.0), bc[2])
        xs = _group_inputs(p, b0, b1, lo, hs, K1, K23, sh, dict(extra, m=m, glz=glz_s))
        _, out = _alpha_scan(p, starts[gi], xs, beta, True, True)
        a_steps = out["a"]  # [pairs, 2, ...]: the state after each step
        # the state before each step: for the first of a pair, the second of the pair before (or the start)
        before_first = jnp.concatenate([starts[gi][None], a_steps[:-1, 1]], axis=0)
        xs.update(a=a_steps, Mx=out["Mx"], a_prev=jnp.stack([before_first, a_steps[:, 0]], axis=1),
                  end=jnp.broadcast_to(jnp.asarray(p.end[lo:], jnp.int32), ((b1 - b0) // 2, 2, RC - lo)))
        bc, (gh, gE1, gE23) = lax.scan(bbody, bc, xs, reverse=True)
        gh, gE1, gE23 = _unpairs((gh, gE1, gE23))
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
        K1, K23, sh = _tables(C, beta, p.L, p.k)

        def chunk(acc, x):
            hc, mc, gc, gzc = x
            gh, gE1, gE23 = _backward_chunk(p, hc, K1, K23, sh, beta, mc, gc, gzc)
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
    nb = 2 * -(-n // (2 * k))  # an even number of steps: the scans take them in pairs
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
    hs = hv.reshape(G, nch, rb, O, RC, nb, k).transpose(1, 5, 0, 3, 6, 4, 2)  # [nch, nb, G, O, k, RC, rb]

    # couplings of step b for class o: C[b, t, u] between new spin bk+t-o and spin bk-L+u-o (u < L: the window)
    t, u = np.arange(k)[:, None], np.arange(L + k)[None, :]
    kk = u - t - L + w
    ok = (kk >= 0) & (kk < w)
    vrow = np.arange(nb)[:, None, None] * k + t[None]  # [nb, k, 1] virtual index of the new spin
    C = jnp.stack([jnp.where(ok, jnp.pad(Jw, [(0, 0), (o, N + k), (0, 0)])[:, vrow, np.clip(kk, 0, w - 1)[None]], 0.0)
                   for o in range(O)], axis=1)  # [G, O, nb, k, L+k]
    C = jnp.moveaxis(C, 2, 0)

    plan = _Plan(L, k, nb, G, O, RC, rb, causal)
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
