"""The data every fitting method and score starts from: spins checked and converted, weights
normalized, the coupling pattern (a graph or all pairs), and the data's moments.

A fit's parameters are ``h [n]`` and one weight per allowed coupling, ``w [E]`` on the
pattern's edge list ``(i_e, j_e)``, ``i_e < j_e`` (all ``n(n-1)/2`` pairs, row-major, when no
graph is given): ``J_ij = J_ji = w_e``. Every method optimizes over ``(h, w)``, so a graph
limits the couplings by construction.
"""

from __future__ import annotations

import functools
import math
import warnings
from typing import NamedTuple, Optional

import jax
import jax.numpy as jnp
import numpy as np

from isingattn.errors import IsingInputError, IsingTypeError
from isingattn.sparse import CouplingGraph, SparseCouplings

__all__ = ["DataWarning", "Data", "Pattern", "prepare", "spins_from_data", "pattern_from_graph", "couplings",
           "CHUNK_ELEMENTS", "check_weights"]

# Work arrays of a chunk of samples hold at most about this many elements (e.g. the
# [B, n, d] neighbour gathers of a sparse local field): 2^25 float32 = 128 MiB.
CHUNK_ELEMENTS = 2**25


class DataWarning(UserWarning):
    """Data that a fit accepted but changed or that it cannot learn from as given (0/1
    values converted to spins, spins constant in the data)."""


class Pattern(NamedTuple):
    """Which couplings may be non-zero: ``n`` spins and the edge list ``edges [E, 2]``
    (numpy int32, ``i < j``). ``graph`` is the :class:`~isingattn.sparse.CouplingGraph`
    when one was given (None: all pairs, the dense case)."""

    n: int
    edges: np.ndarray
    graph: Optional[CouplingGraph]

    @property
    def dense(self) -> bool:
        return self.graph is None

    @property
    def E(self) -> int:
        return int(self.edges.shape[0])


class Data(NamedTuple):
    """Checked training data on the device.

    All arrays are numpy, on the host (they go to the device as arguments of the jitted
    programs, so small glue computations compile nothing): spins ``[S, n]`` int8 in
    {-1, +1}; p: ``[S]`` weights normalized to sum 1 (in the fit's dtype); total_weight: the
    weights' sum before normalizing (the number of samples when none were given); mean:
    ``[n]`` ``⟨s_i⟩_data``; pair: ``[E]`` ``⟨s_i s_j⟩_data`` on the pattern's edges; constant:
    indices of the spins that never change sign; patterns: on a low-degree graph, the
    local-pattern counts ``(counts [n, P], X [P, d+1])`` of :func:`pattern_counts` (the
    moments above are computed from them), else None.
    """

    spins: np.ndarray
    p: np.ndarray
    total_weight: float
    mean: np.ndarray
    pair: np.ndarray
    pattern: Pattern
    constant: tuple
    patterns: Optional[tuple] = None

    @property
    def n(self) -> int:
        return self.pattern.n

    @property
    def num_samples(self) -> int:
        return int(self.spins.shape[0])

    @property
    def dtype(self):
        return self.p.dtype


def spins_from_data(samples, *, name: str = "samples", min_samples: int = 2, warn: bool = True) -> np.ndarray:
    """``samples [S, n]`` in {-1, +1} or {0, 1} (bool counts as 0/1) -> int8 spins ``[S, n]``.

    0/1 data are converted by ``s = 2x - 1`` with a :class:`DataWarning` that says so. Data
    that contain only 1s are read as spins. Anything else (other values, NaN, a wrong number
    of axes, fewer than ``min_samples`` rows, no spins) raises ``IsingInputError``."""
    try:
        x = np.asarray(samples)
    except Exception as err:  # ragged lists and the like
        raise IsingTypeError(f"{name} must be an [S, n] array of spins; could not read it as an array ({err}).") from None
    if x.dtype == object or not (np.issubdtype(x.dtype, np.number) or x.dtype == np.bool_):
        raise IsingTypeError(f"{name} must be a numeric [S, n] array of -1/+1 or 0/1 values; got dtype {x.dtype}.")
    if np.issubdtype(x.dtype, np.complexfloating):
        raise IsingTypeError(f"{name} must be real (-1/+1 or 0/1); got dtype {x.dtype}.")
    if x.ndim != 2:
        raise IsingInputError(f"{name} must have shape [S, n] (one row per sample, one column per spin); got "
                              f"{x.ndim} axes, shape {x.shape}." + (" Reshape one sample with x[None, :]." if x.ndim == 1 else ""))
    S, n = x.shape
    if n < 1:
        raise IsingInputError(f"{name} has no spins (shape {x.shape}); an Ising model needs at least one column.")
    if S < min_samples:
        raise IsingInputError(f"{name} has {S} sample(s); fitting needs at least {min_samples} rows "
                              f"(shape {x.shape}).")
    if x.dtype == np.bool_:
        x = x.astype(np.int8)
    elif np.issubdtype(x.dtype, np.floating) and not np.all(np.isfinite(x)):
        bad = np.argwhere(~np.isfinite(x))[0]
        raise IsingInputError(f"{name} holds non-finite values (NaN or inf), the first at row {bad[0]}, column "
                              f"{bad[1]}: {x[tuple(bad)]}. Drop or impute those samples first.")
    # the alphabet, from O(1) extra passes (no sort: a 20,000 x 10,000 data set is 200 MB)
    lo, hi = x.min(), x.max()
    if np.issubdtype(x.dtype, np.integer):
        ok = lo >= -1 and hi <= 1
    else:
        ok = lo >= -1 and hi <= 1 and bool(np.all((x == 1) | (x == -1) | (x == 0)))
    has0 = ok and bool(np.any(x == 0))
    if ok and not has0:
        return x.astype(np.int8, copy=False)
    if ok and lo >= 0:
        if warn:
            warnings.warn(f"{name} hold 0/1 values; converted to spins by s = 2x - 1 (0 -> -1, 1 -> +1).",
                          DataWarning, stacklevel=3)
        return (2 * x.astype(np.int8) - 1).astype(np.int8, copy=False)
    other = np.unique(x[(x != 1) & (x != -1) & (x != 0)][:10000])
    detail = (f"values outside both alphabets: {other[:6].tolist()}" if other.size else
              "-1, 0 and +1 together (0 is not a spin, and -1 is not a bit)")
    raise IsingInputError(f"{name} must be spins in {{-1, +1}} or bits in {{0, 1}}; got {detail}. "
                          "Binarize the data first (e.g. s = np.where(x > threshold, 1, -1)).")


def check_weights(weights, S: int, min_positive: int = 2) -> np.ndarray:
    """``weights [S]`` as float64, checked: finite, non-negative, at least ``min_positive`` positive."""
    try:
        w = np.asarray(weights, np.float64)
    except Exception:
        raise IsingTypeError(f"weights must be a 1-D array of {S} non-negative numbers (counts); got "
                             f"{type(weights).__name__}.") from None
    if w.shape != (S,):
        raise IsingInputError(f"weights must have shape [S] = ({S},), one per sample; got shape {w.shape}.")
    if not np.all(np.isfinite(w)):
        raise IsingInputError("weights must be finite; got NaN or inf.")
    if np.any(w < 0):
        k = int(np.flatnonzero(w < 0)[0])
        raise IsingInputError(f"weights must be non-negative (they are counts or probabilities); weights[{k}] = {w[k]}.")
    if np.count_nonzero(w) < min_positive:
        raise IsingInputError(f"weights give positive weight to {np.count_nonzero(w)} sample(s); at least "
                              f"{min_positive} must be positive.")
    return w


def pattern_from_graph(graph, n: int) -> Pattern:
    """The coupling pattern of ``graph``: None (all pairs), a
    :class:`~isingattn.sparse.CouplingGraph` on ``n`` spins, or a networkx graph whose
    nodes are the columns: the integers ``0..n-1``, or ``n`` labels in column order."""
    if graph is None:
        i, j = np.triu_indices(n, 1)
        return Pattern(n, np.stack([i, j], axis=1).astype(np.int32), None)
    if isinstance(graph, CouplingGraph):
        if graph.n != n:
            raise IsingInputError(f"graph has {graph.n} spins but the samples have n = {n} columns; build the "
                                  "CouplingGraph on the data's spins.")
        return Pattern(n, np.asarray(graph.edges, np.int32), graph)
    if hasattr(graph, "nodes") and hasattr(graph, "edges"):  # a networkx graph (duck-typed: no import needed)
        nodes = list(graph.nodes)
        if len(nodes) != n:
            raise IsingInputError(f"the networkx graph has {len(nodes)} nodes but the samples have n = {n} columns; "
                                  "give one node per column.")
        pos = ({v: v for v in nodes} if all(isinstance(v, (int, np.integer)) and not isinstance(v, bool) for v in nodes)
               and set(nodes) == set(range(n)) else {v: k for k, v in enumerate(nodes)})
        edges = []
        pairs = [tuple(e)[:2] for e in graph.edges]  # a MultiGraph's edges carry a key as well
        seen = set()
        for u, v in pairs:
            if frozenset((u, v)) in seen:
                raise IsingInputError(f"the networkx graph has more than one edge between nodes {u!r} and {v!r} (a "
                                      "MultiGraph or a directed graph with both directions); a pair of spins has one "
                                      "coupling. Pass networkx.Graph(graph).")
            seen.add(frozenset((u, v)))
        for u, v in pairs:
            if u == v:
                raise IsingInputError(f"the networkx graph has a self-loop on node {u!r}; couplings need two distinct "
                                      "spins. Remove it.")
            edges.append((pos[u], pos[v]))
        g = CouplingGraph(n, np.asarray(edges, np.int64).reshape(-1, 2))
        return Pattern(n, np.asarray(g.edges, np.int32), g)
    raise IsingTypeError(f"graph must be None (all pairs), an isingattn.sparse.CouplingGraph or a networkx graph; got "
                         f"{type(graph).__name__}.")


def chunk_rows(S: int, per_row: int) -> int:
    """Rows per chunk so that a chunk's work arrays hold about :data:`CHUNK_ELEMENTS`."""
    return max(1, min(S, CHUNK_ELEMENTS // max(1, per_row)))


def padded_chunks(x: np.ndarray, B: int, fill=0) -> np.ndarray:
    """``x [S, ...]`` (numpy) -> ``[ceil(S/B), B, ...]``, padded with ``fill`` (weights pad with 0)."""
    S = x.shape[0]
    k = -(-S // B)
    pad = k * B - S
    if pad:
        x = np.concatenate([x, np.full((pad,) + x.shape[1:], fill, x.dtype)])
    return x.reshape((k, B) + x.shape[1:])


PATTERN_ELEMENTS = 2**24  # n · 2^(d+1) pattern counts at most (128 MiB of float64)


def pattern_counts(spins, p, graph: Optional[CouplingGraph]):
    """The weighted counts of every spin's local pattern, ``counts [n, P]`` (``P = 2^(d+1)``,
    ``Σ_P counts[i] = 1``) and the patterns ``X [P, d+1]`` in ±1: bit ``k`` of pattern ``c`` is
    ``s_nbr(i, k) > 0`` (bit 0: ``s_i``; padding slots repeat ``s_i`` and carry weight 0).
    Spin ``i``'s conditional, and every moment on the graph's edges, depend on the data only
    through these counts (:mod:`isingattn.learn.plm`). One pass over ``spins [S, n]`` (int8)
    with weights ``p [S]`` (summing to 1), in chunks of rows, in float64; None for all pairs
    or where the counts would not pay (``2P > S``, or more than ``PATTERN_ELEMENTS``)."""
    S, n = spins.shape
    if graph is None:
        return None
    d = graph.max_degree
    P = 2 ** (d + 1)
    if 2 * P > S or n * P > PATTERN_ELEMENTS:
        return None
    cols = np.concatenate([np.arange(n, dtype=np.int64)[:, None], graph.nbr], axis=1)  # [n, d+1]
    shift = np.arange(d + 1)
    ct = np.uint8 if d < 8 else np.uint16 if d < 16 else np.uint32  # the codes' type: d+1 bits
    counts = np.zeros((n, P))
    B = max(1, 2**24 // n)
    p = np.asarray(p, np.float64)
    uniform = bool(np.all(p == p[0]))
    for a in range(0, S, B):
        up = np.ascontiguousarray((spins[a:a + B] > 0).T).view(np.uint8)  # [n, b] 0/1, spin-major
        code = up.astype(ct)
        for k in range(1, d + 1):
            code |= up[cols[:, k]].astype(ct) << ct(k)  # row gathers: neighbour k of every spin
        w = None if uniform else p[a:a + B]
        # one short bincount per spin (a contiguous row) beats one over n·b flat indices, whose
        # int64 index array alone costs more than all of these
        for i in range(n):
            counts[i] += np.bincount(code[i], weights=w, minlength=P)
    if uniform:
        counts *= p[0]
    X = np.where((np.arange(P)[:, None] >> shift) & 1, 1, -1).astype(np.int8)
    return counts, X


def pattern_moments(counts, X, graph: CouplingGraph):
    """``⟨s_i⟩ [n]`` and ``⟨s_i s_j⟩ [E]`` (on ``graph.edges``) from :func:`pattern_counts`."""
    m = counts @ (X[:, :1] * X).astype(np.float64)  # [n, d+1]: ⟨s_i s_nbr(i, k)⟩ (column 0: s_i² = 1)
    mean = counts @ X[:, 0].astype(np.float64)
    pair = np.zeros(graph.E)
    valid = graph.slot < graph.E
    pair[graph.slot[valid]] = m[:, 1:][valid]
    return mean, pair


def edge_moments(spins, p, edges: np.ndarray, dense: bool, dtype):
    """``⟨s_i⟩ [n]`` and ``⟨s_i s_j⟩ [E]`` (numpy) of int8 spins ``[S, n]`` under weights
    ``p [S]``, in chunks of samples (a GEMM for all pairs, a gather per edge for a graph)."""
    S, n = spins.shape
    B = chunk_rows(S, n if dense else max(n, edges.shape[0]))
    m, c = _edge_moments(padded_chunks(spins, B), padded_chunks(p, B), edges[:, 0], edges[:, 1], dense=dense)
    return np.asarray(m), np.asarray(c)


@functools.partial(jax.jit, static_argnames=("dense",))
def _edge_moments(xs, ps, i, j, *, dense: bool):
    dtype, n = ps.dtype, xs.shape[-1]

    def body(c, xp):
        x, q = xp
        s = x.astype(dtype)
        m = c[0] + q @ s
        if dense:
            return (m, c[1] + (s * q[:, None]).T @ s), None
        return (m, c[1] + q @ (s[:, i] * s[:, j])), None

    second = jnp.zeros((n, n) if dense else (i.shape[0],), dtype)
    (m, c), _ = jax.lax.scan(body, (jnp.zeros((n,), dtype), second), (xs, ps))
    return m, (c[i, j] if dense else c)


def prepare(samples, *, graph=None, weights=None, dtype=None, l2: float = 0.0, method: str = "fit") -> Data:
    """Check and convert the data of a fit (see :func:`isingattn.learn.fit`).

    Returns :class:`Data`. Spins constant in the data get a :class:`DataWarning` naming
    them; with ``l2 = 0`` their maximum-likelihood field is infinite, so that is refused."""
    s = spins_from_data(samples, warn=True)
    S, n = s.shape
    dtype = jnp.dtype(jnp.result_type(float) if dtype is None else dtype)
    if not jnp.issubdtype(dtype, jnp.floating):
        raise IsingTypeError(f"dtype must be a floating dtype (float32 or float64); got {dtype}.")
    if jax.dtypes.canonicalize_dtype(dtype) != dtype:
        raise IsingInputError(f"dtype={dtype} needs JAX's 64-bit mode (jax.config.update('jax_enable_x64', True)); "
                              f"without it JAX computes in {jax.dtypes.canonicalize_dtype(dtype)}. Enable it or pass "
                              "dtype=np.float32.")
    w = np.ones(S) if weights is None else check_weights(weights, S)
    with np.errstate(over="ignore"):
        total = float(w.sum())  # may overflow (weights near 1e308): then normalized from w / max(w)
    if not math.isfinite(total):
        w = w / w.max()
    pattern = pattern_from_graph(graph, n)
    used = s if weights is None else s[w > 0]
    lo, hi = used.min(0), used.max(0)
    constant = tuple(int(k) for k in np.flatnonzero(lo == hi))
    if constant:
        shown = ", ".join(f"{k} (always {int(lo[k]):+d})" for k in constant[:8]) + (" ..." if len(constant) > 8 else "")
        if l2 <= 0:
            raise IsingInputError(f"{method}: spin(s) {shown} never change sign in the data, so their maximum-"
                                  "likelihood fields are infinite. Pass l2 > 0 (the default) to keep the fit finite, "
                                  "or drop those columns.")
        warnings.warn(f"{method}: {len(constant)} spin(s) are constant in the data: {shown}. Their fields are set by "
                      f"the regularizer (l2 = {l2:g}), not by the data, and their couplings stay near 0.",
                      DataWarning, stacklevel=3)
    p64 = w / w.sum()
    p = p64.astype(dtype)
    pc = pattern_counts(s, p64, pattern.graph)
    if pc is None:
        mean, pair = edge_moments(s, p, pattern.edges, pattern.dense, dtype)
    else:  # the graph's moments are sums over the pattern counts: one pass over the data for both
        mean, pair = (x.astype(dtype) for x in pattern_moments(*pc, pattern.graph))
        pc = (pc[0].astype(dtype), pc[1])
    return Data(s, p, total, mean, pair, pattern, constant, pc)


def couplings(pattern: Pattern, w: np.ndarray, *, sparse: bool):
    """``J`` from concrete edge weights ``w [E]``: :class:`~isingattn.sparse.SparseCouplings`
    on the pattern's graph (``sparse``) or the dense symmetric ``[n, n]`` (numpy)."""
    w = np.asarray(w)
    if sparse:
        g = pattern.graph if pattern.graph is not None else CouplingGraph(pattern.n, pattern.edges)
        return SparseCouplings(g, w)
    i, j = pattern.edges[:, 0], pattern.edges[:, 1]
    J = np.zeros((pattern.n, pattern.n), w.dtype)
    J[i, j] = w
    J[j, i] = w
    return J


def output_sparse(pattern: Pattern, sparse: Optional[bool]) -> bool:
    """Whether the fitted model gets sparse couplings: as asked, else when a graph was
    given for ``n ≥ 64`` spins with at most 10% of the pairs coupled (the rule of
    ``IsingModel.from_bqm``)."""
    if sparse is not None:
        return bool(sparse)
    n = pattern.n
    return pattern.graph is not None and n >= 64 and pattern.E <= 0.1 * n * (n - 1) / 2


def total_pairs(n: int) -> int:
    return math.comb(n, 2)
