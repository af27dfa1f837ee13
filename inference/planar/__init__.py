"""Exact zero-field inference on planar graphs and the square-lattice torus by Pfaffians
(Kasteleyn, Fisher): ``log Z`` and edge correlations at 10^4–10^6 spins."""

from isingattn.inference.planar.engine import Planar

__all__ = ["Planar"]
