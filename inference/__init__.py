"""Inference engines, one family per subpackage, behind one protocol (DESIGN.md §3).

Every engine class is importable from here, and loads on first use (PEP 562): ``from
isingattn.inference import Gibbs`` imports the MCMC family, and ``import isingattn.inference``
loads no engine, numpyro or dimod. ``get(name, **config)`` builds an engine by its registry name
and ``available()`` lists the names. The families: :mod:`~isingattn.inference.exact`,
:mod:`~isingattn.inference.banded`, :mod:`~isingattn.inference.junction_tree`, :mod:`~isingattn.inference.planar`,
:mod:`~isingattn.inference.meanfield`,
:mod:`~isingattn.inference.mcmc`, :mod:`~isingattn.inference.dqa` and
:mod:`~isingattn.inference.dimod`.
"""

from isingattn.engine import ConvergenceWarning, Engine, available, from_spec, get, register, settings, to_spec

# name -> the family module that defines it (imported when the name is first asked for)
_LAZY = {
    "Exact": "exact",
    "Banded": "banded",
    "JunctionTree": "junction_tree",
    "Planar": "planar",
    "MeanField": "meanfield",
    "Gibbs": "mcmc",
    "ParallelTempering": "mcmc",
    "SwendsenWang": "mcmc",
    "AIS": "mcmc",
    "PopulationAnnealing": "mcmc",
    "SQA": "mcmc",
    "DQA": "dqa",
    "DimodEngine": "dimod",
    "SQASampler": "dimod",
    "DQASampler": "dimod",
    "IsingSampler": "dimod",
    "PTSampler": "dimod",
    "SwendsenWangSampler": "dimod",
}

__all__ = ["ConvergenceWarning", "Engine", "available", "from_spec", "get", "register", "settings", "to_spec",
           *_LAZY]


def __getattr__(name):
    """An engine class on first use (its family module is imported then)."""
    family = _LAZY.get(name)
    if family is None:
        raise AttributeError(f"module 'isingattn.inference' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(f"isingattn.inference.{family}"), name)
    globals()[name] = value  # later lookups skip this function
    return value


def __dir__():
    return sorted(set(globals()) | set(__all__))
