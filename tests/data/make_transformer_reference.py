"""Writes transformer_reference.npz: parameters, logits and attention weights of small
one-layer Transformers, as the one-layer code of before ``Config.n_layers`` computed them.

tests/models/test_transformer_layers.py checks that today's code still gives these bit for bit
(same key -> same parameters, same leaf order -> old checkpoints load, same outputs).
Rounding depends on the XLA build and flags and on the CPU that XLA compiles for (its
instruction set and vector width), so the file records them (``env``). It was written from
the repository root with the Transformer of commit ea047a5:

    git show ea047a5:models/transformer.py > transformer_ea047a5.py
    python tests/data/make_transformer_reference.py transformer_ea047a5.py
"""

import importlib.util
import json
import os
import sys
import warnings

os.environ.setdefault("XLA_FLAGS", "--xla_backend_optimization_level=0")  # as tests/conftest.py sets it

import jax  # noqa: E402

jax.config.update("jax_enable_x64", True)  # as in the test session (tests/conftest.py)

import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

from isingattn.engine import get  # noqa: E402
from isingattn.models import transformer as current  # noqa: E402

# name -> (Config kwargs, init seed); kept in the test file too, which builds the same configs
CASES = {
    "hJ_full": (dict(vocab_size=5, seq_len=6, n_out=6, d_model=8, n_heads=2), 0),
    "softmax_toeplitz_noffn": (dict(vocab_size=5, seq_len=6, n_out=4, d_model=8, variant="softmax", ffn=False,
                                    J_param="toeplitz", J_band=3), 1),
    "h_banded": (dict(vocab_size=4, seq_len=6, n_out=6, d_model=4, n_heads=2, variant="h", ffn_mult=2,
                      J_param="banded", J_band=2, field_bias=False, beta=0.7), 2),
    "hJ_gibbs": (dict(vocab_size=5, seq_len=6, n_out=6, d_model=4, engine=("gibbs", dict(num_samples=16, num_warmup=8)),
                      J_param="banded", J_band=2), 3),
}


def build(kw, module=current):
    kw = dict(kw)
    if isinstance(kw.get("engine"), tuple):
        name, ekw = kw["engine"]
        kw["engine"] = get(name, **ekw)
    return module.Config(**kw)


def perturbed(model):
    """Every array leaf plus 0.3 N(0, 1) noise (J and the field bias nonzero), keyed by leaf index."""
    leaves, tree = jax.tree_util.tree_flatten(model)
    return jax.tree_util.tree_unflatten(tree, [
        x + 0.3 * jax.random.normal(jax.random.fold_in(jax.random.PRNGKey(99), i), x.shape)
        for i, x in enumerate(leaves)])


def tokens(cfg):
    return jnp.asarray(np.random.default_rng(7).integers(0, cfg.vocab_size, (2, cfg.seq_len)))


def cpu() -> str:
    """The host CPU as XLA's CPU compiler sees it: vendor, family/model and SIMD extensions.

    XLA compiles for the host's instruction set, so the same build rounds differently on
    another CPU (seen: 1-ulp differences in the logits between two x86-64 CI machines).
    """
    import platform

    try:
        with open("/proc/cpuinfo") as f:
            info = dict(line.split(":", 1) for line in f.read().split("\n\n")[0].splitlines() if ":" in line)
    except OSError:
        return platform.machine() + " " + platform.processor()
    info = {k.strip(): v.strip() for k, v in info.items()}
    simd = sorted(f for f in info.get("flags", "").split() if f.startswith(("sse", "avx", "fma", "amx", "f16c")))
    return " ".join([platform.machine(), info.get("vendor_id", ""), "family", info.get("cpu family", "?"),
                     "model", info.get("model", "?"), *simd])


def environment() -> str:
    """What rounding depends on besides the code: the XLA build and flags, the backend and the CPU."""
    import jaxlib

    return json.dumps({"jax": jax.__version__, "jaxlib": jaxlib.__version__, "backend": jax.default_backend(),
                       "XLA_FLAGS": os.environ.get("XLA_FLAGS", ""), "cpu": cpu()}, sort_keys=True)


def outputs(kw, seed, module=current):
    """Parameters (``leafNN``, in flattening order), logits, attention weights and fields of one case."""
    cfg = build(kw, module)
    m = module.Transformer(cfg, key=jax.random.PRNGKey(seed))
    toks = tokens(cfg)
    p = perturbed(m)
    logits, weights = p(toks, key=jax.random.PRNGKey(5), return_weights=True)
    out = {f"leaf{i:02d}": np.asarray(x) for i, x in enumerate(jax.tree_util.tree_leaves(m))}
    out.update(logits_init=np.asarray(m(toks, key=jax.random.PRNGKey(5))), logits=np.asarray(logits),
               weights=np.asarray(weights), fields=np.asarray(p.attention_fields(toks)))
    return out


if __name__ == "__main__":
    warnings.filterwarnings("ignore", message="Gibbs:")  # 16 samples do not mix; only reproducibility matters
    module = current
    if len(sys.argv) > 1:  # the Transformer module to record, e.g. an old version's file
        spec = importlib.util.spec_from_file_location("reference_transformer", sys.argv[1])
        module = sys.modules[spec.name] = importlib.util.module_from_spec(spec)  # dataclasses look it up
        spec.loader.exec_module(module)
    arrays = {f"{name}/{k}": v for name, (kw, seed) in CASES.items() for k, v in outputs(kw, seed, module).items()}
    arrays["env"] = np.array(environment())
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "transformer_reference.npz")
    np.savez_compressed(path, **arrays)
    print(f"wrote {path}: {len(arrays)} arrays, {os.path.getsize(path)} bytes")
