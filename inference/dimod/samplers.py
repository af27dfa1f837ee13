"""The samplers of this package as ``dimod.Sampler`` s: :class:`SQASampler` (the algorithm
of :mod:`isingattn.inference.mcmc.sqa`), with the dimod contract implemented once, in the base
:class:`IsingSampler` that it shares with DQASampler, PTSampler and SwendsenWangSampler
(``dqa_sampler.py``, ``pt_sampler.py``, ``sw_sampler.py``).

:class:`IsingSampler` holds what they share: defaults given at construction and
overridden per call, unknown keys refused, ``seed`` and ``beta`` validated, the empty
BQM, BINARY models sampled as their SPIN equivalent and returned as 0/1, and a
``dimod.SampleSet`` with ``num_reads`` rows (not aggregated) and the BQM's own energies.
``sample_ising`` / ``sample_qubo`` come from ``dimod.Sampler``. Ocean's ``initial_states``,
``initial_states_generator`` and ``interrupt_function`` are handled once, in ``ocean.py``
(``ocean.reads``), for SQASampler,
PTSampler, SwendsenWangSampler and DQASampler. A subclass supplies its
``DEFAULTS``, :meth:`IsingSampler._check` (its own settings) and
:meth:`IsingSampler._sample` (the algorithm, on the BQM's SPIN view).
"""

from __future__ import annotations

import os
import time
from typing import Any, ClassVar

import dimod
import jax
import jax.numpy as jnp
import numpy as np

from isingattn.errors import IsingInputError
from isingattn.inference.dimod import ocean
from isingattn.inference.mcmc import sqa
from isingattn.inference.mcmc.coloring import color_classes
from isingattn.inference.mcmc.sqa_kernel import SCHEDULES as SQA_SCHEDULES
from isingattn.convert import json_safe
from isingattn.model import IsingModel
from isingattn.sparse import SparseCouplings
from isingattn.validate import nonneg_int

__all__ = ["IsingSampler", "SQASampler", "anneal_beta", "anneal_gamma_schedule", "check_beta", "check_seed",
           "edge_list", "json_safe"]

PAD_TO = 16  # SQASampler pads problems to a multiple of this many spins (fewer compilations)


def check_beta(beta, *, optional: bool = False) -> None:
    """``beta`` (the inverse temperature in the BQM's energy units) is a finite positive
    number, or None where ``optional``."""
    if optional and beta is None:
        return
    if (isinstance(beta, bool) or not isinstance(beta, (int, float, np.floating, np.integer))
            or not (np.isfinite(beta) and beta > 0)):
        what = "None or a finite positive number" if optional else "a finite positive number"
        raise IsingInputError(f"beta must be {what}; got {beta!r}.")


def check_seed(seed) -> int:
    """An int seed in ``[0, 2**32)``; ``None`` draws one from ``os.urandom``."""
    if seed is None:
        return int.from_bytes(os.urandom(4), "little") & 0x7FFFFFFF
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or not 0 <= seed < 2**32:
        raise IsingInputError(f"seed must be None or an int in [0, 2**32); got {seed!r}.")
    return int(seed)


def edge_list(J):
    """``(edges [E, 2], weights [E])`` (numpy, float64) of the nonzero couplings of one
    model's ``J``: a dense ``[n, n]`` or a :class:`~isingattn.sparse.SparseCouplings`,
    whose edge list is read as it is (never densified)."""
    if isinstance(J, SparseCouplings):
        return np.asarray(J.graph.edges), np.asarray(J.weights, np.float64)
    Jn = np.asarray(J, np.float64)
    i, j = np.nonzero(np.triu(Jn, 1))
    return np.stack([i, j], 1), Jn[i, j]

class IsingSampler(dimod.Sampler):
    """A ``dimod.Sampler`` over a JAX Ising sampler (module docstring).

    ``Sampler(**defaults)`` sets default parameters (every key of ``DEFAULTS``);
    ``sample(bqm, **params)`` overrides them per call (``None`` keeps the default) and
    takes ``seed``: an int gives ``jax.random.PRNGKey(seed)``, ``None`` draws one from
    ``os.urandom``; it is reported in ``sampleset.info["seed"]``.
    """

    DEFAULTS: ClassVar[dict] = {}

    def __init__(self, **defaults):
        unknown = set(defaults) - set(self.DEFAULTS)
        if unknown:
            raise IsingInputError(f"unknown {type(self).__name__} parameter(s) {sorted(unknown)}; "
                                  f"known: {sorted(self.DEFAULTS)}.")
        self._defaults = {**self.DEFAULTS, **defaults}
        self._check(self._defaults)

    @property
    def parameters(self) -> dict:
        return {name: [] for name in list(self.DEFAULTS) + ["seed"]}

    @property
    def properties(self) -> dict:
        return {**self._properties(), "default_parameters": dict(self._defaults)}

    def sample(self, bqm, **parameters):
        """Sample a ``dimod.BinaryQuadraticModel``; returns a ``dimod.SampleSet`` with
        ``num_reads`` rows (not aggregated), energies from ``bqm`` and its vartype."""
        t0 = time.perf_counter_ns()
        parameters = self.remove_unknown_kwargs(**parameters)
        seed = parameters.pop("seed", None)
        p = {**self._defaults, **{k: v for k, v in parameters.items() if v is not None}}
        plan = self._check(p)
        seed = check_seed(seed)
        info = {"seed": seed, **self._info(p, plan)}
        if not bqm.variables:
            spins, labels = np.empty((p["num_reads"], 0), np.int8), []
            t1 = t2 = time.perf_counter_ns()
        else:
            spins, labels, run_info, t1 = self._sample(bqm, p, plan, seed)
            jax.block_until_ready(spins)
            t2 = time.perf_counter_ns()
            info.update(run_info)
        s = np.asarray(spins).astype(np.int8)
        if bqm.vartype is dimod.BINARY:  # sampled as its SPIN equivalent
            s = (s + 1) // 2
        info = json_safe(info)
        # dwave-samplers' timing keys: set up (model, schedule, colouring), the compiled
        # runs (compilation included on a first call), the sample set
        info["timing"] = {"preprocessing_ns": t1 - t0, "sampling_ns": t2 - t1}
        out = dimod.SampleSet.from_samples_bqm((s, list(labels)), bqm, info=info)
        info["timing"]["postprocessing_ns"] = time.perf_counter_ns() - t2
        return out

    # ---- what a subclass supplies -------------------------------------------------------

    def _check(self, p: dict) -> Any:
        """Raise ``IsingInputError``/``IsingTypeError`` for bad settings ``p``; returns
        whatever :meth:`_sample` and :meth:`_info` need (e.g. a configured engine)."""
        return None

    def _properties(self) -> dict:
        return {}

    def _info(self, p: dict, plan) -> dict:
        """The settings reported in ``sampleset.info`` (after ``seed``)."""
        return {}

    def _sample(self, bqm, p: dict, plan, seed: int):
        """``(spins [num_reads, n] ±1, their variable labels, info dict, t)`` for a
        non-empty BQM, sampled in its SPIN view (``IsingModel.from_bqm``); ``t`` is
        ``time.perf_counter_ns()`` when the set-up ended and sampling began (the
        preprocessing / sampling split of ``info["timing"]``)."""
        raise NotImplementedError


# ---- the samplers ------------------------------------------------------------------------

# SQASampler's settings; beta=None and gamma_schedule=None mean "the mode's default": in
# thermal mode the fixed values below, in anneal mode derived from the BQM (anneal_beta,
# anneal_gamma_schedule).
# mode="anneal": an Ocean sampler is an optimizer unless told otherwise (dwave-samplers' SA, openjij, a QPU)
_SQA_DEFAULTS = dict(num_reads=10, num_sweeps=1000, trotter=8, gamma_schedule=None, beta=None,
                     mode="anneal", thermal_sweeps=100, global_moves=True, **ocean.OCEAN_DEFAULTS)
SAMPLE_DTYPE = jnp.float32  # SQASampler's kernel dtype
THERMAL_BETA = 1.0
THERMAL_GAMMA_SCHEDULE = ("linear", 3.0, 0.01)

# ---- anneal-mode defaults from the problem's energy scale ------------------------------------
# Every threshold is an acceptance probability of one Metropolis move (the rule follows
# dwave-samplers' default beta_range; DESIGN.md §3, "Path-integral simulated quantum annealing").
EXCITATION = 0.01  # accepted at most this often at the cold end / at least this often to mix
RING_HOT = float(np.arctanh(2.0**-0.5))  # βΓ/P where a flip against both ring neighbours costs e^{-4K} = 1/2
RING_COLD = float(np.arctanh(np.sqrt(EXCITATION)))  # ... and where it costs e^{-4K} = EXCITATION


def anneal_beta(h, J, trotter: int) -> float:
    """Default β of ``SQASampler(mode="anneal")`` for the SPIN model ``h [n]``, ``J [n, n]``
    (symmetric, zero diagonal) or a :class:`~isingattn.sparse.SparseCouplings` (read as its
    edge list, O(n + E): nothing is densified) (``E = -h·s - ½ sᵀJs``, so flipping spin ``i`` costs
    ``2 s_i F_i`` with ``F_i = h_i + Σ_j J_ij s_j``) and ``trotter`` replicas ``P``.

    ``β = min(β_cold, β_mix)`` (a Python float) with, over the spins that have a nonzero bias:

    * ``β_cold = ln(m / EXCITATION) / (2 δ)``: the smallest nonzero gap is approximated, as
      dwave-samplers does, by ``δ = min_i δ_i``, ``δ_i`` the smallest nonzero ``|h_i|`` or
      ``|J_ij|`` of spin ``i``, and ``m`` counts the spins with ``δ_i = δ``. At ``Γ_min`` the
      ring is locked and samples ``exp(-β E)``, so each such spin then leaves the ground
      state with probability ``exp(-2βδ) = EXCITATION / m``.
    * ``β_mix = P ln(1 / EXCITATION) / (2 σ)``, ``σ² = mean_i (h_i² + Σ_j J_ij²)`` the mean
      square local field of a uniformly random configuration: at ``Γ_max`` the replicas are
      nearly free chains at ``β/P``, and each still accepts a flip against the typical field
      (``ΔE = 2σ``) with probability ``EXCITATION``.

    No bias at all (every state has the same energy) gives 1.0. Scale-free: multiplying
    every bias by ``c`` divides β by ``c``.
    """
    h = np.abs(np.asarray(h, np.float64))
    edges, w = edge_list(J)
    w = np.abs(w)
    n = h.shape[0]
    # per spin, over every |bias| that touches it: the smallest nonzero one and the sum of squares
    delta_i = np.where(h > 0, h, np.inf)
    ends = np.concatenate([edges[:, 0], edges[:, 1]])
    ww = np.concatenate([w, w])
    np.minimum.at(delta_i, ends, np.where(ww > 0, ww, np.inf))
    square = h**2 + np.bincount(ends, ww**2, minlength=n)
    biased = np.isfinite(delta_i)
    if not biased.any():
        return 1.0
    delta_i = delta_i[biased]
    delta = delta_i.min()
    beta_cold = np.log(np.sum(delta_i == delta) / EXCITATION) / (2.0 * delta)
    sigma = np.sqrt(np.mean(square[biased]))
    beta_mix = trotter * np.log(1.0 / EXCITATION) / (2.0 * sigma)
    return float(min(beta_cold, beta_mix))


def anneal_gamma_schedule(beta: float, trotter: int) -> tuple:
    """Default Γ schedule of ``SQASampler(mode="anneal")`` at ``beta`` with ``trotter``
    replicas ``P``: ``("geometric", RING_HOT·P/β, RING_COLD·P/β)``.

    SQA anneals the ring coupling ``K = -½ ln tanh(βΓ/P)``, so the thresholds of
    :func:`anneal_beta` are applied to it: at ``Γ_max`` a replica flips against both of its
    ring neighbours (``e^{-4K}``) with probability 1/2, at ``Γ_min`` with ``EXCITATION``
    (the ring is locked). ``βΓ/P`` thus runs over the same range for every problem.
    """
    return ("geometric", RING_HOT * trotter / beta, RING_COLD * trotter / beta)


class SQASampler(IsingSampler):
    """Path-integral SQA as a ``dimod.Sampler`` (the algorithm of :class:`~isingattn.inference.mcmc.sqa.SQA`).

    ``SQASampler(**defaults)`` sets default parameters; ``sample(bqm, **params)`` overrides
    them per call. Parameters: ``num_reads``, ``num_sweeps`` (0: the initial states), ``trotter``,
    ``gamma_schedule=(kind, Γ_max, Γ_min)``, ``beta``, ``mode`` (``"anneal"``, the
    default: ground-state search, lowest-energy replica per read, as every sampler of the
    Ocean ecosystem is an optimizer by default; ``"thermal"``: samples ``exp(-β E_bqm)``),
    ``thermal_sweeps``, ``global_moves`` and ``seed``. The :class:`~isingattn.inference.mcmc.SQA`
    engine that attention uses is unaffected: it samples at the model's β.

    ``beta`` and ``gamma_schedule`` default to None, which means:

    * ``mode="thermal"``: ``beta = 1.0`` and ``("linear", 3.0, 0.01)``. Thermal mode samples
      at the β it is given, whatever the BQM.
    * ``mode="anneal"``: derived from the BQM's energy scale, in the manner of
      dwave-samplers' default ``beta_range`` (hot end: moves accepted with 1/2, cold end
      with 1/100). ``beta = anneal_beta(h, J, trotter)``: the locked ring at β excites the
      smallest gap with probability 1/100, and the nearly free replicas at ``β/P`` still
      flip against the typical local field with 1/100 (a fixed-β SQA's replicas cannot be
      hot while its ring is cold, so β is the colder of what both allow). The Γ schedule is
      ``anneal_gamma_schedule(beta, trotter)``: geometric, from the Γ where the ring coupling
      costs a replica's flip 1/2 to where it costs 1/100. Both scale with the problem, so a
      BQM multiplied by ``c`` is annealed identically. ``info`` reports the β and schedule
      used and ``info["derived"]``, the names derived from the BQM.

    A β or schedule that the user gives (at construction or per call) is always used as
    given. Only an anneal with a derived schedule runs in units of ``1/β`` (``βh``, ``βJ``
    at β = 1: the same weights), so that every problem of one padded size shares one
    compilation.

    ``seed``: an int gives ``jax.random.PRNGKey(seed)``. Every read draws its own random
    numbers (its own block of counters of the threefry stream of each sweep, see
    :func:`~isingattn.inference.mcmc.sqa.sqa_sample`), so reads are independent and distinct, and the whole sample set
    is reproducible from the seed. ``seed=None`` draws a seed from ``os.urandom``; it is
    reported in ``sampleset.info["seed"]``. (openjij's samplers, by contrast, restart
    every read from the same integer seed, so all reads come out identical.)

    β is in the units of the BQM's energy (dimod convention ``E = Σ a_i s_i + Σ b_ij s_i
    s_j + offset``; the offset does not change the distribution). BINARY models are
    sampled as their SPIN equivalent and returned as 0/1 with the BQM's own energies.
    Slow for large dense problems: ``O(num_reads · n² · trotter · num_sweeps)``; one
    compilation per problem size and parameter set.

    Sparse BQMs (an annealer's graph: Chimera, Pegasus, Zephyr; ``IsingModel.from_bqm``
    takes the edge list for ``n ≥ 64`` at most 10% coupled) are never densified: each sweep
    moves the classes of a proper colouring of the graph at once, ``O(trotter · (n + E))``
    per read and memory ``O(num_reads · trotter · n + E)``; the anneal-mode β comes from
    the edge list (:func:`anneal_beta`); one compilation per graph and parameter set (a
    derived schedule runs in units of ``1/β``, so every BQM on one graph shares it). The
    kernel runs in float32 whatever ``jax_enable_x64`` (its noise and fields in float64
    ran far slower on a CPU); energies are the BQM's own.

    Ocean's parameters, as dwave-samplers names them (handled by the base,
    ``ocean.reads``, as in PTSampler and SwendsenWangSampler):

    * ``initial_states`` (samples-like, ``dimod.as_samples``: an array with labels, dicts,
      a sample set; values ±1 for a SPIN BQM, 0/1 for a BINARY one): every Trotter slice of
      a read starts there. ``initial_states_generator`` (``"random"``, the default: reads
      beyond the given states start at random; ``"tile"``: the given states repeat;
      ``"none"``: fewer states than ``num_reads`` is an error). ``num_sweeps=0`` returns
      the initial states (a read without one: a uniformly random state).
    * ``interrupt_function``: reads run in calls of at most ``READS_PER_CALL`` reads (equal
      sizes, one compiled program); before each call after the first it is called, and when
      it returns True sampling stops and the reads already made are returned
      (``info["interrupted"]``). A read depends only on ``seed`` and ``num_reads``, so an
      interrupted run returns exactly the first reads of the full one.
    * ``num_reads``, ``num_sweeps``, ``seed`` as above. dwave-samplers'
      ``PathIntegralAnnealingSampler`` anneals β (``beta_range``, ``beta_schedule_type``) at
      a fixed Γ; this sampler anneals Γ at a fixed β, so its schedule parameters keep their
      own names (``beta``, ``gamma_schedule``).
    """

    DEFAULTS = _SQA_DEFAULTS

    def _check(self, p):
        own = "SQASampler"
        num_sweeps = nonneg_int("num_sweeps", p["num_sweeps"], owner=own)  # 0: the initial states, unchanged
        schedule = THERMAL_GAMMA_SCHEDULE if p["gamma_schedule"] is None else p["gamma_schedule"]
        sqa.check_config(num_sweeps=max(num_sweeps, 1), trotter=p["trotter"], gamma_schedule=schedule,
                         mode=p["mode"], num_reads=p["num_reads"], thermal_sweeps=p["thermal_sweeps"])
        check_beta(p["beta"], optional=True)
        ocean.check(p)

    def _properties(self) -> dict:
        return {"modes": sqa.MODES, "gamma_schedules": SQA_SCHEDULES,
                "initial_states_generators": ocean.INITIAL_STATES_GENERATORS, "reads_per_call": ocean.READS_PER_CALL}

    @staticmethod
    def _given(p):
        """β and schedule with thermal mode's defaults filled in (None: derived in anneal mode)."""
        beta, schedule = p["beta"], p["gamma_schedule"]
        if p["mode"] == "thermal":
            beta = THERMAL_BETA if beta is None else beta
            schedule = THERMAL_GAMMA_SCHEDULE if schedule is None else schedule
        return (None if beta is None else float(beta)), (None if schedule is None else tuple(schedule))

    def _info(self, p, plan) -> dict:  # _sample reports the β and schedule it derives
        beta, schedule = self._given(p)
        return {"beta": beta, "mode": p["mode"], "trotter": p["trotter"], "num_sweeps": p["num_sweeps"],
                "gamma_schedule": schedule, "derived": ()}

    def _sample(self, bqm, p, plan, seed):
        model = IsingModel.from_bqm(bqm)  # SPIN view: h = -linear, J = -quadratic (DESIGN.md §1)
        n, P = model.n, p["trotter"]
        beta, schedule = self._given(p)
        derived = ()
        if beta is None:  # anneal mode only
            beta, derived = anneal_beta(model.h, model.J, P), ("beta",)
        sparse = isinstance(model.J, SparseCouplings)
        if schedule is None:
            schedule, derived = anneal_gamma_schedule(beta, P), derived + ("gamma_schedule",)
            # the weights depend on βE and βΓ only: run at β = 1 with βh, βJ and the
            # problem-independent schedule (one compilation per padded size or graph)
            J = model.J.with_weights(beta * model.J.weights) if sparse else beta * model.J
            h, run_beta, run_schedule = beta * model.h, 1.0, anneal_gamma_schedule(1.0, P)
        else:
            h, J, run_beta, run_schedule = model.h, model.J, beta, schedule
        # float32 whatever jax_enable_x64: the kernel's noise and fields in float64 ran ~10x
        # slower on a CPU, and the energies reported are the BQM's own (float64)
        h, J = jnp.asarray(h, SAMPLE_DTYPE), J.astype(SAMPLE_DTYPE)
        if sparse:  # edge list: colour-class sweeps, O(P·n + E) per read
            classes, m = color_classes(J), n
        else:
            # Pad to a multiple of PAD_TO with free spins (zero field and couplings: they do not
            # touch the real ones) so that problems of similar size share one compilation.
            classes, m = None, -(-n // PAD_TO) * PAD_TO
            h = jnp.pad(h, (0, m - n))
            J = jnp.pad(J, ((0, m - n), (0, m - n)))
        beta_arr = jnp.asarray(run_beta, SAMPLE_DTYPE)

        def run(key, init, c):
            return sqa.sqa_sample(key, h, J, beta_arr, num_reads=c, trotter=P, num_sweeps=int(p["num_sweeps"]),
                                  gamma_schedule=run_schedule, mode=p["mode"], thermal_sweeps=p["thermal_sweeps"],
                                  global_moves=bool(p["global_moves"]), classes=classes,
                                  init=jnp.asarray(init, SAMPLE_DTYPE))

        spins, infos, interrupted, t = ocean.reads(bqm, model.labels, p, seed, run, width=m)
        # acceptance rates count the padding spins too; energies come from the BQM itself
        info = _merge_calls(infos) if infos else {}
        info.update(beta=beta, gamma_schedule=schedule, derived=derived, interrupted=interrupted,
                    sweep="colour classes" if sparse else "systematic")
        return spins, model.labels, info, t


def _merge_calls(infos: list) -> dict:
    """The diagnostics of several :func:`~isingattn.inference.mcmc.sqa.sqa_sample` calls as
    one: mean acceptance rates; in thermal mode the largest R-hat, converged only if every
    call is, and frozen where a spin is frozen in every call."""
    out = {}
    for k in infos[0]:
        if k == "energy":
            continue
        v = np.stack([np.asarray(i[k]) for i in infos])
        if k.startswith("acceptance"):
            out[k] = v.mean(0)
        elif k == "rhat_energy":
            out[k] = v.max(0)
        else:  # converged, frozen
            out[k] = v.all(0)
    return out
