"""The one data container every task hands to training."""

from typing import NamedTuple

import numpy as np


class Split(NamedTuple):
    """Inputs and per-position targets; ``targets == -1`` where nothing is predicted."""

    tokens: np.ndarray  # (N, T) int32
    targets: np.ndarray  # (N, T) int32
