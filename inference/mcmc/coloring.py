"""Update schedules of the Gibbs sweep: which spins a sweep updates together.

``"systematic"`` visits spins ``0..n-1`` one at a time (``classes=None``); ``"colored"``
updates the classes of a proper colouring of the coupling graph in parallel
(:func:`color_classes`: a chain or a 2D lattice takes two half-sweeps). The classes are
static (hashable tuples), so they are fixed at trace time.
"""

from __future__ import annotations

import functools
import operator
import warnings

import numpy as np

from isingattn.errors import IsingInputError
from isingattn.model import is_traced
from isingattn.sparse import CouplingGraph, SparseCouplings

SCHEDULES = ("systematic", "colored")

__all__ = ["SCHEDULES", "color_classes", "schedule_classes"]


def color_classes(J) -> tuple:
    """A proper colouring of the coupling graph, as update classes.

    J: a concrete dense ``[..., n, n]`` (the graph of nonzero couplings, union over batch
    axes) or a :class:`~isingattn.sparse.SparseCouplings` (its edge list: known even under
    ``jit``). A bipartite graph (a chain, a 2D or 3D lattice with even periodic sides,
    Chimera) gets its exact 2-colouring; any other graph networkx's greedy
    ``largest_first`` colouring. Returns a tuple of tuples of spin indices (each class
    sorted, classes ordered by their smallest index), usable as ``classes`` in
    :func:`gibbs_sweep`. A dense ``J`` gives one spin per class: the systematic scan.
    """
    if isinstance(J, SparseCouplings):
        return graph_classes(J.graph)
    J = np.asarray(J)
    n = J.shape[-1]
    nz = np.any(J.reshape(-1, n, n) != 0, axis=0)
    jj, kk = np.nonzero(np.triu(nz | nz.T, 1))
    return graph_classes(CouplingGraph(n, np.stack([jj, kk], axis=1)))


@functools.lru_cache(maxsize=32)
def graph_classes(graph: CouplingGraph) -> tuple:
    """:func:`color_classes` of a :class:`~isingattn.sparse.CouplingGraph` (cached per graph)."""
    colour = _two_colouring(graph)
    if colour is None:
        import networkx as nx

        greedy = nx.greedy_color(graph.to_networkx(), strategy="largest_first")
        colour = np.array([greedy[v] for v in range(graph.n)])
    classes = [np.flatnonzero(colour == c) for c in np.unique(colour)]
    return tuple(sorted((tuple(c.tolist()) for c in classes), key=lambda c: c[0]))


def _two_colouring(graph: CouplingGraph):
    """The parity of the breadth-first depth, ``[n]`` in {0, 1}, if it properly colours the
    graph (it does exactly when the graph is bipartite), else None. Level-synchronous and
    from one root per connected component at once: O(n + E) numpy work."""
    from scipy.sparse import coo_matrix
    from scipy.sparse.csgraph import connected_components

    n, e = graph.n, graph.edges
    A = coo_matrix((np.ones(len(e)), (e[:, 0], e[:, 1])), shape=(n, n))
    _, label = connected_components(A, directed=False)
    depth = np.full(n, -1)
    frontier = np.unique(label, return_index=True)[1]  # one root per component
    level = 0
    while frontier.size:
        depth[frontier] = level
        nb = graph.nbr[frontier].ravel()  # padding is the spin itself: already visited
        frontier = np.unique(nb[depth[nb] < 0])
        level += 1
    colour = depth % 2
    return None if np.any(colour[e[:, 0]] == colour[e[:, 1]]) else colour


def as_classes(colors):
    """The ``colors`` setting of an engine as static config (hashable): ``None``, or nested
    sequences of spin indices as a tuple of tuples of ``int``."""
    return None if colors is None else _index_classes(colors)


def _index_classes(colors) -> tuple:
    """Nested sequences of spin indices -> tuple of tuples of ``int``. Only integers are
    indices: ``int("x")`` would raise a bare ValueError and ``int(0.5)`` silently give 0."""
    def index(i):
        if isinstance(i, (bool, np.bool_)):
            raise TypeError
        return operator.index(i)

    try:
        return tuple(tuple(index(i) for i in c) for c in colors)
    except TypeError:
        raise IsingInputError(f"colors must be a sequence of sequences of integer spin indices, e.g. ((0, 2), (1, 3)); "
                              f"got {colors!r}.") from None


def _check_classes(classes, n: int, J=None) -> tuple:
    classes = _index_classes(classes)
    flat = sorted(i for c in classes for i in c)
    if flat != list(range(n)) or any(len(c) == 0 for c in classes):
        raise IsingInputError(
            f"colors must partition the spins 0..{n - 1} into non-empty classes (each spin exactly once); got {classes}. "
            "Use inference.gibbs.color_classes(J) to compute them."
        )
    if isinstance(J, SparseCouplings):  # the structure is static: checked even under jit
        colour = np.empty(n, np.int64)
        for k, c in enumerate(classes):
            colour[list(c)] = k
        e = J.graph.edges
        same = np.flatnonzero(colour[e[:, 0]] == colour[e[:, 1]])
        if same.size:
            j, k = e[same[0]]
            raise IsingInputError(
                f"colors: spins {j} and {k} are in the same class but coupled (an edge of J.graph); a class is updated "
                "in parallel, so its spins must be uncoupled. Use inference.gibbs.color_classes(J)."
            )
    elif J is not None and not is_traced(J):
        nz = np.any(np.asarray(J).reshape(-1, n, n) != 0, axis=0)
        for c in classes:
            sub = nz[np.ix_(c, c)]
            if sub.any():
                j, k = np.argwhere(sub)[0]
                raise IsingInputError(
                    f"colors: spins {c[j]} and {c[k]} are in the same class but coupled (J != 0); a class is updated in "
                    "parallel, so its spins must be uncoupled. Use inference.gibbs.color_classes(J)."
                )
    return classes


def schedule_classes(schedule: str, J, colors=None):
    """The static update classes of a schedule: ``None`` (systematic) or a tuple of
    index tuples (colored). Sparse couplings always sweep by colour classes (their
    graph's, or ``colors``). For ``colored`` the colouring comes from ``colors`` if
    given, else from the nonzero pattern of a concrete ``J``; under ``jit`` with a
    traced ``J`` and no ``colors`` the sparsity is unknown, so it warns and falls
    back to the systematic scan (still a correct sampler)."""
    if schedule not in SCHEDULES:
        raise IsingInputError(f"schedule must be one of {SCHEDULES}; got {schedule!r}.")
    n = J.shape[-1]
    if colors is not None and (schedule == "colored" or isinstance(J, SparseCouplings)):
        return _check_classes(colors, n, J)
    if isinstance(J, SparseCouplings):  # no dense scan on an edge list: colour classes, whatever the schedule
        return color_classes(J)
    if schedule == "systematic":
        return None
    if is_traced(J):
        warnings.warn(
            "Gibbs(schedule='colored'): J is traced (inside jit/grad), so its sparsity pattern cannot be read; "
            "falling back to the systematic scan. Pass colors=inference.gibbs.color_classes(J_structure) to Gibbs "
            "to keep colored updates under jit.",
            stacklevel=3,
        )
        return None
    classes = color_classes(J)
    return None if len(classes) == n else classes
