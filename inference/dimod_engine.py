"""Any dimod sampler as an inference engine (DESIGN.md §3).

The model leaves through ``IsingModel.to_bqm`` (one BQM per model of the batch),
the sampler runs on the host through ``jax.pure_callback`` (so the engine works
under ``jit`` and in training), and the sample mean comes back with the
fluctuation–dissipation gradient of :func:`isingattn.fluctuation.sample_marginals`.
"""

from __future__ import annotations

import functools
import warnings
from typing import Any, ClassVar, Optional

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from isingattn import validate as V
from isingattn.engine import Engine, register
from isingattn.errors import IsingInputError, IsingTypeError
from isingattn.fluctuation import sample_marginals
from isingattn.marginals import Marginals
from isingattn.model import IsingModel, _is_traced
from isingattn.sparse import SparseCouplings


def beta_kwargs(sampler, beta: float) -> Optional[dict]:
    """How to ask ``sampler`` for Boltzmann samples at inverse temperature ``beta``.

    * dwave-samplers ``SimulatedAnnealingSampler``: ``beta_range=[β, β]``, i.e. fixed-β
      Metropolis, a Boltzmann sampler once ``num_sweeps`` mixes.
    * openjij ``SASampler``-like (``beta_min``/``beta_max``): both set to β.
    * a sampler with a ``beta`` parameter (e.g. ``TreeDecompositionSampler``): ``beta=β``.
    Returns None when the sampler has no temperature (optimizers, a QPU): its samples
    then follow whatever distribution it produces, not ``exp(-βE)``.
    """
    params = getattr(sampler, "parameters", {}) or {}
    if "beta_range" in params:
        return {"beta_range": [beta, beta], "beta_schedule_type": "linear"}
    if "beta_min" in params and "beta_max" in params:
        return {"beta_min": beta, "beta_max": beta}
    if "beta" in params:
        return {"beta": beta}
    return None


@register("dimod")
class DimodEngine(Engine):
    """``DimodEngine(sampler, **sample_kwargs)``: sample each model's BQM with ``sampler``.

    ``num_reads`` (default 256) reads per model; a per-model integer ``seed`` is drawn
    from ``key`` when the sampler accepts one. β is passed as :func:`beta_kwargs`
    describes; samplers without a temperature get a warning (once, when called
    outside ``jit``) and ``info["at_beta"] = False`` (batch-shaped).

    Slow where the sampler is: one host call per model of the batch.
    """

    sampler: Any = eqx.field(static=True)
    sample_kwargs: tuple = eqx.field(static=True)
    num_reads: int = eqx.field(static=True, default=256)
    needs_key: ClassVar[bool] = True  # it seeds the sampler
    jit: ClassVar[bool] = False  # the sampler runs on the host (pure_callback works under a caller's jit too)
    sparse_native: ClassVar[bool] = True  # an edge list goes to the BQM as it is, never densified

    def __init__(self, sampler=None, num_reads: int = 256, **sample_kwargs):
        num_reads = V.positive_int("num_reads", num_reads, owner="DimodEngine")  # 0 reads: NaN marginals
        if sampler is None:
            try:
                from dwave.samplers import SimulatedAnnealingSampler
            except ImportError:
                raise ImportError("DimodEngine() defaults to dwave-samplers' SimulatedAnnealingSampler: "
                                  "pip install dwave-samplers, or pass a sampler: DimodEngine(my_sampler).") from None
            sampler = SimulatedAnnealingSampler()
        if not hasattr(sampler, "sample"):
            raise IsingTypeError(f"sampler must be a dimod.Sampler (with .sample); got {type(sampler).__name__}.")
        params = getattr(sampler, "parameters", None)
        if isinstance(params, dict) and params:  # a sampler that lists its parameters: catch typos now
            unknown = sorted(k for k in sample_kwargs if k not in params)
            if unknown:
                raise IsingInputError(f"DimodEngine: {type(sampler).__name__} has no parameter(s) {unknown}; its parameters "
                                      f"are {sorted(params)}.")
        self.sampler, self.num_reads = sampler, num_reads
        self.sample_kwargs = tuple(sorted(sample_kwargs.items()))

    def _prepare(self, model: IsingModel) -> Engine:
        if beta_kwargs(self.sampler, 1.0) is None and not _is_traced(model.beta):
            warnings.warn(f"{type(self.sampler).__name__} has no temperature parameter: its samples do not follow "
                          "exp(-βE); marginals and gradients are those of its own output distribution.",
                          stacklevel=5)  # the caller of marginals (past equinox's method wrappers)
        return self

    def _marginals(self, model: IsingModel, key: Optional[jax.Array]) -> Marginals:
        batch, n, S = model.batch_shape, model.n, self.num_reads
        size = int(np.prod(batch)) if batch else 1
        seeds = jax.random.randint(key, (size,), 0, 2**31 - 1)
        h, J = model.masked_parameters()
        h = jnp.broadcast_to(h, batch + (n,)).reshape(size, n)
        graph = J.graph if isinstance(J, SparseCouplings) else None  # the edge list goes to the BQM as it is
        if graph is None:
            J = jnp.broadcast_to(J, batch + (n, n)).reshape(size, n, n)
        else:
            J = jnp.broadcast_to(J.weights, batch + (graph.E,)).reshape(size, graph.E)
        bk = beta_kwargs(self.sampler, 1.0)
        out = jax.ShapeDtypeStruct((size, S, n), model.dtype)
        host = functools.partial(self._host_sample, dtype=np.dtype(model.dtype), graph=graph)
        # The samples carry no gradient (sample_marginals' fluctuation identities supply it), and
        # pure_callback has no JVP: without stop_gradient, jax.grad and training fail.
        sg = jax.lax.stop_gradient
        samples = jax.pure_callback(host, out, sg(h), sg(J), sg(model.beta), seeds, vmap_method="sequential")
        samples = samples.reshape(batch + (S, n))
        return sample_marginals(model, samples, info={"at_beta": jnp.full(batch, bk is not None)})

    def _host_sample(self, h, J, beta, seeds, *, dtype, graph=None):
        """Sample every model on the host: ``h [B, n]``, ``J [B, n, n]`` or, with ``graph``,
        edge weights ``[B, E]``; returns ``[B, num_reads, n]``."""
        h, J, beta = np.asarray(h, np.float64), np.asarray(J, np.float64), float(beta)
        params = getattr(self.sampler, "parameters", {}) or {}
        out = np.zeros(h.shape[:1] + (self.num_reads, h.shape[-1]), dtype=dtype)
        for b in range(h.shape[0]):
            bqm = IsingModel(h[b], J[b] if graph is None else SparseCouplings(graph, J[b])).to_bqm()
            kw = dict(self.sample_kwargs)
            kw.update(beta_kwargs(self.sampler, beta) or {})
            if "seed" in params or "seed" in kw:
                kw.setdefault("seed", int(seeds[b]))
            ss = self.sampler.sample(bqm, num_reads=self.num_reads, **kw)
            arr = ss.record.sample.repeat(ss.record.num_occurrences, axis=0)[: self.num_reads]
            if len(arr) < self.num_reads:
                raise RuntimeError(f"{type(self.sampler).__name__} returned {len(arr)} reads; asked for {self.num_reads}.")
            cols = [ss.variables.index(v) for v in range(h.shape[-1])]
            out[b] = arr[:, cols]
        return out
