"""Random Ising instances on standard coupling graphs (for comparisons, benchmarks and tests)."""

from __future__ import annotations

import math
import os
from typing import Optional

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


def model_from_graph(graph: str = "dense", *, n: int = 16, seed: int = 0, beta: float = 1.0, h_scale: float = 1.0,
                     J_scale: Optional[float] = None, couplings: str = "pm"):
    """One :class:`~isingattn.IsingModel` from a graph description (what ``isingattn compare --graph`` takes).

    ``graph`` is one of:

    * ``"dense"``, ``"chain"`` or ``"lattice"``: :func:`random_model` on ``n`` spins (dense ``J [n, n]``),
      drawn from a NumPy generator seeded by ``seed``'s JAX key;
    * a sparse graph spec that :func:`isingattn.graphs.parse` reads (``lattice:64x64[:periodic]``,
      ``pegasus:16``, ``regular:N:DEGREE``, ...): couplings :func:`isingattn.graphs.random_couplings` of kind
      ``couplings`` (``pm``, ``gaussian`` or ``ferro``) and scale ``J_scale`` (1 without it), fields
      ``N(0, h_scale²)``, all from ``jax.random.PRNGKey(seed)``; ``n`` is the graph's;
    * the path of a dimod BQM file (``bqm.to_file()``), read as :meth:`IsingModel.from_bqm`.

    The same arguments give the same model. A graph that is none of these, a malformed spec or an
    unreadable file raises :class:`IsingInputError` whose message starts with ``graph``."""
    import jax

    from isingattn.model import IsingModel

    if graph in GRAPHS:
        rng = np.random.default_rng(np.asarray(jax.random.key_data(jax.random.PRNGKey(seed))).ravel())
        h, J = random_model(rng, n, h_scale=h_scale, J_scale=J_scale, graph=graph)
        return IsingModel(h, J, beta=beta)
    if ":" in graph and not os.path.isfile(graph):
        from isingattn import graphs

        k_graph, k_J, k_h = jax.random.split(jax.random.PRNGKey(seed), 3)
        try:
            g = graphs.parse(graph, key=k_graph)
        except IsingInputError as e:
            raise IsingInputError(f"{graph}: {e}") from None
        J = graphs.random_couplings(k_J, g, couplings, 1.0 if J_scale is None else J_scale)
        h = jax.random.normal(k_h, (g.n,), J.dtype) * h_scale
        return IsingModel(h, J, beta=beta)
    if not os.path.isfile(graph):
        raise IsingInputError(f"{graph}: not one of {', '.join(GRAPHS)} and no such file; pass a generated graph name "
                              "or a dimod BQM file (written by bqm.to_file()).")
    import dimod

    try:
        with open(graph, "rb") as f:
            bqm = dimod.BinaryQuadraticModel.from_file(f)
    except Exception as e:  # dimod raises various errors on corrupt input; this wraps only the file read
        raise IsingInputError(f"{graph}: could not read it as a dimod BQM file (written by bqm.to_file()): "
                              f"{type(e).__name__}: {e}") from None
    return IsingModel.from_bqm(bqm, beta=beta)


def exact_log_z(graph: str, *, beta: float = 1.0, couplings: str = "pm", h_scale: float = 1.0,
                J_scale: Optional[float] = None) -> Optional[tuple[float, float]]:
    """``(log Z, K)`` of the model :func:`model_from_graph` builds from the same arguments, where a closed
    form gives it: Kaufman's exact value (:func:`isingattn.onsager.torus_log_z`) for a uniform ferromagnet
    without fields on a periodic 2D lattice (``graph="lattice:RxC:periodic"``, ``couplings="ferro"``,
    ``h_scale=0``), with coupling ``K = beta * J_scale`` (``J_scale`` 1 without it). None otherwise."""
    spec = str(graph).split(":")
    if not (couplings == "ferro" and h_scale == 0 and len(spec) == 3 and spec[0] == "lattice"
            and spec[2] == "periodic" and len(spec[1].lower().split("x")) == 2
            and all(x.isdigit() for x in spec[1].lower().split("x"))):
        return None
    from isingattn.onsager import torus_log_z

    rows, cols = (int(x) for x in spec[1].lower().split("x"))
    K = float(beta) * (1.0 if J_scale is None else float(J_scale))
    return float(torus_log_z(rows, cols, K)), K
