"""The one sweep skeleton that Gibbs and SQA share: a systematic scan ``0..n-1`` of a
dense model in spin-major layout, ``SWEEP_BLOCK`` spins at a time.

Dense ``J`` allows no parallel update inside a chain, so a sweep is sequential over
spins; its parallelism is over chains, reads, replicas and models, which trail the spin
axis (``[n, ...]``) so that a block's rows are contiguous over all of them. Per block,
one GEMM gives the block's local fields from the CURRENT spins (recomputed exactly, so
no rounding drift builds up over sweeps), then the algorithm's block update moves the
block's spins in order, applying the couplings inside the block as each spin changes.
That is ``n / SWEEP_BLOCK`` GEMMs and small fusions per sweep instead of ``n`` rank-1
updates of a field matrix.

The algorithm enters only through ``update(G, s, noise, J_in) -> (new, counts)``:

* G ``[b, ...]``: the block's local fields with the block's OLD spins;
* s ``[b, ...]``: the block's old spins (0 = inactive: the update must keep it 0);
* noise: a tuple of ``[b, ...]`` slices of the sweep's per-spin noise arrays;
* J_in ``[b, b, ...]``: the couplings inside the block;
* counts: any pytree of arrays, summed over blocks (e.g. accepted moves).

:func:`isingattn.inference.mcmc.gibbs_kernel.gibbs_sweep` plugs in the heat-bath update and
:func:`isingattn.inference.mcmc.sqa_kernel.sqa_sweep` the Metropolis moves on the Trotter ring.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax import lax

from isingattn.energy import local_field_rows

# Spins per block. Measured on a 2-core CPU, dense n = 64, 256 chains, float32 (Gibbs,
# sweep alone): b = 2: 46, 4: 57, 8: 41 M updates/s; at b = 16 XLA splits the unrolled
# block update and recomputes it. SQA measured the same optimum.
SWEEP_BLOCK = 4


def spin_major(h, J, r: int):
    """``h``, ``J`` laid out for spins ``[n, *batch]`` with ``r`` batch axes.

    Args:
        h: ``[..., n]``; J: ``[..., n, n]``; leading axes broadcast against the last
            axes of the spins' batch.
    Returns:
        ``h_t [n, *batch']`` and ``J_t``: ``[n, n]`` when one ``J`` serves every batch
        element (block fields are then plain GEMMs), else ``[n, n, *batch']``; size 1
        where broadcast.
    """
    n = J.shape[-1]
    h = h.reshape((1,) * max(r - (h.ndim - 1), 0) + h.shape)
    h_t = jnp.moveaxis(h, -1, 0)
    if all(d == 1 for d in J.shape[:-2]):
        return h_t, J.reshape(n, n)
    J = J.reshape((1,) * max(r - (J.ndim - 2), 0) + J.shape)
    return h_t, jnp.moveaxis(J, (-2, -1), (0, 1))


def sparse_spin_major(h, J, r: int):
    """:func:`spin_major` for a :class:`~isingattn.sparse.SparseCouplings` ``J``: ``h_t [n,
    *batch']`` and its neighbour weights ``W_t [n, d, *batch']`` (``J.neighbour_weights``)."""
    h = h.reshape((1,) * max(r - (h.ndim - 1), 0) + h.shape)
    W = J.neighbour_weights()
    W = W.reshape((1,) * max(r - (W.ndim - 2), 0) + W.shape)
    return jnp.moveaxis(h, -1, 0), jnp.moveaxis(W, (-2, -1), (0, 1))


def sparse_field_rows(h_t, W_t, nbr, i, s_t):
    """Local fields of the spins ``i [m]`` from spin-major ``s_t [n, ...]``: a gather over
    the neighbour table ``nbr [n, d]``, ``h_i + Σ_k w_ik s_{nbr(i, k)}`` -> ``[m, ...]``."""
    return h_t[i] + jnp.einsum("md...,md...->m...", W_t[i], s_t[nbr[i]])


def blocked_sweep(update, s_t, h_t, J_t, noise: tuple, counts0=()):
    """One systematic sweep in spin-major layout (see the module docstring).

    Args:
        update: the block update ``(G, s, noise, J_in) -> (new, counts)``.
        s_t: spins ``[n, ...]``; h_t ``[n, ...]`` and J_t (``[n, n]`` or
            ``[n, n, ...]``) broadcast against them (:func:`spin_major`).
        noise: tuple of arrays ``[n, ...]``: the sweep's noise, one row per spin.
        counts0: zeros of the pytree ``update`` returns as counts.
    Returns:
        ``(s_t, counts)``: the new spins ``[n, ...]`` and the counts summed over blocks.
    """
    n = s_t.shape[0]
    b = min(SWEEP_BLOCK, n)
    K, rem = divmod(n, b)
    split = lambda x: x[: K * b].reshape((K, b) + x.shape[1:])  # leading axis: block
    J_in = jnp.stack([J_t[k * b : (k + 1) * b, k * b : (k + 1) * b] for k in range(K)])  # [K, b, b, ...]
    add = lambda a, c: jax.tree_util.tree_map(jnp.add, a, c)

    def block(carry, x):
        s_t, counts = carry
        k, h_k, J_k, Jin_k, noise_k = x
        G = local_field_rows(h_k, J_k, s_t)  # [b, ...]
        old = lax.dynamic_slice_in_dim(s_t, k * b, b, axis=0)
        new, c = update(G, old, noise_k, Jin_k)
        return (lax.dynamic_update_slice_in_dim(s_t, new, k * b, axis=0), add(counts, c)), None

    xs = (jnp.arange(K), split(h_t), split(J_t), J_in, tuple(split(x) for x in noise))
    (s_t, counts), _ = lax.scan(block, (s_t, counts0), xs)
    if rem:  # the last n % b spins: one more, smaller block
        G = local_field_rows(h_t[K * b :], J_t[K * b :], s_t)
        tail, c = update(G, s_t[K * b :], tuple(x[K * b :] for x in noise), J_t[K * b :, K * b :])
        s_t = lax.dynamic_update_slice_in_dim(s_t, tail, K * b, axis=0)
        counts = add(counts, c)
    return s_t, counts
