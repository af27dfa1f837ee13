"""isingattn: Ising models as energy-based models, with pluggable inference engines and
Boltzmann attention.

The package face is small: the model, its marginals, the attention layer, the errors, and
``inference`` (``inference.get(name)``; each engine's module loads on first use). Everything
else is imported from its module: ``isingattn.compare``, ``isingattn.thermo``,
``isingattn.onsager``, ``isingattn.graphs``, the engine families under ``isingattn.inference``
and the Transformer under ``isingattn.models``.
"""

from isingattn import inference
from isingattn.attention import boltzmann_attention
from isingattn.errors import IsingInputError, IsingTypeError, TooManySpinsError
from isingattn.marginals import Marginals
from isingattn.model import IsingModel

__all__ = ["IsingModel", "Marginals", "boltzmann_attention", "inference", "IsingInputError", "IsingTypeError",
           "TooManySpinsError"]
__version__ = "0.1.0"
