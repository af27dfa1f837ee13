"""Exact inference on any coupling graph of moderate treewidth: the junction tree
(DESIGN.md §3, "Junction tree / variable elimination").

The spins are summed out one clique at a time in an elimination order chosen on the host
(:mod:`~isingattn.inference.junction_tree.order`, the cheapest of several heuristics, or the
user's), planned once per graph (:mod:`~isingattn.inference.junction_tree.plan`) and contracted
in JAX by batched log-sum-exp scans (:mod:`~isingattn.inference.junction_tree.contract`): log Z
by the upward pass, every mean and edge correlation by the downward pass. Cost ``O(Σ 2^{|C|})``
per model over the cliques ``C`` (``≤ n 2^{w+1}`` for width ``w``), memory about the same.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from typing import ClassVar, Optional, Sequence, Union

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from isingattn import validate as V
from isingattn.engine import Engine
from isingattn.errors import IsingInputError, IsingTypeError
from isingattn.inference.junction_tree.contract import contract, moments
from isingattn.inference.junction_tree.order import HEURISTICS, check_order, heuristic_order
from isingattn.inference.junction_tree.plan import Plan
from isingattn.marginals import Label, Marginals, linear_response_corr
from isingattn.model import IsingModel, is_traced
from isingattn.sparse import CouplingGraph, SparseCouplings

MAX_BYTES = 2**31  # default memory budget of one call (the saved tables of a batch)


@functools.lru_cache(maxsize=32)
def plan_for(graph: CouplingGraph, order: Union[str, tuple]) -> Plan:
    """The contraction plan of ``graph`` in ``order``: a heuristic's name, ``"auto"`` (the
    least work of min-fill, min-degree, natural and rcm), or a tuple of
    spin indices. Cached per (graph, order)."""
    n, edges = graph.n, graph.edges
    if isinstance(order, tuple):
        return Plan(n, edges, list(order), "given")
    names = HEURISTICS if order == "auto" else (order,)
    plans = [Plan(n, edges, heuristic_order(h, n, edges), h) for h in names]
    return min(plans, key=lambda p: (p.work, p.treewidth))


def pattern(J) -> CouplingGraph:
    """The coupling graph of a concrete dense ``J [..., n, n]``: every pair ``i < j`` with
    ``J_ij != 0`` in some model of the batch."""
    J = np.asarray(J)
    n = J.shape[-1]
    nz = np.any(np.triu(J.reshape((-1, n, n)), 1) != 0, axis=0)
    return CouplingGraph(n, np.argwhere(nz))


@functools.lru_cache(maxsize=8)
def complete_graph(n: int) -> CouplingGraph:
    """Every pair of ``n`` spins: the graph assumed for a traced dense ``J``."""
    return CouplingGraph(n, np.argwhere(np.triu(np.ones((n, n), bool), 1)))


def _too_wide(plan: Plan, need: int, budget: int, batch: int) -> str:
    return (f"JunctionTree: this graph's elimination has width {plan.treewidth} (the best order found: "
            f"{plan.heuristic}; cliques of up to {plan.treewidth + 1} spins, {plan.entries:,} table entries per "
            f"model), so the contraction needs {need / 2**30:.3g} GiB for {batch} model(s), over the memory budget "
            f"max_bytes = {budget / 2**30:.3g} GiB. Raise max_bytes if you have the memory, give a better "
            "elimination order (order=[...]), solve fewer models per call, or use an approximate engine "
            "(pa, pt, gibbs, meanfield-bp)." + (" This J is dense and traced (inside jax.jit, grad or vmap), so "
            "its zeros are unknown and every pair is taken as coupled: pass graph=CouplingGraph(n, edges), prepare "
            "the engine on a concrete model (engine.prepared(model)), or use sparse couplings."
            if plan.E == plan.n * (plan.n - 1) // 2 and plan.n > 3 else ""))


class JunctionTree(Engine):
    """Exact marginals, edge correlations and ``log Z`` on any coupling graph whose treewidth
    fits the memory budget, by variable elimination on a junction tree.

    Models of one batch share the graph (dense ``J``: the pattern of its nonzeros over the
    batch; sparse ``J``: its :class:`~isingattn.sparse.CouplingGraph`) and are contracted
    together. Differentiable in ``h``, ``J`` and ``beta`` (reverse mode): the gradient of
    ``log Z`` is the moments already computed (a custom VJP, no further pass); gradients of
    the means (second order) are autodiff through both passes. Honours ``mask``; causal models
    are solved per prefix bucket by the engine template.

    Outputs: ``mean [..., n]``, ``log_z [...]``, ``info["edge_corr"] [..., E]`` (``⟨s_i s_j⟩``
    on the graph's edges, in the order of ``model.J.graph.edges`` for sparse ``J``, of the
    nonzero pairs ``i < j`` in row-major order for dense ``J``), ``info["treewidth"] [...]``,
    ``info["elimination_order"] [..., n]`` (the spins in the order they are summed out) and,
    with ``corr=True``, the full ``corr [..., n, n]`` by linear response (one forward-mode
    pass per spin: for modest ``n``). Exact samples: :func:`~isingattn.inference.junction_tree.sample_junction_tree`.

    Args:
        order: ``"auto"`` (default: min-fill, min-degree, the given order and reverse
            Cuthill–McKee, keeping the one of least work), one of those names
            (``"min-fill"``, ``"min-degree"``, ``"natural"``, ``"rcm"``), or a sequence of the
            ``n`` spin indices.
        corr: also return the full ``⟨s_j s_k⟩`` matrix.
        max_bytes: memory budget of one call; a graph whose contraction needs more (it grows
            as ``2^width``) is refused with ``IsingInputError`` naming the width and the memory.
        graph: the coupling graph, for dense ``J`` traced under ``jax.jit`` or ``grad`` (None:
            read from the model: a sparse graph, the nonzeros of a concrete dense ``J``, or every
            pair for a traced dense ``J``, which the budget refuses beyond about 25 spins; a given
            graph must contain every nonzero coupling).
    """

    exact: ClassVar[bool] = True
    sparse_native: ClassVar[bool] = True
    warn_flags: ClassVar[tuple] = ()
    spin_info: ClassVar[tuple] = ("elimination_order",)
    order: Union[str, tuple] = eqx.field(static=True, default="auto")
    corr: bool = eqx.field(static=True, default=False, converter=V.plain)
    max_bytes: int = eqx.field(static=True, default=MAX_BYTES, converter=V.plain)
    graph: Optional[CouplingGraph] = eqx.field(static=True, default=None)

    def __check_init__(self):
        if isinstance(self.order, str):
            if self.order not in ("auto",) + HEURISTICS:
                raise IsingInputError(f"JunctionTree: order must be 'auto', one of {', '.join(HEURISTICS)}, or a "
                                      f"sequence of spin indices; got {self.order!r}.")
        elif not isinstance(self.order, tuple):
            raise IsingTypeError(f"JunctionTree: order must be a string or a tuple of spin indices; got "
                                 f"{type(self.order).__name__}. Pass order=tuple(my_order).")
        V.boolean("corr", self.corr, owner="JunctionTree")
        V.positive_int("max_bytes", self.max_bytes, owner="JunctionTree")
        if self.graph is not None and not isinstance(self.graph, CouplingGraph):
            raise IsingTypeError(f"JunctionTree: graph must be an isingattn.sparse.CouplingGraph or None; got "
                                 f"{type(self.graph).__name__}.")

    def __init__(self, order: Union[str, Sequence[int]] = "auto", corr: bool = False, max_bytes: int = MAX_BYTES,
                 graph: Optional[CouplingGraph] = None):
        self.order = order if isinstance(order, str) or order is None else _as_tuple(order)
        self.corr, self.max_bytes, self.graph = corr, max_bytes, graph

    def plan(self, model: IsingModel) -> Plan:
        """The contraction plan of ``model``'s graph (treewidth, order, scans, memory)."""
        return plan_for(self._graph(model), self._order_key(self._graph(model).n))

    def _order_key(self, n: int):
        if isinstance(self.order, tuple):
            try:
                return tuple(check_order(self.order, n))
            except ValueError as e:
                raise IsingInputError(f"JunctionTree: {e}.") from None
        return self.order

    def _graph(self, model: IsingModel) -> CouplingGraph:
        if isinstance(model.J, SparseCouplings):
            if self.graph is not None and self.graph != model.J.graph:
                raise IsingInputError("JunctionTree: this engine was prepared for another graph than the model's "
                                      "sparse couplings; use JunctionTree() (it reads the graph from the model).")
            return model.J.graph
        if self.graph is not None:
            if self.graph.n != model.n:
                raise IsingInputError(f"JunctionTree: graph has {self.graph.n} spins but the model has n = {model.n}.")
            return self.graph
        if is_traced(model.J):  # no readable zeros: every pair (refused by the budget beyond ~25 spins)
            return complete_graph(model.n)
        return pattern(model.J)

    def _prepare(self, model: IsingModel) -> Engine:
        graph = self._graph(model)
        if not isinstance(model.J, SparseCouplings) and not is_traced(model.J) and self.graph is not None:
            extra = pattern(model.J)
            have = {tuple(e) for e in graph.edges.tolist()}
            missing = [tuple(e) for e in extra.edges.tolist() if tuple(e) not in have]
            if missing:
                raise IsingInputError(f"JunctionTree: J couples {missing[0]} (and {len(missing) - 1} more pairs) "
                                      "outside the engine's graph; pass the model's own graph or graph=None.")
        plan = plan_for(graph, self._order_key(graph.n))
        batch = math.prod(model.batch_shape)
        need = plan.table_bytes(batch, jnp.dtype(model.dtype).itemsize)
        if need > self.max_bytes:
            raise IsingInputError(_too_wide(plan, need, self.max_bytes, batch))
        return dataclasses.replace(self, graph=graph)

    def _marginals(self, model: IsingModel, key: Optional[jax.Array]) -> Marginals:
        if self.graph is None:  # called without marginals' _prepare
            return self._prepare(model)._marginals(model, key)
        graph = self.graph
        if model.n < graph.n:  # a causal bucket: the prefix of the prepared model's spins
            e = graph.edges
            graph = CouplingGraph(model.n, e[(e < model.n).all(axis=1)])
        plan = plan_for(graph, self._order_key(model.n))
        h, w, batch, n_off, act = edge_form(model, graph)
        B = math.prod(batch)
        flat = lambda x: jnp.broadcast_to(x, batch + x.shape[-1:]).reshape((B,) + x.shape[-1:])
        hb, wb = flat(h), flat(w)
        beta = model.beta
        log_z, mean, ecorr = moments(plan, beta * hb, beta * wb)
        log_z = log_z - n_off.reshape(B) * math.log(2.0)
        corr = None
        if self.corr:
            mean_fn = lambda x: contract(plan, beta * x, beta * wb)[1]
            corr = linear_response_corr(mean_fn, hb, mean, beta)
        unflat = lambda x: x.reshape(batch + x.shape[1:])
        mean, ecorr = unflat(mean), unflat(ecorr)
        if act is not None:
            a = act.astype(mean.dtype)
            mean = mean * a
            if corr is not None:
                corr = unflat(corr) * a[..., :, None] * a[..., None, :]
        elif corr is not None:
            corr = unflat(corr)
        info = {"log_z_kind": Label("exact"), "treewidth": jnp.full(batch, plan.treewidth, jnp.int32),
                "elimination_order": jnp.broadcast_to(jnp.asarray(plan.order, jnp.int32), batch + (model.n,))}
        if graph is self.graph:  # a causal bucket's edges are its own: the template drops what buckets lack
            info["edge_corr"] = ecorr
        return Marginals(mean=mean, corr=corr, log_z=unflat(log_z), info=info)


def _as_tuple(order) -> tuple:
    try:
        return tuple(int(v) for v in np.asarray(order).reshape(-1).tolist())
    except (TypeError, ValueError):
        raise IsingTypeError(f"JunctionTree: order must be a heuristic's name or a sequence of spin indices; got "
                             f"{order!r}.") from None


def edge_form(model: IsingModel, graph: CouplingGraph):
    """``(h [..., n], w [..., E], batch, free [...], active)``: the model on ``graph``'s edges with
    inactive spins' fields and couplings zeroed (``free`` counts them: each adds ``log 2``)."""
    h, J = model.h, model.J
    e = graph.edges
    if isinstance(J, SparseCouplings):
        w = J.weights
    else:
        # symmetrized, so the gradient w.r.t. J is symmetric like Exact's
        w = (J[..., e[:, 0], e[:, 1]] + J[..., e[:, 1], e[:, 0]]) / 2
        if is_traced(J):  # a coupling off the graph would be dropped: the result is NaN instead (no host callback)
            on = np.zeros((graph.n, graph.n), bool)
            on[e[:, 0], e[:, 1]] = on[e[:, 1], e[:, 0]] = True
            w = V.nan_where(w, jnp.any(jnp.where(on, 0.0, J) != 0))
    act = model.active()
    batch = model.batch_shape
    if act is None:
        return h, w, batch, jnp.zeros(batch, h.dtype), None
    a = act.astype(h.dtype)
    h = h * a
    w = w * a[..., e[:, 0]] * a[..., e[:, 1]]
    free = jnp.broadcast_to((1 - a).sum(-1), batch)
    return h, w, batch, free, act
