"""``IsingModel``: fields, couplings, inverse temperature and a mask, as a JAX pytree."""

from __future__ import annotations

from typing import Optional

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from isingattn.energy import energy as _energy
from isingattn.errors import IsingInputError, IsingTypeError
from isingattn.sparse import CouplingGraph, SparseCouplings
from isingattn.sparse import from_dense as sparse_from_dense

SYMMETRY_RTOL = 1e-5
DENSE_LIMIT_BYTES = 2**30  # IsingModel.densified refuses a dense J above this size
# from_bqm / from_networkx choose the edge list when n >= SPARSE_MIN_N and at most this
# fraction of the pairs are coupled
SPARSE_MIN_N, SPARSE_MAX_DENSITY = 64, 0.1


def _is_traced(*xs) -> bool:
    return any(isinstance(x, jax.core.Tracer) for x in xs)


def causal_mask(n_queries: int, n_keys: Optional[int] = None) -> jax.Array:
    """``[n_queries, n_keys]`` bool, True where query ``i`` sees spin (key) ``j ≤ i``: the one
    place the causal mask is built (``IsingModel.active``, causal buckets, attention)."""
    return jnp.tril(jnp.ones((n_queries, n_queries if n_keys is None else n_keys), bool))


_EXPECTED = {"h": "array-like of real numbers (fields), shape [..., n]",
             "J": "array-like of real numbers (couplings), shape [..., n, n]",
             "beta": "a positive real number (the inverse temperature)",
             "spins": "array-like of real numbers (±1 spins), shape [..., n]",
             "mask": "a boolean array (True = active spin), shape [..., n]"}


def _as_array(name, x, dtype=None):
    """``jnp.asarray(x)`` with messages that name the argument."""
    what = _EXPECTED.get(name, "array-like")
    if x is None:
        raise IsingTypeError(f"{name} must be {what}; got None. Pass a value (or leave the argument out for its default).")
    try:
        return jnp.asarray(x) if dtype is None else jnp.asarray(x, dtype=dtype)
    except TypeError as e:  # e.g. a list of strings
        raise IsingTypeError(f"{name} must be {what}; got {type(x).__name__} ({e}).") from None
    except ValueError as e:  # e.g. nested lists of unequal lengths
        ragged = "inhomogeneous" in str(e) or "sequence" in str(e)
        raise IsingInputError(
            f"{name} must be {what}" + ("; got a ragged nested sequence (rows of unequal length)"
                                        if ragged else f"; got {type(x).__name__} that is not an array")
            + f" ({e}). Give every row the same length."
        ) from None


def _as_float(name, x, dtype=None):
    x = _as_array(name, x, dtype)
    if jnp.issubdtype(x.dtype, jnp.complexfloating):
        raise IsingTypeError(f"{name} must be real, got dtype {x.dtype}. Pass the real part if that is what you mean.")
    if not jnp.issubdtype(x.dtype, jnp.floating):
        x = x.astype(jnp.result_type(float))
    return x


class IsingModel(eqx.Module):
    """A (batched) Ising model ``p(s) ∝ exp(-β E(s))`` over spins ``s ∈ {-1,+1}^n``.

    ``E(s) = -Σ_j h_j s_j - Σ_{j<k} J_jk s_j s_k`` (DESIGN.md §1).

    Args:
        h: fields, ``[..., n]``.
        J: couplings, ``[..., n, n]``: symmetric, zero diagonal. Batch dimensions of
            ``h``, ``J`` and ``mask`` broadcast, so one ``J`` can serve many ``h``.
        beta: inverse temperature, a positive scalar.
        mask: optional boolean ``[..., n]``; ``False`` removes a spin from the model
            (its field and couplings count as zero, its marginal is reported as 0).
        causal: if True, the last batch axis indexes queries ``i = 0..n-1`` and query
            ``i`` sees only spins ``0..i`` (combined with ``mask``). ``Engine.marginals``
            solves each bucket of prefixes on its own spins (:mod:`isingattn.causal`)
            for every engine without a native causal path (Banded has one).
        labels: optional hashable variable labels (kept by BQM/networkx round trips).

    Inputs are validated at construction: eagerly when concrete, and with
    ``equinox.error_if`` (a runtime error, never silent garbage) under ``jit``, where
    every field carries every check, so a function that reads only ``beta`` or only
    ``J`` of an invalid model raises too. A model needs at least one spin (``n ≥ 1``).
    Messages name the argument (``h``, ``J``, ``beta``, ``mask``, ``labels``).
    """

    h: jax.Array
    J: jax.Array
    beta: jax.Array
    mask: Optional[jax.Array] = None
    causal: bool = eqx.field(static=True, default=False)
    labels: Optional[tuple] = eqx.field(static=True, default=None)

    def __init__(self, h, J, beta=1.0, mask=None, *, causal: bool = False, labels=None):
        # as passed, to explain a cast that overflows
        given = {"h": h, "J": J.weights if isinstance(J, SparseCouplings) else J, "beta": beta}
        h = _as_float("h", h)
        if isinstance(J, SparseCouplings):
            J = J.with_weights(_as_float("J", J.weights))
        else:
            J = _as_float("J", J)
        dtype = jnp.result_type(h.dtype, J.dtype)
        h, J = h.astype(dtype), J.astype(dtype)
        beta = _as_float("beta", beta, None).astype(dtype)
        if h.ndim < 1:
            raise IsingInputError(f"h must have shape [..., n]; got a scalar. Wrap it: h=[{h}].")
        n = h.shape[-1]
        if n == 0:
            raise IsingInputError(
                f"an Ising model needs at least one spin; got h of shape {h.shape} (n = 0). Give h at least one "
                "field per model (a model without spins has no distribution to sample)."
            )
        if isinstance(J, SparseCouplings) and J.graph.n != n:
            raise IsingInputError(
                f"J is a SparseCouplings on a graph of {J.graph.n} spins but h has n = {n} fields. Build the graph "
                "with CouplingGraph(n, edges) for the model's n."
            )
        if J.ndim < 2 or J.shape[-2:] != (n, n):
            raise IsingInputError(
                f"J must have shape [..., n, n] with n = h.shape[-1] = {n}; got J.shape = {J.shape}. "
                "Pass one coupling matrix per model (or one shared matrix) matching the number of fields."
            )
        if beta.ndim != 0:
            raise IsingInputError(f"beta must be a scalar; got shape {beta.shape}. Use one model per temperature.")
        if mask is not None:
            mask = _as_array("mask", mask)
            if mask.dtype != jnp.bool_:
                raise IsingTypeError(f"mask must be boolean (True = active spin); got dtype {mask.dtype}. Use mask.astype(bool).")
            if mask.ndim < 1 or mask.shape[-1] != n:
                raise IsingInputError(
                    f"mask must have shape [..., n] with n = {n}; got {mask.shape}. One entry per spin, True = active."
                )
        shapes = [h.shape[:-1], J.shape[:-2]] + ([mask.shape[:-1]] if mask is not None else [])
        try:
            batch = jnp.broadcast_shapes(*shapes)
        except ValueError:
            raise IsingInputError(
                f"batch shapes of h {h.shape[:-1]}, J {J.shape[:-2]}"
                + (f", mask {mask.shape[:-1]}" if mask is not None else "")
                + " do not broadcast. Insert size-1 axes (e.g. J[:, None]) so they align from the right."
            ) from None
        if causal and (len(batch) == 0 or batch[-1] != n):
            raise IsingInputError(
                f"causal=True needs a query axis of length n = {n} as the last batch axis; got batch shape {batch}. "
                "Give h the shape [..., n_queries=n, n]."
            )
        if labels is not None:
            try:
                labels = tuple(labels)
            except TypeError:
                raise IsingTypeError(f"labels must be a sequence of {n} distinct hashables; got {type(labels).__name__}.") from None
            for i, v in enumerate(labels):
                try:
                    hash(v)
                except TypeError:
                    raise IsingTypeError(
                        f"labels must be hashable (ints, strings, tuples, ...); labels[{i}] = {v!r} is a "
                        f"{type(v).__name__}. Use tuples instead of lists, e.g. labels=[tuple(v) for v in labels]."
                    ) from None
            if len(labels) != n or len(set(labels)) != n:
                raise IsingInputError(f"labels must be {n} distinct hashables; got {len(labels)} ({len(set(labels))} distinct).")
        h, J, beta = _validate_values(h, J, beta, given)
        self.h, self.J, self.beta, self.mask = h, J, beta, mask
        self.causal, self.labels = causal, labels

    # ---- shapes -------------------------------------------------------------------
    @property
    def n(self) -> int:
        return self.h.shape[-1]

    @property
    def batch_shape(self) -> tuple:
        shapes = [self.h.shape[:-1], self.J.shape[:-2]]
        if self.mask is not None:
            shapes.append(self.mask.shape[:-1])
        return jnp.broadcast_shapes(*shapes)

    @property
    def dtype(self):
        return self.h.dtype

    def active(self) -> Optional[jax.Array]:
        """Boolean ``[..., n]`` of active spins (mask and causal prefix), or None if all are active."""
        act = self.mask
        if self.causal:
            tri = causal_mask(self.n)  # (query i, spin j): j <= i
            act = tri if act is None else act & tri
        return act

    def masked_parameters(self):
        """``(h, J)`` with inactive spins' fields and couplings set to zero.

        Shapes broadcast as ``[..., n]`` and ``[..., n, n]``; ``J`` gains the mask's batch
        axes only when there is a mask.
        """
        act = self.active()
        if act is None:
            return self.h, self.J
        a = act.astype(self.dtype)
        if isinstance(self.J, SparseCouplings):
            return self.h * a, self.J.masked(act)
        return self.h * a, self.J * a[..., :, None] * a[..., None, :]

    # ---- sparse couplings ---------------------------------------------------------------
    @property
    def is_sparse(self) -> bool:
        """True when ``J`` is a :class:`~isingattn.sparse.SparseCouplings` (edge list)."""
        return isinstance(self.J, SparseCouplings)

    def densified(self, *, limit_bytes: int = DENSE_LIMIT_BYTES, owner: str = "IsingModel") -> "IsingModel":
        """This model with a dense ``J [..., n, n]`` (itself when already dense). Refused
        with :class:`IsingInputError` when the dense ``J`` would exceed ``limit_bytes``
        (default 1 GiB): ``owner`` (e.g. the engine) is named in the message."""
        if not self.is_sparse:
            return self
        size = int(np.prod(self.J.shape)) * jnp.dtype(self.dtype).itemsize
        if size > limit_bytes:
            raise IsingInputError(
                f"{owner} needs dense couplings, and this sparse model's J would take {size / 2**30:.3g} GiB as a dense "
                f"{self.J.shape} array (limit {limit_bytes / 2**30:.3g} GiB). Use an engine that works on sparse graphs "
                "(Engine.sparse_native), or a smaller graph."
            )
        return eqx.tree_at(lambda m: m.J, self, self.J.to_dense())

    def sparsified(self, tol: float = 0.0) -> "IsingModel":
        """This model with its couplings as an edge list (every nonzero pair of a concrete
        dense ``J``; itself when already sparse)."""
        if self.is_sparse:
            return self
        return eqx.tree_at(lambda m: m.J, self, sparse_from_dense(self.J, tol).astype(self.dtype))

    # ---- energy ---------------------------------------------------------------------
    def energy(self, spins) -> jax.Array:
        """``E(s)`` for spins ``[..., n]`` in {-1, +1} (broadcast against the batch) -> ``[...]``.

        Inactive spins do not contribute, whatever their value.
        """
        s = _as_float("spins", spins).astype(self.dtype)
        if s.ndim < 1 or s.shape[-1] != self.n:
            raise IsingInputError(f"spins must have shape [..., {self.n}]; got {s.shape}.")
        bad = jnp.any(jnp.abs(s) != 1)
        msg = "spins must be -1 or +1 (SPIN convention). For 0/1 variables use s = 2*x - 1."
        if _is_traced(s):
            s = eqx.error_if(s, bad, msg)
        elif bool(bad):
            raise IsingInputError(msg + f" Got values {np.unique(np.asarray(s))[:6]}.")
        act = self.active()
        if act is not None:
            s = jnp.where(act, s, 0.0)
        return _energy(self.h, self.J, s)

    # ---- dimod / networkx -------------------------------------------------------------
    def _single(self, index):
        """numpy float64 (h, J, active) of one model of the batch; a sparse J as
        ``(edges [E, 2], weights [E])``."""
        batch = self.batch_shape
        if index is None:
            if batch:
                raise IsingInputError(
                    f"this model is batched (batch shape {batch}); pass index=... to pick one, e.g. index={(0,) * len(batch)}."
                )
            index = ()
        index = (index,) if isinstance(index, (int, np.integer)) else tuple(index)
        if len(index) != len(batch):
            raise IsingInputError(f"index must have {len(batch)} entries for batch shape {batch}; got {index}.")
        act = self.active()
        full = lambda x, tail: np.broadcast_to(np.asarray(x, dtype=np.float64 if x.dtype != bool else bool), batch + tail)[index]
        h = full(self.h, (self.n,))
        if isinstance(self.J, SparseCouplings):
            J = (self.J.graph.edges, full(self.J.weights, (self.J.graph.E,)))
        else:
            J = full(self.J, (self.n, self.n))
        a = np.ones(self.n, bool) if act is None else np.broadcast_to(np.asarray(act), batch + (self.n,))[index]
        return h, J, a

    def _label_list(self):
        return list(self.labels) if self.labels is not None else list(range(self.n))

    def to_bqm(self, index=None):
        """The model as a SPIN ``dimod.BinaryQuadraticModel`` with ``bqm.energy(s) == E(s)``.

        ``linear = -h``, ``quadratic = -J_jk`` (j<k), ``offset = 0``; β is not part of a
        BQM (pass it to the sampler). Inactive spins are left out. ``index`` picks one
        model of a batch.
        """
        import dimod

        nodes, edges = self._terms(index)
        # Add the linear terms first: BinaryQuadraticModel(linear, quadratic, ...) inserts
        # the quadratic terms first, which reorders the variables (spin order is lost).
        bqm = dimod.BinaryQuadraticModel(dimod.SPIN)
        bqm.add_linear_from((v, -b) for v, b in nodes)
        bqm.add_quadratic_from((u, v, -b) for u, v, b in edges)
        return bqm

    def _terms(self, index=None):
        """The active spins of one model as ``[(label, h)]`` and its nonzero couplings
        between them as ``[(label, label, J)]`` (upper triangle, spin order)."""
        h, J, a = self._single(index)
        labels = self._label_list()
        idx = np.flatnonzero(a)
        nodes = [(labels[j], float(h[j])) for j in idx]
        if isinstance(J, tuple):  # sparse: (edges [E, 2], weights [E]), never densified
            (e, w) = J
            keep = a[e[:, 0]] & a[e[:, 1]] & (w != 0)
            return nodes, [(labels[i], labels[j], float(b)) for (i, j), b in zip(e[keep].tolist(), w[keep])]
        sub = J[np.ix_(idx, idx)]
        jj, kk = np.nonzero(np.triu(sub, 1))
        return nodes, [(labels[idx[j]], labels[idx[k]], float(sub[j, k])) for j, k in zip(jj, kk)]

    @staticmethod
    def _assemble(labels, fields, rows, cols, weights, empty: str, sparse):
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

    @classmethod
    def from_bqm(cls, bqm, beta=1.0, *, sparse=None) -> "IsingModel":
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
            h, J = cls._assemble(labels, -np.asarray(lin, np.float64), rows, cols, -np.asarray(quad, np.float64),
                                 empty, sparse)
        else:  # object biases: read one at a time, so a bad one is named
            pos = {v: i for i, v in enumerate(labels)}
            quad = [(pos[u], pos[v], -_real(f"from_bqm: the quadratic bias of ({u!r}, {v!r})", b))
                    for (u, v), b in bqm.quadratic.items()]
            rows, cols, w = (np.array(x) for x in zip(*quad)) if quad else ([], [], [])
            h, J = cls._assemble(labels, [-_real(f"from_bqm: the linear bias of {v!r}", bqm.get_linear(v)) for v in labels],
                                 rows, cols, w, empty, sparse)
        return cls(h, J, beta=beta, labels=labels)

    def to_networkx(self, index=None):
        """``networkx.Graph``: node attribute ``h``, edge attribute ``J`` (nonzero couplings
        between active spins), graph attribute ``beta``."""
        import networkx as nx

        nodes, edges = self._terms(index)
        G = nx.Graph(beta=float(self.beta))
        G.add_nodes_from((v, {"h": b}) for v, b in nodes)
        G.add_edges_from((u, v, {"J": b}) for u, v, b in edges)
        return G

    @classmethod
    def from_networkx(cls, G, beta=None, *, sparse=None) -> "IsingModel":
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
        h, J = cls._assemble(labels,
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


def _cast_detail(name, given, cast) -> str:
    """Why a finite (or positive) input became inf (or 0): a cast to a narrower float dtype
    (x64 disabled, or beta cast to the dtype of h and J). Empty if that is not the cause."""
    if given is None or _is_traced(given):
        return ""
    try:
        raw = np.asarray(given, dtype=np.float64)
    except (TypeError, ValueError, OverflowError):
        return ""
    out = np.asarray(cast)
    with np.errstate(invalid="ignore", over="ignore"):
        over = np.isfinite(raw) & ~np.isfinite(out)
        under = (raw > 0) & (out == 0) if name == "beta" else np.zeros((), bool)
    if not (np.any(over) or np.any(under)):
        return ""
    fin = jnp.finfo(out.dtype)
    if np.any(over):
        what = (f" {name} is finite as given (largest |{name}| = {float(np.max(np.abs(raw[over]))):.3g}) but overflows "
                f"to inf when cast to {out.dtype} (largest finite {float(fin.max):.3g})")
    else:
        what = f" {name} = {float(np.max(raw)):.3g} is positive as given but underflows to 0 when cast to {out.dtype}"
    why = (" (the dtype of h and J)" if name == "beta" else "") + "."
    return (what + why + f" Rescale {name} (the distribution depends on beta·h and beta·J only), or compute in a wider "
            "dtype: float64 arrays for h and J with jax.config.update('jax_enable_x64', True).")


def _validate_values(h, J, beta, given=None):
    """Finite values, symmetric zero-diagonal J, positive beta: in numpy when concrete
    (no compilation per new shape), with ``equinox.error_if`` when traced.

    ``given``: the arguments as passed (``{"h": ..., "J": ..., "beta": ...}``), used only to
    explain a failure caused by a narrowing float cast."""
    given = given or {}
    sparse = isinstance(J, SparseCouplings)  # symmetric with a zero diagonal by construction
    Jw = J.weights if sparse else J
    traced = _is_traced(h, Jw, beta)
    xp = jnp if traced else np
    hh, JJ, bb = (h, Jw, beta) if traced else (np.asarray(h), np.asarray(Jw), np.asarray(beta))
    checks = [
        ("h", ~xp.all(xp.isfinite(hh)), "h contains NaN or inf; fields must be finite. Check the scores that produced them."),
        ("J", ~xp.all(xp.isfinite(JJ)), "J contains NaN or inf; couplings must be finite."),
    ]
    if not sparse:
        with np.errstate(invalid="ignore"):  # inf - inf in a non-finite J: reported by the finiteness check
            scale = xp.maximum(xp.max(xp.abs(JJ), initial=0.0), 1.0)
            asym_size = xp.max(xp.abs(JJ - xp.swapaxes(JJ, -1, -2)), initial=0.0)
        checks += [
            ("J", asym_size > SYMMETRY_RTOL * scale,
             f"J must be symmetric (|J - Jᵀ| ≤ {SYMMETRY_RTOL:g}·max|J|). Symmetrize it: J = (J + J.swapaxes(-1, -2)) / 2."),
            ("J", xp.any(xp.diagonal(JJ, axis1=-2, axis2=-1) != 0),
             "J must have a zero diagonal (s_j² = 1 makes it a constant). Zero it: J = J * (1 - eye(n))."),
        ]
    checks.append(("beta", ~(bb > 0) | ~xp.isfinite(bb), "beta must be a finite positive number (inverse temperature)."))
    if traced:
        # Every field carries every check, so a jitted function that reads only beta (or
        # only J) of an invalid model raises too. The checks hang off a scalar that each
        # field then depends on: error_if pins its operand to one device, and pinning h
        # itself would gather a sharded batch.
        ok = jnp.zeros((), jnp.result_type(h))
        for _, bad, msg in checks:
            ok = eqx.error_if(ok, bad, msg)
        return h + ok, (J.with_weights(Jw + ok) if sparse else J + ok), beta + ok
    for name, bad, msg in checks:
        if bool(bad):
            detail = ""
            if "symmetric" in msg:
                detail = f" Largest asymmetry: {float(asym_size):.3g}."
            elif name == "beta":
                detail = f" Got beta = {float(bb)}."
            if "NaN or inf" in msg or name == "beta":
                detail += _cast_detail(name, given.get(name), {"h": hh, "J": JJ, "beta": bb}[name])
            raise IsingInputError(msg + detail)
    return h, J, beta
