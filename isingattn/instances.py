"""Random Ising instances on standard coupling graphs (for comparisons, benchmarks and tests)."""

from __future__ import annotations

import math

import numpy as np

from isingattn.errors import IsingInputError

GRAPHS = ("dense", "chain", "lattice")


def random_model(rng: np.random.Generator, n: int, h_scale=1.0, J_scale=None, graph="dense"):
    """A random symmetric zero-diagonal model; ``J_scale`` defaults to ``1/sqrt(n)``.
    ``graph``: "dense", "chain" or "lattice" (2D, as square as n allows).
    Returns ``h [n]`` and ``J [n, n]`` (float64)."""
    if not (isinstance(n, (int, np.integer)) and not isinstance(n, bool) and n >= 1):
        raise IsingInputError(f"n (the number of spins) must be a positive integer; got {n!r}.")
    if graph not in GRAPHS:
        raise IsingInputError(f"graph must be one of {', '.join(GRAPHS)}; got {graph!r}.")
    for name, v in (("h_scale", h_scale), ("J_scale", J_scale)):
        if v is not None and not (isinstance(v, (int, float, np.integer, np.floating)) and not isinstance(v, bool)
                                  and math.isfinite(v) and v >= 0):
            raise IsingInputError(f"{name} must be a finite number ≥ 0 (a standard deviation); got {v!r}.")
    J_scale = 1.0 / np.sqrt(n) if J_scale is None else J_scale
    h = rng.normal(size=n) * h_scale
    J = rng.normal(size=(n, n)) * J_scale
    J = np.triu(J, 1)
    if graph == "chain":
        J = np.triu(np.tril(J, 1), 1)
    elif graph == "lattice":
        w = int(np.ceil(np.sqrt(n)))
        r, c = np.divmod(np.arange(n), w)
        adj = (np.abs(r[:, None] - r[None]) + np.abs(c[:, None] - c[None])) == 1
        J = J * adj
    return h, J + J.T
