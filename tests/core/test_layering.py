"""The layers and what each entry point loads (DESIGN.md §4).

* ``import isingattn`` and building an engine by name load no sampler or analysis library:
  numpyro, dimod, arviz and networkx load only with the engine or function that needs them.
  ``isingattn.IsingDistribution`` (a numpyro distribution) is resolved on first use and works.
* No import cycles among the package's modules, counting imports inside functions.
* The library (``isingattn``, ``isingattn.inference``, ``isingattn.models``) never imports the
  application (``isingattn.models.app``), and production code never imports ``isingattn.testing``.
* Nothing in the package imports the command line (``isingattn.cli``), the one module on top of it all.
"""

import ast
import pathlib
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
HEAVY = ("numpyro", "dimod", "arviz", "networkx")


def _loaded(code: str) -> list[str]:
    """The top-level packages of HEAVY (and isingattn's own heavy layers) that ``code`` loads."""
    probe = (f"{code}\nimport sys\n"
             "top = {m.split('.')[0] for m in sys.modules}\n"
             f"print(sorted(t for t in top if t in {HEAVY!r}))\n"
             "print(sorted(m for m in sys.modules if m.startswith(('isingattn.models', 'isingattn.testing'))))\n")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True, cwd=ROOT)
    heavy, layers = out.stdout.strip().splitlines()
    return eval(heavy), eval(layers)  # noqa: S307  (our own probe's printed lists)


@pytest.mark.parametrize("code, expected", [
    ("import isingattn", []),
    ("from isingattn import inference; inference.get('exact')", []),
    ("from isingattn import inference; inference.get('banded'); inference.get('meanfield')", []),
    ("from isingattn import inference; inference.get('gibbs'); inference.get('sqa')", []),
    ("from isingattn import inference; inference.get('dqa')", []),
    ("from isingattn import inference; inference.get('dimod', sampler=None)", ["dimod", "networkx"]),  # dimod loads networkx
    ("from isingattn.inference.mcmc.numpyro_kernel import IsingGibbsKernel", ["numpyro"]),
    ("import isingattn; isingattn.IsingModel; isingattn.__all__", []),  # the face's lazy name is not touched
    ("import isingattn; isingattn.IsingDistribution", ["numpyro"]),  # resolved on first use (PEP 562)
    ("import isingattn.inference; isingattn.inference.__all__", []),  # names listed, no family imported
    ("from isingattn.inference import Exact, Gibbs, ParallelTempering, SwendsenWang, AIS, MeanField, Banded, SQA", []),
    ("from isingattn.inference import DimodEngine", ["dimod", "networkx"]),
    ("import isingattn; isingattn.learn.fit; isingattn.thermo.scan; isingattn.onsager.torus_log_z", []),
])
def test_what_each_entry_point_loads(code, expected):
    heavy, layers = _loaded(code)
    assert [h for h in heavy if h in HEAVY] == expected, (code, heavy)
    assert layers == [], (code, layers)


def test_available_lists_engines_without_importing_them():
    code = ("import sys\nfrom isingattn import inference\nnames = inference.available()\n"
            "print(sorted(m for m in sys.modules if m.startswith('isingattn.inference.')))\nprint(names)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT)
    mods, names = out.stdout.strip().splitlines()
    assert mods == "[]"
    assert {"exact", "banded", "meanfield", "gibbs", "sqa", "dqa", "dimod"} <= set(eval(names))  # noqa: S307


def _modules() -> dict[str, pathlib.Path]:
    out = {}
    for top, pkg in (("isingattn", "isingattn"), ("inference", "isingattn.inference"), ("models", "isingattn.models")):
        for path in (ROOT / top).rglob("*.py"):
            parts = list(path.relative_to(ROOT / top).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            out[".".join([pkg] + parts)] = path
    return out


def _imports(mods: dict) -> dict[str, set]:
    """module -> the package's modules it imports anywhere in its body (functions included)."""
    graph = {}
    for name, path in mods.items():
        deps = set()
        for node in ast.walk(ast.parse(path.read_text())):
            targets = []
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                targets = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
            for t in targets:
                if t in mods and t != name and not name.startswith(t + "."):  # a parent package is not a cycle
                    deps.add(t)
        graph[name] = deps
    return graph


def test_no_import_cycles_even_inside_functions():
    graph = _imports(_modules())
    state, cycles = {}, []

    def visit(m, stack):
        state[m] = 1
        stack.append(m)
        for d in sorted(graph[m]):
            if state.get(d) == 1:
                cycles.append(stack[stack.index(d):] + [d])
            elif d not in state:
                visit(d, stack)
        stack.pop()
        state[m] = 2

    for m in sorted(graph):
        if m not in state:
            visit(m, [])
    assert cycles == [], "\n".join(" -> ".join(c) for c in cycles)


def test_the_library_never_imports_the_application_or_the_test_helpers():
    graph = _imports(_modules())
    bad = [(m, d) for m, deps in graph.items() for d in deps
           if not m.startswith("isingattn.models.app") and m not in ("isingattn.testing", "isingattn.cli")
           and (d.startswith("isingattn.models.app") or d == "isingattn.testing")]
    assert bad == []


def test_nothing_imports_the_command_line():
    """``isingattn.cli`` (argparse, dispatch, the one-line errors) sits on top: no module of the package
    or the study imports it, anywhere in its body; only the console script and the examples do."""
    mods = _modules()
    assert "isingattn.cli" in mods
    graph = _imports(mods)
    assert sorted(m for m, deps in graph.items() if "isingattn.cli" in deps) == []
    study = [(p.name, n) for p in (ROOT / "study").rglob("*.py") for node in ast.walk(ast.parse(p.read_text()))
             for n in ([a.name for a in node.names] if isinstance(node, ast.Import)
                       else [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
             if n == "isingattn.cli" or (isinstance(node, ast.ImportFrom) and n == "isingattn"
                                         and any(a.name == "cli" for a in node.names))]
    assert study == []


def test_the_library_never_imports_the_study():
    """``study/isingattn_study`` (the paper's study) is outside the package: no module of
    ``isingattn``, ``inference`` or ``models`` imports it. The command line's ``reproduce`` finds
    it by path (``isingattn.cli.study``), and ``import isingattn.cli`` loads none of it."""
    bad = []
    for name, path in _modules().items():
        for node in ast.walk(ast.parse(path.read_text())):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                     else [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            bad += [(name, n) for n in names if n.split(".")[0] == "isingattn_study"]
    assert bad == []
    code = ("import sys, isingattn.cli\n"
            "print(sorted(m for m in sys.modules if m.startswith('isingattn_study')))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT)
    assert out.stdout.strip() == "[]"


def test_ising_distribution_is_resolved_lazily_and_works():
    """``isingattn.IsingDistribution`` is the class of ``isingattn.distribution`` (the module's
    ``__getattr__``), and ``from isingattn import IsingDistribution`` works too; an unknown name
    is still an AttributeError."""
    code = ("import sys, isingattn\n"
            "assert 'numpyro' not in sys.modules and 'isingattn.distribution' not in sys.modules\n"
            "from isingattn import IsingDistribution\n"
            "from isingattn.distribution import IsingDistribution as D\n"
            "import numpyro.distributions as nd\n"
            "assert IsingDistribution is D is isingattn.IsingDistribution and issubclass(D, nd.Distribution)\n"
            "d = IsingDistribution([0.5, -0.2], [[0.0, 0.3], [0.3, 0.0]])\n"
            "import jax.numpy as jnp\n"
            "print(float(jnp.exp(d.log_prob(d.enumerate_support())).sum()))\n"
            "try:\n    isingattn.NoSuchName\nexcept AttributeError:\n    print('AttributeError')\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT)
    total, err = out.stdout.split()
    assert abs(float(total) - 1.0) < 1e-5 and err == "AttributeError"


def test_every_public_name_resolves_where_users_look():
    """Each ``__all__`` of the package face, ``isingattn.inference`` and its families names
    something that exists; every engine class of a family is reachable from
    ``isingattn.inference``; the library's modules are attributes of ``isingattn``."""
    code = ("import importlib, isingattn, isingattn.engine as E\n"
            "from isingattn import inference\n"
            "mods = ['isingattn', 'isingattn.inference'] + ['isingattn.inference.' + f for f in\n"
            "        ('exact', 'banded', 'meanfield', 'mcmc', 'dqa', 'dimod')]\n"
            "for m in mods:\n"
            "    mod = importlib.import_module(m)\n"
            "    for n in mod.__all__:\n"
            "        getattr(mod, n)\n"
            "for name in E._BUILTIN:\n"
            "    cls = E._resolve(E._BUILTIN[name])\n"
            "    if isinstance(cls, type):\n"
            "        assert getattr(inference, cls.__name__) is cls, name\n"
            "for m in ('learn', 'thermo', 'onsager', 'compare', 'graphs'):\n"
            "    assert getattr(isingattn, m) is importlib.import_module('isingattn.' + m)\n"
            "for n in ('settings', 'to_spec', 'from_spec'):\n"
            "    assert getattr(inference, n) is getattr(E, n)\n"
            "print('ok')\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr[-2000:]


def test_no_private_name_crosses_a_module():
    """A name with a leading underscore is its module's own: no module of the package (or the
    study) imports one from another; a helper that two modules share is public in one of them."""
    bad = []
    for top in ("isingattn", "inference", "models", "study"):
        for path in (ROOT / top).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, ast.ImportFrom) and (node.module or "").startswith(("isingattn", "isingattn_study")):
                    bad += [f"{path.relative_to(ROOT)}: {node.module}.{a.name}" for a in node.names
                            if a.name.startswith("_") and not a.name.startswith("__")]
    assert bad == [], "\n".join(bad)
