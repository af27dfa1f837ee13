"""The capacity part, at matched parameters: the parameter count of every configuration of the grid,
and the paired gain of J against it for the configurations trained (a table, Holm over its rows, and a plot)."""

from __future__ import annotations

import os

import numpy as np

from isingattn import atomic
from isingattn_study.pairing import T16, compare_rows, find, paired_diff, rerun_hJ
from isingattn.models.app.report import fmt, mean_ci


def param_counts() -> list[dict]:
    """Parameters of every capacity configuration, by variant; J_raw counts for hJ only (softmax
    and h hold it as an unused zero array), the rest for every variant."""
    import jax

    from isingattn.models.transformer import Config, Transformer

    rows = []
    for T in (16, 64):
        for d in (32, 64, 128):
            for L in (1, 2):
                for H in (1, 4):
                    form = {} if T <= 24 else dict(J_param="toeplitz", J_band=8)
                    cfg = Config(vocab_size=7, seq_len=T, n_out=T, d_model=d, n_heads=H, n_layers=L, **form)
                    model = jax.eval_shape(lambda: Transformer(cfg, key=jax.random.PRNGKey(0)))
                    leaves = jax.tree_util.tree_leaves_with_path(model)
                    n_J = sum(int(np.prod(x.shape)) for p, x in leaves if "J_raw" in jax.tree_util.keystr(p))
                    total = sum(int(np.prod(x.shape)) for _, x in leaves)
                    rows.append({"T": T, "d_model": d, "layers": L, "heads": H, "softmax/h": total - n_J,
                                 "hJ": total, "J": n_J, "pair field B": L * H * T * T})
    return rows


SHAPES = ((1, 1), (1, 4), (2, 1), (2, 4))  # (layers, heads) of the grid


def capacity_points(mine, every, T: int = 16) -> list[dict]:
    """The trained capacity configurations at ``T`` (16: full J, 64: toeplitz J), FFN on, fewest parameters first:
    dicts of ``label``, ``d_model``, ``layers``, ``heads``, ``params`` (softmax/h), ``params_hJ``, ``results`` (by
    variant; hJ of the d_model-64 cell from its rerun, see :func:`rerun_hJ`) and ``cell`` (its folder under the
    root)."""
    counts = {(r["T"], r["d_model"], r["layers"], r["heads"]): r for r in param_counts()}
    base = find(every, "brackets-hard", {**T16, "seq_len": T}, J_param="full" if T == 16 else "toeplitz", seed0=0)
    depth = next((c for c in every if c["part"] == "depth" and c["seq_len"] == T), None)
    cells_ = [(c, c.get("d_model", 64), c.get("layers", 1), c.get("heads", 1)) for c in mine if c["seq_len"] == T]
    if base is not None:
        R = dict(base["results"])
        R["hJ"] = rerun_hJ(every, base)[0] or R.get("hJ", {})
        cells_.append(({**base, "results": R}, 64, 1, 1))
    if depth is not None:
        cells_.append((depth, 64, depth.get("layers", 2), depth.get("heads", 4)))
    points = []
    for c, d, L, H in cells_:
        r = counts[(T, d, L, H)]
        points.append(dict(label=f"d_model {d}, {L} layer(s) x {H} head(s)", d_model=d, layers=L, heads=H,
                           params=r["softmax/h"], params_hJ=r["hJ"], results=c["results"],
                           cell=os.path.relpath(c["folder"], os.path.dirname(os.path.dirname(c["folder"])))))
    return sorted(points, key=lambda p: p["params_hJ"])


def capacity_readme(root, mine, every) -> str:
    rows = param_counts()
    md = ("Parameter counts of the capacity grid (brackets-hard vocabulary 7, FFN on, 4x FFN; full J at T = 16, "
          "toeplitz J with band 8 at T = 64). softmax/h: every array but J; hJ adds J (`J_raw`); the last column is "
          "what the pairwise control's B adds to softmax or h. Stored entries: a full J_raw holds T² per head and layer, "
          "of which T(T − 1)/2 are free (J is symmetrized, zero diagonal); B holds T² of which the causal T(T + 1)/2 "
          "are used.\n\n| " + " | ".join(rows[0]) + " |\n" + "|---" * len(rows[0]) + "|\n")
    md += "".join("| " + " | ".join(str(v) for v in r.values()) + " |\n" for r in rows)
    by_T = {T: capacity_points(mine, every, T) for T in (16, 64)}
    for T, points in by_T.items():
        if points:
            md += _trained(T, points)
    if plot_gain(by_T, os.path.join(root, "capacity", "gain_vs_params.png")):
        md += "\n![paired gain against parameters](gain_vs_params.png)\n"
    return md


def _trained(T: int, points) -> str:
    """The table of the trained configurations at ``T`` and their paired comparisons (Holm over this table)."""
    done = {(p["d_model"], p["layers"], p["heads"]) for p in points}
    missing = [f"d_model {d} {L}x{H}" for d in (32, 64, 128) for L, H in SHAPES if (d, L, H) not in done]
    J = "full J" if T == 16 else "toeplitz J, band 8, exact through Banded"
    md = (f"\n### Trained: brackets-hard, T = {T}, FFN on, {J}\n\n"
          f"{len(points)} of the 12 configurations at T = {T} have finished runs"
          + (f" (not yet: {', '.join(missing)})" if missing else "") + ". Seeds 0-2 in this part's cells; d_model 64 "
          "with one layer and head is the brackets-hard cell (seeds 0-4"
          + (", hJ rerun under today's code" if T == 16 else "") + "), with two layers of four heads the depth cell "
          "(seeds 0-2). Same data and settings otherwise (lr 0.003, weight decay 0.01, 1,500 steps), untuned at every "
          "width. A variant whose run diverged (a non-finite loss, listed in `parts.DIVERGED`) keeps the seeds it finished "
          "before, and the cell then ran without it; —: no finished run.\n\n"
          "| configuration | params softmax/h | params hJ | cell | softmax | h | hJ |\n|---|---|---|---|---|---|---|\n")
    pairs = []
    for p in points:
        R = p["results"]
        md += f"| {p['label']} | {p['params']:,} | {p['params_hJ']:,} | {p['cell']} | " + " | ".join(
            "—" if not R.get(v) else f"{fmt(*mean_ci(list(R[v].values())), 100)} (n={len(R[v])})"
            for v in ("softmax", "h", "hJ")) + " |\n"
        pairs += [(f"{p['label']}: hJ − softmax", R.get("hJ") or {}, R.get("softmax") or {}),
                  (f"{p['label']}: hJ − h", R.get("hJ") or {}, R.get("h") or {})]
    return md + "\n" + compare_rows(pairs)


def draw_gain(ax, points, other: str) -> bool:
    """On ``ax``: the paired gain hJ − ``other`` (mean ± 95% CI over seeds, at least 2) of :func:`capacity_points`
    against softmax's parameter count (log axis), one line per shape (layers x heads) through its widths. False when
    no point has 2 seeds."""
    import matplotlib.ticker

    drawn = False
    for k, (L, H) in enumerate(SHAPES):
        xs, ms, cs = [], [], []
        for p in (p for p in points if (p["layers"], p["heads"]) == (L, H)):
            d = paired_diff(p["results"].get("hJ"), p["results"].get(other))
            if len(d) >= 2:
                m, c = mean_ci(d)
                xs.append(p["params"] * 1.04 ** (k - 1.5)), ms.append(m), cs.append(c)  # side by side
        if xs:
            ax.errorbar(xs, ms, yerr=cs, fmt="osD^"[k] + "-", color=f"C{k}", capsize=3, label=f"{L} x {H}")
            drawn = True
    if drawn:
        ax.axhline(0, color="0.5", lw=0.8)
        ax.set_xscale("log")
        ax.xaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
        ax.legend(fontsize=8, title="layers x heads", title_fontsize=8)
        ax.set_xlabel("parameters of softmax / h")
        ax.set_ylabel(f"hJ − {other} (accuracy points)")
    return drawn


def plot_gain(by_T: dict, path) -> bool:
    """:func:`draw_gain` against softmax and against h, side by side, a row per T of ``by_T`` (T -> points) with
    a point of 2 seeds, at ``path`` (atomically); False when there is nothing to draw."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = [(T, pts) for T, pts in by_T.items() if any(
        len(paired_diff(p["results"].get("hJ"), p["results"].get(o))) >= 2 for p in pts for o in ("softmax", "h"))]
    if not rows:
        return False
    fig, axes = plt.subplots(len(rows), 2, figsize=(10, 3.8 * len(rows)), squeeze=False)
    for (T, points), row in zip(rows, axes):
        for ax, other in zip(row, ("softmax", "h")):
            draw_gain(ax, points, other)
            ax.set_title(f"brackets-hard, T = {T}: hJ − {other}", fontsize=9)
    fig.suptitle("Paired gain of J against model size (95% CI over seeds; widths 32, 64, 128 left to right)\nhJ adds "
                 "T² = 256 weights per head and layer at T = 16, 9 toeplitz weights at T = 64", fontsize=9)
    fig.tight_layout()
    os.makedirs(os.path.dirname(path), exist_ok=True)
    atomic.savefig(fig, path, dpi=120)
    plt.close(fig)
    return True
