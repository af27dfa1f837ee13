"""The paper's central claim plotted: hJ's paired gain over softmax, with its 95% CI, against T; below it,
hJ's gain over h (sigmoid attention, J = 0), which says whether that gain is J's.

Built from the rows of :mod:`isingattn_study.grid_report` (one per finished cell), so it is
regenerated with every report and never drawn by hand.
"""

from __future__ import annotations

import math
from collections import defaultdict

import numpy as np

from isingattn import atomic
from isingattn.models.app.report import t975

# (panel title, parts, the sign that makes up "hJ better", y label with the comparison's name)
PANELS = (("bracket matching", ("brackets", "brackets-hard", "depth", "positional"), +1.0,
           "hJ − {}, test accuracy (points)"),
          ("Tiny Shakespeare", ("shakespeare", "shakespeare-long", "meanfield"), -1.0,
           "{} − hJ, validation perplexity (%)"))
# what hJ is compared with -> (the row's field in each panel, the row's count of paired seeds); against h
# (sigmoid attention, J = 0) asks whether a gain over softmax is J's
FIELDS = {"softmax": (("hJ_minus_base", "hJ_rel_pct"), "paired_seeds"),
          "h": (("hJ_minus_h", "hJ_rel_h_pct"), "h_paired_seeds")}


def series(rows: list[dict], against: str = "softmax") -> dict:
    """``{(panel, label): [(T, gain, ci95, n), ...]}`` for every row paired against softmax.

    ``label`` names the part, the FFN setting and the form of J; gains are hJ's over ``against``
    ("softmax" or "h"), signed so that a positive value means hJ did better."""
    fields, count = FIELDS[against]
    out = defaultdict(list)
    for (title, parts, sign, _), field in zip(PANELS, fields):
        for r in rows:
            if r.get("part") in parts and r.get("base") == "softmax" and field in r:
                label = f"{r['part']}, FFN {'on' if r['ffn'] else 'off'}, J {r['J_param']}"
                if r["part"] == "depth":
                    label = f"brackets-hard 2x4, FFN {'on' if r['ffn'] else 'off'}, J {r['J_param']}"
                if r["part"] == "positional":  # every variant with the relative-position field, softmax's included
                    label = f"brackets-hard + position field, FFN {'on' if r['ffn'] else 'off'}, J {r['J_param']}"
                if r["part"] == "meanfield":  # full J through an approximate engine (cell .../T32-meanfield-tap)
                    method = r["cell"].rsplit("-", 1)[-1].upper()
                    label = f"shakespeare-long, FFN {'on' if r['ffn'] else 'off'}, J {r['J_param']} through {method}"
                out[(title, label)].append((r["T"], sign * r[field], r[field + "_ci95"], r[count]))
    return {k: sorted(v) for k, v in out.items()}


MAX_SERIES = 6  # the most series (legend entries) in one panel: more are split over further panels
# Each task's series are split into panels by what they hold: (panel title, which labels); a label goes to the
# first panel that takes it, and a panel of more than MAX_SERIES is split further.
SUBPANELS = {"bracket matching": (("the paper's task (brackets)", lambda lab: lab.startswith("brackets,")),
                                  ("brackets-hard, full J", lambda lab: lab.endswith("J full")),
                                  ("brackets-hard, banded or toeplitz J", lambda lab: True)),
             "Tiny Shakespeare": (("Tiny Shakespeare, full J", lambda lab: "J full" in lab),
                                  ("Tiny Shakespeare, banded or toeplitz J", lambda lab: True))}
LOOKS = [("C0", "o"), ("C1", "s"), ("C2", "^"), ("C3", "v"), ("C4", "D"), ("C5", "P")]  # distinct in colour and marker


def panels(rows: list[dict]) -> list[tuple]:
    """The figure's columns: ``[(task title, panel title, [labels]), ...]``, at most MAX_SERIES labels each."""
    data = {**series(rows, "softmax"), **series(rows, "h")}
    out = []
    for title, *_ in PANELS:
        left = sorted({label for (t, label) in data if t == title})
        for sub, takes in SUBPANELS.get(title, ((title, lambda lab: True),)):
            mine = [lab for lab in left if takes(lab)]
            left = [lab for lab in left if lab not in mine]
            chunks = [mine[i:i + MAX_SERIES] for i in range(0, len(mine), MAX_SERIES)]
            out += [(title, sub + (f" ({k + 1}/{len(chunks)})" if len(chunks) > 1 else ""), c)
                    for k, c in enumerate(chunks)]
    return out


def plot(rows: list[dict], path: str):
    """Write the headline figure to ``path`` (PNG); returns the path, or None with no paired row.

    One column per group of at most MAX_SERIES series (:func:`panels`), hJ against softmax above and against
    h below; a series keeps its colour, marker and legend entry in both rows."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows_of = {"softmax": series(rows, "softmax"), "h": series(rows, "h")}
    if not rows_of["softmax"]:
        return None
    cols = panels(rows)
    ylabel_of = {title: ylabel for title, _, _, ylabel in PANELS}
    fig, axes = plt.subplots(2, len(cols), figsize=(4.3 * len(cols), 10.5), squeeze=False, layout="constrained")
    for col, (title, sub, labels) in enumerate(cols):
        for row, (against, data) in enumerate(rows_of.items()):
            ax = axes[row, col]
            mine = {label: data[(title, label)] for label in labels if (title, label) in data}
            at = defaultdict(list)  # T -> the series with a point there, in legend order
            for label, pts in mine.items():
                for T, *_ in pts:
                    at[T].append(label)
            # a dodge among the series that share a T, so that error bars do not overlap: a step of 4% of the
            # axis' span in octaves, the whole spread at most half an octave, so that no point strays toward a
            # neighbouring T
            span = math.log2(max(at) / min(at)) if at else 1.0
            step = min(0.04 * max(span, 1.0), 0.5 / max(max((len(v) for v in at.values()), default=1) - 1, 1))
            for label, pts in mine.items():
                color, marker = LOOKS[labels.index(label) % len(LOOKS)]
                T, gain, ci, n = (np.array(x, float) for x in zip(*pts))
                x = np.array([t * 2 ** (step * (at[t].index(label) - (len(at[t]) - 1) / 2)) for t in T])
                yerr = np.where(np.isnan(ci), 0.0, ci)
                ax.errorbar(x, gain, yerr=yerr, marker=marker, color=color, ms=6,
                            ls="-" if "FFN on" in label else "--", capsize=3, label=label)
                for xi, gi, ni, ci_i in zip(x, gain, n, ci):
                    if math.isnan(ci_i):  # one seed: no interval to draw, say so
                        ax.annotate(f"n={int(ni)}", (xi, gi), fontsize=6, xytext=(3, 3), textcoords="offset points")
            ax.axhline(0, color="k", lw=0.8)
            ax.set_xscale("log", base=2)
            ticks = sorted({T for pts in mine.values() for T, *_ in pts})
            if ticks:
                ax.set_xlim(ticks[0] / 1.25, ticks[-1] * 1.25)
            ax.set_xticks(ticks, [str(t) for t in ticks])
            ax.minorticks_off()
            name = "softmax" if against == "softmax" else "h (J = 0)"
            ax.set_title(f"{sub}:\nhJ against {name}", fontsize=10)
            ax.set(xlabel="context length T", ylabel=ylabel_of[title].format(name))
            if not mine:
                ax.text(0.5, 0.5, "no finished cell", transform=ax.transAxes, ha="center")
        handles, names = axes[0, col].get_legend_handles_labels()
        if not handles:
            handles, names = axes[1, col].get_legend_handles_labels()
        if handles:  # below the axes, one entry a line: inside, a legend hides points
            axes[1, col].legend(handles, names, fontsize=7.5, loc="upper center", bbox_to_anchor=(0.5, -0.14),
                                ncol=1, frameon=False, title="solid: FFN on, dashed: FFN off", title_fontsize=7.5)
    fig.suptitle("hJ against softmax (top) and against h, sigmoid attention without J (bottom), paired by seed "
                 "(mean ± 95% CI); above 0: hJ better", fontsize=11)
    atomic.savefig(fig, path, dpi=110)
    plt.close(fig)
    return path


def table(rows: list[dict], against: str = "softmax") -> str:
    """The figure's numbers as markdown (one row of it: hJ against ``against``)."""
    data = series(rows, against)
    if not data:
        return ""
    out = f"| panel | series | T | hJ gain over {against} (mean ± 95% CI) | seeds |\n|---|---|---|---|---|\n"
    for (title, label), pts in sorted(data.items()):
        for T, g, ci, n in pts:
            gain = f"{g:+.2f}" + ("" if math.isnan(ci) else f" ± {ci:.2f}")
            out += f"| {title} | {label} | {T} | {gain} | {n} |\n"
    return out


def growth(rows: list[dict]) -> list[tuple]:
    """Does the gain grow with T? ``[(panel, label, T0, T1, change, ci95, df), ...]``: for each series, the
    change of hJ's paired gain from each T to the next, with Welch's 95% interval. The two gains are
    independent samples (different runs), each known by its mean, its Student-t half-width and its number of
    paired seeds, from which the standard errors are recovered; a gain from one seed has no interval."""
    from scipy import stats

    out = []
    for (title, label), pts in sorted(series(rows).items()):
        for (T0, g0, c0, n0), (T1, g1, c1, n1) in zip(pts, pts[1:]):
            if n0 < 2 or n1 < 2:
                continue
            v0, v1 = (c0 / t975(n0 - 1)) ** 2, (c1 / t975(n1 - 1)) ** 2  # squared SEs, as mean_ci made them
            if v0 + v1 == 0:  # both gains identical on every seed: a saturated metric, no interval to give
                out.append((title, label, T0, T1, g1 - g0, 0.0, math.nan))
                continue
            df = (v0 + v1) ** 2 / (v0**2 / (n0 - 1) + v1**2 / (n1 - 1))
            out.append((title, label, T0, T1, g1 - g0, float(stats.t.ppf(0.975, df) * math.sqrt(v0 + v1)), df))
    return out


def growth_table(rows: list[dict], p: dict | None = None) -> str:
    """:func:`growth` as markdown; a change whose interval excludes 0 is bold. ``p``: ``{(panel, series, T0, T1):
    (p, Holm's p)}`` adds a "p (Holm)" column, bold where Holm's p < 0.05."""
    from isingattn_study.stats import fmt_p

    data = growth(rows)
    if not data:
        return ""
    extra = ("", "") if p is None else (" p (Holm) |", "---|")
    out = (f"| panel | series | from T | to T | change of the gain (Welch 95% CI) | df |{extra[0]}\n"
           f"|---|---|---|---|---|---|{extra[1]}\n")
    for title, label, T0, T1, d, h, df in data:
        text = f"{d:+.2f} ± {h:.2f}"
        out += f"| {title} | {label} | {T0} | {T1} | {f'**{text}**' if abs(d) > h else text} | {df:.1f} |"
        if p is not None:
            raw, q = p[(title, label, T0, T1)]
            ps = f"{fmt_p(raw)} ({fmt_p(q)})"
            out += f" {f'**{ps}**' if q < 0.05 else ps} |"
        out += "\n"
    return out

