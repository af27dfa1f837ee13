"""Dependencies point one way: the core library never imports the command line or the
experiments (they sit in isingattn.models, a layer above)."""

import subprocess
import sys


def test_core_library_imports_nothing_from_the_application_layer():
    code = ("import sys, isingattn, isingattn.inference, isingattn.compare, isingattn.analysis, isingattn.checkpoint, "
            "isingattn.atomic, isingattn.runlock, isingattn.sharding, isingattn.fluctuation\n"
            "bad = sorted(m for m in sys.modules if m.startswith('isingattn.models'))\n"
            "print(bad)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]", out


def test_the_package_does_not_import_its_engines_to_register_them():
    code = ("import sys, isingattn\n"
            "print(sorted(m for m in sys.modules if m.startswith('isingattn.inference')))\n"
            "from isingattn.engine import get\n"
            "print(type(get('exact')).__name__, type(isingattn.inference.get('gibbs')).__name__)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.splitlines()
    assert out == ["[]", "Exact Gibbs"], out
