"""Non-reversible parallel tempering (Syed, Bouchard-Côté, Deligiannidis & Doucet 2021) of
Ising models: the engine ``"pt"``, on the kernel of :mod:`~isingattn.inference.mcmc.pt_kernel`.

Every chain is ``R`` replicas at a ladder ``β = β_0 > β_1 > ... > β_{R-1} = beta_min`` (the
hot end; 0 by default). Each step sweeps every replica once with the Gibbs heat-bath kernel
(replicas × chains × models one batch of ONE sweep, dense or sparse couplings, systematic or
coloured), then runs the deterministic even–odd swap round. Where Gibbs freezes (a spin
glass, a ferromagnet below T_c) the cold replica's state is refreshed by states that crossed
the ladder: at β = 0 one sweep draws the uniform distribution exactly, so every round trip
brings an independent state down to β.

The run (:func:`~isingattn.inference.mcmc.pt_run.run_tempering`):

* **The ladder's size** (``num_replicas=None``, the default) follows the model: a short
  pilot run on a fixed grid of β measures the energy's spread ``σ(β)``, whose integral
  ``Λ = ∫ σ/√π dβ`` is the communication barrier of Syed et al.; ``R = ⌈Λ / 0.4⌉ + 1``
  rungs then reject about 0.4 per pair after adaptation (:mod:`~isingattn.inference.mcmc.pt_ladder`;
  ``info["barrier"]`` is ``Λ`` measured again on the run itself). The pilot's key is fixed, so
  its answer is a function of the model: it runs once per model content (parameters, mask,
  dtype, sweep classes; the last ``PILOT_CACHE`` models are remembered), not on every call.
* **Houdayer's cluster move** (``houdayer=None``, the default: on for a concrete model with
  no field and an even ``num_chains``) between chains ``2k`` and ``2k+1`` at the colder
  half of the rungs, after each sweep (:mod:`~isingattn.inference.mcmc.houdayer`). The paired chains are then
  not independent (R-hat still compares all chains).
* **Warmup**, ``num_warmup`` steps. With ``ladder=None`` the first three quarters adapt the
  ladder in ``adapt_rounds`` rounds of doubling length (Syed et al.'s schedule update,
  :func:`~isingattn.inference.mcmc.pt_ladder.adapt_ladder`): each round measures the mean
  swap rejection of every pair and moves the rungs so that the communication barrier is
  split evenly; the last quarter equilibrates at the final ladder. The initial ladder is
  linear in β when the hot end is 0, geometric otherwise. A given ``ladder`` (fractions of
  the model's β) is used as is.
* **Sampling**, ``num_samples`` steps at the fixed ladder, every ``thin``-th kept: the
  target replica's spins (packed 32 draws to a word, as Gibbs stores them) and energy.

What it returns, at the model's β (replica 0): the marginals and samples, with Gibbs'
diagnostics (R-hat, ESS, MCSE, ``frozen``, ``converged``) computed on the packed draws by
the same functions (:func:`~isingattn.diagnostics.packed_spin_diagnostics`,
:func:`~isingattn.diagnostics.known_constant`), and ``log_z`` by the stepping stone along
the ladder (DESIGN.md §3)::

    log Z(β) = n_active log 2 + Σ_k log ⟨exp(-(β_k - β_{k+1}) E)⟩_{β_{k+1}}

with ``β_R = 0``. When the hot end is 0 every ratio is a mean over the sampled replicas;
with ``beta_min > 0`` the last one, ``Z(β_hot) / Z(0)``, is a mean over fresh uniform
draws (exact, but its variance grows as ``exp(β_hot² Var_0 E)``: keep ``beta_min`` small).
``info["log_z_se"]``: the delta method on batch means (each chain's draws cut into
``LOG_Z_BATCHES`` consecutive batches, :mod:`~isingattn.inference.mcmc.pt_run`), which
accounts for the autocorrelation of the
draws and for the correlation of the ratios along the ladder.

Cost: ``R`` times a Gibbs run of the same number of sweeps (the replicas' energies come from
each sweep's own change, exact every ``ENERGY_REFRESH`` steps), plus the swaps
(O(R · chains · n) copies). Where Gibbs mixes, PT is ``R`` times slower per draw; where it
does not, PT is the difference between a result and none. Check ``info["swap_rate"]``
(every pair well above 0; about equal after adaptation) and ``info["round_trip_rate"]``
(round trips per step and chain: 0 means the hot end never reached the cold one, so the
replicas did not help; raise ``num_replicas``, or leave it None to size it from the model).
"""

from __future__ import annotations

from typing import ClassVar, Optional

import dataclasses
import hashlib

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.sharding import Mesh

from isingattn import validate as V
from isingattn.errors import IsingInputError
from isingattn.fluctuation import packed_sample_marginals
from isingattn.inference.mcmc.base import ColouredSweep
from isingattn.inference.mcmc.coloring import SCHEDULES, as_classes
from isingattn.inference.mcmc.driver import chain_diagnostics, check_chain_settings, keeps_samples
from isingattn.inference.mcmc.houdayer import coupling_graph
from isingattn.inference.mcmc import pt_ladder
from isingattn.inference.mcmc.pt_ladder import barrier
from isingattn.inference.mcmc.pt_run import pilot_run, run_tempering
from isingattn.marginals import Label, Marginals
from isingattn.model import IsingModel
from isingattn.sharding import check_split
from isingattn.sparse import CouplingGraph, SparseCouplings

MIN_ROUND_TRIPS = 10  # round trips per chain that make a constant spin an answer, not a frozen chain
FALLBACK_REPLICAS = 32  # num_replicas=None on a model traced under jit (no pilot possible)
PILOT_SEED, PILOT_CHAINS = 0, 4
PILOT_CACHE = 64  # models whose pilot ladder size is remembered (by content: parameters, mask, dtype, classes)
_PILOT_SIZES: dict = {}


def _model_digest(model: IsingModel, classes) -> tuple:
    """A key of a concrete model's content: equal for equal parameters, so the pilot runs once per model."""
    J = model.J
    parts = [model.h, J.weights if isinstance(J, SparseCouplings) else J, model.beta, model.active()]
    d = hashlib.blake2b(digest_size=16)
    for x in parts:
        a = np.asarray(x) if x is not None else np.zeros(0)
        d.update(f"{a.dtype}{a.shape}".encode())
        d.update(np.ascontiguousarray(a).tobytes())
    return (d.hexdigest(), J.graph if isinstance(J, SparseCouplings) else None, classes)


def _as_ladder(x):
    """The ``ladder`` setting as a tuple of plain numbers (hashable, JSON), or as given for
    ``__check_init__`` to refuse."""
    if x is None or isinstance(x, (str, bytes)):
        return x
    if isinstance(x, (list, tuple, np.ndarray)):
        a = np.asarray(x, dtype=object)
        if a.ndim != 1:
            raise IsingInputError(f"ParallelTempering: ladder must be one sequence of fractions β_k / β (1-D); got an "
                                  f"array of shape {a.shape}.")
        return tuple(V.plain(v) for v in a.tolist())
    return x


def _with_moment_gradients(log_z, model: IsingModel, mean, corr, mean_energy):
    """``log_z`` whose derivatives are the sampled moments, the identities of a log partition
    function: ``∂/∂h = β⟨s⟩``, ``∂/∂J_jk = ½β⟨s_j s_k⟩`` (dense ``J``; full symmetric),
    ``∂/∂β = -⟨E⟩``. The value is ``log_z``; the moments carry no gradient themselves."""
    sg = lax.stop_gradient
    h, J = model.masked_parameters()
    beta = model.beta
    f = beta * sg(-mean_energy) + sg(beta) * jnp.sum((h - sg(h)) * sg(mean), axis=-1)
    if corr is not None and not isinstance(J, SparseCouplings):
        f = f + 0.5 * sg(beta) * jnp.sum((J - sg(J)) * sg(corr), axis=(-2, -1))
    return sg(log_z) + f - sg(f)


class ParallelTempering(ColouredSweep):
    """Non-reversible parallel tempering with an adaptive ladder (module docstring); ``"pt"``.

    Config (static): ``num_warmup`` steps (the ladder adapts in the first three quarters);
    ``num_samples`` steps after warmup, every ``thin``-th kept (``num_samples // thin`` draws
    per chain); ``num_chains`` independent tempered chains (R-hat compares them);
    ``num_replicas`` ``R`` (≥ 2) per chain, or None (default: sized from the model by a
    pilot run, module docstring; the length of ``ladder`` when given; ``FALLBACK_REPLICAS``
    for a causal model or one traced under jit, unless the engine was ``prepared(model)``
    outside);
    ``beta_min`` the hot end, below the model's β (a
    concrete β ≤ ``beta_min`` is refused) (0: the uniform
    distribution, which one sweep samples exactly); ``ladder`` (None: adapt; or ``R``
    fractions ``β_k / β``, decreasing from 1 to ≥ 0, used as given); ``adapt_rounds``;
    ``schedule``/``colors`` as in :class:`~isingattn.inference.mcmc.gibbs.Gibbs`;
    ``diagnostics``, ``rhat_threshold``, ``rao_blackwell`` and ``keep_samples`` as in Gibbs;
    ``mesh`` (below); ``houdayer`` (None: on where it applies, i.e. a concrete model without
    fields and an even ``num_chains``; True: required; False: off) and ``cluster_graph`` (the
    graph the move grows along, set by the engine from the concrete model: leave it None);
    ``init`` (an array, not static: None, uniformly random spins, or the initial spins
    ``[num_chains, *batch, n]``, ±1 with 0 drawn at random, where every replica of a chain
    starts; the dimod sampler's ``initial_states``).
    The pilot and the cluster graph are host work on the concrete model before compiling,
    as the colouring is: a dense zero-field model compiles once per coupling pattern.

    ``marginals(model, *, key)`` returns, at the model's β (replica 0):

    * ``mean``, ``corr`` (dense), ``samples [*batch, chains · draws, n]`` (chain-major, see
      ``keep_samples``), the mean differentiable through the fluctuation–dissipation VJP;
    * ``log_z [*batch]`` (stepping stone; its gradient gives the sampled moments),
      ``info["log_z_kind"] == "estimate"``, ``info["log_z_se"] [*batch]``;
    * ``info["energy"] [*batch, chains, draws]``: the energy of each kept draw;
    * ``info["swap_rate"] [*batch, R-1]``: the mean swap acceptance of each adjacent pair
      (cold pair first); ``info["round_trip_rate"] [*batch]``: cold → hot → cold trips per
      step and chain; ``info["ladder"] [*batch, R]``: the final β of each replica;
      ``info["barrier"] [*batch]``: the communication barrier ``Λ`` from every rung's
      energy spread over sampling (about ``R - 1`` times the mean rejection when the ladder
      fits);
    * ``info["flip_rate"] [*batch, chains]``: fraction of the target replica's active spins
      changed per step (sweep and swap);
    * with ``diagnostics``: ``r_hat``, ``ess``, ``mcse``, ``frozen`` ``[*batch, n]`` and
      ``converged [*batch]``, as Gibbs defines them (on the target replica's draws), with one
      difference: a spin that never changed in any draw is not ``frozen`` (R-hat 1, MCSE 0)
      when the hot end is β = 0 and every chain completed at least ``MIN_ROUND_TRIPS`` round
      trips, since each trip brought down a state drawn afresh at β = 0 (a spin of a glass
      frozen into its ground state: ``|⟨s⟩| > 0.999`` on the strips of the tests).
      ``converged`` also needs ``tempered [*batch]``: every chain made at least
      ``MIN_ROUND_TRIPS`` round trips during sampling (fewer, and the stepping stone's
      batches are shorter than a trip, so its SE is not to be trusted), every adjacent pair
      swapped at least once, and the ladder did not
      collapse (``beta_min < β``). Chains frozen in different states can agree on R-hat (a
      3×3 glass at β = 1e6 gave means ±0.35 for an exact 0 with R-hat fine); without tempering
      that agreement is evidence of nothing.

    ``mesh`` (a ``jax.sharding.Mesh``; None: one device) splits the **chains** axis over the
    mesh's devices (``num_chains`` a multiple of their count, else ``IsingInputError``): a
    chain's replicas and swaps stay on one device. The noise is drawn for the global arrays,
    so samples equal the unsharded run's; energies, swap rates, ladder and log Z may differ in
    the last bits at larger n (:func:`~isingattn.inference.mcmc.pt_run.run_tempering`;
    DESIGN.md §3, "Samplers that mix where
    Gibbs freezes", also for two processes under ``jax.distributed``).

    The defaults: the ladder sized to the model, 2000 warmup and 16000 sampling steps, 4
    chains (Houdayer pairs for zero-field models). ``benchmarks/README.md`` (``pt.py``) has
    what they reach on the 32×32 ±J torus and the zero-field 10×80 strip at β = 3.
    """

    # Steps: on the 8×24 ±J strip at β = 2 every marginal within 0.08 of exact (slow test).
    num_warmup: int = eqx.field(static=True, default=2000, converter=V.plain)
    num_samples: int = eqx.field(static=True, default=16000, converter=V.plain)
    num_chains: int = eqx.field(static=True, default=4, converter=V.plain)
    num_replicas: Optional[int] = eqx.field(static=True, default=None, converter=V.plain)
    beta_min: float = eqx.field(static=True, default=0.0, converter=V.plain)
    ladder: Optional[tuple] = eqx.field(static=True, default=None, converter=_as_ladder)
    adapt_rounds: int = eqx.field(static=True, default=4, converter=V.plain)
    thin: int = eqx.field(static=True, default=1, converter=V.plain)
    schedule: str = eqx.field(static=True, default="systematic")
    colors: Optional[tuple] = eqx.field(static=True, default=None, converter=as_classes)
    diagnostics: bool = eqx.field(static=True, default=True, converter=V.plain)
    rhat_threshold: float = eqx.field(static=True, default=1.05, converter=V.plain)
    rao_blackwell: bool = eqx.field(static=True, default=False, converter=V.plain)
    keep_samples: Optional[bool] = eqx.field(static=True, default=None, converter=V.plain)
    mesh: Optional[Mesh] = eqx.field(static=True, default=None)
    init: Optional[jax.Array] = None  # data, not config: changing it does not recompile
    houdayer: Optional[bool] = eqx.field(static=True, default=None, converter=V.plain)
    cluster_graph: Optional[CouplingGraph] = eqx.field(static=True, default=None)

    def __check_init__(self):
        o = "ParallelTempering"
        check_chain_settings(self, o)  # Gibbs' settings, then PT's own
        check_split(self.mesh, self.num_chains, "num_chains", o)
        V.positive_int("adapt_rounds", self.adapt_rounds, owner=o)
        if self.num_replicas is not None:
            V.positive_int("num_replicas", self.num_replicas, owner=o)
        if self.houdayer is not None:
            V.boolean("houdayer", self.houdayer, owner=o)
        if self.houdayer and self.num_chains % 2:
            raise IsingInputError(f"{o}: houdayer=True pairs chains 2k and 2k+1 (two replicas at every β), so "
                                  f"num_chains must be even; got {self.num_chains}.")
        if self.cluster_graph is not None and not isinstance(self.cluster_graph, CouplingGraph):
            raise V.ConfigTypeError(f"{o}: cluster_graph is set by the engine from a concrete model (a "
                                    f"CouplingGraph); leave it None. Got {type(self.cluster_graph).__name__}.")
        if self.num_replicas is not None and self.num_replicas < 2:
            raise IsingInputError(f"{o}: num_replicas must be at least 2 (a ladder from the model's β to a hot end); "
                                  f"got {self.num_replicas}. With one replica, use Gibbs.")
        V.float_in("beta_min", self.beta_min, 0.0, owner=o)
        V.choice("schedule", self.schedule, SCHEDULES, owner=o)
        if self.ladder is not None:
            lad = self.ladder
            if not isinstance(lad, tuple) or not all(V._is_real(v) for v in lad):
                raise V.ConfigTypeError(f"{o}: ladder must be None or a sequence of numbers (fractions β_k / β); "
                                        f"got {lad!r}.")
            x = np.asarray(lad, float)
            wrong_size = (self.num_replicas is not None and len(x) != self.num_replicas) or len(x) < 2
            if (wrong_size or not np.all(np.isfinite(x)) or x[0] != 1.0 or np.any(np.diff(x) >= 0)
                    or x[-1] < 0):
                raise IsingInputError(
                    f"{o}: ladder must be num_replicas = {self.num_replicas or 'len(ladder) ≥ 2'} fractions "
                    "β_k / β, "
                    f"strictly decreasing from 1.0 (the model's β) to a hot end ≥ 0, e.g. numpy.linspace(1, 0, "
                    f"{self.num_replicas or 16}); "
                    f"got {lad!r}.")

    needs_key: ClassVar[bool] = True
    sparse_native: ClassVar[bool] = True  # the Gibbs kernel's colour-class sweeps on the edge list
    spin_info: ClassVar[tuple] = ("r_hat", "ess", "mcse", "frozen")

    def _keeps_samples(self, model: IsingModel) -> bool:
        return keeps_samples(self, model)

    def _prepare(self, model: IsingModel) -> "ParallelTempering":
        """Refuse a concrete ``β ≤ beta_min`` (the ladder would collapse onto the model's β), then
        the sweep classes (:class:`~isingattn.inference.mcmc.base.ColouredSweep`)."""
        if self.ladder is None and self.beta_min > 0 and not isinstance(model.beta, jax.core.Tracer):
            low = float(np.min(np.asarray(model.beta)))
            if low <= self.beta_min:
                raise IsingInputError(
                    f"ParallelTempering: beta_min = {self.beta_min:g} is not below the model's β = {low:g}: every "
                    "replica would sit at β and nothing would be tempered. Pass beta_min < β (0, the default, "
                    "tempers from the uniform distribution).")
        eng = super()._prepare(model)
        return dataclasses.replace(eng, num_replicas=eng._sized(model), **eng._cluster_setting(model))

    def _cluster_setting(self, model: IsingModel) -> dict:
        """``houdayer`` resolved (None: on where it applies, i.e. a concrete model with no field
        on any active spin and an even ``num_chains``) with the graph the move grows along."""
        if self.houdayer is False or self.cluster_graph is not None:
            return {}
        if model.causal:  # solved in buckets of prefixes: the graph of all n spins does not fit them
            if self.houdayer:
                raise IsingInputError("ParallelTempering: houdayer=True is not available for causal models (solved "
                                      "in buckets of prefixes); use houdayer=None or False.")
            return {"houdayer": False}
        traced = any(isinstance(x, jax.core.Tracer) for x in jax.tree_util.tree_leaves(model))
        h = None if traced else np.asarray(model.masked_parameters()[0])
        zero = not traced and not np.any(h)
        if self.houdayer and not zero:
            raise IsingInputError(
                "ParallelTempering: houdayer=True needs a model without fields (the cluster move keeps the energy "
                "of two replicas only when h = 0)" + (", checked on the concrete model: call engine.prepared(model) "
                "outside jit" if traced else f"; this model has a nonzero field on {int(np.sum(h != 0))} "
                "spin(s)") + ". Use houdayer=None (on where it applies) or False.")
        if not zero or self.num_chains % 2:
            return {"houdayer": False}
        return {"houdayer": True, "cluster_graph": coupling_graph(model.J)}

    def _sized(self, model: IsingModel) -> int:
        """``num_replicas``: as given, the length of a given ladder, or sized from the model by a
        pilot run (:mod:`~isingattn.inference.mcmc.pt_ladder`); ``FALLBACK_REPLICAS`` for a
        model traced under jit (call ``engine.prepared(model)`` outside jit to size it) or a
        causal one (solved in buckets)."""
        if self.num_replicas is not None:
            return self.num_replicas
        if self.ladder is not None:
            return len(self.ladder)
        if model.causal or any(isinstance(x, jax.core.Tracer) for x in jax.tree_util.tree_leaves(model)):
            return FALLBACK_REPLICAS
        G = pt_ladder.PILOT_RUNGS
        h, J, beta = model.h, model.J, model.beta
        J = J.astype(model.dtype) if isinstance(J, SparseCouplings) else J
        classes = self._sweep_classes(model)
        # a fixed key: R is a function of the model alone, so one pilot serves every call on the same model
        content = _model_digest(model, classes)
        if content not in _PILOT_SIZES:
            out = pilot_run(jax.random.key(PILOT_SEED), h, J, beta, model.active(), tuple(model.batch_shape) + (model.n,),
                            num_warmup=pt_ladder.PILOT_WARMUP, num_samples=pt_ladder.PILOT_STEPS,
                            num_chains=PILOT_CHAINS, num_replicas=G,
                            ladder=tuple(float(x) for x in np.linspace(1.0, 0.0, G)),
                            classes=classes)  # no cluster move: one pilot program per structure
            _PILOT_SIZES[content] = pt_ladder.replicas_for_barrier(np.asarray(barrier(out["ladder"], out["energy_sd"])))
            while len(_PILOT_SIZES) > PILOT_CACHE:
                _PILOT_SIZES.pop(next(iter(_PILOT_SIZES)))
        return _PILOT_SIZES[content]

    def _hot_is_zero(self) -> bool:
        return self.ladder[-1] == 0 if self.ladder is not None else self.beta_min == 0

    def _marginals(self, model: IsingModel, key: Optional[jax.Array]) -> Marginals:
        n, dtype = model.n, model.dtype
        batch = tuple(model.batch_shape)
        C, D = self.num_chains, self.num_samples // self.thin
        sg = lax.stop_gradient  # the chains carry no gradient: the VJPs of the moments supply it
        h, J, beta = sg(model.h), jax.tree_util.tree_map(sg, model.J), sg(model.beta)
        act = model.active()
        out = run_tempering(key, h, J, beta, act, batch + (n,), num_warmup=self.num_warmup,
                            num_samples=self.num_samples, num_chains=C, num_replicas=self.num_replicas,
                            beta_min=float(self.beta_min), ladder=self.ladder, adapt_rounds=self.adapt_rounds,
                            thin=self.thin, classes=self._sweep_classes(model), mesh=self.mesh,
                            graph=self.cluster_graph if self.houdayer else None,
                            init=None if self.init is None else sg(self.init))
        last = lambda x, k: jnp.moveaxis(x, tuple(range(k)), tuple(range(-k, 0)))  # leading k axes to the end
        energy_trace = last(out["energy"], 2)  # [D, C, *batch] -> [*batch, D, C]
        energy_trace = jnp.swapaxes(energy_trace, -1, -2)  # [*batch, C, D]
        n_active = (jnp.full(batch, n, dtype) if act is None
                    else jnp.broadcast_to(act, batch + (n,)).sum(-1).astype(dtype))
        log_z = n_active * jnp.log(2.0).astype(dtype) + out["log_ratio"].sum(0)
        info = {
            "barrier": barrier(out["ladder"], out["energy_sd"]),
            "flip_rate": last(out["flip_rate"], 1),
            "swap_rate": last(out["swap_rate"], 1),
            "round_trip_rate": out["round_trip_rate"],
            "ladder": last(out["ladder"], 1),
            "energy": energy_trace,
            "log_z_kind": Label("estimate"),
            "log_z_se": out["log_ratio_se"],
        }
        words = out["words"].reshape(out["words"].shape[:2] + (-1,))  # [D/32, C, F]
        if self.diagnostics:
            # a spin constant in every draw is evidence of nothing for Gibbs; here, when every
            # chain brought states from β = 0 down to β at least MIN_ROUND_TRIPS times, it is
            # the right answer up to about 1 / round trips (spins frozen into the ground state)
            refreshed = (out["round_trips"].min(0) >= MIN_ROUND_TRIPS)[..., None] if self._hot_is_zero() else False
            info.update(chain_diagnostics(words, D, C, h, J, beta, act, batch, n, dtype, float(self.rhat_threshold),
                                          refreshed))
        if self.diagnostics:
            # a chain that never went cold → hot → cold, or a pair of replicas that never swapped,
            # has not tempered: its R-hat can look fine on chains frozen in different states
            trips = jnp.moveaxis(out["round_trips"], 0, -1).min(-1)  # [*batch]
            swaps = jnp.all(info["swap_rate"] > 0, axis=-1)
            spread = (beta > self.beta_min) if self.ladder is None and self.beta_min > 0 else True
            info["tempered"] = (trips >= MIN_ROUND_TRIPS) & swaps & spread
            info["converged"] = info["converged"] & info["tempered"]
        m = packed_sample_marginals(model, words, D, info, keep_samples=self._keeps_samples(model),
                                    rao_blackwell=bool(self.rao_blackwell))
        log_z = _with_moment_gradients(log_z, model, m.mean, m.corr, energy_trace.mean((-2, -1)))
        return Marginals(mean=m.mean, corr=m.corr, log_z=log_z, samples=m.samples, info=m.info)

    def _warning(self, flag, info, bad, total) -> str:
        r = np.asarray(info["r_hat"])
        r = r[~np.isnan(r)]
        worst = float(r.max()) if r.size else float("nan")
        frozen = int(np.asarray(info["frozen"]).sum())
        trips = float(np.asarray(info["round_trip_rate"]).min())
        stuck = (f" {frozen} active spin(s) never changed in any chain (frozen: no R-hat, NaN)." if frozen else "")
        untempered = int((~np.asarray(info.get("tempered", True))).sum())
        if untempered:
            swaps = np.asarray(info["swap_rate"]).reshape(-1, self.num_replicas - 1).min(0)
            return (f"ParallelTempering: {untempered} of {total} models did not temper: some chain made fewer than "
                    f"{MIN_ROUND_TRIPS} round trips cold → hot → cold (lowest rate {trips:.3g} per step) or some "
                    "pair of replicas never "
                    f"swapped (lowest swap rate per pair {np.array2string(swaps, precision=2)}), so the chains may "
                    "sit frozen in different states and R-hat cannot tell. Raise num_warmup and num_samples, or "
                    "num_replicas; see info['tempered'], info['swap_rate'], info['round_trip_rate'].")
        return (f"ParallelTempering: {bad} of {total} models have a spin with split R-hat ≥ {self.rhat_threshold} "
                f"or undefined (worst defined {worst:.3g}): the chains have not mixed.{stuck} Lowest round-trip rate "
                f"{trips:.3g} per step. Raise num_samples, or num_replicas when some info['swap_rate'] is near 0 "
                "or round trips are rare; see info['converged'], info['r_hat'], info['swap_rate'].")

