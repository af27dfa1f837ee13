"""Every CLI verb, driven through its bad inputs: exit status 2, one line on stderr that
names the option and the value, no traceback, and nothing trained or written.

The table runs in-process (``isingattn.cli.run(argv)``, fast); a few rows also run
through a real ``python -m isingattn.cli`` to show the console script prints no
traceback end to end. Crafted checkpoints (a real one from a 2-step training, with
edited metadata) check that untrusted metadata is refused before a model is built.
"""

import argparse
import glob
import json
import os
import subprocess
import sys

import jax
import numpy as np
import pytest

from isingattn.models import checkpoint
from isingattn.cli import HelpFormatter
from isingattn.cli import build_parser, run

OUT = "{out}"  # replaced by a fresh folder per row
CKPT = "{ckpt}"  # the hJ checkpoint of a real 2-step training
SOFTMAX = "{softmax}"  # the softmax checkpoint of the same training
CRAFTED = "{crafted}"  # a copy of CKPT with the row's metadata edits
FILE = "{file}"  # an existing regular file
RO = "{ro}"  # a read-only folder

# Tiny settings, so that a row whose input were wrongly accepted would finish in seconds.
TINY = ["--steps", "2", "--d-model", "8", "--seeds", "1", "--eval-every", "1", "--no-progress", "--out", OUT]
BR = ["train", "brackets", *TINY, "--seq-len", "4", "--types", "2", "--n-train", "40", "--n-test", "20"]
SH = ["train", "shakespeare", *TINY, "--seq-len", "4"]
RP = ["reproduce", "--quick", "--no-progress", "--out", OUT]
CMP = ["compare", "--n", "6", "--engines", "exact"]
EXP = ["export-bqm", CKPT, "--text", "()", "--query", "1", "--out", OUT + "/q.bqm"]

# (id, argv, substrings the one-line message must contain: the option and the value)
CASES = [
    # train brackets
    ("steps-0", BR + ["--steps", "0"], ["--steps", "'0'"]),
    ("steps-neg", BR + ["--steps", "-5"], ["--steps", "'-5'"]),
    ("steps-not-int", BR + ["--steps", "ten"], ["--steps", "'ten'"]),
    ("seq-len-0", BR + ["--seq-len", "0"], ["--seq-len", "'0'", "even"]),
    ("seq-len-1", BR + ["--seq-len", "1"], ["--seq-len", "'1'", "even"]),
    ("seq-len-3", BR + ["--seq-len", "3"], ["--seq-len", "'3'", "even"]),
    ("seq-len-neg", BR + ["--seq-len", "-3"], ["--seq-len", "'-3'"]),
    ("seq-len-2-no-test-set", BR + ["--seq-len", "2"], ["--seq-len 2", "test set"]),
    ("seq-len-too-long-for-exact", BR + ["--seq-len", "30", "--variants", "hJ"], ["--seq-len 30", "exact", "24"]),
    ("variant-unknown", BR + ["--variants", "softmax,bogus"], ["--variants", "'bogus'", "softmax, hJ, h, J"]),
    ("variants-empty", BR + ["--variants", ""], ["--variants", "no variant", "softmax, hJ, h, J"]),
    ("variants-twice", BR + ["--variants", "h,h"], ["--variants", "'h,h'", "twice"]),
    ("engine-unknown", BR + ["--engine", "nonsense"], ["--engine nonsense", "available", "gibbs"]),
    ("engine-kw-unknown-key", BR + ["--engine-kw", "bogus=1"], ["--engine-kw bogus=1", "'bogus'", "max_n"]),
    ("engine-kw-not-pairs", BR + ["--engine-kw", "bogus"], ["--engine-kw", "'bogus'", "key=value"]),
    ("engine-kw-dimod-string", BR + ["--engine", "dimod", "--engine-kw", "num_sweeps=abc"],
     ["--engine-kw num_sweeps=abc", "SimulatedAnnealingSampler refused"]),
    ("engine-kw-dimod-negative", BR + ["--engine", "dimod", "--engine-kw", "num_sweeps=-1"],
     ["--engine-kw num_sweeps=-1", "num_sweeps"]),
    ("eval-every-0", BR + ["--eval-every", "0"], ["--eval-every", "'0'"]),
    ("heads-0", BR + ["--heads", "0"], ["--heads", "'0'"]),
    ("heads-not-dividing", BR + ["--heads", "3"], ["--heads 3", "--d-model 8", "divide"]),
    ("batch-size-0", BR + ["--batch-size", "0"], ["--batch-size", "'0'"]),
    ("d-model-0", BR + ["--d-model", "0"], ["--d-model", "'0'"]),
    ("types-0", BR + ["--types", "0"], ["--types", "'0'"]),
    ("types-5", BR + ["--types", "5"], ["--types 5", "1..4"]),
    ("n-train-0", BR + ["--n-train", "0"], ["--n-train", "'0'"]),
    ("n-test-0", BR + ["--n-test", "0"], ["--n-test", "'0'"]),
    ("depth-0", BR + ["--depth", "0"], ["--depth", "'0'"]),
    ("banded-without-band", BR + ["--J-param", "banded"], ["--J-param banded", "--J-band"]),
    ("band-on-full", BR + ["--J-band", "2"], ["--J-band 2", "full"]),
    ("J-param-unknown", BR + ["--J-param", "diagonal"], ["--J-param", "'diagonal'"]),
    ("seeds-0", BR + ["--seeds", "0"], ["--seeds", "'0'"]),
    ("seeds-neg", BR + ["--seeds", "-1"], ["--seeds", "'-1'"]),
    ("lr-nan", BR + ["--lr", "nan"], ["--lr", "'nan'"]),
    ("lr-inf", BR + ["--lr", "inf"], ["--lr", "'inf'"]),
    ("lr-0", BR + ["--lr", "0"], ["--lr", "'0'"]),
    ("lr-neg", BR + ["--lr", "-0.001"], ["--lr", "'-0.001'"]),
    ("devices-0", BR + ["--devices", "0"], ["--devices", "'0'"]),
    ("devices-too-many", BR + ["--devices", "4096"], ["--devices 4096", "device"]),
    ("out-under-a-file", BR + ["--out", FILE + "/run"], ["--out", "is a file"]),
    ("out-read-only", BR + ["--out", RO + "/run"], ["--out", "not writable"]),
    ("unknown-option", BR + ["--stepz", "3"], ["--stepz"]),
    # train shakespeare
    ("sh-seq-len-0", SH + ["--seq-len", "0"], ["--seq-len", "'0'"]),
    ("sh-seq-len-neg", SH + ["--seq-len", "-3"], ["--seq-len", "'-3'"]),
    ("sh-steps-0", SH + ["--steps", "0"], ["--steps", "'0'"]),
    ("sh-variant-unknown", SH + ["--variants", "hj"], ["--variants", "'hj'"]),
    ("sh-engine-unknown", SH + ["--engine", "nonsense"], ["--engine nonsense", "available"]),
    ("sh-lr-nan", SH + ["--lr", "nan"], ["--lr", "'nan'"]),
    ("sh-heads-not-dividing", SH + ["--heads", "3"], ["--heads 3", "--d-model 8"]),
    ("sh-out-under-a-file", SH + ["--out", FILE + "/run"], ["--out", "is a file"]),
    ("sh-data-missing", SH + ["--data", "{missing}"], ["--data", "{missing}", "no such file"]),
    # reproduce
    ("rp-only-unknown", RP + ["--only", "nonsense"], ["--only nonsense", "brackets"]),
    ("rp-seq-len-99", RP + ["--seq-len", "99"], ["--seq-len 99", "8"]),
    ("rp-engine-unknown", RP + ["--engine", "nonsense"], ["--engine nonsense", "gibbs"]),
    ("rp-cell-unknown", RP + ["--cell", "brackets/T9"], ["--cell brackets/T9", "brackets/T8"]),
    ("rp-seeds-0", RP + ["--seeds", "0"], ["--seeds", "'0'"]),
    ("rp-seeds-neg", RP + ["--seeds", "-2"], ["--seeds", "'-2'"]),
    ("rp-ffn-bad", RP + ["--ffn", "maybe"], ["--ffn", "'maybe'"]),
    ("rp-out-under-a-file", RP[:-1] + [FILE + "/reproduce"], ["--out", "is a file"]),
    ("rp-out-read-only", RP[:-1] + [RO + "/reproduce"], ["--out", "not writable"]),
    # analyze
    ("an-missing-file", ["analyze", OUT + "/none.npz"], ["none.npz"]),
    ("an-softmax", ["analyze", SOFTMAX, "--out", OUT], ["'softmax'", "no learned couplings"]),
    ("an-threshold-neg", ["analyze", CKPT, "--threshold", "-1"], ["--threshold", "'-1'"]),
    ("an-threshold-nan", ["analyze", CKPT, "--threshold", "nan"], ["--threshold", "'nan'"]),
    ("an-out-under-a-file", ["analyze", CKPT, "--out", FILE + "/an"], ["--out", "is a file"]),
    ("an-out-read-only", ["analyze", CKPT, "--out", RO + "/an"], ["--out", "not writable"]),
    ("an-meta-seq-len-30000", ["analyze", CRAFTED, "--out", OUT], ["seq_len=30000", "leaf_00001", "(30000, 8)"]),
    # a million layers would be traced one by one before the shapes could be compared
    ("an-meta-layers-10^6", ["analyze", CRAFTED, "--out", OUT], ["n_layers=1000000", "arrays"]),
    ("an-meta-engine-unknown", ["analyze", CRAFTED, "--out", OUT], ["engine", "'nonsense'", "available"]),
    ("an-meta-engine-setting", ["analyze", CRAFTED, "--out", OUT], ["'bogus'", "max_n"]),
    ("an-meta-d-model-neg", ["analyze", CRAFTED, "--out", OUT], ["d_model", "-8"]),
    ("an-meta-variant", ["analyze", CRAFTED, "--out", OUT], ["variant", "'hj'"]),
    ("an-meta-step-string", ["analyze", CRAFTED, "--out", OUT], ["'step'", "'ten'"]),
    ("an-meta-no-model", ["analyze", CRAFTED, "--out", OUT], ["no model config"]),
    ("an-meta-model-not-dict", ["analyze", CRAFTED, "--out", OUT], ["model config", "list"]),
    ("an-meta-missing-field", ["analyze", CRAFTED, "--out", OUT], ["seq_len"]),
    ("an-object-array", ["analyze", CRAFTED, "--out", OUT], ["object"]),
    # export-bqm
    ("ex-query-neg", EXP[:4] + ["--query", "-1"] + EXP[6:], ["--query", "'-1'"]),
    ("ex-query-past-text", EXP[:4] + ["--query", "5"] + EXP[6:], ["--query", "5"]),
    ("ex-head-neg", EXP + ["--head", "-1"], ["--head", "'-1'"]),
    ("ex-head-too-big", EXP + ["--head", "3"], ["--head", "3"]),
    ("ex-text-not-vocab", EXP[:2] + ["--text", "xyz"] + EXP[4:], ["'x'", "vocabulary"]),
    ("ex-softmax", [EXP[0], SOFTMAX] + EXP[2:], ["softmax"]),
    ("ex-out-is-folder", EXP[:-1] + [OUT], ["--out", "folder"]),
    ("ex-out-under-a-file", EXP[:-1] + [FILE + "/q.bqm"], ["--out", "is a file"]),
    ("ex-missing-required", ["export-bqm", CKPT, "--query", "1", "--out", OUT + "/q.bqm"], ["--text"]),
    ("ex-meta-chars", [EXP[0], CRAFTED] + EXP[2:], ["'chars'"]),
    # compare
    ("cmp-n-0", CMP + ["--n", "0"], ["--n", "'0'"]),
    ("cmp-n-neg", CMP + ["--n", "-3"], ["--n", "'-3'"]),
    ("cmp-n-30-no-exact-reference", ["compare", "--n", "30"], ["--n 30", "no exact reference", "--reference", "24"]),
    ("cmp-n-30-exact-reference", ["compare", "--n", "30", "--reference", "exact"], ["--n 30", "--reference", "24"]),
    ("cmp-n-30-engine-too-small", ["compare", "--n", "30", "--reference", "gibbs"], ["--engines", "exact", "24"]),
    ("cmp-engine-unknown", CMP[:-1] + ["exact,nope"], ["--engines", "'nope'", "available"]),
    ("cmp-engines-empty", CMP[:-1] + [","], ["--engines", "no engine"]),
    ("cmp-reference-unknown", CMP + ["--reference", "nope"], ["--reference nope", "available"]),
    ("cmp-graph-spec-bad", CMP + ["--graph", "lattice:axb"], ["--graph lattice:axb", "lattice:LxW"]),
    ("cmp-graph-spec-side-0", CMP + ["--graph", "lattice:0x4"], ["--graph lattice:0x4", "side length"]),
    ("cmp-tree-with-kw", CMP + ["--reference", "tree", "--reference-kw", "a=1"], ["--reference-kw", "tree"]),
    ("cmp-reference-kw-unknown", CMP + ["--reference", "gibbs", "--reference-kw", "nope=1"], ["--reference gibbs", "nope"]),
    ("cmp-sparse-needs-dense", ["compare", "--graph", "lattice:256x256", "--engines", "exact,gibbs", "--reference", "tree"],
     ["lattice:256x256", "exact", "GiB", "meanfield"]),
    ("cmp-sparse-exact-reference", ["compare", "--graph", "lattice:8x8", "--engines", "meanfield-bp", "--reference",
                                    "exact"], ["--graph lattice:8x8 (n = 64)", "--reference tree"]),
    ("cmp-beta-0", CMP + ["--beta", "0"], ["--beta", "'0'"]),
    ("cmp-beta-nan", CMP + ["--beta", "nan"], ["--beta", "'nan'"]),
    ("cmp-h-scale-neg", CMP + ["--h-scale", "-1"], ["--h-scale", "'-1'"]),
    ("cmp-seed-neg", CMP + ["--seed", "-1"], ["--seed", "'-1'"]),
    ("cmp-graph-missing", CMP + ["--graph", "nothere.bqm"], ["--graph nothere.bqm", "dense"]),
    ("cmp-graph-corrupt", CMP + ["--graph", FILE], ["--graph", "could not read"]),
    ("cmp-out-under-a-file", CMP + ["--out", FILE + "/o"], ["--out", "is a file"]),
    ("cmp-out-read-only", CMP + ["--out", RO + "/o"], ["--out", "not writable"]),
    ("no-verb", [], ["required"]),
    ("unknown-verb", ["trian"], ["'trian'"]),
]

# metadata edits for the CRAFTED rows: meta -> meta
CRAFT = {
    "an-meta-seq-len-30000": lambda m: {**m, "model": {**m["model"], "seq_len": 30000}},
    "an-meta-layers-10^6": lambda m: {**m, "model": {**m["model"], "n_layers": 10**6}},
    "an-meta-engine-unknown": lambda m: {**m, "model": {**m["model"], "engine": {"name": "nonsense", "config": {}}}},
    "an-meta-engine-setting": lambda m: {**m, "model": {**m["model"], "engine": {"name": "exact",
                                                                                 "config": {"bogus": 1}}}},
    "an-meta-d-model-neg": lambda m: {**m, "model": {**m["model"], "d_model": -8}},
    "an-meta-variant": lambda m: {**m, "model": {**m["model"], "variant": "hj"}},
    "an-meta-step-string": lambda m: {**m, "step": "ten"},
    "an-meta-no-model": lambda m: {k: v for k, v in m.items() if k != "model"},
    "an-meta-model-not-dict": lambda m: {**m, "model": [1, 2]},
    "an-meta-missing-field": lambda m: {**m, "model": {k: v for k, v in m["model"].items() if k != "seq_len"}},
    "an-object-array": lambda m: m,
    "ex-meta-chars": lambda m: {**m, "chars": 7},
}


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A real training run (2 steps, T=4, hJ and softmax): its checkpoints."""
    out = str(tmp_path_factory.mktemp("trained"))
    rc = run(["train", "brackets", "--steps", "2", "--seq-len", "4", "--types", "2", "--d-model", "8",
              "--variants", "hJ,softmax", "--seeds", "1", "--n-train", "40", "--n-test", "20", "--eval-every", "2",
              "--no-progress", "--out", out])
    assert rc == 0
    ckpts = {os.path.basename(p).split("-")[1]: p for p in glob.glob(os.path.join(out, "ckpt-*.npz"))}
    assert set(ckpts) == {"hJ", "softmax"}
    return ckpts


def _leaves(path):
    with np.load(path) as z:
        return [z[k] for k in sorted(k for k in z.files if k.startswith("leaf_"))]


def _craft(src, dst, case):
    leaves = _leaves(src)
    if case == "an-object-array":  # an array only pickle could load, in place of the first leaf
        np.savez(dst, **{f"leaf_{i:05d}": x for i, x in enumerate([np.array([{"a": 1}], object), *leaves[1:]])},
                 __meta__=np.frombuffer(json.dumps(checkpoint.read_meta(src)).encode(), np.uint8))
        return
    checkpoint.save(dst, leaves, CRAFT[case](checkpoint.read_meta(src)))


def _writable(folder):
    try:
        open(os.path.join(folder, "probe"), "w").close()
    except OSError:
        return False
    os.remove(os.path.join(folder, "probe"))
    return True


def _read_only_folder(root):
    """A folder nobody may write in: a chmod 555 one, or (for root, whom permissions do
    not stop) a folder that would have to be created in /proc, where no file can be."""
    ro = os.path.join(root, "ro")
    os.makedirs(ro)
    os.chmod(ro, 0o555)
    if not _writable(ro):
        return ro
    proc = "/proc/isingattn-no-such-folder"  # never exists, so no path below it resolves anywhere writable
    if os.path.isdir("/proc") and not _writable("/proc") and not os.path.exists(proc):
        return proc
    return None


def _argv(argv, tmp_path, trained, case):
    out = tmp_path / "out"
    out.mkdir()
    (tmp_path / "file").write_text("a regular file\n")
    ro = _read_only_folder(str(tmp_path)) if any(RO in a for a in argv) else ""
    if ro is None:
        pytest.skip("no read-only folder exists here (root ignores permissions and /proc is absent)")
    crafted = str(tmp_path / "crafted.npz")
    if any(CRAFTED in a for a in argv):
        _craft(trained["hJ"], crafted, case)
    subs = {OUT: str(out), CKPT: trained["hJ"], SOFTMAX: trained["softmax"], CRAFTED: crafted,
            FILE: str(tmp_path / "file"), RO: ro or "", "{missing}": str(tmp_path / "no-input.txt")}
    return [_fill(a, subs) for a in argv], subs


def _fill(a, subs):
    for k, v in subs.items():
        a = a.replace(k, v)
    return a


def _assert_one_line(rc, err, must):
    assert rc == 2, err
    assert "Traceback" not in err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert "error:" in lines[0]
    for m in must:
        assert m in lines[0], (m, lines[0])
    # numpy's advice to unpickle must never reach the user
    assert "allow_pickle" not in lines[0] and "pickle.load" not in lines[0]


@pytest.mark.parametrize("case,argv,must", CASES, ids=[c[0] for c in CASES])
def test_bad_input_is_one_line_and_exit_2(case, argv, must, tmp_path, trained, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("ISINGATTN_DATA", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))  # no cached corpus
    argv, subs = _argv(argv, tmp_path, trained, case)
    must = [_fill(m, subs) for m in must]
    before = sorted(os.listdir(subs[OUT]))
    rc = run(argv)
    _assert_one_line(rc, capsys.readouterr().err, must)
    assert sorted(os.listdir(subs[OUT])) == before  # refused before anything was written
    assert not os.path.exists(tmp_path / "runs")


def test_crafted_seq_len_is_refused_before_a_model_is_built(tmp_path, trained, monkeypatch):
    """A file claiming seq_len 30000 must not cost a (H, 30000, 30000) template: the stored
    shapes are compared with the config's before any concrete model exists."""
    from isingattn.models import saved

    path = str(tmp_path / "big.npz")
    _craft(trained["hJ"], path, "an-meta-seq-len-30000")
    built = []
    real = saved.Transformer

    def spy(config, *, key):  # records every concrete construction (jax.eval_shape's are abstract)
        model = real(config, key=key)
        if isinstance(model.pos_emb, np.ndarray) or not isinstance(model.pos_emb, jax.core.Tracer):
            built.append(config.seq_len)
        return model

    monkeypatch.setattr(saved, "Transformer", spy)
    with pytest.raises(checkpoint.CheckpointError, match=r"leaf_00001 is \(4, 8\) .* needs \(30000, 8\)"):
        saved.load_transformer(path)
    assert built == []
    model, _ = saved.load_transformer(trained["hJ"])  # the untouched file still loads (and builds once)
    assert built == [4] and model.config.seq_len == 4


def _cli(*args, cwd):
    return subprocess.run([sys.executable, "-m", "isingattn.cli", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=300)


def test_console_script_prints_no_traceback(tmp_path, trained):
    """End to end through the interpreter: an argparse error, a library refusal, a crafted checkpoint."""
    crafted = str(tmp_path / "crafted.npz")
    _craft(trained["hJ"], crafted, "an-meta-d-model-neg")
    for args, must in [(["train", "brackets", "--steps", "0"], ["--steps", "'0'"]),
                       (["compare", "--n", "30"], ["--n 30", "--reference"]),
                       (["analyze", crafted], ["d_model", "-8"])]:
        p = _cli(*args, cwd=tmp_path)
        _assert_one_line(p.returncode, p.stderr, must)
        assert p.stdout == ""
    assert os.listdir(tmp_path) == ["crafted.npz"]


def _walk(parser, path=()):
    """(command path, parser) for the top parser and every subparser below it."""
    yield path, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from _walk(sub, path + (name,))


def test_every_option_has_help_and_an_honest_default():
    fmt = HelpFormatter("isingattn")
    walked = list(_walk(build_parser()))
    assert {p for p, _ in walked} >= {("train", "brackets"), ("train", "shakespeare"), ("reproduce",), ("analyze",),
                                      ("export-bqm",), ("compare",)}
    for path, parser in walked:
        assert parser.formatter_class is HelpFormatter, path
        for action in parser._actions:
            if isinstance(action, argparse._HelpAction):
                continue
            where = (path, action.dest)
            assert action.help and action.help != argparse.SUPPRESS, where
            shown = fmt._get_help_string(action)
            if action.nargs == 0:  # flags: a default of True/False says nothing about what the flag does
                assert "%(default)" not in shown, where
            elif action.option_strings and action.default not in (None, "") and not action.required:
                assert "(default: %(default)s)" in shown, where
            elif action.option_strings and not action.required:  # no default to show: the help says it in words
                assert "without it" in action.help or "(default" in action.help, where
    text = dict(walked)[("train", "brackets")].format_help()
    no_ffn = text[text.index("\n  --no-ffn"): text.index("\n  --engine ")]  # its entry, not the usage line
    assert "default" not in no_ffn and "drop the FFN" in no_ffn
    assert "(default: 1500)" in text  # --steps


def test_library_refusals_name_the_argument():
    """What the CLI relies on, called directly: unknown names list the valid ones."""
    import inspect

    from isingattn.engine import available, from_spec, get
    from isingattn.errors import IsingInputError
    from isingattn.inference.exact import Exact
    from isingattn.instances import random_model
    from isingattn.models.transformer import Config

    with pytest.raises(IsingInputError) as e:
        get("nonsense")
    assert all(name in str(e.value) for name in available())
    with pytest.raises(IsingInputError) as e:
        get("exact", bogus=1)
    assert "'bogus'" in str(e.value) and all(k in str(e.value) for k in inspect.signature(Exact).parameters)
    with pytest.raises(IsingInputError, match="'bogus'.*damping"):
        get("meanfield-bp", bogus=1)  # a factory: the settings of the class it builds
    for spec in (None, {"config": {}}, {"name": ["exact"]}, {"name": "exact", "config": [1]}):
        with pytest.raises(IsingInputError):
            from_spec(spec)
    base = dict(vocab_size=4, seq_len=4, n_out=4, d_model=8)
    for field, bad in (("d_model", 0), ("seq_len", -1), ("n_heads", 3), ("vocab_size", "4"), ("ffn", "yes"),
                       ("beta", float("nan")), ("variant", "hj"), ("J_band", 0)):
        with pytest.raises(IsingInputError, match=field):
            Config(**{**base, field: bad})
    with pytest.raises(IsingInputError, match="J_band"):
        Config(**base, J_param="banded")
    rng = np.random.default_rng(0)
    for kw, field in ((dict(n=0), "n"), (dict(n=-3), "n"), (dict(n=4, graph="ring"), "graph"),
                      (dict(n=4, h_scale=float("nan")), "h_scale"), (dict(n=4, J_scale=-1.0), "J_scale")):
        with pytest.raises(IsingInputError, match=field):
            random_model(rng, **kw)
