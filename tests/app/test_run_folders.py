"""Run folders: kill-and-resume is bit-identical, resumes refuse another configuration,
a second writer is refused, metrics are strict JSON, divergence is named.

The kill test is real: a child process is SIGKILLed (by itself, at a chosen point
inside the library's own write path) and later children resume the folder.
"""

import glob
import json
import os
import subprocess
import sys
import textwrap

import jax
import numpy as np
import pytest

from isingattn import atomic
from isingattn.models import checkpoint
from isingattn.errors import RunFolderError, TrainingDivergedError
from isingattn.models.app.experiments import Cell, run_cell
from isingattn.models.app.runlock import FolderLock

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TINY = dict(variants=("softmax", "hJ"), seeds=1, steps=40, eval_every=10, d_model=8, types=2, n_train=200,
            n_test=40, batch_size=16)

CHILD = textwrap.dedent("""
    import os, sys, signal
    import jax
    jax.config.update("jax_enable_x64", True)
    jax.config.update("jax_compilation_cache_dir", sys.argv[3])
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
    import numpy as np
    from isingattn import atomic
    from isingattn.models.app.experiments import Cell, run_cell

    kill = sys.argv[2]  # "", "savez:K" (inside the K-th checkpoint write), "replace:NAME:K"
                        # (the K-th rename onto NAME: its temporary file is complete, not yet in place)
                        # or "appended:K" (after the K-th metrics row, before its checkpoint)
    calls = {"n": 0}

    def hit(k):
        calls["n"] += 1
        if calls["n"] == int(k):
            os.kill(os.getpid(), signal.SIGKILL)

    if kill.startswith("savez:"):
        real = np.savez
        def savez(f, **arrays):
            f.write(b"PK\\x03\\x04 half a zip")
            f.flush()
            hit(kill.split(":")[1])
            real(f, **arrays)
        np.savez = savez
    elif kill.startswith("replace:"):
        _, name, k = kill.split(":")
        real_replace = os.replace
        def replace(src, dst):
            if os.path.basename(dst) == name:
                hit(k)
            real_replace(src, dst)
        os.replace = replace
    elif kill.startswith("appended:"):
        real_append = atomic.append_line
        def append_line(path, line):
            real_append(path, line)
            if path.endswith("metrics.jsonl"):
                hit(kill.split(":")[1])
        atomic.append_line = append_line
    cell = Cell("brackets", "brackets", 6, **TINY)
    run_cell(cell, sys.argv[1], progress=False)
    print("finished")
""").replace("**TINY", "**" + repr(TINY))


def _child(tmp_path, folder, kill=""):
    script = tmp_path / "child.py"
    script.write_text(CHILD)
    env = {**os.environ, "XLA_FLAGS": os.environ.get("XLA_FLAGS", "")}
    return subprocess.run([sys.executable, str(script), str(folder), kill, str(tmp_path / "jaxcache")],
                          capture_output=True, text=True, env=env, timeout=600)


def _rows(folder):
    rows = [json.loads(line) for line in open(os.path.join(folder, "metrics.jsonl"))]
    for r in rows:
        r.pop("wall_s")  # the one field that is a timing, not a result
    return rows


def _ckpt(path):
    meta = checkpoint.read_meta(path)
    meta["metrics"].pop("wall_s")
    with np.load(path, allow_pickle=False) as z:
        arrays = {k: z[k] for k in z.files if k != "__meta__"}
    return meta, arrays


@pytest.mark.slow
def test_killed_runs_resume_bit_identical(tmp_path):
    ref, run = tmp_path / "uninterrupted", tmp_path / "killed"
    assert "finished" in _child(tmp_path, ref).stdout
    kills = ["savez:3",  # inside softmax's step-30 checkpoint write (half a zip on disk)
             "appended:2",  # resumed at step 20: after the step-40 row, before the step-40 checkpoint
             "replace:metrics.jsonl:2",  # resumed at 30: the step-40 row's log rewrite, complete, not renamed
             "replace:ckpt-hJ-s0.npz:2"]  # hJ's step-30 checkpoint, complete but not renamed
    for kill in kills:
        p = _child(tmp_path, run, kill)
        assert p.returncode == -9, (kill, p.returncode, p.stderr[-2000:])
    leftovers = glob.glob(str(run / ".isingattn-*.tmp"))
    assert leftovers, "the kills should have left temporary files for the resume to sweep"
    for _ in range(2):  # resumed twice: the second finds everything finished
        p = _child(tmp_path, run)
        assert p.returncode == 0 and "finished" in p.stdout, p.stderr[-3000:]
    assert sorted(os.listdir(run)) == sorted(os.listdir(ref))  # no temporary files, no lock left
    assert _rows(run) == _rows(ref)  # every metric, in order, no duplicate rows
    keys = [(r["variant"], r["seed"], r["step"]) for r in _rows(run)]
    assert len(keys) == len(set(keys)) == 8
    assert json.load(open(run / "results.json")) == json.load(open(ref / "results.json"))
    for name in ("ckpt-softmax-s0.npz", "ckpt-hJ-s0.npz"):
        (meta_a, arr_a), (meta_b, arr_b) = _ckpt(run / name), _ckpt(ref / name)
        assert meta_a == meta_b and meta_a["step"] == 40
        assert arr_a.keys() == arr_b.keys()
        for k in arr_a:  # every leaf of the model and the optimizer state
            np.testing.assert_array_equal(arr_a[k], arr_b[k])
            assert arr_a[k].dtype == arr_b[k].dtype


def _cell(**kw):
    return Cell("brackets", "brackets", **{"seq_len": 6, **TINY, "variants": ("softmax",), "steps": 20, **kw})


def test_resume_metadata_is_the_new_one_and_a_changed_config_is_refused(tmp_path):
    from isingattn.models import brackets
    from isingattn.models.train import TrainConfig, train
    from isingattn.models.transformer import Config

    d = brackets.make_data(jax.random.PRNGKey(0), 6, n_train=100, n_test=20, num_types=2)
    cfg = Config(vocab_size=4, seq_len=6, n_out=6, d_model=8, variant="h")
    tc = TrainConfig(steps=20, batch_size=8, eval_every=5, warmup=2)
    ck, log = str(tmp_path / "ck.npz"), str(tmp_path / "m.jsonl")
    train(cfg, d.train, d.test, tc, seed=1, progress=False, ckpt_path=ck, log_path=log, stop_after=10,
          meta={"task": "x"})
    train(cfg, d.train, d.test, tc, seed=1, progress=False, ckpt_path=ck, log_path=log, resume=True,
          meta={"task": "x"})
    meta = checkpoint.read_meta(ck)
    # the old bug: the resumed run kept saving the pre-kill metadata (step 10) over the new
    assert meta["step"] == 20 and meta["metrics"]["step"] == 20 and meta["task"] == "x"
    steps = [json.loads(line)["step"] for line in open(log)]
    assert steps == [5, 10, 15, 20]
    for changed, field in ((dict(tc=TrainConfig(steps=20, batch_size=8, eval_every=5, warmup=2, lr=1e-2)), "train.lr"),
                           (dict(cfg=Config(vocab_size=4, seq_len=6, n_out=6, d_model=16, variant="h")),
                            "model.d_model"),
                           (dict(meta={"task": "y"}), "data.task")):
        args = {**dict(cfg=cfg, tc=tc, meta={"task": "x"}), **changed}
        with pytest.raises(RunFolderError, match=field.replace(".", r"\.") + ".*--restart"):
            train(args["cfg"], d.train, d.test, args["tc"], seed=1, progress=False, ckpt_path=ck, resume=True,
                  meta=args["meta"])
    with pytest.raises(RunFolderError, match="seed"):
        train(cfg, d.train, d.test, tc, seed=2, progress=False, ckpt_path=ck, resume=True, meta={"task": "x"})


def test_cell_folder_refuses_other_settings_and_restart_starts_over(tmp_path):
    out = str(tmp_path / "cell")
    first = run_cell(_cell(), out, progress=False)
    before = open(os.path.join(out, "metrics.jsonl")).read()
    # cell.json records the commit that trained it: this checkout's HEAD, asked of git here
    head = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True, text=True)
    (code,) = json.load(open(os.path.join(out, "cell.json")))["code"]
    assert code["commit"] == (head.stdout.strip() if head.returncode == 0 else None)
    for other, field in ((dict(lr=1e-2), "lr"), (dict(engine="meanfield"), "engine"), (dict(n_train=150), "n_train")):
        with pytest.raises(RunFolderError, match=f"{field}.*--restart"):
            run_cell(_cell(**other), out, progress=False)
        assert open(os.path.join(out, "metrics.jsonl")).read() == before  # refused before writing
    with pytest.raises(RunFolderError, match="--resume"):  # a folder with runs is not silently overwritten
        run_cell(_cell(), out, progress=False, resume=False)
    assert run_cell(_cell(seeds=2), out, progress=False)["softmax"][0] == first["softmax"][0]  # more seeds extend
    log = open(os.path.join(out, "metrics.jsonl")).read()
    two = json.load(open(os.path.join(out, "results.json")))
    # fewer seeds never shrink the folder: results.json (what the report reads) keeps seed 1, nothing is retrained
    assert run_cell(_cell(seeds=1), out, progress=False)["softmax"].keys() == {0, 1}
    assert json.load(open(os.path.join(out, "results.json"))) == two
    assert json.load(open(os.path.join(out, "cell.json")))["seeds"] == 2
    assert open(os.path.join(out, "metrics.jsonl")).read() == log
    again = run_cell(_cell(lr=1e-2), out, progress=False, restart=True)
    assert again["softmax"][0] != first["softmax"][0]
    assert json.load(open(os.path.join(out, "cell.json")))["lr"] == 1e-2
    assert {json.loads(line)["seed"] for line in open(os.path.join(out, "metrics.jsonl"))} == {0}


def test_a_clone_without_checkpoints_extends_a_cell_from_its_log(tmp_path):
    """Checkpoints are not committed: a fresh clone of results/ has only metrics.jsonl and
    config.json. Finished runs logged under the same configuration are not retrained; any
    other run is, from scratch, with no row repeated."""
    out = str(tmp_path / "cell")
    wanted = run_cell(_cell(seeds=2), str(tmp_path / "whole"), progress=False)  # the reference: one uninterrupted folder
    run_cell(_cell(), out, progress=False)
    rows = lambda: [json.loads(line) for line in open(os.path.join(out, "metrics.jsonl"))]
    seed0 = rows()
    for p in glob.glob(os.path.join(out, "ckpt-*.npz")):
        os.remove(p)
    assert run_cell(_cell(seeds=2), out, progress=False) == wanted
    assert [r for r in rows() if r["seed"] == 0] == seed0  # read from the log, wall_s and all: not retrained

    for p in glob.glob(os.path.join(out, "ckpt-*.npz")):
        os.remove(p)
    config = json.load(open(os.path.join(out, "config.json")))
    config["models"]["softmax"]["d_model"] += 1  # a log written under another configuration
    json.dump(config, open(os.path.join(out, "config.json"), "w"))
    with open(os.path.join(out, "metrics.jsonl"), "a") as f:  # and a killed run of seed 2, with no checkpoint
        f.write(json.dumps({**seed0[0], "seed": 2}) + "\n")
    assert run_cell(_cell(seeds=3), out, progress=False)["softmax"] == {
        **wanted["softmax"], 2: run_cell(_cell(seeds=3), str(tmp_path / "whole"), progress=False)["softmax"][2]}
    again = [r for r in rows() if r["seed"] == 0]
    assert [r["step"] for r in again] == [r["step"] for r in seed0]  # retrained once, no row twice
    assert [r["wall_s"] for r in again] != [r["wall_s"] for r in seed0]
    assert [r["step"] for r in rows() if r["seed"] == 2] == [r["step"] for r in seed0]


def test_second_writer_is_refused_and_stale_locks_are_taken_over(tmp_path):
    out = str(tmp_path / "cell")
    with FolderLock(out):
        with pytest.raises(RunFolderError, match="in use by another process.*pid"):
            run_cell(_cell(), out, progress=False)
        # a second process too (flock is per open file, and across processes)
        code = ("import sys\nfrom isingattn.models.app.runlock import FolderLock\nfrom isingattn.errors import RunFolderError\n"
                f"try:\n    FolderLock({out!r}).acquire()\nexcept RunFolderError as e:\n    print('refused', e)\n")
        assert "refused" in subprocess.run([sys.executable, "-c", code], capture_output=True, text=True).stdout
    # a holder killed with SIGKILL leaves its lock file behind; the kernel dropped its lock
    code = f"import os\nfrom isingattn.models.app.runlock import FolderLock\nFolderLock({out!r}).acquire()\nos.kill(os.getpid(), 9)\n"
    assert subprocess.run([sys.executable, "-c", code]).returncode == -9
    assert os.path.exists(os.path.join(out, ".lock"))
    open(os.path.join(out, atomic.TMP_PREFIX + "x.json.1" + atomic.TMP_SUFFIX), "w").write("{")  # an orphan
    with FolderLock(out) as lock:
        assert [os.path.basename(p) for p in lock.swept] == [atomic.TMP_PREFIX + "x.json.1" + atomic.TMP_SUFFIX]
    assert not os.path.exists(os.path.join(out, ".lock"))


def test_divergence_is_named_and_metrics_stay_strict_json(tmp_path):
    from isingattn.models import brackets
    from isingattn.models.train import TrainConfig, train
    from isingattn.models.transformer import Config

    d = brackets.make_data(jax.random.PRNGKey(0), 6, n_train=100, n_test=20, num_types=2)
    cfg = Config(vocab_size=4, seq_len=6, n_out=6, d_model=8, variant="hJ")
    tc = TrainConfig(steps=30, batch_size=8, eval_every=10, warmup=1, grad_clip=1e30, lr=1e30)
    ck, log = str(tmp_path / "ck.npz"), str(tmp_path / "m.jsonl")
    with pytest.raises(TrainingDivergedError, match=r"diverged at step \d+: .*(no step had a finite loss|the last "
                                                    r"finite loss was [-\d.e+]+ at step \d+)"):
        train(cfg, d.train, d.test, tc, seed=0, progress=False, ckpt_path=ck, log_path=log)
    for line in (open(log) if os.path.exists(log) else []):
        json.loads(line, parse_constant=lambda c: pytest.fail(f"bare {c} in metrics.jsonl"))
    if os.path.exists(ck):
        meta, arrays = _ckpt(ck)
        assert all(np.isfinite(a).all() for k, a in arrays.items() if a.dtype.kind == "f")
    with pytest.raises(ValueError, match="JSON"):
        atomic.write_json(str(tmp_path / "x.json"), {"loss": float("nan")})


@pytest.mark.parametrize("field,value", [("steps", 0), ("steps", -5), ("batch_size", 0), ("eval_every", 0),
                                         ("lr", float("nan")), ("lr", 0.0), ("lr", -1e-3), ("lr", "0.01"),
                                         ("steps", 2.5), ("steps", True), ("grad_clip", float("inf"))])
def test_train_config_rejects_meaningless_settings(field, value):
    from isingattn.errors import IsingInputError
    from isingattn.models.train import TrainConfig

    with pytest.raises(IsingInputError, match=field):
        TrainConfig(**{field: value})


@pytest.mark.parametrize("field,value", [("seeds", 0), ("seeds", -1), ("variants", ()), ("variants", ("nope",)),
                                         ("n_test", 0), ("n_train", 0), ("types", 0), ("depth", 0), ("seq_len", 0),
                                         ("seq_len", 3), ("seq_len", -4), ("heads", 0), ("d_model", 0),
                                         ("lr", float("nan"))])
def test_cell_rejects_meaningless_settings(field, value):
    from isingattn.errors import IsingInputError

    with pytest.raises(IsingInputError, match=field if field != "variants" else "variant"):
        _cell(**{field: value})


def test_a_task_too_small_for_a_test_set_is_refused(tmp_path):
    from isingattn.errors import IsingInputError

    with pytest.raises(IsingInputError, match="0 test strings"):  # seq_len=2, one bracket kind: one string in all
        run_cell(_cell(seq_len=2, types=1, n_train=10, n_test=10), str(tmp_path / "c"), progress=False)
    assert not (tmp_path / "c" / "metrics.jsonl").exists()


def test_cells_saved_before_weight_decay_on_read_as_decaying_everything(tmp_path):
    import dataclasses

    out = tmp_path / "legacy"
    out.mkdir()
    legacy = dataclasses.asdict(_cell(weight_decay_on="all"))
    legacy.pop("weight_decay_on")  # a cell.json written before the field existed
    (out / "cell.json").write_text(json.dumps(legacy))
    with pytest.raises(RunFolderError, match="weight_decay_on: 'all' -> 'matrices'"):
        run_cell(_cell(), str(out), progress=False)
    assert run_cell(_cell(weight_decay_on="all"), str(out), progress=False)["softmax"][0] > 0.3
