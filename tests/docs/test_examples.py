"""Every script in examples/ runs as it is, with a tiny budget, and says something true."""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[2]


def _run(script, *args, cwd, env=None):
    # The suite's XLA_FLAGS (conftest.py), not the run-bound level: with --quick the examples spend more
    # CPU compiling at level 1 than they save running (benchmarks/README.md, "The test suite").
    env = {**os.environ, **(env or {})}
    out = subprocess.run([sys.executable, str(ROOT / "examples" / script), *args], cwd=cwd, capture_output=True,
                         text=True, timeout=600, env=env)
    assert out.returncode == 0, out.stderr[-3000:]
    return out.stdout


def _written(cwd):
    """Every file under ``cwd``: examples write into runs/examples/, never into the working folder itself."""
    return sorted(str(p.relative_to(cwd)) for p in Path(cwd).rglob("*") if p.is_file())


def test_compare_engines(tmp_path):
    out = _run("compare_engines.py", "--n", "6", "--engines", "exact,meanfield-bp", cwd=tmp_path)
    exact = re.search(r"^exact\s+(\S+)", out, re.M)
    bp = re.search(r"^meanfield-bp\s+(\S+)", out, re.M)
    assert float(exact.group(1)) == 0.0 and 0.0 < float(bp.group(1)) < 0.2  # BP is approximate on a dense graph
    assert _written(tmp_path) == ["runs/examples/compare_engines.png"]
    assert (tmp_path / "runs/examples/compare_engines.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_export_bqm(tmp_path):
    out = _run("export_bqm.py", "--n", "6", "--reads", "400", cwd=tmp_path)
    assert "energies agree: True" in out
    rows = re.findall(r"^\s+\d+\s+(\S+)\s+(\S+)\s+\((\S+)\)", out, re.M)
    assert len(rows) == 6
    # thermal SQA reads are nearly independent here; allow 5 naive standard errors
    assert all(abs(float(a) - float(b)) <= 5 * float(s) + 1e-3 for a, b, s in rows)
    assert _written(tmp_path) == ["runs/examples/model.bqm"]
    assert (tmp_path / "runs/examples/model.bqm").read_bytes()[:8] == b"DIMODBQM"


def test_analyze_couplings(tmp_path):
    out = _run("analyze_couplings.py", cwd=tmp_path)
    prof = [float(v) for v in re.findall(r"\d+:([+-]\d\.\d+)", out.splitlines()[0])]
    # the toy J is +0.3 at distances 2-4 and -0.2 from 6 on, plus N(0, 0.02) noise
    assert all(abs(p - 0.3) < 0.03 for p in prof[1:4]) and all(abs(p + 0.2) < 0.03 for p in prof[5:])
    assert _written(tmp_path) == ["runs/examples/couplings.png"]


def test_train_shakespeare(tmp_path, corpus):
    out = _run("train_shakespeare.py", "--seq-len", "4", "--steps", "60", "--eval-every", "60", "--variant", "h",
               cwd=tmp_path, env={"ISINGATTN_DATA": corpus})
    ppl = float(re.search(r"validation perplexity (\S+)", out).group(1))
    assert ppl < 65 / 2  # far below a uniform guess over the 65-character vocabulary
    assert _written(tmp_path) == []


@pytest.mark.slow
def test_onsager(tmp_path):
    """The 2D Ising example's smoke run: in the disordered phase (K < K_c) its AIS log Z is within 4 of
    its SEs of Kaufman's exact value (isingattn.onsager, tested against brute force); at and above
    K_c AIS's SE is not trustworthy (a known shortfall, benchmarks/README.md). Its figures are written."""
    out = _run("onsager.py", "--quick", cwd=tmp_path)
    rows = re.findall(r"^\| (\d+) \| (\S+) \| (\S+) \| (\S+) \| (\S+) \| (\S+) \|$", out, re.M)
    assert len(rows) == 10  # 2 tori x 5 couplings
    disordered = [r for r in rows if float(r[1]) < 0.44]  # K = 0.30, 0.375 on each torus
    assert len(disordered) == 4 and all(abs(float(err)) <= 4 * float(se) + 1e-3 for *_, err, se in disordered), rows
    assert _written(tmp_path) == ["runs/examples/onsager/meanfield_free_energy.png", "runs/examples/onsager/onsager.md",
                                  "runs/examples/onsager/onsager.png"]


@pytest.mark.slow
def test_fit_digits(tmp_path):
    """The digits example's smoke run: the lattice model fitted by exact maximum likelihood scores
    the held-out images higher than independent pixels (both log-likelihoods exact: Banded's log Z
    and the closed form), by more than 4 of the larger per-image standard errors; its figures are
    written."""
    out = _run("fit_digits.py", "--quick", cwd=tmp_path)
    pattern = r"^\| (independent|lattice \(exact ML\)) \| exact \| (\S+) \| \S+ \| (\S+) \|"
    rows = {m.group(1): (float(m.group(2)), float(m.group(3))) for m in re.finditer(pattern, out, re.M)}
    (ind, se_i), (lat, se_l) = rows["independent"], rows["lattice (exact ML)"]
    assert lat - ind > 4 * max(se_i, se_l), (lat, ind, se_i, se_l)
    assert _written(tmp_path) == ["runs/examples/fit_digits/couplings.png", "runs/examples/fit_digits/digits.md",
                                  "runs/examples/fit_digits/samples.png"]


def _fails(script, *args, cwd, env=None):
    """A run that must end with exit status 2 and one line ``<script>: error: ...`` on stderr, as the CLI does."""
    full = {**os.environ, **(env or {})}
    for k in [k for k, v in (env or {}).items() if v is None]:
        del full[k]
    out = subprocess.run([sys.executable, str(ROOT / "examples" / script), *args], cwd=cwd, capture_output=True,
                         text=True, timeout=600, env=full)
    err = out.stderr.strip()
    assert out.returncode == 2, err[-3000:]
    assert len(err.splitlines()) == 1 and err.startswith(f"{script}: error: ") and "Traceback" not in err, err
    return err


def test_docstrings_name_committed_checkpoints():
    """The checkpoints the examples' usage lines name are committed (not ckpt-*.npz, which training writes
    and .gitignore leaves out)."""
    tracked = set(subprocess.run(["git", "ls-files", "results"], cwd=ROOT, capture_output=True, text=True,
                                 check=True).stdout.split())
    named = [(p.name, m) for p in sorted((ROOT / "examples").glob("*.py"))
             for m in re.findall(r"[\w./-]+/[\w.-]+\.npz", p.read_text())]
    assert named
    for script, path in named:
        assert path in tracked, f"{script} names {path}, which is not committed"


def test_analyze_couplings_runs_its_own_usage_line(tmp_path):
    """The command in the docstring, as written (the repository as working folder), with the figure
    elsewhere; the distance profile it prints is the checkpoint's J, read back independently."""
    import numpy as np

    doc = (ROOT / "examples" / "analyze_couplings.py").read_text()
    path = re.search(r"--checkpoint (\S+)", doc).group(1)
    out = subprocess.run([sys.executable, "examples/analyze_couplings.py", "--checkpoint", path, "--plot",
                          str(tmp_path / "c.png")], cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    import jax

    from isingattn.models.saved import load_transformer

    with jax.enable_x64(False):  # the committed checkpoints are float32, as users train them
        J = np.asarray(load_transformer(str(ROOT / path))[0].blocks[0].attn.couplings())[0].astype(np.float64)
    prof = [float(v) for v in re.findall(r"\d+:([+-]\d\.\d+)", out.stdout.splitlines()[0])]
    np.testing.assert_allclose(prof, [np.diag(J, d).mean() for d in range(1, J.shape[0])], atol=6e-4)
    assert (tmp_path / "c.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_expected_errors_are_one_line_and_exit_2(tmp_path):
    """A missing checkpoint, an unknown engine, a missing BQM file, and Tiny Shakespeare offline without a
    corpus (an unreachable proxy stands in for no network; the cache is empty): one line, exit status 2."""
    missing = str(tmp_path / "no-such.npz")
    assert "no checkpoint" in _fails("analyze_couplings.py", "--checkpoint", missing, cwd=tmp_path)
    assert "no checkpoint" in _fails("export_bqm.py", "--checkpoint", missing, cwd=tmp_path)
    assert "unknown engine 'bogus'" in _fails("compare_engines.py", "--engines", "exact,bogus", cwd=tmp_path)
    assert "No such file" in _fails("qpu_attention_query.py", "--mock", "--bqm", str(tmp_path / "q.bqm"), cwd=tmp_path)
    offline = {"ISINGATTN_DATA": None, "XDG_CACHE_HOME": str(tmp_path / "empty-cache"), "NO_PROXY": "", "no_proxy": "",
               "https_proxy": "http://127.0.0.1:9", "HTTPS_PROXY": "http://127.0.0.1:9"}
    err = _fails("train_shakespeare.py", "--steps", "2", cwd=tmp_path, env=offline)
    assert "could not download Tiny Shakespeare" in err and "ISINGATTN_DATA=PATH" in err
    assert "does not exist" in _fails("train_shakespeare.py", "--data", str(tmp_path / "input.txt"), cwd=tmp_path)
    assert "--sizes 2,x" in _fails("onsager.py", "--sizes", "2,x", cwd=tmp_path)
    assert "--test-size 0" in _fails("fit_digits.py", "--test-size", "0", cwd=tmp_path)
    assert _written(tmp_path) == []
