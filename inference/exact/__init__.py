"""Exact enumeration of every configuration (``2^n`` states, float64-accurate log Z)."""

from isingattn.inference.exact.engine import Exact

__all__ = ["Exact"]
