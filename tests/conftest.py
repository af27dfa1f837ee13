"""Test-wide configuration.

x64 is enabled for the whole test session so that float64 comparisons against the
brute-force reference are meaningful. Tests of float32 behaviour must therefore
build float32 arrays explicitly (``np.float32`` / ``jnp.float32``); plain Python
floats and numpy defaults are float64 here.
"""

import os

# Tests are dominated by XLA compile time, not run time: skip LLVM's backend optimisation
# passes and compile with XLA:CPU's older elemental emitters (same semantics; measured on the quick
# loop, 2026-12-04: 514 -> 351 s of CPU). A long-running program then runs several times slower:
# such tests are marked run_bound (below). Set XLA_FLAGS yourself to override.
from _xla import FAST_COMPILE_FLAGS, RUN_BOUND_OPTIONS  # noqa: E402

os.environ.setdefault("XLA_FLAGS", FAST_COMPILE_FLAGS)

# One persistent compilation cache for the run: both xdist workers and every subprocess a test
# starts (CLI runs, kill-and-resume children) inherit it, so a program compiled once is loaded,
# not compiled, by the others. It starts empty (made here, removed at the end): nothing carries
# over between runs. Set JAX_COMPILATION_CACHE_DIR yourself to keep one.
_OWN_CACHE = "JAX_COMPILATION_CACHE_DIR" not in os.environ
if _OWN_CACHE:
    import tempfile

    os.environ["JAX_COMPILATION_CACHE_DIR"] = tempfile.mkdtemp(prefix="isingattn-tests-xla-")
    os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "0")
    os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES", "-1")

import jax  # noqa: E402

jax.config.update("jax_enable_x64", True)

try:  # keep hypothesis runs short and deterministic on slow CI machines
    from hypothesis import HealthCheck, settings

    settings.register_profile(
        "isingattn",
        deadline=None,
        derandomize=True,
        suppress_health_check=[HealthCheck.too_slow],
    )
    settings.load_profile("isingattn")
except ImportError:  # hypothesis is an optional test dependency
    pass


import gc  # noqa: E402
import pathlib  # noqa: E402
import shutil  # noqa: E402

import pytest  # noqa: E402


def pytest_unconfigure(config):
    if _OWN_CACHE and not hasattr(config, "workerinput"):  # the process that made it (not an xdist worker)
        shutil.rmtree(os.environ["JAX_COMPILATION_CACHE_DIR"], ignore_errors=True)


# The quick loop (-m "not slow") leaves out the cases listed in tests/slow_cases.txt, with the
# seconds each took: every case over a few seconds apart from the fastest case of its test, and
# whole tests whose fastest case is long. The full suite runs them all.
_SLOW_CASES = pathlib.Path(__file__).with_name("slow_cases.txt")


# Longest files first: with `--dist loadfile` and `--no-loadscope-reorder` (pyproject's addopts) xdist
# hands the files to its workers in collection order, so a long file started last (xdist's own order
# is by test count, which put the one-test documentation build near the end) no longer leaves the
# other worker idle. A file's expected time: its cases' seconds in slow_cases.txt, 1 s for the others,
# plus a long setup (a module fixture) that the list does not carry.
_SETUP_SECONDS = {"tests/docs/test_site.py": 115.0, "tests/core/test_sharding.py": 36.0}


def _slow_seconds() -> dict:
    out = {}
    for line in _SLOW_CASES.read_text().splitlines():
        nodeid, _, note = line.partition("#")
        if nodeid.strip():
            out[nodeid.strip()] = float(note.split()[0]) if note.split() else 1.0
    return out


@pytest.hookimpl(tryfirst=True)  # before -k/-m deselect anything
def pytest_collection_modifyitems(config, items):
    seconds = _slow_seconds()
    listed = set(seconds)
    for item in items:
        if item.nodeid in listed:
            item.add_marker(pytest.mark.slow)
    cost = dict(_SETUP_SECONDS)
    for item in items:
        path = item.nodeid.split("::")[0]
        cost[path] = cost.get(path, 0.0) + seconds.get(item.nodeid, 1.0)
    rank = {path: i for i, path in enumerate(sorted(cost, key=lambda p: -cost[p]))}
    items.sort(key=lambda item: rank[item.nodeid.split("::")[0]])  # stable: a file keeps its own order
    # A whole-suite collection must find every listed case: a renamed test or an edited README
    # block would otherwise drop out of the list silently and run in the quick loop.
    whole = [str(pathlib.Path(a).resolve()) for a in config.args] in ([], [str(pathlib.Path(config.rootpath, "tests"))])
    stale = sorted(listed - {item.nodeid for item in items})
    if whole and stale:
        raise pytest.UsageError(f"tests/slow_cases.txt names {len(stale)} case(s) that no longer exist: "
                                + ", ".join(stale[:5]) + (" …" if len(stale) > 5 else ""))


@pytest.fixture(autouse=True, scope="module")
def _free_compiled_programs():
    """Drop every compiled program after each test module. Each loaded XLA executable
    holds its own memory mappings; the whole suite in one process otherwise passes the
    kernel's limit of 65,530 (seen: ~45,000 at 63% of the suite, then a segfault or
    abort inside XLA's compiler at ~88%)."""
    yield
    jax.clear_caches()
    gc.collect()


# A test marked ``run_bound`` (its time is running, not compiling) has its programs compiled at
# XLA's backend level 1 (SwendsenWang on a 64x64 torus, 1,000 draws x 4 chains: 12.1 s at level 0,
# 3.1 s at level 1, the same energies): the compile options gain the override that
# ``jax.jit(..., compiler_options=...)`` would pass, so the persistent cache keeps the two levels
# apart. A program the process already compiled is reused as it is. The semantics are the same,
# the rounding not: a marginal statistical case can pass at one level and fail at the other
# (it did: the 6×40 strip in tests/inference/mcmc/test_pt.py, now given more draws).
# Subprocesses get level 1 through XLA_FLAGS (_xla.run_bound_xla_flags).


@pytest.fixture(autouse=True)
def _run_bound_compile(request, monkeypatch):
    if request.node.get_closest_marker("run_bound") is None:
        return
    from jax._src import compiler  # private: should it move, the test still runs, only slower

    original = getattr(compiler, "get_compile_options", None)
    if original is None:
        return

    def get_compile_options(*args, env_options_overrides=None, **kwargs):
        return original(*args, env_options_overrides={**RUN_BOUND_OPTIONS, **(env_options_overrides or {})}, **kwargs)

    monkeypatch.setattr(compiler, "get_compile_options", get_compile_options)


@pytest.fixture
def corpus() -> str:
    """Path of the Tiny Shakespeare corpus for tests that need it: ``$ISINGATTN_DATA``, else
    the user's cache; skipped (with how to enable) when neither is there. Tests never download."""
    from isingattn.models import shakespeare as ts

    path = os.environ.get(ts.ENV) or ts._cache_path()
    if not os.path.isfile(path):
        pytest.skip(f"needs the Tiny Shakespeare corpus: set {ts.ENV}=/path/to/input.txt (SHA-256 "
                    f"{ts.SHA256[:12]}…), or run `isingattn reproduce --data PATH` once to cache it")
    return path


@pytest.fixture(params=["native", pytest.param("xla", marks=pytest.mark.slow)])
def banded_kernel(request, monkeypatch):
    """Run a test of Banded's blocked path once through each implementation: the native CPU kernel
    (skipped where it cannot be built) and the XLA graph of banded_vjp (in the full suite only:
    the quick loop, ``-m "not slow"``, runs each property through the kernel CPUs use). Compiled programs are dropped
    around it, so that no jitted function keeps the other one's trace."""
    from isingattn.inference.banded import native as banded_native

    if request.param == "native" and banded_native._library() is None:
        pytest.skip("no C++ compiler here: the native Banded kernel is unavailable")
    if request.param == "xla":
        monkeypatch.setattr(banded_native, "applies", lambda *a, **k: False)
    jax.clear_caches()
    yield request.param
    jax.clear_caches()
