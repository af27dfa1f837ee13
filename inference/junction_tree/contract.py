"""The numeric contraction of a junction-tree :class:`~isingattn.inference.junction_tree.plan.Plan`:
log Z by an upward pass of batched log-sum-exp steps, and every marginal and edge correlation by
the downward pass (DESIGN.md §3, "Junction tree / variable elimination").

Parameters enter as ``θ_h = β h [n, B]`` and ``θ_w = β w [E, B]`` (``B`` models sharing the graph,
last so that a gathered row is one contiguous vector of the batch). A step of a scan, on a table
over its clique ``x`` (``2^K`` entries, its eliminated slots the high bits):

    T(x) = Σ_children m_c(x|sep_c) + Σ_i s_i(x) (θ_h[v_i] + Σ_j θ_w[e_ij] s_j(x)),
    m(y) = log Σ_{eliminated} exp T,

with each coupling counted once (at the slot of the endpoint summed out first). The downward pass
is the reverse-mode derivative of log Z written out: the cotangent of a message is the marginal
of its separator, so ``P(x) = exp(T(x) - m(y)) ct(y)`` is the clique's marginal; it gives the
means of the spins summed out there and the correlations of the couplings assigned there, and is
scattered onto the children's separators. Everything is in log space (``P ≤ 1``): finite and
accurate for every finite input.

``moments`` carries a custom VJP: the gradient of log Z is the moments it already computed, so
training on log Z costs no further pass; gradients of the means themselves (second order) are
autodiff through the two passes.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax import lax
from jax.custom_derivatives import SymbolicZero

from isingattn.energy import spin_table


def _local(th, tw, hidx, widx, SR, SY):
    """The step's log potential ``[B, 2^R, 2^(K-R)]``: ``Σ_i s_i (θ_h[v_i] + Σ_j θ_w[e_ij] s_j)`` over the
    eliminated slots ``i`` (rows: their configuration z) and the separator (columns: y), as
    ``a(z) + Σ_i s_i(z) U_i(y)``, about ``R`` multiply-adds per entry."""
    R = SR.shape[-1]
    hR = jnp.take(th, hidx, axis=1)  # [B, R]
    W = jnp.take(tw, widx.reshape(-1), axis=1).reshape(th.shape[0], R, -1)  # [B, R, K]
    U = jnp.einsum("bij,yj->biy", W[:, :, R:], SY)  # [B, R, 2^(K-R)]: each slot's field from the separator
    a = SR @ hR.T + jnp.einsum("zi,bij,zj->zb", SR, W[:, :, :R], SR)  # [2^R, B]: fields, pairs within
    return a.T[:, :, None] + jnp.einsum("zi,biy->bzy", SR, U)


def upward(plan, th, tw):
    """log Z [B] and each segment's log conditionals ``T - m`` [m, B, 2^R, 2^(K-R)].

    th: [B, n + 1] (column n: 0), tw: [B, E + 1] (column E: 0)."""
    B, dt = th.shape[0], th.dtype
    buf = jnp.zeros((B, plan.M + 1), dt)  # column M stays 0: the message of a padded child
    saved = []
    for seg in plan.segments:
        K, R, C = seg.K, seg.R, seg.C
        SR, SY = spin_table(R, dt), spin_table(K - R, dt)

        def step(buf, xs, K=K, R=R, C=C, SR=SR, SY=SY):
            off, gidx, hidx, widx, emask = xs
            L = jnp.take(buf, gidx.reshape(-1), axis=1).reshape(B, C, 2**R, 2 ** (K - R)).sum(1)
            T = L + _local(th, tw, hidx, widx, SR, SY) + emask[None, :, None].astype(dt)
            m = jnp.logaddexp(T[:, 0], T[:, 1]) if R == 1 else jax.nn.logsumexp(T, axis=1)
            return lax.dynamic_update_slice(buf, m, (jnp.zeros((), off.dtype), off)), T - m[:, None]

        buf, cond = lax.scan(step, buf, (seg.off, seg.gidx, seg.hidx, seg.widx, seg.emask))
        saved.append(cond)
    return jnp.sum(buf[:, plan.roots], axis=1), saved


def _downward(plan, saved, B, dt):
    """Means [B, n] and edge correlations [B, E] from the saved log conditionals."""
    ct = jnp.zeros((B, plan.M + 1), dt).at[:, plan.roots].set(1.0)  # d log Z / d(root message)
    ms, gs = [], []
    for seg, cond in zip(reversed(plan.segments), reversed(saved)):
        K, R, C = seg.K, seg.R, seg.C
        SR, SY = spin_table(R, dt), spin_table(K - R, dt)

        def step(ct, xs, K=K, R=R, C=C, SR=SR, SY=SY):
            off, gidx, cond = xs
            at = (jnp.zeros((), off.dtype), off)
            c = lax.dynamic_slice(ct, at, (B, 2 ** (K - R)))
            ct = lax.dynamic_update_slice(ct, jnp.zeros_like(c), at)  # the slot is reused by an earlier step
            P = jnp.exp(cond) * c[:, None, :]  # [B, 2^R, 2^(K-R)]: the clique's marginal
            Pz = P.sum(-1)  # [B, 2^R]
            m = Pz @ SR  # [B, R]: ⟨s_i⟩ of the eliminated slots
            within = jnp.einsum("bz,zi,zj->bij", Pz, SR, SR)  # [B, R, R]
            across = jnp.einsum("zi,bzy,yj->bij", SR, P, SY)  # [B, R, K-R]
            flat = jnp.broadcast_to(P.reshape(B, 1, 2**K), (B, C, 2**K)).reshape(B, -1)
            ct = ct.at[:, gidx.reshape(-1)].add(flat)
            return ct, (m, jnp.concatenate([within, across], axis=-1))

        ct, (m, g) = lax.scan(step, ct, (seg.off, seg.gidx, cond), reverse=True)
        ms.append((seg.hidx.reshape(-1), jnp.moveaxis(m, 1, 0).reshape(B, -1)))
        gs.append((seg.widx.reshape(-1), jnp.moveaxis(g, 1, 0).reshape(B, -1)))
    mean = jnp.zeros((B, plan.n + 1), dt)
    corr = jnp.zeros((B, plan.E + 1), dt)
    for i, v in ms:
        mean = mean.at[:, i].add(v)  # every spin once; padded slots go to column n
    for i, v in gs:
        corr = corr.at[:, i].add(v)  # every edge once; other pairs go to column E
    return mean[:, : plan.n], corr[:, : plan.E]


def pad_rows(x):
    """[B, k] -> [B, k + 1] with a zero last column (the index of a padded slot)."""
    return jnp.concatenate([x, jnp.zeros((x.shape[0], 1), x.dtype)], axis=1)


def log_z_only(plan, th, tw):
    """log Z [B] of θ_h [B, n], θ_w [B, E] by the upward pass alone (plain autodiff)."""
    return upward(plan, pad_rows(th), pad_rows(tw))[0]


def contract(plan, th, tw):
    """``(log Z [B], mean [B, n], edge correlations [B, E])`` of θ_h [B, n], θ_w [B, E], by
    both passes, without a custom derivative (for forward-mode use such as linear response)."""
    B, dt = th.shape[0], th.dtype
    log_z, saved = upward(plan, pad_rows(th), pad_rows(tw))
    mean, corr = _downward(plan, saved, B, dt)
    return log_z, mean, corr


def moments(plan, th, tw):
    """:func:`contract` with the VJP of log Z given by the moments it computed."""

    @jax.custom_vjp
    def run(th, tw):
        return contract(plan, th, tw)

    def fwd(th, tw):
        out = contract(plan, th.value, tw.value)
        return out, (th.value, tw.value, out[1], out[2])

    def bwd(res, cts):
        th, tw, mean, corr = res
        c_lz, c_mean, c_corr = cts
        zero = lambda t: isinstance(t, SymbolicZero)
        g_th = g_tw = 0.0
        if not zero(c_lz):
            g_th, g_tw = c_lz[:, None] * mean, c_lz[:, None] * corr
        if not (zero(c_mean) and zero(c_corr)):  # second order: autodiff through both passes
            ct = (jnp.zeros_like(mean) if zero(c_mean) else c_mean, jnp.zeros_like(corr) if zero(c_corr) else c_corr)
            d_th, d_tw = jax.vjp(lambda a, b: contract(plan, a, b)[1:], th, tw)[1](ct)
            g_th, g_tw = g_th + d_th, g_tw + d_tw
        return (jnp.broadcast_to(g_th, th.shape).astype(th.dtype), jnp.broadcast_to(g_tw, tw.shape).astype(tw.dtype))

    run.defvjp(fwd, bwd, symbolic_zeros=True)
    return run(th, tw)
