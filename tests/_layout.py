"""Where things are defined in the library's source (for the "one piece of code" tests)."""

import ast
import pathlib

ROOT = pathlib.Path(__file__).resolve().parents[1]
LIBRARY = ("isingattn", "inference", "models")


def definers(name: str) -> list[str]:
    """The library files (relative to the repository) that define ``name`` at any depth."""
    out = []
    for top in LIBRARY:
        for path in sorted((ROOT / top).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, (ast.FunctionDef, ast.ClassDef)) and node.name == name:
                    out.append(path.relative_to(ROOT).as_posix())
                    break
    return out
