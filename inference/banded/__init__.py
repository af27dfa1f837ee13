"""Exact inference for couplings of bounded bandwidth: a transfer-matrix forward-backward
(the blocked path, its VJP, the native CPU kernel)."""

from isingattn.inference.banded.engine import Banded, band_violation

__all__ = ["Banded", "band_violation"]
