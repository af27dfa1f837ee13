"""Digitized diabatic quantum annealing as a ``dimod.Sampler``: :class:`DQASampler`, on the base
that SQASampler, PTSampler and SwendsenWangSampler share
(:class:`~isingattn.inference.dimod.samplers.IsingSampler`)."""

from __future__ import annotations

import time
from collections import OrderedDict
from typing import NamedTuple, Optional

import jax
import numpy as np

from isingattn.errors import IsingInputError, TooManySpinsError
from isingattn.energy import energy, spin_table, spins_from_index
from isingattn.inference.dimod import ocean
from isingattn.inference.dimod.samplers import IsingSampler, check_beta
from isingattn.inference.dqa import circuit as dqa_circuit
from isingattn.inference.dqa import engine as dqa
from isingattn.model import IsingModel
from isingattn.validate import boolean, nonneg_int, positive_float, positive_int

__all__ = ["DQASampler"]


_DQA_DEFAULTS = dict(num_reads=1, tau=12.0, num_steps=32, schedule="linear", order=2, beta=None,
                     calibrate=None, calibration_steps=3, calibrate_from="state", anneal_schedule=None,
                     **ocean.OCEAN_DEFAULTS)
_evolve = jax.jit(dqa_circuit.evolve)  # one basis state at a time: one program per n and num_steps
CDF_CACHE_BYTES = 2**28  # the evolved states kept per sample call (float64 CDFs; 32 at n = 20)


class _Plan(NamedTuple):
    engine: dqa.DQA  # the forward anneal (num_steps ≥ 1: a zero-length anneal runs nothing)
    path: Optional[dqa_circuit.AnnealPath]  # the anneal_schedule, if given


class DQASampler(IsingSampler):
    """Digitized diabatic quantum annealing (the algorithm of :class:`~isingattn.inference.dqa.engine.DQA`) as a
    ``dimod.Sampler``, forward or reverse.

    ``DQASampler(**defaults)`` sets default parameters; ``sample(bqm, **params)`` overrides
    them. Parameters: ``num_reads`` (shots), ``tau``, ``num_steps``, ``schedule``, ``order``,
    ``beta``, ``calibrate``, ``calibration_steps``, ``calibrate_from``, ``anneal_schedule``,
    ``initial_states``, ``initial_states_generator``, ``interrupt_function``, ``seed``.

    Without ``beta`` the BQM is annealed as given, as a quantum annealer would: a short
    anneal samples roughly ``exp(β_h h·s + β_J Σ J s s)`` with ``β_h = 2κ``, ``β_J = 4κ``
    (``κ ≈ τ²/12``); the default ``tau = 12`` gives low-energy samples (for unit-scale
    biases the effective β is about 3). ``info`` reports the effective ``beta_h``/``beta_J``.
    With ``beta`` (in the BQM's energy units) and ``calibrate`` (default True when ``beta``
    is set) the programmed biases are rescaled so the samples follow ``exp(-β E_bqm)`` as
    closely as the anneal allows (:class:`~isingattn.inference.dqa.engine.DQA`). ``info`` holds the scalars of the DQA
    diagnostics (``beta_h``, ``beta_J``, ``kl``, ``scale_h``, ...).

    The anneal fraction ``s`` runs ``A = 1 - s``, ``B = s`` (or ``schedule(s)``, a callable
    ``s -> (A, B)``). ``anneal_schedule`` is D-Wave's parameter: points ``[[t, s], ...]`` of a
    piecewise-linear ``s(t)`` (times in the units of ``tau``, whose role the last time
    takes), checked by the QPU's rules (``check_anneal_schedule`` in ``inference/dqa/circuit.py``).
    A schedule from ``(0, 0)`` is a forward anneal from ``|+⟩^n``. One that starts and ends
    at ``s = 1`` is a *reverse anneal*, as on D-Wave's QPU (``initial_state`` with such an
    ``anneal_schedule``; Ocean's ``ReverseBatchStatesComposite`` for several states): each
    read starts in the classical state ``|z⟩`` of its initial state, the transverse field
    rises as ``s`` falls to the reversal point and vanishes again at ``s = 1``, and the read
    is a measurement of the final state. The ``num_steps`` Trotter steps span the whole
    schedule; a reversal point ``s = 1`` applies no transverse field and returns every
    initial state unchanged.

    Ocean's parameters (``inference/dimod/ocean.py``, shared with SQASampler):

    * ``initial_states`` (samples-like; ±1 for a SPIN BQM, 0/1 for a BINARY one) with
      ``initial_states_generator`` (``"random"``: reads beyond the given states start in a
      uniformly random state; ``"tile"``; ``"none"``): the classical states that the reverse
      anneal starts from. They need a reverse ``anneal_schedule`` (as on the QPU, where an
      initial state without one is an error). A reverse schedule without ``initial_states``
      starts every read in a random state. One statevector evolution per distinct initial
      state (reads from the same state are shots of the same final state; the final states
      kept are capped at ``CDF_CACHE_BYTES``, 256 MiB: 32 states at n = 20); D-Wave's
      ``reinitialize_state=False`` (each read starting where the last ended) is not offered.
    * ``interrupt_function``: a reverse anneal runs its reads in calls of at most
      ``READS_PER_CALL`` (each evolving the call's new initial states); before each call after
      the first it is asked, and when it returns True the reads already made are returned
      (``info["interrupted"]``). Reads depend only on ``seed`` and ``num_reads``, so an
      interrupted run returns exactly the first reads of the full one. A forward anneal is one
      evolution that gives every read at once: it is not asked.
    * ``num_steps=0`` (a zero-length anneal): the initial states are returned as they are; a
      read without one (and a forward anneal) returns a uniformly random state, the
      measurement of ``|+⟩^n``.

    A reverse anneal is not calibrated: ``beta`` and ``calibrate=True`` are refused with it.

    ``seed``: an int gives ``jax.random.PRNGKey(seed)``; every read is an independent shot
    and the sample set is reproducible from the seed. ``None`` draws a seed from
    ``os.urandom`` (reported in ``info["seed"]``).

    Limited to 20 variables (a ``2^n`` statevector); slow beyond ~16 on a CPU. One
    compilation per problem size and parameter set.
    """

    DEFAULTS = _DQA_DEFAULTS

    def _check(self, p) -> _Plan:
        # checked here so that the message names the sampler's parameters (DQA calls num_reads
        # num_shots); NumPy scalars become Python numbers (DQA keeps its settings static)
        check_beta(p["beta"], optional=True)
        ocean.check(p)
        own = "DQASampler"
        num_steps = nonneg_int("num_steps", p["num_steps"], owner=own)
        dqa_circuit.check_config(schedule=p["schedule"], owner=own)
        path = None
        if p["anneal_schedule"] is not None:
            path = dqa_circuit.AnnealPath(dqa_circuit.check_anneal_schedule(p["anneal_schedule"]), p["schedule"])
        reverse = path is not None and path.reverse
        if p["initial_states"] is not None and num_steps and not reverse:
            raise IsingInputError("DQASampler: initial_states start a reverse anneal, which needs an anneal_schedule "
                                  "that starts and ends at s = 1, e.g. [[0, 1], [6, 0.45], [12, 1]] (as on D-Wave's "
                                  "QPU); got anneal_schedule=" + repr(p["anneal_schedule"]) + ".")
        if reverse and (p["beta"] is not None or p["calibrate"]):
            raise IsingInputError("DQASampler: a reverse anneal is not calibrated to a target beta; leave beta=None "
                                  "and calibrate=None/False with a reverse anneal_schedule.")
        calibrate = p["beta"] is not None if p["calibrate"] is None else boolean("calibrate", p["calibrate"], owner=own)
        if calibrate and p["beta"] is None:
            raise IsingInputError("calibrate=True needs a target beta; pass beta=... or calibrate=False.")
        engine = dqa.DQA(tau=path.duration if path else positive_float("tau", p["tau"], owner=own),
                         num_steps=max(num_steps, 1), schedule=path or p["schedule"],
                         order=positive_int("order", p["order"], owner=own, hi=2),
                         num_shots=positive_int("num_reads", p["num_reads"], owner=own), calibrate=calibrate,
                         calibration_steps=nonneg_int("calibration_steps", p["calibration_steps"], owner=own),
                         calibrate_from=p["calibrate_from"])
        return _Plan(engine, path)

    def _properties(self) -> dict:
        return {"max_num_variables": dqa_circuit.MAX_N, "schedules": dqa.SCHEDULES + ("callable",), "orders": (1, 2),
                "initial_states_generators": ocean.INITIAL_STATES_GENERATORS, "reads_per_call": ocean.READS_PER_CALL}

    def _info(self, p, plan: _Plan) -> dict:
        return {"tau": float(plan.engine.tau), "num_steps": int(p["num_steps"]), "order": int(p["order"]),
                "beta": p["beta"], "calibrate": plan.engine.calibrate,
                "anneal": "reverse" if plan.path is not None and plan.path.reverse else "forward",
                "anneal_schedule": None if plan.path is None else plan.path.points}

    def _sample(self, bqm, p, plan: _Plan, seed):
        if len(bqm.variables) > dqa_circuit.MAX_N:
            raise TooManySpinsError(
                f"DQASampler simulates a 2^n statevector and is limited to {dqa_circuit.MAX_N} variables; this BQM has "
                f"{len(bqm.variables)}. Use SQASampler or a classical sampler for larger problems.")
        beta = p["beta"]
        model = IsingModel.from_bqm(bqm, beta=1.0 if beta is None else beta)  # SPIN view, h = -linear, J = -quadratic
        if p["num_steps"] == 0 or plan.path is not None and plan.path.reverse:
            run = None if p["num_steps"] == 0 else _ReverseAnneal(model, plan, p)
            spins, _, interrupted, t = ocean.reads(bqm, model.labels, p, seed, run, length=p["num_steps"])
            evolved = 0 if run is None else run.evolved
            return spins, model.labels, {"interrupted": interrupted, "initial_states_evolved": evolved}, t
        t = time.perf_counter_ns()
        samples, _, run_info = plan.engine.run(model, key=jax.random.PRNGKey(seed))
        info = {k: np.asarray(v).item() for k, v in run_info.items()}
        return samples, model.labels, {**info, "interrupted": False}, t


class _ReverseAnneal:
    """``run(key, init, c)`` of :func:`~isingattn.inference.dimod.ocean.reads` for a reverse
    anneal: ``c`` reads from the classical states ``init [c, n]`` (±1; 0: a uniformly random
    state from the key). Each distinct state is evolved once per ``sample`` call (its
    ``|ψ|²`` kept as a CDF, least recently used first dropped beyond ``CDF_CACHE_BYTES``);
    a read is one shot of it (inverse CDF)."""

    def __init__(self, model: IsingModel, plan: _Plan, p: dict):
        n, dtype = model.n, model.dtype
        self.n, self.num_reads, self.seen, self.evolved, self.cdf = n, p["num_reads"], 0, 0, OrderedDict()
        self.keep = max(1, CDF_CACHE_BYTES // (8 * 2**n))
        self.E = energy(model.h, model.J, spin_table(n, dtype))  # [2^n], spin j is bit n-1-j
        phase, mix = dqa_circuit.schedule_coefficients(plan.path.duration, p["num_steps"], plan.path, p["order"])
        self.phase, self.mix = np.asarray(phase, dtype), np.asarray(mix, dtype)

    def __call__(self, key, init, c):
        k_start, k_shot = jax.random.split(key)
        z = np.where(init != 0, init, np.asarray(jax.random.rademacher(k_start, init.shape)))
        idx = ((1 - z.astype(np.int64)) // 2) @ (1 << np.arange(self.n - 1, -1, -1, dtype=np.int64))
        u = np.asarray(jax.random.uniform(k_shot, (c,), dtype=self.E.dtype))
        real = min(c, self.num_reads - self.seen)  # the rest pad the call (ocean.reads drops them)
        self.seen += c
        out = idx.copy()
        for r in range(real):
            i = int(idx[r])
            if i in self.cdf:
                self.cdf.move_to_end(i)
            else:
                psi = np.asarray(_evolve(self.E, self.phase, self.mix, i), np.complex128)
                self.cdf[i], self.evolved = np.cumsum(np.abs(psi) ** 2), self.evolved + 1
                if len(self.cdf) > self.keep:
                    self.cdf.popitem(last=False)
            cdf = self.cdf[i]
            out[r] = min(np.searchsorted(cdf, u[r] * cdf[-1], side="right"), cdf.size - 1)
        return np.asarray(spins_from_index(out.astype(np.int32), self.n, self.E.dtype)), {}
