"""Sparse coupling graphs that engines are compared on: lattices, annealer topologies and
random graphs, as :class:`~isingattn.sparse.CouplingGraph` s, and random couplings on them.

Spin order is part of a graph: a lattice is numbered in row-major order (the last axis
fastest), so an open ``L × W`` strip has bandwidth ``W`` and the Banded engine is an exact
reference for it. Annealer graphs use dwave-networkx's linear indices.
"""

from __future__ import annotations

import math
from typing import Sequence

import jax
import jax.numpy as jnp
import numpy as np

from isingattn.errors import IsingInputError
from isingattn.sparse import CouplingGraph, SparseCouplings

COUPLINGS = ("pm", "gaussian", "ferro")


def _positive_int(name: str, v, lo: int = 1) -> int:
    if not (isinstance(v, (int, np.integer)) and not isinstance(v, bool) and v >= lo):
        raise IsingInputError(f"{name} must be an integer ≥ {lo}; got {v!r}.")
    return int(v)


def lattice(shape: Sequence[int], periodic: bool = False) -> CouplingGraph:
    """Nearest-neighbour lattice of ``shape`` (e.g. ``(64, 64)`` or ``(16, 16, 16)``), open
    or periodic; spin ``(i, j, ...)`` is ``np.ravel_multi_index`` of it (row-major).

    A periodic axis of length 2 would couple the same pair twice, so it is refused; a
    periodic axis of length 1 adds nothing."""
    try:
        shape = tuple(shape)
    except TypeError:
        raise IsingInputError(f"lattice shape must be a sequence of side lengths, e.g. (64, 64); got {shape!r}.") from None
    if not shape:
        raise IsingInputError("lattice shape must have at least one side length, e.g. (64, 64).")
    shape = tuple(_positive_int("a lattice side length", L) for L in shape)
    if periodic and 2 in shape:
        raise IsingInputError(f"a periodic lattice needs side lengths ≠ 2 (the wrap-around would repeat an edge); got {shape}.")
    n = math.prod(shape)
    idx = np.arange(n).reshape(shape)
    edges = []
    for ax, L in enumerate(shape):
        if L == 1:
            continue
        nxt = np.roll(idx, -1, axis=ax)
        a, b = idx, nxt
        if not periodic:  # drop the wrap-around pairs
            keep = [slice(None)] * len(shape)
            keep[ax] = slice(0, L - 1)
            a, b = idx[tuple(keep)], nxt[tuple(keep)]
        edges.append(np.stack([a.ravel(), b.ravel()], axis=1))
    e = np.concatenate(edges) if edges else np.zeros((0, 2), np.int64)
    return CouplingGraph(n, e)


def _from_networkx(G, what: str) -> CouplingGraph:
    nodes = sorted(G.nodes)
    if nodes != list(range(len(nodes))):
        pos = {v: i for i, v in enumerate(nodes)}
        e = [(pos[u], pos[v]) for u, v in G.edges]
    else:
        e = list(G.edges)
    if not nodes:
        raise IsingInputError(f"{what} has no nodes.")
    return CouplingGraph(len(nodes), np.asarray(e, np.int64).reshape(-1, 2))


def _dnx():
    try:
        import dwave_networkx as dnx
    except ImportError:  # an optional dependency
        raise IsingInputError("annealer graphs need dwave-networkx: pip install dwave-networkx "
                              "(or pip install 'isingattn[graphs]').") from None
    return dnx


def chimera(m: int, n: int = None, t: int = 4) -> CouplingGraph:
    """D-Wave's Chimera graph C(m, n, t) (dwave-networkx linear indices): ``m·n·2t`` spins."""
    m = _positive_int("chimera m", m)
    return _from_networkx(_dnx().chimera_graph(m, n, t), f"chimera({m}, {n}, {t})")


def pegasus(m: int) -> CouplingGraph:
    """D-Wave's Pegasus graph P(m), dwave-networkx's ``pegasus_graph(m)`` (fabric only,
    linear indices): 680 spins at m = 6, 5,640 at m = 16 (Advantage's topology)."""
    m = _positive_int("pegasus m", m, 2)
    return _from_networkx(_dnx().pegasus_graph(m), f"pegasus({m})")


def zephyr(m: int, t: int = 4) -> CouplingGraph:
    """D-Wave's Zephyr graph Z(m, t) (dwave-networkx linear indices): ``4 t m (2m + 1)`` spins."""
    m = _positive_int("zephyr m", m)
    return _from_networkx(_dnx().zephyr_graph(m, t), f"zephyr({m}, {t})")


def _seed(key) -> int:
    """An integer seed for networkx's generators, drawn from a JAX key."""
    return int(jax.random.randint(key, (), 0, 2**31 - 1))


def random_regular(key, n: int, degree: int) -> CouplingGraph:
    """A uniformly random ``degree``-regular graph on ``n`` spins (networkx), seeded by ``key``."""
    n, degree = _positive_int("n", n), _positive_int("degree", degree, 0)
    if degree >= n or (n * degree) % 2:
        raise IsingInputError(f"a {degree}-regular graph on {n} spins needs degree < n and n·degree even.")
    import networkx as nx

    return _from_networkx(nx.random_regular_graph(degree, n, seed=_seed(key)), "random_regular")


def erdos_renyi(key, n: int, p: float) -> CouplingGraph:
    """An Erdős–Rényi graph G(n, p) on ``n`` spins, seeded by ``key`` (O(n + E) time)."""
    n = _positive_int("n", n)
    if not (isinstance(p, (int, float, np.floating)) and 0 <= p <= 1):
        raise IsingInputError(f"p (the edge probability) must be a number in [0, 1]; got {p!r}.")
    import networkx as nx

    return _from_networkx(nx.fast_gnp_random_graph(n, float(p), seed=_seed(key)), "erdos_renyi")


def random_couplings(key, graph: CouplingGraph, kind: str = "pm", scale: float = 1.0, batch: tuple = (),
                     dtype=jnp.float32) -> SparseCouplings:
    """Couplings on ``graph``: ``kind="pm"`` gives ``±scale`` with equal probability (the
    ±J spin glass), ``"gaussian"`` gives ``N(0, scale²)``, ``"ferro"`` the uniform ferromagnet
    ``+scale`` on every edge (``key`` unused); weights ``[*batch, E]``."""
    if kind not in COUPLINGS:
        raise IsingInputError(f"kind must be one of {COUPLINGS}; got {kind!r}.")
    shape = tuple(batch) + (graph.E,)
    if kind == "pm":
        w = jax.random.rademacher(key, shape, dtype=dtype) * scale
    elif kind == "ferro":
        w = jnp.full(shape, scale, dtype)
    else:
        w = jax.random.normal(key, shape, dtype) * scale
    return SparseCouplings(graph, w)


def parse(spec: str, key=None) -> CouplingGraph:
    """A graph from a short spec, as the command line takes it: ``lattice:64x64``,
    ``lattice:16x16x16:periodic``, ``chimera:16``, ``pegasus:16``, ``zephyr:6``,
    ``regular:10000:3`` (n, degree) or ``er:10000:0.001`` (n, p); the random ones need ``key``."""
    kind, _, rest = str(spec).partition(":")
    args = rest.split(":") if rest else []
    try:
        if kind == "lattice" and args:
            periodic = args[1:] == ["periodic"]
            if args[1:] and not periodic:
                raise ValueError
            return lattice([int(x) for x in args[0].lower().split("x")], periodic=periodic)
        if kind in ("chimera", "pegasus", "zephyr") and len(args) == 1:
            return {"chimera": chimera, "pegasus": pegasus, "zephyr": zephyr}[kind](int(args[0]))
        if kind in ("regular", "er") and len(args) == 2:
            if key is None:
                raise IsingInputError(f"graph {spec!r} is random: pass a key (or --seed on the command line).")
            if kind == "regular":
                return random_regular(key, int(args[0]), int(args[1]))
            return erdos_renyi(key, int(args[0]), float(args[1]))
    except IsingInputError:
        raise
    except ValueError:  # int("abc"): the generic message below
        pass
    raise IsingInputError(f"unknown graph spec {spec!r}; expected lattice:LxW[xD][:periodic], chimera:M, pegasus:M, "
                          "zephyr:M, regular:N:DEGREE or er:N:P, e.g. lattice:64x64 or pegasus:16.")
