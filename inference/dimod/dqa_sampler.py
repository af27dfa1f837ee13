"""Digitized diabatic quantum annealing as a ``dimod.Sampler``: :class:`DQASampler`, on the base
that SQASampler, PTSampler and SwendsenWangSampler share
(:class:`~isingattn.inference.dimod.samplers.IsingSampler`)."""

from __future__ import annotations

import time

import jax
import numpy as np

from isingattn.errors import IsingInputError, TooManySpinsError
from isingattn.inference.dimod.samplers import IsingSampler, check_beta
from isingattn.inference.dqa import circuit as dqa_circuit
from isingattn.inference.dqa import engine as dqa
from isingattn.model import IsingModel
from isingattn.validate import boolean, nonneg_int, positive_float, positive_int

__all__ = ["DQASampler"]


_DQA_DEFAULTS = dict(num_reads=1, tau=12.0, num_steps=32, schedule="linear", order=2, beta=None,
                         calibrate=None, calibration_steps=3, calibrate_from="state")


class DQASampler(IsingSampler):
    """Digitized diabatic quantum annealing (the algorithm of :class:`~isingattn.inference.dqa.engine.DQA`) as a
    ``dimod.Sampler``.

    ``DQASampler(**defaults)`` sets default parameters; ``sample(bqm, **params)`` overrides
    them. Parameters: ``num_reads`` (shots), ``tau``, ``num_steps``, ``schedule``, ``order``,
    ``beta``, ``calibrate``, ``calibration_steps``, ``calibrate_from``, ``seed``.

    Without ``beta`` the BQM is annealed as given, as a quantum annealer would: a short
    anneal samples roughly ``exp(β_h h·s + β_J Σ J s s)`` with ``β_h = 2κ``, ``β_J = 4κ``
    (``κ ≈ τ²/12``); the default ``tau = 12`` gives low-energy samples (for unit-scale
    biases the effective β is about 3). ``info`` reports the effective ``beta_h``/``beta_J``.
    With ``beta`` (in the BQM's energy units) and ``calibrate`` (default True when ``beta``
    is set) the programmed biases are rescaled so the samples follow ``exp(-β E_bqm)`` as
    closely as the anneal allows (:class:`~isingattn.inference.dqa.engine.DQA`). ``info`` holds the scalars of the DQA
    diagnostics (``beta_h``, ``beta_J``, ``kl``, ``scale_h``, ...).

    ``seed``: an int gives ``jax.random.PRNGKey(seed)``; every read is an independent shot
    of the same circuit and the sample set is reproducible from the seed. ``None`` draws a
    seed from ``os.urandom`` (reported in ``info["seed"]``).

    Limited to 20 variables (a ``2^n`` statevector); slow beyond ~16 on a CPU. One
    compilation per problem size and parameter set.
    """

    DEFAULTS = _DQA_DEFAULTS

    def _check(self, p) -> dqa.DQA:
        # checked here so that the message names the sampler's parameters (DQA calls num_reads
        # num_shots); NumPy scalars become Python numbers (DQA keeps its settings static)
        check_beta(p["beta"], optional=True)
        own = "DQASampler"
        calibrate = p["beta"] is not None if p["calibrate"] is None else boolean("calibrate", p["calibrate"], owner=own)
        if calibrate and p["beta"] is None:
            raise IsingInputError("calibrate=True needs a target beta; pass beta=... or calibrate=False.")
        return dqa.DQA(tau=positive_float("tau", p["tau"], owner=own),
                   num_steps=positive_int("num_steps", p["num_steps"], owner=own), schedule=p["schedule"],
                   order=positive_int("order", p["order"], owner=own, hi=2),
                   num_shots=positive_int("num_reads", p["num_reads"], owner=own), calibrate=calibrate,
                   calibration_steps=nonneg_int("calibration_steps", p["calibration_steps"], owner=own),
                   calibrate_from=p["calibrate_from"])

    def _properties(self) -> dict:
        return {"max_num_variables": dqa_circuit.MAX_N, "schedules": dqa.SCHEDULES + ("callable",), "orders": (1, 2)}

    def _info(self, p, engine: dqa.DQA) -> dict:
        return {"tau": float(p["tau"]), "num_steps": int(p["num_steps"]), "order": int(p["order"]), "beta": p["beta"],
                "calibrate": engine.calibrate}

    def _sample(self, bqm, p, engine: dqa.DQA, seed):
        if len(bqm.variables) > dqa_circuit.MAX_N:
            raise TooManySpinsError(
                f"DQASampler simulates a 2^n statevector and is limited to {dqa_circuit.MAX_N} variables; this BQM has "
                f"{len(bqm.variables)}. Use SQASampler or a classical sampler for larger problems.")
        beta = p["beta"]
        model = IsingModel.from_bqm(bqm, beta=1.0 if beta is None else beta)  # SPIN view, h = -linear, J = -quadratic
        t = time.perf_counter_ns()
        samples, _, run_info = engine.run(model, key=jax.random.PRNGKey(seed))
        return samples, model.labels, {k: np.asarray(v).item() for k, v in run_info.items()}, t
