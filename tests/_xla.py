"""The suite's XLA compile settings (tests/conftest.py applies them; tests that start subprocesses
pass them on)."""

import os

LEVEL = "xla_backend_optimization_level"

# LLVM backend optimisation level 0 and XLA:CPU's elemental emitters: same semantics, about half the
# compile time, which dominates most tests. One LLVM module per program instead of XLA's default split
# into many compiled in parallel: results equal bit for bit (benchmarks/suite_compile.py) for less CPU,
# and the suite's two workers already keep both cores busy (benchmarks/README.md, "The test suite").
FAST_COMPILE_FLAGS = f"--{LEVEL}=0 --xla_cpu_use_fusion_emitters=false --xla_cpu_parallel_codegen_split_count=1"

# For a run-bound test (its time is running, not compiling): level 1 runs several times faster.
RUN_BOUND_OPTIONS = {LEVEL: 1}


def run_bound_xla_flags() -> str:
    """This process's XLA_FLAGS with the run-bound level in place of level 0, for a run-bound subprocess."""
    return os.environ.get("XLA_FLAGS", "").replace(f"--{LEVEL}=0", f"--{LEVEL}={RUN_BOUND_OPTIONS[LEVEL]}")
