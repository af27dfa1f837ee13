"""Effective inverse temperature of Ising samples: the one estimator of DQA and DimodEngine
(DESIGN.md §3, "Effective temperature").

Maximum pseudo-likelihood (MPL). For samples ``s`` of a model with energy
``E(s) = -h·s - Σ_{j<k} J_jk s_j s_k``, the local excitation of spin ``i`` is
``ΔE_i(s) = E(s) - E(s^(i)) = -2 s_i (h_i + (J s)_i)`` and the pseudo-likelihood of
``p(s) ∝ exp(-β E)`` is ``Π_i σ(-β ΔE_i(s))`` (each spin given the others). With separate
scales (``split=True``) the exponent is ``β_h h·s + β_J Σ J s s``: the fields and the
couplings may freeze out at different temperatures (a fast anneal, :mod:`~isingattn.inference.dqa.engine`).

Two implementations of the same convex objective:

* :func:`pseudo_likelihood_beta` (JAX, jit-able, batched, split scales): what DQA fits inside
  its calibration loop (:mod:`isingattn.inference.dqa.pseudolikelihood`).
* :func:`effective_beta` (host, NumPy): dwave-system's
  ``dwave.system.temperatures.maximum_pseudolikelihood`` for the fit (one scale, or two with
  ``split=True``) and a bootstrap over reads for the confidence interval. What DimodEngine
  reports and calibrates with; needs ``pip install "isingattn[qpu]"`` (dwave-system).

The tests check that the two agree on the same samples (``tests/inference/dimod/test_temperature.py``).

The bootstrap is ours, not dwave-system's: ``maximum_pseudolikelihood(...,
num_bootstrap_samples=B)`` (1.36) draws ``B`` reads per resample instead of as many reads as
there are, so its spread describes ``B`` reads, not the sample set.
"""

from __future__ import annotations

import warnings
from typing import NamedTuple

import numpy as np

from isingattn.errors import IsingInputError, IsingTypeError

__all__ = ["BetaEstimate", "beta_from_excitations", "effective_beta", "local_excitations"]


class BetaEstimate(NamedTuple):
    """Host-side MPL estimate (floats). ``beta``: the one-scale β; ``beta_h``, ``beta_J``: the
    split scales (NaN when not fitted or when the data say nothing on them, e.g. ``h = 0``).
    ``*_lo``/``*_hi``: the bootstrap percentile interval at ``level``; ``*_se``: the bootstrap
    standard deviation. ``ground_only``: no read has a local excitation (every read a local
    minimum), so the MPL β is ``+inf``: the samples are colder than any finite β can say.
    """

    beta: float
    beta_lo: float
    beta_hi: float
    beta_se: float
    beta_h: float
    beta_h_lo: float
    beta_h_hi: float
    beta_J: float
    beta_J_lo: float
    beta_J_hi: float
    ground_only: bool
    num_samples: int


def local_excitations(h, J, spins):
    """``ΔE = E(s) - E(s^(i))`` split into its field and coupling parts, ``([S, n], [S, n])``.

    ``h [n]``, ``J [n, n]`` (symmetric, zero diagonal), ``spins [S, n]`` (±1). This is
    dwave-system's ``effective_field(bqm, samples, current_state_energy=True)`` of the
    model's BQM (``IsingModel.to_bqm``), without building the BQM; positive = the read can
    lower its energy by flipping spin ``i`` (an excitation).
    """
    h, J, s = (np.asarray(a, np.float64) for a in (h, J, spins))
    return -2.0 * s * h, -2.0 * s * (s @ J)


def _dwave_fit(en1, x0=None):
    """dwave-system's MPL on effective fields ``en1 [K, S, n]`` (K = 1 or 2): the inverse
    temperatures ``β = -x`` (dwave's exponent is ``x·H``), ``[K]``; ``+inf`` with no excitation."""
    from dwave.system.temperatures import maximum_pseudolikelihood

    with warnings.catch_warnings():  # its "ill-defined parameters" notes: we report ground_only / NaN
        warnings.simplefilter("ignore")
        if en1.shape[0] == 1:
            x, _ = maximum_pseudolikelihood(en1=en1[0], x0=None if x0 is None else -x0[0])
            return -np.atleast_1d(np.asarray(x, np.float64))
        x, _ = maximum_pseudolikelihood(en1=en1, x0=None if x0 is None else -np.asarray(x0),
                                        degenerate_fields=False)
        return -np.asarray(x, np.float64)


def effective_beta(h, J, spins, *, split: bool = True, num_bootstrap: int = 100, seed: int = 0,
                   level: float = 0.95) -> BetaEstimate:
    """MPL inverse temperature of ``spins`` for the model ``(h, J)``, with a bootstrap interval.

    Args:
        h: ``[n]`` fields; J: ``[n, n]`` couplings (the model's units: ``E = -h·s - Σ_{j<k} J s s``).
        spins: ``[S, n]`` ±1 reads (iid: the bootstrap resamples reads).
        split: also fit separate scales ``β_h``, ``β_J`` (fields and couplings).
        num_bootstrap: resamples of the ``S`` reads (0: no interval, NaN bounds).
        seed: seeds the resampling (derive it from the caller's JAX key).
        level: two-sided percentile level of the intervals.

    Returns :class:`BetaEstimate`. Needs dwave-system (``pip install "isingattn[qpu]"``).
    """
    try:
        import dwave.system.temperatures  # noqa: F401
    except ImportError:
        raise ImportError('effective_beta uses dwave-system\'s maximum_pseudolikelihood: pip install '
                          '"isingattn[qpu]" (or pip install "dwave-system>=1.20").') from None
    s = np.asarray(spins)
    if s.ndim != 2 or not np.issubdtype(s.dtype, np.number):
        raise IsingTypeError(f"effective_beta: spins must be a numeric [S, n] array of ±1 reads; got "
                             f"{type(spins).__name__} of shape {np.shape(spins)}. Stack the reads as rows.")
    S, n = s.shape
    h, J = np.asarray(h, np.float64), np.asarray(J, np.float64)
    if h.shape != (n,) or J.shape != (n, n):
        raise IsingInputError(f"effective_beta: expected h [{n}] and J [{n}, {n}] for spins [S, {n}]; got h "
                              f"{h.shape}, J {J.shape}. Pass one model's parameters (index a batch first).")
    if S < 2 or not np.all(np.abs(s) == 1):
        raise IsingInputError(f"effective_beta: spins must hold at least 2 reads of ±1 values; got {S} reads"
                              + ("" if np.all(np.abs(s) == 1) else " with values other than ±1 (convert 0/1 "
                                 "bits with s = 2*x - 1)") + ".")
    if not (isinstance(num_bootstrap, (int, np.integer)) and num_bootstrap >= 0):
        raise IsingInputError(f"effective_beta: num_bootstrap must be an integer ≥ 0; got {num_bootstrap!r}.")
    if not (0.0 < float(level) < 1.0):
        raise IsingInputError(f"effective_beta: level must be in (0, 1), e.g. 0.95; got {level!r}.")
    eh, eJ = local_excitations(h, J, s)
    return beta_from_excitations(eh, eJ, split=split, num_bootstrap=num_bootstrap, seed=seed, level=level)


def beta_from_excitations(eh, eJ, *, split: bool = True, num_bootstrap: int = 100, seed: int = 0,
                          level: float = 0.95) -> BetaEstimate:
    """:func:`effective_beta` from the reads' local excitations (:func:`local_excitations`).

    ``eh``, ``eJ``: ``[S, n]`` field and coupling parts of ``ΔE`` (any number of columns: the
    pooled reads of several models put side by side are one model's). Arguments otherwise as
    :func:`effective_beta`, whose checks this skips."""
    eh, eJ = np.asarray(eh, np.float64), np.asarray(eJ, np.float64)
    S = eh.shape[0]
    one = (eh + eJ)[None]
    # a part with no excitations at all (h = 0, or no couplings) carries no information: not fitted
    parts = [p for p, e in (("h", eh), ("J", eJ)) if np.any(e != 0)]
    two = np.stack([eh if p == "h" else eJ for p in parts]) if split else None

    def fit(rows):
        b = float(_dwave_fit(one[:, rows])[0])
        bh = bJ = np.nan
        if split and len(parts) == 2:
            e2 = two[:, rows]
            # dwave's multi-parameter solver needs excitations of both signs in each part
            if all(np.max(e) > 0 > np.min(e) for e in e2):
                bh, bJ = _dwave_fit(e2, x0=np.array([b, b]) if np.isfinite(b) else None)
        elif split and parts:  # one part only: the one-scale fit is that part's
            bh, bJ = (b, np.nan) if parts == ["h"] else (np.nan, b)
        return b, bh, bJ

    all_rows = np.arange(S)
    b, bh, bJ = fit(all_rows)
    rng = np.random.default_rng(seed)
    boots = np.array([fit(rng.integers(0, S, S)) for _ in range(num_bootstrap)]).reshape(num_bootstrap, 3)
    q = (100 * (1 - level) / 2, 100 * (1 + level) / 2)

    def interval(col):
        v = boots[:, col]
        if num_bootstrap == 0 or np.isnan(v).all():
            return np.nan, np.nan
        with np.errstate(invalid="ignore"):
            lo, hi = np.percentile(v, q)  # inf (a ground-only resample) sorts last: a hi of inf is honest
        return float(lo), float(hi)

    fin = boots[:, 0][np.isfinite(boots[:, 0])]
    se = float(np.std(fin, ddof=1)) if fin.size > 1 else np.nan
    lo, hi = interval(0)
    hlo, hhi = interval(1)
    Jlo, Jhi = interval(2)
    return BetaEstimate(b, lo, hi, se, float(bh), hlo, hhi, float(bJ), Jlo, Jhi,
                        bool(np.all(one <= 0)), S)
