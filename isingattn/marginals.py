"""``Marginals``: the result every inference engine returns."""

from __future__ import annotations

from typing import Any, Optional

import equinox as eqx
import jax


class Marginals(eqx.Module):
    """Spin statistics of a (batched) Ising model.

    Attributes:
        mean: ``⟨s_j⟩``, ``[..., n]``; 0 for inactive spins.
        corr: ``⟨s_j s_k⟩``, ``[..., n, n]``, when requested; rows and columns of
            inactive spins are 0.
        log_z: ``log Z`` over the active spins, ``[...]`` (exact engines only).
        samples: spin samples, engine-specific leading axes, when the engine samples.
        info: diagnostics (a dict of arrays).
    """

    mean: jax.Array
    corr: Optional[jax.Array] = None
    log_z: Optional[jax.Array] = None
    samples: Optional[jax.Array] = None
    info: dict[str, Any] = eqx.field(default_factory=dict)
