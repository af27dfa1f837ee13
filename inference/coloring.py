"""Update schedules of the Gibbs sweep: which spins a sweep updates together.

``"systematic"`` visits spins ``0..n-1`` one at a time (``classes=None``); ``"colored"``
updates the classes of a proper colouring of the coupling graph in parallel
(:func:`color_classes`: a chain or a 2D lattice takes two half-sweeps). The classes are
static (hashable tuples), so they are fixed at trace time.
"""

from __future__ import annotations

import operator
import warnings

import numpy as np

from isingattn.errors import IsingInputError
from isingattn.model import _is_traced

SCHEDULES = ("systematic", "colored")

__all__ = ["SCHEDULES", "color_classes", "schedule_classes"]


def color_classes(J) -> tuple:
    """Greedy colouring (networkx, ``largest_first``) of the graph of nonzero couplings.

    J: concrete ``[..., n, n]``; the graph is the union over batch axes. Returns a
    tuple of tuples of spin indices (each class sorted, classes ordered by their
    smallest index), usable as ``classes`` in :func:`gibbs_sweep`. A dense ``J``
    gives one spin per class, ``((0,), (1,), ...)``: the systematic scan.
    """
    import networkx as nx

    J = np.asarray(J)
    n = J.shape[-1]
    nz = np.any(J.reshape(-1, n, n) != 0, axis=0)
    G = nx.Graph()
    G.add_nodes_from(range(n))
    jj, kk = np.nonzero(np.triu(nz | nz.T, 1))
    G.add_edges_from(zip(jj.tolist(), kk.tolist()))
    color = nx.greedy_color(G, strategy="largest_first")
    groups: dict[int, list[int]] = {}
    for v, c in color.items():
        groups.setdefault(c, []).append(v)
    return tuple(sorted((tuple(sorted(g)) for g in groups.values()), key=lambda c: c[0]))


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
    if J is not None and not _is_traced(J):
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
    index tuples (colored). For ``colored`` the colouring comes from ``colors`` if
    given, else from the nonzero pattern of a concrete ``J``; under ``jit`` with a
    traced ``J`` and no ``colors`` the sparsity is unknown, so it warns and falls
    back to the systematic scan (still a correct sampler)."""
    if schedule not in SCHEDULES:
        raise IsingInputError(f"schedule must be one of {SCHEDULES}; got {schedule!r}.")
    n = J.shape[-1]
    if schedule == "systematic":
        return None
    if colors is not None:
        return _check_classes(colors, n, J)
    if _is_traced(J):
        warnings.warn(
            "Gibbs(schedule='colored'): J is traced (inside jit/grad), so its sparsity pattern cannot be read; "
            "falling back to the systematic scan. Pass colors=inference.gibbs.color_classes(J_structure) to Gibbs "
            "to keep colored updates under jit.",
            stacklevel=3,
        )
        return None
    classes = color_classes(J)
    return None if len(classes) == n else classes
