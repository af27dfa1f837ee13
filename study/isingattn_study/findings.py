"""The report's tests as a family: p-values beside the paired intervals, Holm's adjustment over every
test the report makes, and the exact sign test beside "ahead on every seed".

:func:`family` collects the tests from the rows of :mod:`isingattn_study.grid_report` (one per cell), adjusts
them together, and writes ``p_<key>``, ``p_holm_<key>`` into the rows; the tables here print them.
"""

from __future__ import annotations

import math

from isingattn_study import headline
from isingattn_study.stats import fmt_p, holm, paired_p, sign_test, welch_p

# which field holds each comparison (perplexity cells are tested on their relative change, the headline's)
FIELDS = {"base": (("hJ_rel_pct", "hJ_minus_base"), "paired_seeds"),
          "h": (("hJ_rel_h_pct", "hJ_minus_h"), "h_paired_seeds")}


def signs(a: dict, b: dict, better: float, key: str) -> dict:
    """Sign-test fields of hJ's paired differences ``a - b`` over their common seeds: ``ahead_<key>``,
    ``behind_<key>``, ``tied_<key>`` and ``sign_p_<key>`` (``better``: +1 when larger is better, -1 when smaller)."""
    ahead, behind, tied, p = sign_test([a[s] - b[s] for s in sorted(set(a) & set(b))], better)
    return {f"ahead_{key}": ahead, f"behind_{key}": behind, f"tied_{key}": tied, f"sign_p_{key}": p}


def _field(row: dict, key: str) -> str:
    return next(f for f in FIELDS[key][0] if f in row)


def in_headline(row: dict, against: str) -> bool:
    """Whether ``row`` is a point of the headline table against ``against`` (softmax or h)."""
    return bool(headline.series([row], against))


def family(rows: list[dict]) -> dict:
    """Every test the report prints, adjusted together (Holm); returns a summary of the family.

    The family: each cell's hJ against its baseline (softmax, or the exact-trained / J-not-decayed hJ it is
    paired with), each hJ against h of the headline table, and each change of the gain from one T to the next
    (Welch). A row gains ``p_base``, ``p_holm_base`` (and ``p_h``, ``p_holm_h``); the growth tests are returned
    under ``"growth"`` as ``{(panel, label, T0, T1): (p, p_holm)}``."""
    tests = []  # (kind, where, p)
    for r in rows:
        if "hJ_minus_base" in r:
            f = _field(r, "base")
            tests.append(("base", r, paired_p(r[f], r[f + "_ci95"], r["paired_seeds"])))
        if in_headline(r, "h"):
            f = _field(r, "h")
            tests.append(("h", r, paired_p(r[f], r[f + "_ci95"], r["h_paired_seeds"])))
    for g in headline.growth(rows):
        tests.append(("growth", g[:4], welch_p(g[4], g[5], g[6])))
    adjusted = holm([p for *_, p in tests])
    growth = {}
    for (kind, where, p), q in zip(tests, adjusted):
        if kind == "growth":
            growth[where] = (p, float(q))
        else:
            where[f"p_{kind}"], where[f"p_holm_{kind}"] = p, float(q)
    finite = [q for q in adjusted if not math.isnan(q)]
    audit = [(p, kind) for kind, where, p in tests if kind != "base" or in_headline(where, "softmax")]
    return {"size": len(finite), "kept": sum(q < 0.05 for q in finite), "raw_kept": sum(
        p < 0.05 for *_, p in tests if not math.isnan(p)), "growth": growth,
            "headline_size": len(audit), "headline_kept": int(sum(q < 0.05 for q in holm([p for p, _ in audit])))}


def fmt_sign(row: dict, key: str) -> str:
    """'5/5 (0.0625)': seeds on which hJ did better, of the paired seeds, and the exact sign test's p."""
    if f"ahead_{key}" not in row:
        return "—"
    a, b, t, p = (row[f"{k}_{key}"] for k in ("ahead", "behind", "tied", "sign_p"))
    return f"{a}/{a + b + t}" + (f", {t} tied" if t else "") + f" ({'—' if math.isnan(p) else f'{p:.4g}'})"


def fmt_holm(row: dict, key: str) -> str:
    """'0.0012 (0.031)': the raw p of a row's test and, in brackets, its Holm-adjusted p; bold when that is < 0.05."""
    if f"p_{key}" not in row:
        return "—"
    q = row[f"p_holm_{key}"]
    text = f"{fmt_p(row[f'p_{key}'])} ({fmt_p(q)})"
    return f"**{text}**" if q < 0.05 else text


def gain_table(rows: list[dict], against: str = "softmax") -> str:
    """The headline's numbers (hJ's paired gain over ``against``) with p, Holm's p and the sign test."""
    key = "base" if against == "softmax" else "h"
    points = []
    for r in rows:
        for (title, label), pts in headline.series([r], against).items():
            points += [(title, label, *pt, r) for pt in pts]
    if not points:
        return ""
    out = (f"| panel | series | T | hJ gain over {against} (mean ± 95% CI) | p (Holm) | hJ ahead (sign p) | seeds |\n"
           "|---|---|---|---|---|---|---|\n")
    for title, label, T, g, ci, n, r in sorted(points, key=lambda x: x[:4]):
        gain = f"{g:+.2f}" + ("" if math.isnan(ci) else f" ± {ci:.2f}")
        out += f"| {title} | {label} | {T} | {gain} | {fmt_holm(r, key)} | {fmt_sign(r, key)} | {n} |\n"
    return out


def family_note(fam: dict) -> str:
    return (f"**p (Holm)**: the two-sided p of the paired t test behind the interval beside it (for perplexity, of "
            f"the relative change, the rel. Δ column) and, in brackets, Holm's adjustment over the family of all "
            f"{fam['size']} tests this report prints: every cell's hJ against its baseline, every hJ against h of "
            f"the headline, and every change of the gain from one T to the next (Welch); bold where the adjusted p "
            f"is below 0.05. {fam['raw_kept']} of the {fam['size']} raw p are below 0.05; {fam['kept']} stay below "
            f"after Holm. (Over the {fam['headline_size']} tests of the headline tables alone, the family an "
            f"independent audit counted, Holm keeps {fam['headline_kept']}.) **hJ ahead (sign p)**: the seeds on "
            "which hJ did better than its baseline, of the paired seeds, and the exact two-sided sign test (ties "
            "dropped): hJ ahead on all of 5 seeds gives p = 2 · 0.5^5 = 0.0625 and on all of 3 seeds 0.25, so "
            "\"ahead on every seed\" is not by itself significant at 0.05 with this many seeds.\n")
