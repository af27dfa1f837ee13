"""Reading spin data and saving fitted models: what ``isingattn fit`` reads and writes.

Data files (:func:`read_samples`): ``.npy``; ``.npz`` (its array ``samples``, or its only
array); ``.csv`` (comma-separated); anything else is read as whitespace-separated text. Each
row is one sample, ``[S, n]``, of 0/1 bits or ±1 spins. Nothing is loaded with pickle.

A fitted model (:func:`save_model`, :func:`load_model`) is one ``.npz`` of named arrays,
readable without isingattn: ``h [n]``, ``beta []`` and either ``J [n, n]`` (dense) or
``edges [E, 2]`` and ``weights [E]`` (a coupling graph), plus ``meta``, a JSON string.
Written atomically (:mod:`isingattn.atomic`).

A fit's folder (:func:`save_fit`, what ``isingattn fit --out FOLDER`` writes) holds the set
``FIT_FILES``: ``model.npz`` (:func:`save_model`), ``model.bqm`` (dimod's
``BinaryQuadraticModel.to_file``: the SPIN model at β = 1 with ``β·h`` and ``β·J``, since a BQM
has no temperature) and ``fit.json`` (the fit's ``info`` and the command line). The three are
one set: they are written into a temporary folder beside FOLDER, which then replaces FOLDER in
one step (:func:`isingattn.atomic.writing_folder`), so a refit that fails or is killed leaves
the earlier set whole, and what a killed run left behind is swept on the next. FOLDER therefore
holds the set only: one with other files in it is refused (:func:`check_fit_folder`). Non-finite
numbers of ``info`` go into fit.json as the strings ``"inf"``, ``"-inf"`` or ``"nan"`` (strict
JSON has no such numbers); arrays stay in model.npz.
"""

from __future__ import annotations

import io
import json
import math
import os
import warnings
import zipfile

import numpy as np

from isingattn import atomic
from isingattn.errors import IsingInputError

__all__ = ["FIT_FILES", "check_fit_folder", "json_info", "load_model", "read_samples", "save_fit", "save_model"]

FIT_FILES = ("model.npz", "model.bqm", "fit.json")


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


def check_fit_folder(folder: str, what: str = "folder") -> None:
    """Refuse, before a fit runs, a ``folder`` that cannot take a fit's set (``FIT_FILES``):
    not writable, a file, holding a non-file where one of the set goes, holding other files (the
    folder is replaced as a whole), or the current folder or one above it. Leftovers of a killed
    earlier write are swept first. Raises :class:`IsingInputError` whose message starts with
    ``what`` (e.g. a command-line option) and the folder."""
    atomic.check_writable(folder, what)
    path = os.path.abspath(folder)
    here = os.path.abspath(os.getcwd())
    if path == here or here.startswith(path.rstrip(os.sep) + os.sep):
        raise IsingInputError(f"{what} {folder!r} is the current folder or holds it; fit replaces {what} as a whole, "
                              f"so give it a folder of its own, e.g. {what} fit1.")
    if not os.path.isdir(path):
        return
    atomic.sweep_folder_orphans(path)  # a killed earlier run's leftovers are not "other files"
    for name in FIT_FILES:
        p = os.path.join(path, name)
        if os.path.lexists(p) and not os.path.isfile(p):
            raise IsingInputError(f"{what} {folder!r}: {name} there is not a file (a folder or another kind of entry); "
                                  f"remove it or choose another {what}.")
    other = sorted(set(os.listdir(path)) - set(FIT_FILES))
    if other:
        shown = ", ".join(other[:5]) + (" ..." if len(other) > 5 else "")
        raise IsingInputError(f"{what} {folder!r} holds other entries than a fit's model.npz, model.bqm and fit.json "
                              f"({shown}); the set is written by replacing the folder as one, so give fit an empty or "
                              "new folder, or an earlier fit's.")


def json_info(info: dict) -> dict:
    """The plain-JSON entries of a fit's ``info`` (numbers, strings, lists, dicts; arrays left
    out), with non-finite floats as the strings ``"inf"``, ``"-inf"`` and ``"nan"``."""
    def plain(v) -> bool:
        if v is None or isinstance(v, (bool, int, str, float)):
            return True
        if isinstance(v, (list, tuple)):
            return all(plain(x) for x in v)
        return isinstance(v, dict) and all(isinstance(k, str) and plain(x) for k, x in v.items())

    def finite(v):
        if isinstance(v, float) and not math.isfinite(v):
            return "nan" if math.isnan(v) else ("inf" if v > 0 else "-inf")
        if isinstance(v, (list, tuple)):
            return [finite(x) for x in v]
        return {k: finite(x) for k, x in v.items()} if isinstance(v, dict) else v

    return {k: finite(v) for k, v in info.items() if plain(v)}


def save_fit(folder: str, result, *, method: str, data: str | None = None, command: str | None = None) -> dict:
    """Write a fit's set (``FIT_FILES``, module docstring) into ``folder``, replacing it as one.

    ``result`` is :func:`isingattn.learn.fit`'s :class:`~isingattn.learn.FitResult`; ``method``
    and ``data`` (the samples' path) go into model.npz's ``meta``, ``command`` (the command line
    that ran the fit, if any) into fit.json beside :func:`json_info` of ``result.info``, which is
    returned. A fit that missed its moments (``converged`` false) is written too, and says so in
    fit.json. The folder is checked first (:func:`check_fit_folder`)."""
    from isingattn.convert import save_bqm

    check_fit_folder(folder)
    info = json_info(result.info)
    model = result.model
    bqm = model.to_bqm()
    bqm.scale(float(model.beta))  # a BQM has no temperature: exp(-E_bqm) = exp(-β E)
    with atomic.writing_folder(folder) as tmp:  # the three files replace the earlier set together
        save_model(os.path.join(tmp, "model.npz"), model, {"method": method, "data": data})
        save_bqm(bqm, os.path.join(tmp, "model.bqm"))
        atomic.write_json(os.path.join(tmp, "fit.json"), {"command": command, "info": info}, indent=2)
    return info
