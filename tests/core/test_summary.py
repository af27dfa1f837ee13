"""``Marginals.summary()``: what an engine says of its result, in a few lines."""

import numpy as np

from isingattn import IsingModel, Marginals
from isingattn.inference import Exact
from isingattn.testing import brute_force


def test_summary_states_the_flags_ranges_and_log_z():
    info = {"converged": np.array([True, False]), "r_hat": np.array([[1.0, 1.2], [np.nan, 1.01]]),
            "ess": np.array([[400.0, 35.0], [12.0, 900.0]]), "swap_rate": np.array([0.31, 0.02]),
            "log_z_se": np.array([0.5, 0.25]), "wall_s": 1.5}
    text = Marginals(mean=np.zeros((2, 2)), log_z=np.array([10.0, 20.0]), info=info).summary()
    assert "2 model(s) of 2 spins" in text
    assert "converged        1 of 2   <- NOT CONVERGED" in text
    assert "split R-hat      1 – 1.2 (1 undefined)" in text and "ESS              12 – 900" in text
    assert "swap rate        0.02 – 0.31" in text and "10 ± 0.5, 20 ± 0.25" in text and "1.5 s" in text


def test_summary_of_an_exact_result_gives_its_log_z():
    rng = np.random.default_rng(0)
    J = np.triu(rng.normal(size=(5, 5)), 1)
    h = rng.normal(size=5)
    m = Exact().marginals(IsingModel(h, J + J.T))
    ref = brute_force(h, J + J.T)["log_z"]
    assert f"log Z (exact)    {ref:.6g}" in m.summary() and "converged" not in m.summary()
