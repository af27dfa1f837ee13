"""IsingModel's conversions: to and from dimod ``BinaryQuadraticModel`` s and networkx
graphs (DESIGN.md §1), for dense and sparse couplings alike; a sparse model is never
densified. ``IsingModel.to_bqm`` and its siblings call these."""

from __future__ import annotations

import numpy as np

from isingattn.errors import IsingInputError, IsingTypeError
from isingattn.sparse import CouplingGraph, SparseCouplings

SPARSE_MIN_N, SPARSE_MAX_DENSITY = 64, 0.1  # from_bqm / from_networkx choose the edge list at n ≥ 64 and ≤ 10% of pairs coupled


def single(model, index):
    """numpy float64 (h, J, active) of one model of the batch; a sparse J as
    ``(edges [E, 2], weights [E])``."""
    batch = model.batch_shape
    if index is None:
        if batch:
            raise IsingInputError(
                f"this model is batched (batch shape {batch}); pass index=... to pick one, e.g. index={(0,) * len(batch)}."
            )
        index = ()
    given = index
    try:
        index = (index,) if isinstance(index, (int, np.integer)) else tuple(index)
    except TypeError:
        index = None
    if index is None or not all(isinstance(i, (int, np.integer)) and not isinstance(i, bool) for i in index):
        raise IsingTypeError(f"index must be an integer or a tuple of integers, one per batch axis of {batch}; got "
                             f"{given!r}.")
    if len(index) != len(batch):
        raise IsingInputError(f"index must have {len(batch)} entries for batch shape {batch}; got {index}.")
    if any(not -b <= i < b for i, b in zip(index, batch)):
        raise IsingInputError(f"index {index} is out of range for batch shape {batch} (each entry in [-size, size)).")
    act = model.active()
    full = lambda x, tail: np.broadcast_to(np.asarray(x, dtype=np.float64 if x.dtype != bool else bool), batch + tail)[index]
    h = full(model.h, (model.n,))
    if isinstance(model.J, SparseCouplings):
        J = (model.J.graph.edges, full(model.J.weights, (model.J.graph.E,)))
    else:
        J = full(model.J, (model.n, model.n))
    a = np.ones(model.n, bool) if act is None else np.broadcast_to(np.asarray(act), batch + (model.n,))[index]
    return h, J, a

def label_list(model):
    return list(model.labels) if model.labels is not None else list(range(model.n))

def to_bqm(model, index=None):
    """The model as a SPIN ``dimod.BinaryQuadraticModel`` with ``bqm.energy(s) == E(s)``.

    ``linear = -h``, ``quadratic = -J_jk`` (j<k), ``offset = 0``; β is not part of a
    BQM (pass it to the sampler). Inactive spins are left out. ``index`` picks one
    model of a batch.
    """
    h, J, a = single(model, index)
    return array_bqm(h, J, a, label_list(model))

def array_bqm(h, J, active=None, labels=None):
    """The SPIN BQM of numpy arrays: ``h [n]``, ``J`` dense ``[n, n]`` or ``(edges [E, 2],
    weights [E])``, ``active [n]`` bool (default all), ``labels`` (default ``0..n-1``).
    NumPy only, so host callbacks can call it: JAX inside a ``jax.pure_callback`` can deadlock."""
    import dimod

    nodes, edges = array_terms(h, J, np.ones(len(h), bool) if active is None else active,
                               range(len(h)) if labels is None else labels)
    # Add the linear terms first: BinaryQuadraticModel(linear, quadratic, ...) inserts
    # the quadratic terms first, which reorders the variables (spin order is lost).
    bqm = dimod.BinaryQuadraticModel(dimod.SPIN)
    bqm.add_linear_from((v, -b) for v, b in nodes)
    bqm.add_quadratic_from((u, v, -b) for u, v, b in edges)
    return bqm

def terms(model, index=None):
    """The active spins of one model as ``[(label, h)]`` and its nonzero couplings
    between them as ``[(label, label, J)]`` (upper triangle, spin order)."""
    h, J, a = single(model, index)
    return array_terms(h, J, a, label_list(model))

def array_terms(h, J, a, labels):
    """:func:`terms` of numpy ``h [n]``, ``J`` (dense, or ``(edges, weights)``), ``active [n]``."""
    labels = list(labels)
    idx = np.flatnonzero(a)
    nodes = [(labels[j], float(h[j])) for j in idx]
    if isinstance(J, tuple):  # sparse: (edges [E, 2], weights [E]), never densified
        (e, w) = J
        keep = a[e[:, 0]] & a[e[:, 1]] & (w != 0)
        return nodes, [(labels[i], labels[j], float(b)) for (i, j), b in zip(e[keep].tolist(), w[keep])]
    sub = J[np.ix_(idx, idx)]
    jj, kk = np.nonzero(np.triu(sub, 1))
    return nodes, [(labels[idx[j]], labels[idx[k]], float(sub[j, k])) for j, k in zip(jj, kk)]

def assemble(labels, fields, rows, cols, weights, empty: str, sparse):
    """``h [n]`` (float64) and ``J``, dense ``[n, n]`` or a
    :class:`~isingattn.sparse.SparseCouplings`, from per-spin fields and couplings
    ``J[rows[e], cols[e]] = weights[e]``. ``sparse=None`` chooses the edge list when
    ``n ≥ SPARSE_MIN_N`` and at most ``SPARSE_MAX_DENSITY`` of the pairs are coupled.
    An empty model is refused with the message ``empty``."""
    if not labels:
        raise IsingInputError(empty)
    n = len(labels)
    rows, cols = np.asarray(rows, np.int64).reshape(-1), np.asarray(cols, np.int64).reshape(-1)
    weights = np.asarray(weights, np.float64).reshape(-1)
    if sparse is None:
        sparse = n >= SPARSE_MIN_N and rows.size <= SPARSE_MAX_DENSITY * n * (n - 1) / 2
    elif not isinstance(sparse, (bool, np.bool_)):
        raise IsingTypeError(f"sparse must be True, False or None (choose by density); got {sparse!r}.")
    h = np.array(fields, dtype=np.float64)
    if sparse:
        return h, SparseCouplings(CouplingGraph(n, np.stack([rows, cols], axis=1)), weights)
    J = np.zeros((n, n))
    J[rows, cols] = weights
    J[cols, rows] = weights
    return h, J

def from_bqm(cls, bqm, beta=1.0, *, sparse=None):
    """Build a model from a ``dimod.BinaryQuadraticModel``; BINARY models are converted
    to SPIN. Labels and their order are kept. The BQM offset does not change the
    distribution and is dropped. ``sparse``: True gives ``J`` as an edge list
    (:class:`~isingattn.sparse.SparseCouplings`, O(n + E) memory), False dense,
    None (default) the edge list for sparse graphs (``n ≥ 64``, at most 10% of the
    pairs coupled)."""
    import dimod

    if not isinstance(bqm, dimod.BinaryQuadraticModel):
        raise IsingTypeError(f"from_bqm expects a dimod.BinaryQuadraticModel; got {type(bqm).__name__}.")
    if bqm.vartype is dimod.BINARY:
        bqm = bqm.change_vartype(dimod.SPIN, inplace=False)
    labels = list(bqm.variables)
    empty = ("from_bqm: the BQM has no variables; an Ising model needs at least one spin. "
             "Add variables to it (bqm.add_variable(v, bias)) before converting.")
    if labels and bqm.dtype != object:  # numeric biases: dimod's own vectors, no Python loop per edge
        lin, (rows, cols, quad), _ = bqm.to_numpy_vectors(variable_order=labels)
        h, J = assemble(labels, -np.asarray(lin, np.float64), rows, cols, -np.asarray(quad, np.float64),
                             empty, sparse)
    else:  # object biases: read one at a time, so a bad one is named
        pos = {v: i for i, v in enumerate(labels)}
        quad = [(pos[u], pos[v], -_real(f"from_bqm: the quadratic bias of ({u!r}, {v!r})", b))
                for (u, v), b in bqm.quadratic.items()]
        rows, cols, w = (np.array(x) for x in zip(*quad)) if quad else ([], [], [])
        h, J = assemble(labels, [-_real(f"from_bqm: the linear bias of {v!r}", bqm.get_linear(v)) for v in labels],
                             rows, cols, w, empty, sparse)
    return cls(h, J, beta=beta, labels=labels)

def to_networkx(model, index=None):
    """``networkx.Graph``: node attribute ``h``, edge attribute ``J`` (nonzero couplings
    between active spins), graph attribute ``beta``."""
    import networkx as nx

    nodes, edges = terms(model, index)
    G = nx.Graph(beta=float(model.beta))
    G.add_nodes_from((v, {"h": b}) for v, b in nodes)
    G.add_edges_from((u, v, {"J": b}) for u, v, b in edges)
    return G

def from_networkx(cls, G, beta=None, *, sparse=None):
    """Build a model from a graph with node attribute ``h`` (default 0) and edge
    attribute ``J`` (required). Node order gives spin order; labels are kept.
    ``sparse`` as in :meth:`from_bqm`."""
    labels = list(G.nodes)
    pos = {v: i for i, v in enumerate(labels)}
    rows, cols, w = [], [], []
    for u, v, d in G.edges(data=True):
        if u == v:
            raise IsingInputError(f"self-loop on node {u!r}: Ising couplings need two distinct spins. Remove it.")
        if "J" not in d:
            raise IsingInputError(f"edge ({u!r}, {v!r}) has no 'J' attribute. Set G.edges[u, v]['J'] = coupling.")
        rows.append(pos[u])
        cols.append(pos[v])
        w.append(_real(f"from_networkx: edge ({u!r}, {v!r}) attribute 'J'", d["J"]))
    h, J = assemble(labels,
                         [_real(f"from_networkx: node {v!r} attribute 'h'", G.nodes[v].get("h", 0.0)) for v in labels],
                         rows, cols, w, "from_networkx: the graph has no nodes; an Ising model needs at least one "
                         "spin. Add nodes (G.add_node(v, h=field)) before converting.", sparse)
    if beta is None:
        beta = G.graph.get("beta", 1.0)
    return cls(h, J, beta=beta, labels=labels)


def _real(what: str, x) -> float:
    """``float(x)`` for one bias read from a BQM or graph, with a message naming it."""
    if isinstance(x, (str, bytes, complex, np.complexfloating)) or x is None:
        raise IsingTypeError(f"{what} must be a real number; got {type(x).__name__} {x!r}. Store biases as floats.")
    try:
        return float(x)
    except (TypeError, ValueError) as e:
        raise IsingTypeError(f"{what} must be a real number; got {type(x).__name__} {x!r} ({e}). Store biases as floats.") from None


def json_safe(x):
    """``x`` with NumPy arrays and scalars made Python lists and numbers (dicts and tuples
    kept), so that a sample set's ``info`` passes ``json.dumps``."""
    if isinstance(x, dict):
        return {k: json_safe(v) for k, v in x.items()}
    if isinstance(x, (tuple, list)):
        return type(x)(json_safe(v) for v in x)
    if isinstance(x, np.ndarray) or (hasattr(x, "__array__") and hasattr(x, "shape")):  # NumPy or JAX arrays
        return np.asarray(x).tolist()
    if isinstance(x, np.generic):
        return x.item()
    return x


def save_bqm(bqm, path: str) -> None:
    """Write a dimod ``BinaryQuadraticModel`` to ``path`` in dimod's own serialization
    (``bqm.to_file()``; read back with ``dimod.BinaryQuadraticModel.from_file(open(path, "rb"))``),
    atomically (:mod:`isingattn.atomic`)."""
    import shutil

    from isingattn import atomic

    with bqm.to_file() as src, atomic.writing(path, "wb") as f:
        shutil.copyfileobj(src, f)
