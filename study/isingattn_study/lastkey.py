"""How much of a learned J's distance profile is the last key.

In a causal model key T−1 is seen by query T−1 alone, so its couplings are learned from one position per
sequence; at distance d it is one of the T − d pairs that the profile averages, and the only one at d = T − 1.
:func:`section` prints, for every seed of the cells in :data:`CELLS`, the profile over all keys and over keys
0..T−2 (J without the last row and column), and draws both.
"""

from __future__ import annotations

import os

import numpy as np

from isingattn import analysis, atomic

# the Shakespeare cells whose far-distance profile the study reads (T = 12 and 16; the second T = 16 cell has J
# not decayed)
CELLS = ("shakespeare/T12", "shakespeare/T16", "shakespeare-long/T16")
FAR = 5  # "antiferromagnetic from distance 5 on"


def profiles(J) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(with, without, last)``: the distance profile over all keys (d = 1..T−1), over keys 0..T−2
    (d = 1..T−2), and the last key's couplings to keys 0..T−2."""
    J = np.asarray(J, float)
    return analysis.distance_profile(J), analysis.distance_profile(J[:-1, :-1]), J[-1, :-1]


def _row(label: str, values, width: int) -> str:
    cells = [f"{x:+.3f}" for x in values] + [""] * (width - len(values))
    return f"| {label} | " + " | ".join(cells) + " |\n"


def _range(x) -> tuple[float, float]:
    return (float(x.min()), float(x.max())) if len(x) else (np.nan, np.nan)


def summary(Js: dict) -> dict:
    """Means over seeds and what the text says of them: the most negative value and where, with and without
    the last key, and on how many seeds the profile without it is negative at every d >= FAR."""
    P = {s: profiles(J) for s, J in Js.items()}
    w = np.mean([p[0] for p in P.values()], axis=0)
    wo = np.mean([p[1] for p in P.values()], axis=0)
    T = len(w) + 1
    far = slice(FAR - 1, None)
    return {"T": T, "with": w, "without": wo, "per_seed": P, "seeds": len(P),
            "last_mean": float(np.mean([p[2].mean() for p in P.values()])),
            "last_range": (float(min(p[2].min() for p in P.values())), float(max(p[2].max() for p in P.values()))),
            "min_with": (float(w.min()), int(w.argmin()) + 1), "min_without": (float(wo.min()), int(wo.argmin()) + 1),
            "far_with": _range(w[far]), "far_without": _range(wo[far]),
            "neg_far_without": sum(bool((p[1][far] < 0).all()) for p in P.values())}


def plot(stats: dict, path: str):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    fig, axes = plt.subplots(1, len(stats), figsize=(4.6 * len(stats), 3.6), squeeze=False, layout="constrained")
    for ax, (name, st) in zip(axes[0], stats.items()):
        for s, (w, wo, _) in st["per_seed"].items():
            ax.plot(np.arange(1, len(w) + 1), w, color="C0", lw=0.7, alpha=0.5)
            ax.plot(np.arange(1, len(wo) + 1), wo, color="C1", lw=0.7, alpha=0.5, ls="--")
        ax.plot(np.arange(1, st["T"]), st["with"], color="C0", lw=2, marker="o", ms=3, label="all keys")
        ax.plot(np.arange(1, st["T"] - 1), st["without"], color="C1", lw=2, ls="--", marker="s", ms=3,
                label=f"without key T−1 = {st['T'] - 1}")
        ax.axhline(0, color="k", lw=0.8)
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set(xlabel="distance |j - k|", ylabel="learned J (head 0)")
        ax.set_title(f"{name}: {st['seeds']} seeds (thin) and their mean (thick)", fontsize=9)
        ax.legend(fontsize=7)
    fig.suptitle("learned J by distance, with and without the last key (hJ, Tiny Shakespeare)")
    atomic.savefig(fig, path, dpi=110)
    plt.close(fig)
    return path


def section(stats: dict, root: str) -> str:
    """Markdown for ``stats`` (``{cell name: summary(its {seed: J})}``, the cells of :data:`CELLS` that are there)
    and the figure ``root/J-last-key.png``; '' when there is none."""
    if not stats:
        return ""
    p = plot(stats, os.path.join(root, "J-last-key.png"))
    md = ["\n## Learned J by distance, with and without the last key (issue 32)\n\n"
          "Key T − 1 is attended by query T − 1 alone; at distance d it is one of the T − d pairs that the profile "
          "averages, and the only one at d = T − 1. Each seed's profile over all keys, then over keys 0..T − 2 "
          "(J without its last row and column), and their means. Plot: "
          f"`{os.path.basename(p)}`.\n"]
    for name, st in stats.items():
        T = st["T"]
        md.append(f"\n### {name} (T = {T}, {st['seeds']} seed{'s' if st['seeds'] > 1 else ''})\n\n| seed, keys | "
                  + " | ".join(f"d={d}" for d in range(1, T)) + " |\n|---" + "|---" * (T - 1) + "|\n")
        for s, (w, wo, _) in st["per_seed"].items():
            md.append(_row(f"{s}, all", w, T - 1) + _row(f"{s}, without {T - 1}", wo, T - 1))
        md.append(_row("**mean, all**", st["with"], T - 1) + _row(f"**mean, without {T - 1}**", st["without"], T - 1))
        (mw, dw), (mo, do) = st["min_with"], st["min_without"]
        lo, hi = st["last_range"]
        md.append(f"\nKey {T - 1}'s couplings to the others: {st['last_mean']:+.3f} on average, from {lo:+.3f} to "
                  f"{hi:+.3f} over seeds and keys. Mean profile at d ≥ {FAR}: {st['far_with'][0]:+.3f} to "
                  f"{st['far_with'][1]:+.3f} with all keys, {st['far_without'][0]:+.3f} to {st['far_without'][1]:+.3f} "
                  f"without key {T - 1}. Its most negative value: {mw:+.3f} at d = {dw} with all keys, {mo:+.3f} at "
                  f"d = {do} without. Without key {T - 1} the profile is negative at every d ≥ {FAR} on "
                  f"{st['neg_far_without']} of {st['seeds']} seeds.\n")
    return "".join(md)
