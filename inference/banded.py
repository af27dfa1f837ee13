"""Exact inference for banded couplings by a transfer matrix (DESIGN.md §3, "Banded").

When ``J_jk = 0`` for ``|j - k| > w``, spin ``t`` interacts only with the ``w`` spins
before it. The state of the chain after spin ``t`` is the window ``x = (s_{t-w+1}..s_t)``
(``2^w`` values); adding spin ``t`` multiplies by

    exp(β s_t (h_t + f_t(x)))   with   f_t(x) = Σ_{d=1..w} J_{t,t-d} s_{t-d}

and sums out the spin that leaves the window. Forward messages ``α_t`` and backward
messages ``b_t`` give ``log Z`` and every marginal, ``⟨s_t⟩ ∝ Σ_x (α_t b_t)(x) s_t``.

Where it applies (no per-query ``mask``, no ``corr``, J shared along the query axis: the
attention case), a blocked path runs first: ``k`` spins per step into a window of ``L = 2k ≥ w``
spins, each step a batched GEMM with a table shared by the queries, causal queries swept over their
own prefix only (``_blocked``; 4x (float64) to 8x (float32) faster than the sweep below in
benchmarks/banded.py at T = 256, w = 8). Models
that fail its underflow bound, and everything else, take the per-spin sweep, with two paths as in
``Exact``:

* scaled (fast): messages rescaled to max 1 at every spin. The factor splits into a
  per-query ``exp(β s_t h_t)`` and a table ``exp(β s_t f_t(x))`` shared by every
  query with the same ``J``, so a step is multiply-adds, no exponential per state.
  A bound on the mass lost to underflow is checked per model.
* log space (fallback, about 5-10x slower): ``logaddexp`` per state; finite and
  accurate for every finite input. It runs only when some model fails the bound
  (e.g. |h|, |J| ~ 1e2 competing in float32), and then for the whole batch.

Cost ``O(n 2^w)`` per query (plus ``O(n 2^w w)`` per distinct ``J`` for the tables),
as ``lax.scan`` sweeps batched over all queries. Memory: the sweep keeps the forward
message only at the start of each of ~sqrt(n) blocks and recomputes a block before
its backward pass (under ``jax.checkpoint``, so gradients need no more), i.e.
``O(sqrt(n) 2^w)`` per query.
"""

from __future__ import annotations

import math
from typing import ClassVar, Optional

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from isingattn import validate as V
from isingattn.engine import Engine, register
from isingattn.errors import IsingInputError
from isingattn.energy import spin_table
from isingattn.inference.exact import LOST_MASS_TOL
from isingattn.marginals import Marginals, linear_response_corr
from isingattn.model import IsingModel, _is_traced

MAX_BANDWIDTH = 20  # 2^w states per query and step


def band_violation(J, bandwidth: int):
    """Largest ``|j - k|`` with ``J_jk != 0`` (0 if none).  J: [..., n, n] -> int (numpy or traced)."""
    n = J.shape[-1]
    dist = np.abs(np.arange(n)[:, None] - np.arange(n)[None, :])
    if _is_traced(J):
        return jnp.max(jnp.where(jnp.any(J != 0, axis=tuple(range(J.ndim - 2))), dist, 0), initial=0)
    nz = np.any(np.asarray(J) != 0, axis=tuple(range(J.ndim - 2)))
    return int(np.max(np.where(nz, dist, 0), initial=0))


def _band_message(bandwidth: int, dist: Optional[int] = None) -> str:
    at = f"at distance {dist}" if dist is not None else f"beyond distance {bandwidth}"
    wider = f"Banded(bandwidth={dist})" if dist is not None else "a larger bandwidth"
    return (f"Banded(bandwidth={bandwidth}) needs J_jk = 0 for |j - k| > {bandwidth}, but J has a nonzero coupling {at}. "
            f"Use {wider} (cost 2^bandwidth per spin), Exact for dense J, or zero the couplings beyond the band.")


@register("banded")
class Banded(Engine):
    """Exact marginals and ``log Z`` for couplings of bandwidth ``w`` (``J_jk = 0`` for
    ``|j - k| > w``), by forward–backward over a window of ``w`` spins.

    Cost ``O(n 2^w)`` exponentials per query, linear in ``n``: ``n`` in the hundreds
    or thousands is fine for ``w ≲ 12``; the time doubles with each unit of ``w``.
    Differentiable in ``h`` and ``J`` by autodiff (through the sweeps). ``J`` beyond
    the band is structurally zero here, so its gradient there (and on the diagonal)
    is 0: the gradient restricted to the band.
    Honours ``mask`` and ``causal`` like ``Exact``. With ``corr=True`` the pair
    correlations come from one forward-mode derivative per spin, ``O(n² 2^w)`` per
    query: only for modest ``n``.

    Args:
        bandwidth: ``w``, the largest distance ``|j - k|`` with a nonzero coupling.
            Concrete ``J`` is checked eagerly (``IsingInputError``, a ``ValueError``);
            traced ``J`` with ``equinox.error_if``.
        corr: also return ``⟨s_j s_k⟩``.
    """

    exact: ClassVar[bool] = True
    native_causal: ClassVar[bool] = True  # causal queries are swept over their own prefix (_blocked)
    bandwidth: int = eqx.field(static=True, default=8, converter=V.plain)
    corr: bool = eqx.field(static=True, default=False, converter=V.plain)
    path: str = eqx.field(static=True, default="auto")

    def __check_init__(self):
        if not isinstance(self.path, str) or self.path not in ("auto", "sweep"):
            raise IsingInputError(f'path must be "auto" (blocked GEMMs where they apply) or "sweep"; got {self.path!r}.')
        # 2^bandwidth states per spin: hence the upper bound
        V.positive_int("bandwidth", self.bandwidth, owner="Banded", hi=MAX_BANDWIDTH)
        V.boolean("corr", self.corr, owner="Banded")

    def _prepare(self, model: IsingModel) -> Engine:
        if not _is_traced(model.J):  # eager check with a message that names the distance
            dist = band_violation(model.J, self.bandwidth)
            if dist > self.bandwidth:
                raise IsingInputError(_band_message(self.bandwidth, dist))
        return self

    def _marginals(self, model: IsingModel, key: Optional[jax.Array]) -> Marginals:
        return _solve(model, int(self.bandwidth), self.corr, self.path == "auto")


def _solve(model: IsingModel, w: int, want_corr: bool, blocked: bool = True) -> Marginals:
    h, J, beta = model.h, model.J, model.beta
    J = eqx.error_if(J, band_violation(J, w) > w, _band_message(w))
    act = model.active()  # [..., n] bool or None
    user_mask = model.mask
    mean_fn = lambda hh: _forward_backward(hh, J, beta, act, user_mask, w)
    layout = _blocked_layout(h.shape, J.shape, w, model.causal, user_mask, want_corr) if blocked else None
    if layout is not None:
        mean, log_z, lost = _blocked(h, J, beta, w, model.causal, layout)
        fail = lost > math.log(LOST_MASS_TOL)

        def fix():  # the per-spin sweep (with its own log-space fallback) for the whole batch
            m, lz, st = mean_fn(h)
            return jnp.where(fail[..., None], m, mean), jnp.where(fail, lz, log_z), st & fail

        mean, log_z, stable = lax.cond(jnp.any(fail), jax.checkpoint(fix), lambda: (mean, log_z, jnp.zeros_like(fail)))
    else:
        mean, log_z, stable = mean_fn(h)
    corr = None
    if want_corr:
        corr = linear_response_corr(lambda x: mean_fn(x)[0], jnp.broadcast_to(h, mean.shape), mean, beta)
        if act is not None:
            a = act.astype(corr.dtype)
            corr = corr * a[..., :, None] * a[..., None, :]
    return Marginals(mean=mean, corr=corr, log_z=log_z, info={"stable_path": stable})


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


def _chain(h, J, act, user_mask, w):
    """Per-spin inputs of the sweeps, spins first: ``xs = (h_t [N, ..h], a_t [N, ..a], Jw_t [N, ..J, w])``
    (``a_t`` is 1 for active spins, 0 for removed ones), the full batch shape, the number
    of free spins per model and the block length of the sweep; ``N ≥ n`` is padded
    with free spins to whole blocks."""
    n, dt = h.shape[-1], h.dtype
    batch = jnp.broadcast_shapes(h.shape[:-1], J.shape[:-2], *(() if m is None else m.shape[:-1] for m in (act, user_mask)))
    Jw = _band(J, w)  # [..J, n, w]
    if user_mask is not None:
        # a masked spin is removed from the couplings of the spins after it; the mask
        # of spin t itself is applied to its whole step (a_t).
        src = np.arange(n)[:, None] - w + np.arange(w)[None, :]
        older = jnp.where(src >= 0, jnp.take(user_mask, np.maximum(src, 0), axis=-1), False)  # [..., n, w]
        Jw = Jw * older.astype(dt)
    a = jnp.ones((n,), dt) if act is None else act.astype(dt)  # [..., n]
    # pad the chain with free spins (h = 0, a = 0) to whole blocks of the sweep
    block = math.isqrt(n - 1) + 1
    pad = -n % block
    front = lambda x, ax: jnp.pad(jnp.moveaxis(x, ax, 0), [(0, pad)] + [(0, 0)] * (x.ndim - 1))
    xs = (front(h, -1), front(a, -1), front(Jw, -2))
    n_off = jnp.broadcast_to((1 - a).sum(-1) + pad, batch)  # free spins: a factor 2 each in Z
    return xs, batch, n_off, block


def _forward_backward(h, J, beta, act, user_mask, w):
    """h: [..., n], J: [..., n, n], act / user_mask: [..., n] bool or None (broadcast).
    Returns mean [*batch, n], log_z [*batch] and the per-model flag ``stable_path``.

    The scaled path runs first; models for which its underflow bound fails are
    recomputed in log space (the whole batch, only when one fails)."""
    n = h.shape[-1]
    xs, batch, n_off, block = _chain(h, J, act, user_mask, w)
    mean, log_z, lost = _scaled(xs, batch, beta, w, h.dtype, block)
    mean, log_z = mean[..., :n], log_z - n_off * math.log(2.0)
    fail = lost > math.log(LOST_MASS_TOL)

    def fix():
        m, lz = _log_space(xs, batch, beta, w, h.dtype, block)
        return jnp.where(fail[..., None], m[..., :n], mean), jnp.where(fail, lz - n_off * math.log(2.0), log_z)

    mean, log_z = lax.cond(jnp.any(fail), fix, lambda: (mean, log_z))
    if act is not None:
        mean = jnp.where(act, mean, 0.0)
    return mean, log_z, fail


def _scaled(xs, batch, beta, w, dt, block):
    """Forward–backward with messages rescaled to max 1 at every spin, in plain
    arithmetic: the transfer factor ``exp(β s (h_t + f_t(x)))`` splits into a per-query
    ``exp(β s h_t)`` and a table ``exp(β s f_t(x))`` shared by all queries with that ``J``,
    so a step costs multiply-adds and no exponential per state.

    Returns mean [*batch, N], log_z [*batch] (free spins included) and ``lost`` [*batch], the log of a
    (first-order) bound on the relative mass lost to underflow: every flushed product
    is below ``tiny``, and its weight in Z is bounded with the other direction's message.
    """
    sg = lax.stop_gradient
    n_states, half = 2**w, 2 ** (w - 1)
    S = spin_table(w, dt)  # [2^w, w], column k = window slot k (oldest first), row 0 all +1
    log_tiny = math.log(float(jnp.finfo(dt).tiny))

    def factors(t_in):
        h_t, a_t, Jw_t = t_in
        f = Jw_t @ S.T  # [..J, 2^w]: field of the window on spin t, shared by the queries
        F = sg(jnp.max(jnp.abs(f), axis=-1, keepdims=True))
        on = a_t[..., None] > 0
        Kp = jnp.where(on, jnp.exp(beta * (f - F)), 1.0)  # (s_t = +1), entries ≤ 1
        Km = jnp.where(on, jnp.exp(beta * (-f - F)), 1.0)  # (s_t = -1)
        ah = beta * a_t * h_t
        r = sg(jnp.abs(ah))
        shift = r + beta * a_t * F[..., 0]  # log of the scale taken out of this step
        return Kp, Km, jnp.exp(ah - r)[..., None], jnp.exp(-ah - r)[..., None], shift

    old = lambda x: x.reshape(x.shape[:-1] + (2, half))  # (leaving spin, rest)
    new = lambda x: x.reshape(x.shape[:-1] + (half, 2))  # (rest, entering spin)

    tiny = float(jnp.finfo(dt).tiny)
    # Failing models get a zero cotangent (their values are replaced), so their backward
    # pass must only meet finite partials: 0 * inf would be NaN. Hence every divisor is
    # kept above tiny (or sqrt(tiny) where it is squared), and a model that would need a
    # smaller one is reported as failed.
    guard = lambda x, floor: (jnp.where(x > floor, x, 1.0), jnp.where(x > floor, 0.0, jnp.inf))

    def normalize(x):
        M = sg(jnp.max(x, axis=-1))
        Mg, flag = guard(M, tiny)
        # the bound: each entry is a sum of 2 products of factors ≤ 1 (< 3 tiny lost), then / M
        return x / Mg[..., None], jnp.log(Mg), sg(math.log(3.0) + log_tiny - jnp.log(Mg) + flag)

    def fwd(carry, t_in):  # window before spin t -> after it
        alpha, c = carry
        Kp, Km, up, um, shift = factors(t_in)
        plus = old(alpha * Kp).sum(-2) * up  # [*, half]
        minus = old(alpha * Km).sum(-2) * um
        alpha, logM, lost = normalize(jnp.stack([plus, minus], axis=-1).reshape(plus.shape[:-1] + (n_states,)))
        return (alpha, c + logM + shift), (alpha, lost)

    alpha0 = jnp.ones(batch + (n_states,), dt)
    c0 = jnp.full(batch, -w * math.log(2.0), dt)  # w virtual free spins before spin 0

    def bwd(carry, t_in):  # b over the window after spin t -> before it; marginal of spin t
        b, lost_b = carry  # lost_b: bound on the flushed part of b, relative to its max
        (alpha_t, lost_t), step = t_in
        P = new(alpha_t * b).sum(-2)  # [*, 2]: unnormalized P(s_t = ±1)
        tot, flag = guard(P.sum(-1), math.sqrt(tiny))
        m_t = (P[..., 0] - P[..., 1]) / tot
        log_ab = sg(jnp.log(tot) - flag)
        lost = jnp.stack([lost_t + sg(jnp.log(b.sum(-1))) - log_ab,  # flushed in alpha_t, weighted by b
                          lost_b + sg(jnp.log(alpha_t.sum(-1))) - log_ab,  # flushed in b, weighted by alpha_t
                          w * math.log(2.0) + log_tiny - log_ab])  # flushed in alpha_t * b
        Kp, Km, up, um, _ = factors(step)
        tile = lambda x: jnp.concatenate([x, x], axis=-1)  # either value of the leaving spin
        bp, bm = jnp.unstack(new(b), axis=-1)
        b, _, lost_b = normalize(Kp * tile(bp * up) + Km * tile(bm * um))
        return (b, lost_b), (m_t, sg(jax.nn.logsumexp(lost, axis=0)))

    b0 = (jnp.ones(batch + (n_states,), dt), jnp.full(batch, -jnp.inf, dt))
    (alpha_n, c), (means, lost) = _sweep(fwd, bwd, (alpha0, c0), b0, xs, block)  # [N, *batch]
    total, flag = guard(alpha_n.sum(-1), tiny)
    log_z = c + jnp.log(total)
    lost = sg(jax.nn.logsumexp(lost, axis=0) + flag)  # the bounds of all spins add up
    return jnp.moveaxis(means, 0, -1), log_z, jnp.where(jnp.isnan(lost), jnp.inf, lost)


def _log_space(xs, batch, beta, w, dt, block):
    """Forward–backward on log-messages (``logaddexp`` per state): finite and accurate
    for any finite input, about 20x slower than ``_scaled`` on a CPU.
    Returns mean [*batch, N] and log_z [*batch] (free spins included)."""
    n_states, half = 2**w, 2 ** (w - 1)
    S = spin_table(w, dt)

    def field(t_in):  # β a_t (h_t + f_t(x)) for every window x: [*, 2^w]
        h_t, a_t, Jw_t = t_in
        f = Jw_t @ S.T  # [..J, 2^w], shared by queries with the same J
        return beta * a_t[..., None] * (h_t[..., None] + f)

    def fwd(alpha, t_in):  # alpha over the window before spin t -> after spin t
        g = field(t_in)
        A = jnp.broadcast_to(alpha, jnp.broadcast_shapes(alpha.shape, g.shape))
        old = lambda x: x.reshape(x.shape[:-1] + (2, half))  # (leaving spin, rest)
        up = jnp.logaddexp(*jnp.unstack(old(A + g), axis=-2))  # [*, half] new spin +1
        dn = jnp.logaddexp(*jnp.unstack(old(A - g), axis=-2))  # new spin -1
        new = jnp.stack([up, dn], axis=-1).reshape(up.shape[:-1] + (n_states,))  # index = rest*2 + bit
        return new, new

    alpha0 = jnp.full(batch + (n_states,), -w * math.log(2.0), dt)  # w virtual free spins

    def bwd(b, t_in):  # b over the window after spin t -> before it; marginal of spin t
        alpha_t, step = t_in
        L = (alpha_t + b).reshape(b.shape[:-1] + (half, 2))
        lp, lm = jnp.unstack(jax.nn.logsumexp(L, axis=-2), axis=-1)
        m_t = jnp.tanh((lp - lm) / 2)
        g = field(step)  # spin t enters on the window before it
        bp, bm = jnp.unstack(b.reshape(b.shape[:-1] + (half, 2)), axis=-1)  # by the rest of the window
        tile = lambda x: jnp.concatenate([x, x], axis=-1)  # either value of the leaving spin
        return jnp.logaddexp(g + tile(bp), -g + tile(bm)), m_t

    alpha_n, means = _sweep(fwd, bwd, alpha0, jnp.zeros(batch + (n_states,), dt), xs, block)  # [N, *batch]
    return jnp.moveaxis(means, 0, -1), jax.nn.logsumexp(alpha_n, axis=-1)


def _sweep(fwd, bwd, f0, b0, xs, block):
    """``lax.scan(fwd)`` over the spins, then ``lax.scan(bwd, reverse=True)`` over
    ``(fwd outputs, xs)``, without keeping every forward output: only the carry at
    the start of each block of ``block`` spins is stored, and a block's outputs are
    recomputed just before its backward pass (under ``jax.checkpoint``, so autodiff
    stores no more either). Memory ``O((N/block + block) · state)``, one extra forward.

    xs: leaves [N, ...] with N a multiple of block. Returns (final fwd carry, bwd outputs [N, ...])."""
    n = xs[0].shape[0]
    blocks = jax.tree.map(lambda x: x.reshape((n // block, block) + x.shape[1:]), xs)

    def fwd_block(c, xb):
        return lax.scan(fwd, c, xb)[0], c

    f_end, starts = lax.scan(fwd_block, f0, blocks)

    @jax.checkpoint
    def bwd_block(c, inp):
        start, xb = inp
        _, outs = lax.scan(fwd, start, xb)
        return lax.scan(bwd, c, (outs, xb), reverse=True)

    _, ys = lax.scan(bwd_block, b0, (starts, blocks), reverse=True)
    return f_end, jax.tree.map(lambda y: y.reshape((n,) + y.shape[2:]), ys)


# ---- blocked transfer matrices (the fast path) ------------------------------------------------

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
