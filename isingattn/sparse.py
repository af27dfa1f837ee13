"""Sparse couplings: an edge list with batched weights, in O(n + E) memory.

A lattice, an annealer graph or a random sparse graph has a handful of neighbours per
spin, so a dense ``[n, n]`` J wastes memory quadratically (16 GiB at n = 65,536) and an
engine that multiplies by it wastes time the same way. Here the graph's structure, a
:class:`CouplingGraph`, is static (numpy, hashable by content: one compiled program per
graph), and only the weights ``[..., E]`` are arrays, batched like a dense ``J``.

:class:`SparseCouplings` stands where a dense ``J [..., n, n]`` would: ``IsingModel(h,
SparseCouplings(graph, w))``. It has the dense form's ``shape`` (``batch + (n, n)``) and
``dtype``, and the one energy of :mod:`isingattn.energy` accepts either form. Engines
that exploit sparsity declare it (``Engine.sparse_native``); the engine template gives
the others the dense form (:meth:`isingattn.IsingModel.densified`).
"""

from __future__ import annotations

import hashlib
from typing import Optional

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from isingattn.errors import IsingInputError, IsingTypeError


class CouplingGraph:
    """The structure of a sparse coupling graph: ``n`` spins and ``E`` undirected edges.

    Args:
        n: number of spins (≥ 1).
        edges: ``[E, 2]`` integer pairs ``(i, j)``, ``0 ≤ i, j < n``, ``i ≠ j``, each
            pair at most once (in either orientation). They are stored as ``i < j`` in the
            order given; the weights of :class:`SparseCouplings` follow that order.

    Derived (numpy, read-only): ``nbr [n, d]``, the neighbours of every spin padded to
    the largest degree ``d`` with the spin itself, and ``slot [n, d]``, the edge index of
    each neighbour (padding: ``E``, which selects a zero weight), and ``rev [n, d]``, the
    flat index ``j·d + k'`` at which spin ``i`` sits in the row of its ``k``-th neighbour
    ``j`` (for messages that travel both ways). A local field is then a gather,
    ``h_i + Σ_k w[slot[i, k]] s[nbr[i, k]]``: O(n d) work.
    """

    def __init__(self, n: int, edges):
        if not (isinstance(n, (int, np.integer)) and not isinstance(n, bool) and n >= 1):
            raise IsingInputError(f"CouplingGraph: n (the number of spins) must be a positive integer; got {n!r}.")
        n = int(n)
        try:
            e = np.asarray(edges)
        except (TypeError, ValueError) as err:
            raise IsingTypeError(f"CouplingGraph: edges must be an [E, 2] array of spin indices; got {type(edges).__name__} "
                                 f"({err}).") from None
        if e.size == 0:
            e = np.zeros((0, 2), np.int64)
        if e.ndim != 2 or e.shape[1] != 2:
            raise IsingInputError(f"CouplingGraph: edges must have shape [E, 2]; got {e.shape}. One row (i, j) per coupling.")
        if not np.issubdtype(e.dtype, np.integer):
            if not (np.issubdtype(e.dtype, np.floating) and np.all(np.isfinite(e)) and np.all(e == np.round(e))):
                raise IsingTypeError(f"CouplingGraph: edges must hold integer spin indices; got dtype {e.dtype}.")
            e = e.astype(np.int64)
        if e.size and (e.min() < 0 or e.max() >= n):
            raise IsingInputError(f"CouplingGraph: edge indices must lie in 0..{n - 1}; got {e.min()}..{e.max()}.")
        if np.any(e[:, 0] == e[:, 1]):
            k = int(np.flatnonzero(e[:, 0] == e[:, 1])[0])
            raise IsingInputError(f"CouplingGraph: edge {k} couples spin {e[k, 0]} to itself; Ising couplings need two "
                                  "distinct spins (s_i² = 1 is a constant). Remove it.")
        e = np.sort(e, axis=1).astype(np.int32)
        # duplicates, from the sorted pair keys (np.unique would keep several copies of them)
        key = np.sort(e[:, 0].astype(np.int64) * n + e[:, 1])
        dup = np.flatnonzero(key[1:] == key[:-1])
        if dup.size:
            i, j = divmod(int(key[dup[0]]), n)
            raise IsingInputError(f"CouplingGraph: the pair ({i}, {j}) is listed more than once; give each coupling "
                                  "once (sum duplicate weights first).")
        del key
        self.n, self.edges = n, e
        self.edges.setflags(write=False)
        E = e.shape[0]
        deg = np.bincount(e.ravel(), minlength=n)
        d = max(int(deg.max(initial=0)), 1)
        # Neighbour table: both orientations of every edge, grouped by spin. Built in int32
        # where it fits, temporaries freed as they go: a million-spin lattice's tables take
        # 72 MiB, and building them peaks at about twice that.
        it = np.int32 if max(n * d, 2 * E) < 2**31 else np.int64
        src = np.concatenate([e[:, 0], e[:, 1]]).astype(it)
        order = np.argsort(src, kind="stable").astype(it)
        src = src[order]
        eid = (order % E).astype(it) if E else order  # order < E: edge order; else its second orientation
        dst = np.where(order < E, e[eid, 1], e[eid, 0]).astype(it)
        del order
        pos = np.arange(src.size, dtype=it) - np.concatenate([[0], np.cumsum(deg)[:-1]]).astype(it)[src]
        nbr = np.repeat(np.arange(n, dtype=np.int32)[:, None], d, axis=1)
        slot = np.full((n, d), E, np.int32)
        nbr[src, pos], slot[src, pos] = dst, eid
        del dst
        # rev: for the slot (i, k) of neighbour j, the flat index j·d + k' of i in j's row
        # (messages i -> j and j -> i of BP); padding points at itself
        flat = src * it(d) + pos
        del pos
        side = (src != e[eid, 0]).astype(np.int8)
        del src
        edge_slot = np.empty((E, 2), it)
        edge_slot[eid, side] = flat
        rev = np.arange(n * d, dtype=np.int32).reshape(n, d).ravel()
        rev[flat] = edge_slot[eid, 1 - side]
        rev = rev.reshape(n, d)
        del flat, side, edge_slot, eid
        self.degree, self.nbr, self.slot, self.rev = deg, nbr, slot, rev
        for a in (self.degree, self.nbr, self.slot, self.rev):
            a.setflags(write=False)
        self._key = (n, E, hashlib.sha1(e.tobytes()).hexdigest())

    @property
    def E(self) -> int:
        return self.edges.shape[0]

    @property
    def max_degree(self) -> int:
        return self.nbr.shape[1]

    @property
    def bandwidth(self) -> int:
        """``max |i - j|`` over the edges (0 without edges): the window the Banded engine
        needs in this spin order (an open ``L × W`` row-major lattice: ``W``)."""
        return int(np.max(self.edges[:, 1] - self.edges[:, 0], initial=0))

    @property
    def nbytes(self) -> int:
        """Bytes held by the structure (the edges and the derived tables), O(n + E)."""
        return sum(a.nbytes for a in (self.edges, self.degree, self.nbr, self.slot, self.rev))

    def __hash__(self):
        return hash(self._key)

    def __eq__(self, other):
        return isinstance(other, CouplingGraph) and self._key == other._key and np.array_equal(self.edges, other.edges)

    def __repr__(self):
        return f"CouplingGraph(n={self.n}, E={self.E}, max_degree={self.max_degree})"

    def to_networkx(self):
        """The unweighted ``networkx.Graph`` on nodes ``0..n-1``."""
        import networkx as nx

        G = nx.Graph()
        G.add_nodes_from(range(self.n))
        G.add_edges_from(map(tuple, self.edges.tolist()))
        return G


class SparseCouplings(eqx.Module):
    """Couplings ``J`` on a :class:`CouplingGraph`: ``J_ij = J_ji = weights[..., e]`` for edge
    ``e = (i, j)``, zero elsewhere (so symmetric with a zero diagonal by construction).

    Args:
        graph: the static structure (one compile per graph).
        weights: ``[..., E]``, batched like a dense ``J [..., n, n]``.
    """

    weights: jax.Array
    graph: CouplingGraph = eqx.field(static=True)
    table: Optional[jax.Array] = None  # neighbour_weights() computed once (with_table), for loops over sweeps

    def __init__(self, graph: CouplingGraph, weights, table=None):
        if not isinstance(graph, CouplingGraph):
            raise IsingTypeError(f"SparseCouplings: graph must be a CouplingGraph; got {type(graph).__name__}. "
                                 "Build one with CouplingGraph(n, edges).")
        w = jnp.asarray(weights)
        if w.ndim < 1 or w.shape[-1] != graph.E:
            raise IsingInputError(f"SparseCouplings: weights must have shape [..., E] with E = {graph.E} edges; got "
                                  f"{w.shape}. One weight per edge, in the order of graph.edges.")
        self.graph, self.weights, self.table = graph, w, table

    # ---- the dense form's attributes -----------------------------------------------------
    @property
    def shape(self) -> tuple:
        return self.weights.shape[:-1] + (self.graph.n, self.graph.n)

    @property
    def ndim(self) -> int:
        return self.weights.ndim + 1

    @property
    def dtype(self):
        return self.weights.dtype

    def astype(self, dtype) -> "SparseCouplings":
        return self.with_weights(self.weights.astype(dtype))

    def with_weights(self, weights) -> "SparseCouplings":
        """The same graph with other weights ``[..., E]``."""
        return SparseCouplings(self.graph, weights)

    # ---- what engines compute ------------------------------------------------------------
    def to_dense(self) -> jax.Array:
        """``J [..., n, n]`` (symmetric, zero diagonal): O(n²) memory."""
        g = self.graph
        i, j = g.edges[:, 0], g.edges[:, 1]
        J = jnp.zeros(self.shape, self.dtype)
        return J.at[..., i, j].set(self.weights).at[..., j, i].set(self.weights)

    def with_table(self) -> "SparseCouplings":
        """These couplings with :meth:`neighbour_weights` gathered once: a sampler's loop
        then reads the ``[..., n, d]`` table instead of gathering it every sweep."""
        return SparseCouplings(self.graph, self.weights, self.neighbour_weights())

    def neighbour_weights(self) -> jax.Array:
        """``[..., n, d]``: the weight of each neighbour in ``graph.nbr`` (0 for padding)."""
        if self.table is not None:
            return self.table
        w = jnp.concatenate([self.weights, jnp.zeros(self.weights.shape[:-1] + (1,), self.dtype)], axis=-1)
        return w[..., self.graph.slot]

    def field(self, s) -> jax.Array:
        """``(J s)_i = Σ_j J_ij s_j`` for spins ``[..., n]`` -> ``[..., n]``: a gather over
        the neighbour table, O(n d)."""
        return jnp.einsum("...ik,...ik->...i", self.neighbour_weights(), s[..., self.graph.nbr])

    def pair_energy(self, s) -> jax.Array:
        """``-Σ_{edges (i, j)} J_ij s_i s_j`` for spins ``[..., n]`` -> ``[...]``: O(E)."""
        g = self.graph
        return -jnp.sum(self.weights * s[..., g.edges[:, 0]] * s[..., g.edges[:, 1]], axis=-1)

    def masked(self, active) -> "SparseCouplings":
        """Couplings with every edge touching an inactive spin (``active [..., n]`` False) set to 0."""
        a = active.astype(self.dtype)
        g = self.graph
        return self.with_weights(self.weights * a[..., g.edges[:, 0]] * a[..., g.edges[:, 1]])


def insert_batch_axis(J):
    """``J`` (dense ``[..., n, n]`` or sparse) with a size-1 batch axis before its coupling
    axes, for states with one more batch axis (samples, reads): dense ``[..., 1, n, n]``,
    sparse weights ``[..., 1, E]``."""
    if isinstance(J, SparseCouplings):
        return J.with_weights(J.weights[..., None, :])
    return J[..., None, :, :]


def from_dense(J, tol: float = 0.0) -> SparseCouplings:
    """The sparse form of a dense ``J [..., n, n]`` (concrete): every pair ``i < j`` with
    ``|J_ij| > tol`` in any batch element becomes an edge."""
    J = np.asarray(J)
    n = J.shape[-1]
    nz = np.any(np.abs(np.triu(J.reshape((-1, n, n)), 1)) > tol, axis=0)
    i, j = np.nonzero(nz)
    return SparseCouplings(CouplingGraph(n, np.stack([i, j], axis=1)), jnp.asarray(J[..., i, j]))
