"""Training with optax AdamW: paired comparisons of attention variants.

Every variant sees the same data order, the same initialization seed and the same
hyperparameters, so differences between variants are paired by seed.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import math
import os
import time
from typing import Optional, Sequence

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import optax
from tqdm.auto import tqdm

from isingattn import checkpoint
from isingattn.models.saved import config_to_dict
from isingattn.models.transformer import Config, Transformer
from isingattn.sharding import replicate, shard_batch


@dataclasses.dataclass(frozen=True)
class TrainConfig:
    steps: int = 1500
    batch_size: int = 64
    lr: float = 3e-3
    weight_decay: float = 0.01
    warmup: int = 100
    grad_clip: float = 1.0
    eval_every: int = 250
    eval_batch: int = 512
    eval_limit: Optional[int] = None  # periodic evals use the first N held-out examples; the final one uses all


def masked_xent(logits, targets):
    """Mean cross-entropy and accuracy over positions with ``targets >= 0``.

    logits (B, T, C), targets (B, T) -> (loss, n_correct, n_counted)."""
    valid = targets >= 0
    safe = jnp.where(valid, targets, 0)
    nll = -jnp.take_along_axis(jax.nn.log_softmax(logits), safe[..., None], axis=-1)[..., 0]
    count = valid.sum()
    loss = jnp.where(valid, nll, 0.0).sum() / jnp.maximum(count, 1)
    correct = ((logits.argmax(-1) == targets) & valid).sum()
    return loss, correct, count


@functools.lru_cache(maxsize=None)
def _optimizer(tc: TrainConfig):
    sched = optax.warmup_cosine_decay_schedule(0.0, tc.lr, tc.warmup, max(tc.steps, tc.warmup + 1), tc.lr * 0.1)
    return optax.chain(optax.clip_by_global_norm(tc.grad_clip), optax.adamw(sched, weight_decay=tc.weight_decay))


@functools.lru_cache(maxsize=None)
def _step_fn(tc: TrainConfig):
    opt = _optimizer(tc)

    @eqx.filter_jit
    def step(model, opt_state, tokens, targets, key):
        def loss_fn(m):
            return masked_xent(m(tokens, key=key), targets)[0]

        loss, grads = eqx.filter_value_and_grad(loss_fn)(model)
        updates, opt_state = opt.update(grads, opt_state, eqx.filter(model, eqx.is_array))
        return eqx.apply_updates(model, updates), opt_state, loss

    return step


@eqx.filter_jit
def _eval_batch(model, tokens, targets, key):
    loss, correct, count = masked_xent(model(tokens, key=key), targets)
    return loss * count, correct, count


def evaluate(model, tokens, targets, batch: int = 512, key=None, mesh=None) -> dict:
    """Accuracy and loss over every counted position of a held-out set.

    ``key`` feeds sampling engines (each batch gets its own stream). With ``mesh`` (the
    model replicated on it) batches are split over its devices where they divide evenly."""
    key = jax.random.PRNGKey(0) if key is None else key
    put = jnp.asarray if mesh is None else (
        lambda x: shard_batch(x, mesh) if len(x) % mesh.size == 0 else replicate(np.asarray(x), mesh))
    tot_loss = tot_correct = tot_count = 0.0
    for i in range(0, len(tokens), batch):
        l, c, n = _eval_batch(model, put(tokens[i : i + batch]), put(targets[i : i + batch]),
                              jax.random.fold_in(key, i))
        tot_loss, tot_correct, tot_count = tot_loss + float(l), tot_correct + float(c), tot_count + float(n)
    return {"loss": tot_loss / max(tot_count, 1), "acc": tot_correct / max(tot_count, 1), "count": int(tot_count)}


def train(config: Config, train_split, test_split, tc: TrainConfig, seed: int, *,
          log_path: Optional[str] = None, desc: str = "", progress: bool = True,
          ckpt_path: Optional[str] = None, resume: bool = False, stop_after: Optional[int] = None, mesh=None,
          meta: Optional[dict] = None):
    """Train one model. Returns ``(model, final_metrics)``; appends JSON lines to ``log_path``.

    ``seed`` fixes the initialization and the batch order (both independent of the
    variant), so runs of different variants with the same seed are paired.
    With ``ckpt_path`` the model, optimizer state and step are saved atomically at
    every evaluation; ``resume=True`` continues from it, and because batches and
    noise are functions of (seed, step) the resumed run ends where an uninterrupted
    one would. ``stop_after`` stops early (to test exactly that).
    ``mesh`` (``isingattn.sharding.data_mesh()``) trains data-parallel: each batch is split
    over the mesh's ``"data"`` axis (``batch_size`` must divide evenly), the model and the
    optimizer state are replicated, and XLA all-reduces the gradients of the mean loss.
    Checkpoints carry the model config (``isingattn.models.saved.load_transformer``
    rebuilds the model from the file alone) plus the JSON ``meta`` given here.
    """
    init_key, data_key, noise_key = jax.random.split(jax.random.PRNGKey(seed), 3)
    eval_key = jax.random.fold_in(noise_key, tc.steps)  # past every training step's fold_in(noise_key, i)
    model = Transformer(config, key=init_key)
    opt_state = _optimizer(tc).init(eqx.filter(model, eqx.is_array))
    step = _step_fn(tc)
    order = np.asarray(jax.random.randint(data_key, (tc.steps, tc.batch_size), 0, len(train_split.tokens)))
    start = 0
    if resume and ckpt_path and os.path.exists(ckpt_path):
        (model, opt_state), meta = checkpoint.load(ckpt_path, (model, opt_state))
        start = meta["step"]
    if mesh is not None:
        model, opt_state = replicate((model, opt_state), mesh)
    put = jnp.asarray if mesh is None else functools.partial(shard_batch, mesh=mesh)
    log = open(log_path, "a") if log_path else None
    t0 = time.perf_counter()
    rec = None
    bar = tqdm(range(start, tc.steps), desc=desc, disable=not progress, leave=False, mininterval=1.0)
    for i in bar:
        if stop_after is not None and i >= stop_after:
            break
        idx = order[i]
        model, opt_state, loss = step(model, opt_state, put(train_split.tokens[idx]),
                                      put(train_split.targets[idx]), jax.random.fold_in(noise_key, i))
        last = i + 1 == tc.steps
        if (i + 1) % tc.eval_every == 0 or last:
            n_ev = None if last else tc.eval_limit
            ev = evaluate(model, test_split.tokens[:n_ev], test_split.targets[:n_ev], tc.eval_batch,
                          jax.random.fold_in(eval_key, i), mesh)
            rec = {"step": i + 1, "train_loss": float(loss), "test_loss": ev["loss"], "test_acc": ev["acc"],
                   "test_ppl": math.exp(min(ev["loss"], 50.0)), "eval_count": ev["count"],
                   "variant": config.variant, "seed": seed, "wall_s": time.perf_counter() - t0}
            bar.set_postfix(loss=f"{float(loss):.3f}", acc=f"{ev['acc']:.3f}")
            if log:
                log.write(json.dumps(rec) + "\n")
                log.flush()
            if ckpt_path:
                checkpoint.save(ckpt_path, (model, opt_state), {"step": i + 1, "seed": seed, "metrics": rec,
                                                                "train": dataclasses.asdict(tc),
                                                                "model": config_to_dict(config), **(meta or {})})
    if log:
        log.close()
    return model, rec


def compare_variants(make_config, data_for_seed, variants: Sequence[str], seeds: Sequence[int], tc: TrainConfig,
                     out_dir: str, progress: bool = True, resume: bool = False, mesh=None, metric: str = "test_acc",
                     meta: Optional[dict] = None) -> dict[str, dict[int, float]]:
    """Train every (seed, variant) pair; returns ``results[variant][seed] = final metrics[metric]``.

    ``make_config(variant) -> Config``; ``data_for_seed(seed) -> (train, test)``.
    Metrics go to ``out_dir/metrics.jsonl``, checkpoints to ``out_dir/ckpt-<variant>-s<seed>.npz``;
    with ``resume`` finished runs are read back and unfinished ones continue. ``mesh``: see ``train``.
    """
    os.makedirs(out_dir, exist_ok=True)
    results: dict[str, dict[int, float]] = {v: {} for v in variants}
    runs = [(s, v) for s in seeds for v in variants]
    outer = tqdm(runs, desc="runs", disable=not progress)
    for seed, variant in outer:
        outer.set_postfix(seed=seed, variant=variant)
        ck = os.path.join(out_dir, f"ckpt-{variant}-s{seed}.npz")
        if resume and os.path.exists(ck) and checkpoint.read_meta(ck)["step"] >= tc.steps:
            results[variant][seed] = checkpoint.read_meta(ck)["metrics"][metric]
            continue
        train_split, test_split = data_for_seed(seed)
        _, rec = train(make_config(variant), train_split, test_split, tc, seed,
                       log_path=os.path.join(out_dir, "metrics.jsonl"), desc=f"{variant} seed {seed}", progress=progress,
                       ckpt_path=ck, resume=resume, mesh=mesh, meta=meta)
        results[variant][seed] = rec[metric]
    return results
