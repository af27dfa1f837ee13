"""Summaries over seeds: mean ± 95% CI (Student t) and paired differences."""

from __future__ import annotations

import math

import numpy as np

def t975(df: int) -> float:
    """The two-sided 95% Student-t quantile ``t_{0.975, df}``, exact (``t975(4)`` = 2.7764)."""
    from scipy import stats

    if df < 1:
        raise ValueError(f"t975: df must be at least 1; got {df}.")
    return float(stats.t.ppf(0.975, df))


def mean_ci(x) -> tuple[float, float]:
    """Mean and the half-width of its 95% confidence interval (nan with one value)."""
    x = np.asarray(x, float)
    if len(x) < 2:
        return float(x.mean()), math.nan
    return float(x.mean()), t975(len(x) - 1) * float(x.std(ddof=1)) / math.sqrt(len(x))


def fmt(mean: float, half: float, scale: float = 1.0, digits: int = 2) -> str:
    if math.isnan(half):
        return f"{mean * scale:.{digits}f}"
    return f"{mean * scale:.{digits}f} ± {half * scale:.{digits}f}"


def summary_rows(results: dict[str, dict[int, float]], baseline: str = "softmax"):
    """results[variant][seed] = metric. Rows: variant, n, mean, ci, and the paired
    difference to ``baseline`` over the seeds both have (mean, ci)."""
    rows = []
    for variant, by_seed in results.items():
        m, c = mean_ci(list(by_seed.values()))
        row = {"variant": variant, "n_seeds": len(by_seed), "mean": m, "ci95": c}
        if baseline in results and variant != baseline:
            common = sorted(set(by_seed) & set(results[baseline]))
            d = [by_seed[s] - results[baseline][s] for s in common]
            row["diff_vs_" + baseline], row["diff_ci95"] = mean_ci(d) if d else (math.nan, math.nan)
        rows.append(row)
    return rows


def markdown_table(rows, metric: str, scale: float = 100.0, baseline: str = "softmax") -> str:
    head = f"| variant | seeds | {metric} (mean ± 95% CI) | paired Δ vs {baseline} |\n|---|---|---|---|\n"
    body = ""
    for r in rows:
        diff = "—"
        if "diff_vs_" + baseline in r:
            diff = fmt(r["diff_vs_" + baseline], r["diff_ci95"], scale)
        body += f"| {r['variant']} | {r['n_seeds']} | {fmt(r['mean'], r['ci95'], scale)} | {diff} |\n"
    return head + body


SMOKE_NOTE = ("\n**Smoke test, n = 1.** These cells were trained with one seed each and few steps (`isingattn "
              "reproduce --quick`): they check that training, resuming and the report work, in minutes. Their "
              "numbers and differences are not results (one seed has no confidence interval, and a difference "
              "of a few percent is within the spread between seeds); the study's results are in "
              "`results/reproduce/README.md`.\n")


def smoke_note(cells, quick: bool = False) -> str:
    """:data:`SMOKE_NOTE` for a quick report: one made by ``reproduce --quick``, or one whose every cell
    holds a single seed (``cells`` as :func:`isingattn.models.app.cells.load_cells` reads them); else ''."""
    seeds = [max((len(r) for r in c["results"].values()), default=0) for c in cells]
    return SMOKE_NOTE if quick or (seeds and max(seeds) <= 1) else ""
