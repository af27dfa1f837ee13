"""p-values for the report's intervals: the paired t test, Welch's test, Holm's adjustment and the sign test.

The report prints each comparison as a mean ± 95% half-width (Student t, :func:`isingattn.models.app.report.mean_ci`);
the p-values here invert exactly those intervals, so that a p and its interval always agree (p < 0.05 exactly when
the interval excludes 0, up to the rounding of the printed digits).
"""

from __future__ import annotations

import math
from typing import Optional, Sequence

import numpy as np
from scipy import stats

from isingattn.models.app.report import t975

ALPHA = 0.05


def paired_p(mean: float, half: float, n: int) -> float:
    """Two-sided p of the one-sample t test behind ``mean ± half`` (the 95% half-width of :func:`mean_ci` over ``n``
    paired differences). nan with fewer than 2 pairs; with every difference equal (``half == 0``), 1 when they are
    0 and 0 otherwise."""
    if n < 2 or math.isnan(half):
        return math.nan
    if half == 0:
        return 1.0 if mean == 0 else 0.0
    se = half / t975(n - 1)  # mean_ci's standard error, recovered exactly
    return float(2 * stats.t.sf(abs(mean) / se, n - 1))


def welch_p(change: float, half: float, df: float) -> float:
    """Two-sided p of Welch's test behind ``change ± half`` (95%, ``df`` Welch–Satterthwaite degrees of freedom, as
    :func:`isingattn_study.headline.growth` makes them)."""
    if half == 0 or math.isnan(df):
        return 1.0 if change == 0 else 0.0
    se = half / float(stats.t.ppf(0.975, df))
    return float(2 * stats.t.sf(abs(change) / se, df))


def welch(g0: tuple, g1: tuple) -> tuple[float, float, float, float]:
    """Welch's comparison of two independent gains, each ``(mean, 95% half-width, n)`` from :func:`mean_ci`:
    ``(g1 - g0, 95% half-width, df, p)``."""
    (m0, c0, n0), (m1, c1, n1) = g0, g1
    v0, v1 = (c0 / t975(n0 - 1)) ** 2, (c1 / t975(n1 - 1)) ** 2
    if v0 + v1 == 0:
        return m1 - m0, 0.0, math.nan, (1.0 if m1 == m0 else 0.0)
    df = (v0 + v1) ** 2 / (v0**2 / (n0 - 1) + v1**2 / (n1 - 1))
    half = float(stats.t.ppf(0.975, df)) * math.sqrt(v0 + v1)
    return m1 - m0, half, df, welch_p(m1 - m0, half, df)


def holm(p: Sequence[float]) -> np.ndarray:
    """Holm's step-down adjustment of ``p`` (family-wise error); nan entries are not tests and stay nan.

    Sorted ascending, the i-th of m p-values (i from 0) becomes max over j <= i of min(1, (m - j) p_(j))."""
    p = np.asarray(p, float)
    out = np.full(p.shape, np.nan)
    ok = np.flatnonzero(~np.isnan(p))
    m = len(ok)
    if m == 0:
        return out
    order = ok[np.argsort(p[ok], kind="stable")]
    adj = np.minimum(1.0, np.maximum.accumulate((m - np.arange(m)) * p[order]))
    out[order] = adj
    return out


def sign_test(diffs: Sequence[float], better: float = +1.0) -> tuple[int, int, int, float]:
    """Exact two-sided sign test of paired differences: ``(ahead, behind, tied, p)``.

    ``ahead`` counts the differences whose sign is ``better`` (+1: larger is better, -1: smaller is better); ties
    are dropped (the usual convention), and p = min(1, 2 P(Binomial(n, 1/2) <= min(ahead, behind))) over the
    n = ahead + behind untied pairs: 2 · 0.5^n when every one is ahead. nan without an untied pair."""
    d = np.sign(np.asarray(diffs, float)) * better
    ahead, behind = int((d > 0).sum()), int((d < 0).sum())
    n = ahead + behind
    if n == 0:
        return ahead, behind, len(d) - n, math.nan
    k = min(ahead, behind)
    tail = sum(math.comb(n, i) for i in range(k + 1)) / 2**n
    return ahead, behind, len(d) - n, min(1.0, 2 * tail)


def power_paired(effect: float, half: float, n: int, alpha: float = ALPHA) -> float:
    """Power of a two-sided paired t test on ``n`` pairs to detect a true mean difference ``effect``, with the
    spread of the differences taken from their observed 95% half-width ``half`` (noncentral t)."""
    df = n - 1
    se = half / t975(df)
    crit = float(stats.t.ppf(1 - alpha / 2, df))
    nc = abs(effect) / se
    return float(stats.nct.sf(crit, df, nc) + stats.nct.cdf(-crit, df, nc))


def fmt_p(p: Optional[float]) -> str:
    """A p-value in a table: 2 significant digits, '< 0.0001' below that, '—' for none."""
    if p is None or math.isnan(p):
        return "—"
    if p < 1e-4:
        return "< 0.0001"
    return f"{p:.2g}" if p < 0.1 else f"{p:.2f}"
