"""Data parallelism over several JAX devices with ``jax.sharding`` (one host or many).

A 1-D mesh with axis ``"data"`` serves two uses:

* training: each batch is split over the devices (``shard_batch``), the model and the
  optimizer state are replicated (``replicate``); under ``jit`` XLA then runs the step
  data-parallel and all-reduces the gradients of the (mean) loss;
* ``inference.Exact(mesh=...)``: the enumerated configurations are split over the
  devices instead (for few queries with many spins).

Multi-host: call ``jax.distributed.initialize(...)`` first; ``jax.devices()`` then spans
every process and ``data_mesh()`` covers them all. ``shard_batch`` expects the same
global batch on every process (as ``models.train`` produces: batches are a function of
(seed, step)) and each process copies only its own rows to its devices.
"""

from __future__ import annotations

from typing import Optional

import equinox as eqx
import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

from isingattn.errors import IsingInputError

DATA = "data"  # the mesh axis that batches (and Exact's configurations) are split over


def data_mesh(n_devices: Optional[int] = None, axis: str = DATA) -> Mesh:
    """A 1-D mesh over the first ``n_devices`` of ``jax.devices()`` (all of them by default)."""
    devices = jax.devices()
    n = len(devices) if n_devices is None else n_devices
    if not (isinstance(n, int) and 1 <= n <= len(devices)):
        raise IsingInputError(
            f"n_devices must be an int in [1, {len(devices)}] (jax.devices() has {len(devices)}); got {n_devices!r}. "
            "On CPU, fake devices come from XLA_FLAGS=--xla_force_host_platform_device_count=N set before jax starts."
        )
    return Mesh(np.asarray(devices[:n]), (axis,))


def shard_batch(x, mesh: Mesh, axis: str = DATA) -> jax.Array:
    """A global batch ``[B, ...]`` (host data, the same on every process) split along its
    first axis over ``mesh`` axis ``axis``; ``B`` must be a multiple of that axis's size."""
    x = np.asarray(x)
    d = mesh.shape[axis]
    if x.ndim < 1 or x.shape[0] % d:
        raise IsingInputError(
            f"shard_batch splits the first axis over {d} devices, so it must be a multiple of {d}; got shape {x.shape}. "
            "Pick a batch size divisible by the number of devices."
        )
    sharding = NamedSharding(mesh, P(axis))
    return jax.make_array_from_callback(x.shape, sharding, lambda index: x[index])


def replicate(tree, mesh: Mesh):
    """Every array leaf of ``tree`` (a model, an optimizer state) copied to every device of
    ``mesh``; other leaves are left alone."""
    arrays, static = eqx.partition(tree, eqx.is_array)
    return eqx.combine(jax.device_put(arrays, NamedSharding(mesh, P())), static)
