"""Exact samples of a banded Ising model: forward filtering, backward sampling (FFBS) over
the transfer matrix of :mod:`isingattn.inference.banded.engine` (DESIGN.md §3, "Banded").

With ``J_jk = 0`` for ``|j - k| > w`` the state after spin ``t`` is the window
``x_t = (s_{t-w+1}, …, s_t)`` (``2^w`` values), and ``p(s)`` is a chain of factors
``exp(β s_t (h_t + f_t(x_{t-1})))``. The forward pass keeps every (log, normalized) forward
message ``α_t(x_t)``, the weight of all configurations of spins ``≤ t`` ending in ``x_t``.
The backward pass draws the last window from ``α_{N-1}``, then, going down from ``t``, the
spin ``s_{t-w}`` that leaves the window, from

    p(s_{t-w} | x_t) ∝ α_{t-1}(s_{t-w}, s_{t-w+1..t-1}) exp(β s_t (h_t + f_t(x_{t-1}))),

which is exact: the spins after ``t`` interact with spins ``≤ t`` only through ``x_t``. The
chain is the engine's (``sweep_inputs``): ``w`` virtual free spins before spin 0, free spins padded
after the last, masked spins free and uncoupled; their draws are dropped (inactive spins are
reported as ``+1``).

Cost: ``O(n 2^w)`` per model for the forward pass (memory ``n 2^w``: every message is kept),
and ``O(n)`` per draw for the backward pass, all draws of a model at once. Everything runs in
log space (``logaddexp``), so it is finite and accurate for every finite input.
"""

from __future__ import annotations

import math
from functools import partial
from typing import Optional

import jax
import jax.numpy as jnp
from jax import lax

from isingattn import validate as V
from isingattn.energy import spin_table
from isingattn.engine import check_draw_call
from isingattn.errors import IsingInputError
from isingattn.inference.banded.engine import band_message, band_violation, sweep_inputs
from isingattn.model import IsingModel, is_traced
from isingattn.sparse import SparseCouplings

__all__ = ["sample_banded", "MAX_SAMPLE_BANDWIDTH"]

MAX_SAMPLE_BANDWIDTH = 16  # every forward message is kept: n 2^w per model


def sample_banded(model: IsingModel, *, key, num_samples: int, bandwidth: Optional[int] = None) -> jax.Array:
    """``num_samples`` exact, independent draws from ``p(s) ∝ exp(-β E(s))`` of a model whose
    couplings are banded in the given spin order (``J_jk = 0`` for ``|j - k| > bandwidth``).

    Args:
        model: an :class:`~isingattn.IsingModel` (batch ``[...]``, ``n`` spins; dense or sparse
            ``J``; a ``mask`` is honoured, ``causal`` models are refused).
        key: a JAX PRNG key (the same key gives the same draws).
        num_samples: draws per model, ``S ≥ 1``.
        bandwidth: ``w ≤ 16``; None reads it from the model (a sparse graph's bandwidth, or the
            largest ``|j - k|`` with ``J_jk != 0`` of a concrete dense ``J``). A given ``w``
            smaller than the model's pattern raises ``IsingInputError``.

    Returns:
        spins ``[S, *batch, n]`` in ``{-1, +1}`` (the model's dtype); inactive spins are ``+1``.

    Cost ``O(n 2^w)`` per model plus ``O(S n)``; memory ``O(n 2^w)`` per model and ``O(S n)``.
    """
    S, key = check_draw_call(model, num_samples, key, "sample_banded")
    J = model.J
    sparse = isinstance(J, SparseCouplings)
    dist = band_violation(J) if sparse or not is_traced(J) else None
    if bandwidth is None:
        if dist is None:
            raise IsingInputError("sample_banded: bandwidth=None reads the band from the couplings, but this dense J is "
                                  "traced (inside jit, grad or vmap). Pass bandwidth=w.")
        bandwidth = max(int(dist), 1)
    w = V.positive_int("bandwidth", bandwidth, owner="sample_banded", hi=MAX_SAMPLE_BANDWIDTH)
    if dist is not None and not is_traced(dist) and int(dist) > w:
        raise IsingInputError(band_message(w, int(dist)))
    if dist is None:  # traced dense J: a coupling beyond the band makes the draws NaN, never wrong
        J = V.nan_where(J, band_violation(J, w) > w)
    return _ffbs(model.h, J, model.beta, model.mask, key, S=S, w=w)


@partial(jax.jit, static_argnames=("S", "w"))
def _ffbs(h, J, beta, mask, key, *, S: int, w: int):
    h, J, beta = (lax.stop_gradient(x) for x in (h, J, beta))
    n, dt = h.shape[-1], h.dtype
    xs, batch, _, _ = sweep_inputs(h, J, mask, mask, w)  # leaves [N, ...], N ≥ n (free spins padded)
    B = math.prod(batch)
    n_states, half = 2**w, 2 ** (w - 1)
    table = spin_table(w, dt)  # [2^w, w]: window slot k (oldest first) is bit w-1-k of the state

    def field(t_in):  # β a_t (h_t + f_t(x)) for every window x before spin t: [B, 2^w]
        h_t, a_t, Jw_t = t_in
        g = beta * a_t[..., None] * (h_t[..., None] + Jw_t @ table.T)
        return jnp.broadcast_to(g, batch + (n_states,)).reshape(B, n_states)

    def forward(alpha, t_in):  # log α over the window before spin t -> after it, normalized
        g = field(t_in)
        old = lambda x: x.reshape(B, 2, half)  # (leaving spin, rest)
        up = jnp.logaddexp(*jnp.unstack(old(alpha + g), axis=1))  # the new spin +1
        dn = jnp.logaddexp(*jnp.unstack(old(alpha - g), axis=1))  # the new spin -1
        new = jnp.stack([up, dn], axis=-1).reshape(B, n_states)  # index = rest * 2 + bit
        new = new - jax.nn.logsumexp(new, axis=-1, keepdims=True)
        return new, new

    alpha0 = jnp.zeros((B, n_states), dt)  # the w virtual free spins before spin 0
    _, alphas = lax.scan(forward, alpha0, xs)  # [N, B, 2^w]: α_t after spin t
    before = jnp.concatenate([alpha0[None], alphas[:-1]])  # α_{t-1}
    k_last, k_steps = jax.random.split(key)
    x = jax.random.categorical(k_last, alphas[-1], axis=-1, shape=(S, B))  # the last window [S, B]
    rows = jnp.arange(B)[None, :]

    def backward(x, inp):  # the window after spin t -> the window before it; emits s_t
        t, alpha_prev, t_in = inp
        g = field(t_in)
        bit, rest = x & 1, x >> 1
        s_t = (1 - 2 * bit).astype(dt)
        logit = lambda i: alpha_prev[rows, i] + s_t * g[rows, i]  # leaving spin +1 (i = rest) or -1
        p_plus = jax.nn.sigmoid(logit(rest) - logit(rest + half))
        u = jax.random.uniform(jax.random.fold_in(k_steps, t), (S, B), dt)
        leaving = (u >= p_plus).astype(x.dtype)  # 1: the leaving spin is -1
        return leaving * half + rest, bit

    N = xs[0].shape[0]
    _, bits = lax.scan(backward, x, (jnp.arange(N), before, xs), reverse=True)  # [N, S, B]
    spins = (1 - 2 * jnp.moveaxis(bits[:n], 0, -1)).astype(dt).reshape((S,) + batch + (n,))
    if mask is not None:
        spins = jnp.where(mask, spins, 1.0)
    return spins

