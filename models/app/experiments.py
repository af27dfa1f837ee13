"""The paper's experiments as a resumable grid of cells (``isingattn reproduce``).

A :class:`Cell` is one table cell of the paper: a task at one context length, every
variant, several paired seeds. Running a cell trains what is missing (checkpoints
make it resumable run by run), then writes its summary. :func:`report` rebuilds the
tables and plots of every finished cell from the files alone, so ``results/`` is
generated, never edited.
"""

from __future__ import annotations

import csv
import dataclasses
import glob
import json
import math
import os
import time
from typing import Optional

import jax

from isingattn import atomic
from isingattn import validate as V
from isingattn.engine import get
from isingattn.errors import IsingInputError, RunFolderError
from isingattn.models import brackets, mqar, shakespeare
from isingattn.models.app.cells import METRIC, wall_seconds  # METRIC: per task, the metric, its label and its scale
from isingattn.models.app.report import markdown_table, summary_rows
from isingattn.models.saved import config_to_dict
from isingattn.models.train import compare_variants, TrainConfig
from isingattn.models.runs import RECORDS, cell_record, run_spec, saved_spec, spec_differences
from isingattn.models.transformer import Config
from isingattn.models.app.runlock import FolderLock

VARIANTS = ("softmax", "hJ", "h", "J")
BRACKET_TASKS = ("brackets", "brackets-hard")
# What a Cell leaves at None, per task. brackets-hard: each kind is its own Dyck word, shuffled with the
# others, so the closer's kind selects which tokens matter (a query-independent average cannot); filler tokens;
# test shapes never seen in training; 1000 training strings, so that softmax is not at its ceiling at T=16.
# The measurements behind these values: docs/study-protocol.md, "The bracket tasks".
TASK_DEFAULTS = {"shakespeare": {"n_train": 20000}, "brackets": {"n_train": 20000},
                 "brackets-hard": {"n_train": 1000, "filler": 0.25, "split": "shape", "interleaved": True},
                 "mqar": {"n_train": 20000, "pairs": 8, "mqar_vocab": 65}}
HELDOUT = ("test", "valid")  # what a cell scores its runs on (the logs call it test_acc either way)


@dataclasses.dataclass(frozen=True)
class Cell:
    """One experiment: ``task`` at context ``seq_len``, ``variants`` x ``seeds`` paired runs."""

    part: str  # the --only group: shakespeare, brackets or annealing
    task: str  # shakespeare or brackets
    seq_len: int
    variants: tuple = VARIANTS
    seeds: int = 3
    steps: int = 1500
    ffn: bool = True
    engine: str = "exact"
    engine_kw: tuple = ()  # sorted (key, value) pairs, hashable
    batch_size: int = 64
    lr: float = 3e-3
    d_model: int = 64
    heads: int = 1
    layers: int = 1  # Transformer blocks (Config.n_layers)
    eval_every: int = 250
    types: int = 3  # bracket kinds
    depth: Optional[int] = None  # bracket nesting (default T/2)
    n_train: Optional[int] = None  # training strings (None: the task's, TASK_DEFAULTS: 20000, or 1000 for brackets-hard)
    n_test: int = 2000
    J_param: str = "full"  # J parametrization: full, toeplitz or banded (Config.J_param)
    J_band: Optional[int] = None  # its bandwidth (Config.J_band)
    weight_decay_on: str = "matrices"  # TrainConfig.weight_decay_on: matrices, matrices+J or all
    rel_bias: bool = False  # a learned relative-position field per head (Config.rel_bias): the positional control
    # brackets-hard only (None: the task's, TASK_DEFAULTS; the brackets task has none of them):
    filler: Optional[float] = None  # chance that a step is a filler token (brackets.sample_dyck)
    split: Optional[str] = None  # "shape": test shapes unseen in training; "string": test strings unseen
    interleaved: Optional[bool] = None  # each kind its own Dyck word (brackets.sample_dyck)
    # the study's controls: a learned position-pair field, dropout, weight decay, the first seed, the scored split, MQAR
    pair_bias: bool = False  # a learned field per head and position pair (Config.pair_bias): the pairwise control
    dropout: float = 0.0  # Config.dropout
    weight_decay: float = 0.01  # TrainConfig.weight_decay
    seed0: int = 0  # the seeds are seed0 .. seed0 + seeds - 1 (more seeds for a cell of another part)
    heldout: str = "test"  # "valid": scored on a validation split drawn like the test set, apart from it (tuning)
    pairs: Optional[int] = None  # mqar only: key-value pairs per string
    mqar_vocab: Optional[int] = None  # mqar only: vocabulary (blank, keys, values)

    def __post_init__(self):
        if self.task in TASK_DEFAULTS:  # the task's own values for what was left at None (frozen: set them directly)
            for name, value in TASK_DEFAULTS[self.task].items():
                if getattr(self, name) is None:
                    object.__setattr__(self, name, value)
        if self.weight_decay_on not in ("matrices", "matrices+J", "all"):
            raise IsingInputError(f"weight_decay_on must be matrices, matrices+J or all; got {self.weight_decay_on!r}.")
        if self.task not in METRIC:
            raise IsingInputError(f"task must be one of {sorted(METRIC)}; got {self.task!r}.")
        if not self.variants:
            raise IsingInputError(f"variants must name at least one of {', '.join(VARIANTS)}; got none.")
        unknown = [v for v in self.variants if v not in VARIANTS]
        if unknown:
            raise IsingInputError(f"unknown variant(s) {unknown}; choose from {', '.join(VARIANTS)}.")
        for name in ("seeds", "steps", "batch_size", "d_model", "heads", "layers", "eval_every", "types", "n_train",
                     "n_test"):
            V.positive_int(name, getattr(self, name), owner="Cell")
        for name in ("depth", "J_band"):
            if getattr(self, name) is not None:
                V.positive_int(name, getattr(self, name), owner="Cell")
        V.boolean("rel_bias", self.rel_bias, owner="Cell")
        V.boolean("pair_bias", self.pair_bias, owner="Cell")
        V.float_in("dropout", self.dropout, 0.0, 1.0, hi_open=True, owner="Cell")
        V.float_in("weight_decay", self.weight_decay, 0.0, owner="Cell")
        V.nonneg_int("seed0", self.seed0, owner="Cell")
        V.choice("heldout", self.heldout, HELDOUT, owner="Cell")
        if (self.pairs is not None or self.mqar_vocab is not None) != (self.task == "mqar"):
            raise IsingInputError("pairs and mqar_vocab apply to task 'mqar' (and it needs both).")
        if self.task == "mqar":
            mqar.check(self.seq_len, self.pairs, self.mqar_vocab)
        self._check_hard()
        low = 2 if self.task in BRACKET_TASKS else 1
        even = self.task in BRACKET_TASKS and not self.filler  # filler tokens can pad a string to any length
        if isinstance(self.seq_len, bool) or not isinstance(self.seq_len, int) or self.seq_len < low or (
                even and self.seq_len % 2):
            need = "an even integer >= 2 (a bracket string has as many closers as openers)" if even \
                else "an integer >= 2" if low == 2 else "an integer >= 1"
            raise IsingInputError(f"seq_len must be {need} for {self.task}; got {self.seq_len!r}.")
        V.positive_float("lr", self.lr, owner="Cell")

    def _check_hard(self):
        """filler, split and interleaved: brackets-hard's settings, meaningless elsewhere."""
        names = ("filler", "split", "interleaved")
        if self.task != "brackets-hard":
            given = [f"{n}={getattr(self, n)!r}" for n in names if getattr(self, n) is not None]
            if given:
                raise IsingInputError(f"{', '.join(given)} apply to task 'brackets-hard' only; task {self.task!r} "
                                      "keeps its own data. Use Cell(..., task='brackets-hard', ...) or leave them None.")
            return
        V.float_in("filler", self.filler, 0.0, 1.0, hi_open=True, owner="Cell")
        V.choice("split", self.split, brackets.SPLITS, owner="Cell")
        V.boolean("interleaved", self.interleaved, owner="Cell")

    @property
    def name(self) -> str:
        implied = ("exact", "banded") if self.J_param != "full" else ("exact",)  # Banded is how a band is run
        tail = ("" if self.ffn else "-noffn") + ("" if self.engine in implied else f"-{self.engine}")
        if self.engine == "dimod":  # calibrated or raw reads, a mock QPU or the sampler alone
            kw = dict(self.engine_kw)
            tail += ("-cal" if kw.get("calibrate") else "-raw") + ("-mock" if str(kw.get("sampler", "")).startswith(
                "mock") else "")
            tail += "-rb" if kw.get("rao_blackwell") else ""
        if self.engine_kw and self.engine == "meanfield":
            tail += "-" + dict(self.engine_kw).get("method", "naive")
        if self.J_param != "full" or self.J_band is not None:
            tail += f"-{self.J_param}{'' if self.J_band is None else self.J_band}"
        if (self.layers, self.heads) != (1, 1):
            tail += f"-{self.layers}x{self.heads}"
        if self.weight_decay_on == "matrices+J":
            tail += "-decayJ"
        if self.rel_bias:
            tail += "-relbias"
        return f"{self.part}/T{self.seq_len}{tail}{self._controls_tail()}"

    def _controls_tail(self) -> str:
        """The name's tail for the controls' fields (empty at their defaults, so older names stay)."""
        tail = "-pairbias" if self.pair_bias else ""
        if self.task == "mqar":
            tail += f"-n{self.pairs}-v{self.mqar_vocab}"
        if self.task == "mqar" or self.part == "capacity":  # where cells of one part differ in width
            tail += "" if self.d_model == 64 else f"-d{self.d_model}"
        tail += "" if self.lr == 3e-3 else f"-lr{self.lr:g}"
        tail += "" if self.weight_decay == 0.01 else f"-wd{self.weight_decay:g}"
        tail += "" if not self.dropout else f"-do{self.dropout:g}"
        tail += "" if self.heldout == "test" else f"-{self.heldout}"
        return tail + ("" if not self.seed0 else f"-s{self.seed0}")

    def config(self, variant: str, vocab_size: int) -> Config:
        n_out = vocab_size if self.task in ("shakespeare", "mqar") else self.seq_len
        return Config(vocab_size=vocab_size, seq_len=self.seq_len, n_out=n_out, d_model=self.d_model,
                      n_heads=self.heads, n_layers=self.layers, ffn=self.ffn, variant=variant,
                      engine=get(self.engine, **dict(self.engine_kw)), J_param=self.J_param, J_band=self.J_band,
                      rel_bias=self.rel_bias, pair_bias=self.pair_bias, dropout=self.dropout)

    def train_config(self) -> TrainConfig:
        return TrainConfig(steps=self.steps, batch_size=self.batch_size, lr=self.lr, eval_every=self.eval_every,
                           eval_limit=2048 if self.task == "shakespeare" else None,
                           weight_decay=self.weight_decay, weight_decay_on=self.weight_decay_on)


GRID_DECAY = "all"
# Cell fields added after cells were committed, with the value those cells were run with.
LEGACY_CELL = {"weight_decay_on": "all", "J_param": "full", "filler": None, "split": None, "interleaved": None, "layers": 1,
               "rel_bias": False, "pair_bias": False, "dropout": 0.0, "weight_decay": 0.01, "seed0": 0,
               "heldout": "test", "pairs": None, "mqar_vocab": None}


def grid(quick: bool = False) -> list[Cell]:
    """The paper's grid, or a small one that finishes in minutes on 2 CPU cores.

    Its cells decay every array (``weight_decay_on="all"``), as the committed results
    in ``results/reproduce`` were trained, so that rerunning them reproduces those numbers."""
    if quick:
        cells = [Cell("shakespeare", "shakespeare", 8, seeds=1, steps=300, eval_every=100),
                 Cell("brackets", "brackets", 8, seeds=1, steps=200, eval_every=100),
                 Cell("annealing", "brackets", 8, variants=("hJ",), seeds=1, steps=200, eval_every=100, engine="gibbs",
                      engine_kw=(("num_samples", 64), ("num_warmup", 32)))]
        return [dataclasses.replace(c, weight_decay_on=GRID_DECAY) for c in cells]
    cells = [Cell("shakespeare", "shakespeare", T, seeds=3, steps=2000) for T in (4, 8, 12, 16)]
    cells += [Cell("brackets", "brackets", T, seeds=5, ffn=ffn) for T in (8, 12, 16, 20) for ffn in (True, False)]
    # DQA: uncalibrated (calibration's pseudo-likelihood fits cost ~17x the anneal itself),
    # Rao-Blackwellized (the plain shot mean leaves a seed untrained; results/brackets/T8-dqa).
    annealers = {"dqa": (("calibrate", False), ("kl_max_n", 0), ("num_shots", 64), ("rao_blackwell", True)),
                 # SQA: 64 reads x 64 sweeps cost ~13 s/step at T=8 (2 CPU cores); with the
                 # Rao-Blackwellized mean 16 short reads give a usable gradient at ~0.3 s/step.
                 "sqa": (("num_reads", 16), ("num_sweeps", 16), ("rao_blackwell", True), ("thermal_sweeps", 16)),
                 "gibbs": (("num_samples", 64), ("num_warmup", 32))}
    cells += [Cell("annealing", "brackets", T, variants=("hJ",), seeds=3, engine=e, engine_kw=kw)
              for T in (8, 12) for e, kw in annealers.items()]
    return [dataclasses.replace(c, weight_decay_on=GRID_DECAY) for c in cells] + study(annealers)


BAND = 8  # the bandwidth of J at T >= 32: Banded(8) is exact for it (its cost grows as 2^BAND)


def study(annealers: dict) -> list[Cell]:
    """The long-context cells: where do learned couplings help, at long context and on a task with power?

    Every cell decays matrices only (J is not decayed, the setting the ``confounds`` part
    tests). At T >= 32 J is toeplitz or banded with bandwidth ``BAND`` and runs through
    Banded, which is exact for it; softmax, h and J (whose marginals are closed forms)
    are trained once per T, in the toeplitz cell, and the report pairs the banded cell's
    hJ with them. Run them part by part: ``isingattn reproduce --only brackets-hard``."""
    band = dict(engine="banded", engine_kw=(("bandwidth", BAND),), J_band=BAND)
    every = dict(eval_every=100)  # 15-20 points per training curve
    forms = (dict(J_param="toeplitz"), dict(J_param="banded", variants=("hJ",)))
    hard = [Cell("brackets-hard", "brackets-hard", T, seeds=5, ffn=f, **every) for T in (8, 16, 24) for f in (True, False)]
    hard += [Cell("brackets-hard", "brackets-hard", 64, seeds=5, ffn=f, **band, **form, **every)
             for form in forms for f in (True, False)]
    hard += [Cell("annealing-hard", "brackets-hard", T, variants=("hJ",), seeds=5, engine=e, engine_kw=kw, **every)
             for T in (8, 16) for e, kw in annealers.items()]
    # hJ trained through a sampler whose β is hidden (fixed-β SA at β0 = 2.5 that ignores the β it is
    # given), calibrated and raw, against exact-trained hJ; one pooled calibration scale per call (DESIGN.md §3)
    qpu = dict(sampler="hidden-beta:2.5", pool=True, num_reads=64, num_bootstrap=0)
    # and calibrated with the Rao-Blackwellized mean, tanh(β(h + J s)) over the reads (64 plain reads leave
    # calibrated training ~3 points behind exact-trained hJ on seed 0)
    hard += [Cell("annealing-qpu", "brackets-hard", 8, variants=("hJ",), seeds=3, engine="dimod",
                  engine_kw=tuple(sorted({**qpu, **kw}.items())), **every)
             for kw in (dict(calibrate=True), dict(calibrate=False), dict(calibrate=True, rao_blackwell=True))]
    # J decayed toward zero like every matrix, against hJ with J not decayed (brackets-hard, same T and seeds)
    hard += [Cell("confounds", "brackets-hard", 16, variants=("hJ",), seeds=5, weight_decay_on="matrices+J", **every)]
    # the positional control: at T = 64 the learned toeplitz J is a decaying ferromagnet, a locality prior. Does a
    # learned relative-position field (T5-style, per head and distance i - j) give softmax and h what J gives hJ?
    hard += [Cell("positional", "brackets-hard", 64, variants=("softmax", "hJ", "h"), seeds=5, rel_bias=True, **band,
                  J_param="toeplitz", **every)]
    # deeper and wider models may compensate for missing couplings (the paper's own caveat)
    hard += [Cell("depth", "brackets-hard", 16, seeds=3, layers=2, heads=4, **every),
             Cell("depth", "brackets-hard", 64, seeds=3, layers=2, heads=4, **band, J_param="toeplitz", **every)]
    lm = dict(task="shakespeare", seeds=3, steps=2000, **every)
    text = [Cell("shakespeare-long", seq_len=16, variants=("softmax", "hJ", "h"), **lm)]
    text += [Cell("shakespeare-long", seq_len=T, **{"variants": ("softmax", "hJ", "h"), **form}, **band, **lm)
             for T in (32, 64, 128, 256) for form in forms]
    # are 2,000 steps enough? At T >= 64 the curves still fall 1-3% over their last 500 steps: the T = 64 toeplitz
    # cell again, trained 3x as long
    text += [Cell("convergence", seq_len=64, variants=("softmax", "hJ", "h"), J_param="toeplitz", **band,
                  **{**lm, "steps": 6000, "eval_every": 200})]
    # full J through TAP and BP: validated against exact-trained hJ at T = 16, then at T = 32; at T = 64 TAP only
    # (a BP step there is ~90x softmax's at a learned-looking J, benchmarks/README.md; naive MF is slower than TAP)
    text += [Cell("meanfield", seq_len=T, variants=("hJ",), engine="meanfield", engine_kw=(("method", m),), **lm)
             for T, m in ((16, "tap"), (16, "bp"), (32, "tap"), (32, "bp"), (64, "tap"))]
    return hard + text


def select(cells: list[Cell], only: Optional[str] = None, seq_len: Optional[int] = None,
           ffn: Optional[bool] = None, engine: Optional[str] = None, name: Optional[str] = None) -> list[Cell]:
    """The cells of one part, context length, FFN setting, engine or name (``--only``, ``--seq-len``, ...,
    ``--cell``)."""
    if name is not None and name not in {c.name for c in cells}:
        raise IsingInputError(f"--cell must name a cell of the grid, e.g. {cells[0].name}; got {name!r}. "
                              "`isingattn reproduce --only PART` prints the names of that part's cells.")
    parts = {c.part for c in cells}
    if only is not None and only not in parts:
        raise IsingInputError(f"--only must be one of {', '.join(sorted(parts))}; got {only!r}.")
    for flag, value, have in (("--seq-len", seq_len, {c.seq_len for c in cells if only in (None, c.part)}),
                              ("--engine", engine, {c.engine for c in cells if only in (None, c.part)})):
        if value is not None and value not in have:
            raise IsingInputError(f"{flag} must be one of {', '.join(map(str, sorted(have)))}"
                                  f"{'' if only is None else f' for --only {only}'}; got {value!r}.")
    out = [c for c in cells if (only is None or c.part == only) and (seq_len is None or c.seq_len == seq_len)
           and (ffn is None or c.ffn == ffn) and (engine is None or c.engine == engine)
           and (name is None or c.name == name)]
    if not out:
        raise IsingInputError(f"no cell matches --only {only} --seq-len {seq_len}; the grid has "
                         f"{sorted({(c.part, c.seq_len) for c in cells})}.")
    return out


def cell_data(cell: Cell, data_path: Optional[str] = None):
    """``(vocab_size, data_for_seed, task_meta)``: Shakespeare data is the same for every seed."""
    valid = {} if cell.heldout == "test" else {"heldout": cell.heldout, "n_valid": cell.n_test}
    if cell.task == "shakespeare":
        return task_data({"task": "shakespeare"}, cell.seq_len, data_path)
    if cell.task == "mqar":
        return task_data({"task": "mqar", "pairs": cell.pairs, "vocab": cell.mqar_vocab, "n_train": cell.n_train,
                          "n_test": cell.n_test, **valid}, cell.seq_len)
    hard = {} if cell.task == "brackets" else {"filler": cell.filler, "split": cell.split,
                                                "interleaved": cell.interleaved}
    chars = brackets.BRACKETS[: cell.types] + ")]}>"[: cell.types] + ("." if hard.get("filler") else "")
    return task_data({"task": cell.task, "chars": chars, "n_train": cell.n_train, "n_test": cell.n_test,
                      "depth": cell.depth, "types": cell.types, **hard, **valid}, cell.seq_len, data_path)


def task_data(meta: dict, seq_len: int, data_path: Optional[str] = None):
    """``(vocab_size, data_for_seed, task_meta)`` from the task metadata a run saves in its checkpoints
    (``cell_data``'s third value), so that a checkpoint alone rebuilds the data it was trained and tested on."""
    if meta["task"] == "shakespeare":
        chars = shakespeare.encode(shakespeare.load_text(data_path))
        splits = shakespeare.lm_splits(chars, seq_len)
        return len(chars.chars), lambda seed: splits, {"task": "shakespeare", "chars": chars.chars,
                                                       "corpus_sha256": shakespeare.SHA256}
    hard = {k: meta[k] for k in ("filler", "split", "interleaved", "n_valid") if k in meta}
    scored = (lambda d: (d.train, d.valid)) if meta.get("heldout", "test") == "valid" else (lambda d: (d.train, d.test))
    if meta["task"] == "mqar":
        return meta["vocab"], lambda seed: scored(mqar.make_data(jax.random.fold_in(jax.random.PRNGKey(seed), 0x3A7),
            seq_len, meta["pairs"], meta["vocab"], meta["n_train"], meta["n_test"], meta.get("n_valid", 0))), dict(meta)

    def data_for_seed(seed):
        key = jax.random.fold_in(jax.random.PRNGKey(seed), 0xB4AC)
        d = brackets.make_data(key, seq_len, meta["n_train"], meta["n_test"], meta["depth"], meta["types"], **hard)
        if len(d.test.tokens) == 0 or len(d.train.tokens) == 0:
            raise IsingInputError(f"brackets at seq_len={seq_len}, depth={meta['depth']}, types={meta['types']} gave "
                                  f"{len(d.train.tokens)} training and {len(d.test.tokens)} test strings; there are "
                                  "too few distinct strings to hold out a test set. Use a longer seq_len.")
        return scored(d)

    return len(meta["chars"]), data_for_seed, dict(meta)


# What a cell's folder holds besides commands.txt (kept as the folder's history); --restart removes these.
RUN_FILES = ("ckpt-*.npz", "model-*.npz", "metrics.jsonl", "results.json", "wall_time.json", "summary.md",
             "summary.csv", "cell.json", "config.json", "learned-J.json", "attention.json", "attention.png", "J-*.png")
# Cell fields that do not change what a run is: more seeds or other variants extend a folder.
EXTENDABLE = ("seeds", "variants")


def _folder_runs(out: str) -> list[str]:
    return sorted(p for pat in RUN_FILES for p in glob.glob(os.path.join(glob.escape(out), pat)))


def run_cell(cell: Cell, out: str, *, data_path: Optional[str] = None, progress: bool = True,
             command: Optional[str] = None, resume: bool = True, restart: bool = False, mesh=None) -> dict:
    """Train every missing run of ``cell`` in folder ``out`` and write its results.

    The folder is locked for the duration (a second writer gets :class:`RunFolderError`).
    With ``resume`` finished runs are read from their checkpoints and an interrupted run
    continues from its last one; a folder that holds a different configuration is refused,
    naming the fields that differ. ``resume=False`` refuses a folder that already holds
    runs; ``restart=True`` deletes them first (``commands.txt`` is kept). A folder never
    shrinks: asked for fewer ``seeds`` than it holds, it keeps (and reads back) those it holds.
    ``command`` is appended to ``out/commands.txt``. Returns ``results[variant][seed] = metric``."""
    vocab, data_for_seed, meta = cell_data(cell, data_path)  # before touching the folder: a missing corpus writes nothing
    with FolderLock(out):
        existing = _folder_runs(out)
        if restart:
            for p in existing:
                os.remove(p)
        elif existing and not resume:
            raise RunFolderError(f"{out} already holds runs ({len(existing)} files, e.g. "
                                 f"{os.path.basename(existing[0])}). Pass --resume to continue them, --restart to "
                                 "discard them, or write to a new --out.")
        _check_cell(cell, out)
        if not restart:  # fewer seeds than the folder holds would drop finished ones from results.json and the report
            cell = dataclasses.replace(cell, seeds=max(cell.seeds, _held_seeds(out)))
        config = {"cell": dataclasses.asdict(cell), "train": dataclasses.asdict(cell.train_config()),
                  "models": {v: config_to_dict(cell.config(v, vocab)) for v in cell.variants}, "data": meta}
        logged = [] if restart else _logged_variants(out, cell, vocab, meta)
        atomic.write_json(os.path.join(out, "cell.json"), cell_record(dataclasses.asdict(cell), out), indent=2)
        atomic.write_json(os.path.join(out, "config.json"), config, indent=2)  # the full configuration of every run
        if command:
            atomic.append_line(os.path.join(out, "commands.txt"), command)
        metric = METRIC[cell.task][0]
        t0 = time.perf_counter()
        seeds = range(cell.seed0, cell.seed0 + cell.seeds)
        results = compare_variants(lambda v: cell.config(v, vocab), data_for_seed, cell.variants, seeds,
                                   cell.train_config(), out, progress=progress, resume=True, metric=metric,
                                   meta=meta, mesh=mesh, logged=logged)
        _add_wall_time(out, time.perf_counter() - t0)
        atomic.write_json(os.path.join(out, "results.json"),
                          {v: {str(s): x for s, x in r.items()} for v, r in results.items()}, indent=2)
    return results


def _check_cell(cell: Cell, out: str) -> None:
    """Refuse a folder whose cell.json describes another experiment (beyond seeds and variants)."""
    path = os.path.join(out, "cell.json")
    if not os.path.exists(path):
        return
    try:
        old = {**LEGACY_CELL, **json.load(open(path))}
    except ValueError as e:
        raise RunFolderError(f"{path} is not valid JSON ({e}); pass --restart to start this folder over.") from None
    new = json.loads(json.dumps(dataclasses.asdict(cell)))
    diff = [f"{k}: {old.get(k)!r} -> {new.get(k)!r}" for k in sorted(set(old) | set(new))
            if k not in EXTENDABLE and k not in RECORDS and old.get(k) != new.get(k)]
    if diff:
        raise RunFolderError(f"{out} holds another experiment ({'; '.join(diff)}). Write to a new --out, or pass "
                             "--restart to discard its runs and start over.")


def _held_seeds(out: str) -> int:
    """The number of seeds the folder's cell.json declares (0 without one): ``--seeds`` only adds seeds."""
    try:
        return int(json.load(open(os.path.join(out, "cell.json"))).get("seeds", 0))
    except (OSError, ValueError):
        return 0


def _logged_variants(out: str, cell: Cell, vocab: int, meta: dict) -> list[str]:
    """Variants whose logged runs were trained under this very run spec (the folder's
    ``config.json`` says so, read with a checkpoint's defaults for fields added since):
    their finished rows stand for runs whose checkpoints are gone."""
    path = os.path.join(out, "config.json")
    try:
        old = json.load(open(path)) if os.path.exists(path) else {}
    except ValueError:
        return []
    models, tc = old.get("models") or {}, cell.train_config()
    return [v for v in cell.variants if v in models and not spec_differences(
        saved_spec({"spec": {"model": models[v], "train": old.get("train"), "seed": 0, "data": old.get("data")}}),
        run_spec(cell.config(v, vocab), tc, 0, meta))]


def _add_wall_time(out: str, seconds: float):
    path = os.path.join(out, "wall_time.json")
    total = json.load(open(path))["seconds"] if os.path.exists(path) else 0.0
    atomic.write_json(path, {"seconds": total + seconds})


def write_summary(cell: Cell, results: dict, out: str, seconds: float) -> str:
    """``summary.md``, ``summary.csv`` of a finished cell, titled with its logged time (else ``seconds``); returns the md."""
    (_, label, scale), rows = METRIC[cell.task], summary_rows(results)
    logged = wall_seconds(out, {(v, s) for v, r in results.items() for s in r})
    total = seconds if math.isnan(logged) else round(logged, 1)  # rounded as the report rounds it
    title = (f"{cell.task}, T={cell.seq_len}, FFN={'on' if cell.ffn else 'off'}, engine={cell.engine}, "
             f"{cell.steps} steps, {cell.seeds} seeds ({total:.0f} s)\n\n")
    text = title + markdown_table(rows, label, scale=scale)
    atomic.write_text(os.path.join(out, "summary.md"), text)
    with atomic.writing(os.path.join(out, "summary.csv"), "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=sorted({k for r in rows for k in r}))
        w.writeheader()
        w.writerows(rows)
    return text + (f"\n({seconds:.0f} s of it in this run; the rest in earlier runs in {out})\n"
                   if total - seconds >= 1 else "")
