"""The blocked path of the Banded engine: blocks of spins folded into one GEMM per step,
the layout of the blocks (causal queries included) and the underflow-guarded sweep."""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from isingattn.energy import spin_table


def _band(J, w):
    """Couplings of each spin to the ``w`` spins before it, in window order.

    J: [..., n, n] -> [..., n, w] with ``out[..., t, k] = J_{t, t-w+k}`` (0 before spin 0).
    Symmetrized, so the gradient w.r.t. ``J`` is symmetric like ``Exact``'s."""
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
MAX_BLOCKS = 128  # the block loop is unrolled


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
    after every step.

    Causal: query ``i`` sees spins ``0..i`` only. The loop over steps is unrolled and step ``b``
    works on the queries ``i ≥ bk`` alone (half the work of full chains); a query's last step
    uses ``K`` with the couplings of its inactive spins removed (one table per prefix length
    ``r = 1..k``)."""
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
    hh = jnp.broadcast_to(h, batch + (n,)).reshape(lead + (R, n))
    hh = jnp.pad(hh, [(0, 0)] * (hh.ndim - 1) + [(0, N - n)])
    jl = jb[: len(lead)]
    keep = [d != 1 for d in jl]
    Jt = J.reshape(tuple(d for d in jl if d != 1) + (n, n))
    letters = "abcdfghijmopqtuvwxz"[: len(lead)]
    ml = "".join(c for c, kp in zip(letters, keep) if kp)
    ein = lambda spec, *xs: jnp.einsum(spec.replace("A", letters).replace("M", ml), *xs)

    # couplings of step b: C[b, t, u] between new spin bk+t and spin bk-L+u (u < L: the window)
    Jw = jnp.pad(_band(Jt, w), [(0, 0)] * (Jt.ndim - 2) + [(0, N - n), (0, 0)])  # [..J, N, w]
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

    if causal:  # one table per prefix length r = 1..k in every step
        rmask = (np.arange(k)[None, :] < np.arange(1, k + 1)[:, None]).astype(dt)  # [r, t]
        Kr, shr = tables(C[..., :, None, :, :] * rmask[:, :, None])  # [..J, nb, k, nk, ns, nk], [..J, nb, k]
        Kfull, shfull = Kr[..., k - 1, :, :, :], shr[..., k - 1]
    else:
        Kfull, shfull = tables(C)  # [..J, nb, nk, ns, nk]
        r_last = n - (nb - 1) * k
        Klast, shlast = tables(C[..., nb - 1, :, :] * (np.arange(k) < r_last).astype(dt)[:, None])

    tiny = float(jnp.finfo(dt).tiny)
    log_k_tiny = math.log((2 * nk + 1) * tiny)  # each entry: ≤ 2^k flushed products and K's own flushes
    guard = lambda x, floor: (jnp.where(x > floor, x, 1.0), jnp.where(x > floor, 0.0, jnp.inf))

    def unsq(x, nrest):  # [..J squeezed, *rest] -> [..J with ones, *rest], broadcasts against lead
        return x.reshape(tuple(d if kp else 1 for d, kp in zip(jl, keep)) + x.shape[x.ndim - nrest:])

    def jshift(s, rows_):  # per-J shift [..J squeezed] -> [*lead, rows_]
        return jnp.broadcast_to(unsq(s[..., None], 1), lead + (rows_,))

    def live(b):  # (first live row, rows that end at step b)
        if causal:
            return b * k, min(k, R - b * k)
        return 0, (R if b == nb - 1 else 0)

    def active(b, rows_, ne):  # [rows, k] active new spins
        if causal:
            am = np.ones((rows_, k), bool)
            am[:ne] = np.arange(k)[None, :] <= np.arange(ne)[:, None]
            return am
        return np.broadcast_to(np.arange(k) < (r_last if b == nb - 1 else k), (rows_, k))

    alphas, ds, cs, lzs, fl = [], [], [], [], []
    alpha = c = None
    for b in range(nb):
        lo, ne = live(b)
        rows_ = R - lo
        hb = hh[..., lo:, b * k:(b + 1) * k] * active(b, rows_, ne).astype(dt)  # [*lead, rows, k]
        dshift = sg(beta * jnp.abs(hb).sum(-1))
        d = jnp.exp(beta * (hb @ Sk.T) - dshift[..., None])  # [*lead, rows, 2^k]
        if b == 0:  # before spin 0: one fixed window (its couplings are 0)
            a = jnp.zeros(lead + (rows_, nL), dt).at[..., 0].set(1.0)
        else:
            a = alpha[..., alpha.shape[-2] - rows_:, :]
        a = a.reshape(a.shape[:-1] + (nk, ns))
        if causal:
            ge = ein("Aels,Melsy->Aesy", a[..., :ne, :, :], Kr[..., b, :ne, :, :, :])
            gr = ein("Arls,Mlsy->Arsy", a[..., ne:, :, :], Kfull[..., b, :, :, :])
            g = jnp.concatenate([ge, gr], axis=-3)
            shift = jnp.concatenate([jshift(shr[..., b, e], 1) for e in range(ne)] +
                                    ([jshift(shfull[..., b], rows_ - ne)] if rows_ > ne else []), axis=-1)
        else:
            Kb, shb = (Klast, shlast) if b == nb - 1 else (Kfull[..., b, :, :, :], shfull[..., b])
            g = ein("Arls,Mlsy->Arsy", a, Kb)
            shift = jshift(shb, rows_)
        g = (g * d[..., None, :]).reshape(lead + (rows_, nL))
        c_prev = 0.0 if b == 0 else c[..., c.shape[-1] - rows_:]
        Mx, flag = guard(sg(jnp.max(g, axis=-1)), tiny)
        alpha = g / Mx[..., None]
        c = c_prev + jnp.log(Mx) + shift + dshift
        alphas.append(alpha)
        ds.append(d)
        cs.append(Mx)
        if ne:
            free = (k - (np.arange(ne) + 1)) if causal else np.full(ne, k - r_last)
            tot, fz = guard(alpha[..., :ne, :].sum(-1), tiny)
            lzs.append(c[..., :ne] + jnp.log(tot) - free.astype(dt) * math.log(2.0))
            flag = flag + jnp.pad(fz, [(0, 0)] * len(lead) + [(0, rows_ - ne)])
        fl.append(flag)

    means, losts = [None] * nb, [None] * nb
    bm = None
    for b in range(nb - 1, -1, -1):
        lo, ne = live(b)
        rows_ = R - lo
        if b == nb - 1:
            bm, Mb = jnp.ones(lead + (rows_, nL), dt), jnp.ones(lead + (rows_,), dt)
        else:
            _, ne1 = live(b + 1)
            v = bm.reshape(bm.shape[:-1] + (ns, nk)) * ds[b + 1][..., None, :]  # [*lead, rows_{b+1}, s, y]
            if causal:
                pe = ein("Aesy,Melsy->Aels", v[..., :ne1, :, :], Kr[..., b + 1, :ne1, :, :, :])
                pr = ein("Arsy,Mlsy->Arls", v[..., ne1:, :, :], Kfull[..., b + 1, :, :, :])
                prop = jnp.concatenate([pe, pr], axis=-3).reshape(lead + (rows_ - ne, nL))
                bm = jnp.concatenate([jnp.ones(lead + (ne, nL), dt), prop], axis=-2) if ne else prop
            else:
                Kb1 = Klast if b + 1 == nb - 1 else Kfull[..., b + 1, :, :, :]
                bm = ein("Arsy,Mlsy->Arls", v, Kb1).reshape(lead + (rows_, nL))
            Mb, flag = guard(sg(jnp.max(bm, axis=-1)), tiny)
            bm = bm / Mb[..., None]
            fl[b] = fl[b] + flag
        a = alphas[b]
        P = a * bm
        Pn = P.reshape(P.shape[:-1] + (ns, nk)).sum(-2)  # [*lead, rows, 2^k]: the new spins
        tot, flag = guard(Pn.sum(-1), math.sqrt(tiny))
        m = (Pn @ Sk) / tot[..., None]  # [*lead, rows, k]
        la, lb, lt = sg(jnp.log(a.sum(-1))), sg(jnp.log(bm.sum(-1))), sg(jnp.log(tot))
        lost = jnp.logaddexp(log_k_tiny - jnp.log(cs[b]) + lb - lt, log_k_tiny - jnp.log(Mb) + la - lt) + flag + fl[b]
        m = jnp.where(active(b, rows_, ne), m, 0.0)
        if lo:
            m = jnp.pad(m, [(0, 0)] * len(lead) + [(lo, 0), (0, 0)])
            lost = jnp.pad(lost, [(0, 0)] * len(lead) + [(lo, 0)], constant_values=-jnp.inf)
        means[b], losts[b] = m, lost
    mean = jnp.concatenate(means, axis=-1)[..., :n]
    log_z = jnp.concatenate(lzs, axis=-1)
    lost = jax.nn.logsumexp(jnp.stack(losts), axis=0)
    lost = sg(jnp.where(jnp.isnan(lost), jnp.inf, lost))
    return (mean.reshape(batch + (n,)), log_z.reshape(batch), lost.reshape(batch))
