"""compare(): its error columns against errors computed independently here."""

import jax
import numpy as np
import pytest

from isingattn import IsingModel
from isingattn.cli import main
from isingattn.compare import compare, format_table
from isingattn.inference import DimodEngine, Exact
from isingattn.testing import brute_force, random_model


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
        compare(IsingModel(np.zeros(21), np.zeros((21, 21))), ["exact"], key=jax.random.PRNGKey(0))


def test_cli_compare_reads_a_bqm_file(tmp_path, capsys):
    rng = np.random.default_rng(1)
    h, J = random_model(rng, 6)
    path = tmp_path / "m.bqm"
    with open(path, "wb") as f:
        f.write(IsingModel(h, J).to_bqm().to_file().read())
    assert main(["compare", "--graph", str(path), "--engines", "exact", "--out", str(tmp_path / "o")]) == 0
    out = capsys.readouterr().out
    assert "n=6" in out and "| exact | 0.00e+00 |" in out
    assert (tmp_path / "o" / "compare.png").exists()
    bad = tmp_path / "bad.bqm"
    bad.write_bytes(b"not a bqm")
    with pytest.raises(SystemExit, match="could not read"):
        main(["compare", "--graph", str(bad), "--engines", "exact"])
    with pytest.raises(SystemExit, match="unknown engine"):
        main(["compare", "--engines", "nope"])
