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

from isingattn import atomic
from isingattn.progress import bar as progress_bar

from isingattn.models import checkpoint
from isingattn import validate as V
from isingattn.errors import IsingInputError, TrainingDivergedError
from isingattn.models.runs import check_resumable, finished_in_log, prune_log, run_spec
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
    # What AdamW decays (nanoGPT: matrices only, never gains, biases or the per-head field bias):
    #   "matrices"   every array with ndim >= 2 except the couplings J_raw (default: decaying J pulls hJ
    #                toward the h variant, the very thing the ablation measures) and the field biases rel_bias
    #                and pair_bias (the pairwise control starts at 0 and is not pulled back to it, like J)
    #   "matrices+J" the same plus J_raw
    #   "all"        every array, J and LayerNorm gains included (what runs before this option did)
    weight_decay_on: str = "matrices"

    def __post_init__(self):
        if self.weight_decay_on not in DECAY_ON:
            raise IsingInputError(f"weight_decay_on must be one of {', '.join(DECAY_ON)}; got {self.weight_decay_on!r}.")
        for name in ("steps", "batch_size", "eval_every", "eval_batch"):
            V.positive_int(name, getattr(self, name), owner="TrainConfig")
        V.nonneg_int("warmup", self.warmup, owner="TrainConfig")
        if self.eval_limit is not None:
            V.positive_int("eval_limit", self.eval_limit, owner="TrainConfig")
        for name in ("lr", "grad_clip"):
            V.positive_float(name, getattr(self, name), owner="TrainConfig")
        V.float_in("weight_decay", self.weight_decay, 0.0, owner="TrainConfig")


DECAY_ON = ("matrices", "matrices+J", "all")


def decay_mask(params, weight_decay_on: str):
    """The pytree of booleans AdamW's ``mask`` takes: which arrays of ``params`` are decayed.

    J is found by its leaf name (``J_raw``) anywhere in the path, so the rule holds in every
    layer (``.blocks[l].attn.J_raw``) and for any module layout."""
    def leaf(path, x):
        if weight_decay_on == "all":
            return True
        if any(getattr(p, "name", None) == "J_raw" for p in path):
            return weight_decay_on == "matrices+J"
        if any(getattr(p, "name", None) in ("rel_bias", "pair_bias") for p in path):  # field biases, not weights
            return False
        return x.ndim >= 2

    return jax.tree_util.tree_map_with_path(leaf, params)


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
    adamw = optax.adamw(sched, weight_decay=tc.weight_decay,
                        mask=functools.partial(decay_mask, weight_decay_on=tc.weight_decay_on))
    return optax.chain(optax.clip_by_global_norm(tc.grad_clip), adamw)


@functools.lru_cache(maxsize=None)
def _step_fn(tc: TrainConfig):
    opt = _optimizer(tc)

    @eqx.filter_jit
    def step(model, opt_state, tokens, targets, key):
        def loss_fn(m):  # dropout draws its own stream, and only when the model has dropout (else: as before)
            drop = {"dropout_key": jax.random.fold_in(key, 0xD50)} if m.config.dropout else {}
            return masked_xent(m(tokens, key=key, **drop), targets)[0]

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


def _scan_losses(losses: list) -> tuple:
    """``(first_bad_step or None, last_finite_step, last_finite_loss)`` over ``[(step, loss), ...]``.

    Losses stay on the device until an evaluation, so that checking them does not stall
    the dispatch of every step."""
    last = (None, None)
    for i, loss in losses:
        x = float(loss)  # a failed model check under jit is a NaN loss (isingattn.validate.nan_where)
        if not math.isfinite(x):
            return (i, *last)
        last = (i, x)
    return (None, *last)


def _diverged(step, last_step, last_loss, lr) -> TrainingDivergedError:
    where = ("no step had a finite loss" if last_step is None
             else f"the last finite loss was {last_loss:.6g} at step {last_step}")
    what = "the loss became non-finite"
    return TrainingDivergedError(
        f"training diverged at step {step}: {what}; {where}. Lower the learning rate "
        f"(lr={lr:g}) or check the inputs; the last checkpoint before it is kept.")


def train(config: Config, train_split, test_split, tc: TrainConfig, seed: int, *,
          log_path: Optional[str] = None, desc: str = "", progress: bool = True,
          ckpt_path: Optional[str] = None, resume: bool = False, stop_after: Optional[int] = None, mesh=None,
          meta: Optional[dict] = None):
    """Train one model. Returns ``(model, final_metrics)``; appends JSON lines to ``log_path``.

    ``seed`` fixes the initialization and the batch order (both independent of the
    variant), so runs of different variants with the same seed are paired.
    With ``ckpt_path`` the model, optimizer state and step are saved atomically at
    every evaluation, with the run's spec (:func:`run_spec`: model and training config,
    seed, and the data settings ``meta``). ``resume=True`` continues from that checkpoint
    if its spec is this run's (else :class:`RunFolderError` names the differences); since
    batches and noise are functions of (seed, step), the resumed run ends bit for bit
    where an uninterrupted one would, and its rows in ``log_path`` past the checkpoint
    are dropped before they are repeated. ``stop_after`` stops early (to test exactly that).
    A non-finite loss raises :class:`TrainingDivergedError` at the next evaluation (or at
    once when the model's own checks fail), naming the step and the last finite loss;
    no non-finite state is checkpointed and no non-finite row is logged.
    ``mesh`` (``isingattn.sharding.data_mesh()``) trains data-parallel: each batch is split
    over the mesh's ``"data"`` axis (``batch_size`` must divide evenly), the model and the
    optimizer state are replicated, and XLA all-reduces the gradients of the mean loss.
    Checkpoints carry the model config (``isingattn.models.saved.load_transformer``
    rebuilds the model from the file alone).
    """
    init_key, data_key, noise_key = jax.random.split(jax.random.PRNGKey(seed), 3)
    eval_key = jax.random.fold_in(noise_key, tc.steps)  # past every training step's fold_in(noise_key, i)
    data = dict(meta or {})
    spec = run_spec(config, tc, seed, data)
    model = Transformer(config, key=init_key)
    opt_state = _optimizer(tc).init(eqx.filter(model, eqx.is_array))
    step = _step_fn(tc)
    order = np.asarray(jax.random.randint(data_key, (tc.steps, tc.batch_size), 0, len(train_split.tokens)))
    start = 0
    if resume and ckpt_path and os.path.exists(ckpt_path):
        saved = check_resumable(ckpt_path, spec)
        (model, opt_state), _ = checkpoint.load(ckpt_path, (model, opt_state))
        start = saved["step"]
    if log_path:
        prune_log(log_path, config.variant, seed, start)
    if mesh is not None:
        model, opt_state = replicate((model, opt_state), mesh)
    put = jnp.asarray if mesh is None else functools.partial(shard_batch, mesh=mesh)
    t0 = time.perf_counter()
    rec = None
    losses = []  # (step, loss) since the last evaluation, checked there
    bar = progress_bar(range(start, tc.steps), desc=desc, progress=progress, leave=False, mininterval=1.0)
    for i in bar:
        if stop_after is not None and i >= stop_after:
            break
        idx = order[i]
        model, opt_state, loss = step(model, opt_state, put(train_split.tokens[idx]),
                                      put(train_split.targets[idx]), jax.random.fold_in(noise_key, i))
        losses.append((i + 1, loss))
        last = i + 1 == tc.steps
        if (i + 1) % tc.eval_every == 0 or last:
            bad, last_i, last_loss = _scan_losses(losses)
            if bad is not None:
                raise _diverged(bad, last_i, last_loss, tc.lr)
            losses = losses[-1:]  # the last finite loss, for the message of a later failure
            n_ev = None if last else tc.eval_limit
            ev = evaluate(model, test_split.tokens[:n_ev], test_split.targets[:n_ev], tc.eval_batch,
                          jax.random.fold_in(eval_key, i), mesh)
            rec = {"step": i + 1, "train_loss": float(loss), "test_loss": ev["loss"], "test_acc": ev["acc"],
                   "test_ppl": math.exp(min(ev["loss"], 50.0)), "eval_count": ev["count"],
                   "variant": config.variant, "seed": seed, "wall_s": time.perf_counter() - t0}
            if not all(math.isfinite(rec[k]) for k in ("test_loss", "test_acc")):
                raise TrainingDivergedError(
                    f"evaluation at step {i + 1} gave a non-finite test loss ({ev['loss']}) although the training "
                    f"loss is finite ({float(loss):.6g}); the model's outputs overflow. Lower the learning rate.")
            bar.set_postfix(loss=f"{float(loss):.3f}", acc=f"{ev['acc']:.3f}")
            # log first: a kill between the two resumes from the previous checkpoint, and
            # prune_log then drops the row that is about to be repeated
            if log_path:
                atomic.append_line(log_path, json.dumps(rec, allow_nan=False))
            if ckpt_path:
                checkpoint.save(ckpt_path, (model, opt_state),
                                {**data, "step": i + 1, "seed": seed, "metrics": rec, "spec": spec,
                                 "train": spec["train"], "model": spec["model"]})
    return model, rec


def compare_variants(make_config, data_for_seed, variants: Sequence[str], seeds: Sequence[int], tc: TrainConfig,
                     out_dir: str, progress: bool = True, resume: bool = False, mesh=None, metric: str = "test_acc",
                     meta: Optional[dict] = None, logged: Sequence[str] = ()) -> dict[str, dict[int, float]]:
    """Train every (seed, variant) pair; returns ``results[variant][seed] = final metrics[metric]``.

    ``make_config(variant) -> Config``; ``data_for_seed(seed) -> (train, test)``.
    Metrics go to ``out_dir/metrics.jsonl``, checkpoints to ``out_dir/ckpt-<variant>-s<seed>.npz``.
    With ``resume`` finished runs are read back and unfinished ones continue, after every
    existing checkpoint has been checked against its run's spec (nothing is trained or
    written if one differs). The caller owns ``out_dir`` (``isingattn.models.app.runlock.FolderLock``).
    ``mesh``: see ``train``. ``logged``: variants whose finished rows in ``metrics.jsonl``
    stand for runs without a checkpoint (checkpoints are not committed, so a fresh clone
    of ``results/`` has only the log); the caller vouches that the log was written under
    this very configuration.
    """
    runs = [(s, v) for s in seeds for v in variants]
    log_path = os.path.join(out_dir, "metrics.jsonl")
    ckpt = lambda v, s: os.path.join(out_dir, f"ckpt-{v}-s{s}.npz")
    saved = {}
    if resume:  # check them all first: a mismatch found halfway would leave a mixed folder
        for seed, variant in runs:
            if os.path.exists(ckpt(variant, seed)):
                spec = run_spec(make_config(variant), tc, seed, meta)
                saved[seed, variant] = check_resumable(ckpt(variant, seed), spec)
    os.makedirs(out_dir, exist_ok=True)
    results: dict[str, dict[int, float]] = {v: {} for v in variants}
    outer = progress_bar(runs, desc="runs", progress=progress)
    for seed, variant in outer:
        outer.set_postfix(seed=seed, variant=variant)
        done = saved.get((seed, variant))
        if done is None and variant in logged and not os.path.exists(ckpt(variant, seed)):
            done = finished_in_log(log_path, variant, seed, tc.steps)
        if done is not None and done["step"] >= tc.steps:
            results[variant][seed] = done["metrics"][metric]
            continue
        train_split, test_split = data_for_seed(seed)
        _, rec = train(make_config(variant), train_split, test_split, tc, seed,
                       log_path=log_path, desc=f"{variant} seed {seed}", progress=progress,
                       ckpt_path=ckpt(variant, seed), resume=resume, mesh=mesh, meta=meta)
        results[variant][seed] = rec[metric]
    return results
