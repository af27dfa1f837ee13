"""isingattn: Boltzmann attention with learnable Ising couplings and pluggable inference."""

from isingattn.errors import IsingInputError, IsingTypeError, TooManySpinsError
from isingattn.marginals import Marginals
from isingattn.model import IsingModel
from isingattn.attention import boltzmann_attention


def __getattr__(name):
    # isingattn.inference on first access: the package does not import its engines (no
    # import cycle through isingattn.inference -> isingattn.engine -> isingattn).
    if name == "inference":
        import importlib

        return importlib.import_module("isingattn.inference")
    raise AttributeError(f"module 'isingattn' has no attribute {name!r}")


__all__ = ["IsingModel", "Marginals", "boltzmann_attention", "inference", "IsingInputError", "IsingTypeError", "TooManySpinsError"]
__version__ = "0.1.0"
