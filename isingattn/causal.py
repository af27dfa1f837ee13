"""Causal models solved prefix by prefix.

In a causal model (``IsingModel(causal=True)``) query ``i`` sees spins ``0..i`` only; the
other spins are inactive and decouple. Any engine whose cost grows with ``n`` therefore
wastes work on them: ``2^n`` per query for enumeration and statevectors, ``n²`` per sweep
for samplers. :func:`by_prefix` groups the queries in ~log2(n) buckets of prefix
lengths, solves each bucket as a non-causal model on its longest prefix, and stitches
the results back to the full layout. At ``n = 12`` that is 5.3x less work for ``2^n``
engines and 2.2x less for ``n²`` ones, with only ~log2(n) shapes to compile.

:class:`isingattn.engine.CausalBuckets` is that as a composite engine (in the manner of
dimod's composites): ``Engine.marginals`` wraps every engine in it for a causal model,
unless the engine declares a native causal path (``native_causal``, e.g. ``Banded``).
"""

from __future__ import annotations

from typing import Callable, Optional

import jax
import jax.numpy as jnp
from jax import lax

from isingattn.marginals import Marginals
from isingattn.model import IsingModel, causal_mask


def causal_buckets(n: int) -> list[tuple[int, int]]:
    """Prefix lengths grouped as [n], [n-1], [n-2, n-3], [n-4 .. n-7], ... (lo, hi).

    A bucket is solved once at its longest length, shorter prefixes pinned by the
    mask: about 2.3·2^n work per sequence (against 2·2^n for one solve per length)
    with only ~log2(n) solves to compile."""
    out, hi, size = [], n, 1
    while hi >= 1:
        lo = max(1, hi - size + 1)
        out.append((lo, hi))
        hi, size = lo - 1, size if len(out) == 1 else 2 * size
    return out[::-1]


def _queries(x, lo: int, hi: int, tail: int):
    """Queries ``lo-1..hi-1`` of ``x``'s query axis (the last batch axis, size n or 1)."""
    ax = x.ndim - tail - 1
    return x if ax < 0 or x.shape[ax] == 1 else lax.slice_in_dim(x, lo - 1, hi, axis=ax)


def prefix_models(model: IsingModel) -> list[tuple[int, int, IsingModel]]:
    """``(lo, hi, sub)`` per bucket: ``sub`` is the non-causal model of queries ``lo-1..hi-1``
    on spins ``0..hi-1`` (batch ``[..., hi-lo+1]``), the causal prefix moved into its mask."""
    if not model.causal:
        raise ValueError("prefix_models needs a causal model (IsingModel(..., causal=True)).")
    n = model.n
    tri = causal_mask(n)
    out = []
    for lo, hi in causal_buckets(n):
        mask = tri[lo - 1 : hi, :hi]
        if model.mask is not None:
            mask = mask & _queries(model.mask, lo, hi, 1)[..., :hi]
        sub = IsingModel(_queries(model.h, lo, hi, 1)[..., :hi], _queries(model.J, lo, hi, 2)[..., :hi, :hi],
                         model.beta, mask)
        out.append((lo, hi, sub))
    return out


def by_prefix(solve: Callable[[IsingModel, Optional[jax.Array]], Marginals], model: IsingModel,
              key: Optional[jax.Array] = None, spin_info: tuple = ()) -> Marginals:
    """Solve a causal ``model`` bucket by bucket with ``solve(sub_model, key) -> Marginals``.

    Bucket ``b`` gets ``fold_in(key, b)`` (or None). The buckets' ``mean [..., q, hi]``,
    ``corr``, ``log_z``, ``samples [..., q, S, hi]`` and batch-shaped ``info`` entries are
    joined along the query axis (string entries, :class:`isingattn.marginals.Label`, are
    kept as the first bucket's), spin axes zero-padded to ``n`` (inactive spins are 0
    everywhere). ``info`` keys in ``spin_info`` have a trailing spin axis; it is padded with
    NaN (no statistic for an absent spin). Entries missing from some bucket are dropped.
    Differentiable: gradients flow through the slices into the full ``h`` and ``J``.
    """
    n, batch = model.n, model.batch_shape
    subs = prefix_models(model)
    parts = [(hi, solve(sub, None if key is None else jax.random.fold_in(key, b)))
             for b, (_, hi, sub) in enumerate(subs)]
    sub_rank = len(subs[0][2].batch_shape)

    def cat(xs, tail_rank: int, spin_axes: int = 0, fill=0.0):
        """xs: ``(hi, [*sub_batch, *tail])`` per bucket, the last ``spin_axes`` of size hi."""
        out = []
        for hi, x in xs:
            x = jnp.asarray(x)
            x = jnp.pad(x, [(0, 0)] * (x.ndim - spin_axes) + [(0, n - hi)] * spin_axes, constant_values=fill)
            q = x.shape[x.ndim - tail_rank - 1]  # the query axis
            out.append(jnp.broadcast_to(x, batch[:-1] + (q,) + x.shape[x.ndim - tail_rank :]))
        return jnp.concatenate(out, axis=len(batch) - 1)

    pick = lambda name: [(hi, getattr(m, name)) for hi, m in parts]
    first = parts[0][1]
    info = {}
    for name, v in first.info.items():
        if any(name not in m.info for _, m in parts):  # e.g. a diagnostic computed for small n only
            continue
        if isinstance(v, str):  # a label (info["log_z_kind"]): the same in every bucket, not an array
            info[name] = v
            continue
        spin = name in spin_info
        fill = jnp.nan if spin and jnp.issubdtype(jnp.asarray(v).dtype, jnp.floating) else 0
        info[name] = cat([(hi, m.info[name]) for hi, m in parts], jnp.ndim(v) - sub_rank, int(spin), fill)
    return Marginals(mean=cat(pick("mean"), 1, 1),
                     corr=None if first.corr is None else cat(pick("corr"), 2, 2),
                     log_z=None if first.log_z is None else cat(pick("log_z"), 0),
                     samples=None if first.samples is None else cat(pick("samples"), 2, 1),
                     info=info)
