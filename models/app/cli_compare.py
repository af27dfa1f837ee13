"""The ``isingattn compare`` verb: engines side by side on one coupling graph, scored against the
exact reference that applies (:func:`isingattn.compare.choose_reference`)."""

from __future__ import annotations

import os
import sys
import time

from isingattn.models.app.cli_args import (check_writable, engine_from_args, input_error, names_arg,
                                           nonnegative_float_arg, positive_float_arg, positive_int_arg, seed_arg)

__all__ = ["GRAPHS", "add_compare_parser", "compare_verb", "exact_log_z", "load_model"]

GRAPHS = ("dense", "chain", "lattice")


def load_model(args):
    """A model from --graph: a generated dense/chain/lattice instance or a dimod BQM file."""
    import jax
    import numpy as np

    from isingattn import IsingModel
    from isingattn.instances import random_model

    if args.graph in GRAPHS:
        rng = np.random.default_rng(np.asarray(jax.random.key_data(jax.random.PRNGKey(args.seed))).ravel())
        h, J = random_model(rng, args.n, h_scale=args.h_scale, J_scale=args.j_scale, graph=args.graph)
        return IsingModel(h, J, beta=args.beta)
    if ":" in args.graph and not os.path.isfile(args.graph):  # a sparse graph spec: lattice:64x64, pegasus:16, ...
        from isingattn import graphs
        from isingattn.errors import IsingInputError

        k_graph, k_J, k_h = jax.random.split(jax.random.PRNGKey(args.seed), 3)
        try:
            g = graphs.parse(args.graph, key=k_graph)
        except IsingInputError as e:
            raise input_error(f"--graph {args.graph}: {e}") from None
        J = graphs.random_couplings(k_J, g, args.couplings, 1.0 if args.j_scale is None else args.j_scale)
        h = jax.random.normal(k_h, (g.n,), J.dtype) * args.h_scale
        return IsingModel(h, J, beta=args.beta)
    import dimod

    if not os.path.isfile(args.graph):
        raise input_error(f"--graph {args.graph}: not one of {', '.join(GRAPHS)} and no such file; pass a generated "
                     "graph name or a dimod BQM file (written by bqm.to_file()).")
    try:
        with open(args.graph, "rb") as f:
            bqm = dimod.BinaryQuadraticModel.from_file(f)
    except Exception as e:  # dimod raises various errors on corrupt input; this wraps only the file read
        raise input_error(f"--graph {args.graph}: could not read it as a dimod BQM file (written by bqm.to_file()): "
                     f"{type(e).__name__}: {e}") from None
    return IsingModel.from_bqm(bqm, beta=args.beta)


def exact_log_z(args, model):
    """Kaufman's exact log Z for a uniform ferromagnet on a periodic 2D lattice without fields
    (``--graph lattice:RxC:periodic --couplings ferro --h-scale 0``), else None; and a note for
    the table's title."""
    spec = str(args.graph).split(":")
    if not (args.couplings == "ferro" and args.h_scale == 0 and len(spec) == 3 and spec[0] == "lattice"
            and spec[2] == "periodic" and len(spec[1].lower().split("x")) == 2):
        return None, ""
    from isingattn.onsager import torus_log_z

    rows, cols = (int(x) for x in spec[1].lower().split("x"))
    K = float(model.beta) * (1.0 if args.j_scale is None else float(args.j_scale))
    value = float(torus_log_z(rows, cols, K))
    return value, f"; log Z against Kaufman's exact {value:.10g} (K = {K:g})"


def compare_verb(args) -> int:
    import jax
    import numpy as np

    from isingattn.compare import EXACT_MAX_N, choose_reference, compare, format_table, plot_comparison
    from isingattn.inference import available

    if not args.engines:
        raise input_error(f"--engines names no engine; give a comma-separated list of {', '.join(available())}.")
    unknown = [e for e in args.engines if e not in available()]
    if unknown:
        raise input_error(f"--engines {','.join(args.engines)}: unknown engine(s) {', '.join(map(repr, unknown))}; "
                     f"available: {', '.join(available())}.")
    if args.reference not in available() and args.reference not in ("tree", "auto"):
        raise input_error(f"--reference {args.reference}: unknown engine; available: auto (the exact engine that applies), "
                     f"tree (dwave-samplers' TreeDecompositionSampler, exact for low treewidth), {', '.join(available())}.")
    if args.reference_kw and args.reference in ("tree", "auto"):
        raise input_error(f"--reference-kw: the {args.reference} reference takes no settings.")
    reference = args.reference
    # compare reads a graph's band from the graph (a strip wider than Banded's default 8 still works)
    banded_kw = lambda name, kw: kw if name != "banded" or "bandwidth=" in kw else ",".join(filter(None, [kw, "bandwidth=null"]))
    if args.reference not in ("exact", "tree", "auto"):
        reference = engine_from_args(args.reference, banded_kw(args.reference, args.reference_kw), option="--reference",
                                      kw_option="--reference-kw")[0]
    if args.out:
        check_writable(args.out, "--out")
    model = load_model(args)
    reason = ""
    given = f"--n {model.n}" if args.graph in GRAPHS else f"--graph {args.graph} (n = {model.n})"
    if args.reference == "auto":  # the exact engine that applies, and why
        from isingattn.errors import IsingInputError

        try:
            ref_name, reference, reason = choose_reference(model)
        except IsingInputError as e:
            raise input_error(f"{given}: {e} Or pass --reference tree (low treewidth), or use --n ≤ {EXACT_MAX_N}.") from None
    else:
        ref_name = args.reference
    engine_kw = {}
    for item in args.engine_kw:
        name, colon, kw = item.partition(":")
        if not colon or name not in args.engines:
            raise input_error(f"--engine-kw {item}: expected ENGINE:key=value,... naming one of --engines "
                         f"({', '.join(args.engines)}), e.g. sqa:num_reads=8.")
        engine_kw[name] = ",".join(filter(None, [engine_kw.get(name, ""), kw]))
    engines = {name: engine_from_args(name, banded_kw(name, engine_kw.get(name, "")), option="--engine-kw")[0]
               for name in args.engines}
    if model.is_sparse:  # engines without an edge-list path would densify J: refuse them before any work
        from isingattn.inference import get
        from isingattn.model import DENSE_LIMIT_BYTES

        dense = model.dense_J_bytes
        runs = dict(engines, **({ref_name: reference} if ref_name not in ("exact", "tree") else {}))
        heavy = sorted(name for name, e in runs.items() if not e.sparse_native)
        if heavy and dense > DENSE_LIMIT_BYTES:
            native = [n for n in available() if get(n).sparse_native]
            raise input_error(f"--graph {args.graph}: n = {model.n} spins; {', '.join(heavy)} need a dense J of "
                         f"{dense / 2**30:.3g} GiB. Use engines that work on sparse graphs ({', '.join(native)}) and "
                         "--reference tree or one of them.")
    if args.reference == "exact" and model.n > EXACT_MAX_N:
        raise input_error(f"{given}: the exact reference (--reference exact) handles at most "
                     f"{EXACT_MAX_N} spins; pass --reference tree (low treewidth) or an approximate engine, "
                     f"e.g. --reference gibbs (errors are then relative to it), or use --n ≤ {EXACT_MAX_N}.")
    too_small = [f"{name} (at most {e.max_n})" for name, e in engines.items()
                 if isinstance(getattr(e, "max_n", None), int) and model.n > e.max_n]
    if too_small:
        raise input_error(f"--engines: {', '.join(too_small)} cannot solve n = {model.n} spins; drop them from --engines "
                     "or use a smaller --n.")
    if reason:  # every check passed: say which reference runs, and why
        print(f"reference: {reason}", file=sys.stderr)
    t0 = time.perf_counter()
    log_z_ref, lz_note = exact_log_z(args, model)
    rows = compare(model, engines, key=jax.random.PRNGKey(args.seed), reference=reference, progress=True,
                   log_z_reference=log_z_ref, reference_reason=reason)
    mcse = rows.reference.info.get("mcse") if isinstance(rows.reference.info, dict) else None
    precision = "" if mcse is None else f" (its MCSE: max {float(np.max(mcse)):.2g}, mean {float(np.mean(mcse)):.2g})"
    title = (f"engines on {args.graph} n={model.n} beta={float(model.beta):g} (seed {args.seed})"
             + ("" if ref_name == "exact" else f", errors relative to {reason or ref_name}{precision}") + lz_note)
    print(f"compare: {time.perf_counter() - t0:.1f} s in all", file=sys.stderr)
    print(title + "\n\n" + format_table(rows, markdown=not args.plain))
    if args.out:
        from isingattn import atomic

        atomic.write_text(os.path.join(args.out, "compare.md"), title + "\n\n" + format_table(rows) + "\n")
        plot_comparison(rows, rows.reference.mean, os.path.join(args.out, "compare.png"))
        print(f"wrote {args.out}/compare.md and compare.png")
    return 0


def add_compare_parser(sub, fmt: dict) -> None:
    """The ``compare`` subcommand of ``sub`` (argparse subparsers), with the formatter ``fmt``."""
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
    c.add_argument("--reference-kw", default="", help="settings of the reference engine, e.g. num_samples=20000,num_chains=16; without it its defaults")
    c.add_argument("--engine-kw", action="append", default=[], metavar="ENGINE:KEY=VALUE,...",
                   help="settings of one compared engine, e.g. sqa:num_reads=8,num_sweeps=200 (repeatable); "
                        "without it its defaults")
    c.add_argument("--seed", type=seed_arg, default=0, help="seed of the generated graph and the samplers")
    c.add_argument("--out", default=None, help="folder for compare.md and compare.png; without it, print only")
    c.add_argument("--plain", action="store_true", help="plain-text table instead of markdown")
    c.set_defaults(func=compare_verb)
