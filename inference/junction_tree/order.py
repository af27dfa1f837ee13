"""Elimination orders for the junction tree (DESIGN.md §3, "Junction tree / variable elimination").

Eliminating the spins of a graph one at a time in an order ``π`` joins the neighbours of each
eliminated spin into a clique; the largest clique has ``width + 1`` spins and the exact
contraction costs ``Σ_v 2^{|C_v|}`` table entries per model. Finding the order of least
width is NP-hard, so the greedy heuristics of Koller & Friedman (2009, §9.4.3) are tried
side by side and the cheapest result is kept:

* ``"min-fill"``: eliminate the spin whose neighbourhood needs the fewest fill edges (the
  heuristic of networkx's ``treewidth_min_fill_in``);
* ``"min-degree"``: the spin with the fewest remaining neighbours (``treewidth_min_degree``);
* ``"natural"``: the spins in their given order (a band of width ``w`` in that order gives
  width ``≤ w``: the transfer-matrix order of Banded);
* ``"rcm"``: reverse Cuthill–McKee, a bandwidth-reducing order (networkx), for graphs that are
  banded in some other numbering (a long lattice strip numbered across its long side).

Ties are broken by degree, then by spin index, so an order is a deterministic function of
the graph. This is host-side work on the structure alone.
"""

from __future__ import annotations

import heapq
from typing import Sequence

import numpy as np

HEURISTICS = ("min-fill", "min-degree", "natural", "rcm")


def adjacency(n: int, edges: np.ndarray) -> list[set]:
    """Neighbour sets of the ``n`` spins of an ``[E, 2]`` edge list."""
    adj = [set() for _ in range(n)]
    for a, b in np.asarray(edges, np.int64).tolist():
        adj[a].add(b)
        adj[b].add(a)
    return adj


def _fill(adj: list[set], v: int) -> int:
    """Fill edges that eliminating ``v`` adds: pairs of its neighbours not yet joined."""
    nbrs = adj[v]
    return sum(len(nbrs - adj[u]) - 1 for u in nbrs) // 2  # -1: u itself


def _eliminate(adj: list[set], v: int) -> None:
    nbrs = adj[v]
    for u in nbrs:
        adj[u] |= nbrs
        adj[u].discard(u)
        adj[u].discard(v)
    adj[v] = set()


def min_fill(n: int, edges: np.ndarray) -> list[int]:
    """The greedy min-fill order (ties: fewer neighbours, then the smaller index). Fill counts are
    cached in a lazy heap and recomputed only within distance 2 of each eliminated spin, where
    they can change."""
    adj = adjacency(n, edges)
    key = [(_fill(adj, v), len(adj[v]), v) for v in range(n)]
    heap = list(key)
    heapq.heapify(heap)
    done = np.zeros(n, bool)
    order = []
    while heap:
        k = heapq.heappop(heap)
        v = k[2]
        if done[v] or k != key[v]:
            continue  # an outdated entry
        order.append(v)
        done[v] = True
        nbrs = adj[v]
        _eliminate(adj, v)
        near = set(nbrs)
        for u in nbrs:
            near |= adj[u]
        for u in near:
            key[u] = (_fill(adj, u), len(adj[u]), u)
            heapq.heappush(heap, key[u])
    return order


def min_degree(n: int, edges: np.ndarray) -> list[int]:
    """The greedy min-degree order (ties: the smaller index), with a lazy heap."""
    adj = adjacency(n, edges)
    heap = [(len(adj[v]), v) for v in range(n)]
    heapq.heapify(heap)
    done = np.zeros(n, bool)
    order = []
    while heap:
        d, v = heapq.heappop(heap)
        if done[v] or d != len(adj[v]):
            continue  # an outdated entry
        order.append(v)
        done[v] = True
        nbrs = adj[v]
        _eliminate(adj, v)
        for u in nbrs:
            heapq.heappush(heap, (len(adj[u]), u))
    return order


def rcm(n: int, edges: np.ndarray) -> list[int]:
    """Reverse Cuthill–McKee (networkx), component by component; isolated spins first."""
    import networkx as nx

    G = nx.Graph()
    G.add_nodes_from(range(n))
    G.add_edges_from(np.asarray(edges, np.int64).tolist())
    return [int(v) for v in nx.utils.reverse_cuthill_mckee_ordering(G)]


def heuristic_order(name: str, n: int, edges: np.ndarray) -> list[int]:
    """The order of heuristic ``name`` (one of :data:`HEURISTICS`)."""
    if name == "min-fill":
        return min_fill(n, edges)
    if name == "min-degree":
        return min_degree(n, edges)
    if name == "natural":
        return list(range(n))
    if name == "rcm":
        return rcm(n, edges)
    raise ValueError(name)


def check_order(order: Sequence[int], n: int) -> list[int]:
    """``order`` as a list, or ValueError with what is wrong (a permutation of 0..n-1 is needed)."""
    try:
        out = [int(v) for v in order]
    except (TypeError, ValueError):
        raise ValueError(f"an elimination order is a sequence of spin indices; got {order!r}") from None
    if sorted(out) != list(range(n)):
        raise ValueError(f"an elimination order must list every spin 0..{n - 1} exactly once; got {len(out)} "
                         f"entries ({len(set(out))} distinct)")
    return out
