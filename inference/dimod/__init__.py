"""The dimod side: any ``dimod.Sampler`` as an engine (:class:`DimodEngine`, with pooling and
QPU-style calibration), and SQA and DQA as ``dimod.Sampler`` s. Loads dimod."""

from isingattn.inference.dimod.engine import DimodEngine
from isingattn.inference.dimod.samplers import DQASampler, IsingSampler, SQASampler
from isingattn.inference.dimod.specs import ChainBreakWarning, DimodCalibrationWarning

__all__ = ["ChainBreakWarning", "DQASampler", "DimodCalibrationWarning", "DimodEngine", "IsingSampler", "SQASampler"]
