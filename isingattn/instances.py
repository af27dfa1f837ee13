"""Random Ising instances on standard coupling graphs (for comparisons, benchmarks and tests)."""

from __future__ import annotations

import numpy as np


def random_model(rng: np.random.Generator, n: int, h_scale=1.0, J_scale=None, graph="dense"):
    """A random symmetric zero-diagonal model; ``J_scale`` defaults to ``1/sqrt(n)``.
    ``graph``: "dense", "chain" or "lattice" (2D, as square as n allows)."""
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
    elif graph != "dense":
        raise ValueError(f"graph must be dense, chain or lattice; got {graph!r}")
    return h, J + J.T
