"""Learning Ising models from data (the inverse Ising problem) and scoring them.

``fit(samples, method=...)`` returns a :class:`FitResult` (``.model``, ``.info``); the
methods (``"exact"``, ``"plm"``, ``"pcd"``, ``"mf"``, ``"tap"``) live one per module:
:mod:`~isingattn.learn.exact_ml`, :mod:`~isingattn.learn.plm`, :mod:`~isingattn.learn.pcd`,
:mod:`~isingattn.learn.mf_inverse`. :func:`log_likelihood` and :func:`pseudo_log_likelihood`
score a model on data (:mod:`~isingattn.learn.score`).

Not imported by ``import isingattn``: ``import isingattn.learn`` loads it (and no sampler
library: the engines it uses load when a fit needs them).
"""

from isingattn.learn.data import DataWarning
from isingattn.learn.fit import METHODS, FitResult, fit
from isingattn.learn.score import LogLikelihood, log_likelihood, pseudo_log_likelihood

__all__ = ["DataWarning", "FitResult", "LogLikelihood", "METHODS", "fit", "log_likelihood", "pseudo_log_likelihood"]
