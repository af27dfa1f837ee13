"""A reference computed once per test process and shared by the cases that need it.

For references that do not depend on the case's parameter: Exact for every engine of the
conformance suite, the per-spin sweep of Banded for both implementations of its blocked path
(the ``banded_kernel`` fixture). The result is fetched to the host, so that no compiled program
or device buffer outlives the module's ``jax.clear_caches()``."""

import hashlib

import jax
import numpy as np

_RESULTS: dict = {}


def key_of(*parts) -> tuple:
    """A hashable key for ``parts``: arrays by shape, dtype and a hash of their bytes, the rest as they are."""
    def one(x):
        if isinstance(x, (np.ndarray, jax.Array)):
            a = np.asarray(x)
            return (a.shape, a.dtype.str, hashlib.sha1(np.ascontiguousarray(a).tobytes()).hexdigest())
        return x
    return tuple(one(x) for x in parts)


def once(key, compute):
    """``compute()`` the first time ``key`` is asked for, its host copy after that."""
    if key not in _RESULTS:
        _RESULTS[key] = jax.device_get(compute())
    return _RESULTS[key]
