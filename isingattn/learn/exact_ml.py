"""Maximum likelihood through an exact, differentiable log Z (Exact or Banded), ``method="exact"``.

The average negative log-likelihood of the data under ``p(s) ∝ exp(β (h·s + Σ_e w_e s_i s_j))``
is a function of the data's moments alone,

    NLL(h, w) = -β (h·⟨s⟩_data + w·⟨s_i s_j⟩_data) + log Z(h, w),

and ``∂ log Z/∂h = β⟨s⟩``, ``∂ log Z/∂w_e = β⟨s_i s_j⟩`` (the engines' gradients: Exact's
fluctuation JVP, Banded's VJP). So the gradient is ``β`` times the moment mismatch and a
stationary point matches the moments. The objective is convex; it is minimized by L-BFGS
(:mod:`isingattn.learn.optimize`, OWL-QN with ``l1``) with the penalty
``l2 (‖h‖² + ‖w‖²) + l1 ‖w‖₁``, to ``‖gradient‖_∞ / β ≤ tol``: with ``l2 = l1 = 0`` that is
the largest moment error.

Which engine: Exact enumerates ``2^n`` configurations (meet in the middle), Banded costs
``n 2^w`` for couplings within distance ``w`` in the spin order (a graph's bandwidth, e.g. an
``L × W`` lattice in row-major order has ``w = W``); :func:`exact_engine` takes the cheaper.
"""

from __future__ import annotations

import math
from typing import NamedTuple, Optional

import jax
import jax.numpy as jnp
import numpy as np

from isingattn.engine import Engine
from isingattn.errors import IsingInputError, TooManySpinsError
from isingattn.inference.exact.engine import EXACT_MAX_N
from isingattn.model import IsingModel
from isingattn.sparse import CouplingGraph, SparseCouplings
from isingattn.learn.data import Data, Pattern
from isingattn.learn.optimize import minimize

__all__ = ["exact_engine", "exact_moments", "fit_exact", "MAX_LOG2_COST"]

MAX_LOG2_COST = EXACT_MAX_N  # exact engines are used up to 2^24 configuration-terms per evaluation


def _bandwidth(J) -> int:
    from isingattn.inference.banded import band_violation

    return int(band_violation(J))


def exact_engine(n: int, *, graph: Optional[CouplingGraph] = None, J=None, max_log2_cost: float = MAX_LOG2_COST,
                 name: Optional[str] = None) -> Optional[Engine]:
    """An engine whose ``log Z`` is exact, for ``n`` spins whose couplings lie on ``graph``
    (or are the nonzeros of a concrete ``J``, dense or sparse), or None when none is affordable.

    Exact costs ``2^n``, Banded ``n 2^w`` with ``w`` the bandwidth in the spin order; the
    cheaper is chosen if it is within ``2^max_log2_cost``. ``name`` (``"exact"`` or
    ``"banded"``) forces one (then only its own limits apply)."""
    from isingattn.inference.banded.engine import MAX_BANDWIDTH

    if graph is not None:
        w = graph.bandwidth
    elif J is not None:
        w = _bandwidth(J)
    else:
        w = n - 1
    w = max(w, 1)
    cost_exact = n
    cost_banded = math.log2(n) + w
    if name == "exact" or (name is None and cost_exact <= cost_banded and cost_exact <= max_log2_cost):
        if n > EXACT_MAX_N and name is None:
            return None
        from isingattn.inference.exact import Exact

        return Exact()
    if name == "banded" or (name is None and cost_banded <= max_log2_cost and w <= MAX_BANDWIDTH):
        from isingattn.inference.banded import Banded

        return Banded(bandwidth=w)
    return None


def _log_z(engine: Engine, pattern: Pattern, sparse: bool, h, w, beta, i, j):
    if sparse:
        J = SparseCouplings(pattern.graph, w)
    else:
        J = jnp.zeros((h.shape[-1],) * 2, w.dtype).at[i, j].set(w).at[j, i].set(w)
    return engine.marginals(IsingModel(h, J, beta)).log_z


def _engine_takes_sparse(engine: Engine, pattern: Pattern) -> bool:
    return pattern.graph is not None and getattr(type(engine), "sparse_native", False)


def exact_moments(engine: Engine, pattern: Pattern, h, w, beta):
    """``(⟨s⟩ [n], ⟨s_i s_j⟩ [E] on the pattern's edges, log Z)`` (numpy) of the model
    ``(h, w)``, from the gradient of the engine's exact ``log Z`` (``∂ log Z / ∂θ = β ⟨φ(s)⟩``)."""
    sparse = _engine_takes_sparse(engine, pattern)
    lz, gh, gw = _moments_jit(engine, (pattern.n, pattern.graph), sparse, h, w, beta, pattern.edges[:, 0],
                              pattern.edges[:, 1])
    return np.asarray(gh), np.asarray(gw), float(lz)


def _moments(engine, pattern_key, sparse, h, w, beta, i, j):
    pattern = Pattern(pattern_key[0], None, pattern_key[1])
    lz, (gh, gw) = jax.value_and_grad(_log_z, argnums=(3, 4))(engine, pattern, sparse, h, w, beta, i, j)
    return lz, gh / beta, gw / beta


_moments_jit = jax.jit(_moments, static_argnums=(0, 1, 2))


def moment_gap(data: Data, mean, pair) -> float:
    """``max |⟨φ⟩_model - ⟨φ⟩_data|`` over the means and the pattern's pair moments."""
    return max(float(np.max(np.abs(mean - data.mean))), float(np.max(np.abs(pair - data.pair), initial=0.0)))


class ExactObjective(NamedTuple):
    """``fg(x, args)`` of the average NLL plus the L2 penalty (hashable: the compiled program
    is reused by fits with the same engine, pattern and shapes)."""

    engine: Engine
    pattern_key: tuple  # (n, graph or None): what the program depends on
    sparse: bool

    def __call__(self, x, args):
        mean_d, pair_d, i, j, beta, l2 = args
        n, graph = self.pattern_key
        pattern = Pattern(n, None, graph)

        def f(x):
            h, w = x[:n], x[n:]
            lz = _log_z(self.engine, pattern, self.sparse, h, w, beta, i, j)
            return -beta * (h @ mean_d + w @ pair_d) + lz + l2 * (x @ x)

        return jax.value_and_grad(f)(x)


def independent_start(data: Data, beta: float) -> np.ndarray:
    """``x0 = (h, w)`` (numpy, the data's dtype): the independent-spin fit ``h = atanh⟨s⟩ / β``
    (clipped), ``w = 0``."""
    m = np.clip(data.mean, -0.999, 0.999)
    return np.concatenate([np.arctanh(m) / beta, np.zeros(data.pattern.E)]).astype(data.dtype)


def start(data: Data, beta: float, init, owner: str) -> np.ndarray:
    """The starting point ``[n + E]``: ``init`` (checked) or :func:`independent_start`."""
    if init is None:
        return independent_start(data, beta)
    x0 = np.asarray(init, data.dtype)
    P = data.pattern.n + data.pattern.E
    if x0.shape != (P,) or not np.all(np.isfinite(x0)):
        raise IsingInputError(f"{owner}: init must be {P} finite numbers, the fields h [n = {data.pattern.n}] then the "
                              f"coupling weights on the pattern's edges [E = {data.pattern.E}]; got shape {x0.shape}.")
    return x0


def coupling_mask(pattern: Pattern, dtype) -> np.ndarray:
    """``[n + E]``: 0 for the fields, 1 for the couplings (where an L1 penalty applies)."""
    return np.concatenate([np.zeros(pattern.n), np.ones(pattern.E)]).astype(dtype)


def fit_exact(data: Data, *, beta: float, l1: float, l2: float, tol: Optional[float], max_iter: Optional[int],
              progress, engine=None, init=None):
    """``method="exact"`` (module docstring). ``engine``: None (the cheaper of Exact and
    Banded, refused beyond ``2^24`` terms), ``"exact"``, ``"banded"`` or an engine instance
    whose ``log_z`` is exact. Returns ``(h [n], w [E], info)``."""
    pattern, dt = data.pattern, data.dtype
    n = pattern.n
    if engine is None or isinstance(engine, str):
        if engine not in (None, "exact", "banded"):
            raise IsingInputError(f'fit(method="exact"): engine must be None, "exact", "banded" or an Engine whose '
                                  f"log Z is exact; got {engine!r}.")
        eng = exact_engine(n, graph=pattern.graph, name=engine)
        if eng is None:
            w = pattern.graph.bandwidth if pattern.graph is not None else n - 1
            raise TooManySpinsError(
                f'fit(method="exact") needs an exact log Z: Exact enumerates 2^{n} configurations and Banded '
                f"{n}·2^{w} for this coupling pattern (bandwidth {w} in the spin order), both beyond 2^{MAX_LOG2_COST}. "
                'Use method="plm" or "pcd", or give a graph whose couplings are banded in the column order.')
    elif isinstance(engine, Engine):
        if not getattr(engine, "exact", False):
            raise IsingInputError(f'fit(method="exact") needs an engine with an exact log Z (Exact, Banded); got '
                                  f"{type(engine).__name__}. Use method=\"pcd\" for a sampler.")
        eng = engine
    else:
        raise IsingInputError(f'fit(method="exact"): engine must be None, "exact", "banded" or an Engine; got '
                              f"{type(engine).__name__}.")
    if type(eng).__name__ == "Banded" and pattern.graph is None:
        raise IsingInputError('fit(method="exact") with Banded needs a graph (which couplings may be non-zero): with '
                              "all pairs allowed the bandwidth is n - 1. Pass graph=..., or use Exact (small n).")
    sparse = _engine_takes_sparse(eng, pattern)
    tol = 1e-4 if tol is None else tol
    max_iter = 500 if max_iter is None else max_iter
    b = np.asarray(beta, dt)
    args = (data.mean.astype(dt), data.pair.astype(dt), pattern.edges[:, 0], pattern.edges[:, 1], b,
            np.asarray(l2, dt))
    fg = ExactObjective(eng, (n, pattern.graph), sparse)
    x0 = start(data, beta, init, 'fit(method="exact")')
    mask = coupling_mask(pattern, dt)
    # the tolerance is on the moments: the gradient is β times their mismatch
    x, g, info = minimize(fg, x0, args, tol=tol * beta, max_iter=max_iter, l1=l1, l1_mask=mask, progress=progress,
                          desc="fit exact")
    h, w = x[:n], x[n:]
    # the final gradient is β (model moments - data moments) + 2 l2 θ, and the objective holds log Z
    with np.errstate(over="ignore", invalid="ignore"):
        g = (g - 2 * l2 * x) / beta
        err = float(np.max(np.abs(g)))
    with np.errstate(over="ignore", invalid="ignore"):  # tiny β: the parameters, and these sums, can overflow
        lz = (info["objective"] - l1 * float(np.sum(np.abs(w))) - l2 * float(x @ x)
              + beta * float(h @ data.mean + w @ data.pair))
    with np.errstate(over="ignore"):
        pull = float(np.max(np.abs(2 * l2 * x)) + l1) / beta  # the penalties' pull on the moments
    info.update(tol=tol, grad_norm=info["grad_norm"] / beta, moment_error=err, engine=type(eng).__name__,
                penalty_pull=pull if math.isfinite(pull) else float("inf"),
                log_likelihood=float(np.float64(beta) * (h @ data.mean + w @ data.pair) - lz), log_z=float(lz))
    return h, w, info
