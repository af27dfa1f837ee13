"""The dimod side: any ``dimod.Sampler`` as an engine (:class:`DimodEngine`, with pooling and
QPU-style calibration), and SQA, DQA, parallel tempering and Swendsen–Wang as ``dimod.Sampler`` s. Loads dimod."""

from isingattn.inference.dimod.engine import DimodEngine
from isingattn.inference.dimod.pt_sampler import PTSampler
from isingattn.inference.dimod.dqa_sampler import DQASampler
from isingattn.inference.dimod.samplers import IsingSampler, SQASampler
from isingattn.inference.dimod.specs import ChainBreakWarning, DimodCalibrationWarning
from isingattn.inference.dimod.sw_sampler import SwendsenWangSampler

__all__ = ["ChainBreakWarning", "DQASampler", "DimodCalibrationWarning", "DimodEngine", "IsingSampler", "PTSampler",
           "SQASampler", "SwendsenWangSampler"]
