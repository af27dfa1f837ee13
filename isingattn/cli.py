"""The ``isingattn`` command line."""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import shutil
import sys
import time


def _parse_kw(text: str) -> dict:
    """'num_samples=200,schedule=colored' -> {'num_samples': 200, 'schedule': 'colored'}."""
    out = {}
    for item in filter(None, (t.strip() for t in (text or "").split(","))):
        if "=" not in item:
            raise SystemExit(f"--engine-kw expects key=value pairs separated by commas; got {item!r}.")
        k, v = item.split("=", 1)
        try:
            out[k.strip()] = json.loads(v)
        except json.JSONDecodeError:
            out[k.strip()] = v.strip()
    return out


def _cell_from_args(args, task: str):
    from isingattn.models.experiments import Cell

    variants = tuple(v.strip() for v in args.variants.split(",") if v.strip())
    extra = dict(types=args.types, depth=args.depth, n_train=args.n_train, n_test=args.n_test) if task == "brackets" else {}
    return Cell(task, task, args.seq_len, variants=variants, seeds=args.seeds, steps=args.steps, ffn=args.ffn,
                engine=args.engine, engine_kw=tuple(sorted(_parse_kw(args.engine_kw).items())),
                batch_size=args.batch_size, lr=args.lr, d_model=args.d_model, heads=args.heads,
                eval_every=args.eval_every, J_param=args.J_param, J_band=args.J_band, **extra)


def _train(args) -> int:
    from isingattn.models.experiments import run_cell, write_summary

    cell = _cell_from_args(args, args.task)
    out = args.out or os.path.join("runs", f"{args.task}-T{args.seq_len}{'' if args.ffn else '-noffn'}")
    t0 = time.perf_counter()
    mesh = None
    if args.devices:
        from isingattn.sharding import data_mesh

        mesh = data_mesh(args.devices)
    results = run_cell(cell, out, data_path=getattr(args, "data", None), progress=not args.no_progress,
                       command=" ".join(["isingattn", *sys.argv[1:]]), resume=args.resume, mesh=mesh)
    print("\n" + write_summary(cell, results, out, time.perf_counter() - t0))
    print(f"wrote {out}/summary.md, summary.csv, results.json, metrics.jsonl, ckpt-*.npz")
    return 0


def _reproduce(args) -> int:
    from isingattn.models.experiments import grid, run_cell, select, write_summary
    from isingattn.models.grid_report import write_report

    root = args.out or ("runs/reproduce-quick" if args.quick else "results/reproduce")
    if not args.report_only:
        ffn = None if args.ffn is None else args.ffn == "on"
        cells = select(grid(args.quick), args.only, args.seq_len, ffn, args.engine)
        print(f"{len(cells)} cell(s) -> {root}: " + ", ".join(c.name for c in cells), flush=True)
        for cell in cells:
            if args.seeds is not None:
                cell = dataclasses.replace(cell, seeds=args.seeds)
            out = os.path.join(root, cell.name)
            t0 = time.perf_counter()
            results = run_cell(cell, out, data_path=args.data, progress=not args.no_progress,
                               command=" ".join(["isingattn", *sys.argv[1:]]))
            print("\n" + write_summary(cell, results, out, time.perf_counter() - t0), flush=True)
    print(write_report(root))
    print(f"wrote {root}/README.md")
    return 0


def _analyze(args) -> int:
    from isingattn import analysis
    from isingattn.models.saved import load_transformer

    model, meta = load_transformer(args.checkpoint)
    J = model.attn.couplings()  # (H, T, T)
    out = args.out or os.path.splitext(args.checkpoint)[0] + "-analysis"
    os.makedirs(out, exist_ok=True)
    report = {}
    for h in range(J.shape[0]):
        Jh = J[h]
        thr = args.threshold if args.threshold is not None else 0.05 * float(abs(Jh).max())
        s = analysis.summary(Jh, threshold=thr)
        report[f"head{h}"] = {"threshold": thr, **s}
        prof = " ".join(f"{d + 1}:{v:+.3f}" for d, v in enumerate(s["distance_profile"]))
        print(f"head {h} (variant {model.config.variant}, T={Jh.shape[0]}, |J| > {thr:.3g}):\n"
              f"  mean J by distance  {prof}\n"
              f"  ferro {s['ferro']:.2f}  antiferro {s['antiferro']:.2f}  edges {s['edges']}  "
              f"frustrated triangles {s['frustrated_triangles']}\n"
              f"  communities {s['communities']}\n"
              f"  strongest nodes {sorted(s['strength'], key=s['strength'].get, reverse=True)[:5]}")
        fig = analysis.plot_couplings(Jh, os.path.join(out, f"J-head{h}.png"), threshold=thr,
                                      title=f"J head {h}")
        import matplotlib.pyplot as plt

        plt.close(fig)
    with open(os.path.join(out, "summary.json"), "w") as f:
        json.dump(report, f, indent=2)
    print(f"wrote {out}/summary.json and J-head*.png (heatmap, distance profile, coupling graph)")
    return 0


def _export_bqm(args) -> int:
    from isingattn.models.query_model import query_model
    from isingattn.models.saved import load_transformer

    model, meta = load_transformer(args.checkpoint)
    ising = query_model(model, meta, args.text, args.query, head=args.head)
    bqm = ising.to_bqm()
    with bqm.to_file() as src, open(args.out, "wb") as f:
        shutil.copyfileobj(src, f)
    print(f"wrote {args.out}: {len(bqm.variables)} spins, {len(bqm.quadratic)} couplings, beta={float(ising.beta):g} "
          f"(query {args.query}, head {args.head}); load with dimod.BinaryQuadraticModel.from_file(open(path, 'rb')).")
    return 0


def _load_model(args):
    """A model from --graph: a generated dense/chain/lattice instance or a dimod BQM file."""
    import jax
    import numpy as np

    from isingattn import IsingModel
    from isingattn.instances import random_model

    if args.graph in ("dense", "chain", "lattice"):
        rng = np.random.default_rng(np.asarray(jax.random.key_data(jax.random.PRNGKey(args.seed))).ravel())
        h, J = random_model(rng, args.n, h_scale=args.h_scale, J_scale=args.j_scale, graph=args.graph)
        return IsingModel(h, J, beta=args.beta)
    import dimod

    if not os.path.exists(args.graph):
        raise SystemExit(f"--graph must be dense, chain, lattice or a BQM file; {args.graph!r} does not exist.")
    try:
        with open(args.graph, "rb") as f:
            bqm = dimod.BinaryQuadraticModel.from_file(f)
    except Exception as e:  # dimod raises various errors on corrupt input
        raise SystemExit(f"could not read {args.graph!r} as a dimod BQM file (written by bqm.to_file()): {e}") from None
    return IsingModel.from_bqm(bqm, beta=args.beta)


def _compare(args) -> int:
    import jax

    from isingattn.compare import compare, format_table, plot_comparison
    from isingattn.engine import available, get

    names = [e.strip() for e in args.engines.split(",") if e.strip()]
    unknown = [e for e in names if e not in available()]
    if unknown:
        raise SystemExit(f"unknown engine(s) {unknown}; available: {', '.join(available())}.")
    model = _load_model(args)
    rows = compare(model, {e: get(e) for e in names}, key=jax.random.PRNGKey(args.seed))
    title = f"engines on {args.graph} n={model.n} beta={float(model.beta):g} (seed {args.seed})"
    print(title + "\n\n" + format_table(rows, markdown=not args.plain))
    if args.out:
        os.makedirs(args.out, exist_ok=True)
        with open(os.path.join(args.out, "compare.md"), "w") as f:
            f.write(title + "\n\n" + format_table(rows) + "\n")
        ref = compare(model, {"exact": get("exact")}, key=jax.random.PRNGKey(args.seed))[0]["mean"] \
            if model.n <= 20 else rows[0]["mean"]
        plot_comparison(rows, ref, os.path.join(args.out, "compare.png"))
        print(f"wrote {args.out}/compare.md and compare.png")
    return 0


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="isingattn", description="Boltzmann attention with learnable Ising couplings.")
    sub = p.add_subparsers(dest="cmd", required=True)
    train = sub.add_parser("train", help="train and compare attention variants")
    tasks = train.add_subparsers(dest="task", required=True)
    b = tasks.add_parser("brackets", help="bracket matching: point at the matching opening bracket",
                         formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    s_ = tasks.add_parser("shakespeare", help="character-level Tiny Shakespeare (validation perplexity)",
                          formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    for t, T in ((b, 8), (s_, 12)):
        t.add_argument("--seq-len", type=int, default=T, help="context length T")
        t.add_argument("--variants", default="softmax,hJ,h,J", help="comma-separated: softmax, hJ, h, J")
        t.add_argument("--seeds", type=int, default=3)
        t.add_argument("--steps", type=int, default=1500)
        t.add_argument("--batch-size", type=int, default=64)
        t.add_argument("--lr", type=float, default=3e-3)
        t.add_argument("--eval-every", type=int, default=250)
        t.add_argument("--d-model", type=int, default=64)
        t.add_argument("--heads", type=int, default=1)
        t.add_argument("--no-ffn", dest="ffn", action="store_false", help="drop the FFN (the paper's ablation)")
        t.add_argument("--engine", default="exact", help="inference engine for hJ and J (a registry name)")
        t.add_argument("--engine-kw", default="", help="engine configuration, e.g. num_samples=200,num_chains=4")
        t.add_argument("--J-param", dest="J_param", choices=("full", "toeplitz", "banded"), default="full",
                       help="J parametrization: full [T,T], toeplitz (by distance) or banded (zero beyond --J-band)")
        t.add_argument("--J-band", dest="J_band", type=int, default=None,
                       help="bandwidth of J: needed by banded, optional for toeplitz (e.g. 8 with --engine banded "
                            "--engine-kw bandwidth=8)")
        t.add_argument("--out", default=None, help="output folder (default runs/<task>-T<T>)")
        t.add_argument("--no-progress", action="store_true")
        t.add_argument("--resume", action="store_true", help="continue unfinished runs in --out from their checkpoints")
        t.add_argument("--devices", type=int, default=None,
                       help="train data-parallel on this many devices (--batch-size must be a multiple of it)")
        t.set_defaults(func=_train)
    b.add_argument("--depth", type=int, default=None, help="maximum nesting depth (default T/2)")
    b.add_argument("--types", type=int, default=3, help="number of bracket kinds")
    b.add_argument("--n-train", type=int, default=20000)
    b.add_argument("--n-test", type=int, default=2000)
    s_.add_argument("--data", default=None, help="path to input.txt (else $ISINGATTN_DATA, the cache, or a verified download)")

    r = sub.add_parser("reproduce", help="the paper's experiment grid, resumable, into results/",
                       formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    r.add_argument("--quick", action="store_true", help="a small grid (minutes on 2 CPU cores) into runs/reproduce-quick")
    r.add_argument("--only", default=None, help="one part: shakespeare, brackets or annealing")
    r.add_argument("--seq-len", type=int, default=None, help="only the cells at this context length")
    r.add_argument("--ffn", choices=("on", "off"), default=None, help="only cells with / without the FFN")
    r.add_argument("--seeds", type=int, default=None, help="override the number of seeds per cell")
    r.add_argument("--engine", default=None, help="only cells trained with this engine (e.g. dqa)")
    r.add_argument("--data", default=None, help="Tiny Shakespeare input.txt (else $ISINGATTN_DATA, cache, download)")
    r.add_argument("--out", default=None, help="root folder (default results/reproduce, or runs/reproduce-quick)")
    r.add_argument("--report-only", action="store_true", help="rebuild tables and plots from finished cells")
    r.add_argument("--no-progress", action="store_true")
    r.set_defaults(func=_reproduce)

    a = sub.add_parser("analyze", help="graph analysis of a trained checkpoint's learned J (networkx)")
    a.add_argument("checkpoint")
    a.add_argument("--threshold", type=float, default=None, help="edge threshold on |J| (default 5%% of max |J|)")
    a.add_argument("--out", default=None, help="folder for plots and summary.json (default next to the checkpoint)")
    a.set_defaults(func=_analyze)

    e = sub.add_parser("export-bqm", help="the Ising model one attention query solves, as a dimod BQM file")
    e.add_argument("checkpoint")
    e.add_argument("--text", required=True, help="input text (characters of the model's vocabulary)")
    e.add_argument("--query", type=int, required=True, help="query position i (keys 0..i are the spins)")
    e.add_argument("--head", type=int, default=0)
    e.add_argument("--out", required=True, help="output file (dimod's own serialization, BinaryQuadraticModel.to_file)")
    e.set_defaults(func=_export_bqm)

    c = sub.add_parser("compare", help="compare inference engines on one coupling graph",
                       formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    c.add_argument("--n", type=int, default=16, help="number of spins (generated graphs)")
    c.add_argument("--graph", default="dense", help="dense, chain, lattice, or a dimod BQM file (bqm.to_file())")
    c.add_argument("--beta", type=float, default=1.0)
    c.add_argument("--h-scale", type=float, default=1.0, help="fields ~ N(0, h_scale²)")
    c.add_argument("--j-scale", type=float, default=None, help="couplings ~ N(0, j_scale²), default 1/sqrt(n)")
    c.add_argument("--engines", default="exact,meanfield-tap,meanfield-bp,gibbs,sqa,dqa")
    c.add_argument("--seed", type=int, default=0)
    c.add_argument("--out", default=None, help="folder for compare.md and compare.png")
    c.add_argument("--plain", action="store_true", help="plain-text table instead of markdown")
    c.set_defaults(func=_compare)
    return p


def _enable_compile_cache():
    """Reuse XLA compilations across runs (the exact engine's gradient takes ~20 s to compile)."""
    import jax

    path = os.environ.get("ISINGATTN_JAX_CACHE", os.path.join(os.path.expanduser("~"), ".cache", "isingattn", "jax"))
    if path and path.lower() not in ("0", "off", "none"):
        jax.config.update("jax_compilation_cache_dir", path)
        jax.config.update("jax_persistent_cache_min_compile_time_secs", 1.0)


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    _enable_compile_cache()
    return args.func(args)


def run() -> int:
    """The console script: bad input ends with its message, not a traceback."""
    from isingattn.checkpoint import CheckpointError
    from isingattn.errors import IsingInputError
    from isingattn.models.shakespeare import DataError

    try:
        return main()
    except (IsingInputError, CheckpointError, DataError) as e:
        print(f"isingattn: error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(run())
