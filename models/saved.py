"""Trained models on disk: the architecture as JSON next to the weights.

A checkpoint's metadata holds ``model`` (the :class:`Config`, with the engine as a
registry spec) so a checkpoint alone rebuilds its model, without pickle.
"""

from __future__ import annotations

import dataclasses

import jax

from isingattn import checkpoint
from isingattn.engine import from_spec, to_spec
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
    d = dict(d)
    d["engine"] = from_spec(d["engine"])
    known = {f.name for f in dataclasses.fields(Config)}
    return Config(**{k: v for k, v in d.items() if k in known})


def load_transformer(path: str, engine=None) -> tuple[Transformer, dict]:
    """The trained :class:`Transformer` in checkpoint ``path`` and its metadata.

    ``engine`` overrides the saved one (e.g. evaluate a Gibbs-trained model with Exact)."""
    meta = checkpoint.read_meta(path)
    if "model" not in meta:
        raise checkpoint.CheckpointError(f"{path} has no model config in its metadata; it was not written by "
                                         "isingattn training (or by a version before configs were saved).")
    config = config_from_dict(meta["model"])
    if engine is not None:
        config = dataclasses.replace(config, engine=engine)
    template = Transformer(config, key=jax.random.PRNGKey(0))
    model, _ = checkpoint.load(path, template, prefix=True)  # the model's leaves come before the optimizer's
    return model, meta
