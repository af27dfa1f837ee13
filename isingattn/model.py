"""``IsingModel``: fields, couplings, inverse temperature and a mask, as a JAX pytree."""

from __future__ import annotations

from typing import Optional

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from isingattn.energy import energy as _energy
from isingattn.errors import IsingInputError, IsingTypeError
from isingattn import convert
from isingattn import validate as V
from isingattn.sparse import SparseCouplings
from isingattn.sparse import from_dense as sparse_from_dense

SYMMETRY_RTOL = 1e-5
DENSE_LIMIT_BYTES = 2**30  # IsingModel.densified refuses a dense J above this size


def is_traced(*xs) -> bool:
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

    Inputs are validated at construction: eagerly when concrete (``IsingInputError``), and
    under ``jit`` by :func:`isingattn.validate.nan_where`: a failed check makes every field
    NaN (every field carries every check, so a function that reads only ``beta`` or only
    ``J`` of an invalid model gets NaN too), never silent garbage, and no host callback that
    would keep the program out of JAX's persistent compilation cache. A model needs at least one spin (``n ≥ 1``).
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

    @property
    def dense_J_bytes(self) -> int:
        """Bytes of ``J`` as a dense ``[..., n, n]`` array (what densifying a sparse model costs)."""
        return int(np.prod(self.J.shape)) * jnp.dtype(self.dtype).itemsize

    def densified(self, *, limit_bytes: int = DENSE_LIMIT_BYTES, owner: str = "IsingModel") -> "IsingModel":
        """This model with a dense ``J [..., n, n]`` (itself when already dense). Refused
        with :class:`IsingInputError` when the dense ``J`` would exceed ``limit_bytes``
        (default 1 GiB): ``owner`` (e.g. the engine) is named in the message."""
        if not self.is_sparse:
            return self
        size = self.dense_J_bytes
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
        if is_traced(s, bad):  # under jit even ops on concrete spins are staged (omnistaging)
            s = V.nan_where(s, bad)
        elif bool(bad):
            raise IsingInputError(msg + f" Got values {np.unique(np.asarray(s))[:6]}.")
        act = self.active()
        if act is not None:
            s = jnp.where(act, s, 0.0)
        return _energy(self.h, self.J, s)

    # ---- dimod / networkx (isingattn/convert.py) ---------------------------------------
    def _single(self, index):
        return convert.single(self, index)

    def to_bqm(self, index=None):
        """The model as a SPIN ``dimod.BinaryQuadraticModel`` with ``bqm.energy(s) == E(s)``
        (``linear = -h``, ``quadratic = -J_jk``; inactive spins left out; ``index`` picks one
        model of a batch). Sparse couplings are exported edge by edge, never densified."""
        return convert.to_bqm(self, index)

    @classmethod
    def from_bqm(cls, bqm, beta=1.0, *, sparse=None) -> "IsingModel":
        """A model from a ``dimod.BinaryQuadraticModel`` (BINARY converted to SPIN; labels and
        their order kept; the offset dropped). ``sparse``: True gives ``J`` as an edge list
        (O(n + E)), False dense, None (default) the edge list for sparse graphs (``n ≥ 64``,
        at most 10% of the pairs coupled)."""
        return convert.from_bqm(cls, bqm, beta, sparse=sparse)

    def to_networkx(self, index=None):
        """``networkx.Graph``: node attribute ``h``, edge attribute ``J`` (nonzero couplings
        between active spins), graph attribute ``beta``."""
        return convert.to_networkx(self, index)

    @classmethod
    def from_networkx(cls, G, beta=None, *, sparse=None) -> "IsingModel":
        """A model from a graph with node attribute ``h`` (default 0) and edge attribute ``J``
        (required); node order gives spin order, labels are kept; ``sparse`` as in
        :meth:`from_bqm`."""
        return convert.from_networkx(cls, G, beta, sparse=sparse)


def _cast_detail(name, given, cast) -> str:
    """Why a finite (or positive) input became inf (or 0): a cast to a narrower float dtype
    (x64 disabled, or beta cast to the dtype of h and J). Empty if that is not the cause."""
    if given is None or is_traced(given):
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
    (no compilation per new shape), by :func:`isingattn.validate.nan_where` when traced.

    ``given``: the arguments as passed (``{"h": ..., "J": ..., "beta": ...}``), used only to
    explain a failure caused by a narrowing float cast."""
    given = given or {}
    sparse = isinstance(J, SparseCouplings)  # symmetric with a zero diagonal by construction
    Jw = J.weights if sparse else J
    traced = is_traced(h, Jw, beta)
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
        # only J) of an invalid model gets NaN too. The checks hang off a scalar that each
        # field then adds, which keeps a sharded batch where it is.
        ok = jnp.zeros((), jnp.result_type(h))
        for _, bad, _msg in checks:
            ok = V.nan_where(ok, bad)
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
