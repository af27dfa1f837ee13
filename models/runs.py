"""Run-folder bookkeeping of training: what defines a run (its spec, stored in each
checkpoint), whether a checkpoint may be resumed, and the rows of ``metrics.jsonl``.

:func:`isingattn.models.train.train` uses it to resume a killed run bit for bit.
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
from typing import Optional

from isingattn import atomic
from isingattn.engine import from_spec, to_spec
from isingattn.errors import IsingInputError, IsingTypeError, RunFolderError
from isingattn.models import checkpoint
from isingattn.models.saved import config_to_dict
from isingattn.models.transformer import Config


def run_spec(config: Config, tc, seed: int, data: Optional[dict] = None) -> dict:
    """Everything that defines one training run, as plain JSON: the model config (engine
    included), the training config, the seed and the data settings. A checkpoint stores
    it, and a resume into a different spec is refused (:func:`spec_differences`)."""
    spec = {"model": config_to_dict(config), "train": dataclasses.asdict(tc), "seed": int(seed), "data": data or {}}
    return json.loads(json.dumps(spec))  # tuples -> lists, as it reads back from disk


def saved_spec(meta: dict) -> dict:
    """The run spec a checkpoint was written for (older checkpoints: rebuilt from their fields)."""
    if isinstance(meta.get("spec"), dict):
        spec = meta["spec"]
    else:
        reserved = {"step", "seed", "metrics", "train", "model", "spec"}
        spec = {"model": meta.get("model"), "train": meta.get("train"), "seed": meta.get("seed"),
                "data": {k: v for k, v in meta.items() if k not in reserved}}
    if isinstance(spec.get("train"), dict) and "weight_decay_on" not in spec["train"]:
        spec = {**spec, "train": {**spec["train"], "weight_decay_on": "all"}}  # saved before the option existed
    if isinstance(spec.get("model"), dict) and "n_layers" not in spec["model"]:
        spec = {**spec, "model": {**spec["model"], "n_layers": 1}}  # saved before Config.n_layers: one layer
    for name, value in (("rel_bias", False), ("pair_bias", False), ("dropout", 0.0)):  # saved before these fields
        if isinstance(spec.get("model"), dict) and name not in spec["model"]:
            spec = {**spec, "model": {**spec["model"], name: value}}
    eng = spec.get("model", {}).get("engine") if isinstance(spec.get("model"), dict) else None
    if isinstance(eng, dict) and isinstance(eng.get("config"), dict):  # engine options added since: their defaults
        try:
            full = to_spec(from_spec(eng))
        except (IsingInputError, IsingTypeError, ValueError, ImportError):
            full = None  # not rebuildable here: compared as saved
        if full is not None and full.get("name") == eng.get("name"):
            spec = {**spec, "model": {**spec["model"], "engine": {**eng, "config": {**full["config"], **eng["config"]}}}}
    return spec


# Engine settings that only bound what an engine accepts (it refuses beyond them), and so cannot
# change a run that finished under them: a new default does not make committed runs another experiment.
BOUNDS = ("max_n",)


def spec_differences(saved: dict, wanted: dict, prefix: str = "") -> list[str]:
    """Dotted names of the fields where two specs differ, e.g. ``['train.lr: 0.003 -> 0.01']``
    (an engine's :data:`BOUNDS` are not compared)."""
    out = []
    for k in sorted(set(saved) | set(wanted), key=str):
        a, b, name = saved.get(k, "<absent>"), wanted.get(k, "<absent>"), f"{prefix}{k}"
        if k in BOUNDS and prefix.endswith("engine.config."):
            continue
        if isinstance(a, dict) and isinstance(b, dict):
            out += spec_differences(a, b, name + ".")
        elif a != b:
            out.append(f"{name}: {_short(a)} -> {_short(b)}")
    return out


def _short(x) -> str:
    text = json.dumps(x) if not isinstance(x, str) else repr(x)
    return text if len(text) <= 60 else text[:57] + "..."


def check_resumable(ckpt_path: str, spec: dict) -> dict:
    """The metadata of checkpoint ``ckpt_path`` if it was written for ``spec``; else RunFolderError
    naming the fields that differ and how to proceed."""
    meta = checkpoint.read_meta(ckpt_path)
    diff = spec_differences(saved_spec(meta), spec)
    if diff:
        raise RunFolderError(
            f"{ckpt_path} belongs to a run with another configuration ({'; '.join(diff[:6])}"
            f"{'; ...' if len(diff) > 6 else ''}). Write to a new --out, or pass --restart to discard the runs "
            "in that folder and start over.")
    step = meta.get("step")
    if isinstance(step, bool) or not isinstance(step, int) or not 0 <= step <= spec["train"]["steps"]:
        raise checkpoint.CheckpointError(f"{ckpt_path}: its step {step!r} is not an integer in "
                                         f"[0, {spec['train']['steps']}]; the file is corrupt or was edited.")
    return meta


def prune_log(log_path: str, variant: str, seed: int, after: int) -> None:
    """Drop this run's rows past step ``after``: a run killed between logging and
    checkpointing repeats those evaluations, which must not appear twice."""
    if not os.path.exists(log_path):
        return
    lines = open(log_path, encoding="utf-8").read().splitlines()
    keep = []
    for line in lines:
        try:
            rec = json.loads(line)
        except ValueError:  # a torn line from a writer killed mid-append (older versions appended in place)
            continue
        if not (rec.get("variant") == variant and rec.get("seed") == seed and rec.get("step", 0) > after):
            keep.append(line)
    if keep != lines:
        atomic.write_text(log_path, "".join(line + "\n" for line in keep))


def finished_in_log(log_path: str, variant: str, seed: int, steps: int) -> Optional[dict]:
    """``{"step", "metrics"}`` of this run's final row in ``log_path`` (step ``steps``), or None."""
    if not os.path.exists(log_path):
        return None
    for line in open(log_path, encoding="utf-8"):
        try:
            rec = json.loads(line)
        except ValueError:
            continue
        if rec.get("variant") == variant and rec.get("seed") == seed and rec.get("step") == steps:
            return {"step": steps, "metrics": rec}
    return None


RECORDS = ("code",)  # keys of cell.json that record a run, not a setting of the cell


def code_version() -> dict:
    """The code that trains: ``{"commit", "dirty", "version"}``, the git commit of the source checkout
    the package runs from (``dirty``: its work tree had uncommitted changes), or None for both outside
    a checkout (an installed wheel), and the package version."""
    import pathlib

    import isingattn

    root = pathlib.Path(__file__).resolve().parents[1]  # <checkout>/models/runs.py
    commit = dirty = None
    if (root / "pyproject.toml").is_file() and (root / "isingattn" / "__init__.py").is_file():
        try:
            # --no-optional-locks: a status that only reads never takes (or, killed, leaves) the index lock
            git = lambda *a: subprocess.run(["git", "--no-optional-locks", "-C", str(root), *a], capture_output=True,
                                            text=True, timeout=60)
            head = git("rev-parse", "HEAD")
            if head.returncode == 0:
                commit = head.stdout.strip()
                dirty = bool(git("status", "--porcelain", "--untracked-files=no").stdout.strip())
        except (OSError, subprocess.SubprocessError):  # no git on this machine
            pass
    return {"commit": commit, "dirty": dirty, "version": isingattn.__version__}


def cell_record(settings: dict, out: str) -> dict:
    """cell.json: the cell's ``settings``, and under ``code`` every code version that has trained in the
    folder, oldest first (a resumed cell may span commits)."""
    path = os.path.join(out, "cell.json")
    try:
        code = json.load(open(path)).get("code", []) if os.path.exists(path) else []
    except ValueError:
        code = []
    now = code_version()
    if not code or code[-1] != now:
        code = [*code, now]
    return {**settings, "code": code}


def command_line(argv: list) -> str:
    """The ``isingattn`` command line ``argv`` (its arguments) as a run folder's commands.txt
    records it. The corpus path is written as ``$ISINGATTN_DATA``: the file is checked by SHA-256,
    so its location does not change a result, and a committed results folder must not point
    outside its repository."""
    out = []
    for i, a in enumerate(argv):
        if i and argv[i - 1] == "--data":
            a = "$ISINGATTN_DATA"
        elif a.startswith("--data="):
            a = "--data=$ISINGATTN_DATA"
        out.append(a)
    return " ".join(["isingattn", *out])
