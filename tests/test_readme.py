"""The README's API example runs, and its claims hold against the brute force."""

import re
from pathlib import Path

import numpy as np

from isingattn.testing import brute_force


def test_readme_api_example():
    text = (Path(__file__).parents[1] / "README.md").read_text()
    code = re.findall(r"```python\n(.*?)```", text, re.S)[0]
    ns: dict = {}
    exec(compile(code, "README.md", "exec"), ns)
    h, J, m = np.asarray(ns["h"]), np.asarray(ns["J"]), ns["m"]
    for q in range(2):
        ref = brute_force(h[q], J)
        np.testing.assert_allclose(m.mean[q], ref["mean"], atol=1e-6)
        np.testing.assert_allclose(m.corr[q], ref["corr"], atol=1e-6)
    np.testing.assert_allclose(ns["weights"].sum(-1), 1.0, atol=1e-6)
