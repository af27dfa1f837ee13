"""Houdayer's cluster move (Houdayer, EPJ B 22, 479, 2001) between two replicas of a
zero-field model at the same β, as a pure kernel.

Two replicas ``a`` and ``b`` define the overlap ``q_i = a_i b_i``. The move picks a site
uniformly among those with ``q_i = -1``, takes its cluster: the connected component of the
``q = -1`` sites along nonzero couplings, and flips both replicas on it (there ``b = -a``,
so this exchanges their spins). Every coupling that leaves the cluster ends on a ``q = +1``
site, where its two terms ``-J a_i a_j`` and ``-J b_i b_j`` cancel before the move and
after it: the pair's total energy is unchanged, so the move is always accepted (with
``h = 0``; a field would make it a proposal). The overlap itself is unchanged, so the
reverse move picks the same cluster with the same probability. Before that, a pair whose
overlap has more ``-1`` than ``+1`` sites flips ``b`` as a whole (``E(-s) = E(s)`` without
fields), which keeps the ``q = -1`` clusters below half the sites, as Houdayer does.

In two dimensions the move carries the replicas between the valleys that single-spin
sweeps cannot leave at low temperature; combined with sweeps and tempering it mixes
±J glasses at β where Gibbs freezes. The clusters are labelled by the FastSV
components of :func:`~isingattn.inference.mcmc.swendsen_wang_kernel.component_labels`
(rounds about the log of the cluster's diameter) on the couplings' neighbour table, so
a dense ``J`` is given by its graph (:func:`coupling_graph`).

Layout: node-major, ``a, b [n, *rest]`` (``rest``: any lanes, e.g. rungs × pairs of
chains × models), as the samplers' loops carry their spins.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from isingattn import prng
from isingattn.inference.mcmc.swendsen_wang_kernel import component_labels
from isingattn.sparse import CouplingGraph, SparseCouplings, from_dense


class HoudayerInfo(NamedTuple):
    """Diagnostics of one move.

    * size: ``[*rest]`` int32, the sites flipped in each pair (0 where the replicas agree).
    * delta_a: ``[*rest]``, the change of replica ``a``'s energy (replica ``b``'s is its
      negative).
    """

    size: jax.Array
    delta_a: jax.Array


def coupling_graph(J) -> CouplingGraph:
    """The graph of the nonzero couplings of a concrete ``J`` (dense ``[..., n, n]``, any
    batch element's nonzeros, or :class:`~isingattn.sparse.SparseCouplings`): the
    structure the cluster move grows along."""
    if isinstance(J, SparseCouplings):
        return J.graph
    return from_dense(np.asarray(J)).graph


def edge_weights(J, graph: CouplingGraph):
    """``[..., E]``: the couplings of ``J`` (dense, traced ok, or sparse on ``graph``) on the
    edges of ``graph``."""
    if isinstance(J, SparseCouplings):
        return J.weights
    i, j = graph.edges[:, 0], graph.edges[:, 1]
    return J[..., i, j]


def houdayer_move(key, a, b, weights, graph: CouplingGraph):
    """One Houdayer move of every pair of replicas (module docstring).

    Args:
        key: PRNG key (one for the whole batch).
        a, b: ``[n, *rest]`` spins in {-1, +1} (0: inactive, never in a cluster).
        weights: ``[E, *rest']`` the couplings on ``graph``'s edges, edge axis first,
            its trailing axes broadcast against ``rest``.
        graph: the coupling graph.
    Returns:
        ``(a, b, HoudayerInfo)`` after the move.
    """
    n, rest = a.shape[0], a.shape[1:]
    M = math.prod(rest)
    A, B = a.reshape(n, M), b.reshape(n, M)
    # a whole-replica flip first where most sites disagree (a symmetry without fields)
    B = jnp.where(jnp.sum(A * B < 0, 0) > jnp.sum(A * B > 0, 0), -B, B)
    neg = (A * B) < 0  # [n, M]
    weights = weights.reshape((graph.E,) + (1,) * (len(rest) - weights.ndim + 1) + weights.shape[1:])
    coupled = jnp.broadcast_to(weights != 0, (graph.E,) + rest).reshape(graph.E, M)
    i, j = graph.edges[:, 0], graph.edges[:, 1]
    open_e = jnp.concatenate([neg[i] & neg[j] & coupled, jnp.zeros((1, M), bool)])  # slot E: padding
    open_t = open_e[graph.slot]  # [n, d, M]
    nbr = jnp.asarray(graph.nbr)
    big = jnp.int32(n)
    labels, _ = component_labels(jnp.broadcast_to(jnp.arange(n, dtype=jnp.int32)[:, None], (n, M)),
                                 lambda gp: jnp.min(jnp.where(open_t, gp[nbr], big), axis=1))
    # the seed: uniform among the q = -1 sites (none: no move)
    u = prng.uniform(key, (n, M), A.dtype)
    seed = jnp.argmax(jnp.where(neg, u, -1.0), axis=0)  # [M]
    cols = jnp.arange(M)
    cluster = neg & (labels == labels[seed, cols][None]) & neg[seed, cols][None]
    # a's energy change: the couplings that cross the cluster's boundary change sign
    w_t = jnp.concatenate([jnp.broadcast_to(weights, (graph.E,) + rest).reshape(graph.E, M),
                           jnp.zeros((1, M), A.dtype)])[graph.slot]  # [n, d, M]
    outside = jnp.where(cluster, 0.0, A)  # a_j off the cluster
    delta = 2.0 * jnp.sum(jnp.where(cluster, A, 0.0) * jnp.sum(w_t * outside[nbr], axis=1), axis=0)
    A, B = jnp.where(cluster, -A, A), jnp.where(cluster, -B, B)
    info = HoudayerInfo(cluster.sum(0, dtype=jnp.int32).reshape(rest), delta.reshape(rest))
    return A.reshape(a.shape), B.reshape(b.shape), info
