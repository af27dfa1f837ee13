"""Checkpoints: atomic, and loadable without executing code (``.npz``, no pickle).

A checkpoint holds every array leaf of a pytree (model, optimizer state, RNG key,
...) plus JSON metadata. Loading needs a template pytree of the same structure
(built from the saved config), so nothing but arrays and JSON is ever read.
"""

from __future__ import annotations

import json
import os
import zipfile
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from isingattn import atomic


class CheckpointError(ValueError):
    """The checkpoint is missing, corrupt, or does not fit the template."""


def save(path: str, tree: Any, meta: dict | None = None) -> None:
    """Write the array leaves of ``tree`` and JSON ``meta`` to ``path`` atomically
    (:mod:`isingattn.atomic`): a crash leaves the old file. ``meta`` must be strict JSON
    (a NaN in it raises rather than writing a file that strict readers reject)."""
    leaves = jax.tree_util.tree_leaves(eqx.filter(tree, eqx.is_array))
    arrays = {f"leaf_{i:05d}": np.asarray(x) for i, x in enumerate(leaves)}
    arrays["__meta__"] = np.frombuffer(json.dumps(meta or {}, allow_nan=False).encode(), dtype=np.uint8)
    with atomic.writing(path, "wb") as f:
        np.savez(f, **arrays)


def read_meta(path: str) -> dict:
    """The JSON metadata of a checkpoint."""
    with _open(path) as z:
        return _meta(z, path)


def load(path: str, like: Any, *, prefix: bool = False) -> tuple[Any, dict]:
    """Fill the array leaves of the template ``like`` from ``path``. Returns ``(tree, meta)``.

    ``prefix=True`` reads only the first leaves, e.g. the model out of a saved
    ``(model, optimizer_state)`` pair. Raises :class:`CheckpointError` when the file is unreadable or its arrays do not
    match the template's count, shapes or dtypes."""
    dynamic, static = eqx.partition(like, eqx.is_array)
    leaves, treedef = jax.tree_util.tree_flatten(dynamic)
    with _open(path) as z:
        meta = _meta(z, path)
        names = sorted(k for k in z.files if k.startswith("leaf_"))
        if prefix and len(names) >= len(leaves):
            names = names[: len(leaves)]
        if len(names) != len(leaves):
            raise CheckpointError(f"{path} holds {len(names)} arrays but the model needs {len(leaves)}: it was saved "
                                  "from a different configuration. Check its config against the run you resume.")
        out = []
        for name, ref in zip(names, leaves):
            try:
                arr = z[name]
            except (ValueError, OSError, zipfile.BadZipFile) as e:
                raise CheckpointError(f"{path}: array {name} is corrupt ({_plain(e)}).") from None
            if arr.shape != ref.shape or arr.dtype != np.dtype(ref.dtype):
                raise CheckpointError(f"{path}: {name} has shape {arr.shape} {arr.dtype}, the template expects "
                                      f"{ref.shape} {np.dtype(ref.dtype)}. The checkpoint belongs to another config.")
            out.append(jnp.asarray(arr))
    return eqx.combine(jax.tree_util.tree_unflatten(treedef, out), static), meta


def _open(path):
    if not os.path.isfile(path):
        raise CheckpointError(f"no checkpoint at {path!r}.")
    try:
        z = np.load(path, allow_pickle=False)
    except (ValueError, OSError, zipfile.BadZipFile, EOFError) as e:
        raise CheckpointError(f"{path} is not a readable checkpoint ({_plain(e)}); it may be truncated or corrupt, "
                              "or not written by isingattn.") from None
    if not isinstance(z, np.lib.npyio.NpzFile):  # a bare .npy array: np.load returns it, not an archive
        raise CheckpointError(f"{path} is a single NumPy array (.npy), not an isingattn checkpoint (an .npz archive "
                              "of arrays and metadata).")
    return z


def _plain(e: Exception) -> str:
    """numpy's message without its advice to enable pickle: checkpoints never hold objects,
    and loading untrusted pickles runs arbitrary code."""
    text = str(e)
    if "pickle" in text.lower():
        return "numpy could read it only by unpickling Python objects, which isingattn checkpoints never contain"
    return text


def _meta(z, path) -> dict:
    try:
        meta = json.loads(bytes(z["__meta__"]).decode())
    except (KeyError, ValueError, OSError, zipfile.BadZipFile) as e:
        raise CheckpointError(f"{path} has no readable metadata ({_plain(e)}); it is not an isingattn "
                              "checkpoint.") from None
    if not isinstance(meta, dict):
        raise CheckpointError(f"{path}: its metadata is a {type(meta).__name__}, not a JSON object; the file is "
                              "not an isingattn checkpoint.")
    return meta
