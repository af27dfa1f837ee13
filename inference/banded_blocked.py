"""The blocked path of the Banded engine: blocks of spins folded into one GEMM per step,
the layout of the blocks (causal queries included) and the underflow-guarded sweep."""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from isingattn.energy import spin_table
from isingattn.sparse import SparseCouplings


def _band(J, w):
    """Couplings of each spin to the ``w`` spins before it, in window order.

    J: [..., n, n] or :class:`~isingattn.sparse.SparseCouplings` -> [..., n, w] with
    ``out[..., t, k] = J_{t, t-w+k}`` (0 before spin 0). Dense: symmetrized, so the gradient
    w.r.t. ``J`` is symmetric like ``Exact``'s. Sparse: a scatter of the weights of the edges
    within distance ``w`` (the caller checks that no edge is farther), O(n w), never dense."""
    if isinstance(J, SparseCouplings):
        g = J.graph
        i, j = g.edges[:, 0], g.edges[:, 1]
        near = np.flatnonzero(j - i <= w)  # static: the graph is numpy
        out = jnp.zeros(J.weights.shape[:-1] + (g.n, w), J.dtype)
        return out.at[..., j[near], w - (j - i)[near]].set(J.weights[..., near])
    n = J.shape[-1]
    t = np.arange(n)[:, None]
    src = t - w + np.arange(w)[None, :]  # (n, w)
    ok = src >= 0
    src = np.where(ok, src, 0)
    lower = jnp.take_along_axis(J, jnp.broadcast_to(src, J.shape[:-2] + (n, w)), axis=-1)
    upper = jnp.take_along_axis(jnp.swapaxes(J, -1, -2), jnp.broadcast_to(src, J.shape[:-2] + (n, w)), axis=-1)
    return jnp.where(ok, (lower + upper) / 2, 0.0)


BLOCK_MIN = 4  # spins per block at least (fewer GEMM steps for small w)
BLOCK_MAX = 16  # 2^(L+k) entries per step table
MAX_BLOCKS = 128  # every step's forward message is kept: beyond this, the per-spin sweep (O(sqrt(n)) of them)
CAUSAL_GROUPS = 4  # causal: scans over the rows still live, work (1 + 1/G)/2 of full chains; compile time ~ G
PLAIN_UNROLL = 4  # not causal: steps per scan iteration (1 costs ~7% at T=256, w=8 in benchmarks/banded.py)


def _block_len(n: int, w: int) -> tuple:
    """``(L, k)``: a window of ``L ≥ w`` spins advanced ``k`` spins per step (``k`` divides ``L``).
    Cost per spin ``~2^(L+k) / k``: ``L = 2k`` for ``w ≥ 6`` (``w = 8``: ``k = 4``), else ``L = k``;
    one step of all ``n`` spins when ``n ≤ L``."""
    k = -(-w // 2) if w >= 6 else max(w, BLOCK_MIN)
    L = 2 * k if w >= 6 else k
    return (n, n) if n <= L else (L, k)


def _blocked_layout(h_shape, J_shape, w: int, causal: bool, user_mask, want_corr: bool):
    """Static check whether the blocked path applies; returns ``(lead, k)`` or None.

    The batch is split into ``lead`` dims and ``k`` trailing "row" dims over which J is
    shared (broadcast), so that one block step is a GEMM ``[rows, 2^L] @ [2^L, 2^L]``. Causal
    models use the query axis as the row axis (J must not vary along it)."""
    n = h_shape[-1]
    if want_corr or user_mask is not None or n == 0:
        return None
    L, k = _block_len(n, w)
    if L + k > BLOCK_MAX or -(-n // k) > MAX_BLOCKS:
        return None
    batch = tuple(np.broadcast_shapes(h_shape[:-1], J_shape[:-2]))
    jb = (1,) * (len(batch) - (len(J_shape) - 2)) + tuple(J_shape[:-2])
    if causal:
        if not batch or batch[-1] != n or jb[-1] != 1:
            return None
        k = 1
    else:
        k = 0
        while k < len(batch) and jb[len(batch) - 1 - k] == 1:
            k += 1
    return batch, jb, k


def _blocked(h, J, beta, w: int, causal: bool, layout):
    """Exact ``mean``, ``log_z`` and the underflow bound ``lost`` (as ``_scaled``) by forward–backward
    that adds ``k`` spins per step to a window of ``L ≥ w`` spins (``L = 2k``, or ``L = k``). With
    the window ``x = (l, s)`` (``l``: the ``k`` oldest spins, which leave; ``s``: the rest) and the
    new spins ``y``, a step is

        α'[s, y] = d(y) Σ_l α[l, s] K[l, s, y],     K = exp(β E(l, s, y)),   d(y) = exp(β h·y),

    where ``K`` (the couplings of the new spins, to the window and among themselves) is shared by
    every query with that J and ``d`` is per query: a batched GEMM over ``s`` of
    ``[queries, 2^k] @ [2^k, 2^k]``, ``O(2^(L+k) / k)`` flops per spin and query, and autodiff
    through it is GEMMs too. The backward message is the transposed product, and
    ``P(x) ∝ α(x) β(x)`` gives the marginals of the new spins. Messages are rescaled to max 1
    after every step. The steps run as ``lax.scan``s (compile time independent of ``n``).

    Causal: query ``i`` sees spins ``0..i``, so it ends at step ``i // k``. The steps are split into
    ``CAUSAL_GROUPS`` scans, each over the queries still live at its first step (about
    ``(1 + 1/CAUSAL_GROUPS) / 2`` of the work of full chains); the ``k`` queries that end at a step
    use, there, ``K`` with the couplings of their inactive spins removed (one table per prefix
    length ``r = 1..k``), and the queries that ended before run on with zero fields (ignored)."""
    batch, jb, kr = layout
    sg = lax.stop_gradient
    dt = h.dtype
    n = h.shape[-1]
    L, k = _block_len(n, w)
    nL, nk, ns = 2**L, 2**k, 2 ** (L - k)
    nb = -(-n // k)
    N = nb * k
    lead = batch[: len(batch) - kr]
    R = int(np.prod(batch[len(batch) - kr:], dtype=np.int64))
    Rp = N if causal else R  # causal: rows padded to whole steps, k of them end at every step
    hh = jnp.broadcast_to(h, batch + (n,)).reshape(lead + (R, n))
    hh = jnp.pad(hh, [(0, 0)] * len(lead) + [(0, Rp - R), (0, N - n)])
    jl = jb[: len(lead)]
    keep = [d != 1 for d in jl]
    Jt = _band(J, w)  # [..J, n, w]
    Jt = Jt.reshape(tuple(d for d in jl if d != 1) + (n, w))
    letters = "abcdfghijmopqtuvwxz"[: len(lead)]
    ml = "".join(c for c, kp in zip(letters, keep) if kp)
    ein = lambda spec, *xs: jnp.einsum(spec.replace("A", letters).replace("M", ml), *xs)

    # couplings of step b: C[b, t, u] between new spin bk+t and spin bk-L+u (u < L: the window);
    # 0 for the padding spins bk+t ≥ n (whose rows of Jw are 0), so they are free spins
    Jw = jnp.pad(Jt, [(0, 0)] * (Jt.ndim - 2) + [(0, N - n), (0, 0)])  # [..J, N, w]
    t = np.arange(k)[:, None]
    u = np.arange(L + k)[None, :]
    kk = u - t - L + w  # window slot of spin bk-L+u seen from spin bk+t
    ok = (kk >= 0) & (kk < w)
    rows = np.arange(nb)[:, None, None] * k + t[None]
    C = jnp.where(ok, Jw[..., rows, np.clip(kk, 0, w - 1)[None]], 0.0)  # [..J, nb, k, L+k]
    SL, Sk = spin_table(L, dt), spin_table(k, dt)  # [2^L, L], [2^k, k]

    def tables(Cm):  # [..., k, L+k] -> K [..., 2^k (l), 2^(L-k) (s), 2^k (y)] (entries ≤ 1), log of the scale
        inter = jnp.einsum("xu,...tu,yt->...xy", SL, Cm[..., :L], Sk)
        intra = jnp.einsum("yu,...tu,yt->...y", Sk, Cm[..., L:], Sk)
        E = beta * (inter + intra[..., None, :])
        shift = sg(jnp.max(E, axis=(-2, -1)))
        K = jnp.exp(E - shift[..., None, None])
        return K.reshape(K.shape[:-2] + (nk, ns, nk)), shift

    steps_first = lambda x, ax: jnp.moveaxis(x, ax, 0)
    if causal:  # one table per prefix length r = 1..k in every step (r = k: the full table)
        rmask = (np.arange(k)[None, :] < np.arange(1, k + 1)[:, None]).astype(dt)  # [r, t]
        Kr, shr = tables(C[..., :, None, :, :] * rmask[:, :, None])  # [..J, nb, k, nk, ns, nk], [..J, nb, k]
        Kfull, shfull = Kr[..., k - 1, :, :, :], shr[..., k - 1]
        Kr, shr = steps_first(Kr, -5), steps_first(shr, -2)
    else:
        Kfull, shfull = tables(C)  # [..J, nb, nk, ns, nk]
    Kfull, shfull = steps_first(Kfull, -4), steps_first(shfull, -1)

    tiny = float(jnp.finfo(dt).tiny)
    log_k_tiny = math.log((2 * nk + 1) * tiny)  # each entry: ≤ 2^k flushed products and K's own flushes
    guard = lambda x, floor: (jnp.where(x > floor, x, 1.0), jnp.where(x > floor, jnp.zeros_like(x), jnp.inf))
    pad_rows = lambda x, lo, ax, v: jnp.pad(x, [(0, 0)] * (x.ndim + ax) + [(lo, 0)] + [(0, 0)] * (-ax - 1),
                                            constant_values=v)
    dslice = lambda x, o, ax: lax.dynamic_slice_in_dim(x, o, k, axis=ax)  # the k rows that end at this step
    dput = lambda x, y, o, ax: lax.dynamic_update_slice_in_dim(x, y.astype(x.dtype), o, axis=ax)

    def unsq(x, nrest):  # [..J squeezed, *rest] -> [..J with ones, *rest], broadcasts against lead
        return x.reshape(tuple(d if kp else 1 for d, kp in zip(jl, keep)) + x.shape[x.ndim - nrest:])

    def step_inputs(b0, b1, lo):
        """Per-step inputs of steps b0..b1-1 on rows lo..Rp-1, steps first."""
        rows_ = Rp - lo
        hb = hh[..., lo:, b0 * k:b1 * k].reshape(lead + (rows_, b1 - b0, k))
        j = (np.arange(b0, b1)[:, None, None] * k + np.arange(k)[None, None, :])  # [steps, 1, k]: spin index
        if causal:
            i = lo + np.arange(rows_)[None, :, None]
            act, valid = j <= i, (i[..., 0] >= np.arange(b0, b1)[:, None] * k)  # [steps, rows, k], [steps, rows]
        else:
            act, valid = j < n, None
        xs = dict(h=steps_first(hb, -2), act=act.astype(dt), K=Kfull[b0:b1], sh=shfull[b0:b1])
        if causal:
            xs.update(valid=valid, o=jnp.asarray((np.arange(b0, b1) - b0) * k + (b0 * k - lo), jnp.int32),
                      Kr=Kr[b0:b1], shr=shr[b0:b1])
        return xs

    def fwd(carry, x):  # the window after step b-1 -> after step b, for every row
        a, c = carry  # [*lead, rows, 2^L] (max 1), [*lead, rows]: log of its scale
        rows_ = a.shape[-2]
        hb = x["h"] * x["act"]  # [*lead, rows, k]: inactive spins are free
        dshift = sg(beta * jnp.abs(hb).sum(-1))
        d = jnp.exp(beta * (hb @ Sk.T) - dshift[..., None])  # [*lead, rows, 2^k]
        a = a.reshape(a.shape[:-1] + (nk, ns))
        g = ein("Arls,Mlsy->Arsy", a, x["K"])
        shift = jnp.broadcast_to(unsq(x["sh"][..., None], 1), lead + (rows_,))
        if causal:  # the k rows that end here: one prefix table each
            o = x["o"]
            g = dput(g, ein("Aels,Melsy->Aesy", dslice(a, o, -3), x["Kr"]), o, -3)
            shift = dput(shift, jnp.broadcast_to(unsq(x["shr"], 1), lead + (k,)), o, -1)
        g = (g * d[..., None, :]).reshape(lead + (rows_, nL))
        Mx, flag = guard(sg(jnp.max(g, axis=-1)), tiny)
        alpha = g / Mx[..., None]
        c = c + jnp.log(Mx) + shift + dshift
        out = dict(alpha=alpha, d=d, Mx=Mx, flag=flag)
        if causal:  # log Z of the rows that end here; each inactive spin of their step is a free factor 2
            tot, fz = guard(dslice(alpha, o, -2).sum(-1), tiny)
            out.update(lz=dslice(c, o, -1) + jnp.log(tot) - (k - 1 - np.arange(k)).astype(dt) * math.log(2.0), fz=fz)
        return (alpha, c), out

    def bwd(carry, x):  # β over the window after step b (rescaled to max 1) -> after step b-1; marginals of step b
        bm, Mb, bfl = carry
        if causal:  # the rows that end here start from β = 1
            o = x["o"]
            bm = dput(bm, jnp.ones(lead + (k, nL), dt), o, -2)
            Mb, bfl = dput(Mb, jnp.ones(lead + (k,), dt), o, -1), dput(bfl, jnp.zeros(lead + (k,), dt), o, -1)
        a = x["alpha"]
        P = a * bm
        Pn = P.reshape(P.shape[:-1] + (ns, nk)).sum(-2)  # [*lead, rows, 2^k]: the new spins
        tot, flag = guard(Pn.sum(-1), math.sqrt(tiny))
        m = jnp.where(x["act"] > 0, (Pn @ Sk) / tot[..., None], 0.0)  # [*lead, rows, k]
        la, lb, lt = sg(jnp.log(a.sum(-1))), sg(jnp.log(bm.sum(-1))), sg(jnp.log(tot))
        lost = (jnp.logaddexp(log_k_tiny - jnp.log(x["Mx"]) + lb - lt, log_k_tiny - jnp.log(Mb) + la - lt)
                + flag + x["flag"] + bfl)
        if causal:  # rows that ended before this step are not part of any result
            lost = jnp.where(x["valid"], lost, -jnp.inf)
        v = bm.reshape(bm.shape[:-1] + (ns, nk)) * x["d"][..., None, :]  # [*lead, rows, s, y]
        prop = ein("Arsy,Mlsy->Arls", v, x["K"])
        if causal:
            prop = dput(prop, ein("Aesy,Melsy->Aels", dslice(v, o, -3), x["Kr"]), o, -3)
        prop = prop.reshape(bm.shape)
        Mb, bfl = guard(sg(jnp.max(prop, axis=-1)), tiny)
        return (prop / Mb[..., None], Mb, bfl), (m, lost)

    # causal: group g covers steps bounds[g]..bounds[g+1]-1 on the rows live at its first step
    G = min(CAUSAL_GROUPS, nb) if causal else 1
    bounds = [(g * nb) // G for g in range(G + 1)]
    los = [b0 * k if causal else 0 for b0 in bounds[:-1]]
    unroll = 1 if causal else PLAIN_UNROLL
    carry = (jnp.zeros(lead + (Rp, nL), dt).at[..., 0].set(1.0), jnp.zeros(lead + (Rp,), dt))  # before spin 0
    fouts = []
    for g in range(G):
        done = los[g] - (los[g - 1] if g else 0)  # rows that ended in the group before: dropped
        carry = (carry[0][..., done:, :], carry[1][..., done:])
        carry, out = lax.scan(fwd, carry, step_inputs(bounds[g], bounds[g + 1], los[g]), unroll=unroll)
        fouts.append(out)
    if causal:
        log_z = jnp.concatenate([jnp.moveaxis(o["lz"], 0, -2).reshape(lead + (-1,)) for o in fouts], axis=-1)
        fz = jnp.concatenate([jnp.moveaxis(o["fz"], 0, -2).reshape(lead + (-1,)) for o in fouts], axis=-1)
    else:  # every row ends at the last step; the padding spins after spin n-1 are free
        tot, fz = guard(carry[0].sum(-1), tiny)
        log_z = carry[1] + jnp.log(tot) - (N - n) * math.log(2.0)

    bcarry = (jnp.ones(lead + (Rp - los[-1], nL), dt), jnp.ones(lead + (Rp - los[-1],), dt),
              jnp.zeros(lead + (Rp - los[-1],), dt))
    means, lost = [None] * G, jnp.full(lead + (Rp,), -jnp.inf, dt)
    for g in range(G - 1, -1, -1):
        if g < G - 1:  # the rows that end in this group join (their β is set at their last step)
            grow = los[g + 1] - los[g]
            bcarry = tuple(pad_rows(x, grow, ax, 1.0 if i < 2 else 0.0)
                           for i, (x, ax) in enumerate(zip(bcarry, (-2, -1, -1))))
        xs = {**step_inputs(bounds[g], bounds[g + 1], los[g]), **fouts[g]}
        for key in ("h", "lz", "fz"):  # not needed backward
            xs.pop(key, None)
        bcarry, (m, ls) = lax.scan(bwd, bcarry, xs, reverse=True, unroll=unroll)
        means[g] = pad_rows(jnp.moveaxis(m, 0, -2).reshape(lead + (Rp - los[g], -1)), los[g], -2, 0.0)
        lost = jnp.logaddexp(lost, pad_rows(jax.nn.logsumexp(ls, axis=0), los[g], -1, -jnp.inf))
    mean = jnp.concatenate(means, axis=-1)[..., :R, :n]
    lost = (lost + fz)[..., :R]
    lost = sg(jnp.where(jnp.isnan(lost), jnp.inf, lost))
    return (mean.reshape(batch + (n,)), log_z[..., :R].reshape(batch), lost.reshape(batch))
