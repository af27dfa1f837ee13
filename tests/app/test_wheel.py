"""The wheel stands alone (issue 31): built from a copy of the sources, installed into a fresh venv
outside the repository, it runs the README's example against enumeration, compiles the native Banded
kernel from the source it carries (a fresh cache) and answers ``isingattn --version``; the study
(``study/``) is not in it, and ``isingattn reproduce`` says so in one line with exit status 2.

The fresh venv borrows the dependencies (jax, dimod, ...) from the running interpreter's
site-packages through a ``.pth`` line, so that the test needs no network; that line does not run the
running environment's own ``.pth`` files, so an editable install of the repository stays invisible,
and the test checks that ``isingattn`` is imported from the wheel. The build runs without isolation
(setuptools >= 77 and wheel come with the ``test`` extra). ``python -m build``, ``twine check`` and an
install that takes the dependencies from the package index need the network; they are run by hand."""

import os
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SOURCES = ("pyproject.toml", "README.md", "LICENSE", "MANIFEST.in", "CITATION.cff", "CHANGELOG.md", "DESIGN.md",
           "isingattn", "inference", "models")

CHECK = r'''
import itertools, pathlib, sys
import numpy as np
import jax.numpy as jnp
import isingattn
from isingattn import IsingModel, boltzmann_attention
from isingattn.inference.banded import Banded, native
from isingattn.inference.exact import Exact

where = pathlib.Path(isingattn.__file__).resolve().parent
assert where.is_relative_to(pathlib.Path(sys.prefix).resolve()), where  # the wheel, not the repository
assert (where / "py.typed").is_file() and (where / "inference" / "banded" / "native.cc").is_file()

def brute(h, J):
    S = np.array(list(itertools.product([-1, 1], repeat=len(h))), float)
    w = np.exp(S @ h + 0.5 * np.einsum("si,ij,sj->s", S, J, S))
    return (w[:, None] * S).sum(0) / w.sum(), np.log(w.sum())

h = jnp.array([[0.5, -0.2, 0.1], [1.0, 0.0, -1.0]])
J = jnp.array([[0, .3, 0], [.3, 0, -.5], [0, -.5, 0]])
m = Exact(corr=True).marginals(IsingModel(h, J, beta=1.0))
for i in range(2):
    mean, lz = brute(np.asarray(h[i], float), np.asarray(J, float))
    assert np.allclose(m.mean[i], mean, atol=1e-5) and abs(float(m.log_z[i]) - lz) < 1e-4
q = k = v = jnp.ones((4, 1, 8, 16))
out, _ = boltzmann_attention(q, k, v, jnp.zeros((1, 8, 8)), variant="hJ", engine=Exact(), causal=True)
assert out.shape == (4, 1, 8, 16) and bool(jnp.all(jnp.isfinite(out)))

rng = np.random.default_rng(0)
n, w = 10, 3
A = rng.normal(size=(n, n)) * 0.5
d = np.abs(np.subtract.outer(np.arange(n), np.arange(n)))
Jb, hb = np.where((d >= 1) & (d <= w), (A + A.T) / 2, 0.0), rng.normal(size=n) * 0.5
calls, real = [], native.native
native.native = lambda *a: calls.append(1) or real(*a)
mb = Banded(bandwidth=w).marginals(IsingModel(jnp.asarray(hb, jnp.float32), jnp.asarray(Jb, jnp.float32)))
mean, lz = brute(hb, Jb)
assert calls and np.allclose(mb.mean, mean, atol=1e-4) and abs(float(mb.log_z) - lz) < 1e-3
print("wheel ok", isingattn.__version__)
'''


@pytest.mark.slow
@pytest.mark.skipif(sys.platform == "win32" or shutil.which(os.environ.get("CXX", "c++")) is None,
                    reason="needs a POSIX venv layout and a C++ compiler for the native kernel")
def test_the_wheel_runs_the_readme_example_and_the_native_kernel_outside_the_repository(tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    for name in SOURCES:  # a copy: building writes build/ and *.egg-info next to the sources
        if (ROOT / name).is_dir():
            shutil.copytree(ROOT / name, src / name, ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
        else:
            shutil.copy2(ROOT / name, src / name)
    dist = tmp_path / "dist"
    built = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
                            "-w", str(dist), str(src)], capture_output=True, text=True, timeout=600)
    assert built.returncode == 0, built.stderr[-3000:]
    (wheel,) = dist.glob("isingattn-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    assert {"isingattn/py.typed", "isingattn/inference/banded/native.cc",
            "isingattn/cli.py"} <= names
    assert not any("isingattn_study" in n or n.startswith("study/") for n in names)

    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=300)
    py = venv / "bin" / "python"
    site = Path(subprocess.run([str(py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                               capture_output=True, text=True, check=True).stdout.strip())
    (site / "borrowed-dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    inst = subprocess.run([sys.executable, "-m", "pip", "--python", str(py), "install", "--no-deps", "--no-index", "-q",
                           str(wheel)], capture_output=True, text=True, timeout=600)
    assert inst.returncode == 0, inst.stderr[-3000:]

    run = tmp_path / "elsewhere"
    run.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "ISINGATTN_NATIVE", "VIRTUAL_ENV")}
    env["ISINGATTN_CACHE"] = str(tmp_path / "cache")  # empty: the kernel is compiled from the wheel's source
    out = subprocess.run([str(py), "-c", CHECK], cwd=run, capture_output=True, text=True, env=env, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.strip().startswith("wheel ok")
    assert "compiling the native Banded kernel" in out.stderr and list((tmp_path / "cache" / "native").glob("*.so"))
    version = subprocess.run([str(venv / "bin" / "isingattn"), "--version"], cwd=run, capture_output=True, text=True,
                             env=env, timeout=300)
    assert version.returncode == 0 and version.stdout.startswith("isingattn ")
    study = subprocess.run([str(venv / "bin" / "isingattn"), "reproduce", "--quick"], cwd=run, capture_output=True,
                           text=True, env=env, timeout=300)
    assert study.returncode == 2 and len(study.stderr.strip().splitlines()) == 1, study.stderr[-2000:]
    assert "source checkout" in study.stderr
