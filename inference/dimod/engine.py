"""Any dimod sampler as an inference engine (DESIGN.md §3).

The model leaves as a BQM (``convert.array_bqm``, what ``IsingModel.to_bqm`` builds; one
per model of the batch). Under a trace the sampler runs on the host through
``jax.pure_callback`` (so the engine works under ``jit`` and in training), and eagerly
it is called directly, since JAX inside a callback can deadlock; and the sample mean comes back with the
fluctuation–dissipation gradient of :func:`isingattn.fluctuation.sample_marginals`.
"""

from __future__ import annotations

import functools
import math
import warnings
from typing import Any, ClassVar, Optional

import dimod
import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from isingattn import validate as V
from isingattn.engine import Engine
from isingattn.errors import IsingInputError, IsingTypeError
from isingattn.convert import array_bqm
from isingattn.fluctuation import sample_marginals
from isingattn.marginals import Marginals
from isingattn.model import IsingModel, is_traced
from isingattn.sparse import SparseCouplings
from isingattn.inference.dimod.pool import PooledSampling
from isingattn.inference.dimod.specs import (
    CAL_KEYS, CHAIN_KEYS, ChainBreakWarning, DimodCalibrationWarning, NamedSampler, sampler_name, sa_sampler, subset_reads, uniform_torque, beta_kwargs, declared_ranges)



class DimodEngine(Engine):
    """``DimodEngine(sampler=None, num_reads=256, calibrate=False, ..., pool=False, **sample_kwargs)``:
    sample each model's BQM with ``sampler`` (a dimod sampler, or its name).

    ``num_reads`` reads per model; a per-model integer ``seed`` is drawn from ``key`` when the
    sampler accepts one. β is passed as :func:`beta_kwargs` describes; samplers without a
    temperature get a warning (once, when called outside ``jit``) and ``info["at_beta"] = False``
    (batch-shaped), unless ``calibrate=True``.

    Effective temperature (``estimate_beta=True``, implied by ``calibrate``): the
    maximum-pseudo-likelihood β of the reads for the model (:func:`isingattn.inference.dimod.temperature.effective_beta`,
    dwave-system's estimator, with a bootstrap interval), in ``info``: ``beta_eff``,
    ``beta_eff_lo``/``beta_eff_hi`` (interval at ``beta_level``), ``beta_eff_se`` (bootstrap SD),
    ``beta_h``/``beta_J`` (separate scales, with ``split=True``), ``ground_only``.

    Calibration (``calibrate=True``): program ``c_h·h`` and ``c_J·J`` (one ``c`` unless
    ``split``) and iterate ``c ← c·β/β_eff`` (exact in one step for a sampler at a fixed
    hidden temperature) for at most ``calibration_steps`` rounds, until ``β_eff`` is within
    ``calibration_rtol`` of the model's β. ``c·max|h|`` and ``c·max|J|`` stay within the
    ranges the sampler declares (:func:`declared_ranges`); a sampler with ``auto_scale`` is
    passed ``auto_scale=False`` (it would undo the scale). The round closest to the target is
    kept. ``info`` adds ``scale_h``, ``scale_J``, ``calibration_iterations``,
    ``calibration_error`` (``max |β_eff/β - 1|`` over the fitted scales), ``calibrated`` (within
    ``calibration_rtol`` plus 2 bootstrap SDs), ``at_range_limit``. Not calibrated:
    :class:`DimodCalibrationWarning`.

    Embedding composites (a sampler with a ``chain_strength`` parameter, e.g.
    ``EmbeddingComposite(DWaveSampler())``): ``chain_strength`` defaults to dwave-system's
    ``uniform_torque_compensation``; reads with a broken chain are discarded (given intact
    chains the embedded Boltzmann distribution is exactly the logical one, majority votes are
    not) and more are drawn, up to ``chain_break_rounds`` calls; if still short, broken reads
    fill the rest, ``info["chains_intact"]`` is False and :class:`ChainBreakWarning` warns.
    ``info["chain_break_fraction"]``: mean fraction of broken chains over all reads drawn;
    ``info["broken_reads"]``: fraction of reads drawn with a broken chain.

    Samplers by name (:data:`SAMPLER_NAMES`): ``sampler="sa"`` (the default's sampler, by name),
    ``"hidden-beta:2.5"`` (:class:`isingattn.inference.dimod.standins.HiddenBetaSampler`, a QPU stand-in at a β
    the engine is not told) or ``"mock-pegasus:hidden-beta:2.5"`` (that sampler behind
    ``EmbeddingComposite(MockDWaveSampler)`` on Pegasus, :func:`isingattn.inference.dimod.standins.mock_qpu`).
    The engine then holds the name (a :class:`NamedSampler`), so it saves in a model config
    (``isingattn.engine.to_spec``, ``models.saved``) and rebuilds from it; an engine around a
    sampler object does not. A bad name raises ``IsingInputError`` listing the forms.

    ``pool=True`` (for training, where a call holds hundreds of small query models): every
    round samples all the models of the call at once, as one BQM of disjoint parts (one
    sampler call; an embedding composite still gets one call per model), and calibration
    fits one scale ``(c_h, c_J)`` on the pooled reads, so two rounds usually suffice and the
    fit is precise. ``info`` then holds the pooled values for every model. It assumes the
    sampler's temperature does not depend on the problem (true of a fixed-β sampler; on a
    QPU, of problems of one kind and scale) and that it samples disjoint parts independently.
    Spins with no field and no coupling (a causal query's inactive keys) are drawn
    uniformly on the host. With ``num_bootstrap=0`` (no interval) ``calibrated`` means within
    ``calibration_rtol``.

    ``rao_blackwell=True`` reports the mean of ``tanh(β(h_i + Σ_j J_ij s_j))`` over the reads
    instead of the mean of ``s_i`` (:func:`~isingattn.fluctuation.sample_marginals`): the same
    expectation under ``exp(-βE)`` with less variance, so it needs reads at the model's β, which
    is what ``calibrate=True`` (or a sampler that takes β) provides; on raw reads at another β
    it mixes two temperatures.

    Slow where the sampler is: one host call (per round) per model of the batch, or per
    call with ``pool``. Under ``jit``/``grad`` the sampler runs inside a ``jax.pure_callback``;
    a sampler that itself runs JAX (this package's ``SQASampler``, ``PTSampler``,
    ``SwendsenWangSampler``) is not safe there (JAX inside a callback can deadlock): use its
    engine instead, or call this one eagerly, which needs no callback.
    """

    sampler: Any = eqx.field(static=True)
    sample_kwargs: tuple = eqx.field(static=True)
    num_reads: int = eqx.field(static=True, default=256)
    calibrate: bool = eqx.field(static=True, default=False)
    estimate_beta: bool = eqx.field(static=True, default=False)
    split: bool = eqx.field(static=True, default=True)
    calibration_steps: int = eqx.field(static=True, default=5)
    calibration_rtol: float = eqx.field(static=True, default=0.05)
    num_bootstrap: int = eqx.field(static=True, default=100)
    beta_level: float = eqx.field(static=True, default=0.95)
    chain_strength: Any = eqx.field(static=True, default=None)
    chain_break_rounds: int = eqx.field(static=True, default=8)
    pool: bool = eqx.field(static=True, default=False)
    rao_blackwell: bool = eqx.field(static=True, default=False)
    needs_key: ClassVar[bool] = True  # it seeds the sampler
    jit: ClassVar[bool] = False  # the sampler runs on the host (pure_callback works under a caller's jit too)
    sparse_native: ClassVar[bool] = True  # an edge list goes to the BQM as it is, never densified
    warn_flags: ClassVar[tuple] = (("calibrated", DimodCalibrationWarning), ("chains_intact", ChainBreakWarning))

    def __init__(self, sampler=None, num_reads: int = 256, *, calibrate: bool = False, estimate_beta: bool = False,
                 split: bool = True, calibration_steps: int = 5, calibration_rtol: float = 0.05,
                 num_bootstrap: int = 100, beta_level: float = 0.95, chain_strength=None,
                 chain_break_rounds: int = 8, pool: bool = False, rao_blackwell: bool = False, sample_kwargs=None,
                 **kw):
        own = "DimodEngine"
        num_reads = V.positive_int("num_reads", num_reads, owner=own)  # 0 reads: NaN marginals
        calibrate = V.boolean("calibrate", calibrate, owner=own)
        estimate_beta = V.boolean("estimate_beta", estimate_beta, owner=own) or calibrate
        split = V.boolean("split", split, owner=own)
        calibration_steps = V.positive_int("calibration_steps", calibration_steps, owner=own)
        calibration_rtol = V.float_in("calibration_rtol", calibration_rtol, 0.0, 1.0, owner=own, lo_open=True)
        num_bootstrap = V.nonneg_int("num_bootstrap", num_bootstrap, owner=own)
        beta_level = V.float_in("beta_level", beta_level, 0.0, 1.0, owner=own, lo_open=True, hi_open=True)
        chain_break_rounds = V.positive_int("chain_break_rounds", chain_break_rounds, owner=own)
        pool = V.boolean("pool", pool, owner=own)
        rao_blackwell = V.boolean("rao_blackwell", rao_blackwell, owner=own)
        if sample_kwargs is not None:  # the saved form (isingattn.engine.to_spec): sorted (key, value) pairs
            try:
                saved = dict(sample_kwargs)
            except (TypeError, ValueError):
                raise IsingInputError(f"DimodEngine: sample_kwargs must be a dict or (key, value) pairs of sampler "
                                      f"keywords; got {sample_kwargs!r}.") from None
            clash = sorted(set(saved) & set(kw))
            if clash:
                raise IsingInputError(f"DimodEngine: sampler keyword(s) {clash} given both in sample_kwargs and "
                                      "directly; give each once.")
            kw = {**saved, **kw}
        sample_kwargs = kw
        if sampler is None:
            sampler = sa_sampler()  # an object (pass sampler="sa" for one that saves in a model config)
        elif isinstance(sampler, str) and not isinstance(sampler, NamedSampler):
            sampler = NamedSampler(sampler)
        if not hasattr(sampler, "sample"):
            raise IsingTypeError(f"sampler must be a dimod.Sampler (with .sample); got {sampler_name(sampler)}.")
        params = getattr(sampler, "parameters", None)
        if isinstance(params, dict) and params:  # a sampler that lists its parameters: catch typos now
            unknown = sorted(k for k in sample_kwargs if k not in params)
            if unknown:
                raise IsingInputError(f"DimodEngine: {sampler_name(sampler)} has no parameter(s) {unknown}; its parameters "
                                      f"are {sorted(params)}.")
        embedded = isinstance(params, dict) and "chain_strength" in params
        if chain_strength is not None:
            ok = callable(chain_strength) or (isinstance(chain_strength, (int, float, np.floating, np.integer))
                                              and not isinstance(chain_strength, bool)
                                              and math.isfinite(chain_strength) and chain_strength > 0)
            if not ok:
                raise IsingInputError(f"DimodEngine: chain_strength must be a positive number or a callable "
                                      f"f(bqm, embedding) like dwave.embedding.chain_strength.uniform_torque_compensation; "
                                      f"got {chain_strength!r}. Leave it None for that default.")
            if not embedded:
                raise IsingInputError(f"DimodEngine: chain_strength applies to embedding composites (a sampler with a "
                                      f"'chain_strength' parameter, e.g. EmbeddingComposite(DWaveSampler())); "
                                      f"{sampler_name(sampler)} has none. Drop chain_strength, or wrap the sampler.")
        if estimate_beta:
            try:
                import dwave.system.temperatures  # noqa: F401
            except ImportError:
                raise ImportError('DimodEngine(calibrate=True) and estimate_beta=True use dwave-system\'s '
                                  'pseudo-likelihood estimator: pip install "isingattn[qpu]" (or '
                                  '"dwave-system>=1.20").') from None
        self.sampler, self.num_reads = sampler, num_reads
        self.sample_kwargs = tuple(sorted(sample_kwargs.items()))
        self.calibrate, self.estimate_beta, self.split = calibrate, estimate_beta, split
        self.calibration_steps, self.calibration_rtol = calibration_steps, calibration_rtol
        self.num_bootstrap, self.beta_level = num_bootstrap, beta_level
        self.chain_strength, self.chain_break_rounds = chain_strength, chain_break_rounds
        self.pool, self.rao_blackwell = pool, rao_blackwell

    @property
    def embedded(self) -> bool:
        """The sampler embeds the model (it takes a ``chain_strength``)."""
        params = getattr(self.sampler, "parameters", None)
        return isinstance(params, dict) and "chain_strength" in params

    def _prepare(self, model: IsingModel) -> Engine:
        if not self.calibrate and beta_kwargs(self.sampler, 1.0) is None and not is_traced(model.beta):
            warnings.warn(f"{sampler_name(self.sampler)} has no temperature parameter: its samples do not follow "
                          "exp(-βE); marginals and gradients are those of its own output distribution. "
                          "DimodEngine(sampler, calibrate=True) rescales the problem until they do."
                          + (" With rao_blackwell=True the mean reported, tanh(β(h + J s)) over reads at another "
                             "temperature, belongs to neither temperature." if self.rao_blackwell else ""),
                          stacklevel=5)  # the caller of marginals (past equinox's method wrappers)
        return self

    def _info_keys(self):
        keys = CAL_KEYS if self.estimate_beta else ()
        if self.estimate_beta and not self.calibrate:
            keys = keys[:6] + ("ground_only",)
        return keys + (CHAIN_KEYS if self.embedded else ())

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
        keys = self._info_keys()
        out = (jax.ShapeDtypeStruct((size, S, n), model.dtype), jax.ShapeDtypeStruct((size, len(keys)), model.dtype))
        host = functools.partial(self._host_sample, dtype=np.dtype(model.dtype), graph=graph)
        # The samples carry no gradient (sample_marginals' fluctuation identities supply it), and
        # pure_callback has no JVP: without stop_gradient, jax.grad and training fail.
        sg = jax.lax.stop_gradient
        args = (sg(h), sg(J), sg(model.beta), seeds)
        if is_traced(*args):
            samples, diag = jax.pure_callback(host, out, *args, vmap_method="sequential")
        else:  # eager: no callback thread, so a sampler that itself runs JAX cannot deadlock XLA's pool
            samples, diag = map(jnp.asarray, host(*map(np.asarray, args)))
        samples = samples.reshape(batch + (S, n))
        info = {"at_beta": jnp.full(batch, bk is not None)}
        for i, k in enumerate(keys):
            v = diag[:, i].reshape(batch)
            info[k] = v > 0.5 if k in ("calibrated", "ground_only", "at_range_limit", "chains_intact") else v
        if self.calibrate:
            info["at_beta"] = info["calibrated"]
        return sample_marginals(model, samples, info=info, rao_blackwell=self.rao_blackwell)

    # ---- host side --------------------------------------------------------------------------

    def _draw(self, bqm, n, seed, beta, calibrating):
        """``num_reads`` reads of ``bqm`` ``[S, n]`` (float64, spin order) and the chain
        diagnostics ``(mean broken-chain fraction, fraction of reads broken, intact)``."""
        params = getattr(self.sampler, "parameters", {}) or {}
        S = self.num_reads
        kept, broken, fracs = [], [], []
        for r in range(self.chain_break_rounds if self.embedded else 1):
            kw = dict(self.sample_kwargs)
            kw.update(beta_kwargs(self.sampler, beta) or {})
            rseed = (int(seed) + 104729 * r) % (2**31 - 1)  # one seed per round, from the key's seed
            if "seed" in params or "seed" in kw:
                kw.setdefault("seed", rseed)
            if calibrating and "auto_scale" in params:
                kw.setdefault("auto_scale", False)  # the QPU would rescale the problem back to its full range
            if self.embedded:
                kw["chain_strength"] = self.chain_strength if self.chain_strength is not None else uniform_torque()
                kw.setdefault("chain_break_fraction", True)
                if "embedding_parameters" in params:
                    kw.setdefault("embedding_parameters", {"random_seed": rseed})
            ss = self.sampler.sample(bqm, num_reads=S, **kw)
            cols = [ss.variables.index(v) for v in range(n)]
            arr = ss.record.sample.repeat(ss.record.num_occurrences, axis=0)[:, cols].astype(np.float64)
            if not self.embedded:
                if len(arr) < S:
                    raise RuntimeError(f"{sampler_name(self.sampler)} returned {len(arr)} reads; asked for {S}.")
                return subset_reads(arr, S, seed, shuffle=bool(np.any(ss.record.num_occurrences > 1))), None
            cbf = np.asarray(ss.record.chain_break_fraction, np.float64).repeat(ss.record.num_occurrences)
            fracs.append(cbf)
            kept.append(arr[cbf == 0])
            broken.append(arr[cbf > 0])
            if sum(len(k) for k in kept) >= S:
                break
        good = np.concatenate(kept)
        allf = np.concatenate(fracs)
        intact = len(good) >= S
        if not intact:  # flagged (info, ChainBreakWarning): majority-voted reads fill the rest
            good = np.concatenate([good, np.concatenate(broken)])
        if len(good) < S:
            raise RuntimeError(f"{sampler_name(self.sampler)} returned {len(good)} reads; asked for {S}.")
        return subset_reads(good, S, seed, shuffle=True), (float(allf.mean()), float(np.mean(allf > 0)), float(intact))

    def _host_sample(self, h, J, beta, seeds, *, dtype, graph=None):
        """Sample every model on the host: ``h [B, n]``, ``J [B, n, n]`` or, with ``graph``,
        edge weights ``[B, E]``; returns the reads ``[B, num_reads, n]`` and the diagnostics
        ``[B, K]`` (:meth:`_info_keys`)."""
        h, J, beta = np.asarray(h, np.float64), np.asarray(J, np.float64), float(beta)
        if self.pool:
            return PooledSampling(self).run(h, J, beta, seeds, dtype=dtype, graph=graph)
        B, n = h.shape
        keys = self._info_keys()
        out = np.zeros((B, self.num_reads, n), dtype=dtype)
        diag = np.full((B, len(keys)), np.nan)
        for b in range(B):
            bqm = array_bqm(h[b], J[b] if graph is None else (graph.edges, J[b]))  # no JAX in a host callback
            if not self.estimate_beta:
                arr, chains = self._draw(bqm, n, seeds[b], beta, False)
                row = {}
            else:
                arr, chains, row = self._estimate(bqm, n, int(seeds[b]), beta)
            if chains is not None:
                row.update(zip(CHAIN_KEYS, chains))
            out[b] = arr
            diag[b] = [row.get(k, np.nan) for k in keys]
        return out, diag.astype(dtype)

    def _estimate(self, bqm, n, seed, beta):
        """Draw (calibrating with ``calibrate``) and estimate the effective β of one model."""
        from isingattn.inference.dimod.temperature import effective_beta

        hd = np.zeros(n)
        Jd = np.zeros((n, n))
        for v, x in bqm.linear.items():
            hd[v] = -x
        for (u, v), x in bqm.quadratic.items():
            Jd[u, v] = Jd[v, u] = -x
        est = lambda arr, boot: effective_beta(hd, Jd, arr, split=self.split, num_bootstrap=boot, seed=seed,
                                               level=self.beta_level)
        if not self.calibrate:
            arr, chains = self._draw(bqm, n, seed, beta, False)
            e = est(arr, self.num_bootstrap)
            return arr, chains, dict(beta_eff=e.beta, beta_eff_lo=e.beta_lo, beta_eff_hi=e.beta_hi,
                                     beta_eff_se=e.beta_se, beta_h=e.beta_h, beta_J=e.beta_J,
                                     ground_only=float(e.ground_only))
        h_max, j_max = declared_ranges(self.sampler)
        ah, aJ = np.max(np.abs(hd), initial=0.0), np.max(np.abs(Jd), initial=0.0)
        c_max = np.array([h_max / ah if ah > 0 else np.inf, j_max / aJ if aJ > 0 else np.inf])
        if self.embedded and self.chain_strength is None and np.isfinite(j_max) and aJ > 0:
            # uniform torque compensation scales with the problem: the chains must fit in j_range too
            c_max[1] = min(c_max[1], j_max / max(uniform_torque()(bqm), 1e-300))
            c_max[0] = min(c_max[0], c_max[1]) if not self.split else c_max[0]
        if not self.split:
            c_max[:] = c_max.min()
        c = np.minimum(1.0, c_max)
        best = None
        it = 0
        for it in range(1, self.calibration_steps + 1):
            prog = dimod.BinaryQuadraticModel({v: c[0] * x for v, x in bqm.linear.items()},
                                              {e: c[1] * x for e, x in bqm.quadratic.items()}, 0.0, dimod.SPIN)
            arr, chains = self._draw(prog, n, seed + 7 * it, beta, True)
            e = est(arr, 0)
            bs = np.array([e.beta_h, e.beta_J]) if self.split else np.array([e.beta, e.beta])
            bs = np.where(np.isnan(bs), e.beta, bs)  # a part with no information (h = 0) follows the one-scale fit
            err = float(np.max(np.abs(bs / beta - 1))) if np.all(np.isfinite(bs)) else np.inf
            if best is None or err < best[0]:
                best = (err, arr, chains, c.copy(), e)
            if err <= self.calibration_rtol:
                break
            if e.ground_only or np.any(np.isinf(bs)):
                new = c / 4  # no excitations at all: the programmed problem is far too cold
            elif np.all(bs > 0):
                new = c * beta / bs  # β_eff ∝ c for a sampler at a fixed temperature
            else:
                new = c  # β_eff ≤ 0 or undefined: no direction to go
            new = np.minimum(new, c_max)
            if np.allclose(new, c, rtol=1e-12):
                break  # at the range limit (or stuck): more rounds give the same answer
            c = new
        err, arr, chains, c, _ = best
        e = est(arr, self.num_bootstrap)  # the interval of the kept round
        tol = self.calibration_rtol + (2 * e.beta_se / beta if np.isfinite(e.beta_se) else 0.0)
        at_limit = bool(np.any(c >= c_max * (1 - 1e-9)) and err > self.calibration_rtol)
        row = dict(beta_eff=e.beta, beta_eff_lo=e.beta_lo, beta_eff_hi=e.beta_hi, beta_eff_se=e.beta_se,
                   beta_h=e.beta_h, beta_J=e.beta_J, scale_h=c[0], scale_J=c[1], calibration_iterations=it,
                   calibration_error=err, calibrated=float(err <= tol and not e.ground_only),
                   ground_only=float(e.ground_only), at_range_limit=float(at_limit))
        return arr, chains, row


    def _warning(self, flag, info, bad, total) -> str:
        if flag == "chains_intact":
            return (f"DimodEngine: {bad} of {total} models got fewer than num_reads={self.num_reads} reads with intact "
                    f"chains in chain_break_rounds={self.chain_break_rounds} calls; reads with broken chains "
                    "(majority vote) fill the rest (info['chains_intact'] False, info['broken_reads']). Raise "
                    "chain_strength or chain_break_rounds.")
        why = []
        g = np.asarray(info.get("ground_only", False))
        lim = np.asarray(info.get("at_range_limit", False))
        if g.any():
            why.append(f"{int(g.sum())} returned only local minima (no excitations: β_eff = inf at every scale tried, "
                       "the sampler is an optimizer or far colder than the target)")
        if lim.any():
            why.append(f"{int(lim.sum())} need a scale beyond the h/J range the sampler declares "
                       "(info['at_range_limit']; lower the model's β or use a sampler with a wider range)")
        why = "; ".join(why) or "the iterations ran out (raise calibration_steps or num_reads)"
        return (f"DimodEngine: calibration did not reach the model's β within calibration_rtol="
                f"{self.calibration_rtol} for {bad} of {total} models: {why}. Their samples follow "
                "info['beta_eff'], not the model's β (info['calibrated'] False).")
