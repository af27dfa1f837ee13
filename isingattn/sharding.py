"""Data parallelism over several JAX devices with ``jax.sharding`` (one host or many).

A 1-D mesh with axis ``"data"`` serves three uses:

* training: each batch is split over the devices (``shard_batch``), the model and the
  optimizer state are replicated (``replicate``); under ``jit`` XLA then runs the step
  data-parallel and all-reduces the gradients of the (mean) loss;
* ``inference.Exact(mesh=...)``: the enumerated configurations are split over the
  devices instead (for few queries with many spins).
* ``ParallelTempering(mesh=...)``: the chains are split over the devices
  (``check_split``, ``split_along``, ``gathered``), with the same samples as one device.

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


def check_split(mesh, size: int, what: str, owner: str) -> None:
    """Refuse (``IsingInputError``) a ``mesh`` that is not a ``jax.sharding.Mesh`` or whose
    device count does not divide ``size``, the length of the axis ``what`` that ``owner``
    splits over every axis of the mesh. ``mesh=None`` (no sharding) passes."""
    if mesh is None:
        return
    if not isinstance(mesh, Mesh):
        raise IsingInputError(f"{owner}: mesh must be a jax.sharding.Mesh (e.g. isingattn.sharding.data_mesh()) or None; "
                              f"got {type(mesh).__name__}.")
    if size % mesh.size:
        raise IsingInputError(f"{owner}: {what} = {size} is split over the mesh's {mesh.size} devices, so it must be a "
                              f"multiple of {mesh.size}. Pick {what} divisible by {mesh.size}, or a smaller mesh "
                              "(isingattn.sharding.data_mesh(n_devices)).")


def split_along(x, mesh: Optional[Mesh], axis: int):
    """Inside ``jit``: ``x`` constrained to be split along ``axis`` over all the axes of
    ``mesh`` and replicated along the others (``mesh=None``: ``x`` as is). A constraint
    changes where values live, never what they are."""
    if mesh is None:
        return x
    spec = (None,) * axis + (tuple(mesh.axis_names),)
    return jax.lax.with_sharding_constraint(x, NamedSharding(mesh, P(*spec)))


def gathered(tree, mesh: Optional[Mesh]):
    """Inside ``jit``: every array leaf of ``tree`` constrained to be replicated on ``mesh``
    (an all-gather of a split array), so that the reductions that follow run on whole
    arrays, in the order of a single-device run (``mesh=None``: ``tree`` as is)."""
    if mesh is None:
        return tree
    return jax.tree_util.tree_map(lambda x: jax.lax.with_sharding_constraint(x, NamedSharding(mesh, P())), tree)
