"""The headline's companion figure for the controls (``results/reproduce/controls.png``): hJ's paired gain against
the new controls and on the second task, one panel per question, at most six entries a panel.

1. brackets-hard T = 16: hJ against softmax and h over every seed trained (0-14), against softmax and h with a
   learned position-pair field B, and tuned hJ against tuned softmax and h (fresh seeds 10-14);
2. brackets-hard T = 24: against softmax and h (seeds 0-4, and 5-9 where trained) and against softmax + B, h + B;
3. capacity: the gain over softmax and over h against the parameter count, a line per shape
   (:mod:`~isingattn_study.capacity`);
4. MQAR: hJ against softmax, and against h, one panel each, an entry per cell (T, pairs, vocabulary, J).

Each entry is the mean paired difference by seed with its 95% t interval; above 0, hJ did better.
"""

from __future__ import annotations

import os

from isingattn import atomic
from isingattn_study.capacity import capacity_points, draw_gain
from isingattn.models.app.cells import with_siblings
from isingattn_study.pairing import T16, find, paired_diff, rerun_hJ, untuned_blocks
from isingattn.models.app.report import mean_ci


def _pool(blocks, v) -> dict:
    return {k: x for _, b in blocks for k, x in (b.get(v) or {}).items()}


def _seeds(a: dict, b: dict) -> str:
    s = sorted(set(a or {}) & set(b or {}))
    return f"{s[0]}-{s[-1]}" if s else "none"


def entries(every, untuned: dict, tuned: dict) -> dict:
    """``{panel title: [(label, [paired differences in points])]}`` for the categorical panels; ``untuned`` and
    ``tuned``: ``{variant: {seed: accuracy}}`` of the ``tuned`` part (:func:`~isingattn_study.parts.tuned_results`)."""
    out = {}
    blocks = untuned_blocks(every, untuned, ("hJ", "softmax", "h"))
    hJ = _pool(blocks, "hJ")
    rows = [(f"softmax, seeds {_seeds(hJ, _pool(blocks, 'softmax'))}", paired_diff(hJ, _pool(blocks, "softmax"))),
            (f"h, seeds {_seeds(hJ, _pool(blocks, 'h'))}", paired_diff(hJ, _pool(blocks, "h")))]
    for T, title in ((16, "T16"), (24, "T24")):
        like = {**T16, "seq_len": T}
        B = (find(every, "pairwise", like, pair_bias=True) or {"results": {}})["results"]
        base = find(every, "brackets-hard", like, J_param="full", seed0=0)
        hj_b = rerun_hJ(every, base)[0] if base is not None else {}
        more = []
        if T == 24 and base is not None:
            s5 = (find(every, "seeds10", like, seed0=5) or {"results": {}})["results"]
            pooled = {v: {**(base["results"].get(v) or {}), **(s5.get(v) or {})} for v in ("softmax", "h")}
            hj = {**hj_b, **(s5.get("hJ") or {})}
            more = [(f"{v}, seeds {_seeds(hj, pooled[v])}", paired_diff(hj, pooled[v])) for v in ("softmax", "h")]
        more += [(f"{v} + B, seeds {_seeds(hj_b, B.get(v))}", paired_diff(hj_b, B.get(v))) for v in ("softmax", "h")]
        if T == 16:
            more += [(f"tuned {v} (tuned hJ), seeds {_seeds(tuned.get('hJ'), tuned.get(v))}",
                      paired_diff(tuned.get("hJ"), tuned.get(v))) for v in ("softmax", "h")]
            out["brackets-hard, T = 16, FFN on: hJ against"] = rows + more
        else:
            out["brackets-hard, T = 24, FFN on: hJ against"] = more
    mq = sorted((c for c in every if c["part"] == "mqar"),
                key=lambda c: (c["seq_len"], c["pairs"], c["mqar_vocab"], c["d_model"], c["engine"]))
    for other in ("softmax", "h"):  # one panel per comparison, an entry per cell
        rows = []
        for c in mq:
            R = with_siblings(c, mq, ("hJ", other))
            form = "" if c["J_param"] != "full" else f", full J ({dict(c.get('engine_kw') or ()).get('method', c['engine'])})"
            rows.append((f"T={c['seq_len']}, {c['pairs']} pairs, V={c['mqar_vocab']}{form}\nseeds "
                         f"{_seeds(R['hJ'], R[other])}", paired_diff(R["hJ"], R[other])))
        shape = ["/".join(str(x) for x in sorted({c.get(k, 1) for c in mq})) for k in ("layers", "d_model")]
        out[f"MQAR, {shape[0]} layers, d_model {shape[1]}: hJ − {other}"] = rows
    return out


def plot(every, untuned: dict, tuned: dict, path: str) -> bool:
    """Draw the figure (module docstring) to ``path`` (atomically); False when there is nothing to draw."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = {k: [(lab, d) for lab, d in v if len(d) >= 2] for k, v in entries(every, untuned, tuned).items()}
    panels = {k: v for k, v in panels.items() if v}
    points = capacity_points([c for c in every if c["part"] == "capacity"], every)
    others = [o for o in ("softmax", "h") if points and any(
        len(paired_diff(p["results"].get("hJ"), p["results"].get(o))) >= 2 for p in points)]
    n = len(panels) + len(others)
    if not n:
        return False
    cols = min(n, 3)
    rows_ = -(-n // cols)
    fig, axes = plt.subplots(rows_, cols, figsize=(4.6 * cols, 4.4 * rows_), squeeze=False)
    axes = list(axes.flat)
    for ax, (title, rows) in zip(axes, panels.items()):
        for k, (label, d) in enumerate(rows):
            m, c = mean_ci(d)
            ax.errorbar([k], [m], yerr=[c], fmt="o", color=f"C{k}", capsize=4)
        ax.set_xticks(range(len(rows)), [lab for lab, _ in rows], rotation=35, ha="right", fontsize=8)
        ax.axhline(0, color="0.5", lw=0.8)
        ax.set_title(title, fontsize=9)
        ax.set_ylabel("paired gain of hJ (accuracy points)")
    for ax, other in zip(axes[len(panels):], others):
        draw_gain(ax, points, other)
        ax.set_title(f"brackets-hard, T = 16: hJ − {other} against model size", fontsize=9)
    for ax in axes[n:]:
        ax.set_visible(False)
    fig.suptitle("hJ against the controls of issue 32, paired by seed (mean ± 95% CI); above 0: hJ better",
                 fontsize=10)
    fig.tight_layout()
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    atomic.savefig(fig, path, dpi=110)
    plt.close(fig)
    return True
