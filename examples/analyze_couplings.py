"""What the couplings learned: graph analysis of J with networkx.

With a trained checkpoint, the J of its first head (in layer --layer, 0 by default: the
first; the model-hJ-s0.npz files under results/reproduce/ are committed, a training run writes
ckpt-<variant>-s<seed>.npz); without one, a toy J with the structure the paper reports (ferromagnetic at
distances 2-4, antiferromagnetic at 6+). The figure goes to runs/examples/couplings.png unless --plot says otherwise.

    python examples/analyze_couplings.py
    python examples/analyze_couplings.py --checkpoint results/reproduce/shakespeare/T12/model-hJ-s0.npz
"""

import argparse

import numpy as np

from isingattn import analysis
from isingattn.cli import one_line_errors

p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
p.add_argument("--checkpoint", default=None)
p.add_argument("--layer", type=int, default=0, help="which layer's J, with --checkpoint (0: the first)")
p.add_argument("--threshold", type=float, default=0.05)
p.add_argument("--plot", default="runs/examples/couplings.png", help="output figure ('' to skip)")
args = p.parse_args()

if args.checkpoint:
    from isingattn.models.saved import load_transformer

    with one_line_errors("analyze_couplings.py"):  # a missing or foreign checkpoint: one line, exit status 2
        model, _ = load_transformer(args.checkpoint)
    if not 0 <= args.layer < model.config.n_layers:
        L = model.config.n_layers
        p.error(f"--layer {args.layer}: the checkpoint has {L} layer(s); use --layer 0..{L - 1}")
    J = np.asarray(model.blocks[args.layer].attn.couplings())[0]
else:
    T = 12
    d = np.abs(np.subtract.outer(np.arange(T), np.arange(T)))
    J = np.where((d >= 2) & (d <= 4), 0.3, 0.0) + np.where(d >= 6, -0.2, 0.0)
    J += np.random.default_rng(0).normal(0, 0.02, (T, T))
    J = (J + J.T) / 2 * (1 - np.eye(T))

s = analysis.summary(J, threshold=args.threshold)
print("mean J by distance:", " ".join(f"{k + 1}:{v:+.3f}" for k, v in enumerate(s["distance_profile"])))
print(f"ferromagnetic edges {s['ferro']:.2f}, antiferromagnetic {s['antiferro']:.2f} (|J| > {args.threshold})")
print(f"frustrated triangles {s['frustrated_triangles']}")
print(f"communities (ferromagnetic graph) {s['communities']}")
print("strongest positions", sorted(s["strength"], key=s["strength"].get, reverse=True)[:5])
G = analysis.coupling_graph(J, args.threshold)
print(f"coupling graph: {G.number_of_nodes()} nodes, {G.number_of_edges()} edges")
if args.plot:
    with one_line_errors("analyze_couplings.py"):
        analysis.plot_couplings(J, args.plot, threshold=args.threshold)
    print(f"wrote {args.plot}")
