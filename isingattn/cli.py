"""The ``isingattn`` command line."""

from __future__ import annotations

import argparse
import csv
import dataclasses
import json
import os
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


def _train_brackets(args) -> int:
    import jax

    from isingattn import inference
    from isingattn.models import brackets
    from isingattn.models.report import markdown_table, summary_rows
    from isingattn.models.train import TrainConfig, compare_variants
    from isingattn.models.transformer import Config

    variants = [v.strip() for v in args.variants.split(",") if v.strip()]
    engine = inference.get(args.engine, **_parse_kw(args.engine_kw))
    out = args.out or os.path.join("runs", f"brackets-T{args.seq_len}{'' if args.ffn else '-noffn'}")
    os.makedirs(out, exist_ok=True)
    tc = TrainConfig(steps=args.steps, batch_size=args.batch_size, lr=args.lr, eval_every=args.eval_every)

    def make_config(variant):
        return Config(vocab_size=2 * args.types, seq_len=args.seq_len, n_out=args.seq_len, d_model=args.d_model,
                      n_heads=args.heads, ffn=args.ffn, variant=variant, engine=engine)

    def data_for_seed(seed):
        key = jax.random.fold_in(jax.random.PRNGKey(seed), 0xB4AC)
        d = brackets.make_data(key, args.seq_len, args.n_train, args.n_test, args.depth, args.types)
        return d.train, d.test

    with open(os.path.join(out, "config.json"), "w") as f:
        json.dump({"command": " ".join(sys.argv), "args": {k: v for k, v in vars(args).items() if k != "func"}, "train": dataclasses.asdict(tc),
                   "model": {k: repr(v) for k, v in dataclasses.asdict(make_config(variants[0])).items()}}, f, indent=2)
    if not args.resume:
        open(os.path.join(out, "metrics.jsonl"), "w").close()
    t0 = time.perf_counter()
    results = compare_variants(make_config, data_for_seed, variants, range(args.seeds), tc, out,
                               progress=not args.no_progress, resume=args.resume)
    rows = summary_rows(results)
    table = markdown_table(rows, "test accuracy (%)")
    title = (f"Bracket matching, T={args.seq_len}, FFN={'on' if args.ffn else 'off'}, {args.steps} steps, "
             f"{args.seeds} seeds ({time.perf_counter() - t0:.0f} s)\n\n")
    print("\n" + title + table)
    with open(os.path.join(out, "summary.md"), "w") as f:
        f.write(title + table)
    with open(os.path.join(out, "summary.csv"), "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=sorted({k for r in rows for k in r}))
        w.writeheader()
        w.writerows(rows)
    with open(os.path.join(out, "results.json"), "w") as f:
        json.dump({v: {str(s): a for s, a in r.items()} for v, r in results.items()}, f, indent=2)
    print(f"wrote {out}/summary.md, summary.csv, results.json, metrics.jsonl")
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
    b.add_argument("--seq-len", type=int, default=8, help="string length T (even)")
    b.add_argument("--variants", default="softmax,hJ,h,J", help="comma-separated: softmax, hJ, h, J")
    b.add_argument("--seeds", type=int, default=3)
    b.add_argument("--steps", type=int, default=1500)
    b.add_argument("--batch-size", type=int, default=64)
    b.add_argument("--lr", type=float, default=3e-3)
    b.add_argument("--eval-every", type=int, default=250)
    b.add_argument("--d-model", type=int, default=64)
    b.add_argument("--heads", type=int, default=1)
    b.add_argument("--no-ffn", dest="ffn", action="store_false", help="drop the FFN (the paper's ablation)")
    b.add_argument("--depth", type=int, default=None, help="maximum nesting depth (default T/2)")
    b.add_argument("--types", type=int, default=3, help="number of bracket kinds")
    b.add_argument("--n-train", type=int, default=20000)
    b.add_argument("--n-test", type=int, default=2000)
    b.add_argument("--engine", default="exact", help="inference engine for hJ and J (a registry name)")
    b.add_argument("--engine-kw", default="", help="engine configuration, e.g. num_samples=200,num_chains=4")
    b.add_argument("--out", default=None, help="output folder (default runs/brackets-T<T>)")
    b.add_argument("--no-progress", action="store_true")
    b.add_argument("--resume", action="store_true", help="continue unfinished runs in --out from their checkpoints")
    b.set_defaults(func=_train_brackets)

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


if __name__ == "__main__":
    sys.exit(main())
