"""The documentation site builds strictly, its internal links resolve, and its pages render.

* ``sphinx-build -W --keep-going -n`` (warnings are errors, every cross-reference must resolve)
  builds ``docs/`` into a temporary folder. The build executes every notebook page (the tutorials,
  the devices and CLI pages) from scratch, so a failing cell, an assertion that checks a moved
  README example included (tests/docs/test_readme.py, ``DOC_CHECKS``), fails it.
* Every ``href`` and ``src`` of every built page that points to a local file names a file of the
  build, and every ``#anchor`` an ``id`` of its page.
* Headless Chromium opens the front page and a tutorial and takes screenshots; a page that renders
  (nearly) blank fails. Skipped, saying so, where Chromium is not installed (Debian: ``apt-get
  install chromium``; ``.ci/run`` tries to install it).

The build takes over a minute on 2 cores (the tutorials' execution is most of it), so the test
is marked ``slow``: the quick loop leaves it out and the full suite (CI) runs it.
"""

import os
import re
import shutil
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import unquote, urlsplit

import numpy as np
import pytest

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
TUTORIAL = "tutorials/onsager.html"  # a tutorial with a figure


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    """The site, built strictly into a fresh folder (its notebook cache too, so every page executes)."""
    try:
        import myst_nb  # noqa: F401
        import sphinx  # noqa: F401
    except ImportError as e:
        pytest.fail(f"the site needs the docs extra ({e}): pip install -e \".[docs]\"")
    out = tmp_path_factory.mktemp("site") / "html"
    # The tutorials' kernels inherit the suite's XLA_FLAGS (conftest.py): the same programs, compiled
    # faster, which is most of the build's time.
    env = dict(os.environ)
    # -j auto: the notebooks execute in parallel (timings: CHANGELOG, "Suite: three slow tests quicker")
    cmd = [sys.executable, "-m", "sphinx", "-W", "--keep-going", "-n", "-q", "-j", "auto", str(DOCS), str(out)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=900, cwd=ROOT, env=env)
    assert proc.returncode == 0, f"strict build failed:\n{proc.stderr[-6000:]}"
    return out


class _Refs(HTMLParser):
    def __init__(self):
        super().__init__()
        self.ids, self.links = set(), []

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        for name in ("id", "name"):
            if a.get(name):
                self.ids.add(a[name])
        for name in ("href", "src"):
            if a.get(name) is not None:
                self.links.append(a[name])


def _parse(path: Path) -> _Refs:
    p = _Refs()
    p.feed(path.read_text(encoding="utf-8", errors="replace"))
    return p


def test_site_builds_strictly_and_its_internal_links_resolve(site):
    pages = sorted(site.rglob("*.html"))
    for name in ("index.html", "install.html", "engines.html", "study.html", "api/mcmc.html", TUTORIAL):
        assert (site / name).is_file(), f"{name} was not built"
    parsed = {p: _parse(p) for p in pages}
    bad, checked = [], 0
    for page, refs in parsed.items():
        for link in refs.links:
            parts = urlsplit(link)
            if parts.scheme or parts.netloc or link.startswith(("mailto:", "javascript:", "data:")):
                continue  # external: not checked (no network here)
            target = page if not parts.path else (page.parent / unquote(parts.path)).resolve()
            checked += 1
            if target.is_dir():
                target = target / "index.html"
            if not target.is_file():
                bad.append(f"{page.relative_to(site)}: {link} (no such file)")
                continue
            if parts.fragment and target.suffix == ".html":
                ids = parsed[target].ids if target in parsed else _parse(target).ids
                if unquote(parts.fragment) not in ids:
                    bad.append(f"{page.relative_to(site)}: {link} (no id {parts.fragment!r})")
    assert checked > 1000, f"only {checked} local links checked: is the parser still right?"
    assert not bad, f"{len(bad)} broken internal link(s):\n" + "\n".join(bad[:40])


def test_api_reference_documents_every_registered_engine(site):
    """Every engine name of ``inference.available()`` has its class documented in the API reference."""
    from isingattn import inference
    from isingattn.engine import _lookup

    ids = set().union(*(_parse(p).ids for p in (site / "api").glob("*.html")))
    missing = []
    for name in inference.available():
        factory = _lookup(name)
        cls = factory if isinstance(factory, type) else type(factory())
        if not any(i.startswith("isingattn.") and i.endswith("." + cls.__name__) for i in ids):
            missing.append(f"{name} ({cls.__name__})")
    assert not missing, "engines without an API entry: " + ", ".join(missing)


def test_tutorials_are_executed_with_their_figures(site):
    """Every tutorial page carries the outputs of its execution, a figure among them."""
    for md in sorted((DOCS / "tutorials").glob("*.md")):
        if md.name == "index.md":
            continue
        html = (site / "tutorials" / f"{md.stem}.html").read_text(encoding="utf-8")
        assert "cell_output" in html, f"{md.name}: no executed output"
        assert re.search(r'<img[^>]+src="[^"]*\.png"', html), f"{md.name}: no figure"


def _chromium():
    for name in ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable"):
        if shutil.which(name):
            return shutil.which(name)
    return None


def _screenshot(browser: str, page: Path, png: Path) -> np.ndarray:
    cmd = [browser, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", "--window-size=1280,1600",
           f"--screenshot={png}", page.as_uri()]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and png.is_file(), f"chromium failed on {page}:\n{proc.stderr[-2000:]}"
    import matplotlib.image

    return np.asarray(matplotlib.image.imread(png))


@pytest.mark.parametrize("name", ["index.html", TUTORIAL])
def test_pages_render_in_headless_chromium(site, name, tmp_path):
    browser = _chromium()
    if browser is None:
        pytest.skip("headless Chromium is not installed (Debian: apt-get install chromium); the page was not rendered")
    img = _screenshot(browser, site / name, tmp_path / (Path(name).stem + ".png"))
    rgb = img[..., :3].reshape(-1, 3)
    _, counts = np.unique((rgb * 255).round().astype(np.uint8), axis=0, return_counts=True)
    background = counts.max() / len(rgb)
    assert background < 0.97, f"{name} renders (nearly) blank: {background:.1%} of its pixels have one colour"
    assert len(counts) > 50, f"{name} renders with only {len(counts)} colours: no text or figure"
