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
on a CPU, every megabyte of fresh buffer a call touches costs a page fault per 4 KiB, more than
recomputing it. So the steps come in groups; a pass stores the message at the start of every
group and recomputes a group's messages just before they are needed. The primal is ``α`` (twice)
and ``β``; the backward pass ``[α, α']`` (twice, one GEMM over both) and ``[β, β']``, plus the
row contraction. The rows are processed in chunks of sequences (``CHUNK_BYTES`` of messages per
step), whose buffers are reused chunk after chunk and stay in cache.

**Causal models** (query ``i`` sees spins ``0..i``): row ``i`` is front-padded with
``o = k - 1 - i mod k`` free spins so that its chain ends exactly at the end of step ``i // k``;
the ``k`` offsets are ``k`` classes of rows with their own (shifted) tables, and no step needs a
table for a partial block. A row that has ended carries ``β = 0`` from then on, so it
contributes nothing. Each group of steps runs over the rows still live at its first step
(work ``(1 + 1/G) / 2`` of full chains for ``G`` groups: ``banded_blocked.CAUSAL_GROUPS``, twice that from
``banded_plan.LONG_CHAIN`` steps on).

The message layouts, and the GEMMs of a step in each, are ``banded_plan.Plan``'s.
"""

from __future__ import annotations

import math
from functools import partial

import jax
import jax.numpy as jnp
import numpy as np
from isingattn.inference.banded.band import band, block_len
from isingattn.inference.banded.plan import Plan, tree_sum
from jax import lax

from isingattn.energy import spin_table

CHUNK_BYTES = 1 << 18  # messages per step and chunk of rows (L2-sized): buffers reused chunk after chunk


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


def _spin_dot(h, k, axis):
    """``Σ_t y_t h_t`` for every ``y`` of ``k`` spins: ``h [..., k (axis), ...]`` -> ``[..., 2^k, ...]``. Written as
    a sum of broadcasts (not a dot) so that XLA keeps the rows minor: a dot here comes out rows-major."""
    Sk = 1.0 - 2.0 * ((np.arange(2**k)[:, None] >> np.arange(k - 1, -1, -1)[None, :]) & 1)
    shape = [1] * h.ndim
    shape[axis] = 2**k
    out = 0.0
    for t in range(k):
        out = out + jnp.asarray(Sk[:, t].reshape(shape), h.dtype) * lax.index_in_dim(h, t, axis, keepdims=True)
    return out


def _fields(hs, beta, k):
    """The field factors of every step: ``hs [nb, G, O, k, R]`` -> ``exp(β h·y - β Σ|h|)`` ``[nb, G, O, 2^k (y), R]``
    (max 1) and the log of the scale taken out, ``β Σ|h|`` ``[nb, G, O, R]``. Computed once per pass, outside the
    loops (a step divides them by its per-row normalizer), as products of one factor per spin,
    ``exp(β h_t y_t - β |h_t|) ∈ {1, exp(-2β|h_t|)}``: k exponentials per step and row instead of 2^k."""
    ah = beta * jnp.abs(hs)
    u = jnp.exp(-2.0 * ah)  # [nb, G, O, k, R]
    pos = hs >= 0
    d = None
    for t in range(k):  # spin t is bit k-1-t of y (bit 0: +1): each spin halves the blocks of the ones before
        up, dn = jnp.where(pos[:, :, :, t], 1.0, u[:, :, :, t]), jnp.where(pos[:, :, :, t], u[:, :, :, t], 1.0)
        pair = jnp.stack([up, dn], axis=3)  # [nb, G, O, 2, R]
        d = pair if d is None else (d[:, :, :, :, None] * pair[:, :, :, None]).reshape(
            d.shape[:3] + (2 * d.shape[3],) + d.shape[4:])
    return d, sum(ah[:, :, :, t] for t in range(k))  # slices, not a reduce: XLA:CPU's is slow here


def _over(e, log_s):
    """``e [G, O, y, R]`` divided by ``exp(log_s)`` ``[G, O, R]``."""
    return e * jnp.exp(-log_s)[:, :, None]


def _pairs(x):
    """Steps-first leaves [2n, ...] -> [n, 2, ...] (the scans take two steps at a time: one per layout)."""
    return jax.tree.map(lambda t: t.reshape((t.shape[0] // 2, 2) + t.shape[1:]), x)


def _unpairs(x):
    return jax.tree.map(lambda t: t.reshape((t.shape[0] * t.shape[1],) + t.shape[2:]), x)


def _scan_pairs(step, carry, xs, reverse=False, paired=False):
    """``lax.scan`` over pairs of steps (layouts 0 and 1); outputs per step, or per pair ``[n, 2, ...]`` when ``paired``."""
    def body(c, x):
        outs = [None, None]
        for q in ((1, 0) if reverse else (0, 1)):
            c, outs[q] = step(c, jax.tree.map(lambda t: t[q], x), q)
        return c, jax.tree.map(lambda u, v: jnp.stack([u, v]), *outs)

    carry, out = lax.scan(body, carry, xs, reverse=reverse)
    return carry, (out if paired else _unpairs(out))


def _alpha_pass(p: Plan, es, dshift, K1f, K23, sh, gy=None):
    """α (and α' when gy is given) forward through every group, unnormalized: each step's input is divided
    by its sum ``S`` inside the field factor (the GEMM gives that sum, with its column of ones).

    Returns per group: the state before every step, in pairs (``a [pairs, 2, ...]``, and ``t`` for α'), the
    state after the group's last step (``last``, ``tlast``), ``logS`` (log of every step's input sum), its guard
    flag ``fS``, the log scale ``c`` after every step and ``la`` (log Σα after every step)."""
    dt = es.dtype
    tiny = float(jnp.finfo(dt).tiny)
    tangent = gy is not None

    def step(carry, x, q):
        a, t, c = carry
        out = dict(a=a, t=t) if tangent else dict(a=a)
        F, srow = p.gemm(a, x["K1f"], q)
        S, fS = _guard(tree_sum(srow, 2), tiny)  # [G, O, R]
        logS = jnp.log(S)
        kd = p.bcast(x["K23"], q) * p.bcast_y(_over(x["e"], logS), q)  # [G, O, A, C, R]
        a_new = F * kd
        if tangent:  # α'_b = K23 d Σ_l K1 α'_{b-1} / S + β (g·y) α_b
            Ft, trow = p.gemm(t, x["K1f"], q)
            t = Ft * kd + p.bcast_y(x["gy"], q) * a_new
            out["ts"] = tree_sum(trow, 2)  # Σ α'_{b-1}, on α's scale
        c = c + logS + x["sh"][:, :, None] + x["dshift"]
        out.update(logS=logS, fS=fS, c=c)
        return (a_new, t, c), out

    a = p.initial(p.rows(0), dt)
    t = jnp.zeros_like(a) if tangent else None
    c, prev, groups = jnp.zeros((p.G, p.O, p.rows(0)), dt), 0, []
    for b0, b1, lo in p.groups:
        cut = (lo - prev) * p.rb
        a, c = a[..., cut:], c[..., cut:]
        t = t[..., cut:] if tangent else None
        xs = dict(e=es[b0:b1, ..., lo * p.rb:], dshift=dshift[b0:b1, ..., lo * p.rb:], K1f=K1f[b0:b1], K23=K23[b0:b1],
                  sh=sh[b0:b1])
        if tangent:
            xs["gy"] = gy[b0:b1, ..., lo * p.rb:]
        (a, t, c), out = _scan_pairs(step, (a, t, c), _pairs(xs), paired=True)
        small = _unpairs({name: out.pop(name) for name in ("logS", "fS", "c") + (("ts",) if tangent else ())})
        # log Σα (and Σα') after every step: the next step's input sums, or (last step) summed here
        small["la"] = jnp.concatenate([small["logS"][1:], jnp.log(tree_sum(tree_sum(a, 3), 2))[None]], axis=0)
        if tangent:
            small["ts"] = jnp.concatenate([small["ts"][1:], tree_sum(tree_sum(t, 3), 2)[None]], axis=0)
        out.update(small, last=a, tlast=t)
        groups.append(out)
        prev = lo
    return groups


def _forward_chunk(p: Plan, hs, K1f, K1b, K23, sh, beta):
    """Primal of one chunk: hs [nb, G, O, k, R] -> m (like hs), log_z and lost [G, O, R]."""
    dt = hs.dtype
    G, O, k, nk, rb = p.G, p.O, p.k, p.nk, p.rb
    tiny = float(jnp.finfo(dt).tiny)
    log_k_tiny = math.log((2 * nk + 1) * tiny)  # per entry: 2^k flushed products, the tables' own flushes
    es, dshift = _fields(hs, beta, k)
    groups = _alpha_pass(p, es, dshift, K1f, K23, sh)
    log_z = _at_end(p, groups, "c") + _at_end(p, groups, "la")  # log Z = c + log Σα at the row's last step

    def step(carry, x, q):
        out_prev, a, b = carry  # a: α after this step (the state before the next one)
        live, start = x["end"] > b, x["end"] == b  # [R]
        st, srow = p.split(out_prev, q)
        bm = st * live.astype(dt) + start.astype(dt)  # β_b; rows not started yet: 0
        Sb = jnp.where(live, tree_sum(srow, 2), jnp.where(start, float(p.nL), 0.0))
        Sb, fb = _guard(Sb, tiny)
        logSb = jnp.log(Sb)
        proj = p.project(a * bm, q)  # [G, O, k+1, R]
        tot, ft = _guard(proj[:, :, k], math.sqrt(tiny))
        m = proj[:, :, :k] / tot[:, :, None]
        out = p.gemm_back(bm * (p.bcast(x["K23"], q) * p.bcast_y(_over(x["e"], logSb), q)), x["K1b"], q)
        # for the underflow bound (computed after the loop): log Σβ and log z, with their guard flags
        return (out, x["a"], b - 1), dict(m=m, lb=logSb + jnp.where(live, fb, 0.0), lt=jnp.log(tot) - ft)

    ms = [None] * len(p.groups)
    lost = jnp.full((G, O, p.rows(0)), -jnp.inf, dt)
    out_prev, b = p.carry0(p.rows(p.groups[-1][2]), dt), jnp.int32(p.nb - 1)
    for gi in range(len(p.groups) - 1, -1, -1):
        b0, b1, lo = p.groups[gi]
        grow = p.rows(lo) - out_prev.shape[-1]  # rows that end in this group join (β = 0 until their last step)
        out_prev = jnp.pad(out_prev, [(0, 0)] * 4 + [(grow, 0)])
        g = groups[gi]
        end = jnp.broadcast_to(jnp.asarray(p.end_rows(lo)), (b1 - b0, p.rows(lo)))
        xs = _pairs(dict(e=es[b0:b1, ..., lo * rb:], K1b=K1b[b0:b1], K23=K23[b0:b1], end=end))
        xs["a"] = g["a"]  # the state before every step, paired
        (out_prev, _, b), out = _scan_pairs(step, (out_prev, g["last"], b), xs, reverse=True)
        ms[gi] = jnp.pad(out["m"], [(0, 0)] * 4 + [(lo * rb, 0)])
        # the bound: flushed in α (products of the step's inputs, relative to S_{b-1}) weighted by β, and
        # flushed in β weighted by α, relative to z; rows that ended before a step are part of no result
        steps = np.arange(b0, b1)[:, None]
        ls = (jnp.logaddexp(log_k_tiny + jnp.maximum(-g["logS"], 0.0) + out["lb"], log_k_tiny + g["la"]) - out["lt"]
              + g["fS"])
        ls = jnp.where((p.end_rows(lo)[None] >= steps)[:, None, None], ls, -jnp.inf)
        lost = jnp.logaddexp(lost, jnp.pad(jax.nn.logsumexp(ls, axis=0), [(0, 0)] * 2 + [(lo * rb, 0)],
                                           constant_values=-jnp.inf))
    m = jnp.concatenate(ms, axis=0)
    lost = lax.stop_gradient(lost)
    return m, log_z, jnp.where(jnp.isnan(lost), jnp.inf, lost)


def _at_end(p: Plan, groups, name):
    """Per row, the value of the per-step quantity ``name`` at the row's last step -> ``[G, O, R]``."""
    if not p.causal:
        return groups[-1][name][-1]
    rb, vals = p.rb, []
    for (b0, b1, lo), out in zip(p.groups, groups):
        i = np.arange(b1 - b0)
        rows = ((i + b0 - lo) * rb)[:, None] + np.arange(rb)[None]  # [steps, rb] rows that end at each step
        vals.append(out[name][i[:, None], :, :, rows])  # [steps, rb, G, O]
    return jnp.concatenate(vals).transpose(2, 3, 0, 1).reshape(p.G, p.O, p.rows(0))


def _backward_chunk(p: Plan, hs, K1f, K1, K23, sh, beta, gm, glz):
    """VJP of one chunk's (m, log_z) for cotangents gm [nb, G, O, k, R], glz [G, O, R]. Returns gh (like hs) and
    the cotangents of every step's energies, gE1 [nb, G, O, 2^k, 2^k] and gE23 [nb, G, O, 2^(L-k), 2^k], summed
    over the chunk's rows.

    β is normalized by ``Σ_x α_b β_b = 1`` (at a row's last step ``Σα``, where β = 1), which every transition
    carries over: dividing step b's backward factor by ``S_{b-1} z_b`` (known from the α pass) keeps it, so no
    sum over states is taken here. The tangent is carried shifted, ``β̃' = β' + ρ β`` with the per-row constant
    ``ρ = β ḡ_{log Z} - E[βG]`` (``E[βG] = Σα'/Σα`` at the row's last step): it obeys β''s recursion and starts
    at ρ, and it turns the centred statistics into plain ones: ``ḡ_h = Σ_x y (α' β + α β̃') / z``, the window's
    couplings ``Σ_rows (α' β + α β̃') / z``, and the leaving ones ``K1 ⊙ Σ_rows α_{b-1} ⊗ V' + α'_{b-1} ⊗ V``
    with ``V = K23 d β / (S z)`` and ``V' = K23 d (β̃' + β (g·y) β) / (S z)``, the vectors the backward GEMMs take."""
    dt = hs.dtype
    k, rb = p.k, p.rb
    gy = beta * _spin_dot(gm, k, 3)  # β (g_b·y): [nb, G, O, y, R]
    es, dshift = _fields(hs, beta, k)
    groups = _alpha_pass(p, es, dshift, K1f, K23, sh, gy)
    # Rows with a zero cotangent contribute exactly zero: their factors are set to 0 outright, so that a row
    # whose messages under- or overflowed (one the sweep replaces) cannot feed 0·inf into the sums over rows.
    on = jnp.any(gm != 0, axis=(0, 3)) | (glz != 0)  # [G, O, R]
    la_end = _at_end(p, groups, "la")
    rho = jnp.where(on, beta * glz - _at_end(p, groups, "ts") * jnp.exp(-la_end), 0.0)  # β ḡ_{log Z} - E[βG]
    sz_end = jnp.where(on, jnp.exp(la_end), 1.0)  # z at the last step: Σα there (β = 1)
    on = on.astype(dt)

    def step(carry, x, q, rho, sz_end, on):
        (o0, o1), (a0, a1), b = carry  # β, β̃' made by the step after this one (0 before a row's end); [α, α'] here
        start = (x["end"] == b).astype(dt)
        b0, b1 = o0 + start, o1 + (start * rho)[:, :, None, None]  # the rows that end here: β = 1, β̃' = ρ
        z = jnp.where(x["end"] == b, sz_end, 1.0)
        XW = a1 * b0 + a0 * b1  # z × (tangent of the window's distribution)
        gh = p.project(XW, q)[:, :, :k] / z[:, :, None]
        gE23 = p.window_sums(XW, 1.0 / z, q)  # couplings inside the window (s, y)
        scale = on * jnp.exp(-(x["logS"] + jnp.log(z)))  # the step's factor over S_{b-1} z_b
        kd = p.bcast(x["K23"], q) * p.bcast_y(x["e"] * scale[:, :, None], q)
        v0 = b0 * kd  # V
        v1 = (b1 + p.bcast_y(x["gy"], q) * b0) * kd  # V'
        gK1 = p.rows_gemm(x["a"], v1, q) + p.rows_gemm(x["t"], v0, q)  # x: [α, α'] before this step
        out = (p.gemm_plain_back(v0, x["K1"], q), p.gemm_plain_back(v1, x["K1"], q))
        return (out, (x["a"], x["t"]), b - 1), (gh, x["K1"] * gK1, gE23)

    ghs, gE1s, gE23s = [None] * len(p.groups), [None] * len(p.groups), [None] * len(p.groups)
    z0 = jnp.zeros(p.state_shape(1, p.rows(p.groups[-1][2])), dt)
    outs, b = (z0, z0), jnp.int32(p.nb - 1)
    for gi in range(len(p.groups) - 1, -1, -1):
        b0, b1, lo = p.groups[gi]
        grow = p.rows(lo) - outs[0].shape[-1]  # rows that end in this group join (β = 0 until their last step)
        outs = tuple(jnp.pad(c, [(0, 0)] * 4 + [(grow, 0)]) for c in outs)
        g = groups[gi]
        xs = _pairs(dict(e=es[b0:b1, ..., lo * rb:], K1=K1[b0:b1], K23=K23[b0:b1], gy=gy[b0:b1, ..., lo * rb:],
                         logS=g["logS"], end=jnp.broadcast_to(jnp.asarray(p.end_rows(lo)), (b1 - b0, p.rows(lo)))))
        xs.update(a=g["a"], t=g["t"])  # [α, α'] before every step, paired
        step_g = partial(step, rho=rho[..., lo * rb:], sz_end=sz_end[..., lo * rb:], on=on[..., lo * rb:])
        (outs, _, b), (gh, gE1, gE23) = _scan_pairs(step_g, (outs, (g["last"], g["tlast"]), b), xs, reverse=True)
        ghs[gi], gE1s[gi], gE23s[gi] = jnp.pad(gh, [(0, 0)] * 4 + [(lo * rb, 0)]), gE1, gE23
    return jnp.concatenate(ghs, axis=0), jnp.concatenate(gE1s, axis=0), jnp.concatenate(gE23s, axis=0)


def _step_tables(C, beta, L, k):
    """The tables of every step: K1 with a column of ones (forward), K1 with a row of its column sums
    (backward), K1, K23, and the log of their scale."""
    K1, K23, sh = _tables(C, beta, L, k)
    K1f = jnp.concatenate([K1, jnp.ones(K1.shape[:-1] + (1,), K1.dtype)], axis=-1)
    K1b = jnp.concatenate([K1, K1.sum(-2, keepdims=True)], axis=-2)
    return K1f, K1b, K1, K23, sh


def _core(plan: Plan):
    """``(hs [nch, nb, G, O, k, R], C [nb, G, O, k, L+k], beta) -> (m, log_z, lost)`` (chunks first) with its VJP.
    Nothing but the inputs is kept for the backward pass, which recomputes the chunk's messages."""
    p = plan

    def primal(hs, C, beta):
        K1f, K1b, _, K23, sh = _step_tables(C, beta, p.L, p.k)
        return lax.map(lambda hc: _forward_chunk(p, hc, K1f, K1b, K23, sh, beta), hs)

    core = jax.custom_vjp(primal)

    def core_fwd(hs, C, beta):
        return primal(hs, C, beta), (hs, C, beta)

    def core_bwd(saved, cts):
        hs, C, beta = saved
        gm, glz, _ = cts
        K1f, K1b, K1, K23, sh = _step_tables(C, beta, p.L, p.k)

        def chunk(acc, x):
            gh, gE1, gE23 = _backward_chunk(p, x[0], K1f, K1, K23, sh, beta, x[1], x[2])
            return (acc[0] + gE1, acc[1] + gE23), gh

        zeros = (jnp.zeros(K1.shape, K1.dtype), jnp.zeros(K23.shape, K23.dtype))
        (gE1, gE23), gh = lax.scan(chunk, zeros, (hs, gm, glz))
        _, vjp = jax.vjp(lambda c: _energies(c, p.L, p.k), C)
        (gC,) = vjp((gE1, gE23))
        gbeta = (jnp.sum(hs * gh) + jnp.sum(C * gC)) / beta
        return gh, gC, gbeta.astype(beta.dtype).reshape(beta.shape)

    core.defvjp(core_fwd, core_bwd)
    return core


def blocked(h, J, beta, w: int, causal: bool, layout):
    """Exact ``mean [*batch, n]``, ``log_z [*batch]`` and the underflow bound ``lost [*batch]`` (log of
    the relative mass lost, as ``Banded``'s sweep reports it) of the models ``(h, J, beta)``, by the
    blocked forward–backward with the hand-written VJP. ``layout`` from ``blocked_layout`` (not None)."""
    batch, jb, _ = layout
    dt = h.dtype
    n = h.shape[-1]
    L, k = block_len(n, w)
    nb = 2 * -(-n // (2 * k))  # an even number of steps: the scans take them in pairs
    N = nb * k
    nd = len(batch)
    vary = [d for d in range(nd) if jb[d] != 1]
    shared = [d for d in range(nd) if jb[d] == 1 and not (causal and d == nd - 1)]
    order = vary + shared + ([nd - 1] if causal else [])
    Gs, Rs = tuple(batch[d] for d in vary), tuple(batch[d] for d in shared)
    G, R = int(np.prod(Gs, dtype=np.int64)), int(np.prod(Rs, dtype=np.int64))
    hb = jnp.transpose(jnp.broadcast_to(h, batch + (n,)), order + [nd])
    Jw = band(J, w).reshape(Gs + (n, w)).reshape(G, n, w)  # J's shared dims have size 1
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
    hs = hs.reshape(hs.shape[:-2] + (RC * rb,))  # rows (rc, rb)

    # couplings of step b for class o: C[b, t, u] between new spin bk+t-o and spin bk-L+u-o (u < L: the window)
    t, u = np.arange(k)[:, None], np.arange(L + k)[None, :]
    kk = u - t - L + w
    ok = (kk >= 0) & (kk < w)
    vrow = np.arange(nb)[:, None, None] * k + t[None]  # [nb, k, 1] virtual index of the new spin
    C = jnp.stack([jnp.where(ok, jnp.pad(Jw, [(0, 0), (o, N + k), (0, 0)])[:, vrow, np.clip(kk, 0, w - 1)[None]], 0.0)
                   for o in range(O)], axis=1)  # [G, O, nb, k, L+k]
    C = jnp.moveaxis(C, 2, 0)

    plan = Plan(L, k, nb, G, O, RC, rb, causal)
    m, log_z, lost = _core(plan)(hs, C, beta)  # [nch, nb, G, O, k, RC rb], [nch, G, O, RC rb]
    m, log_z, lost = (x.reshape(x.shape[:-1] + (RC, rb)) for x in (m, log_z, lost))

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
