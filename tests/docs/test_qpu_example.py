"""examples/qpu_attention_query.py runs through MockDWaveSampler (no QPU) on an exported
BQM and its calibrated marginals match Exact's; the uncalibrated ones do not."""

import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("dwave.system")
pytest.importorskip("dwave.samplers")
from isingattn import IsingModel
from isingattn.instances import random_model

ROOT = Path(__file__).parents[2]


def test_qpu_example_with_mock(tmp_path):
    h, J = random_model(np.random.default_rng(4), 6, h_scale=0.5, J_scale=0.4)
    path = tmp_path / "q.bqm"
    with IsingModel(h, J).to_bqm().to_file() as src:
        path.write_bytes(src.read())  # what isingattn export-bqm writes
    out = subprocess.run([sys.executable, str(ROOT / "examples/qpu_attention_query.py"), "--mock", "--bqm", str(path),
                          "--beta", "1.0", "--reads", "1500"], cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    raw, cal = out.stdout.split("\ncalibrated:")
    assert "calibrated: True" in cal
    rows = lambda s: [tuple(map(float, r)) for r in re.findall(r"^\s+\d+\s+(\S+)\s+(\S+)\s+\((\S+)\)", s, re.M)]
    assert len(rows(cal)) == 6 and len(rows(raw)) == 6
    assert all(abs(a - b) <= 4 * s + 1e-3 for a, b, s in rows(cal))  # independent reads: SE = sd/√S
    assert max(abs(a - b) / s for a, b, s in rows(raw)) > 10  # the hidden β = 2.5 is far from 1
    assert list(tmp_path.iterdir()) == [path]  # writes nothing
