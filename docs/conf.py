"""Sphinx configuration of the isingattn documentation site (issue 31).

Build it strictly (warnings are errors, every cross-reference must resolve) with::

    pip install -e ".[docs]" && sphinx-build -W -n docs docs/_build/html

The tutorials (``tutorials/*.md``, MyST-NB text notebooks) are executed at build time and
cached (``nb_execution_mode = "cache"``), so a rebuild only re-executes an edited tutorial.
"""

import os
from pathlib import Path

import isingattn

ROOT = Path(__file__).resolve().parent.parent

project = "isingattn"
author = "the isingattn authors"
copyright = "2026, the isingattn authors (Apache License 2.0)"
release = version = isingattn.__version__

extensions = [
    "myst_nb",
    "sphinx.ext.autodoc",
    "sphinx.ext.autosummary",
    "sphinx.ext.napoleon",
    "sphinx_copybutton",
]

exclude_patterns = ["_build", "**/.jupyter_cache", "jupyter_execute", "README.md"]
source_suffix = {".rst": "restructuredtext", ".md": "myst-nb"}
root_doc = "index"

# ---- strictness: every reference must resolve ----------------------------------------------
nitpicky = True
# Offline builds cannot reach other projects' object inventories (no intersphinx), so names of
# third-party libraries are not linked: they are ignored here, and only they.
_THIRD_PARTY = ("jax", "jaxlib", "numpy", "np", "jnp", "dimod", "numpyro", "networkx", "nx", "arviz", "az", "equinox",
                "eqx", "optax", "matplotlib", "scipy", "dwave", "dwave_networkx", "pandas", "xarray", "typing_extensions")
nitpick_ignore_regex = [(r"py:.*", rf"{p}(\..*)?") for p in _THIRD_PARTY]
# builtins and typing names that autodoc renders from annotations
nitpick_ignore_regex += [(r"py:.*", r"(typing\.)?(Optional|Union|Sequence|Mapping|Callable|Any|Iterable|Iterator|"
                                    r"ClassVar|NamedTuple|Literal|Tuple|Dict|List)"),
                         (r"py:.*", r"(builtins\.)?(int|float|bool|str|dict|list|tuple|object|None|bytes|type|"
                                    r"callable|complex)"),
                         (r"py:class", r"Array")]  # jax.Array, as autodoc names a NamedTuple field's type

# ---- API reference ---------------------------------------------------------------------------
autodoc_default_options = {"member-order": "bysource"}
autodoc_typehints = "none"  # types are described in the docstrings; signatures keep names and defaults
autodoc_member_order = "bysource"
autosummary_generate = False
add_module_names = False
napoleon_google_docstring = True
napoleon_numpy_docstring = True
# the engines' docstrings list their settings under "Config (static):", rendered as parameters
# (napoleon's section headers cannot hold parentheses: _static_config renames the header first)
napoleon_custom_sections = [("Static configuration", "params_style")]

# ---- MyST and the executed tutorials ---------------------------------------------------------
myst_enable_extensions = ["colon_fence", "dollarmath", "deflist"]
myst_heading_anchors = 3
nb_execution_mode = os.environ.get("ISINGATTN_DOCS_EXECUTE", "cache")
nb_execution_timeout = 300
nb_execution_raise_on_error = True  # a failing cell (an assert of a check included) fails the build
nb_execution_show_tb = True
nb_merge_streams = True
nb_execution_excludepatterns = []

# ---- HTML ------------------------------------------------------------------------------------
html_theme = "furo"
html_title = f"isingattn {release}"
html_static_path = ["_static"]
html_theme_options = {"navigation_with_keys": True}
copybutton_prompt_text = r"\$ "
copybutton_prompt_is_regexp = True
suppress_warnings = []


# ---- references to undocumented internals ----------------------------------------------------
# Docstrings cite private helpers of the library (``:func:`gibbs_sweep```, a kernel's state
# class, ...) that the reference does not document. Such a reference resolves, as unlinked code,
# when it names an object that exists in isingattn (looked up as written, then relative to the
# module and class of the docstring); a reference to anything that does not exist stays a
# warning, which -W makes an error.
def _lookup(name: str) -> bool:
    import importlib

    parts = name.split(".")
    for i in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:i]))
        except ImportError:
            continue
        try:
            for attr in parts[i:]:
                obj = getattr(obj, attr)
        except AttributeError:
            return False
        return True
    return False


def _undocumented_internal(app, env, node, contnode):
    if node.get("refdomain") != "py":
        return None
    target, mod, cls = node["reftarget"], node.get("py:module"), node.get("py:class")
    candidates = [target]
    if mod:
        candidates += ([f"{mod}.{cls}.{target}"] if cls else []) + [f"{mod}.{target}"]
    if any(c.startswith("isingattn.") and _lookup(c) for c in candidates):
        return contnode
    if "." not in target:  # an unqualified name, from a docstring whose module is not the documented one
        import sys

        if any(getattr(m, target, None) is not None for k, m in list(sys.modules.items())
               if (k == "isingattn" or k.startswith("isingattn.")) and m is not None):
            return contnode
    return None


def _static_config(app, what, name, obj, options, lines):
    for i, line in enumerate(lines):
        if line.strip() == "Config (static):":
            lines[i] = line.replace("Config (static):", "Static configuration:")


def setup(app):
    app.connect("missing-reference", _undocumented_internal, priority=900)
    app.connect("autodoc-process-docstring", _static_config, priority=100)  # before napoleon (500)
