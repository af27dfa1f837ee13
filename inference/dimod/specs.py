"""What :class:`~isingattn.inference.dimod.engine.DimodEngine` needs to know about a dimod sampler:
how to ask it for β, samplers by name (so that an engine saves in a model config), the h and J
ranges it declares, the engine's warnings, and host helpers shared with
:mod:`isingattn.inference.dimod.pool`.
"""

from __future__ import annotations

import math
from typing import Optional

import numpy as np

from isingattn.engine import ConvergenceWarning
from isingattn.errors import IsingInputError

# the per-model diagnostics the host returns, in this order (floats; flags as 0/1)
CAL_KEYS = ("beta_eff", "beta_eff_lo", "beta_eff_hi", "beta_eff_se", "beta_h", "beta_J", "scale_h", "scale_J",
             "calibration_iterations", "calibration_error", "calibrated", "ground_only", "at_range_limit")
CHAIN_KEYS = ("chain_break_fraction", "broken_reads", "chains_intact")


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


def sa_sampler():
    try:
        from dwave.samplers import SimulatedAnnealingSampler
    except ImportError:
        raise ImportError("DimodEngine() defaults to dwave-samplers' SimulatedAnnealingSampler: "
                          "pip install dwave-samplers, or pass a sampler: DimodEngine(my_sampler).") from None
    return SimulatedAnnealingSampler()


# name form -> what it builds (the forms a bad name's error lists)
SAMPLER_NAMES = {
    "sa": "dwave-samplers' SimulatedAnnealingSampler() (β passed as beta_range: a Boltzmann sampler)",
    "hidden-beta:<beta0>[:<num_sweeps>]": "isingattn.inference.dimod.standins.HiddenBetaSampler(beta0, num_sweeps): fixed-β "
                                          "simulated annealing at a β the engine is not told (a QPU stand-in)",
    "mock-pegasus[<m>]:<name>": "isingattn.inference.dimod.standins.mock_qpu(<name>, m): EmbeddingComposite(MockDWaveSampler) on "
                                "Pegasus P(m) (m = 3 by default), the named sampler sampling the embedded problem",
}


def _bad_name(name, why):
    forms = "; ".join(f"{k!r}: {v}" for k, v in SAMPLER_NAMES.items())
    return IsingInputError(f"DimodEngine: sampler name {name!r} {why}. A sampler name is one of: {forms}. "
                           "E.g. sampler='hidden-beta:2.5' or 'mock-pegasus:hidden-beta:2.5'; or pass a sampler object "
                           "(which a saved model config cannot hold).")


def _build_named(name: str, full: str):
    head, _, rest = name.partition(":")
    if head == "sa" and not rest:
        return sa_sampler()
    if head == "hidden-beta":
        from isingattn.inference.dimod.standins import HiddenBetaSampler

        parts = rest.split(":") if rest else []
        try:
            if not 1 <= len(parts) <= 2:
                raise ValueError
            beta0, sweeps = float(parts[0]), (int(parts[1]) if len(parts) == 2 else 300)
        except ValueError:
            raise _bad_name(full, "is not hidden-beta:<beta0>[:<num_sweeps>] (a positive float, a positive "
                                  "integer)") from None
        if not (math.isfinite(beta0) and beta0 > 0 and sweeps > 0):
            raise _bad_name(full, "needs beta0 > 0 (finite) and num_sweeps > 0")
        return HiddenBetaSampler(beta0, sweeps)
    if head.startswith("mock-pegasus"):
        m = head[len("mock-pegasus"):] or "3"
        if not m.isdigit() or int(m) < 2 or not rest:
            raise _bad_name(full, "is not mock-pegasus[<m>]:<name> (m an integer >= 2, then the substitute's name)")
        from isingattn.inference.dimod.standins import mock_qpu

        return mock_qpu(_build_named(rest, full), int(m))
    raise _bad_name(full, "is not a known sampler name")


class NamedSampler(str):
    """A sampler given by name (:data:`SAMPLER_NAMES`): the name itself (a ``str``, so an engine
    holding it saves as JSON and rebuilds from it, ``isingattn.engine.to_spec``) that samples
    like the sampler it names (attributes are the built sampler's)."""

    def __new__(cls, name: str):
        obj = super().__new__(cls, name)
        obj.__dict__["_sampler"] = _build_named(str(name), str(name))
        return obj

    def __getattr__(self, attr):
        if attr.startswith("__"):
            raise AttributeError(attr)
        return getattr(self.__dict__["_sampler"], attr)

    @property
    def built(self):
        """The sampler object this name builds."""
        return self.__dict__["_sampler"]


class DimodCalibrationWarning(ConvergenceWarning):
    """Calibration did not bring the samples' effective β to the model's β
    (``info["calibrated"]`` False): the sampler returns only ground states, or the scale
    needed lies outside the h/J range the sampler declares, or the iterations ran out."""


class ChainBreakWarning(ConvergenceWarning):
    """An embedded sampler returned too few reads with intact chains: reads with broken
    chains were used (``info["chains_intact"]`` False)."""


def declared_ranges(sampler):
    """``(h_max, j_max)``: the largest ``|h|`` and ``|J|`` the sampler (or, through
    composites, the structured sampler below it) declares in ``properties["h_range"]`` /
    ``["j_range"]``; ``inf`` where it declares none. ``j_max`` is the smaller end of
    ``j_range`` in magnitude, since a model's couplings take either sign."""
    props = getattr(sampler, "properties", None) or {}
    while isinstance(props, dict) and "h_range" not in props and "child_properties" in props:
        props = props["child_properties"]
    h_max = j_max = math.inf
    if isinstance(props, dict):
        if "h_range" in props:
            h_max = float(min(abs(x) for x in props["h_range"]))
        if "j_range" in props:
            j_max = float(min(abs(x) for x in props["j_range"]))
    return h_max, j_max

def sampler_name(sampler) -> str:
    """The class name of a sampler (of the one a name builds, for a :class:`NamedSampler`)."""
    return type(sampler.built if isinstance(sampler, NamedSampler) else sampler).__name__


def uniform_torque():
    from dwave.embedding.chain_strength import uniform_torque_compensation

    return uniform_torque_compensation


def subset_reads(arr, S, seed, shuffle=False):
    """``S`` of the reads ``arr`` in random order (all of them, in order, when there are
    exactly ``S`` and not ``shuffle``). Samplers may return reads sorted by energy (an
    aggregated sample set, e.g. from a QPU or an embedding composite): the first ``S`` of
    those are the coldest, and in that order the reads look like a badly mixing chain to an
    ESS estimator. iid reads may be put in any order."""
    if len(arr) == S and not shuffle:
        return arr
    return arr[np.random.default_rng(int(seed)).permutation(len(arr))[:S]]
