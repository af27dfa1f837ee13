"""Inference engines, one family per subpackage, behind one protocol (DESIGN.md §3).

``get(name, **config)`` builds an engine by name and ``available()`` lists them; an engine's
module is imported on first use. The classes live in their families:
:mod:`~isingattn.inference.exact`, :mod:`~isingattn.inference.banded`, :mod:`~isingattn.inference.planar`,
:mod:`~isingattn.inference.meanfield`, :mod:`~isingattn.inference.mcmc`,
:mod:`~isingattn.inference.dqa` and :mod:`~isingattn.inference.dimod`.
"""

from isingattn.engine import ConvergenceWarning, Engine, available, get, register

__all__ = ["ConvergenceWarning", "Engine", "available", "get", "register"]
