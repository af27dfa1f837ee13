"""Exact inference for banded couplings by a transfer matrix (DESIGN.md §3, "Banded").

When ``J_jk = 0`` for ``|j - k| > w``, spin ``t`` interacts only with the ``w`` spins
before it. The state of the chain after spin ``t`` is the window ``x = (s_{t-w+1}..s_t)``
(``2^w`` values); adding spin ``t`` multiplies by

    exp(β s_t (h_t + f_t(x)))   with   f_t(x) = Σ_{d=1..w} J_{t,t-d} s_{t-d}

and sums out the spin that leaves the window. Forward messages ``α_t`` and backward
messages ``b_t`` give ``log Z`` and every marginal, ``⟨s_t⟩ ∝ Σ_x (α_t b_t)(x) s_t``.

Where it applies (no per-query ``mask``, no ``corr``, J shared along the query axis: the
attention case), a blocked path runs first: ``k`` spins per step into a window of ``L = 2k ≥ w``
spins, each step a GEMM with a table shared by the queries, the steps ``lax.scan``s (compile
time independent of ``n``), causal queries swept over their own prefix only, with a hand-written
VJP (``banded_vjp``: the tangent of forward–backward, no autodiff through the scans). Models
that fail its underflow bound, and everything else, take the per-spin sweep, with two paths as in
``Exact`` (``_blocked_or_sweep``: one ``custom_vjp`` over both, the sweep's gradient only computed
when some model needs it):

* scaled (fast): messages rescaled to max 1 at every spin. The factor splits into a
  per-query ``exp(β s_t h_t)`` and a table ``exp(β s_t f_t(x))`` shared by every
  query with the same ``J``, so a step is multiply-adds, no exponential per state.
  A bound on the mass lost to underflow is checked per model.
* log space (fallback, several times slower): ``logaddexp`` per state; finite and
  accurate for every finite input. It runs only when some model fails the bound
  (e.g. |h|, |J| ~ 1e2 competing in float32), and then for the whole batch.

Sparse couplings (an edge list) enter only through the band ``J_{t, t-d}``, ``d ≤ w``,
scattered from the edges (``band``): O(n w) memory, so a lattice strip of any length works.

Cost ``O(n 2^w)`` per query (plus ``O(n 2^w w)`` per distinct ``J`` for the tables),
as ``lax.scan`` sweeps batched over all queries. Memory: the sweep keeps the forward
message only at the start of each of ~sqrt(n) blocks and recomputes a block before
its backward pass (under ``jax.checkpoint``, so gradients need no more), i.e.
``O(sqrt(n) 2^w)`` per query.
"""

from __future__ import annotations

import dataclasses
import math
from typing import ClassVar, Optional

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from isingattn.inference.banded.band import band
from isingattn.inference.banded.blocked import blocked_solve, blocked_layout
from isingattn.inference.exact.engine import LOST_MASS_TOL
from jax import lax

from isingattn import validate as V
from isingattn.energy import spin_table
from isingattn.engine import Engine
from isingattn.errors import IsingInputError
from isingattn.marginals import Label, Marginals, linear_response_corr
from isingattn.model import IsingModel, is_traced
from isingattn.sparse import SparseCouplings

MAX_BANDWIDTH = 20  # 2^w states per query and step


def band_violation(J, bandwidth: Optional[int] = None):
    """Largest ``|j - k|`` with ``J_jk != 0`` (0 if none): the bandwidth of ``J``'s sparsity
    pattern in the given spin order. J: [..., n, n] -> int (numpy, or traced for traced J);
    :class:`~isingattn.sparse.SparseCouplings` -> int from its static graph (every edge
    counts, whatever its weight: :attr:`~isingattn.sparse.CouplingGraph.bandwidth`).
    ``bandwidth`` is unused (kept for existing callers)."""
    if isinstance(J, SparseCouplings):
        return J.graph.bandwidth
    n = J.shape[-1]
    dist = np.abs(np.arange(n)[:, None] - np.arange(n)[None, :])
    if is_traced(J):
        return jnp.max(jnp.where(jnp.any(J != 0, axis=tuple(range(J.ndim - 2))), dist, 0), initial=0)
    nz = np.any(np.asarray(J) != 0, axis=tuple(range(J.ndim - 2)))
    return int(np.max(np.where(nz, dist, 0), initial=0))


def band_message(bandwidth: int, dist: Optional[int] = None) -> str:
    at = f"at distance {dist}" if dist is not None else f"beyond distance {bandwidth}"
    wider = f"Banded(bandwidth={dist})" if dist is not None else "a larger bandwidth"
    return (f"Banded(bandwidth={bandwidth}) needs J_jk = 0 for |j - k| > {bandwidth}, but J has a nonzero coupling {at}. "
            f"Use {wider} or Banded(bandwidth=None) to read it from the model (cost 2^bandwidth per spin), Exact for "
            "dense J, or zero the couplings beyond the band (a sparse graph: drop those edges).")


def _pattern_message(dist: int) -> str:
    return (f"Banded(bandwidth=None) reads the bandwidth from the model: its couplings reach distance {dist} in the "
            f"given spin order, and Banded handles at most {MAX_BANDWIDTH} (2^bandwidth states per spin). Number the "
            "spins so that coupled ones are close (a lattice: row-major with the short side last, e.g. "
            "graphs.lattice((L, W)) with W the smaller side), or use Exact (small n) or an approximate engine.")


class Banded(Engine):
    """Exact marginals and ``log Z`` for couplings of bandwidth ``w`` (``J_jk = 0`` for
    ``|j - k| > w``), by forward–backward over a window of ``w`` spins.

    Cost ``O(n 2^w)`` exponentials per query, linear in ``n``: ``n`` in the hundreds
    or thousands is fine for ``w ≲ 12``; the time doubles with each unit of ``w``.
    Differentiable in ``h``, ``J`` and ``beta``: a hand-written VJP on the blocked path (reverse mode only:
    ``jax.jvp`` through it is not supported), autodiff through the per-spin sweep. ``J`` beyond
    the band is structurally zero here, so its gradient there (and on the diagonal)
    is 0: the gradient restricted to the band.
    Honours ``mask`` and ``causal`` like ``Exact``. With ``corr=True`` the pair
    correlations come from one forward-mode derivative per spin, ``O(n² 2^w)`` per
    query: only for modest ``n``.

    Sparse couplings (:class:`~isingattn.sparse.SparseCouplings`) are used as they are: the
    band ``[..., n, w]`` is scattered from the edge list (O(n w) memory, never the dense
    ``[n, n]``), so an open ``L × W`` lattice strip in row-major order
    (``graphs.lattice((L, W))``, bandwidth ``W``) is solved exactly for any ``L``. Causal
    sparse models are densified by the engine template first (up to its 1 GiB limit).

    Args:
        bandwidth: ``w``, the largest distance ``|j - k|`` with a coupling (≤ 20), or None:
            read it from the model, i.e. ``graph.bandwidth`` of a sparse model (static, so
            also under ``jax.jit``) or the largest ``|j - k|`` with ``J_jk != 0`` of a
            concrete dense ``J`` (1 when there is none); a traced dense ``J`` has no readable
            pattern, so None raises ``IsingInputError`` there (pass ``bandwidth``).
            A given ``w`` smaller than the model's pattern raises ``IsingInputError`` naming
            both, eagerly for concrete dense ``J`` and for every sparse model (its edges are
            the pattern, whatever their weights); traced dense ``J`` beyond the band makes
            the results NaN (:func:`isingattn.validate.nan_where`).
        corr: also return ``⟨s_j s_k⟩``.
    """

    exact: ClassVar[bool] = True
    native_causal: ClassVar[bool] = True  # causal queries are swept over their own prefix (blocked_solve)
    sparse_native: ClassVar[bool] = True  # the band is scattered from the edges (band)
    bandwidth: Optional[int] = eqx.field(static=True, default=8, converter=V.plain)
    corr: bool = eqx.field(static=True, default=False, converter=V.plain)
    path: str = eqx.field(static=True, default="auto")

    def __check_init__(self):
        if not isinstance(self.path, str) or self.path not in ("auto", "sweep"):
            raise IsingInputError(f'path must be "auto" (blocked GEMMs where they apply) or "sweep"; got {self.path!r}.')
        # 2^bandwidth states per spin: hence the upper bound (None: read from the model)
        if self.bandwidth is not None:
            V.positive_int("bandwidth", self.bandwidth, owner="Banded", hi=MAX_BANDWIDTH)
        V.boolean("corr", self.corr, owner="Banded")

    def _prepare(self, model: IsingModel) -> Engine:
        """The engine with a concrete bandwidth: ``self`` when one is given (checked against
        the model's pattern where it is known on the host), else the model's own."""
        sparse = isinstance(model.J, SparseCouplings)
        # the pattern's bandwidth where the host can read it: a sparse graph is static
        dist = band_violation(model.J) if sparse or not is_traced(model.J) else None
        if self.bandwidth is None:
            if dist is None:
                raise IsingInputError(
                    "Banded(bandwidth=None) reads the bandwidth from the model's couplings, but this dense J is traced "
                    f"(inside jax.jit, grad or vmap), so its zeros are unknown. Pass bandwidth=w (the largest |j - k| "
                    f"with J_jk != 0, at most {MAX_BANDWIDTH}), a concrete J, or sparse couplings (their graph is static).")
            if dist > MAX_BANDWIDTH:
                raise IsingInputError(_pattern_message(dist))
            return dataclasses.replace(self, bandwidth=max(dist, 1))
        if dist is not None and dist > self.bandwidth:  # eager, with a message that names both
            raise IsingInputError(band_message(self.bandwidth, dist))
        return self

    def _marginals(self, model: IsingModel, key: Optional[jax.Array]) -> Marginals:
        if self.bandwidth is None:  # called without marginals' _prepare
            return self._prepare(model)._marginals(model, key)
        return _solve(model, int(self.bandwidth), self.corr, self.path == "auto")


def _solve(model: IsingModel, w: int, want_corr: bool, blocked: bool = True) -> Marginals:
    h, J, beta = model.h, model.J, model.beta
    if isinstance(J, SparseCouplings):  # static: an edge beyond the band would be dropped by band
        if J.graph.bandwidth > w:
            raise IsingInputError(band_message(w, J.graph.bandwidth))
    else:
        J = V.nan_where(J, band_violation(J, w) > w)  # traced J: a coupling beyond the band makes the result NaN
    act = model.active()  # [..., n] bool or None
    user_mask = model.mask
    mean_fn = lambda hh: _forward_backward(hh, J, beta, act, user_mask, w)
    layout = blocked_layout(h.shape, J.shape, w, model.causal, user_mask, want_corr) if blocked else None
    if layout is not None:
        mean, log_z, stable = _blocked_or_sweep(h, J, beta, act, w, model.causal, layout)
    else:
        mean, log_z, stable = mean_fn(h)
    corr = None
    if want_corr:
        corr = linear_response_corr(lambda x: mean_fn(x)[0], jnp.broadcast_to(h, mean.shape), mean, beta)
        if act is not None:
            a = act.astype(corr.dtype)
            corr = corr * a[..., :, None] * a[..., None, :]
    return Marginals(mean=mean, corr=corr, log_z=log_z, info={"stable_path": stable, "log_z_kind": Label("exact")})


def _blocked_or_sweep(h, J, beta, act, w: int, causal: bool, layout):
    """The blocked path, and the per-spin sweep (with its own log-space fallback) for the whole batch when
    some model fails the blocked path's underflow bound: ``(mean, log_z, stable_path)``.

    One ``custom_vjp`` over both: the blocked path brings its own VJP (``banded_vjp``) and the sweep's
    VJP (autodiff) runs, inside ``lax.cond``, only when some model failed. (A differentiated ``lax.cond``
    with the sweep in a branch, as before, made XLA allocate and zero the sweep's residuals on every
    step even when no model failed: about 40% of the training step at T=256.)"""
    blocked = lambda h, J, beta: blocked_solve(h, J, beta, w, causal, layout)
    sweep = lambda h, J, beta, act: _forward_backward(h, J, beta, act, None, w)

    def forward(h, J, beta, act):
        mean, log_z, lost = blocked(h, J, beta)
        fail = lost > math.log(LOST_MASS_TOL)

        def fix():
            m, lz, st = sweep(h, J, beta, act)
            return jnp.where(fail[..., None], m, mean), jnp.where(fail, lz, log_z), st & fail

        return lax.cond(jnp.any(fail), fix, lambda: (mean, log_z, jnp.zeros_like(fail))), fail

    @jax.custom_vjp
    def solve(h, J, beta, act):
        return forward(h, J, beta, act)[0]

    def solve_fwd(h, J, beta, act):
        out, fail = forward(h, J, beta, act)
        return out, (h, J, beta, act, fail)

    def solve_bwd(res, ct):
        h, J, beta, act, fail = res
        gm, glz, _ = ct
        split = lambda on: (jnp.where(fail[..., None] == on, gm, 0.0), jnp.where(fail == on, glz, 0.0))
        # the forward values of these vjps are unused: XLA removes them
        g = jax.vjp(lambda *a: blocked(*a)[:2], h, J, beta)[1](split(False))

        def with_sweep():
            gs = jax.vjp(lambda *a: sweep(*a, act)[:2], h, J, beta)[1](split(True))
            return jax.tree.map(jnp.add, g, gs)

        return lax.cond(jnp.any(fail), with_sweep, lambda: g) + (None,)

    solve.defvjp(solve_fwd, solve_bwd)
    return solve(h, J, beta, act)


def sweep_inputs(h, J, act, user_mask, w):
    """Per-spin inputs of the sweeps, spins first: ``xs = (h_t [N, ..h], a_t [N, ..a], Jw_t [N, ..J, w])``
    (``a_t`` is 1 for active spins, 0 for removed ones), the full batch shape, the number
    of free spins per model and the block length of the sweep; ``N ≥ n`` is padded
    with free spins to whole blocks."""
    n, dt = h.shape[-1], h.dtype
    batch = jnp.broadcast_shapes(h.shape[:-1], J.shape[:-2], *(() if m is None else m.shape[:-1] for m in (act, user_mask)))
    Jw = band(J, w)  # [..J, n, w]
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
    xs, batch, n_off, block = sweep_inputs(h, J, act, user_mask, w)
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
    for any finite input, far slower than ``_scaled`` on a CPU.
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


