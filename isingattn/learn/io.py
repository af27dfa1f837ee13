"""Reading spin data and saving fitted models: what ``isingattn fit`` reads and writes.

Data files (:func:`read_samples`): ``.npy``; ``.npz`` (its array ``samples``, or its only
array); ``.csv`` (comma-separated); anything else is read as whitespace-separated text. Each
row is one sample, ``[S, n]``, of 0/1 bits or ±1 spins. Nothing is loaded with pickle.

A fitted model (:func:`save_model`, :func:`load_model`) is one ``.npz`` of named arrays,
readable without isingattn: ``h [n]``, ``beta []`` and either ``J [n, n]`` (dense) or
``edges [E, 2]`` and ``weights [E]`` (a coupling graph), plus ``meta``, a JSON string.
Written atomically (:mod:`isingattn.atomic`).
"""

from __future__ import annotations

import io
import json
import os
import warnings
import zipfile

import numpy as np

from isingattn import atomic
from isingattn.errors import IsingInputError

__all__ = ["read_samples", "save_model", "load_model"]


def read_samples(path: str) -> np.ndarray:
    """The ``[S, n]`` array in ``path`` (module docstring for the formats), as float64.
    The values are checked by :func:`isingattn.learn.fit`, not here; a file that is not a
    2-D numeric table raises :class:`IsingInputError` naming the file and the format."""
    if not os.path.isfile(path):
        raise IsingInputError(f"{path!r}: no such file; expected samples as .npy, .npz, .csv or whitespace text.")
    ext = os.path.splitext(path)[1].lower()
    try:
        if ext == ".npy":
            x = np.load(path, allow_pickle=False)
        elif ext == ".npz":
            with np.load(path, allow_pickle=False) as z:
                names = list(z.files)
                if "samples" in names:
                    x = z["samples"]
                elif len(names) == 1:
                    x = z[names[0]]
                else:
                    raise IsingInputError(f"{path!r} holds arrays {names}; name the data array 'samples'.")
        else:
            with warnings.catch_warnings():  # an empty file: NumPy's warning, then our message below
                warnings.filterwarnings("ignore", message=".*input contained no data.*", category=UserWarning)
                x = np.loadtxt(path, delimiter="," if ext == ".csv" else None, dtype=np.float64, ndmin=2)
    except IsingInputError:
        raise
    except (ValueError, OSError, zipfile.BadZipFile, EOFError) as e:
        what = {".npy": "a .npy array", ".npz": "a .npz archive", ".csv": "comma-separated numbers"}.get(
            ext, "whitespace-separated numbers")
        raise IsingInputError(f"{path!r} could not be read as {what}: {' '.join(str(e).split())}") from None
    if x.dtype == object or not (np.issubdtype(x.dtype, np.number) or x.dtype == bool):
        raise IsingInputError(f"{path!r}: expected a numeric array of 0/1 or ±1; got dtype {x.dtype}.")
    if np.issubdtype(x.dtype, np.complexfloating):
        raise IsingInputError(f"{path!r}: expected real 0/1 or ±1 values; got complex numbers (dtype {x.dtype}).")
    if x.ndim != 2:
        raise IsingInputError(f"{path!r}: expected a 2-D table [samples, spins]; got shape {x.shape}.")
    if x.size == 0:
        raise IsingInputError(f"{path!r} holds no data (shape {x.shape}); expected rows of 0/1 or ±1 values, one "
                              "sample per row.")
    return np.asarray(x, np.float64)


def save_model(path: str, model, meta: dict | None = None) -> None:
    """Write ``model`` (an unbatched :class:`~isingattn.IsingModel`) to ``path`` (.npz)."""
    from isingattn.sparse import SparseCouplings

    if model.batch_shape:
        raise IsingInputError(f"save_model takes one model; got a batch of shape {model.batch_shape}.")
    arrays = {"h": np.asarray(model.h), "beta": np.asarray(model.beta)}
    if isinstance(model.J, SparseCouplings):
        arrays["edges"] = np.asarray(model.J.graph.edges, np.int64)
        arrays["weights"] = np.asarray(model.J.weights)
    else:
        arrays["J"] = np.asarray(model.J)
    arrays["meta"] = np.asarray(json.dumps(meta or {}, allow_nan=False))
    buf = io.BytesIO()
    np.savez(buf, **arrays)
    atomic.write_bytes(path, buf.getvalue())


def load_model(path: str):
    """The :class:`~isingattn.IsingModel` saved by :func:`save_model`, and its ``meta`` dict."""
    import jax.numpy as jnp

    from isingattn.model import IsingModel
    from isingattn.sparse import CouplingGraph, SparseCouplings

    try:
        with np.load(path, allow_pickle=False) as z:
            a = {k: z[k] for k in z.files}
    except (ValueError, OSError, zipfile.BadZipFile, EOFError) as e:
        raise IsingInputError(f"{path!r} could not be read as a saved model (.npz): {e}") from None
    if "h" not in a or "beta" not in a or ("J" not in a and not {"edges", "weights"} <= a.keys()):
        raise IsingInputError(f"{path!r} is not a saved model: it needs h, beta and J (or edges and weights); "
                              f"it holds {sorted(a)}.")
    h = jnp.asarray(a["h"])
    J = (jnp.asarray(a["J"]) if "J" in a
         else SparseCouplings(CouplingGraph(h.shape[-1], a["edges"]), jnp.asarray(a["weights"])))
    meta = json.loads(str(a["meta"])) if "meta" in a else {}
    return IsingModel(h, J, beta=float(a["beta"])), meta
