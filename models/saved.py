"""Trained models on disk: the architecture as JSON next to the weights.

A checkpoint's metadata holds ``model`` (the :class:`Config`, with the engine as a
registry spec) so a checkpoint alone rebuilds its model, without pickle.

Metadata is untrusted input: :func:`load_transformer` validates every field's type and
range, and compares the array shapes the config implies (computed abstractly, with
``jax.eval_shape``) against the shapes stored in the file (read from the ``.npy``
headers) before it allocates anything, so a file claiming ``seq_len: 30000`` is refused
at once instead of after building a multi-GiB template.
"""

from __future__ import annotations

import dataclasses
import zipfile

import jax
import numpy as np

from isingattn.models import checkpoint
from isingattn.engine import from_spec, to_spec
from isingattn.errors import IsingInputError, IsingTypeError
from isingattn.models.transformer import Config, Transformer


def config_to_dict(config: Config) -> dict:
    """JSON-ready :class:`Config`; engines that cannot be described (e.g. a DimodEngine
    around a live sampler) are saved as Exact, which is what analysis needs."""
    d = dataclasses.asdict(config)
    try:
        d["engine"] = to_spec(config.engine)
    except ValueError:
        d["engine"] = {"name": "exact", "config": {}, "saved_from": repr(config.engine)}
    return d


def config_from_dict(d: dict) -> Config:
    """The :class:`Config` of :func:`config_to_dict`; raises :class:`IsingInputError` naming
    the field for a missing field, an unknown engine, or a value of the wrong type or range."""
    if not isinstance(d, dict):
        raise IsingInputError(f"a model config is a JSON object of Config fields; got {type(d).__name__}.")
    fields = dataclasses.fields(Config)
    missing = [f.name for f in fields if f.default is dataclasses.MISSING and f.name not in d]
    if missing:
        raise IsingInputError(f"the model config lacks the field(s) {', '.join(missing)}.")
    d = dict(d)
    if "engine" in d:
        try:
            d["engine"] = from_spec(d["engine"])
        except (IsingInputError, IsingTypeError) as e:
            raise IsingInputError(f"engine: {e}") from None
    known = {f.name for f in fields}
    return Config(**{k: v for k, v in d.items() if k in known})


def _is_int(x) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def check_meta(meta, path: str) -> None:
    """Raise :class:`~isingattn.models.checkpoint.CheckpointError` unless the training metadata of a
    checkpoint (``step``, ``seed``, ``chars``, ``metrics``, ``train``) has the types training writes."""
    bad = lambda field, want, got: checkpoint.CheckpointError(
        f"{path}: metadata field {field!r} must be {want}; got {got!r}. The file was not written by isingattn "
        "training or was edited; retrain it or pass a checkpoint that training wrote.")
    if not isinstance(meta, dict):
        raise checkpoint.CheckpointError(f"{path}: its metadata must be a JSON object; got {type(meta).__name__}.")
    if "step" in meta and not (_is_int(meta["step"]) and meta["step"] >= 0):
        raise bad("step", "a non-negative integer", meta["step"])
    if "seed" in meta and not _is_int(meta["seed"]):
        raise bad("seed", "an integer", meta["seed"])
    if "chars" in meta and not (isinstance(meta["chars"], str) and len(set(meta["chars"])) == len(meta["chars"])):
        raise bad("chars", "a string of distinct characters (the vocabulary)", meta["chars"])
    for field in ("metrics", "train"):
        if field in meta and not isinstance(meta[field], dict):
            raise bad(field, "a JSON object", meta[field])


def _stored_arrays(path: str) -> list[tuple[str, tuple, np.dtype]]:
    """``(name, shape, dtype)`` of every ``leaf_*`` array in the ``.npz``, read from the
    ``.npy`` headers only (no array data is read and nothing is unpickled)."""
    out = []
    try:
        with zipfile.ZipFile(path) as zf:
            for info in sorted(zf.infolist(), key=lambda i: i.filename):
                name = info.filename
                if not (name.startswith("leaf_") and name.endswith(".npy")):
                    continue
                with zf.open(info) as f:
                    version = np.lib.format.read_magic(f)
                    if version == (1, 0):
                        shape, _, dtype = np.lib.format.read_array_header_1_0(f)
                    elif version == (2, 0):
                        shape, _, dtype = np.lib.format.read_array_header_2_0(f)
                    else:
                        raise ValueError(f"unsupported .npy format version {version}")
                out.append((name[: -len(".npy")], tuple(shape), np.dtype(dtype)))
    except (ValueError, OSError, EOFError, zipfile.BadZipFile) as e:
        raise checkpoint.CheckpointError(f"{path} is not a readable checkpoint ({e}); it may be truncated or "
                                         "corrupt.") from None
    return out


def _check_shapes(path: str, config: Config) -> None:
    """The model's leaves, as ``config`` implies them, against the stored arrays (a prefix:
    the optimizer's leaves may follow)."""
    stored = _stored_arrays(path)
    if config.n_layers > len(stored):  # every layer holds arrays: bound the count before tracing that many layers
        raise checkpoint.CheckpointError(f"{path} holds {len(stored)} arrays but its model config asks for "
                                         f"n_layers={config.n_layers}: the file's metadata does not describe its arrays.")
    expected = jax.tree_util.tree_leaves(jax.eval_shape(lambda: Transformer(config, key=jax.random.PRNGKey(0))))
    if len(stored) < len(expected):
        raise checkpoint.CheckpointError(f"{path} holds {len(stored)} arrays but its model config needs "
                                         f"{len(expected)}: the file's metadata does not describe its arrays.")
    for (name, shape, dtype), ref in zip(stored, expected):
        if shape != tuple(ref.shape) or dtype != np.dtype(ref.dtype):
            raise checkpoint.CheckpointError(
                f"{path}: array {name} is {shape} {dtype} but the model config in its metadata "
                f"(seq_len={config.seq_len}, d_model={config.d_model}, vocab_size={config.vocab_size}, "
                f"n_heads={config.n_heads}, J_param={config.J_param!r}) needs {tuple(ref.shape)} {np.dtype(ref.dtype)}. "
                "The metadata does not describe the arrays (edited file, or another config, or another x64 "
                "setting).")


def load_transformer(path: str, engine=None) -> tuple[Transformer, dict]:
    """The trained :class:`Transformer` in checkpoint ``path`` and its metadata.

    ``engine`` overrides the saved one (e.g. evaluate a Gibbs-trained model with Exact).
    Raises :class:`~isingattn.models.checkpoint.CheckpointError` for a missing or corrupt file,
    invalid metadata, or arrays that do not match the metadata's config; the arrays are
    checked against the config before the model is built."""
    meta = checkpoint.read_meta(path)
    check_meta(meta, path)
    if "model" not in meta:
        raise checkpoint.CheckpointError(f"{path} has no model config in its metadata; it was not written by "
                                         "isingattn training (or by a version before configs were saved).")
    try:
        config = config_from_dict(meta["model"])
    except (IsingInputError, IsingTypeError) as e:
        raise checkpoint.CheckpointError(f"{path}: the model config in its metadata is invalid: {e}") from None
    if engine is not None:
        config = dataclasses.replace(config, engine=engine)
    _check_shapes(path, config)
    template = Transformer(config, key=jax.random.PRNGKey(0))
    model, _ = checkpoint.load(path, template, prefix=True)  # the model's leaves come before the optimizer's
    return model, meta
