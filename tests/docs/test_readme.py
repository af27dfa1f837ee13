"""The documentation says what the code does.

* Every ```python block of README.md runs as shown. Each block is self-contained and runs
  in a fresh namespace (none builds on another); blocks whose results can be checked are
  checked against the float64 brute force.
* The examples that moved from the README to the documentation site (docs/) keep their checks
  there: each is a code cell of an executed page, with its checks as assertions in the page,
  which the strict site build (tests/docs/test_site.py) executes and fails on.
* The engines page's table (docs/engines.md) is the committed output of the command printed
  above it (``results/compare-dense16/compare.md``), and that command's settings are the ones
  the committed file records.
* Every ``DESIGN.md §N`` citation in the repository names a section (and a quoted
  sub-heading, where one is given) that DESIGN.md has.
* No text file of the repository refers to a file outside it.
"""

import math
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from isingattn.testing import brute_force

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text(encoding="utf-8")
ENGINES_PAGE = (ROOT / "docs" / "engines.md").read_text(encoding="utf-8")  # "Choosing an engine", from the README
DESIGN = (ROOT / "DESIGN.md").read_text(encoding="utf-8")
COMPARE_MD = ROOT / "results" / "compare-dense16" / "compare.md"


# ---- every python block runs ------------------------------------------------------------


def _python_blocks():
    """``(first line number, code)`` of every ```python block of the README."""
    return [(README[: m.start()].count("\n") + 2, m.group(1))
            for m in re.finditer(r"^```python\n(.*?)^```", README, re.S | re.M)]


def _check_api_example(ns):
    """The API example: Exact's marginals and correlations against the brute force, and
    the attention weights normalized."""
    h, J, m = np.asarray(ns["h"]), np.asarray(ns["J"]), ns["m"]
    for q in range(h.shape[0]):
        ref = brute_force(h[q], J)
        np.testing.assert_allclose(m.mean[q], ref["mean"], atol=1e-6)
        np.testing.assert_allclose(m.corr[q], ref["corr"], atol=1e-6)
        np.testing.assert_allclose(m.log_z[q], ref["log_z"], atol=1e-6)
    np.testing.assert_allclose(ns["weights"].sum(-1), 1.0, atol=1e-6)


CHECKS = {"boltzmann_attention(": _check_api_example}

# Blocks that moved to executed pages of the site, with the assertions that check them there (the
# checks the README ran on them, as code in the page). The site build executes every page and fails
# on a failing cell (nb_execution_raise_on_error), so these are checked wherever the site is built.
DOC_CHECKS = {
    "data_mesh(": ("docs/devices.md", [  # the mesh-split Exact marginals against the brute force; 2 steps trained
        "np.testing.assert_allclose(m.mean[q], brute_force(h64[q], J64)[\"mean\"], atol=1e-5)",
        "assert metrics[\"step\"] == 2 and math.isfinite(metrics[\"test_loss\"])"]),
    "onsager.torus_log_z(": ("docs/tutorials/onsager.md", [  # AIS within 4 SE of Kaufman; naive MF below it
        "assert abs(float(ais.log_z) - exact) <= 4 * float(ais.info[\"log_z_se\"]) + 1e-3",
        "assert float(naive.log_z) <= exact and np.isfinite(float(bethe.log_z))"]),
    "az.compare(fits)": ("docs/tutorials/fitting.md", [  # LOO ranks the true (lattice) structure first
        "assert list(cmp.index) == [\"lattice\", \"dense\"]"]),
    "Gibbs(num_chains=8, num_samples=2000)": ("docs/tutorials/engines-on-a-lattice.md", [  # Gibbs and BP on a strip
        "assert float(abs(gibbs - exact).max()) < 0.1 and float(abs(bp - exact).max()) < 0.1"]),
}


def _code_cells(text: str) -> list[str]:
    """The executed code cells of a MyST-NB page."""
    return re.findall(r"^```\{code-cell\}[^\n]*\n(.*?)^```", text, re.S | re.M)


def test_moved_examples_keep_their_checks_in_executed_pages():
    """Each moved block is an executed cell of its page (a MyST-NB notebook, executed by the site
    build), and the assertions that check it are executed cells of the same page."""
    for marker, (page, asserts) in DOC_CHECKS.items():
        text = (ROOT / page).read_text(encoding="utf-8")
        assert text.startswith("---\nfile_format: mystnb"), f"{page} is not an executed (MyST-NB) page"
        cells = "\n".join(_code_cells(text))
        assert marker in cells, f"{page}: no executed cell contains {marker!r}"
        for a in asserts:
            assert a in cells, f"{page}: the check {a!r} of the {marker!r} example is not an executed cell"
        assert marker not in "\n".join(code for _, code in _python_blocks()), (
            f"{marker!r} is back in the README: move its check back into CHECKS")


def test_readme_has_the_checked_blocks():
    """The checks below must find their blocks (a renamed block must not skip its check)."""
    blocks = _python_blocks()
    for marker in CHECKS:
        assert sum(marker in code for _, code in blocks) == 1, f"no single README python block contains {marker!r}"


def _block_id(code: str) -> str:
    """A block's test id: a hash of its code, so that prose edits around it keep the id (which
    tests/slow_cases.txt may name) and an edit of the block itself changes it (conftest.py then
    refuses a stale id in that list instead of silently running the block in the quick loop)."""
    import hashlib

    return "README.md:" + hashlib.sha1(code.encode()).hexdigest()[:8]


@pytest.mark.parametrize("line,code", _python_blocks(), ids=[_block_id(code) for _, code in _python_blocks()])
def test_readme_python_block_runs(line, code):
    ns: dict = {"__name__": "__readme__"}
    exec(compile("\n" * (line - 1) + code, str(ROOT / "README.md"), "exec"), ns)
    for marker, check in CHECKS.items():
        if marker in code:
            check(ns)


# ---- the engine table is the committed output of its command -------------------------------


def _compare_command() -> dict:
    """The options of the engines page's ``isingattn compare`` command (``--seed`` defaults to 0)."""
    lines = [ln for block in re.findall(r"^```bash\n(.*?)^```", ENGINES_PAGE, re.S | re.M) for ln in block.splitlines()
             if ln.startswith("isingattn compare ")]
    assert len(lines) == 1, f"expected one `isingattn compare` command in docs/engines.md; got {lines}"
    words = shlex.split(lines[0])[2:]
    assert len(words) % 2 == 0 and all(w.startswith("--") for w in words[::2]), words
    opts = {"--seed": "0", **dict(zip(words[::2], words[1::2]))}
    return {k[2:]: v for k, v in opts.items()}


def _table(text: str, after: str = "") -> list[list[str]]:
    """Cells of the first markdown table that starts with ``| engine |`` (after ``after``)."""
    text = text[text.index(after):] if after else text
    lines = text[text.index("| engine |"):].splitlines()
    rows = []
    for ln in lines:
        if not ln.startswith("|"):
            break
        rows.append([c.strip() for c in ln.strip().strip("|").split("|")])
    return rows


def test_engines_page_table_is_the_committed_compare_output():
    args = _compare_command()
    assert Path(args["out"]) == Path("results/compare-dense16"), "the engines page's command must write the committed folder"
    committed = COMPARE_MD.read_text(encoding="utf-8")
    title = committed.splitlines()[0]
    expected = f"on {args['graph']} n={int(args['n'])} beta={float(args['beta']):g} "
    assert expected in title and f"(seed {args['seed']})" in title, (
        f"{COMPARE_MD} ({title!r}) was not written by the engines page's command")
    ours = _table(ENGINES_PAGE, after="isingattn compare --n")
    theirs = _table(committed)
    assert [r[0] for r in theirs[2:]] == args["engines"].split(","), "the committed rows are not the command's engines"
    assert ours == theirs, (
        "the engine table of docs/engines.md differs from results/compare-dense16/compare.md: rerun the command "
        "shown there and paste its table")


@pytest.mark.slow
def test_committed_compare_rows_of_deterministic_engines_are_reproduced():
    """Rerun the engines page's command for its deterministic engines (exact and mean field,
    which take no key, so running them alone changes nothing): the accuracy columns of
    the committed file are what the current code prints.

    The samplers' rows are deterministic on one machine but not across CPU types (a
    last-bit difference in a local field changes one accept decision, and the chain from
    then on), and each engine's key depends on its place in the list, so they are not
    compared with a fresh run; the table test above keeps the engines page equal to their
    committed output."""
    args = _compare_command()
    det = ["exact", "meanfield-naive", "meanfield-tap", "meanfield-bp"]
    opts = {**args, "engines": ",".join(det)}
    opts.pop("out")
    cmd = [sys.executable, "-m", "isingattn.cli", "compare"] + [w for k, v in opts.items() for w in (f"--{k}", v)]
    env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}  # as a user runs it
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=600, cwd=ROOT, env=env)
    assert out.returncode == 0, out.stderr[-2000:]
    fresh = {r[0]: r[:7] for r in _table(out.stdout)[2:]}  # engine .. min ESS: no timing columns
    committed = {r[0]: r[:7] for r in _table(COMPARE_MD.read_text(encoding="utf-8"))[2:]}
    assert {e: fresh[e] for e in det} == {e: committed[e] for e in det}


# ---- DESIGN.md citations and references outside the repository ------------------------------

SKIP_DIRS = {".git", ".ci-venv", ".venv", "venv", "build", "dist", "runs", "__pycache__", ".hypothesis",
             ".pytest_cache", "_build", ".jupyter_cache", "jupyter_execute"}  # the last three: a built site
TEXT_SUFFIXES = {".py", ".md", ".txt", ".toml", ".json", ".cfg", ".ini", ".yml", ".yaml", ".sh", ".csv"}


def _text_files():
    for dirpath, dirnames, filenames in os.walk(ROOT):
        dirnames[:] = [d for d in dirnames if d not in SKIP_DIRS and not d.endswith(".egg-info")]
        for name in filenames:
            p = Path(dirpath) / name
            if p.suffix in TEXT_SUFFIXES or p.relative_to(ROOT).as_posix() == ".ci/run":
                yield p


def _design_sections() -> dict[int, str]:
    """Section number -> its text (from its ``## N.`` heading to the next one)."""
    heads = list(re.finditer(r"^## (\d+)\. .*$", DESIGN, re.M))
    return {int(m.group(1)): DESIGN[m.start(): (heads[i + 1].start() if i + 1 < len(heads) else len(DESIGN))]
            for i, m in enumerate(heads)}


def test_design_citations_name_existing_sections():
    sections = _design_sections()
    assert {1, 2, 3, 4, 5} <= set(sections), sorted(sections)
    cite = re.compile(r'DESIGN\.md §(\d+)(?:,? "([^"]+)")?')
    found, bad = 0, []
    for p in _text_files():
        if p == Path(__file__).resolve():
            continue
        for ln, line in enumerate(p.read_text(encoding="utf-8", errors="replace").splitlines(), 1):
            for m in cite.finditer(line):
                found += 1
                sec, sub = int(m.group(1)), m.group(2)
                where = f"{p.relative_to(ROOT)}:{ln}"
                if sec not in sections:
                    bad.append(f"{where}: §{sec} does not exist")
                elif sub and not re.search(rf"^### {re.escape(sub)}", sections[sec], re.M):
                    bad.append(f"{where}: §{sec} has no sub-heading starting with {sub!r}")
            if "DESIGN.md's accuracy" in line and "*Accuracy bars*" not in sections[3]:
                bad.append(f"{p.relative_to(ROOT)}:{ln}: DESIGN.md §3 states no accuracy bars")
    assert found >= 20, f"only {found} citations found: is the pattern still right?"
    assert not bad, "\n".join(bad)


def test_design_covers_what_the_citing_code_relies_on():
    """The facts that citing docstrings and tests take from DESIGN.md are there."""
    s = _design_sections()
    for needle in ("E(s) = -Σ_j h_j s_j - Σ_{j<k} J_jk s_j s_k", "linear[j] = -h_j", "quadratic[(j, k)] = -J_jk",
                   "**Masks.**", "**Validation.**", "`β` is a finite positive scalar"):
        assert needle in s[1], needle
    for needle in ("1.08%", "+2.89", "+4.53", "`toeplitz`", "`banded`", "tanh(β h_j)", "arXiv:2606.12478"):
        assert needle in s[2], needle
    for heading in ("Exact enumeration — meet in the middle", "Banded / transfer matrix",
                    "Mean field: naive, TAP and loopy BP", "Gibbs / MCMC via NumPyro",
                    "Path-integral simulated quantum annealing (SQA)",
                    "Digitized simulation of diabatic quantum annealing (DQA)", "Any dimod sampler: `DimodEngine`",
                    "Fluctuation–dissipation gradients", "Causal prefix buckets"):
        assert f"### {heading}\n" in s[3], heading
    assert "κ = 2 ∫∫_{t1>t2} A(t1) B(t2) = τ²/12" in s[3] and "β_h = 2κ" in s[3] and "β_J = 4κ" in s[3]


OUTSIDE = re.compile(r"(?<![\w.~-])/(?:work|home|root|Users|mnt|tmp)/|\bshared/data\b|(?<![\w.])\.\./")
# A relative path that climbs out of its folder, as the documentation site's pages use for the repository's
# figures and files (``../results/...``, ``{include} ../DESIGN.md``): allowed where it names a file or folder
# inside the repository, relative to the file that holds it.
RELATIVE_UP = re.compile(r"(?<![\w.])((?:\.\./)+[\w./-]*)")


def _stays_inside(p: Path, line: str) -> bool:
    """Every ``../`` path of ``line`` exists and lies inside the repository (and the line names nothing
    else outside it)."""
    if OUTSIDE.search(RELATIVE_UP.sub("", line)):
        return False
    for m in RELATIVE_UP.finditer(line):
        target = (p.parent / m.group(1)).resolve()
        if not (target.is_relative_to(ROOT) and target.exists()):
            return False
    return True


def _outside_references(under_results: bool) -> list[str]:
    this = Path(__file__).resolve()
    bad = []
    for p in _text_files():
        rel = p.relative_to(ROOT)
        if p == this or (rel.parts[0] == "results") != under_results:
            continue
        for ln, line in enumerate(p.read_text(encoding="utf-8", errors="replace").splitlines(), 1):
            if OUTSIDE.search(line) and not (rel.parts[0] == "docs" and _stays_inside(p, line)):
                bad.append(f"{rel}:{ln}: {line.strip()[:120]}")
    return bad


def test_code_and_docs_refer_to_nothing_outside_the_repository():
    bad = _outside_references(under_results=False)
    assert not bad, "references to files outside the repository:\n" + "\n".join(bad)


def test_committed_results_refer_to_nothing_outside_the_repository():
    """Run records (commands.txt, config.json, READMEs) name paths a fresh clone has."""
    bad = _outside_references(under_results=True)
    assert not bad, "references to files outside the repository:\n" + "\n".join(bad)
