"""Tables that pair the study's cells by seed, shared by the controls' parts (:mod:`~isingattn_study.parts`)
and the capacity part (:mod:`~isingattn_study.capacity`)."""

from __future__ import annotations

import math
import os
from typing import Optional

from isingattn.models.app.cells import same_shape
from isingattn.models.app.report import fmt, mean_ci
from isingattn_study.stats import holm, paired_p, sign_test


def paired_diff(a: Optional[dict], b: Optional[dict]) -> list:
    """``100 (a[s] − b[s])`` (points) over the seeds ``s`` both ``{seed: x}`` hold, in seed order."""
    a, b = a or {}, b or {}
    return [100 * (a[s] - b[s]) for s in sorted(set(a) & set(b))]


def compare_rows(pairs: list) -> str:
    """``pairs``: [(label, a{seed: x}, b{seed: x})]. A table of a − b, paired by seed, Holm over the rows."""
    rows = []
    for label, a, b in pairs:
        common = sorted(set(a) & set(b))
        d = paired_diff(a, b)
        rows.append((label, common, d, paired_p(*mean_ci(d), len(d)) if d else math.nan))
    adj = holm([r[3] for r in rows])
    text = ("| comparison (points) | seeds | paired Δ (mean ± 95% CI) | t-test p | Holm p | wins/losses | "
            "sign-test p |\n|---|---|---|---|---|---|---|\n")
    for (label, common, d, p), q in zip(rows, adj):
        if not d:
            text += f"| {label} | 0 | — | — | — | — | — |\n"
            continue
        w, l, _, sp = sign_test(d)
        seeds = f"{len(common)} ({common[0]}–{common[-1]})"
        p, q = ("—" if math.isnan(x) else f"{x:.2g}" for x in (p, q))  # one seed: no test
        text += f"| {label} | {seeds} | {fmt(*mean_ci(d))} | {p} | {q} | {w}/{l} | {sp:.3g} |\n"
    return text


def means_row(label: str, named: list) -> str:
    return f"| {label} | " + " | ".join("—" if not r else f"{fmt(*mean_ci(list(r.values())), 100)} (n={len(r)})"
                                      for _, r in named) + " |\n"


def find(cells_, part, like, **want) -> Optional[dict]:
    from isingattn.models.app.experiments import LEGACY_CELL

    for c in cells_:
        if c["part"] == part and same_shape(c, like) and all(c.get(k, LEGACY_CELL.get(k)) == v for k, v in want.items()):
            return c
    return None


def rerun_hJ(every, like) -> tuple[dict, str]:
    """hJ of ``like``'s shape rerun under today's code (part pairwise, no B) if there is one, else the committed
    brackets-hard cell's; and where it came from."""
    for part, want in (("pairwise", dict(pair_bias=False)), ("brackets-hard", {})):
        c = find(every, part, like, J_param=like.get("J_param"), seed0=0, **want)
        if c is not None and c["results"].get("hJ"):
            return c["results"]["hJ"], os.path.relpath(c["folder"], os.path.dirname(os.path.dirname(c["folder"])))
    return {}, "none"


T16 = {"task": "brackets-hard", "seq_len": 16, "ffn": True, "steps": 1500, "d_model": 64}


def untuned_blocks(every, untuned, variants=("hJ", "softmax", "h")) -> list:
    """``[(seeds label, {variant: {seed: acc}})]``: brackets-hard T = 16 (FFN on) at the untuned setting, by
    block of seeds: 0-4 (the brackets-hard cell, hJ from its rerun), 5-9 (``seeds10``), 10-14 (``untuned``,
    the ``tuned`` part's results at the untuned setting; empty: none)."""
    out = []
    base = find(every, "brackets-hard", T16, J_param="full", seed0=0)
    if base is not None:
        R = dict(base["results"])
        R["hJ"] = rerun_hJ(every, base)[0]
        out.append(("0-4", {v: R.get(v) or {} for v in variants}))
    s5 = find(every, "seeds10", T16, seed0=5)
    if s5 is not None:
        out.append(("5-9", {v: s5["results"].get(v) or {} for v in variants}))
    if all(untuned.get(v) for v in variants):
        out.append(("10-14", {v: untuned[v] for v in variants}))
    return out
