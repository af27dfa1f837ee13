"""Learned-J analysis against hand-built graphs with known answers."""

import numpy as np
import pytest

from isingattn import IsingModel
from isingattn import analysis


def _J(n, edges):
    J = np.zeros((n, n))
    for (j, k), v in edges.items():
        J[j, k] = J[k, j] = v
    return J


def test_triangle_frustration_and_signs():
    # triangle 0-1-2 with one antiferro edge is frustrated; 2-3-4 all ferro is not
    J = _J(5, {(0, 1): 1.0, (1, 2): 1.0, (0, 2): -0.5, (2, 3): 0.7, (3, 4): 0.7, (2, 4): 0.2})
    assert analysis.frustrated_triangles(J) == [(0, 1, 2)]
    fr = analysis.sign_fractions(J)
    assert fr == {"edges": 6, "ferro": 5 / 6, "antiferro": 1 / 6}
    assert analysis.sign_fractions(J, threshold=0.3)["edges"] == 5
    G = analysis.coupling_graph(J)
    assert G[0][2]["sign"] == -1 and G[0][2]["J"] == -0.5 and G[0][2]["weight"] == 0.5


def test_distance_profile_closed_form():
    n = 6
    idx = np.arange(n)
    J = np.cos(np.abs(idx[:, None] - idx[None])) * (1 - np.eye(n))  # Toeplitz: J depends on distance only
    np.testing.assert_allclose(analysis.distance_profile(J), np.cos(np.arange(1, n)))
    model = IsingModel(np.zeros((2, n)), J)
    np.testing.assert_allclose(analysis.distance_profile(model, index=1), np.cos(np.arange(1, n)))


def test_communities_find_two_ferro_blocks():
    J = _J(6, {(0, 1): 1, (1, 2): 1, (0, 2): 1, (3, 4): 1, (4, 5): 1, (3, 5): 1, (2, 3): -1})
    comms = sorted(sorted(c) for c in analysis.communities(J))
    assert comms == [[0, 1, 2], [3, 4, 5]]


def test_centrality_strength():
    J = _J(4, {(0, 1): 0.5, (0, 2): -2.0, (0, 3): 1.0})
    c = analysis.centrality(J)
    assert c["strength"] == {0: 3.5, 1: 0.5, 2: 2.0, 3: 1.0}
    assert c["degree"][0] == 1.0 and c["degree"][1] == pytest.approx(1 / 3)
    s = analysis.summary(J)
    assert s["frustrated_triangles"] == 0 and s["edges"] == 3


def test_bad_input():
    with pytest.raises(ValueError, match="symmetric"):
        analysis.distance_profile(np.triu(np.ones((3, 3)), 1))
    with pytest.raises(ValueError, match=r"\[n, n\]"):
        analysis.coupling_graph(np.zeros(3))


def test_plot_is_written_atomically(tmp_path, monkeypatch):
    """The figure goes through isingattn.atomic: a failing write leaves neither a partial
    PNG nor a temporary file, and a good one leaves exactly the PNG."""
    import matplotlib.figure

    J = _J(4, {(0, 1): 1.0, (1, 2): -0.5})
    path = tmp_path / "j.png"
    analysis.plot_couplings(J, str(path))
    assert [p.name for p in tmp_path.iterdir()] == ["j.png"] and path.read_bytes()[:4] == b"\x89PNG"

    def broken(self, f, **kw):
        f.write(b"\x89PNG half")
        raise OSError("disk full")

    monkeypatch.setattr(matplotlib.figure.Figure, "savefig", broken)
    with pytest.raises(OSError, match="disk full"):
        analysis.plot_couplings(J, str(tmp_path / "k.png"))
    assert [p.name for p in tmp_path.iterdir()] == ["j.png"]


def test_plot_couplings_rounds_the_threshold_and_ticks_distances_as_integers(tmp_path):
    """The graph's title prints the threshold to two significant digits (not "0.0298688"); the
    heatmap and the distance panel have integer ticks only and stops where a banded J's profile ends."""
    import matplotlib.pyplot as plt

    J = _J(12, {(j, j + 1): 0.5 for j in range(11)} | {(j, j + 2): -0.2 for j in range(10)})
    fig = analysis.plot_couplings(J, str(tmp_path / "j.png"), threshold=0.0298688)
    assert fig.axes[2].get_title() == "coupling graph (|J| > 0.03)"
    dist = fig.axes[1]
    fig.canvas.draw()
    ticks = [t for t in dist.get_xticks() if dist.get_xlim()[0] <= t <= dist.get_xlim()[1]]
    assert ticks and all(float(t).is_integer() for t in ticks)
    assert len(dist.patches) == 2  # distances 1 and 2; beyond them J is 0
    plt.close(fig)
    fig = analysis.plot_couplings(_J(4, {(0, 1): 1.0}), str(tmp_path / "k.png"))  # 4 keys: matplotlib ticks 0.5
    heat = fig.axes[0]
    assert all(float(t).is_integer() for t in list(heat.get_xticks()) + list(heat.get_yticks()))
    plt.close(fig)
