"""Argument types and the checks the ``isingattn`` command runs before any work: each bad
value becomes one line that names the option, the value and the fix (exit status 2)."""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import tempfile


# -- argument types: argparse turns an ArgumentTypeError into "argument --x: <message>" ---------------------------

def _int_at_least(lo: int, what: str):
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            value = None
        if value is None or value < lo:
            raise argparse.ArgumentTypeError(f"must be {what}; got {text!r}")
        return value

    parse.__name__ = what  # argparse names the type in some messages
    return parse


positive_int_arg = _int_at_least(1, "a positive integer")
nonnegative_int_arg = _int_at_least(0, "an integer ≥ 0")


def seed_arg(text: str) -> int:
    """A random seed: an integer in [0, 2^63 - 1] (what jax.random.PRNGKey takes)."""
    value = nonnegative_int_arg(text)
    if value > 2**63 - 1:
        raise argparse.ArgumentTypeError(f"must be an integer from 0 to 2^63 - 1 = {2**63 - 1}; got {text!r}")
    return value


def _float_check(what: str, ok):
    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            value = math.nan
        if not (math.isfinite(value) and ok(value)):
            raise argparse.ArgumentTypeError(f"must be {what}; got {text!r}")
        return value

    parse.__name__ = what
    return parse


positive_float_arg = _float_check("a finite number > 0", lambda v: v > 0)
nonnegative_float_arg = _float_check("a finite number ≥ 0", lambda v: v >= 0)


def bracket_length_arg(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = -1
    if value % 2 or value < 2:
        raise argparse.ArgumentTypeError(f"must be an even integer ≥ 2 (a balanced bracket string has even length); "
                                         f"got {text!r}")
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


def _parse_kw(text: str, option: str = "--engine-kw") -> dict:
    """'num_samples=200,schedule=colored' -> {'num_samples': 200, 'schedule': 'colored'};
    ``option`` names the command-line option in the message about a malformed pair."""
    from isingattn.errors import IsingInputError

    out = {}
    for item in filter(None, (t.strip() for t in (text or "").split(","))):
        k, eq, v = item.partition("=")
        if not eq or not k.strip():
            raise IsingInputError(f"{option} expects key=value pairs separated by commas, e.g. "
                                  f"num_samples=200,num_chains=4; got {item!r}.")
        try:
            out[k.strip()] = json.loads(v)
        except json.JSONDecodeError:
            out[k.strip()] = v.strip()
    return out


# -- checks that need more than one option, run before anything is loaded or trained ----------------------------

def input_error(message: str):
    from isingattn.errors import IsingInputError

    return IsingInputError(message)


def study(module: str):
    """``isingattn_study.<module>``, the paper's study, which lives beside the library in a source
    checkout (``study/isingattn_study``) and is not part of an installed wheel. Only ``reproduce``
    needs it; without a checkout it is refused in one line (exit status 2)."""
    import importlib
    import pathlib

    folder = pathlib.Path(__file__).resolve().parents[2] / "study"  # <checkout>/models/app/cli_args.py
    if not (folder / "isingattn_study" / "__init__.py").is_file():
        raise input_error("reproduce runs the paper's study, which lives in a source checkout (study/), not in the "
                     "installed package: clone the repository, then pip install -e . && isingattn reproduce.")
    if str(folder) not in sys.path:
        sys.path.append(str(folder))
    return importlib.import_module(f"isingattn_study.{module}")


def check_writable(path: str, option: str, *, is_file: bool = False) -> None:
    """Refuse an output path that cannot be written, before any work starts: probe the
    folder (or the nearest existing ancestor it would be created in) with a temporary file."""
    folder = os.path.dirname(os.path.abspath(path)) if is_file else os.path.abspath(path)
    if is_file and os.path.isdir(path):
        raise input_error(f"{option} {path!r} is a folder; give a file path.")
    probe = folder
    while not os.path.exists(probe):
        probe = os.path.dirname(probe)
    if not os.path.isdir(probe):
        raise input_error(f"{option} {path!r} cannot be created: {probe!r} is a file, not a folder. "
                     f"Choose another {option}.")
    try:
        with tempfile.TemporaryFile(dir=probe, prefix=".isingattn-probe-"):
            pass
    except OSError as e:
        raise input_error(f"{option} {path!r} is not writable ({e.strerror} in {probe!r}); choose another {option} "
                     "or fix the folder's permissions.") from None


def engine_from_args(name: str, kw_text: str, option: str = "--engine", kw_option: str = "--engine-kw"):
    """The engine ``name`` with the settings ``kw_text``; errors quote the options as given:
    ``option name kw_option kw_text`` (e.g. ``--reference gibbs --reference-kw ...``), or
    ``kw_option name:kw_text`` where the settings name their engine themselves (``option ==
    kw_option``, compare's ``--engine-kw gibbs:num_chains=0``)."""
    from isingattn.errors import IsingInputError, IsingTypeError
    from isingattn.inference import get

    if option == kw_option:
        given = f"{kw_option} {name}:{kw_text}"
    else:
        given = f"{option} {name}" + (f" {kw_option} {kw_text}" if kw_text else "")
    try:
        kw = _parse_kw(kw_text, kw_option)
    except IsingInputError as e:
        raise input_error(f"{given}: {e}") from None
    try:
        engine = get(name, **kw)
    except (IsingInputError, IsingTypeError) as e:
        raise input_error(f"{given}: {e}") from None
    sample_kwargs = dict(getattr(engine, "sample_kwargs", ()))
    if sample_kwargs:  # a dimod sampler's own parameters: only the sampler can check them, so try one read
        import dimod

        try:
            engine.sampler.sample(dimod.BinaryQuadraticModel({0: 0.0}, {}, 0.0, "SPIN"), num_reads=1,
                                  **sample_kwargs)
        except Exception as e:  # any sampler's refusal, which would otherwise surface mid-training
            raise input_error(f"{given}: {type(engine.sampler).__name__} refused these settings "
                         f"({type(e).__name__}: {e}).") from None
    return engine, kw


def _dyck_words(T: int, depth: int, types: int) -> int:
    """How many distinct bracket strings of length T, nesting ≤ depth, ``types`` kinds exist."""
    ways = [1] + [0] * depth  # ways[d]: prefixes ending at depth d
    for _ in range(T):
        ways = [(ways[d - 1] if d else 0) + (ways[d + 1] if d < depth else 0) for d in range(depth + 1)]
    return ways[0] * types ** (T // 2)


def check_train_args(args) -> None:
    """Every option of ``train`` that argparse's types cannot check alone."""
    engine, _ = engine_from_args(args.engine, args.engine_kw)
    coupled = [v for v in args.variants if v in ("hJ", "J")]
    max_n = getattr(engine, "max_n", None)
    if coupled and isinstance(max_n, int) and args.seq_len > max_n:
        raise input_error(f"--seq-len {args.seq_len} exceeds what --engine {args.engine} solves for the {'/'.join(coupled)} "
                     f"variant(s): at most {max_n} spins (its max_n). Use --seq-len ≤ {max_n}, --engine banded with "
                     "--J-param banded --J-band 8, or an approximate engine (gibbs, sqa, meanfield-bp).")
    if args.d_model % args.heads:
        raise input_error(f"--heads {args.heads} must divide --d-model {args.d_model}; pick --heads among the divisors of "
                     f"{args.d_model}.")
    if args.J_param == "banded" and args.J_band is None:
        raise input_error("--J-param banded needs --J-band, the largest coupled distance, e.g. --J-band 8.")
    if args.J_param == "full" and args.J_band is not None:
        raise input_error(f"--J-band {args.J_band} applies to --J-param banded or toeplitz; a full J has no band.")
    if args.devices is not None:
        import jax

        if args.devices > len(jax.devices()):
            raise input_error(f"--devices {args.devices}: only {len(jax.devices())} device(s) are visible to JAX. "
                         "On CPU, fake devices come from XLA_FLAGS=--xla_force_host_platform_device_count=N.")
        if args.batch_size % args.devices:
            raise input_error(f"--batch-size {args.batch_size} must be a multiple of --devices {args.devices}.")
    data = getattr(args, "data", None)
    if data is not None and not os.path.isfile(data):
        raise input_error(f"--data {data}: no such file; pass the Tiny Shakespeare input.txt, or leave --data out to use "
                     "$ISINGATTN_DATA, the cache or a verified download.")
    if args.task in ("brackets", "brackets-hard"):
        from isingattn.models.brackets import BRACKETS

        if args.types > len(BRACKETS):
            raise input_error(f"--types {args.types}: there are {len(BRACKETS)} bracket kinds ({BRACKETS}); "
                         f"use --types 1..{len(BRACKETS)}.")
    if args.task == "brackets":  # brackets-hard's fillers and kinds make far more strings than a split needs
        depth = args.seq_len // 2 if args.depth is None else min(args.depth, args.seq_len // 2)
        distinct = min(_dyck_words(args.seq_len, depth, args.types), 2 * (args.n_train + args.n_test))
        if int(0.2 * distinct) < 1:  # brackets.make_data holds out at most 20% of the distinct strings
            raise input_error(f"--seq-len {args.seq_len} --types {args.types} (--depth {depth}, --n-train {args.n_train}, "
                         f"--n-test {args.n_test}) yields at most {distinct} distinct bracket string(s), too few "
                         "for a held-out test set (at most 20% are held out); use a longer --seq-len, more --types, "
                         "or a larger --n-train.")


def cell_from_args(args, task: str):
    from isingattn.models.app.experiments import Cell

    extra = {}
    if task in ("brackets", "brackets-hard"):
        extra = dict(types=args.types, depth=args.depth, n_train=args.n_train, n_test=args.n_test)
    if task == "brackets-hard":
        extra.update(filler=args.filler, split=args.split, interleaved=args.interleaved)
    cell = Cell(task, task, args.seq_len, variants=args.variants, seeds=args.seeds, steps=args.steps, ffn=args.ffn,
                engine=args.engine, engine_kw=tuple(sorted(_parse_kw(args.engine_kw).items())),
                batch_size=args.batch_size, lr=args.lr, d_model=args.d_model, heads=args.heads, layers=args.layers,
                eval_every=args.eval_every, J_param=args.J_param, J_band=args.J_band,
                weight_decay_on=args.weight_decay_on, rel_bias=args.rel_bias, **extra)
    vocab = 2 * args.types + 1 if task != "shakespeare" else 1  # the vocabulary does not change what is valid
    for v in cell.variants:  # build every model config now: its checks run before any data is loaded
        cell.config(v, vocab)
    cell.train_config()
    return cell


def check_reproduce_args(args) -> None:
    """``reproduce``'s names against the grid, and its output folder, before any cell runs."""
    grid = study("parts").grid

    root = args.out or ("runs/reproduce-quick" if args.quick else "results/reproduce")
    check_writable(root, "--out")
    if args.report_only:
        return
    cells = grid(args.quick)
    for option, value, attr in (("--only", args.only, "part"), ("--seq-len", args.seq_len, "seq_len"),
                                ("--engine", args.engine, "engine"), ("--cell", args.cell, "name")):
        valid = sorted({getattr(c, attr) for c in cells})
        if value is not None and value not in valid:
            raise input_error(f"{option} {value}: the {'quick ' if args.quick else ''}grid has no such cell; "
                         f"choose one of {', '.join(map(str, valid))}.")


def add_bracket_data_options(b, hb) -> None:
    """The data options of ``train brackets`` (``b``) and ``train brackets-hard`` (``hb``)."""
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


class Parser(argparse.ArgumentParser):
    """An argument error is one line (not the usage block) and exit status 2."""

    def error(self, message):
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


class HelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """Shows every option's default, except a flag's (store_true/store_false: its help says
    what giving it does; "(default: True)" on --no-ffn would read backwards) and a None
    or empty default (the help says in words what happens without the option)."""

    def _get_help_string(self, action):
        if action.nargs == 0 or action.default is None or action.default == "":
            return action.help
        return super()._get_help_string(action)
