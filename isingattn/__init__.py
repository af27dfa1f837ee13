"""isingattn: Boltzmann attention with learnable Ising couplings and pluggable inference."""

from isingattn.errors import IsingInputError, IsingTypeError, TooManySpinsError
from isingattn.marginals import Marginals
from isingattn.model import IsingModel
from isingattn.attention import boltzmann_attention
from isingattn import inference  # noqa: E402  (registers the engines)

__all__ = ["IsingModel", "Marginals", "boltzmann_attention", "inference", "IsingInputError", "IsingTypeError", "TooManySpinsError"]
__version__ = "0.1.0"
