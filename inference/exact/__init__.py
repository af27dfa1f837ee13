"""Exact enumeration of every configuration (``2^n`` states, float64-accurate log Z)."""

from isingattn.inference.exact.engine import EXACT_MAX_N, Exact

__all__ = ["EXACT_MAX_N", "Exact"]
