"""What the couplings learned: graph structure of ``J`` with networkx.

Every function takes an :class:`IsingModel` (one model: pass ``index`` for a batch)
or a symmetric coupling matrix ``J [n, n]`` (e.g. one head of a trained model).
"""

from __future__ import annotations

import itertools
import os
from typing import Optional

import networkx as nx
import numpy as np

from isingattn import atomic
from isingattn.errors import IsingInputError
from isingattn.model import IsingModel


def _couplings(x, index=None) -> np.ndarray:
    if isinstance(x, IsingModel):
        return x._single(index)[1]
    J = np.asarray(x, np.float64)
    if J.ndim != 2 or J.shape[0] != J.shape[1]:
        raise IsingInputError(f"expected a coupling matrix [n, n] or an IsingModel; got shape {J.shape}.")
    if not np.allclose(J, J.T, atol=1e-6 * max(1.0, np.abs(J).max())):
        raise IsingInputError("J must be symmetric; symmetrize it with (J + J.T) / 2.")
    return J


def coupling_graph(x, threshold: float = 0.0, index=None) -> nx.Graph:
    """Graph of couplings with ``|J_jk| > threshold``; edge attributes ``J``, ``weight = |J|``
    and ``sign`` (+1 ferromagnetic, -1 antiferromagnetic)."""
    J = _couplings(x, index)
    G = nx.Graph()
    G.add_nodes_from(range(len(J)))
    for j, k in zip(*np.nonzero(np.triu(np.abs(J) > threshold, 1))):
        G.add_edge(int(j), int(k), J=float(J[j, k]), weight=float(abs(J[j, k])), sign=int(np.sign(J[j, k])))
    return G


def distance_profile(x, index=None) -> np.ndarray:
    """Mean ``J_jk`` at each distance ``d = |j - k|``, ``d = 1..n-1`` -> ``[n-1]``
    (positions are the spin order: key positions in attention)."""
    J = _couplings(x, index)
    n = len(J)
    return np.array([np.mean(np.diagonal(J, d)) for d in range(1, n)])


def sign_fractions(x, threshold: float = 0.0, index=None) -> dict:
    """Fractions of ferromagnetic and antiferromagnetic edges among ``|J| > threshold``."""
    G = coupling_graph(x, threshold, index)
    signs = np.array([s for _, _, s in G.edges(data="sign")])
    m = max(len(signs), 1)
    return {"edges": len(signs), "ferro": float((signs > 0).sum() / m), "antiferro": float((signs < 0).sum() / m)}


def frustrated_triangles(x, threshold: float = 0.0, index=None) -> list[tuple[int, int, int]]:
    """Triangles whose coupling signs multiply to -1: no spin assignment satisfies all three."""
    G = coupling_graph(x, threshold, index)
    out = []
    for a, b, c in itertools.combinations(sorted(G.nodes), 3):
        if G.has_edge(a, b) and G.has_edge(b, c) and G.has_edge(a, c):
            if G[a][b]["sign"] * G[b][c]["sign"] * G[a][c]["sign"] < 0:
                out.append((a, b, c))
    return out


def communities(x, threshold: float = 0.0, index=None, seed: int = 0) -> list[set]:
    """Louvain communities of the ferromagnetic subgraph (weights ``J > 0``): groups of
    keys the model tends to switch on together."""
    G = coupling_graph(x, threshold, index)
    ferro = nx.Graph()
    ferro.add_nodes_from(G.nodes)
    ferro.add_edges_from((u, v, d) for u, v, d in G.edges(data=True) if d["sign"] > 0)
    if ferro.number_of_edges() == 0:
        return [{v} for v in ferro.nodes]
    return [set(c) for c in nx.community.louvain_communities(ferro, weight="weight", seed=seed)]


def centrality(x, threshold: float = 0.0, index=None) -> dict:
    """Per node: ``degree`` (networkx degree centrality) and ``strength`` (``Σ_k |J_jk|``)."""
    G = coupling_graph(x, threshold, index)
    deg = nx.degree_centrality(G) if len(G) > 1 else {v: 0.0 for v in G}
    strength = dict(G.degree(weight="weight"))
    return {"degree": deg, "strength": strength}


def summary(x, threshold: float = 0.0, index=None) -> dict:
    """All of the above in one dict (JSON-friendly)."""
    prof = distance_profile(x, index)
    cen = centrality(x, threshold, index)
    return {
        "n": len(_couplings(x, index)),
        "distance_profile": [float(v) for v in prof],
        **sign_fractions(x, threshold, index),
        "frustrated_triangles": len(frustrated_triangles(x, threshold, index)),
        "communities": [sorted(c) for c in communities(x, threshold, index)],
        "strength": {int(k): float(v) for k, v in cen["strength"].items()},
        "degree": {int(k): float(v) for k, v in cen["degree"].items()},
    }


def plot_couplings(x, path: Optional[str] = None, threshold: float = 0.0, index=None, title: str = "J"):
    """Three panels: J heatmap, mean J by distance, and the coupling graph with sign colours."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from matplotlib.ticker import MaxNLocator

    J = _couplings(x, index)
    fig, ax = plt.subplots(1, 3, figsize=(13, 4.3))
    v = max(np.abs(J).max(), 1e-12)
    im = ax[0].imshow(J, cmap="RdBu_r", vmin=-v, vmax=v)
    fig.colorbar(im, ax=ax[0], fraction=0.046, label="J")
    ax[0].set(title=f"{title}\n(red: ferro, blue: antiferro)", xlabel="key k", ylabel="key j")
    for axis in (ax[0].xaxis, ax[0].yaxis):  # key positions are integers
        axis.set_major_locator(MaxNLocator(nbins=6, integer=True))
    prof = distance_profile(J)
    nz = np.nonzero(prof)[0]
    prof = prof[: nz[-1] + 1] if len(nz) else prof  # a banded J is 0 beyond its band: no empty bars out to T - 1
    ax[1].bar(np.arange(1, len(prof) + 1), prof, color=["tab:red" if p > 0 else "tab:blue" for p in prof])
    ax[1].axhline(0, color="k", lw=0.8)
    ax[1].xaxis.set_major_locator(MaxNLocator(integer=True))  # distances are integers
    ax[1].set(title="mean J by distance", xlabel="|j - k|", ylabel="mean J")
    G = coupling_graph(J, threshold)
    pos = nx.circular_layout(G)
    colors = ["tab:red" if d["sign"] > 0 else "tab:blue" for _, _, d in G.edges(data=True)]
    widths = [1 + 3 * d["weight"] / v for _, _, d in G.edges(data=True)]
    small = len(J) <= 24  # beyond that, node numbers would overlap round the circle
    nx.draw_networkx(G, pos, ax=ax[2], node_size=250 if small else 30, font_size=8, with_labels=small,
                     edge_color=colors, width=widths)
    ax[2].set(title=f"coupling graph (|J| > {threshold:.2g})" + ("" if small else f", {len(J)} keys"))
    ax[2].axis("off")
    fig.tight_layout()
    if path:
        atomic.savefig(fig, path, dpi=120)
    return fig


def analyze_heads(J, folder: str, threshold: Optional[float] = None, label: str = "") -> tuple[dict, str]:
    """Analyse a stack of coupling matrices ``J [H, T, T]`` (e.g. every head of one layer of a trained
    model): for each head ``h``, :func:`summary` at ``threshold`` (without it 5% of that head's max
    ``|J|``) and :func:`plot_couplings` into ``folder/J-head<h>.png``; the summaries, each with its
    threshold, go into ``folder/summary.json`` as ``{"head<h>": {...}}``. Returns that dict and a
    readable description of it (``label``, e.g. ``"variant hJ"``, heads each head's lines)."""
    import matplotlib.pyplot as plt

    J = np.asarray(J)
    if J.ndim != 3 or J.shape[1] != J.shape[2]:
        raise IsingInputError(f"analyze_heads takes couplings J [H, T, T]; got shape {J.shape}.")
    report, text = {}, []
    for h in range(J.shape[0]):
        Jh = J[h]
        thr = threshold if threshold is not None else 0.05 * float(abs(Jh).max())
        s = summary(Jh, threshold=thr)
        report[f"head{h}"] = {"threshold": thr, **s}
        prof = " ".join(f"{d + 1}:{v:+.3f}" for d, v in enumerate(s["distance_profile"]))
        text.append(f"head {h} ({label + ', ' if label else ''}T={Jh.shape[0]}, |J| > {thr:.3g}):\n"
                    f"  mean J by distance  {prof}\n"
                    f"  ferro {s['ferro']:.2f}  antiferro {s['antiferro']:.2f}  edges {s['edges']}  "
                    f"frustrated triangles {s['frustrated_triangles']}\n"
                    f"  communities {s['communities']}\n"
                    f"  strongest nodes {sorted(s['strength'], key=s['strength'].get, reverse=True)[:5]}")
        plt.close(plot_couplings(Jh, os.path.join(folder, f"J-head{h}.png"), threshold=thr, title=f"J head {h}"))
    atomic.write_json(os.path.join(folder, "summary.json"), report, indent=2)
    return report, "\n".join(text)
