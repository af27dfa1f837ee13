"""isingattn: Ising models as energy-based models, with pluggable inference engines and
Boltzmann attention.

The package face is small: the model, its marginals, the attention layer, the errors, and
``inference`` (``inference.get(name)``; each engine's module loads on first use). Everything
else is imported from its module: ``isingattn.compare``, ``isingattn.thermo``,
``isingattn.onsager``, ``isingattn.graphs``, the engine families under ``isingattn.inference``
and the Transformer under ``isingattn.models``.

``isingattn.IsingDistribution`` (a ``numpyro.distributions.Distribution``, defined in
:mod:`isingattn.distribution`) is the one name on the face that is resolved on first use, by
the module ``__getattr__`` below (PEP 562): the class subclasses numpyro's ``Distribution``, so
defining it imports numpyro, and ``import isingattn`` must not load numpyro (DESIGN.md §4;
``tests/core/test_layering.py`` checks both). No other name is resolved that way.
"""

from isingattn import inference
from isingattn.attention import boltzmann_attention
from isingattn.errors import IsingInputError, IsingTypeError, TooManySpinsError
from isingattn.marginals import Marginals
from isingattn.model import IsingModel

__all__ = ["IsingModel", "Marginals", "boltzmann_attention", "inference", "IsingInputError", "IsingTypeError",
           "TooManySpinsError", "IsingDistribution"]


def _version() -> str:
    """The installed distribution's version (pyproject.toml's ``version``); without package
    metadata (the source tree on ``sys.path``, not installed) ``0+unknown``."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("isingattn")
    except PackageNotFoundError:
        return "0+unknown"


__version__ = _version()


def __getattr__(name):
    """``isingattn.IsingDistribution`` on first use (it imports numpyro; see the module docstring)."""
    if name == "IsingDistribution":
        from isingattn.distribution import IsingDistribution

        return IsingDistribution
    raise AttributeError(f"module 'isingattn' has no attribute {name!r}")
