"""Exact samples on the junction tree: forward filtering (the upward pass), backward sampling
down the tree (DESIGN.md §3, "Junction tree / variable elimination").

The upward pass leaves, at every step, the log conditional ``T(z, y) - m(y) = log p(z | y)`` of
the spins ``z`` it summed out given its separator ``y`` (the spins outside its subtree interact
with those inside only through ``y``). Going through the steps in reverse, a root's conditional
has an empty separator, and every other step's separator consists of spins summed out later,
hence already drawn: each step draws ``z ~ p(z | y)`` for all draws and models at once. The
draws are exact and independent.

Cost: the upward pass (``O(Σ 2^{|C|})`` per model, every conditional kept) plus ``O(S n)`` per
model for the draws.
"""

from __future__ import annotations

import math
from functools import partial
from typing import Sequence, Union

import jax
import jax.numpy as jnp
from jax import lax

from isingattn.engine import check_draw_call
from isingattn.inference.junction_tree.contract import pad_rows, upward
from isingattn.inference.junction_tree.engine import MAX_BYTES, JunctionTree, edge_form, plan_for
from isingattn.model import IsingModel

__all__ = ["sample_junction_tree"]


def sample_junction_tree(model: IsingModel, *, key, num_samples: int, order: Union[str, Sequence[int]] = "auto",
                         max_bytes: int = MAX_BYTES) -> jax.Array:
    """``num_samples`` exact, independent draws from ``p(s) ∝ exp(-β E(s))`` of each model.

    Args:
        model: an :class:`~isingattn.IsingModel` (batch ``[...]``, dense or sparse ``J``; a
            ``mask`` is honoured, ``causal`` models are refused).
        key: a JAX PRNG key (the same key gives the same draws).
        num_samples: draws per model, ``S ≥ 1``.
        order, max_bytes: as :class:`~isingattn.inference.junction_tree.JunctionTree`'s.

    Returns:
        spins ``[S, *batch, n]`` in ``{-1, +1}`` (the model's dtype); inactive spins are ``+1``.
    """
    S, key = check_draw_call(model, num_samples, key, "sample_junction_tree")
    engine = JunctionTree(order=order, max_bytes=max_bytes)._prepare(model)
    plan = plan_for(engine.graph, engine._order_key(model.n))
    h, w, batch, _, act = edge_form(model, engine.graph)
    spins = _draw(plan, h, w, model.beta, key, S=S, batch=tuple(batch))
    if act is not None:
        spins = jnp.where(act, spins, 1.0)
    return spins


@partial(jax.jit, static_argnums=0, static_argnames=("S", "batch"))
def _draw(plan, h, w, beta, key, *, S: int, batch: tuple):
    h, w, beta = (lax.stop_gradient(x) for x in (h, w, beta))
    B, dt = math.prod(batch), h.dtype
    flat = lambda x: jnp.broadcast_to(x, batch + x.shape[-1:]).reshape((B,) + x.shape[-1:])
    _, saved = upward(plan, pad_rows(beta * flat(h)), pad_rows(beta * flat(w)))
    bits = jnp.zeros((S, B, plan.n + 1), jnp.int32)  # column n: padded slots (always 0, i.e. +1)
    rows = jnp.arange(B)[None, :]
    first = 0
    starts = []
    for seg in plan.segments:
        starts.append(first)
        first += len(seg.steps)
    for seg, cond, start in zip(reversed(plan.segments), reversed(saved), reversed(starts)):
        K, R = seg.K, seg.R
        shift = jnp.asarray([K - R - 1 - j for j in range(K - R)], jnp.int32)
        down = jnp.asarray([R - 1 - i for i in range(R)], jnp.int32)

        def step(bits, xs, shift=shift, down=down):
            t, hidx, sidx, cond = xs  # cond [B, 2^R, 2^(K-R)]: log p(z | y)
            y = jnp.sum(bits[:, :, sidx] << shift, axis=-1)  # [S, B] the separator's configuration
            logits = cond[rows, :, y]  # [S, B, 2^R] (advanced indices around a slice come first)
            z = jax.random.categorical(jax.random.fold_in(key, t), logits, axis=-1)
            new = (z[..., None] >> down) & 1  # [S, B, R]
            return bits.at[:, :, hidx].set(new.astype(jnp.int32)), None

        ts = jnp.arange(start, start + len(seg.steps))
        bits, _ = lax.scan(step, bits, (ts, seg.hidx, seg.sidx, cond), reverse=True)
    spins = (1 - 2 * bits[:, :, : plan.n]).astype(dt)
    return spins.reshape((S,) + batch + (plan.n,))
