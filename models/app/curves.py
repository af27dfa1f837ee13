"""Training curves of every cell of a part: the held-out metric against step, one panel per cell."""

from __future__ import annotations

import json
import math
import os
from collections import defaultdict

import numpy as np

from isingattn import atomic
from isingattn.models.app.cells import finished, reference, scale

STYLE = {"softmax": ("C0", "o", "-"), "hJ": ("C3", "s", "--"), "h": ("C2", "^", "-."), "J": ("C7", "v", ":")}
MIN_SPAN = {"test_acc": 10.0, "test_ppl": 0.5}  # the least y-range of a curve panel: no cliff from a 0.1 change


def logged_curves(cell, key) -> tuple[dict, dict]:
    """``(curves, final)`` of a cell's finished runs: ``curves[variant][step]`` the periodic evaluations per
    seed, ``final[variant]`` the last step's per seed where it was evaluated on more examples than the periodic
    ones (``TrainConfig.eval_limit``: the final evaluation takes the whole held-out set)."""
    rows = defaultdict(list)
    done = finished(cell)
    for line in open(os.path.join(cell["folder"], "metrics.jsonl")):
        rec = json.loads(line)
        if key in rec and (rec.get("variant"), rec.get("seed")) in done:
            rows[rec["variant"], rec["seed"]].append(rec)
    curves, final = defaultdict(lambda: defaultdict(list)), defaultdict(list)
    for (v, _), recs in rows.items():
        recs.sort(key=lambda r: r["step"])
        periodic = recs[0].get("eval_count")
        for r in recs:
            if r.get("eval_count") == periodic or r is not recs[-1]:
                curves[v][r["step"]].append(r[key] * scale(cell))
            else:
                final[v].append((r["step"], r[key] * scale(cell)))
    return curves, final


def plot(cells, part, path):
    """Held-out metric against step for every cell of ``part``: the mean over seeds, with the
    range over seeds shaded. A final evaluation on the whole held-out set (the periodic ones
    use a subset) is a separate hollow marker, not a point of the line. A cell that lacks its
    baseline (softmax trained once per T elsewhere, or exact-trained hJ) shows that curve thin and
    grey. Panels wrap at four per row."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    cs = sorted((c for c in cells if c["part"] == part), key=lambda c: (c["seq_len"], not c["ffn"], c["folder"]))
    if not cs:
        return None
    ncol = min(4, len(cs))
    nrow = -(-len(cs) // ncol)
    fig, axes = plt.subplots(nrow, ncol, figsize=(4 * ncol, 3.3 * nrow), squeeze=False)
    key = "test_ppl" if cs[0]["task"] == "shakespeare" else "test_acc"
    for ax, c in zip(axes.flat, cs):
        lines = []
        ref, rv, label = reference(c, cells)
        if ref is not None and ref is not c:
            where = os.path.relpath(ref["folder"], os.path.dirname(os.path.dirname(ref["folder"])))
            curves, final = logged_curves(ref, key)
            lines.append((f"{label} ({where})", curves.get(rv, {}), final.get(rv, []), ("0.55", ".", "-"), 0.8))
        curves, final = logged_curves(c, key)
        lines += [(v, curves[v], final.get(v, []), STYLE.get(v, ("k", ".", "-")), 1.5) for v in curves]
        lo_all, hi_all, said = math.inf, -math.inf, False
        for name, by_step, ends, (color, marker, dash), lw in lines:
            if not by_step:
                continue
            steps = sorted(by_step)
            ys = [np.asarray(by_step[s]) for s in steps]
            ax.plot(steps, [y.mean() for y in ys], color=color, marker=marker, ls=dash, ms=3.5, lw=lw, label=name)
            ax.fill_between(steps, [y.min() for y in ys], [y.max() for y in ys], color=color, alpha=0.15, lw=0)
            vals = ys + ([np.asarray([e for _, e in ends])] if ends else [])
            if ends:  # the whole held-out set: hollow, beside the line's last point
                ax.plot([ends[0][0]], [np.mean([e for _, e in ends])], ls="none", marker=marker, mfc="none",
                        mec=color, ms=6, label=None if said else "final, whole held-out set")
                said = True
            lo_all = min(lo_all, min(y.min() for y in vals))
            hi_all = max(hi_all, max(y.max() for y in vals))
        if math.isfinite(lo_all):
            mid, span = (lo_all + hi_all) / 2, max(hi_all - lo_all, MIN_SPAN[key]) * 1.1
            ax.set_ylim(mid - span / 2, mid + span / 2)
        ax.set(title=os.path.basename(c["folder"]), xlabel="step", ylabel=key.replace("test_", "held-out "))
        ax.legend(fontsize=7)
    for ax in list(axes.flat)[len(cs):]:
        ax.set_visible(False)
    fig.tight_layout()
    atomic.savefig(fig, path, dpi=110)
    plt.close(fig)
    return path
