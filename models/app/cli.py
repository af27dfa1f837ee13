"""The ``isingattn`` command line.

Every bad input ends with one line on stderr (``isingattn: error: ...`` or argparse's
``isingattn <verb>: error: ...``) that names the option, the value and the fix, and
exit status 2. Options are checked, and output folders probed for writability, before
any data is loaded or any training starts.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import os
import sys
import time

import isingattn
from isingattn.models.app.cli_args import (HelpFormatter, Parser, bracket_length_arg, cell_from_args,
                                           check_reproduce_args, check_train_args, check_writable,
                                           nonnegative_float_arg, nonnegative_int_arg, positive_float_arg,
                                           positive_int_arg, variant_list_arg, add_bracket_data_options, study)
from isingattn.models.app.cli_checkpoints import analyze_verb, evaluate_verb, export_bqm_verb
from isingattn.models.app.cli_compare import add_compare_parser
from isingattn.models.app.cli_fit import add_fit_parser


def _summarize(cell, results, out: str, started: float) -> str:
    """``summary.md`` of a finished cell, titled with its recorded training time, the number its report
    shows (a resumed cell's runs from earlier processes included); a resumed cell also says how
    much of it this process spent."""
    from isingattn.models.app.cells import wall_seconds
    from isingattn.models.app.experiments import write_summary

    here = time.perf_counter() - started
    total = wall_seconds(out, {(v, s) for v, r in results.items() for s in r})
    total = here if math.isnan(total) else round(total, 1)  # rounded as the report rounds it
    text = write_summary(cell, results, out, total)
    if total - here >= 1:
        text += f"\n({here:.0f} s of it in this run; the rest in earlier runs in {out})\n"
    return text


def _train(args) -> int:
    from isingattn.models.app.experiments import run_cell

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
                       command=_command(args), resume=args.resume, mesh=mesh,
                       restart=args.restart)
    print("\n" + _summarize(cell, results, out, t0))
    print(f"wrote {out}/summary.md, summary.csv, results.json, metrics.jsonl, ckpt-*.npz")
    return 0


def _reproduce(args) -> int:
    check_reproduce_args(args)
    from isingattn.models.app.experiments import select
    parts, write_report = study("parts"), study("grid_report").write_report
    grid, run_cell = parts.grid, parts.run_cell
    from isingattn.models.shakespeare import HOW_TO_ENABLE, DataUnavailable

    root = args.out or ("runs/reproduce-quick" if args.quick else "results/reproduce")
    skipped = []
    if not args.report_only:
        ffn = None if args.ffn is None else args.ffn == "on"
        cells = select(grid(args.quick), args.only, args.seq_len, ffn, args.engine, args.cell)
        if args.seeds is not None:  # validated by Cell
            cells = [dataclasses.replace(c, seeds=args.seeds) for c in cells]
        print(f"{len(cells)} cell(s) -> {root}: " + ", ".join(c.name for c in cells), flush=True)
        for cell in cells:
            out = os.path.join(root, cell.name)
            t0 = time.perf_counter()
            try:
                results = run_cell(cell, out, data_path=args.data, progress=not args.no_progress,
                                   command=_command(args),
                                   restart=getattr(args, "restart", False))
            except DataUnavailable:  # offline without the corpus: run what needs no download
                skipped.append(cell.name)
                print(f"\nskipped {cell.name}: it needs the Tiny Shakespeare corpus", flush=True)
                continue
            print("\n" + _summarize(cell, results, out, t0), flush=True)
    print(write_report(root, quick=args.quick))
    print(f"wrote {root}/README.md")
    if skipped:
        print(f"skipped {len(skipped)} cell(s) that need the Tiny Shakespeare corpus: {', '.join(skipped)}. "
              f"To run them, {HOW_TO_ENABLE}, then rerun this command (finished cells are not retrained).")
    return 0


def build_parser() -> argparse.ArgumentParser:
    fmt = dict(formatter_class=HelpFormatter)
    p = Parser(prog="isingattn", description="Boltzmann attention with learnable Ising couplings.", **fmt)
    p.add_argument("--version", action="version", version=f"isingattn {isingattn.__version__}",
                   help="print the installed version and exit")
    sub = p.add_subparsers(dest="cmd", required=True, metavar="COMMAND", help="what to do")
    train = sub.add_parser("train", help="train and compare attention variants", **fmt)
    tasks = train.add_subparsers(dest="task", required=True, metavar="TASK", help="the task to train on")
    b = tasks.add_parser("brackets", help="bracket matching: point at the matching opening bracket", **fmt)
    hb = tasks.add_parser("brackets-hard", help="bracket matching that needs selective attention: interleaved kinds, "
                                                "fillers, test shapes unseen in training (docs/study-protocol.md, the bracket tasks)",
                          **fmt)
    s_ = tasks.add_parser("shakespeare", help="character-level Tiny Shakespeare (validation perplexity)", **fmt)
    for t, T in ((b, 8), (hb, 16), (s_, 12)):
        if t is hb:  # fillers can pad a string to any length; Cell checks evenness when there are none
            t.add_argument("--seq-len", type=positive_int_arg, default=T, help="context length T (≥ 2; even without filler)")
        elif t is b:
            t.add_argument("--seq-len", type=bracket_length_arg, default=T, help="context length T (even, ≥ 2)")
        else:
            t.add_argument("--seq-len", type=positive_int_arg, default=T, help="context length T (≥ 1)")
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
        t.add_argument("--no-progress", action="store_true",
                       help="no progress bars (without it, bars are drawn only when stderr is a terminal)")
        t.add_argument("--resume", action="store_true", help="continue unfinished runs in --out from their checkpoints")
        t.add_argument("--restart", action="store_true",
                       help="discard the runs in --out and start over (instead of refusing a folder that holds "
                            "another configuration)")
        t.add_argument("--devices", type=positive_int_arg, default=None,
                       help="train data-parallel on this many devices (--batch-size must be a multiple of it); "
                            "without it, one device")
        t.set_defaults(func=_train)
    add_bracket_data_options(b, hb)
    s_.add_argument("--data", default=None,
                    help="path to input.txt; without it $ISINGATTN_DATA, the cache, or a verified download")

    r = sub.add_parser("reproduce", help="the paper's experiment grid, resumable, into results/", **fmt)
    r.add_argument("--quick", action="store_true", help="a small grid (minutes on 2 CPU cores) into runs/reproduce-quick")
    r.add_argument("--only", default=None, help="one part of the grid, e.g. brackets or brackets-hard; without it, all")
    r.add_argument("--seq-len", type=positive_int_arg, default=None,
                   help="only the cells at this context length; without it, all")
    r.add_argument("--ffn", choices=("on", "off"), default=None,
                   help="only cells with / without the FFN; without it, both")
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
    r.add_argument("--restart", action="store_true",
                   help="discard the selected cells' runs and retrain them (instead of refusing a cell folder that "
                        "holds another configuration)")
    r.add_argument("--no-progress", action="store_true",
                   help="no progress bars (without it, bars are drawn only when stderr is a terminal)")
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
    a.set_defaults(func=analyze_verb)

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
    v.set_defaults(func=evaluate_verb)

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
    e.set_defaults(func=export_bqm_verb)

    add_compare_parser(sub, fmt)

    add_fit_parser(sub, fmt)
    return p


def _enable_compile_cache():
    """Reuse XLA compilations across runs: on by default for the command line
    (``$ISINGATTN_JAX_CACHE`` names the folder, or ``0``/``off`` turns it off; JAX's own
    ``$JAX_COMPILATION_CACHE_DIR``, when set and ours is not, is left to JAX)."""
    from isingattn.compile_cache import ENV, cache_dir_from_env, default_cache_dir, enable_compilation_cache

    if not os.environ.get(ENV) and os.environ.get("JAX_COMPILATION_CACHE_DIR"):
        return
    path = cache_dir_from_env(default_cache_dir())
    if path is not None:
        enable_compilation_cache(path)


def _command(args) -> str:
    """The command line as recorded in a run folder's commands.txt. The corpus path is
    written as ``$ISINGATTN_DATA``: the file is checked by SHA-256, so its location does not
    change a result, and a committed results folder must not point outside its repository."""
    argv, out = list(getattr(args, "argv", sys.argv[1:])), []
    for i, a in enumerate(argv):
        if i and argv[i - 1] == "--data":
            a = "$ISINGATTN_DATA"
        elif a.startswith("--data="):
            a = "--data=$ISINGATTN_DATA"
        out.append(a)
    return " ".join(["isingattn", *out])


def main(argv=None) -> int:
    """Parse ``argv`` (default ``sys.argv[1:]``) and run the command; bad input raises."""
    argv = sys.argv[1:] if argv is None else list(argv)
    args = build_parser().parse_args(argv)
    args.argv = argv
    _enable_compile_cache()
    return args.func(args)


def run(argv=None) -> int:
    """The console script: bad input ends with one line on stderr and exit status 2, not a
    traceback. Only the errors bad input raises are caught (a bug still shows its traceback;
    :mod:`isingattn.models.app.cli_errors`, which the examples share)."""
    from isingattn.models.app.cli_errors import expected_errors, report

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
