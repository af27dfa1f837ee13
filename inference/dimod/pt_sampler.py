"""Parallel tempering as a ``dimod.Sampler``: :class:`PTSampler`, on the base that
SQASampler and DQASampler share (:class:`~isingattn.inference.dimod.samplers.IsingSampler`:
defaults overridden per call, unknown keys refused, ``seed``, the empty BQM, BINARY models
sampled as their SPIN view, a ``dimod.SampleSet`` of ``num_reads`` rows with the BQM's own
energies)."""

from __future__ import annotations

import dataclasses

import jax.numpy as jnp
import numpy as np

from isingattn.inference.dimod import ocean
from isingattn.inference.dimod.ocean import OCEAN_DEFAULTS
from isingattn.inference.dimod.samplers import PAD_TO, IsingSampler, check_beta
from isingattn.inference.mcmc.pt import ParallelTempering
from isingattn.model import IsingModel
from isingattn.validate import float_in, nonneg_int, positive_int

__all__ = ["PTSampler"]

_PT_DEFAULTS = dict(num_reads=10, beta=1.0, num_sweeps=1000, num_replicas=16, beta_min=0.0, **OCEAN_DEFAULTS)


class PTSampler(IsingSampler):
    """Non-reversible parallel tempering (:class:`~isingattn.inference.mcmc.pt.ParallelTempering`)
    as a ``dimod.Sampler`` that samples ``exp(-β E_bqm)`` at the β it is given.

    Parameters (defaults at construction, overridden per call): ``num_reads`` (10),
    ``beta`` (1.0, in the BQM's energy units: the dimod convention ``E = Σ a_i s_i + Σ b_ij
    s_i s_j + offset``; the offset does not change the distribution), ``num_sweeps`` (1000
    steps of PT, during which the ladder adapts), ``num_replicas`` (16), ``beta_min`` (0.0,
    the hot end), ``seed``, and Ocean's ``initial_states`` (every replica of a read's chain
    starts there), ``initial_states_generator`` and ``interrupt_function``, with
    SQASampler's semantics (``ocean.reads``:
    reads in calls of at most ``READS_PER_CALL``, the interrupt asked between calls,
    ``num_sweeps=0`` returns the initial states).

    Each read is the final state of its own tempered chain (``num_reads`` independent
    chains, each of ``num_replicas`` replicas), so reads are independent and the whole set
    is reproducible from the seed. ``info`` reports the settings, and per call of up to
    ``READS_PER_CALL`` chains (each adapts its own ladder) the final ``ladder``, the
    ``swap_rate`` of each adjacent pair, the ``round_trip_rate`` and the stepping-stone
    ``log_z`` with its standard error ``log_z_se`` (of ``exp(-β E_bqm)`` without the
    offset); with several calls these are lists, one entry per call. Dense problems are
    padded to a multiple of 16 spins with masked spins (no field, no coupling, not counted
    in ``log_z``) so that similar sizes share a compilation.
    """

    DEFAULTS = _PT_DEFAULTS

    def _check(self, p) -> ParallelTempering:
        own = "PTSampler"
        check_beta(p["beta"])
        ocean.check(p)
        num_sweeps = nonneg_int("num_sweeps", p["num_sweeps"], owner=own)  # 0: the initial states, unchanged
        return ParallelTempering(num_warmup=max(num_sweeps, 1), num_samples=1,
                                 num_chains=positive_int("num_reads", p["num_reads"], owner=own),
                                 num_replicas=positive_int("num_replicas", p["num_replicas"], owner=own),
                                 beta_min=float_in("beta_min", p["beta_min"], 0.0, owner=own), diagnostics=False,
                                 keep_samples=True, houdayer=False)  # Houdayer's move would pair the reads

    def _properties(self) -> dict:
        return {"thermal": True}

    def _info(self, p, engine: ParallelTempering) -> dict:
        return {"beta": float(p["beta"]), "num_sweeps": int(p["num_sweeps"]), "num_replicas": engine.num_replicas,
                "beta_min": engine.beta_min}

    def _sample(self, bqm, p, engine: ParallelTempering, seed):
        model = IsingModel.from_bqm(bqm, beta=float(p["beta"]))  # SPIN view: h = -linear, J = -quadratic
        n, labels = model.n, model.labels
        if not model.is_sparse:  # masked padding: similar sizes share one compilation
            m = -(-n // PAD_TO) * PAD_TO
            model = IsingModel(jnp.pad(model.h, (0, m - n)), jnp.pad(model.J, ((0, m - n), (0, m - n))), model.beta,
                               mask=jnp.arange(m) < n)
        else:
            m = n

        def run(key, init, c):
            chains = dataclasses.replace(engine, num_chains=c, init=jnp.asarray(init, model.dtype))
            out = chains.marginals(model, key=key)
            info = {k: np.asarray(out.info[k]) for k in ("ladder", "swap_rate", "round_trip_rate", "log_z_se")}
            return out.samples, {**info, "log_z": np.asarray(out.log_z)}

        spins, infos, interrupted, t = ocean.reads(bqm, labels, p, seed, run, width=m)
        info = {k: infos[0][k] if len(infos) == 1 else [i[k] for i in infos] for k in (infos[0] if infos else ())}
        return spins, labels, {**info, "interrupted": interrupted}, t
