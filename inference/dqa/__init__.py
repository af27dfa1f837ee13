"""Digitized diabatic quantum annealing: a statevector circuit, its calibration, and the
pseudo-likelihood β of its samples."""

from isingattn.inference.dqa.engine import DQA, DQACalibrationWarning, DQARangeWarning, DQAWarning

__all__ = ["DQA", "DQACalibrationWarning", "DQARangeWarning", "DQAWarning"]
