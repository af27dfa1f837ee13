"""The persistent compilation cache serves Python users: ``ISINGATTN_JAX_CACHE`` or
``isingattn.enable_compilation_cache()`` turn it on, and the library's programs carry no host
callback (which JAX's persistent cache refuses to store)."""

import os
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import isingattn
from isingattn import IsingModel
from isingattn.engine import jit_call
from isingattn.errors import IsingInputError, IsingTypeError
from isingattn.inference import Banded, Exact

PROBE = ("import numpy as np, isingattn\n"
         "from isingattn.inference import Exact\n"
         "m = isingattn.IsingModel(np.array([0.5, -0.2, 0.1]), np.array([[0, .3, 0], [.3, 0, -.5], [0, -.5, 0]]))\n"
         "print(float(Exact().marginals(m).log_z))\n")


def _run(env_value, tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "JAX_COMPILATION_CACHE_DIR"}
    env["ISINGATTN_JAX_CACHE"] = env_value
    env["JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS"] = "0"
    return subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, env=env, cwd=tmp_path,
                          check=True).stdout


def test_the_environment_variable_turns_the_cache_on_at_import(tmp_path):
    folder = tmp_path / "cache"
    first = _run(str(folder), tmp_path)
    entries = sorted(os.listdir(folder))
    assert entries, "nothing was written to the cache"
    assert _run(str(folder), tmp_path) == first  # the second process reads it back, same answer


def test_enable_compilation_cache_validates_its_folder(tmp_path, monkeypatch):
    with pytest.raises(IsingTypeError, match="folder path"):
        isingattn.enable_compilation_cache(3)
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(IsingInputError, match="cannot create"):
        isingattn.enable_compilation_cache(blocker / "sub")
    with pytest.raises(IsingInputError, match="min_compile_time_secs"):
        isingattn.enable_compilation_cache(tmp_path, min_compile_time_secs=-1)
    from isingattn.compile_cache import cache_dir_from_env

    for value, expect in (("", "dflt"), ("off", None), ("0", None), (str(tmp_path), str(tmp_path))):
        monkeypatch.setenv("ISINGATTN_JAX_CACHE", value)
        assert cache_dir_from_env("dflt") == expect


def _program_text(engine, model):
    engine = engine.prepared(model)
    return jax.jit(lambda m: jit_call(engine, "_marginals", m, None).mean).lower(model).as_text()


def test_engine_and_model_programs_carry_no_host_callback():
    """A model built from traced values, an energy of traced spins, Banded on a traced dense J
    and Exact: every check is in the program as values (NaN on failure), none as a callback."""
    rng = np.random.default_rng(0)
    n = 6
    J = np.triu(rng.normal(size=(n, n)) * (np.abs(np.subtract.outer(range(n), range(n))) <= 2), 1)
    model = IsingModel(rng.normal(size=(2, n)), J + J.T, beta=0.7)
    for engine in (Exact(), Banded(bandwidth=2)):
        assert "callback" not in _program_text(engine, model), type(engine).__name__
    built = jax.jit(lambda h, J, b, s: IsingModel(h, J, b).energy(s)).lower(
        jnp.zeros(n), jnp.asarray(J + J.T), 1.0, jnp.ones(n)).as_text()
    assert "callback" not in built
