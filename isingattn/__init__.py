"""isingattn: Ising models as energy-based models, with pluggable inference engines and
Boltzmann attention.

The package face is small: the model, its marginals, the attention layer, the errors, and
``inference`` (every engine class, ``inference.Gibbs`` or ``inference.get("gibbs")``, loads on
first use). The library's other modules are attributes too, imported on first use:
``isingattn.learn``, ``isingattn.thermo``, ``isingattn.onsager``, ``isingattn.compare`` and
``isingattn.graphs``; the Transformer lives under ``isingattn.models``.
:func:`enable_compilation_cache` turns on JAX's persistent compilation cache (import does so
itself only when ``$ISINGATTN_JAX_CACHE`` names a folder).

``isingattn.IsingDistribution`` (a ``numpyro.distributions.Distribution``, defined in
:mod:`isingattn.distribution`) is resolved on first use as well, by the module ``__getattr__``
below (PEP 562): the class subclasses numpyro's ``Distribution``, so defining it imports numpyro,
and ``import isingattn`` must not load numpyro (DESIGN.md §4; ``tests/core/test_layering.py``
checks both).
"""

from isingattn import inference
from isingattn.attention import boltzmann_attention
from isingattn.compile_cache import cache_dir_from_env as _cache_dir_from_env
from isingattn.compile_cache import enable_compilation_cache
from isingattn.errors import IsingInputError, IsingTypeError, TooManySpinsError
from isingattn.marginals import Marginals
from isingattn.model import IsingModel

__all__ = ["IsingModel", "Marginals", "boltzmann_attention", "inference", "IsingInputError", "IsingTypeError",
           "TooManySpinsError", "IsingDistribution", "enable_compilation_cache"]

_asked = _cache_dir_from_env()  # $ISINGATTN_JAX_CACHE names a folder: the user asked for the cache
if _asked is not None:
    enable_compilation_cache(_asked)
del _asked


def _version() -> str:
    """The installed distribution's version (pyproject.toml's ``version``); without package
    metadata (the source tree on ``sys.path``, not installed) ``0+unknown``."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("isingattn")
    except PackageNotFoundError:
        return "0+unknown"


__version__ = _version()


_SUBMODULES = ("learn", "thermo", "onsager", "compare", "graphs")


def __getattr__(name):
    """``isingattn.IsingDistribution`` and the library's modules on first use (see the module
    docstring)."""
    if name == "IsingDistribution":
        from isingattn.distribution import IsingDistribution

        return IsingDistribution
    if name in _SUBMODULES:
        import importlib

        return importlib.import_module(f"isingattn.{name}")
    raise AttributeError(f"module 'isingattn' has no attribute {name!r}")
