"""``Planar``: exact ``log Z`` and edge correlations of zero-field Ising models on planar
graphs and on the square-lattice torus, at any size, by Pfaffians (Kasteleyn; Fisher).

``Z = 2^n Π_e cosh(βJ_e) · Σ_{even F} Π_{e∈F} tanh(βJ_e)`` and the sum is ``|Pf(K)|`` for the
Kasteleyn matrix ``K`` of the expanded graph (:mod:`isingattn.inference.planar.kasteleyn`);
``log|Pf(K)| = ½ log|det K|`` from a sparse LU. On the torus the sum is a signed combination
of four Pfaffians (periodic or antiperiodic wrap edges in each direction, Kaufman's four
terms); their signs come from one sparse LU of the planar part and a dense Pfaffian of the
wrap edges' block (:func:`isingattn.inference.planar.pfaffian.update_ratio`).
"""

from __future__ import annotations

import functools
import math
from typing import ClassVar, Optional

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from isingattn import validate as V
from isingattn.engine import ConvergenceWarning, Engine
from isingattn.errors import IsingInputError
from isingattn.inference.planar.kasteleyn import Dimer, build_lattice, build_planar, lattice_kind
from isingattn.inference.planar.pfaffian import SparseSkew, update_ratio, woodbury_core
from isingattn.marginals import Label, Marginals
from isingattn.model import IsingModel, is_traced
from isingattn.sparse import CouplingGraph, SparseCouplings

_ELSEWHERE = ("use engine 'junction-tree' (exact on graphs of moderate treewidth, fields allowed) or 'pa' "
              "(population annealing: log Z with a standard error on any graph)")


class Planar(Engine):
    """Exact ``log Z`` (and, with ``edge_corr=True``, ``⟨s_i s_j⟩`` on every edge) of zero-field
    models on planar graphs and on the square-lattice torus, at 10^4–10^6 spins.

    ``mean`` is 0 (spin-flip symmetry at ``h = 0``); ``log_z [...]`` is float64 (numpy) whatever
    the model's dtype: it is a reference. ``info``: ``log_z_kind = "exact"``; ``graph_kind``,
    ``"lattice"`` (open square lattice), ``"torus"`` or ``"planar"``; ``edges [E, 2]``, the
    coupling graph's edges (``i < j``) in the order of ``edge_corr [..., E]`` (with
    ``edge_corr=True``): a sparse model's ``graph.edges``, or the nonzero pairs ``i < j`` of a
    dense ``J`` (over the batch) in row-major order; ``stable [...]`` (bool), False where the
    torus' signed sum of Pfaffians came out ≤ 0 or ``log Z`` is not finite (round-off: the
    value is then NaN, with a warning).

    Which graphs (read from the couplings' nonzero pattern, or a sparse model's edge list):

    * an open square lattice in ``graphs.lattice((L, M))`` order (row-major, any subset of its
      bonds): a fixed 4-node city per spin, no planarity test;
    * the torus ``graphs.lattice((L, M), periodic=True)`` (``L, M ≥ 3``, any subset of its
      bonds, in that order): four Pfaffians;
    * any other planar graph, in any labelling: networkx's ``check_planarity`` embeds it and
      the expanded graph (pure Python, so slower to set up than the lattice path; the setup is
      cached per graph).

    Refused with ``IsingInputError``: a model with a nonzero field, a graph that is neither
    planar nor a lattice torus in that order, and a traced model (the engine runs on the host,
    outside ``jit``). Masks are honoured (an inactive spin leaves the graph); causal models are
    solved prefix by prefix by the engine template.

    Cost: ``log Z`` is one sparse LU per model of the batch (``N = 4n`` nodes on the lattice;
    planar separators bound a good order's work by ``O(N^{3/2})`` and its fill by
    ``O(N log N)``; SuperLU's minimum-degree order comes near: benchmarks/README.md); the torus
    adds ``2(L+M)`` solves and a dense ``2(L+M)`` Pfaffian. ``edge_corr`` needs one entry of
    ``K⁻¹`` per edge, by one sparse solve per edge: ``O(E · nnz(LU))``, far above ``log Z``'s
    cost from ~10^3 spins on (a selected inversion would remove it); the torus also keeps
    ``K⁻¹``'s ``2(L+M)`` wrap columns (``N × 2(L+M)`` floats).

    Accuracy (float64, as tested): ``log Z`` against brute force to 1e-11 absolute and
    against Kaufman to 1e-8 relative; edge correlations to 1e-9. On a
    frustrated torus at low temperature the four Pfaffians nearly cancel against the planar
    part (ratios ~1e-2, a Woodbury core with condition ~1e5 on the 4×4 ±J glass at β = 2), and
    correlations there come out to ~3e-8.

    Not differentiable through JAX (a host computation); ``edge_corr`` is the gradient,
    ``∂ log Z / ∂(βJ_e) = ⟨s_i s_j⟩``.
    """

    exact: ClassVar[bool] = True
    jit: ClassVar[bool] = False  # scipy's sparse LU on the host
    sparse_native: ClassVar[bool] = True  # the edge list is the graph; a dense J is read for its nonzeros
    warn_flags: ClassVar[tuple] = (("stable", ConvergenceWarning),)
    edge_corr: bool = eqx.field(static=True, default=False, converter=V.plain)

    def __check_init__(self):
        V.boolean("edge_corr", self.edge_corr, owner="Planar")

    def _warning(self, flag, info, bad, total):
        return (f"Planar: log Z is not finite for {bad} of {total} model(s) (the torus' signed sum of four "
                "Pfaffians lost its value to round-off); those entries are NaN.")

    def _prepare(self, model: IsingModel) -> "Planar":
        """The refusals, on the host before any work (so that ``prepared`` tells whether Planar
        applies): a nonzero field, a graph neither planar nor a lattice torus."""
        if not is_traced(model.h, model.J.weights if model.is_sparse else model.J):
            h, J = model.masked_parameters()
            _check_fields(h, model.batch_shape, model.n)
            graph, _ = _edge_list(J, model.n)
            if graph.E:
                _dimer(graph)  # cached: the embedding is built once
        return self

    def _marginals(self, model: IsingModel, key: Optional[jax.Array]) -> Marginals:
        if is_traced(model.h, model.beta, model.J.weights if model.is_sparse else model.J,
                     *(() if model.mask is None else (model.mask,))):
            raise IsingInputError("Planar runs on the host (scipy's sparse LU), so it needs a concrete model; got "
                                  "traced values (inside jax.jit, grad or vmap). Call it outside jit.")
        h, J = model.masked_parameters()
        batch = model.batch_shape
        _check_fields(h, batch, model.n)
        graph, weights = _edge_list(J, model.n)
        beta = float(model.beta)
        weights = np.broadcast_to(weights, batch + (graph.E,)).reshape(math.prod(batch), graph.E)
        act = model.active()
        inactive = (np.zeros(weights.shape[0]) if act is None else
                    (~np.broadcast_to(np.asarray(act), batch + (model.n,))).reshape(-1, model.n).sum(-1))
        dimer = _dimer(graph) if graph.E else None
        log_z = np.empty(weights.shape[0])
        corr = np.empty(weights.shape) if self.edge_corr else None
        for b in range(weights.shape[0]):
            x = beta * weights[b]
            lz, c = solve(dimer, x, self.edge_corr)
            log_z[b] = (model.n - inactive[b]) * math.log(2.0) + lz
            if corr is not None:
                corr[b] = c
        log_z = log_z.reshape(batch)
        info = {"log_z_kind": Label("exact"), "graph_kind": Label("lattice" if dimer is None else dimer.kind),
                "edges": graph.edges, "stable": np.isfinite(log_z)}
        if corr is not None:
            info["edge_corr"] = corr.reshape(batch + (graph.E,))
        return Marginals(mean=jnp.zeros(batch + (model.n,), model.dtype), log_z=log_z, info=info)


def _check_fields(h, batch, n: int) -> None:
    """Refuse a nonzero field (Planar's Pfaffian counts even subgraphs, which a field breaks)."""
    h = np.broadcast_to(np.asarray(h, np.float64), tuple(batch) + (n,))
    if np.any(h != 0):
        k = int(np.count_nonzero(np.any(h.reshape(-1, n) != 0, axis=0)))
        raise IsingInputError(
            f"Planar computes zero-field models only (its Pfaffian counts even subgraphs, which a field breaks); "
            f"this model has a nonzero field on {k} spin(s). For fields, {_ELSEWHERE}.")


def _edge_list(J, n: int):
    """``(CouplingGraph, weights [..., E] float64)`` of couplings ``J`` (sparse, or the nonzero
    pairs of a dense ``J`` over its batch)."""
    if isinstance(J, SparseCouplings):
        return J.graph, np.asarray(J.weights, np.float64)
    Jn = np.asarray(J, np.float64)
    nz = np.any(np.triu(Jn.reshape((-1, n, n)), 1) != 0, axis=0)
    i, j = np.nonzero(nz)
    return CouplingGraph(n, np.stack([i, j], axis=1)), Jn[..., i, j]


@functools.lru_cache(maxsize=8)
def _dimer(graph: CouplingGraph) -> Dimer:
    """The expanded graph of ``graph`` (cached: a sweep over β or a batch reuses it)."""
    found = lattice_kind(graph.n, graph.edges)
    if found is not None:
        return build_lattice(graph.n, graph.edges, *found)
    d = build_planar(graph.n, graph.edges)
    if d is None:
        raise IsingInputError(
            f"Planar needs a planar coupling graph or the square-lattice torus graphs.lattice((L, M), periodic=True) "
            f"in its row-major order; this graph ({graph.n} spins, {graph.E} edges) is neither (networkx's "
            f"check_planarity found a Kuratowski subgraph, and no L × M torus holds its edges). For it, {_ELSEWHERE}.")
    return d


def _log_cosh(x):
    a = np.abs(x)
    return a + np.log1p(np.exp(-2.0 * a)) - math.log(2.0)


def solve(dimer: Optional[Dimer], x: np.ndarray, want_corr: bool):
    """``(log Z - n log 2, edge correlations [E] or None)`` for couplings ``x = βJ [E]``
    (float64) on the expanded graph ``dimer`` (None: no edges)."""
    if dimer is None:
        return 0.0, (np.zeros(0) if want_corr else None)
    t = np.tanh(x)
    base = float(np.sum(_log_cosh(x)))
    if dimer.kind == "torus":
        log_sum, corr = _torus(dimer, t, want_corr)
        return base + log_sum, corr
    lu = SparseSkew(dimer.matrix(t))
    corr = None
    if want_corr:
        on = dimer.in_k
        inv = lu.entries(dimer.edge_v[on], dimer.edge_u[on])  # K⁻¹[v, u]: ½ ∂ log det K / ∂K[u, v]
        corr = t.copy()  # a bridge's correlation is t_e
        corr[on] = t[on] + dimer.edge_sign[on] * (1.0 - t[on] ** 2) * inv
    return base + lu.log_abs_pf, corr


def _torus(dimer: Dimer, t: np.ndarray, want_corr: bool):
    """``(log Σ_c W_c, correlations [E] or None)`` on the torus: ``Σ_c W_c = W_planar · T`` with
    ``T = Σ_ab coef_ab R_ab``, ``coef_ab = ¼ Σ_c ε_c (-1)^{a c₁ + b c₂}`` and ``R_ab = Pf(K_ab) /
    Pf(K_planar)`` (signed; :func:`update_ratio`), all from one LU of the planar part.

    Correlations: ``∂ log T / ∂t_e = Σ_ab ω_ab σ_e(ab) K_ab⁻¹[v_e, u_e]`` with ``ω_ab = coef_ab R_ab / T``
    (``∂ Pf / ∂K[u, v] = Pf · K⁻¹[v, u]``) and each ``K_ab⁻¹`` entry from ``K_planar⁻¹`` by Woodbury."""
    planar = SparseSkew(dimer.matrix(t, keep=dimer.wrap == 0))
    wrap = np.flatnonzero((dimer.wrap > 0) & (t != 0))
    S = np.ravel(np.stack([dimer.edge_u[wrap], dimer.edge_v[wrap]], axis=1))
    X = planar.columns(S) if want_corr else None  # K_planar⁻¹[:, S]
    G = (X[S] if want_corr else planar.columns(S, rows=S)) if wrap.size else np.zeros((0, 0))
    G = 0.5 * (G - G.T)  # skew up to round-off
    terms = []  # (signed coefficient times sign of R_ab, log|coef R_ab|, flips [E], M_ab)
    for a in (0, 1):
        for b in (0, 1):
            flips = np.where(dimer.wrap == 1, (-1.0) ** a, np.where(dimer.wrap == 2, (-1.0) ** b, 1.0))
            c = t[wrap] * dimer.edge_sign[wrap] * flips[wrap]
            s, lr = update_ratio(G, c)
            coef = 0.25 * sum(dimer.class_sign[c1, c2] * (-1.0) ** (a * c1 + b * c2) for c1 in (0, 1) for c2 in (0, 1))
            if coef != 0:
                terms.append((s * np.sign(coef), lr + math.log(abs(coef)), flips, c))
    logs = np.array([x[1] for x in terms])
    top = np.max(logs)
    parts = np.array([x[0] for x in terms]) * np.exp(logs - top)
    total = float(np.sum(parts))
    if not total > 0:
        return math.nan, (np.full(t.shape, np.nan) if want_corr else None)
    log_sum = planar.log_abs_pf + top + math.log(total)
    if not want_corr:
        return log_sum, None
    on = dimer.in_k
    u, v = dimer.edge_u[on], dimer.edge_v[on]
    P = planar.entries(v, u)  # K_planar⁻¹[v, u], wrap edges included (entries of the inverse)
    grad = np.zeros(on.sum())
    for (_, _, flips, c), omega in zip(terms, parts / total):
        Kinv = P + (np.einsum("ek,ek->e", X[v] @ np.linalg.inv(woodbury_core(G, c)), X[u]) if wrap.size else 0.0)
        grad += omega * dimer.edge_sign[on] * flips[on] * Kinv
    corr = t.copy()
    corr[on] = t[on] + (1.0 - t[on] ** 2) * grad
    return log_sum, corr
