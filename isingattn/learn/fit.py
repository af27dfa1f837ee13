"""``fit(samples, method=...)``: one entry point for learning an Ising model from data.

The data are checked and converted once (:func:`isingattn.learn.data.prepare`), the method
runs on the parameters ``(h [n], w [E])`` of the coupling pattern (a graph, or all pairs),
and the result is an :class:`~isingattn.IsingModel` at the given ``β`` with a record of the
fit. The methods, one per module:

============  ==========================================  ====================================
method        what                                         scale
============  ==========================================  ====================================
``"exact"``   maximum likelihood, exact log Z (Exact,      ``2^n`` or ``n 2^w`` per iteration
              Banded), L-BFGS to a moment tolerance
``"plm"``     symmetric pseudo-likelihood (plmDCA),        ``O(S n²)`` dense, ``O(S E)`` on a
              L-BFGS / OWL-QN                              graph, per iteration
``"pcd"``     persistent contrastive divergence with a     ``num_steps`` sampler moves of
              sampler's kernel (Gibbs, PT, Swendsen–Wang)  ``num_chains`` chains
``"mf"``      naive mean-field inversion of ``C``          ``O(S n² + n³)``, closed form
``"tap"``     TAP-corrected inversion                      the same
============  ==========================================  ====================================
"""

from __future__ import annotations

import math
import time
import warnings
from typing import NamedTuple, Optional

import jax
import numpy as np

from isingattn import validate as V
from isingattn.errors import IsingInputError
from isingattn.model import IsingModel
from isingattn.learn.data import couplings, output_sparse, prepare

__all__ = ["FitResult", "METHODS", "fit"]

METHODS = ("exact", "plm", "pcd", "mf", "tap")
_OPTIONS = {"exact": ("engine", "init"), "plm": ("init",), "mf": (), "tap": (),
            "pcd": ("sampler", "num_steps", "num_chains", "sweeps", "learning_rate", "average", "num_replicas", "hot",
                    "init", "chunk")}
# the moment error of a fitted model is computed exactly, after the fit, up to this many
# configuration-terms (2^n for Exact, n 2^w for Banded); beyond, it is left None
CHECK_LOG2_COST = 20
# plm, mf and tap do not solve the moment equations: their estimators' bias at finite samples
# (plm) or in the couplings (mf first order, tap second) is allowed up to this moment error
APPROX_MOMENT_TOL = 0.05


class FitResult(NamedTuple):
    """The fitted ``model`` (:class:`~isingattn.IsingModel`: dense ``J``, or
    :class:`~isingattn.sparse.SparseCouplings` on the graph when it is large and sparse)
    and ``info``, a dict of plain Python values:

    * ``method``, ``iterations``, ``grad_norm`` (the final gradient's largest entry; for
      exact and PCD in moment units, i.e. divided by β), ``converged``, ``status``,
      ``wall_time`` (seconds, compilation included); a fit judged on its moments to have
      missed them has ``status`` ``"moments missed"`` and its optimizer's own status in
      ``optimizer_status``;
    * ``moment_error``: ``max |⟨φ⟩_model - ⟨φ⟩_data|`` over the means and the pattern's pair
      moments, exact where an exact engine is cheap (``moment_error_kind == "exact"``), the
      chains' estimate for PCD beyond that, else None; ``moment_tol``, the largest moment
      error with which a fit counts as converged (``fit``'s ``moment_tol``);
      for mf/tap also ``approximation_moment_error``: the same gap for the moments of the
      approximation itself (its self-consistent means and linear-response pair moments,
      ``isingattn.learn.mf_inverse.approximation_moments``);
    * the data: ``n``, ``num_samples``, ``total_weight``, ``num_couplings`` (E),
      ``constant_spins``; the settings ``beta``, ``l1``, ``l2``, ``tol``, ``dtype``;
    * the method's own diagnostics (the objective, ``pseudo_log_likelihood`` (PLM),
      ``log_likelihood`` and ``engine`` (exact), ``flip_rate`` / ``swap_rate`` (PCD),
      ``tap_clipped`` (TAP), ...).
    """

    model: IsingModel
    info: dict


def fit(samples, *, method: str, graph=None, beta: float = 1.0, l1: float = 0.0, l2: float = 1e-4, weights=None,
        key: Optional[jax.Array] = None, tol: Optional[float] = None, max_iter: Optional[int] = None, dtype=None,
        sparse: Optional[bool] = None, progress: Optional[bool] = None, check_moments: Optional[bool] = None,
        moment_tol: Optional[float] = None, **options) -> FitResult:
    """Fit ``h`` and ``J`` of ``p(s) ∝ exp(β (h·s + Σ_{i<j} J_ij s_i s_j))`` to samples.

    Args:
        samples: ``[S, n]`` spins in {-1, +1}, or bits in {0, 1} (converted by ``s = 2x - 1``
            with a :class:`~isingattn.learn.data.DataWarning`); at least 2 rows.
        method: ``"exact"``, ``"plm"``, ``"pcd"``, ``"mf"`` or ``"tap"`` (module docstring).
        graph: the couplings that may be non-zero: a
            :class:`~isingattn.sparse.CouplingGraph` on the ``n`` columns, or a networkx graph
            (nodes ``0..n-1``, or ``n`` labels in column order); None: all pairs.
        beta: the model's inverse temperature (the data fix ``βh`` and ``βJ``).
        l1: L1 penalty on the couplings, ``l1 Σ |J_ij|`` (exact, plm: OWL-QN; pcd: its
            subgradient; not for mf/tap).
        l2: L2 penalty ``l2 (‖h‖² + Σ_{i<j} J_ij²)`` added to the average negative
            (pseudo-)log-likelihood; for mf/tap the ridge ``C + l2 I``. It keeps a spin that is
            constant in the data finite (such spins are warned about); with ``l2 = 0`` they
            are refused.
        weights: optional ``[S]`` non-negative weights (counts, or probabilities).
        key: a JAX key, needed by ``"pcd"`` (ignored by the deterministic methods).
        tol: convergence tolerance. exact: the largest moment error (with penalties: the
            penalized gradient / β), default 1e-4; plm: the gradient's largest entry,
            default 1e-6 (float64) or 1e-4 (float32); pcd: the chains' moment error over the
            averaging window, default 0.02.
        max_iter: L-BFGS iterations (exact 500, plm 1000).
        dtype: float32 or float64 (default: JAX's default float).
        sparse: whether the model's ``J`` is a SparseCouplings (default: when a graph is
            given, ``n ≥ 64`` and at most 10% of the pairs are coupled).
        progress: tqdm bars (True or None: on a terminal only; False: never).
        check_moments: compute the fitted model's exact moment error after a plm, pcd, mf or
            tap fit (``info["moment_error"]``; exact ML has it anyway). None: where an exact
            engine costs at most ``2^20`` terms (it adds that engine's compilation, about
            2–4 s, to the wall time); False: never (``moment_error`` None, or PCD's chain
            estimate).
        moment_tol: the largest moment error (``info["moment_error"]``, and for mf/tap
            ``info["approximation_moment_error"]``) with which the fit counts as converged. A fit
            whose model misses the data's moments by more is returned with
            ``converged=False`` and a :class:`~isingattn.inference.ConvergenceWarning` that says by
            how much (e.g. a penalty that outweighs the data at small ``β``, or a closed form
            whose approximation does not hold). Default: exact ``tol`` plus the penalties' pull
            on the moments at the solution, ``max |2 l2 θ| / β + l1 / β``, counted only up to
            0.05 (beyond that the penalty, not the data, sets the model); pcd ``tol``; plm, mf and tap 0.05 (``APPROX_MOMENT_TOL``: their estimators
            do not solve the moment equations). Where no moment error is computed (no cheap
            exact engine) plm and pcd are judged by their own criteria only; mf and tap
            always by the approximation's moments.
        options: the method's own settings: exact ``engine`` (None, ``"exact"``,
            ``"banded"`` or an exact Engine) and ``init``; plm ``init``; pcd ``sampler``,
            ``num_steps``, ``num_chains``, ``sweeps``, ``learning_rate``, ``average``,
            ``num_replicas``, ``hot``, ``init``, ``chunk`` (:func:`isingattn.learn.pcd.fit_pcd`).
    Returns:
        :class:`FitResult`.
    """
    t_start = time.perf_counter()
    o = "fit"
    V.choice("method", method, METHODS, owner=o)
    beta = V.positive_float("beta", beta, owner=o)
    l1 = V.float_in("l1", l1, 0.0, owner=o)
    l2 = V.float_in("l2", l2, 0.0, owner=o)
    if tol is not None:
        tol = V.positive_float("tol", tol, owner=o)
    if max_iter is not None:
        max_iter = V.positive_int("max_iter", max_iter, owner=o)
    if sparse is not None:
        sparse = V.boolean("sparse", sparse, owner=o)
    if check_moments is not None:
        check_moments = V.boolean("check_moments", check_moments, owner=o)
    if moment_tol is not None:
        moment_tol = V.positive_float("moment_tol", moment_tol, owner=o)
    unknown = sorted(set(options) - set(_OPTIONS[method]))
    if unknown:
        raise IsingInputError(f'fit(method="{method}") got unknown option(s) {unknown}; its options are '
                              f"{list(_OPTIONS[method]) or 'none'}.")
    if method in ("mf", "tap") and l1 > 0:
        raise IsingInputError(f'fit(method="{method}") is a closed form with no L1 penalty; pass l1=0 (use l2, its '
                              'ridge) or method="plm".')
    data = prepare(samples, graph=graph, weights=weights, dtype=dtype, l2=l2, method=f'fit(method="{method}")')
    common = dict(beta=beta, l2=l2)
    if method == "exact":
        from isingattn.learn.exact_ml import fit_exact

        h, w, info = fit_exact(data, l1=l1, tol=tol, max_iter=max_iter, progress=progress, **common, **options)
    elif method == "plm":
        from isingattn.learn.plm import fit_plm

        h, w, info = fit_plm(data, l1=l1, tol=tol, max_iter=max_iter, progress=progress, **common, **options)
    elif method == "pcd":
        from isingattn.learn.pcd import fit_pcd

        h, w, info = fit_pcd(data, l1=l1, tol=tol, key=key, progress=progress, **common, **options)
    else:
        from isingattn.learn.mf_inverse import fit_mf

        h, w, info = fit_mf(data, tap=method == "tap", **common)
    info.setdefault("tol", tol)
    pattern = data.pattern
    h, w = np.asarray(h), np.asarray(w)
    model = IsingModel(h, couplings(pattern, w, sparse=output_sparse(pattern, sparse)), beta=beta)
    if "moment_error" in info and math.isfinite(info["moment_error"]):
        info.setdefault("moment_error_kind", "exact")
    elif "moment_error" in info:  # the gradient / β overflowed (β tiny): the moments themselves
        info.update(_moment_error(data, h, w, beta, True))
    else:
        info.update(_moment_error(data, h, w, beta, check_moments))
    if method == "pcd" and info.get("moment_error_kind") == "chains":
        exact = _moment_error(data, h, w, beta, check_moments)
        if exact["moment_error"] is not None:
            info.update(exact, converged=exact["moment_error"] <= info["tol"])
    _judge(info, method, moment_tol, beta, l1)
    info.update(method=method, n=pattern.n, num_samples=data.num_samples, total_weight=data.total_weight,
                num_couplings=pattern.E, constant_spins=list(data.constant), beta=beta, l1=l1, l2=l2,
                dtype=str(np.dtype(data.dtype)), wall_time=time.perf_counter() - t_start)
    return FitResult(model, info)


def _judge(info: dict, method: str, moment_tol: Optional[float], beta: float, l1: float) -> None:
    """``converged`` False, with a warning, where the fitted model misses the moments by more
    than ``moment_tol`` (see :func:`fit`)."""
    if moment_tol is None:
        if method == "exact":  # the penalties' pull, while it stays a small effect
            moment_tol = info["tol"] + min(info.get("penalty_pull", 0.0), APPROX_MOMENT_TOL)
        elif method == "pcd":
            moment_tol = info["tol"]
        else:
            moment_tol = APPROX_MOMENT_TOL
    info["moment_tol"] = float(moment_tol)
    gaps = {"exact model": info.get("moment_error")}
    if method in ("mf", "tap"):
        gaps[f"{method} approximation"] = info.get("approximation_moment_error")
    missed = {k: float(v) for k, v in gaps.items() if v is not None and not float(v) <= moment_tol}
    if not missed:
        return
    if method in ("exact", "pcd") or gaps["exact model"] is None:
        missed = {("model" if k == "exact model" else k): v for k, v in missed.items()}
    info["converged"] = False
    info["optimizer_status"], info["status"] = info.get("status"), "moments missed"
    what = "; ".join(f"the {k}'s moments are off by up to {v:.3g}" for k, v in missed.items())
    hint = {"exact": "lower l2 or l1 (at small β the penalty outweighs the data), or raise max_iter",
            "plm": "lower l2 or l1, or the data are too few for pseudo-likelihood: try method=\"exact\" or \"pcd\"",
            "pcd": "raise num_steps or num_chains, or lower learning_rate",
            "mf": "the couplings are too strong (or the data degenerate) for mean field: use method=\"plm\" or \"exact\"",
            "tap": "the couplings are too strong (or the data degenerate) for TAP: use method=\"plm\" or \"exact\""}[method]
    from isingattn.engine import ConvergenceWarning

    warnings.warn(f'fit(method="{method}") does not reproduce the data: {what}, against a tolerance of '
                  f"{moment_tol:.3g} (moment_tol), so converged=False. {hint[0].upper()}{hint[1:]}.",
                  ConvergenceWarning, stacklevel=3)


def _moment_error(data, h, w, beta, check) -> dict:
    """The fitted model's exact moment error where an exact engine is cheap (and ``check``
    is not False), else None."""
    from isingattn.learn.exact_ml import MAX_LOG2_COST, exact_engine, exact_moments, moment_gap

    pattern = data.pattern
    eng = None if check is False else exact_engine(pattern.n, graph=pattern.graph,
                                                   max_log2_cost=MAX_LOG2_COST if check else CHECK_LOG2_COST)
    if eng is None or (pattern.graph is None and type(eng).__name__ == "Banded"):
        return {"moment_error": None, "moment_error_kind": None}
    mean, pair, _ = exact_moments(eng, pattern, h, w, np.asarray(beta, data.dtype))
    return {"moment_error": moment_gap(data, mean, pair), "moment_error_kind": "exact"}
