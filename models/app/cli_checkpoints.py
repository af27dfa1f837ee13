"""The ``isingattn`` commands that read a trained checkpoint: ``analyze``, ``evaluate`` and ``export-bqm``.

Their options are declared in ``cli.build_parser``; bad input ends as there, in one line and exit status 2.
"""

from __future__ import annotations

import os
import shutil

from isingattn.models.app.cli_args import check_writable, engine_from_args, input_error


def _analysis_folder(checkpoint: str) -> str:
    """runs/analyze/<two parent folders>-<stem>: e.g. results/reproduce/brackets/T8/ckpt-hJ-s0.npz ->
    runs/analyze/brackets-T8-ckpt-hJ-s0 (never next to the checkpoint, which may sit in results/)."""
    parts = os.path.normpath(os.path.abspath(checkpoint)).split(os.sep)
    stem = os.path.splitext(parts[-1])[0]
    return os.path.join("runs", "analyze", "-".join([p for p in parts[-3:-1] if p] + [stem]))


def analyze_verb(args) -> int:
    from isingattn import analysis, atomic
    from isingattn.models.saved import load_transformer

    out = args.out or _analysis_folder(args.checkpoint) + (f"-layer{args.layer}" if args.layer else "")
    check_writable(out, "--out")
    model, meta = load_transformer(args.checkpoint)
    variant = model.config.variant
    if variant not in ("hJ", "J"):
        # refused (exit 2) rather than drawing all-zero plots: a script that asked for an
        # analysis of couplings must not read a success from a model that has none
        raise input_error(f"{args.checkpoint} holds a {variant!r} model, which has no learned couplings (J ≡ 0): "
                     "nothing to analyze. Pass a checkpoint of the hJ or J variant (e.g. ckpt-hJ-s0.npz).")
    L = model.config.n_layers
    if args.layer >= L:
        raise input_error(f"--layer {args.layer}: {args.checkpoint} has {L} layer(s); use --layer 0..{L - 1}.")
    J = model.blocks[args.layer].attn.couplings()  # (H, T, T)
    report = {}
    import matplotlib.pyplot as plt

    for h in range(J.shape[0]):
        Jh = J[h]
        thr = args.threshold if args.threshold is not None else 0.05 * float(abs(Jh).max())
        s = analysis.summary(Jh, threshold=thr)
        report[f"head{h}"] = {"threshold": thr, **s}
        prof = " ".join(f"{d + 1}:{v:+.3f}" for d, v in enumerate(s["distance_profile"]))
        print(f"head {h} (variant {variant}, T={Jh.shape[0]}, |J| > {thr:.3g}):\n"
              f"  mean J by distance  {prof}\n"
              f"  ferro {s['ferro']:.2f}  antiferro {s['antiferro']:.2f}  edges {s['edges']}  "
              f"frustrated triangles {s['frustrated_triangles']}\n"
              f"  communities {s['communities']}\n"
              f"  strongest nodes {sorted(s['strength'], key=s['strength'].get, reverse=True)[:5]}")
        fig = analysis.plot_couplings(Jh, os.path.join(out, f"J-head{h}.png"), threshold=thr, title=f"J head {h}")
        plt.close(fig)
    atomic.write_json(os.path.join(out, "summary.json"), report, indent=2)
    print(f"wrote {out}/summary.json and J-head*.png (heatmap, distance profile, coupling graph)")
    return 0


def evaluate_verb(args) -> int:
    from isingattn import atomic
    from isingattn.models.app.evaluate import describe, evaluate_checkpoint

    if args.json:
        check_writable(args.json, "--json", is_file=True)
    if args.engine_kw and not args.engine:
        raise input_error(f"--engine-kw {args.engine_kw} needs --engine (the engine it configures), e.g. --engine gibbs.")
    engine = engine_from_args(args.engine, args.engine_kw)[0] if args.engine else None
    result = evaluate_checkpoint(args.checkpoint, engine=engine, keys=args.keys, data_path=args.data)
    print(describe(result))
    if args.json:
        atomic.write_json(args.json, {"checkpoint": args.checkpoint, **result}, indent=2)
        print(f"wrote {args.json}")
    return 0


def export_bqm_verb(args) -> int:
    from isingattn import atomic
    from isingattn.models.query_model import query_model
    from isingattn.models.saved import load_transformer

    check_writable(args.out, "--out", is_file=True)
    model, meta = load_transformer(args.checkpoint)
    ising = query_model(model, meta, args.text, args.query, head=args.head, layer=args.layer)
    bqm = ising.to_bqm()
    with bqm.to_file() as src, atomic.writing(args.out, "wb") as f:
        shutil.copyfileobj(src, f)
    print(f"wrote {args.out}: {len(bqm.variables)} spins, {len(bqm.quadratic)} couplings, beta={float(ising.beta):g} "
          f"(query {args.query}, head {args.head}, layer {args.layer}); "
          "load with dimod.BinaryQuadraticModel.from_file(open(path, 'rb')).")
    return 0
