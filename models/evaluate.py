"""A trained checkpoint scored on its own held-out set, with the engine it was trained with or another one.

Training through a sampler (Gibbs, SQA, DQA, a dimod sampler) also *evaluates* through it, so a
sampler-trained model's test metric mixes two things: what training learned, and the noise of the
marginals at test time. Scoring the same weights with an exact engine separates them:
``isingattn evaluate ckpt-hJ-s0.npz --engine exact``.

The held-out set is rebuilt from the checkpoint's metadata (task, data settings and seed, as
``experiments.task_data`` makes them); the number of scored positions is checked against the count the
training run recorded, so a set that came out different is refused instead of scored.
"""

from __future__ import annotations

import math
from typing import Optional

import jax

from isingattn.errors import IsingInputError
from isingattn.models.report import mean_ci


def evaluate_checkpoint(path: str, engine=None, keys: int = 1, data_path: Optional[str] = None,
                        batch: int = 512) -> dict:
    """Score the model in checkpoint ``path`` on its held-out set.

    engine: an engine instance that replaces the saved one (None: the saved one).
    keys: evaluations with the keys ``PRNGKey(0..keys-1)``; they differ only for sampling engines.
    Returns ``{"engine", "engine_spec" (its registry spec), "variant", "seq_len", "seed", "metric",
    "values" [keys], "mean", "ci95" (None for one key), "count", "recorded"}``: ``metric`` is ``test_acc`` (brackets, a fraction) or ``test_ppl``
    (Shakespeare); ``recorded`` is that metric as the training run logged it, through its own engine (None
    where training scored only part of the set at that step)."""
    from isingattn.engine import to_spec
    from isingattn.models.experiments import task_data
    from isingattn.models.saved import load_transformer
    from isingattn.models.train import evaluate

    if isinstance(keys, bool) or not isinstance(keys, int) or keys < 1:
        raise IsingInputError(f"keys must be a positive int (evaluations with PRNGKey(0..keys-1)); got {keys!r}.")
    model, meta = load_transformer(path, engine=engine)
    spec = meta.get("spec", {})
    data_meta, seed = spec.get("data"), spec.get("seed", meta.get("seed"))
    if not isinstance(data_meta, dict) or "task" not in data_meta or not isinstance(seed, int):
        raise IsingInputError(f"{path} does not record its task data and seed (spec.data, spec.seed); only "
                              "checkpoints written by `isingattn train` or `isingattn reproduce` can be scored.")
    _, data_for_seed, _ = task_data(data_meta, model.config.seq_len, data_path)
    test = data_for_seed(seed)[1]
    metric = "test_ppl" if data_meta["task"] == "shakespeare" else "test_acc"
    runs = [evaluate(model, test.tokens, test.targets, batch, jax.random.PRNGKey(k)) for k in range(keys)]
    train = spec.get("train") or {}
    # a checkpoint from mid-training whose periodic evaluations scored only the first eval_limit examples
    # recorded a metric of another set: nothing to compare with
    limited = train.get("eval_limit") is not None and meta.get("step") != train.get("steps")
    recorded = {} if limited else meta.get("metrics", {})
    if recorded.get("eval_count") is not None and recorded["eval_count"] != runs[0]["count"]:
        raise IsingInputError(f"{path}: the rebuilt held-out set has {runs[0]['count']} scored positions, but "
                              f"training scored {recorded['eval_count']}: it is not the set the model was tested on "
                              "(another corpus file, or a checkpoint of an older data format).")
    values = [math.exp(min(r["loss"], 50.0)) if metric == "test_ppl" else r["acc"] for r in runs]
    mean, ci = mean_ci(values)
    ci = None if math.isnan(ci) else ci  # one key: no interval (and JSON has no NaN)
    try:
        engine_spec = to_spec(model.config.engine)
    except ValueError:  # an engine that cannot be described (a DimodEngine around a live sampler)
        engine_spec = {"name": type(model.config.engine).__name__, "config": None}
    return {"engine": engine_spec["name"], "engine_spec": engine_spec, "variant": model.config.variant, "seq_len": model.config.seq_len, "seed": seed,
            "metric": metric, "values": values, "mean": mean, "ci95": ci, "count": runs[0]["count"],
            "recorded": recorded.get(metric)}


def describe(result: dict) -> str:
    """One line of :func:`evaluate_checkpoint`'s result, in percent for accuracies."""
    pct = result["metric"] == "test_acc"
    f = (lambda x: f"{100 * x:.2f}%") if pct else (lambda x: f"{x:.4f}")
    n = len(result["values"])
    half = (f"{100 * result['ci95']:.2f}" if pct else f"{result['ci95']:.4f}") if n > 1 else ""
    spread = "" if n == 1 else (f" ± {half} (95% CI over {n} keys; min {f(min(result['values']))}, "
                                f"max {f(max(result['values']))})")
    rec = "" if result["recorded"] is None else f"; recorded in training: {f(result['recorded'])}"
    return (f"{result['variant']} (T={result['seq_len']}, seed {result['seed']}) through {result['engine']}: "
            f"{result['metric']} {f(result['mean'])}{spread} over {result['count']} positions{rec}")
