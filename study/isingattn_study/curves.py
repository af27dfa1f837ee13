"""Training curves of every cell of a part: the held-out metric against step, one panel per cell."""

from __future__ import annotations

import json
import math
import os
import textwrap
from collections import defaultdict

import numpy as np

from isingattn import atomic
from isingattn.models.app.cells import finished, reference, scale

STYLE = {"softmax": ("C0", "o", "-"), "hJ": ("C3", "s", "--"), "h": ("C2", "^", "-."), "J": ("C7", "v", ":")}
MIN_SPAN = {"test_acc": 10.0, "test_ppl": 0.5}  # the least y-range of a curve panel: no cliff from a 0.1 change
ZOOM_SPAN = {"test_acc": 1.0, "test_ppl": 0.05}  # the same for the zoom on the last quarter of training
ZOOM = 0.25  # the zoom panel shows the last quarter of the steps, where the variants' differences are
TASKS = {"shakespeare": "Tiny Shakespeare", "brackets": "bracket matching",
         "brackets-hard": "brackets-hard (unseen nesting shapes)"}


def _limits(mid, span, key) -> tuple:
    """y-limits of ``span`` around ``mid``; an accuracy's axis ends just above 100%, not beyond."""
    lo, hi = mid - span / 2, mid + span / 2
    if key == "test_acc" and hi > 100 + 0.03 * span:
        lo, hi = 100 - 0.97 * span, 100 + 0.03 * span
    return lo, hi


def part_title(cells, part) -> str:
    """The task of ``part``'s cells and the settings they share (T, steps, FFN, engine, J, depth), then the
    part's name: what a panel or figure of the part shows, rather than the part's name alone."""
    cs = [c for c in cells if c["part"] == part]
    if not cs:
        return part
    same = lambda k: len({json.dumps(c.get(k)) for c in cs}) == 1
    c = cs[0]
    bits = [TASKS.get(c["task"], c["task"])]
    if same("seq_len"):
        bits.append(f"T={c['seq_len']}")
    if same("steps"):
        bits.append(f"{c['steps']:,} steps")
    if same("ffn"):
        bits.append(f"FFN {'on' if c['ffn'] else 'off'}")
    if (c.get("layers") or 1) > 1 or c.get("heads", 1) > 1:
        if same("layers") and same("heads"):
            bits.append(f"{c['layers'] or 1} layers x {c['heads']} heads")
    engines = sorted({str(x.get("engine")) for x in cs})
    if "exact" not in engines and "None" not in engines:  # hJ trained through approximate engines or samplers
        bits.append("through " + ", ".join(engines))
    if same("J_param") and same("J_band"):
        bits.append(f"J {c.get('J_param') or 'full'}" + (f" (band {c['J_band']})" if c.get("J_band") else ""))
    if same("rel_bias") and c.get("rel_bias"):
        bits.append("+ relative-position field")
    if same("weight_decay_on") and "J" in str(c.get("weight_decay_on")):
        bits.append("J weight-decayed")
    return ", ".join(bits) + f" [{part}]"


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
    grey. Below each cell's panel, a second one zooms in on the last quarter of training, where the
    variants differ (shaded grey in the panel above). Panels wrap at four cells per row."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    cs = sorted((c for c in cells if c["part"] == part), key=lambda c: (c["seq_len"], not c["ffn"], c["folder"]))
    if not cs:
        return None
    ncol = min(4, len(cs))
    nrow = -(-len(cs) // ncol)
    # each cell: its whole training (top) and a zoom on the last quarter (below), where the variants differ
    fig, axes = plt.subplots(2 * nrow, ncol, figsize=(4 * ncol, 5.6 * nrow + 0.4), squeeze=False,
                             gridspec_kw={"height_ratios": [3, 2] * nrow}, layout="constrained")
    key = "test_ppl" if cs[0]["task"] == "shakespeare" else "test_acc"
    for i, c in enumerate(cs):
        ax, zoom = axes[2 * (i // ncol), i % ncol], axes[2 * (i // ncol) + 1, i % ncol]
        lines = []
        ref, rv, label = reference(c, cells)
        if ref is not None and ref is not c:
            where = os.path.relpath(ref["folder"], os.path.dirname(os.path.dirname(ref["folder"])))
            curves, final = logged_curves(ref, key)
            lines.append((f"{label} ({where})", curves.get(rv, {}), final.get(rv, []), ("0.55", ".", "-"), 0.8))
        curves, final = logged_curves(c, key)
        lines += [(v, curves[v], final.get(v, []), STYLE.get(v, ("k", ".", "-")), 1.5) for v in curves]
        last = max((s for _, by_step, ends, _, _ in lines for s in list(by_step) + [e[0] for e in ends]), default=0)
        logged = {s for _, by_step, _, _, _ in lines for s in by_step}
        start = max((s for s in logged if s <= (1 - ZOOM) * last), default=(1 - ZOOM) * last)  # a logged step
        lo_all, hi_all, said = math.inf, -math.inf, False
        lo_z, hi_z, off_scale = math.inf, -math.inf, []
        for name, by_step, ends, (color, marker, dash), lw in lines:
            if not by_step:
                continue
            steps = sorted(by_step)
            ys = [np.asarray(by_step[s]) for s in steps]
            for a in (ax, zoom):
                a.plot(steps, [y.mean() for y in ys], color=color, marker=marker, ls=dash, ms=3.5, lw=lw,
                       label=name if a is ax else None)
                a.fill_between(steps, [y.min() for y in ys], [y.max() for y in ys], color=color, alpha=0.15, lw=0)
            vals = ys + ([np.asarray([e for _, e in ends])] if ends else [])
            if ends:  # the whole held-out set: hollow, beside the line's last point
                for a in (ax, zoom):
                    a.plot([ends[0][0]], [np.mean([e for _, e in ends])], ls="none", marker=marker, mfc="none",
                           mec=color, ms=6, label=None if said or a is zoom else "final, whole held-out set")
                said = True
            lo_all = min(lo_all, min(y.min() for y in vals))
            hi_all = max(hi_all, max(y.max() for y in vals))
            late = [y for s, y in zip(steps, ys) if s >= start] + vals[len(ys):]
            if late and name == "J":  # J alone trails far behind: it would flatten the others in the zoom
                off_scale.append((min(y.mean() for y in late), max(y.mean() for y in late)))
            elif late:
                lo_z, hi_z = min(lo_z, min(y.min() for y in late)), max(hi_z, max(y.max() for y in late))
        if math.isfinite(lo_all):
            mid, span = (lo_all + hi_all) / 2, max(hi_all - lo_all, MIN_SPAN[key]) * 1.1
            ax.set_ylim(*_limits(mid, span, key))
            ax.axvspan(start, last, color="0.93", zorder=0, lw=0)  # the zoomed window
        if math.isfinite(lo_z):
            mid, span = (lo_z + hi_z) / 2, max(hi_z - lo_z, ZOOM_SPAN[key]) * 1.15
            zoom.set_ylim(*_limits(mid, span, key))
            zoom.set_xlim(start - 0.02 * last, last * 1.02)
            below = any(lo < zoom.get_ylim()[0] for lo, _ in off_scale)
            above = any(hi > zoom.get_ylim()[1] for _, hi in off_scale)
        ax.set(title=os.path.basename(c["folder"]), xlabel="step", ylabel=key.replace("test_", "held-out "))
        off = ""
        if math.isfinite(lo_z) and (below or above):  # say where the hidden J curve went
            off = "; J " + ("off scale" if below and above else "below" if below else "above")
        zoom.set(title=f"zoom: steps {start:,.0f}–{last:,.0f}{off}", xlabel="step",
                 ylabel=key.replace("test_", "held-out "))
        zoom.title.set_fontsize(9)
        ax.legend(fontsize=7)
    for i in range(len(cs), nrow * ncol):
        axes[2 * (i // ncol), i % ncol].set_visible(False)
        axes[2 * (i // ncol) + 1, i % ncol].set_visible(False)
    title = f"held-out metric against step (mean over seeds, range shaded): {part_title(cells, part)}"
    # wrapped at about the figure's width in characters
    fig.suptitle(textwrap.fill(title, int(11 * 4 * ncol), break_on_hyphens=False), fontsize=10)
    atomic.savefig(fig, path, dpi=110)
    plt.close(fig)
    return path
