"""Banded's forward–backward as a native CPU kernel (XLA FFI), compiled on first use.

The blocked path (``banded_vjp``) is an XLA graph of small GEMMs and elementwise steps; on a CPU most
of its time is per-op overhead and traffic through memory. ``native.cc`` runs the same
forward–backward one chain at a time, per spin, with the chain's messages in cache, and its VJP as the
tangent of forward–backward (the algorithm is in that file's header), over XLA's intra-op threads (one per
usable core; ``taskset`` limits them): the results do not depend on their number. Same inputs, same outputs
(``mean``, ``log_z`` and the underflow bound ``lost``), so ``_blocked_or_sweep`` treats both alike.

Where it runs: the default backend is the CPU, the source compiles (a C++17 compiler, ``$CXX`` or
``c++``, and jaxlib's FFI headers) and ``ISINGATTN_NATIVE`` is not ``0``. Otherwise the blocked XLA
path runs (on an accelerator always), with one warning if compiling failed. The library is built
once per source, compiler, CPU and jax version into ``$ISINGATTN_CACHE`` (default
``~/.cache/isingattn``), written atomically; while it builds (about 10 s) one line on stderr says so.

Differentiation: reverse mode once (``jax.grad``, ``jax.vjp``). The kernel's VJP is itself an FFI call
without a derivative, so a gradient of a gradient raises on a CPU; ``ISINGATTN_NATIVE=0`` runs the XLA
graph, which supports it. Forward mode (``jax.jvp``, ``jax.hessian``) is unsupported on both paths.
"""

from __future__ import annotations

import ctypes
import functools
import hashlib
import os
import platform
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
from isingattn.inference.banded.band import band

SOURCE = Path(__file__).with_name("native.cc")
FLAGS = ["-O3", "-march=native", "-std=c++17", "-shared", "-fPIC", "-fno-math-errno"]
MAX_STATES = 1 << 12  # 2^w; a chain keeps (n + 1) 2^w messages (twice for the gradient)


def _cpu_id() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            return next((line for line in f if line.startswith("flags")), platform.processor())
    except OSError:
        return platform.processor()


def _build(so: Path, cxx: str) -> None:
    so.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=so.parent, prefix=".isingattn-", suffix=".so.tmp")
    os.close(fd)
    try:
        cmd = [cxx, *FLAGS, f"-I{jax.ffi.include_dir()}", str(SOURCE), "-o", tmp]
        subprocess.run(cmd, check=True, capture_output=True, text=True, timeout=300)
        os.chmod(tmp, 0o755)  # mkstemp makes it private; a shared cache must stay loadable by every user
        os.replace(tmp, so)  # atomic: a concurrent build replaces it with the same bytes
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def _build_saying_so(so: Path, cxx: str) -> None:
    """:func:`_build`, with one line on stderr: the first use on a machine waits for the compiler."""
    print(f"isingattn: compiling the native Banded kernel (first use with this compiler, CPU and jax; about 10 s) "
          f"into {so.parent} ...", end="", file=sys.stderr, flush=True)
    t0 = time.perf_counter()
    try:
        _build(so, cxx)
    except BaseException:
        print(" failed", file=sys.stderr, flush=True)
        raise
    print(f" done ({time.perf_counter() - t0:.1f} s)", file=sys.stderr, flush=True)


@functools.lru_cache(maxsize=None)
def _library():
    """Build (if needed), load and register the kernels; None where that is not possible."""
    if os.environ.get("ISINGATTN_NATIVE", "1") == "0":
        return None
    cxx = os.environ.get("CXX", "c++")
    try:
        version = subprocess.run([cxx, "--version"], capture_output=True, text=True, timeout=60).stdout
        key = hashlib.sha256(
            "\0".join([SOURCE.read_text(), cxx, version, " ".join(FLAGS), _cpu_id(), jax.__version__]).encode()
        ).hexdigest()[:16]
        cache = Path(os.environ.get("ISINGATTN_CACHE", Path.home() / ".cache" / "isingattn"))
        so = cache / "native" / f"banded_native-{key}.so"
        if not so.exists():
            _build_saying_so(so, cxx)
        lib = ctypes.cdll.LoadLibrary(str(so))
        for name in ("fwd_f32", "fwd_f64", "bwd_f32", "bwd_f64"):
            fn = getattr(lib, f"isingattn_banded_{name}")
            jax.ffi.register_ffi_target(f"isingattn_banded_{name}", jax.ffi.pycapsule(fn), platform="cpu")
        return lib
    except Exception as e:  # noqa: BLE001 (any failure to build or load leaves the XLA graph, with this warning)
        detail = getattr(e, "stderr", "") or str(e)
        warnings.warn(f"isingattn: the native Banded kernel is unavailable ({detail.strip()[:300]}); "
                      "the blocked XLA path runs instead (slower on a CPU). Set ISINGATTN_NATIVE=0 to silence this.",
                      RuntimeWarning, stacklevel=3)
        return None


def applies(h, beta, w: int) -> bool:
    """Static: whether the native kernel serves this call (``blocked_solve``'s layout already applies)."""
    return (jax.default_backend() == "cpu" and h.dtype in (jnp.float32, jnp.float64) and jnp.size(beta) == 1
            and 2**w <= MAX_STATES and _library() is not None)


def _calls(dt):
    if _library() is None:
        raise RuntimeError("isingattn: the native Banded kernel is unavailable (see the warning above)")
    suffix = "f64" if dt == jnp.float64 else "f32"
    return f"isingattn_banded_fwd_{suffix}", f"isingattn_banded_bwd_{suffix}"


def _core(lengths: np.ndarray):
    """``(h [R, n], jw [G, n, w], beta []) -> (mean [R, n], log_z [R], lost [R])`` for rows of the given
    lengths (group ``g`` holds rows ``g R/G .. (g+1) R/G - 1``), with the kernel's VJP."""

    def primal(h, jw, beta):
        fwd, _ = _calls(h.dtype)
        R, n = h.shape
        out = (jax.ShapeDtypeStruct((R, n), h.dtype), jax.ShapeDtypeStruct((R,), h.dtype),
               jax.ShapeDtypeStruct((R,), h.dtype))
        return jax.ffi.ffi_call(fwd, out, vmap_method="sequential")(h, jw, beta, jnp.asarray(lengths))

    core = jax.custom_vjp(primal)

    def core_bwd(saved, cts):
        h, jw, beta = saved
        gm, glz, _ = cts
        _, bwd = _calls(h.dtype)
        out = (jax.ShapeDtypeStruct(h.shape, h.dtype), jax.ShapeDtypeStruct(jw.shape, jw.dtype))
        gh, gjw = jax.ffi.ffi_call(bwd, out, vmap_method="sequential")(h, jw, beta, jnp.asarray(lengths), gm, glz)
        gbeta = (jnp.sum(h * gh) + jnp.sum(jw * gjw)) / beta  # the model depends on β h and β J only
        return gh, gjw, gbeta.astype(beta.dtype)

    core.defvjp(lambda h, jw, beta: (primal(h, jw, beta), (h, jw, beta)), core_bwd)
    return core


def native(h, J, beta, w: int, causal: bool, layout):
    """``mean [*batch, n]``, ``log_z [*batch]`` and ``lost [*batch]`` as :func:`banded_vjp.blocked` returns
    them, from the native kernel. ``layout`` from ``blocked_layout``."""
    batch, jb, _ = layout
    dt = h.dtype
    n = h.shape[-1]
    nd = len(batch)
    vary = [d for d in range(nd) if jb[d] != 1]  # J's own batch dims: the groups
    rest = [d for d in range(nd) if jb[d] == 1]  # dims J is shared along (the queries among them when causal)
    order = vary + rest
    G = int(np.prod([batch[d] for d in vary], dtype=np.int64))
    R = int(np.prod([batch[d] for d in rest], dtype=np.int64))
    hb = jnp.transpose(jnp.broadcast_to(h, batch + (n,)), order + [nd]).reshape(G * R, n)
    jw = band(J, w).reshape(G, n, w)  # J's shared dims have size 1
    if causal:  # the last batch dim is the query: query i sees spins 0..i
        lengths = np.tile(np.arange(1, n + 1, dtype=np.int32), G * R // n)
    else:
        lengths = np.full(G * R, n, np.int32)
    mean, log_z, lost = _core(lengths)(hb, jw, jnp.asarray(beta, dt).reshape(()))
    inv = list(np.argsort(order))
    shape = tuple(batch[d] for d in order)
    back = lambda x, tail: jnp.transpose(x.reshape(shape + tail), inv + list(range(nd, nd + len(tail))))
    return back(mean, (n,)), back(log_z, ()), jax.lax.stop_gradient(back(lost, ()))
