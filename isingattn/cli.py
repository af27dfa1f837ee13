"""The ``isingattn`` command line: argparse, dispatch to the library, and bad input as one line.

Every bad input ends with one line on stderr (``isingattn: error: ...`` or argparse's ``isingattn <verb>:
error: ...``) that names the option, the value and the fix, and exit status 2; options are checked, and output
folders probed, before any data is loaded or any training starts. ``reproduce`` loads the paper's study from a
source checkout (``study/isingattn_study``). Nothing in the library imports this module; scripts share its
error handling: ``with one_line_errors("my_script.py"): ...``.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import math
import os
import sys
import time

import isingattn
from isingattn.atomic import check_writable
from isingattn.errors import IsingInputError, IsingTypeError

GRAPHS = ("dense", "chain", "lattice")


# -- bad input: one line and exit status 2 -------------------------------------------------------------------------

def expected_errors() -> tuple:
    """The exception types that bad input raises, each reported in one line: the library's, a
    checkpoint that is missing or does not fit, a corpus that is missing or wrong (an offline
    machine without Tiny Shakespeare), and a refusal of the file system. A bug still shows its traceback."""
    from isingattn.models.checkpoint import CheckpointError
    from isingattn.models.shakespeare import DataError

    return IsingInputError, IsingTypeError, CheckpointError, DataError, OSError


def message(error: BaseException) -> str:
    """The one line for ``error``: whitespace collapsed; an ``OSError`` as its reason and file name."""
    if isinstance(error, OSError):  # the file system refused (permissions, a full disk, a vanished file)
        text = f"{error.strerror or error}" + (f": {error.filename!r}" if error.filename else "")
    else:
        text = str(error)
    return " ".join(text.split())


def report(prog: str, error: BaseException) -> int:
    """Print ``<prog>: error: <message>`` on stderr; returns the exit status, 2."""
    print(f"{prog}: error: {message(error)}", file=sys.stderr, flush=True)
    return 2


@contextlib.contextmanager
def one_line_errors(prog: str):
    """Inside the block, an expected error (:func:`expected_errors`) ends the program with one line on
    stderr and exit status 2 (``SystemExit(2)``); any other exception passes through unchanged."""
    try:
        yield
    except expected_errors() as e:
        raise SystemExit(report(prog, e)) from None


# -- argument types: argparse turns an ArgumentTypeError into "argument --x: <message>" ----------------------------

def _checked(convert, ok, what: str):
    def parse(text: str):
        try:
            value = convert(text)
        except ValueError:
            value = None
        if value is None or not ok(value):
            raise argparse.ArgumentTypeError(f"must be {what}; got {text!r}")
        return value

    parse.__name__ = what  # argparse names the type in some messages
    return parse


positive_int_arg = _checked(int, lambda v: v >= 1, "a positive integer")
nonnegative_int_arg = _checked(int, lambda v: v >= 0, "an integer ≥ 0")
positive_float_arg = _checked(float, lambda v: math.isfinite(v) and v > 0, "a finite number > 0")
nonnegative_float_arg = _checked(float, lambda v: math.isfinite(v) and v >= 0, "a finite number ≥ 0")
bracket_length_arg = _checked(int, lambda v: v >= 2 and v % 2 == 0,
                              "an even integer ≥ 2 (a balanced bracket string has even length)")


def seed_arg(text: str) -> int:
    """A random seed: an integer in [0, 2^63 - 1] (what jax.random.PRNGKey takes)."""
    value = nonnegative_int_arg(text)
    if value > 2**63 - 1:
        raise argparse.ArgumentTypeError(f"must be an integer from 0 to 2^63 - 1 = {2**63 - 1}; got {text!r}")
    return value


def names_arg(text: str) -> tuple:
    """'a, b,c' -> ('a', 'b', 'c')."""
    return tuple(t.strip() for t in text.split(",") if t.strip())


def variant_list_arg(text: str) -> tuple:
    from isingattn.attention import VARIANTS

    names = names_arg(text)
    bad = [v for v in names if v not in VARIANTS]
    if not names or bad:
        got = f"unknown variant(s) {', '.join(map(repr, bad))}" if bad else f"no variant in {text!r}"
        raise argparse.ArgumentTypeError(f"{got}; give a comma-separated list of {', '.join(VARIANTS)}")
    if len(set(names)) < len(names):
        raise argparse.ArgumentTypeError(f"lists a variant twice ({text!r}); give each at most once")
    return names


class Parser(argparse.ArgumentParser):
    """An argument error is one line (not the usage block) and exit status 2."""

    def error(self, message):
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


class HelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """Shows every option's default, except a flag's (store_true/store_false: its help says what giving it
    does; "(default: True)" on --no-ffn would read backwards) and a None or empty default (the help says
    in words what happens without the option)."""

    def _get_help_string(self, action):
        if action.nargs == 0 or action.default is None or action.default == "":
            return action.help
        return super()._get_help_string(action)


# -- checks that need more than one option or the library, run before anything is loaded or trained -------------

def engine_from_args(name: str, kw_text: str, option: str = "--engine", kw_option: str = "--engine-kw"):
    """:func:`isingattn.engine.from_text`, its errors quoting the options as given: ``option name kw_option
    kw_text``, or ``kw_option name:kw_text`` where the settings name their engine (compare's --engine-kw)."""
    from isingattn.engine import from_text

    given = (f"{kw_option} {name}:{kw_text}" if option == kw_option
             else f"{option} {name}" + (f" {kw_option} {kw_text}" if kw_text else ""))
    try:
        return from_text(name, kw_text, kw_option)
    except (IsingInputError, IsingTypeError) as e:
        raise IsingInputError(f"{given}: {e}") from None


def study(module: str):
    """``isingattn_study.<module>``, the paper's study, which lives beside the library in a source checkout
    (``study/isingattn_study``), not in an installed wheel; without a checkout, refused in one line."""
    import importlib
    import pathlib

    folder = pathlib.Path(__file__).resolve().parents[1] / "study"  # <checkout>/isingattn/cli.py
    if not (folder / "isingattn_study" / "__init__.py").is_file():
        raise IsingInputError("reproduce runs the paper's study, which lives in a source checkout (study/), not in the "
                              "installed package: clone the repository, then pip install -e . && isingattn reproduce.")
    if str(folder) not in sys.path:
        sys.path.append(str(folder))
    return importlib.import_module(f"isingattn_study.{module}")


def check_train_args(args) -> None:
    """Every option of ``train`` that argparse's types cannot check alone."""
    engine, _ = engine_from_args(args.engine, args.engine_kw)
    coupled, max_n = [v for v in args.variants if v in ("hJ", "J")], getattr(engine, "max_n", None)
    fail = lambda text: IsingInputError(text)
    if coupled and isinstance(max_n, int) and args.seq_len > max_n:
        raise fail(f"--seq-len {args.seq_len} exceeds what --engine {args.engine} solves for the {'/'.join(coupled)} "
                   f"variant(s): at most {max_n} spins (its max_n). Use --seq-len ≤ {max_n}, --engine banded with "
                   "--J-param banded --J-band 8, or an approximate engine (gibbs, sqa, meanfield-bp).")
    if args.d_model % args.heads:
        raise fail(f"--heads {args.heads} must divide --d-model {args.d_model}; pick --heads among the divisors of "
                   f"{args.d_model}.")
    if args.J_param == "banded" and args.J_band is None:
        raise fail("--J-param banded needs --J-band, the largest coupled distance, e.g. --J-band 8.")
    if args.J_param == "full" and args.J_band is not None:
        raise fail(f"--J-band {args.J_band} applies to --J-param banded or toeplitz; a full J has no band.")
    if args.devices is not None:
        import jax

        if args.devices > len(jax.devices()):
            raise fail(f"--devices {args.devices}: only {len(jax.devices())} device(s) are visible to JAX. "
                       "On CPU, fake devices come from XLA_FLAGS=--xla_force_host_platform_device_count=N.")
        if args.batch_size % args.devices:
            raise fail(f"--batch-size {args.batch_size} must be a multiple of --devices {args.devices}.")
    data = getattr(args, "data", None)
    if data is not None and not os.path.isfile(data):
        raise fail(f"--data {data}: no such file; pass the Tiny Shakespeare input.txt, or leave --data out to use "
                   "$ISINGATTN_DATA, the cache or a verified download.")
    if args.task in ("brackets", "brackets-hard"):
        from isingattn.models.brackets import BRACKETS, count_strings

        if args.types > len(BRACKETS):
            raise fail(f"--types {args.types}: there are {len(BRACKETS)} bracket kinds ({BRACKETS}); "
                       f"use --types 1..{len(BRACKETS)}.")
    if args.task == "brackets":  # brackets-hard's fillers and kinds make far more strings than a split needs
        depth = args.seq_len // 2 if args.depth is None else min(args.depth, args.seq_len // 2)
        distinct = min(count_strings(args.seq_len, depth, args.types), 2 * (args.n_train + args.n_test))
        if int(0.2 * distinct) < 1:  # brackets.make_data holds out at most 20% of the distinct strings
            raise fail(f"--seq-len {args.seq_len} --types {args.types} (--depth {depth}, --n-train {args.n_train}, "
                       f"--n-test {args.n_test}) yields at most {distinct} distinct bracket string(s), too few "
                       "for a held-out test set (at most 20% are held out); use a longer --seq-len, more --types, "
                       "or a larger --n-train.")


def cell_from_args(args, task: str):
    """The :class:`~isingattn.models.app.experiments.Cell` that ``train``'s options describe (its fields are
    their destinations), every model config built, so that its checks run before any data is loaded."""
    from isingattn.engine import parse_settings
    from isingattn.models.app.experiments import Cell

    fields = {f.name for f in dataclasses.fields(Cell)} - {"part", "engine_kw"}
    cell = Cell(part=task, engine_kw=tuple(sorted(parse_settings(args.engine_kw, "--engine-kw").items())),
                **{k: v for k, v in vars(args).items() if k in fields})
    for v in cell.variants:  # the vocabulary does not change what is valid
        cell.config(v, 2 * args.types + 1 if task != "shakespeare" else 1)
    cell.train_config()
    return cell


# -- the verbs -----------------------------------------------------------------------------------------------------

def _train(args) -> int:
    from isingattn.models.app.experiments import run_cell, write_summary
    from isingattn.models.runs import command_line

    check_train_args(args)
    cell = cell_from_args(args, args.task)
    out = args.out or os.path.join("runs", f"{args.task}-T{args.seq_len}{'' if args.ffn else '-noffn'}")
    check_writable(out, "--out")
    t0 = time.perf_counter()
    mesh = None
    if args.devices:
        from isingattn.sharding import data_mesh

        mesh = data_mesh(args.devices)
    results = run_cell(cell, out, data_path=getattr(args, "data", None), progress=not args.no_progress,
                       command=command_line(args.argv), resume=args.resume, mesh=mesh, restart=args.restart)
    print("\n" + write_summary(cell, results, out, time.perf_counter() - t0))
    print(f"wrote {out}/summary.md, summary.csv, results.json, metrics.jsonl, ckpt-*.npz")
    return 0


def _reproduce(args) -> int:
    from isingattn.models.runs import command_line

    reproduce = study("reproduce").reproduce
    root = args.out or ("runs/reproduce-quick" if args.quick else "results/reproduce")
    check_writable(root, "--out")
    reproduce(root, quick=args.quick, only=args.only, seq_len=args.seq_len, engine=args.engine, cell=args.cell,
              ffn=None if args.ffn is None else args.ffn == "on", seeds=args.seeds, data=args.data,
              report_only=args.report_only, restart=args.restart, progress=not args.no_progress,
              command=command_line(args.argv))
    return 0


def _analyze(args) -> int:
    from isingattn.analysis import analyze_heads
    from isingattn.models.saved import load_transformer

    # runs/analyze/<two parent folders>-<stem>, never next to the checkpoint (which may sit in results/)
    parts = os.path.normpath(os.path.abspath(args.checkpoint)).split(os.sep)
    out = args.out or (os.path.join("runs", "analyze", "-".join([p for p in parts[-3:-1] if p]
                                                                 + [os.path.splitext(parts[-1])[0]]))
                       + (f"-layer{args.layer}" if args.layer else ""))
    check_writable(out, "--out")
    model, _ = load_transformer(args.checkpoint)
    variant, L = model.config.variant, model.config.n_layers
    if variant not in ("hJ", "J"):  # refused rather than drawing all-zero plots a script could read as a success
        raise IsingInputError(f"{args.checkpoint} holds a {variant!r} model, which has no learned couplings (J ≡ 0): "
                              "nothing to analyze. Pass a checkpoint of the hJ or J variant (e.g. ckpt-hJ-s0.npz).")
    if args.layer >= L:
        raise IsingInputError(f"--layer {args.layer}: {args.checkpoint} has {L} layer(s); use --layer 0..{L - 1}.")
    print(analyze_heads(model.blocks[args.layer].attn.couplings(), out, args.threshold, f"variant {variant}")[1])
    print(f"wrote {out}/summary.json and J-head*.png (heatmap, distance profile, coupling graph)")
    return 0


def _evaluate(args) -> int:
    from isingattn import atomic
    from isingattn.models.app.evaluate import describe, evaluate_checkpoint

    if args.json:
        check_writable(args.json, "--json", is_file=True)
    if args.engine_kw and not args.engine:
        raise IsingInputError(f"--engine-kw {args.engine_kw} needs --engine (the engine it configures), e.g. "
                              "--engine gibbs.")
    engine = engine_from_args(args.engine, args.engine_kw)[0] if args.engine else None
    result = evaluate_checkpoint(args.checkpoint, engine=engine, keys=args.keys, data_path=args.data)
    print(describe(result))
    if args.json:
        atomic.write_json(args.json, {"checkpoint": args.checkpoint, **result}, indent=2)
        print(f"wrote {args.json}")
    return 0


def _export_bqm(args) -> int:
    from isingattn.convert import save_bqm
    from isingattn.models.query_model import query_model
    from isingattn.models.saved import load_transformer

    check_writable(args.out, "--out", is_file=True)
    ising = query_model(*load_transformer(args.checkpoint), args.text, args.query, head=args.head, layer=args.layer)
    bqm = ising.to_bqm()
    save_bqm(bqm, args.out)
    print(f"wrote {args.out}: {len(bqm.variables)} spins, {len(bqm.quadratic)} couplings, beta={float(ising.beta):g} "
          f"(query {args.query}, head {args.head}, layer {args.layer}); "
          "load with dimod.BinaryQuadraticModel.from_file(open(path, 'rb')).")
    return 0


def _compare(args) -> int:
    import jax
    import numpy as np

    from isingattn.compare import EXACT_MAX_N, choose_reference, compare, format_table, save_comparison
    from isingattn.inference import available, get
    from isingattn.instances import exact_log_z, model_from_graph

    fail = lambda text: IsingInputError(text)
    if not args.engines:
        raise fail(f"--engines names no engine; give a comma-separated list of {', '.join(available())}.")
    unknown = [e for e in args.engines if e not in available()]
    if unknown:
        raise fail(f"--engines {','.join(args.engines)}: unknown engine(s) {', '.join(map(repr, unknown))}; "
                   f"available: {', '.join(available())}.")
    if args.reference not in available() and args.reference not in ("tree", "auto"):
        raise fail(f"--reference {args.reference}: unknown engine; available: auto (the exact engine that applies), "
                   f"tree (dwave-samplers' TreeDecompositionSampler, exact for low treewidth), {', '.join(available())}.")
    if args.reference_kw and args.reference in ("tree", "auto"):
        raise fail(f"--reference-kw: the {args.reference} reference takes no settings.")
    # compare reads a graph's band from the graph (a strip wider than Banded's default 8 still works)
    banded_kw = lambda name, kw: kw if name != "banded" or "bandwidth=" in kw else ",".join(filter(None, [kw, "bandwidth=null"]))
    reference = ref_name = args.reference
    if args.reference not in ("exact", "tree", "auto"):
        reference = engine_from_args(args.reference, banded_kw(args.reference, args.reference_kw), "--reference",
                                     "--reference-kw")[0]
    if args.out:
        check_writable(args.out, "--out")
    graph = dict(graph=args.graph, beta=args.beta, couplings=args.couplings, h_scale=args.h_scale, J_scale=args.j_scale)
    try:
        model = model_from_graph(**graph, n=args.n, seed=args.seed)
    except IsingInputError as e:  # those about the graph start with it; a BQM's own refusal is passed on as it is
        if not str(e).startswith(f"{args.graph}: "):
            raise
        raise fail(f"--graph {e}") from None
    reason, given = "", f"--n {model.n}" if args.graph in GRAPHS else f"--graph {args.graph} (n = {model.n})"
    if args.reference == "auto":  # the exact engine that applies, and why
        try:
            ref_name, reference, reason = choose_reference(model)
        except IsingInputError as e:
            raise fail(f"{given}: {e} Or pass --reference tree (low treewidth), or use --n ≤ {EXACT_MAX_N}.") from None
    engine_kw = {}
    for item in args.engine_kw:
        name, colon, kw = item.partition(":")
        if not colon or name not in args.engines:
            raise fail(f"--engine-kw {item}: expected ENGINE:key=value,... naming one of --engines "
                       f"({', '.join(args.engines)}), e.g. sqa:num_reads=8.")
        engine_kw[name] = ",".join(filter(None, [engine_kw.get(name, ""), kw]))
    engines = {name: engine_from_args(name, banded_kw(name, engine_kw.get(name, "")), "--engine-kw")[0]
               for name in args.engines}
    if model.is_sparse:  # engines without an edge-list path would densify J: refuse them before any work
        from isingattn.model import DENSE_LIMIT_BYTES

        runs = dict(engines, **({ref_name: reference} if ref_name not in ("exact", "tree") else {}))
        heavy = sorted(name for name, e in runs.items() if not e.sparse_native)
        if heavy and model.dense_J_bytes > DENSE_LIMIT_BYTES:
            native = [n for n in available() if get(n).sparse_native]
            raise fail(f"--graph {args.graph}: n = {model.n} spins; {', '.join(heavy)} need a dense J of "
                       f"{model.dense_J_bytes / 2**30:.3g} GiB. Use engines that work on sparse graphs "
                       f"({', '.join(native)}) and --reference tree or one of them.")
    if args.reference == "exact" and model.n > EXACT_MAX_N:
        raise fail(f"{given}: the exact reference (--reference exact) handles at most {EXACT_MAX_N} spins; pass "
                   "--reference tree (low treewidth) or an approximate engine, e.g. --reference gibbs (errors are "
                   f"then relative to it), or use --n ≤ {EXACT_MAX_N}.")
    too_small = [f"{name} (at most {e.max_n})" for name, e in engines.items()
                 if isinstance(getattr(e, "max_n", None), int) and model.n > e.max_n]
    if too_small:
        raise fail(f"--engines: {', '.join(too_small)} cannot solve n = {model.n} spins; drop them from --engines "
                   "or use a smaller --n.")
    if reason:  # every check passed: say which reference runs, and why
        print(f"reference: {reason}", file=sys.stderr)
    t0 = time.perf_counter()
    known = exact_log_z(**{**graph, "beta": float(model.beta)})  # the model's own β, as stored
    rows = compare(model, engines, key=jax.random.PRNGKey(args.seed), reference=reference, progress=True,
                   log_z_reference=None if known is None else known[0], reference_reason=reason)
    mcse = rows.reference.info.get("mcse") if isinstance(rows.reference.info, dict) else None
    precision = "" if mcse is None else f" (its MCSE: max {float(np.max(mcse)):.2g}, mean {float(np.mean(mcse)):.2g})"
    title = (f"engines on {args.graph} n={model.n} beta={float(model.beta):g} (seed {args.seed})"
             + ("" if ref_name == "exact" else f", errors relative to {reason or ref_name}{precision}")
             + ("" if known is None else f"; log Z against Kaufman's exact {known[0]:.10g} (K = {known[1]:g})"))
    print(f"compare: {time.perf_counter() - t0:.1f} s in all", file=sys.stderr)
    print(title + "\n\n" + format_table(rows, markdown=not args.plain))
    if args.out:
        save_comparison(rows, args.out, title)
        print(f"wrote {args.out}/compare.md and compare.png")
    return 0


def _fit(args) -> int:
    import warnings

    import jax

    from isingattn.learn import fit
    from isingattn.learn.io import check_fit_folder, read_samples, save_fit

    check_fit_folder(args.out, "--out")
    samples, graph = read_samples(args.data), None
    if args.graph:
        from isingattn import graphs

        try:
            graph = graphs.parse(args.graph, key=jax.random.PRNGKey(args.seed))
        except IsingInputError as e:
            raise IsingInputError(f"--graph {args.graph}: {e}") from None
        if graph.n != samples.shape[1]:
            raise IsingInputError(f"--graph {args.graph} has {graph.n} spins but {args.data} has {samples.shape[1]} "
                                  "columns; give a graph on the data's columns.")
    extra = {"key": jax.random.PRNGKey(args.seed)} if args.method == "pcd" else {}
    if args.max_iter is not None:
        extra["num_steps" if args.method == "pcd" else "max_iter"] = args.max_iter
    with warnings.catch_warnings(record=True) as caught:  # reported in one line each, below
        warnings.simplefilter("always")
        result = fit(samples, method=args.method, graph=graph, beta=args.beta, l1=args.l1, l2=args.l2, **extra)
    for text in dict.fromkeys(" ".join(str(w.message).split()) for w in caught):
        print(f"isingattn fit: warning: {text}", file=sys.stderr)
    info = save_fit(args.out, result, method=args.method, data=args.data,
                    command=" ".join(["isingattn", *args.argv]))
    err, i = result.info.get("moment_error"), result.info
    print(f"fit --method {args.method}: n = {result.model.n}, {samples.shape[0]} samples, {info.get('iterations')} "
          f"iterations, {i.get('wall_time', float('nan')):.1f} s" + ("" if err is None else f", moment error {err:.2g}")
          + ("" if i.get("converged") else f" (NOT converged: status {i.get('status')!r}, moment_tol "
                                            f"{i.get('moment_tol', float('nan')):.2g}; see fit.json)")
          + f"; wrote {args.out}/model.npz, model.bqm and fit.json")
    return 0


# -- the parser ----------------------------------------------------------------------------------------------------

NO_PROGRESS = "no progress bars (without it, bars are drawn only when stderr is a terminal)"
RESTART = "discard the {} and {} (instead of refusing a {}folder that holds another configuration)"


def _train_parser(sub, fmt: dict) -> None:
    train = sub.add_parser("train", help="train and compare attention variants", **fmt)
    tasks = train.add_subparsers(dest="task", required=True, metavar="TASK", help="the task to train on")
    b = tasks.add_parser("brackets", help="bracket matching: point at the matching opening bracket", **fmt)
    hb = tasks.add_parser("brackets-hard", help="bracket matching that needs selective attention: interleaved kinds, "
                                                "fillers, test shapes unseen in training (docs/study-protocol.md, the "
                                                "bracket tasks)", **fmt)
    s_ = tasks.add_parser("shakespeare", help="character-level Tiny Shakespeare (validation perplexity)", **fmt)
    for t, T, kind, what in ((b, 8, bracket_length_arg, "even, ≥ 2"), (hb, 16, positive_int_arg, "≥ 2; even without "
                             "filler"), (s_, 12, positive_int_arg, "≥ 1")):  # fillers pad a hard string to any length
        t.add_argument("--seq-len", type=kind, default=T, help=f"context length T ({what})")
        t.add_argument("--variants", type=variant_list_arg, default="softmax,hJ,h,J",
                       help="comma-separated attention variants: softmax, hJ, h, J")
        t.add_argument("--seeds", type=positive_int_arg, default=3, help="paired seeds per variant (seeds 0..N-1)")
        t.add_argument("--steps", type=positive_int_arg, default=1500, help="training steps per run")
        t.add_argument("--batch-size", type=positive_int_arg, default=64, help="sequences per step")
        t.add_argument("--lr", type=positive_float_arg, default=3e-3, help="peak AdamW learning rate (warmup, cosine)")
        t.add_argument("--weight-decay-on", dest="weight_decay_on", choices=("matrices", "matrices+J", "all"),
                       default="matrices", help="what AdamW decays: weight matrices and embeddings, those and J, or "
                                                "every array (LayerNorm gains and biases too; the committed grid's setting)")
        t.add_argument("--eval-every", type=positive_int_arg, default=250, help="steps between held-out evaluations")
        t.add_argument("--d-model", type=positive_int_arg, default=64, help="model width")
        t.add_argument("--heads", type=positive_int_arg, default=1, help="attention heads (must divide --d-model)")
        t.add_argument("--layers", type=positive_int_arg, default=1,
                       help="Transformer blocks (attention + FFN), each with its own J")
        t.add_argument("--no-ffn", dest="ffn", action="store_false",
                       help="drop the FFN block (the paper's ablation); without this flag the model has one")
        t.add_argument("--engine", default="exact", help="inference engine for hJ and J (a registry name)")
        t.add_argument("--engine-kw", default="",
                       help="engine configuration, e.g. num_samples=200,num_chains=4; without it the engine's defaults")
        t.add_argument("--J-param", dest="J_param", choices=("full", "toeplitz", "banded"), default="full",
                       help="J parametrization: full [T,T], toeplitz (by distance) or banded (zero beyond --J-band)")
        t.add_argument("--J-band", dest="J_band", type=positive_int_arg, default=None,
                       help="bandwidth of J: needed by banded, optional for toeplitz (e.g. 8 with --engine banded "
                            "--engine-kw bandwidth=8); without it toeplitz spans the whole context")
        t.add_argument("--rel-bias", dest="rel_bias", action="store_true",
                       help="a learned field per head and query-key distance (T5-style) in every variant but J: the "
                            "control for J as a locality prior; without it none")
        t.add_argument("--out", default=None,
                       help="output folder; without it runs/<task>-T<T> (plus -noffn without the FFN)")
        t.add_argument("--no-progress", action="store_true", help=NO_PROGRESS)
        t.add_argument("--resume", action="store_true", help="continue unfinished runs in --out from their checkpoints")
        t.add_argument("--restart", action="store_true", help=RESTART.format("runs in --out", "start over", ""))
        t.add_argument("--devices", type=positive_int_arg, default=None,
                       help="train data-parallel on this many devices (--batch-size must be a multiple of it); "
                            "without it, one device")
        t.set_defaults(func=_train)
    for t, n_train in ((b, 20000), (hb, 1000)):
        t.add_argument("--depth", type=positive_int_arg, default=None,
                       help="maximum nesting depth; without it T/2 (any nesting)")
        t.add_argument("--types", type=positive_int_arg, default=3, help="number of bracket kinds (1..4)")
        t.add_argument("--n-train", type=positive_int_arg, default=n_train, help="training strings (fewer if T is short)")
        t.add_argument("--n-test", type=positive_int_arg, default=2000,
                       help="held-out test strings (at most 20%% of the distinct strings if T is short)")
    hb.add_argument("--filler", type=float, default=0.25, help="chance that a step is a filler token, in [0, 1)")
    hb.add_argument("--split", choices=("shape", "string"), default="shape",
                    help="hold out test strings by nesting shape (unseen in training) or only by string")
    hb.add_argument("--nested", dest="interleaved", action="store_false",
                    help="one nested Dyck word over all kinds instead of each kind its own word, interleaved")
    s_.add_argument("--data", default=None,
                    help="path to input.txt; without it $ISINGATTN_DATA, the cache, or a verified download")


def build_parser() -> argparse.ArgumentParser:
    fmt = dict(formatter_class=HelpFormatter)
    p = Parser(prog="isingattn", description="Boltzmann attention with learnable Ising couplings.", **fmt)
    p.add_argument("--version", action="version", version=f"isingattn {isingattn.__version__}",
                   help="print the installed version and exit")
    sub = p.add_subparsers(dest="cmd", required=True, metavar="COMMAND", help="what to do")
    _train_parser(sub, fmt)

    r = sub.add_parser("reproduce", help="the paper's experiment grid, resumable, into results/", **fmt)
    r.add_argument("--quick", action="store_true", help="a small grid (minutes on 2 CPU cores) into runs/reproduce-quick")
    r.add_argument("--only", default=None, help="one part of the grid, e.g. brackets or brackets-hard; without it, all")
    r.add_argument("--seq-len", type=positive_int_arg, default=None,
                   help="only the cells at this context length; without it, all")
    r.add_argument("--ffn", choices=("on", "off"), default=None, help="only cells with / without the FFN; without it, both")
    r.add_argument("--seeds", type=positive_int_arg, default=None,
                   help="train seeds 0..N-1 of each cell (a folder keeps the seeds it already holds); "
                        "without it, each cell's own number")
    r.add_argument("--engine", default=None, help="only cells trained with this engine (e.g. dqa); without it, all")
    r.add_argument("--cell", default=None,
                   help="only the cell of this name, e.g. annealing-qpu/T8-dimod-raw; without it, all")
    r.add_argument("--data", default=None,
                   help="Tiny Shakespeare input.txt; without it $ISINGATTN_DATA, the cache, or a download")
    r.add_argument("--out", default=None,
                   help="root folder; without it results/reproduce, or runs/reproduce-quick with --quick")
    r.add_argument("--report-only", action="store_true", help="rebuild tables and plots from finished cells")
    r.add_argument("--restart", action="store_true", help=RESTART.format("selected cells' runs", "retrain them", "cell "))
    r.add_argument("--no-progress", action="store_true", help=NO_PROGRESS)
    r.set_defaults(func=_reproduce)

    a = sub.add_parser("analyze", help="graph analysis of a trained checkpoint's learned J (networkx)", **fmt)
    a.add_argument("checkpoint", help="a checkpoint of an hJ or J model: ckpt-<variant>-s<seed>.npz from training, "
                                      "or a committed model-hJ-s0.npz, e.g. "
                                      "results/reproduce/shakespeare/T12/model-hJ-s0.npz")
    a.add_argument("--layer", type=nonnegative_int_arg, default=0, help="which layer's J (0: the first)")
    a.add_argument("--threshold", type=nonnegative_float_arg, default=None,
                   help="edge threshold on |J|; without it 5%% of each head's max |J|")
    a.add_argument("--out", default=None,
                   help="folder for the plots and summary.json; without it runs/analyze/<checkpoint's folders and "
                        "name> (plus -layer<L> for --layer L > 0)")
    a.set_defaults(func=_analyze)

    v = sub.add_parser("evaluate", help="score a checkpoint on its held-out set, through its own engine or another",
                       **fmt)
    v.add_argument("checkpoint", help="a checkpoint: ckpt-<variant>-s<seed>.npz from training, or a committed "
                                      "model-hJ-s0.npz, e.g. results/reproduce/brackets/T8-noffn/model-hJ-s0.npz")
    v.add_argument("--engine", default=None,
                   help="score through this engine (a registry name, e.g. exact) instead of the saved one; "
                        "without it the engine the model was trained with")
    v.add_argument("--engine-kw", default="", help="settings of --engine, e.g. num_samples=64,num_warmup=32; "
                                                   "without it that engine's defaults")
    v.add_argument("--keys", type=positive_int_arg, default=1,
                   help="evaluations with PRNGKey(0..N-1), for the spread a sampling engine adds")
    v.add_argument("--data", default=None,
                   help="Tiny Shakespeare input.txt (Shakespeare checkpoints); without it $ISINGATTN_DATA, the "
                        "cache, or a download")
    v.add_argument("--json", default=None, help="also write the result to this JSON file; without it, print only")
    v.set_defaults(func=_evaluate)

    e = sub.add_parser("export-bqm", help="the Ising model one attention query solves, as a dimod BQM file", **fmt)
    e.add_argument("checkpoint", help="a checkpoint of an hJ, h or J model: ckpt-<variant>-s<seed>.npz from "
                                      "training, or a committed model-hJ-s0.npz, e.g. "
                                      "results/reproduce/shakespeare/T12/model-hJ-s0.npz (with --text \"ROMEO: What\")")
    e.add_argument("--text", required=True, help="input text (characters of the model's vocabulary)")
    e.add_argument("--query", type=nonnegative_int_arg, required=True,
                   help="query position i (keys 0..i are the spins)")
    e.add_argument("--head", type=nonnegative_int_arg, default=0, help="attention head")
    e.add_argument("--layer", type=nonnegative_int_arg, default=0, help="layer of that head (0: the first)")
    e.add_argument("--out", required=True, help="output file (dimod's own serialization, BinaryQuadraticModel.to_file)")
    e.set_defaults(func=_export_bqm)

    c = sub.add_parser("compare", help="compare inference engines on one coupling graph", **fmt)
    c.add_argument("--n", type=positive_int_arg, default=16, help="number of spins (generated graphs)")
    c.add_argument("--graph", default="dense",
                   help="dense, chain or lattice (--n spins, dense J); a sparse graph spec: lattice:64x64[:periodic], "
                        "lattice:16x16x16, chimera:M, pegasus:M, zephyr:M, regular:N:DEGREE, er:N:P; or a dimod BQM "
                        "file (bqm.to_file())")
    c.add_argument("--couplings", choices=("pm", "gaussian", "ferro"), default="pm",
                   help="couplings of a sparse graph spec: ±j_scale (pm), N(0, j_scale²) or +j_scale on every edge "
                        "(ferro; with --h-scale 0 on lattice:RxC:periodic, log Z is scored against Kaufman's exact value)")
    c.add_argument("--beta", type=positive_float_arg, default=1.0, help="inverse temperature")
    c.add_argument("--h-scale", type=nonnegative_float_arg, default=1.0, help="fields ~ N(0, h_scale²)")
    c.add_argument("--j-scale", type=nonnegative_float_arg, default=None,
                   help="couplings ~ N(0, j_scale²); without it 1/sqrt(n)")
    c.add_argument("--engines", type=names_arg, default="exact,meanfield-tap,meanfield-bp,gibbs,sqa,dqa",
                   help="comma-separated engines (registry names) to compare")
    c.add_argument("--reference", default="auto",
                   help="what the errors are measured against: auto (the default: the exact engine that applies, "
                        "exact, banded, junction-tree or planar, named with why), exact (n ≤ 24), tree (dwave-samplers' "
                        "TreeDecompositionSampler: exact for low treewidth, e.g. strips), or an engine (e.g. banded for "
                        "strips, or a long gibbs run with --reference-kw; its MCSE is printed)")
    c.add_argument("--reference-kw", default="", help="settings of the reference engine, e.g. num_samples=20000,"
                                                      "num_chains=16; without it its defaults")
    c.add_argument("--engine-kw", action="append", default=[], metavar="ENGINE:KEY=VALUE,...",
                   help="settings of one compared engine, e.g. sqa:num_reads=8,num_sweeps=200 (repeatable); "
                        "without it its defaults")
    c.add_argument("--seed", type=seed_arg, default=0, help="seed of the generated graph and the samplers")
    c.add_argument("--out", default=None, help="folder for compare.md and compare.png; without it, print only")
    c.add_argument("--plain", action="store_true", help="plain-text table instead of markdown")
    c.set_defaults(func=_compare)

    from isingattn.learn.fit import METHODS

    f = sub.add_parser("fit", help="learn h and J from binary samples (the inverse Ising problem)", **fmt)
    f.add_argument("data", help="samples [S, n] of 0/1 or ±1, one row each: .npy, .npz (array 'samples'), .csv or "
                                "whitespace text")
    f.add_argument("--method", required=True, choices=METHODS,
                   help="exact: maximum likelihood with exact log Z (small n or banded); plm: pseudo-likelihood; "
                        "pcd: persistent contrastive divergence; mf, tap: mean-field inversion")
    f.add_argument("--graph", default=None,
                   help="couplings allowed to be non-zero, a graph spec such as lattice:8x8 (its n must equal the "
                        "data's columns); without it, all pairs")
    f.add_argument("--beta", type=positive_float_arg, default=1.0, help="inverse temperature of the fitted model")
    f.add_argument("--l1", type=nonnegative_float_arg, default=0.0, help="L1 penalty on J (plm)")
    f.add_argument("--l2", type=nonnegative_float_arg, default=1e-4, help="L2 penalty on h and J")
    f.add_argument("--max-iter", type=positive_int_arg, default=None,
                   help="iterations (pcd: steps); without it, the method's default")
    f.add_argument("--seed", type=seed_arg, default=0, help="seed of stochastic methods (pcd)")
    f.add_argument("--out", required=True, help="output folder for model.npz, model.bqm and fit.json")
    f.set_defaults(func=_fit)
    return p


def main(argv=None) -> int:
    """Parse ``argv`` (default ``sys.argv[1:]``) and run the command; bad input raises. XLA compilations are
    reused across runs (:func:`isingattn.enable_compilation_cache`): on by default for the command line,
    ``$ISINGATTN_JAX_CACHE`` names the folder or ``0``/``off`` turns it off; JAX's own
    ``$JAX_COMPILATION_CACHE_DIR``, when set and ours is not, is left to JAX."""
    from isingattn.compile_cache import ENV, cache_dir_from_env, default_cache_dir, enable_compilation_cache

    argv = sys.argv[1:] if argv is None else list(argv)
    args = build_parser().parse_args(argv)
    args.argv = argv
    path = cache_dir_from_env(default_cache_dir())
    if path is not None and (os.environ.get(ENV) or not os.environ.get("JAX_COMPILATION_CACHE_DIR")):
        enable_compilation_cache(path)
    return args.func(args)


def run(argv=None) -> int:
    """The console script: bad input ends with one line on stderr and exit status 2, not a traceback. Only
    the errors bad input raises are caught (:func:`expected_errors`); a bug still shows its traceback."""
    try:
        return main(argv)
    except SystemExit as e:  # argparse: --help or --version (0) or a bad option (2, its message already printed)
        if isinstance(e.code, str):
            print(e.code, file=sys.stderr)
        return e.code if isinstance(e.code, int) else 0 if e.code is None else 1
    except expected_errors() as e:
        return report("isingattn", e)


if __name__ == "__main__":
    sys.exit(run())
