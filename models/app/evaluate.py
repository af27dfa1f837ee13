"""A trained checkpoint scored on its own held-out set, with the engine it was trained with or another one.

Training through a sampler (Gibbs, SQA, DQA, a dimod sampler) also *evaluates* through it, so a
sampler-trained model's test metric mixes two things: what training learned, and the noise of the
marginals at test time. Scoring the same weights with an exact engine separates them:
``isingattn evaluate ckpt-hJ-s0.npz --engine exact``.

The held-out set is rebuilt from the checkpoint's metadata (task, data settings and seed, as
``experiments.task_data`` makes them, deterministically). A set whose number of scored positions differs
from the count the training run recorded is refused; that is a sanity check only, since a wrong set of the
same size would pass it.
"""

from __future__ import annotations

import math
from typing import Optional

import jax

from isingattn.models import checkpoint
from isingattn.engine import to_spec
from isingattn.errors import IsingInputError
from isingattn.models.app.experiments import task_data
from isingattn.models.app.report import mean_ci
from isingattn.models.saved import load_transformer
from isingattn.models.train import evaluate


def evaluate_checkpoint(path: str, engine=None, keys: int = 1, data_path: Optional[str] = None,
                        batch: int = 512) -> dict:
    """Score the model in checkpoint ``path`` on its held-out set.

    engine: an engine instance that replaces the saved one (None: the saved one).
    keys: evaluations with the keys ``PRNGKey(0..keys-1)``; they differ only for sampling engines.
    Returns ``{"engine" (None for softmax and h, which run none), "engine_spec" (its registry spec),
    "variant", "seq_len", "seed", "metric", "values" [keys], "mean", "ci95" (None for one key),
    "count", "recorded"}``: ``metric`` is ``test_acc`` (brackets, a fraction) or ``test_ppl``
    (Shakespeare); ``recorded`` is that metric as the training run logged it, through its own engine
    (None where training scored only part of the set at that step)."""
    if isinstance(keys, bool) or not isinstance(keys, int) or keys < 1:
        raise IsingInputError(f"keys must be a positive int (evaluations with PRNGKey(0..keys-1)); got {keys!r}.")
    meta = checkpoint.read_meta(path)
    spec = meta.get("spec") if isinstance(meta.get("spec"), dict) else {}
    data_meta, seed = _data_meta(spec, path, data_path)
    saved_model = meta.get("model") if isinstance(meta.get("model"), dict) else {}  # what load_transformer builds
    saved, variant = saved_model.get("engine"), saved_model.get("variant")
    if variant in ("softmax", "h") and engine is not None:
        raise IsingInputError(f"{path} holds a {variant!r} model, whose weights are closed forms: no engine runs, so "
                              "--engine would change nothing. Drop --engine, or score an hJ or J checkpoint.")
    if engine is None and isinstance(saved, dict) and "saved_from" in saved:
        raise IsingInputError(f"{path} was trained through an engine that could not be saved ({saved['saved_from']}); "
                              "it would be scored through Exact under that engine's name. Pass --engine.")
    model, meta = load_transformer(path, engine=engine)
    vocab, data_for_seed, _ = task_data(data_meta, model.config.seq_len, data_path)
    if vocab != model.config.vocab_size:
        raise IsingInputError(f"{path}: its task data has {vocab} symbols but the model reads "
                              f"{model.config.vocab_size}; the metadata does not describe this model.")
    test = data_for_seed(seed)[1]
    metric = "test_ppl" if data_meta["task"] == "shakespeare" else "test_acc"
    runs = [evaluate(model, test.tokens, test.targets, batch, jax.random.PRNGKey(k)) for k in range(keys)]
    train = spec.get("train") if isinstance(spec.get("train"), dict) else {}
    # a checkpoint from mid-training whose periodic evaluations scored only the first eval_limit examples
    # recorded a metric of another set: nothing to compare with
    limited = train.get("eval_limit") is not None and meta.get("step") != train.get("steps")
    recorded = {} if limited or not isinstance(meta.get("metrics"), dict) else meta["metrics"]
    # a sanity check only (a set of the same size passes): the set is rebuilt deterministically from the metadata
    if recorded.get("eval_count") is not None and recorded["eval_count"] != runs[0]["count"]:
        raise IsingInputError(f"{path}: the rebuilt held-out set has {runs[0]['count']} scored positions, but "
                              f"training scored {recorded['eval_count']}: it is not the set the model was tested on "
                              "(another corpus file, or a checkpoint of an older data format).")
    values = [math.exp(min(r["loss"], 50.0)) if metric == "test_ppl" else r["acc"] for r in runs]
    mean, ci = mean_ci(values)
    ci = ci if math.isfinite(ci) else None  # one key (or a diverged loss): no interval, and JSON has no NaN
    engine_spec = None
    if model.config.variant not in ("softmax", "h"):
        try:
            engine_spec = to_spec(model.config.engine)
        except ValueError:  # an engine that cannot be described (a DimodEngine around a live sampler)
            engine_spec = {"name": type(model.config.engine).__name__, "config": None}
    return {"engine": engine_spec and engine_spec["name"], "engine_spec": engine_spec,
            "variant": model.config.variant, "seq_len": model.config.seq_len, "seed": seed, "metric": metric,
            "values": values, "mean": mean, "ci95": ci, "count": runs[0]["count"], "recorded": recorded.get(metric)}


BRACKET_FIELDS = {"chars": str, "n_train": int, "n_test": int, "depth": int, "types": int}


def _data_meta(spec: dict, path: str, data_path) -> tuple[dict, int]:
    """The checkpoint's task metadata and seed, checked (checkpoint metadata is untrusted input)."""
    data, seed = spec.get("data"), spec.get("seed")
    if not isinstance(data, dict) or isinstance(seed, bool) or not isinstance(seed, int):
        raise IsingInputError(f"{path} does not record its task data and seed (spec.data, spec.seed): it predates "
                              "saved run specs. Retrain it (`isingattn reproduce --cell PART/CELL --restart`, or "
                              "`isingattn train`) to score it.")
    task = data.get("task")
    need = {"shakespeare": {}, "brackets": BRACKET_FIELDS,
            "brackets-hard": {**BRACKET_FIELDS, "filler": (int, float), "split": str, "interleaved": bool}}
    if task not in need:
        raise IsingInputError(f"{path}: spec.data.task must be one of {', '.join(need)}; got {task!r}.")
    for name, kind in need[task].items():
        value = data.get(name)
        if not (name == "depth" and value is None  # depth None: any nesting
                or isinstance(value, kind) and (kind is bool or not isinstance(value, bool))):
            raise IsingInputError(f"{path}: spec.data.{name} of a {task} checkpoint must be "
                                  f"{getattr(kind, '__name__', 'a number')}; got {value!r}.")
    if data_path is not None and task != "shakespeare":
        raise IsingInputError(f"--data is the Tiny Shakespeare corpus; {path} is a {task} checkpoint, whose data "
                              "is rebuilt from its metadata. Drop --data.")
    return data, seed


def describe(result: dict) -> str:
    """One line of :func:`evaluate_checkpoint`'s result, in percent for accuracies."""
    pct = result["metric"] == "test_acc"
    f = (lambda x: f"{100 * x:.2f}%") if pct else (lambda x: f"{x:.4f}")
    n = len(result["values"])
    ci = result["ci95"]
    half = "" if ci is None else f"{100 * ci:.2f}" if pct else f"{ci:.4f}"
    spread = "" if ci is None else (f" ± {half} (95% CI over {n} keys; min {f(min(result['values']))}, "
                                f"max {f(max(result['values']))})")
    rec = "" if result["recorded"] is None else f"; recorded in training: {f(result['recorded'])}"
    through = "no engine (closed form)" if result["engine"] is None else result["engine"]
    return (f"{result['variant']} (T={result['seq_len']}, seed {result['seed']}) through {through}: "
            f"{result['metric']} {f(result['mean'])}{spread} over {result['count']} positions{rec}")
