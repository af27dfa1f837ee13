"""compare(): its error columns against errors computed independently here."""

import jax
import numpy as np
import pytest

from isingattn.inference.exact import EXACT_MAX_N
from isingattn import IsingModel
from isingattn.cli import main
from isingattn.compare import compare, format_table
from isingattn.errors import IsingInputError
from isingattn.inference.dimod import DimodEngine
from isingattn.inference.exact import Exact
from isingattn.testing import brute_force
from isingattn.instances import random_model


def test_compare_scores_match_brute_force():
    rng = np.random.default_rng(0)
    h, J = random_model(rng, 8)
    model = IsingModel(h, J, beta=0.9)
    rows = compare(model, {"exact": Exact(corr=True), "sa": DimodEngine(num_reads=500, num_sweeps=50)},
                   key=jax.random.PRNGKey(0))
    ref = brute_force(h, J, 0.9)
    assert rows[0]["max_err"] < 1e-10 and rows[0]["corr_err"] < 1e-10
    sa = rows[1]
    np.testing.assert_allclose(sa["max_err"], np.abs(sa["mean"] - ref["mean"]).max(), atol=1e-10)
    np.testing.assert_allclose(sa["mean_err"], np.abs(sa["mean"] - ref["mean"]).mean(), atol=1e-10)
    assert sa["kl"] > 0 and sa["kl_floor"] > 0  # finite-sample KL is positive for 500 draws over 256 states
    assert sa["wall_s"] > 0 and sa["compile_s"] >= 0
    text = format_table(rows)
    assert text.count("\n") == 3 and "| sa |" in text


def test_compare_rejects_batches_and_large_n_without_reference():
    with pytest.raises(ValueError, match="one model"):
        compare(IsingModel(np.zeros((2, 3)), np.zeros((3, 3))), ["exact"], key=jax.random.PRNGKey(0))
    with pytest.raises(ValueError, match="reference"):
        compare(IsingModel(np.zeros(EXACT_MAX_N + 1), np.zeros((EXACT_MAX_N + 1,) * 2)), ["exact"],
                key=jax.random.PRNGKey(0), reference="exact")


def test_the_exact_reference_is_chosen_and_explained():
    """Small n: enumeration. A chain beyond EXACT_MAX_N: the band, with the reason it was not
    enumeration; its marginals match the float64 transfer matrix below."""
    from isingattn.compare import choose_reference

    rng = np.random.default_rng(3)
    h, J = random_model(rng, 6)
    name, _, why = choose_reference(IsingModel(h, J))
    assert name == "exact" and "enumeration" in why
    n = EXACT_MAX_N + 6
    c = rng.normal(size=n - 1) * 0.5
    J = np.diag(c, 1) + np.diag(c, -1)
    hh = rng.normal(size=n) * 0.3
    model = IsingModel(hh, J, beta=1.0)
    name, engine, why = choose_reference(model)
    assert name == "banded" and f"not exact: n = {n} > {EXACT_MAX_N}" in why and engine.bandwidth == 1
    rows = compare(model, ["meanfield-bp"], key=jax.random.PRNGKey(0))
    assert rows.reference_name == "banded" and rows.reference_reason == why
    np.testing.assert_allclose(np.asarray(rows.reference.mean), _chain_marginals(hh, c, 1.0), atol=1e-6)


def test_cli_compare_reads_a_bqm_file(tmp_path, capsys, monkeypatch):
    import isingattn.compare as cmp

    rng = np.random.default_rng(1)
    h, J = random_model(rng, 6)
    path = tmp_path / "m.bqm"
    with open(path, "wb") as f:
        f.write(IsingModel(h, J).to_bqm().to_file().read())
    calls = []
    real = cmp.compare
    monkeypatch.setattr(cmp, "compare", lambda *a, **k: calls.append(k.get("reference")) or real(*a, **k))
    assert main(["compare", "--graph", str(path), "--engines", "exact", "--out", str(tmp_path / "o")]) == 0
    # one compare() (the plot's reference comes from the same run), with the exact engine that applies
    assert len(calls) == 1 and type(calls[0]).__name__ == "Exact"
    out = capsys.readouterr().out
    assert "n=6" in out and "| exact | 0.00e+00 |" in out
    assert (tmp_path / "o" / "compare.png").exists()
    assert sorted(p.name for p in (tmp_path / "o").iterdir()) == ["compare.md", "compare.png"]  # no temp files
    bad = tmp_path / "bad.bqm"
    bad.write_bytes(b"not a bqm")
    with pytest.raises(IsingInputError, match="could not read"):
        main(["compare", "--graph", str(bad), "--engines", "exact"])
    with pytest.raises(IsingInputError, match="unknown engine"):
        main(["compare", "--engines", "nope"])


def test_compare_returns_its_reference():
    rng = np.random.default_rng(3)
    h, J = random_model(rng, 7)
    rows = compare(IsingModel(h, J, beta=0.7), ["meanfield-bp"], key=jax.random.PRNGKey(0))
    ref = brute_force(h, J, 0.7)
    assert rows.reference_name == "exact"
    np.testing.assert_allclose(rows.reference.mean, ref["mean"], atol=1e-10)
    np.testing.assert_allclose(rows[0]["max_err"], np.abs(rows[0]["mean"] - ref["mean"]).max(), atol=1e-10)


def _chain_marginals(h, Jc, beta):
    """<s_j> of an open chain E = -sum h_j s_j - sum Jc_j s_j s_{j+1}, by transfer matrices (float64)."""
    s = np.array([1.0, -1.0])
    n = len(h)
    fwd, bwd = [np.ones(2)], [np.ones(2)]
    for j in range(n - 1):  # fwd[j+1](s_{j+1}) = sum_{s_j} fwd[j] e^{beta h_j s_j} e^{beta J s_j s_{j+1}}
        a = fwd[-1] * np.exp(beta * h[j] * s)
        fwd.append(np.exp(beta * Jc[j] * np.outer(s, s)).T @ a / a.sum())
    for j in range(n - 1, 0, -1):
        b = bwd[-1] * np.exp(beta * h[j] * s)
        bwd.append(np.exp(beta * Jc[j - 1] * np.outer(s, s)) @ b / b.sum())
    bwd = bwd[::-1]
    p = np.array([fwd[j] * bwd[j] * np.exp(beta * h[j] * s) for j in range(n)])
    p /= p.sum(1, keepdims=True)
    return p @ s


def test_compare_beyond_exact_with_another_reference(capsys):
    """n = 30 > EXACT_MAX_N: the exact reference, asked for, is refused (the message names the way
    out), and an explicit reference is used instead. On a chain BP and Banded are both exact, so the
    reference's marginals equal the transfer-matrix ones and Banded's error is ~0."""
    rng = np.random.default_rng(4)
    h, J = random_model(rng, 30)
    J = np.triu(np.tril(J, 1), 1)
    J = J + J.T
    model = IsingModel(h, J, beta=0.8)
    with pytest.raises(IsingInputError, match="reference="):
        compare(model, ["banded"], key=jax.random.PRNGKey(0), reference="exact")
    rows = compare(model, ["banded"], key=jax.random.PRNGKey(0), reference="meanfield-bp")
    exact = _chain_marginals(h, np.diag(J, 1), 0.8)
    assert rows.reference_name == "meanfield-bp"
    np.testing.assert_allclose(rows.reference.mean, exact, atol=1e-5)
    np.testing.assert_allclose(rows[0]["mean"], exact, atol=1e-10)
    assert rows[0]["max_err"] < 1e-5
    assert main(["compare", "--n", "30", "--graph", "chain", "--reference", "meanfield-bp", "--engines", "banded",
                 "--plain"]) == 0
    out = capsys.readouterr().out
    assert "n=30" in out and "errors relative to meanfield-bp" in out
    assert float(out.split("banded")[-1].split()[0]) < 1e-5
    with pytest.raises(IsingInputError, match="--reference"):
        main(["compare", "--n", "30"])


def test_tree_reference_is_exact_on_a_strip():
    """compare(reference="tree") scores against dwave-samplers' TreeDecompositionSampler,
    which on a 3 x 5 strip (sparse couplings) equals the brute-force marginals."""
    from isingattn import graphs

    g = graphs.lattice((3, 5))
    J = graphs.random_couplings(jax.random.key(0), g, "gaussian", 0.7, dtype=np.float64)
    h = np.random.default_rng(0).normal(0, 0.5, g.n)
    model = IsingModel(h, J, beta=0.9)
    rows = compare(model, ["meanfield-bp"], key=jax.random.key(1), reference="tree")
    ref = brute_force(h, np.asarray(J.to_dense()), beta=0.9)["mean"]
    np.testing.assert_allclose(np.asarray(rows.reference.mean), ref, atol=1e-9)
    assert rows.reference_name == "tree"
    np.testing.assert_allclose(rows[0]["max_err"], np.abs(rows[0]["mean"] - ref).max(), atol=1e-9)


def test_cli_compare_banded_reads_the_strip_and_engine_kw(capsys):
    """On a 30 x 10 strip (bandwidth 10, above Banded's default 8) compare builds Banded with
    the graph's bandwidth: it equals dwave-samplers' TreeDecompositionSampler. --engine-kw
    sets one engine's settings (repeatable), and a malformed, unknown or invalid one is
    refused with a message naming the option."""
    args = ["compare", "--graph", "lattice:30x10", "--couplings", "gaussian", "--j-scale", "0.5", "--h-scale", "0.3",
            "--beta", "0.7", "--reference", "tree", "--engines", "banded,gibbs", "--plain"]
    assert main(args + ["--engine-kw", "gibbs:num_samples=40,num_chains=2", "--engine-kw", "gibbs:num_warmup=10"]) == 0
    out = capsys.readouterr().out
    assert "n=300" in out
    assert float(out.split("banded")[-1].split()[0]) < 1e-5
    for bad in ("gibbs", "sqa:num_reads=2", "gibbs:num_chains=0"):
        with pytest.raises(IsingInputError, match="--engine-kw"):
            main(args + ["--engine-kw", bad])


def test_compare_scores_log_z_against_brute_force():
    """Each engine's log Z column against the float64 brute-force log Z computed here."""
    rng = np.random.default_rng(4)
    h, J = random_model(rng, 8, h_scale=0.4)
    model = IsingModel(h, J, beta=0.8)
    ref = brute_force(h, J, 0.8)["log_z"]
    rows = compare(model, ["exact", "meanfield-naive", "meanfield-tap", "ais"], key=jax.random.PRNGKey(1))
    by = {r["engine"]: r for r in rows}
    assert abs(by["exact"]["log_z"] - ref) < 1e-10 and by["exact"]["log_z_kind"] == "exact"
    for name in ("meanfield-naive", "meanfield-tap", "ais"):
        np.testing.assert_allclose(by[name]["log_z_err"], by[name]["log_z"] - ref, atol=1e-10)
    assert by["meanfield-naive"]["log_z"] <= ref and by["meanfield-naive"]["log_z_kind"] == "lower_bound"
    ais = by["ais"]
    assert ais["log_z_kind"] == "estimate" and abs(ais["log_z"] - ref) <= 4 * ais["log_z_se"]
    assert np.isnan(by["exact"]["log_z_se"]) and "| Δ log Z |" in format_table(rows)
    assert rows.reference_log_z[0] == pytest.approx(ref, abs=1e-10)


def test_tree_reference_gives_log_z_and_bethe_is_exact_on_it():
    rng = np.random.default_rng(5)
    h, J = random_model(rng, 40, h_scale=0.5, J_scale=0.7, graph="chain")
    rows = compare(IsingModel(h, J, beta=1.1), ["meanfield-bp"], key=jax.random.PRNGKey(0), reference="tree")
    assert abs(rows[0]["log_z_err"]) < 1e-8 and rows[0]["max_err"] < 1e-5  # BP's marginals stop at tol 1e-6


def test_cli_compare_scores_log_z_against_kaufman(capsys):
    """--couplings ferro --h-scale 0 on a periodic lattice: log Z is scored against Kaufman's exact
    value, which Exact reproduces (isingattn.onsager is tested against brute force)."""
    assert main(["compare", "--graph", "lattice:4x4:periodic", "--couplings", "ferro", "--h-scale", "0",
                 "--beta", "0.4", "--engines", "exact,meanfield-naive", "--plain"]) == 0
    out = capsys.readouterr().out
    assert "Kaufman" in out and "Δ log Z" in out
    line = next(ln for ln in out.splitlines() if ln.startswith("exact "))
    # the CLI's lattice couplings are float32: Exact's log Z (≈ 25) agrees to float32 precision
    assert any(abs(float(x)) < 1e-4 for x in line.split() if x.startswith(("+", "-")) and "e" in x), line


def test_plot_draws_zero_error_on_the_floor_and_names_n_and_beta(tmp_path):
    """Exact's zero error is a star on the axis floor labelled "(0)", not a point at 1e-16 that stretches the
    axis over 15 decades; the title gives n and β; no two labels overlap."""
    import matplotlib.pyplot as plt

    from isingattn.compare import Comparison, plot_comparison
    from isingattn.marginals import Marginals

    ref = np.linspace(-0.9, 0.9, 6)
    near = [("exact", 0.0, 4e-4), ("tap", 0.059, 1.6e-4), ("bp", 0.045, 1.3e-4), ("gibbs", 0.033, 3.5e-3)]
    rows = Comparison([{"engine": e, "max_err": err, "wall_s": t, "mean": ref + err} for e, err, t in near],
                      Marginals(mean=ref), "exact")
    rows.n, rows.beta = 6, 0.75
    fig = plot_comparison(rows, ref, str(tmp_path / "c.png"))
    b = fig.axes[1]
    lo, hi = b.get_ylim()
    assert 1e-3 <= lo < 0.033 and hi >= 0.059  # a floor one decade at most below the smallest error
    assert "n = 6" in fig._suptitle.get_text() and "β = 0.75" in fig._suptitle.get_text()
    texts = [t for t in b.texts]
    assert sorted(t.get_text() for t in texts) == ["bp", "exact (0)", "gibbs", "tap"]
    r = fig.canvas.get_renderer()
    boxes = [t.get_window_extent(r) for t in texts]
    assert not any(boxes[i].overlaps(boxes[j]) for i in range(len(boxes)) for j in range(i))
    plt.close(fig)
    assert (tmp_path / "c.png").stat().st_size > 0


def test_an_unconverged_sampler_shows_as_unconverged():
    """A ±3 glass at β = 3 with a short Gibbs run: its chains do not mix (R-hat, computed by the
    engine from its own draws, says so). compare's row says
    converged = False, its table says NO, its error is counted in MCSEs, and the engine's
    convergence warning, traced under compare's jit, is raised once."""
    import warnings

    from isingattn.inference import ConvergenceWarning, Gibbs

    rng = np.random.default_rng(5)
    n = 10
    J = np.triu(rng.choice([-3.0, 3.0], size=(n, n)) * (rng.random((n, n)) < 0.5), 1)
    model = IsingModel(rng.normal(size=n) * 0.1, J + J.T, beta=3.0)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        rows = compare(model, {"gibbs": Gibbs(num_warmup=5, num_samples=20, num_chains=2)}, key=jax.random.PRNGKey(0))
    (row,) = rows
    assert row["converged"] is False and row["warnings"]
    assert [w.category for w in caught if issubclass(w.category, ConvergenceWarning)] == [ConvergenceWarning]
    assert "compare, gibbs:" in str(next(w.message for w in caught if issubclass(w.category, ConvergenceWarning)))
    table = format_table(rows)
    assert "| converged |" in table and "| NO |" in table
    assert rows.reference_name == "exact" and row["max_err"] > 0.0


def test_a_wide_zero_field_lattice_gets_the_planar_reference():
    """40×40 open ±J lattice without fields: too many spins to enumerate, too wide for the band and
    the junction tree, planar: chosen, with each refusal in the reason. With a field, none applies."""
    from isingattn import graphs
    from isingattn.compare import choose_reference

    g = graphs.lattice((40, 40))
    w = np.random.default_rng(2).choice([-1.0, 1.0], size=g.E)
    J = np.zeros((g.n, g.n))
    J[g.edges[:, 0], g.edges[:, 1]] = J[g.edges[:, 1], g.edges[:, 0]] = w
    name, _, why = choose_reference(IsingModel(np.zeros(g.n), J))
    assert name == "planar" and all(f"not {x}" in why for x in ("exact", "banded", "junction-tree"))
    with pytest.raises(IsingInputError, match="no exact reference applies.*nonzero field"):
        choose_reference(IsingModel(np.full(g.n, 0.1), J))
