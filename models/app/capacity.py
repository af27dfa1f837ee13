"""Issue 32's part 5, capacity at matched parameters: the parameter count of every configuration of the grid,
and the paired gain of J against it for the configurations trained (a table, Holm over its rows, and a plot)."""

from __future__ import annotations

import os

import numpy as np

from isingattn import atomic
from isingattn.models.app.pairing import T16, compare_rows, find, paired_diff, rerun_hJ
from isingattn.models.app.report import fmt, mean_ci


def param_counts() -> list[dict]:
    """Parameters of every capacity configuration (issue 32 part 5), by variant; J_raw counts for hJ only (softmax
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


def capacity_points(mine, every) -> list:
    """The trained capacity configurations at T = 16, FFN on: ``[(label, params of softmax/h, params of hJ, R)]``,\n    ``R`` the results by variant (hJ of the d_model-64 cell from its rerun, see :func:`rerun_hJ`)."""
    counts = {(r["T"], r["d_model"], r["layers"], r["heads"]): r for r in param_counts()}
    points = []
    base = find(every, "brackets-hard", T16, J_param="full", seed0=0)
    depth = next((c for c in every if c["part"] == "depth" and c["seq_len"] == 16), None)
    cells_ = [(c, c.get("d_model", 64), c.get("layers", 1), c.get("heads", 1)) for c in mine]
    if base is not None:
        R = dict(base["results"])
        R["hJ"] = rerun_hJ(every, base)[0] or R.get("hJ", {})
        cells_.append(({**base, "results": R}, 64, 1, 1))
    if depth is not None:
        cells_.append((depth, 64, depth.get("layers", 2), depth.get("heads", 4)))
    for c, d, L, H in sorted(cells_, key=lambda t: counts[(16, t[1], t[2], t[3])]["hJ"]):
        r = counts[(16, d, L, H)]
        points.append((f"d_model {d}, {L} layer(s) x {H} head(s)", r["softmax/h"], r["hJ"], c["results"],
                       os.path.relpath(c["folder"], os.path.dirname(os.path.dirname(c["folder"])))))
    return points


def capacity_readme(root, mine, every) -> str:
    rows = param_counts()
    md = ("Parameter counts of the capacity grid (brackets-hard vocabulary 7, FFN on, 4x FFN; full J at T = 16, "
          "toeplitz J with band 8 at T = 64). softmax/h: every array but J; hJ adds J (`J_raw`); the last column is "
          "what the pairwise control's B adds to softmax or h. Stored entries: a full J_raw holds T² per head and layer, "
          "of which T(T − 1)/2 are free (J is symmetrized, zero diagonal); B holds T² of which the causal T(T + 1)/2 "
          "are used.\n\n| " + " | ".join(rows[0]) + " |\n" + "|---" * len(rows[0]) + "|\n")
    md += "".join("| " + " | ".join(str(v) for v in r.values()) + " |\n" for r in rows)
    points = capacity_points(mine, every)
    if not points:
        return md
    md += ("\n### Trained: brackets-hard, T = 16, FFN on\n\nOnly these configurations were trained (the grid's 24 × 3 "
           "variants × 3 seeds did not fit the session's two shared cores): d_model 32 and 128 with one layer and "
           "head (this part, seeds 0-2), d_model 64 with one layer and head (the brackets-hard cell, seeds 0-4; hJ "
           "rerun under today's code) and with two layers of four heads (the depth cell, seeds 0-2). Same data "
           "and settings otherwise (lr 0.003, weight decay 0.01, 1,500 steps). —: no finished run (a run that "
           "diverged, a non-finite loss, is listed in `parts.DIVERGED`; the cell then ran without that variant).\n\n"
           "| configuration | params softmax/h | params hJ | cell | softmax | h | hJ |\n|---|---|---|---|---|---|---|\n")
    pairs = []
    for label, p_sm, p_hj, R, src in points:
        md += f"| {label} | {p_sm:,} | {p_hj:,} | {src} | " + " | ".join(
            "—" if not R.get(v) else f"{fmt(*mean_ci(list(R[v].values())), 100)} (n={len(R[v])})"
            for v in ("softmax", "h", "hJ")) + " |\n"
        pairs += [(f"{label}: hJ − softmax", R.get("hJ") or {}, R.get("softmax") or {}),
                  (f"{label}: hJ − h", R.get("hJ") or {}, R.get("h") or {})]
    md += "\n" + compare_rows(pairs)
    if plot_gain(points, os.path.join(root, "capacity", "gain_vs_params.png")):
        md += "\n![paired gain against parameters](gain_vs_params.png)\n"
    return md


def draw_gain(ax, points) -> bool:
    """On ``ax``: the paired gain (hJ − softmax, hJ − h; mean ± 95% CI over seeds, at least 2) of
    :func:`capacity_points` against softmax's parameter count (log axis). False when no point has 2 seeds."""
    import matplotlib.ticker

    drawn = False
    for k, (other, colour) in enumerate((("softmax", "C0"), ("h", "C1"))):
        xs, ms, cs = [], [], []
        for _, p_sm, _, R, _ in points:
            d = paired_diff(R.get("hJ"), R.get(other))
            if len(d) >= 2:
                m, c = mean_ci(d)
                xs.append(p_sm * (1.03 if k else 1 / 1.03)), ms.append(m), cs.append(c)  # side by side
        if xs:
            ax.errorbar(xs, ms, yerr=cs, fmt="o-", color=colour, capsize=3, label=f"hJ − {other}")
            drawn = True
    if drawn:
        ax.axhline(0, color="0.5", lw=0.8)
        ax.set_xscale("log")
        ax.xaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
        ax.legend(fontsize=8)
    return drawn


def plot_gain(points, path) -> bool:
    """:func:`draw_gain` as its own figure at ``path`` (atomically); False when there is nothing to draw."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 3.6))
    if not draw_gain(ax, points):
        plt.close(fig)
        return False
    ax.set_xlabel("parameters of softmax / h (hJ adds T² = 256 per head and layer)")
    ax.set_ylabel("paired gain (accuracy points)")
    ax.set_title("brackets-hard, T = 16: gain of J against model size (95% CI over seeds)", fontsize=9)
    fig.tight_layout()
    os.makedirs(os.path.dirname(path), exist_ok=True)
    atomic.savefig(fig, path, dpi=120)
    plt.close(fig)
    return True
