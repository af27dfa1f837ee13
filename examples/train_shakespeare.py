"""Train a one-layer Boltzmann-attention Transformer on character-level Tiny Shakespeare.

The corpus comes from --data, $ISINGATTN_DATA, a cached copy, or a one-time download
verified by SHA-256. Prints validation perplexity over the whole validation split.

    python examples/train_shakespeare.py --data input.txt --seq-len 12 --steps 2000
    python examples/train_shakespeare.py --variant softmax      # the baseline
"""

import argparse
import math

from isingattn import inference
from isingattn.models import shakespeare
from isingattn.cli import one_line_errors
from isingattn.models.train import TrainConfig, train
from isingattn.models.transformer import Config

p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
p.add_argument("--data", default=None)
p.add_argument("--seq-len", type=int, default=12)
p.add_argument("--variant", default="hJ", choices=["softmax", "hJ", "h", "J"])
p.add_argument("--engine", default="exact", help="inference engine for hJ (a registry name)")
p.add_argument("--steps", type=int, default=2000)
p.add_argument("--eval-every", type=int, default=500)
p.add_argument("--seed", type=int, default=0)
args = p.parse_args()

with one_line_errors("train_shakespeare.py"):  # offline without the corpus, a wrong --data or --engine: one line
    data = shakespeare.encode(shakespeare.load_text(args.data))
    train_split, val_split = shakespeare.lm_splits(data, args.seq_len)
    config = Config(vocab_size=len(data.chars), seq_len=args.seq_len, n_out=len(data.chars), variant=args.variant,
                    engine=inference.get(args.engine))
    tc = TrainConfig(steps=args.steps, eval_every=args.eval_every, eval_limit=2048)
    model, final = train(config, train_split, val_split, tc, args.seed, meta={"chars": data.chars})
    print(f"{args.variant} T={args.seq_len}: validation perplexity {math.exp(final['test_loss']):.3f} "
          f"({final['eval_count']} characters), train loss {final['train_loss']:.3f}")
