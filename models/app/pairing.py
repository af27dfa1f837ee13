"""Tables that pair the study's cells by seed, shared by issue 32's parts (:mod:`~isingattn.models.app.parts`)
and the capacity part (:mod:`~isingattn.models.app.capacity`)."""

from __future__ import annotations

import math
import os
from typing import Optional

from isingattn.models.app.cells import same_shape
from isingattn.models.app.report import fmt, mean_ci
from isingattn.models.app.stats import holm, paired_p, sign_test


def compare_rows(pairs: list) -> str:
    """``pairs``: [(label, a{seed: x}, b{seed: x})]. A table of a − b, paired by seed, Holm over the rows."""
    rows = []
    for label, a, b in pairs:
        common = sorted(set(a) & set(b))
        d = [100 * (a[s] - b[s]) for s in common]
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
        text += f"| {label} | {seeds} | {fmt(*mean_ci(d))} | {p:.2g} | {q:.2g} | {w}/{l} | {sp:.3g} |\n"
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
