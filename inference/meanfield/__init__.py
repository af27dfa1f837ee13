"""Variational fixed points: naive mean field, TAP and belief propagation (Bethe)."""

from isingattn.inference.meanfield.engine import METHODS, MeanField, MeanFieldConvergenceWarning

__all__ = ["METHODS", "MeanField", "MeanFieldConvergenceWarning"]
