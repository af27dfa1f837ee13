"""isingattn.models: a one-layer Transformer with Boltzmann attention, tasks and training."""

from isingattn.models.transformer import Config, Transformer
from isingattn.models import brackets

__all__ = ["Config", "Transformer", "brackets"]
