"""Inference engines, one per file, behind one protocol (DESIGN.md §3).

``get(name, **config)`` builds an engine by name; ``available()`` lists them.
"""

from isingattn.engine import ConvergenceWarning, Engine, available, get, register
from isingattn.inference.banded import Banded
from isingattn.inference.dimod_engine import ChainBreakWarning, DimodCalibrationWarning, DimodEngine
from isingattn.inference.dimod_sampler import DQASampler, SQASampler
from isingattn.inference.dqa import DQA, DQACalibrationWarning, DQARangeWarning, DQAWarning
from isingattn.inference.exact import Exact
from isingattn.inference.arviz_export import to_inference_data
from isingattn.inference.gibbs import Gibbs
from isingattn.inference.gibbs_numpyro import IsingGibbsKernel
from isingattn.inference.meanfield import MeanField, MeanFieldConvergenceWarning
from isingattn.inference.sqa import SQA

__all__ = ["Banded", "ChainBreakWarning", "ConvergenceWarning", "DQA", "DQACalibrationWarning", "DQARangeWarning", "DQASampler", "DQAWarning", "DimodCalibrationWarning", "DimodEngine", "Engine", "Exact", "Gibbs", "IsingGibbsKernel", "MeanField", "MeanFieldConvergenceWarning", "SQA", "SQASampler", "available", "get", "register", "to_inference_data"]
