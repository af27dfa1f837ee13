"""The ``dimod.Sampler`` contract, implemented once for the samplers of this package
(:class:`~isingattn.inference.sqa.SQASampler`, :class:`~isingattn.inference.dqa.DQASampler`).

:class:`IsingSampler` holds what they share: defaults given at construction and
overridden per call, unknown keys refused, ``seed`` and ``beta`` validated, the empty
BQM, BINARY models sampled as their SPIN equivalent and returned as 0/1, and a
``dimod.SampleSet`` with ``num_reads`` rows (not aggregated) and the BQM's own energies.
``sample_ising`` / ``sample_qubo`` come from ``dimod.Sampler``. A subclass supplies its
``DEFAULTS``, :meth:`IsingSampler._check` (its own settings) and
:meth:`IsingSampler._sample` (the algorithm, on the BQM's SPIN view).
"""

from __future__ import annotations

import os
from typing import Any, ClassVar

import dimod
import numpy as np

from isingattn.errors import IsingInputError

__all__ = ["IsingSampler", "check_beta", "check_seed"]


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
        parameters = self.remove_unknown_kwargs(**parameters)
        seed = parameters.pop("seed", None)
        p = {**self._defaults, **{k: v for k, v in parameters.items() if v is not None}}
        plan = self._check(p)
        seed = check_seed(seed)
        info = {"seed": seed, **self._info(p, plan)}
        if not bqm.variables:
            return dimod.SampleSet.from_samples_bqm((np.empty((p["num_reads"], 0), np.int8), []), bqm, info=info)
        spins, labels, run_info = self._sample(bqm, p, plan, seed)
        s = np.asarray(spins).astype(np.int8)
        if bqm.vartype is dimod.BINARY:  # sampled as its SPIN equivalent
            s = (s + 1) // 2
        info.update(run_info)
        return dimod.SampleSet.from_samples_bqm((s, list(labels)), bqm, info=info)

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
        """``(spins [num_reads, n] ±1, their variable labels, info dict)`` for a non-empty
        BQM, sampled in its SPIN view (``IsingModel.from_bqm``)."""
        raise NotImplementedError
