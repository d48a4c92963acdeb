"""The documentation site (mkdocs.yml, docs/): built with ``mkdocs build --strict`` (a broken link, anchor,
image or docstring reference fails it), its tutorials run (every ```python block of a page, in order, in one
namespace, in a fresh folder), the CLI page holds every command and option of the parsers, and the pages render
in a real headless browser (Chromium: a screenshot with the theme's header, text and code blocks).

Needs the ``docs`` extra (skipped without it) and, for the browser check, Chromium (.ci/run installs both)."""
import html
import importlib.util
import json
import os
import pathlib
import re
import shutil
import subprocess
import sys

import pytest

REPO = pathlib.Path(__file__).resolve().parent.parent
DOCS = REPO / "docs"
RUN_PAGES = ("getting-started.md", "tutorials/serve.md", "tutorials/prove.md", "tutorials/learn.md")
PYTHON_FENCE = re.compile(r"^```python\n(.*?)^```[ \t]*$", re.S | re.M)
ASSET_IMAGE = re.compile(r"!\[[^\]]*\]\((?:\.\./)*assets/([^)\s]+\.png)\)")
THEME_HEADER_RGB = (64, 81, 181)  # Material's indigo header (mkdocs.yml palette.primary)
CODE_BACKGROUND_RGB = (245, 245, 245)  # Material's code block background
BROWSERS = ("chromium", "chromium-browser", "google-chrome")

# Runs one page's blocks: [page, [[first line, code], ...]] on stdin; a failing block's traceback names the page
# and its line in the markdown file (each block is compiled at its own line).
RUNNER = """
import json, sys
page, blocks = json.load(sys.stdin)
namespace = {"__name__": "__main__"}
for line, code in blocks:
    print(f"--- {page}:{line}", flush=True)
    exec(compile("\\n" * (line - 1) + code, page, "exec"), namespace)
"""


def python_blocks(page: pathlib.Path) -> list[tuple[int, str]]:
    """The ```python blocks of a markdown page: (line of their first code line, code), in order."""
    text = page.read_text()
    return [(text.count("\n", 0, match.start(1)) + 1, match.group(1)) for match in PYTHON_FENCE.finditer(text)]


def _missing(reason: str):
    """Skip: a tool the check needs is not installed here. In CI (``CI`` set, as .ci/run runs) that is a
    failure instead: .ci/run installs every one, so a skip there would hide an unchecked site."""
    if os.environ.get("CI"):
        pytest.fail(f"{reason} (CI must run this check)")
    pytest.skip(reason)


def _require_docs_extra():
    for module in ("mkdocs", "material", "mkdocstrings", "mkdocstrings_handlers.python"):
        if importlib.util.find_spec(module.split(".")[0]) is None or importlib.util.find_spec(module) is None:
            _missing(f"{module} is not installed: the docs extra (pip install -e '.[docs]') builds the site")


def build_site(config: pathlib.Path, out: pathlib.Path) -> subprocess.CompletedProcess:
    """``mkdocs build --strict`` of ``config`` into ``out``."""
    return subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--config-file", str(config),
                           "--site-dir", str(out)], cwd=config.parent, capture_output=True, text=True, timeout=600,
                          env=dict(os.environ, NO_MKDOCS_2_WARNING="1"))


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> pathlib.Path:
    _require_docs_extra()
    out = tmp_path_factory.mktemp("site")
    result = build_site(REPO / "mkdocs.yml", out)
    assert result.returncode == 0, f"mkdocs build --strict failed:\n{result.stdout[-3000:]}\n{result.stderr[-6000:]}"
    return out


def _page_html(site: pathlib.Path, page: str) -> str:
    """The built HTML of a docs/ markdown page (directory URLs: a/b.md -> a/b/index.html)."""
    stem = page[:-len(".md")]
    path = site / ("index.html" if stem == "index" else f"{stem}/index.html")
    assert path.is_file(), f"{page} was not built ({path} missing)"
    return path.read_text()


def _hooks():
    spec = importlib.util.spec_from_file_location("docs_hooks", DOCS / "hooks.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# ---------------------------------------------------------------------------------------------------------
# The build

def test_every_page_is_built(site):
    pages = sorted(str(p.relative_to(DOCS)) for p in DOCS.rglob("*.md"))
    assert len(pages) >= 10, pages
    for page in pages:
        assert "<h1" in _page_html(site, page), page


def test_strict_build_refuses_a_broken_link_and_a_broken_anchor(tmp_path):
    """The configuration's strictness (the site fixture is the positive control): a link to a missing page and
    an anchor that no heading makes each fail the build, named in its output. The API pages are stubbed (the
    rule is the configuration's, not theirs) to keep this build short."""
    _require_docs_extra()
    shutil.copy(REPO / "mkdocs.yml", tmp_path / "mkdocs.yml")
    shutil.copy(REPO / "CHANGELOG.md", tmp_path / "CHANGELOG.md")
    shutil.copytree(DOCS, tmp_path / "docs")
    for api in (tmp_path / "docs" / "api").glob("*.md"):
        api.write_text(f"# {api.stem}\n")
    index = tmp_path / "docs" / "index.md"
    index.write_text(index.read_text() + "\n[gone](no-such-page.md) and [nowhere](security.md#no-such-section)\n")
    result = build_site(tmp_path / "mkdocs.yml", tmp_path / "site")
    assert result.returncode != 0
    assert "no-such-page.md" in result.stderr and "no-such-section" in result.stderr, result.stderr[-3000:]


def test_tutorial_pages_show_their_code(site):
    """Each python block of a tutorial is a highlighted python block of its page."""
    for page in RUN_PAGES:
        built = _page_html(site, page).count('<div class="language-python highlight">')
        assert built == len(python_blocks(DOCS / page)) >= 3, (page, built)


def test_cli_page_holds_every_command_and_option(site):
    """The CLI reference is generated from the parsers: each command has its section, holding its options."""
    hooks = _hooks()
    parser = hooks.cli_parser()
    text = html.unescape(_page_html(site, "cli.md"))
    commands = hooks.subcommands(parser)
    assert {"plan", "keygen", "encrypt", "infer", "decrypt", "serve", "commit", "prove", "verify"} <= set(commands)
    for name, (_, sub) in commands.items():
        anchor = f'id="{parser.prog}-{name}"'
        assert anchor in text, f"no section for {parser.prog} {name}"
        section = text.split(anchor, 1)[1].split("<h2", 1)[0]
        for action in sub._actions:
            for option in action.option_strings:
                assert option in section, f"{parser.prog} {name}: {option} missing from its section"


def test_api_reference_renders_the_docstrings(site):
    """The API pages document the public names (mkdocstrings' anchors) with their docstrings' text."""
    from crypto.ckks import flooding
    from tensor_ops.inference import Client

    pages = {"api/crypto.md": ["crypto.CKKSContext", "crypto.ckks.flooding.Flooded", "crypto.params.HE_STANDARD_128"],
             "api/tensor_ops.md": ["tensor_ops.plan.planner.plan", "tensor_ops.einsum",
                                   "tensor_ops.inference.Client.decrypt_shared"],
             "api/proofs.md": ["proofs.prove_sumcheck", "proofs.layers.network.verify_network",
                               "proofs.basefold.statistical_bits"]}
    for page, identifiers in pages.items():
        text = _page_html(site, page)
        for identifier in identifiers:
            assert f'id="{identifier}"' in text, f"{page}: {identifier} not documented"

    def plain(page):  # the page's text without tags
        return " ".join(re.sub(r"<[^>]+>", "", html.unescape(_page_html(site, page))).split())

    def opening(doc):  # a docstring's first words, as the page shows them
        return " ".join(re.sub(r"``?", "", doc).split()[:6])

    assert opening(flooding.__doc__) in plain("api/crypto.md")
    assert opening(Client.decrypt_shared.__doc__) in plain("api/tensor_ops.md")


def test_changelog_lists_the_version_the_cli_reports(capsys):
    """CHANGELOG.md (Keep a Changelog) has an Unreleased section and one for pyproject's version, the version
    ``hezk --version`` prints; the site shows the same file (docs/changelog.md includes it)."""
    import tomllib

    version = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"]
    changelog = (REPO / "CHANGELOG.md").read_text()
    headings = re.findall(r"^## \[([^\]]+)\]", changelog, flags=re.M)
    assert headings[:2] == ["Unreleased", version], headings
    with pytest.raises(SystemExit) as exit_:
        _hooks().cli_parser().parse_args(["--version"])
    assert exit_.value.code == 0
    assert capsys.readouterr().out.split() == ["hezk", version]
    assert '--8<-- "CHANGELOG.md"' in (DOCS / "changelog.md").read_text()


def test_ci_installs_the_extras_of_readmes_test_command():
    """README's test command and .ci/run install the same extras, docs among them (so CI builds the site)."""
    readme = re.findall(r'^pip install -e "\.\[([^\]]*)\]" && pytest$', (REPO / "README.md").read_text(), re.M)
    ci = re.findall(r'^python -m pip install --quiet -e "\.\[([^\]]*)\]"$', (REPO / ".ci" / "run").read_text(), re.M)
    assert len(readme) == 1 and ci == readme, (readme, ci)
    assert "docs" in ci[0].split(",")


# ---------------------------------------------------------------------------------------------------------
# The tutorials run

@pytest.mark.parametrize("page", RUN_PAGES)
def test_tutorial_runs(page, tmp_path):
    """Every python block of the page, in order, in one namespace, in an empty folder; the pictures the page
    shows from docs/assets are drawn by its own code (same file names)."""
    blocks = python_blocks(DOCS / page)
    assert len(blocks) >= 3, f"{page}: only {len(blocks)} python blocks found"
    env = dict(os.environ, MPLBACKEND="Agg")
    env.pop("HEZK_OUT", None)
    result = subprocess.run([sys.executable, "-c", RUNNER], input=json.dumps([page, blocks]), cwd=tmp_path,
                            env=env, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, f"{page} failed:\n{result.stdout[-3000:]}\n{result.stderr[-5000:]}"
    for image in ASSET_IMAGE.findall((DOCS / page).read_text()):
        assert (DOCS / "assets" / image).is_file(), f"{page} shows assets/{image}, which is not in docs/assets"
        assert (tmp_path / image).is_file(), f"{page} shows assets/{image} but its code does not draw {image}"


def test_python_blocks_are_found_with_their_lines(tmp_path):
    """The extractor: python fences only (not bash, not pycon), in order, with the line of their first code line."""
    page = tmp_path / "page.md"
    page.write_text("# t\n\n```python\na = 1\n```\n\n```bash\nrm -rf /\n```\n\n```python\nb = a + 1\nc = 2\n```\n")
    assert python_blocks(page) == [(4, "a = 1\n"), (12, "b = a + 1\nc = 2\n")]


# ---------------------------------------------------------------------------------------------------------
# The pages in a headless browser

def _browser():
    return next((path for path in map(shutil.which, BROWSERS) if path), None)


def screenshot(url: str, out: pathlib.Path, size=(1280, 1600)):
    """A PNG of ``url`` in headless Chromium, as an (height, width, 3) array of 0..255 ints."""
    mpimg = pytest.importorskip("matplotlib.image", reason="matplotlib (the examples extra) decodes screenshots")
    import numpy as np

    browser = _browser()
    if browser is None:
        _missing("no Chromium on this machine (.ci/run installs it: apt-get install chromium)")
    subprocess.run([browser, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", "--no-first-run",
                    "--disable-background-networking", "--disable-component-update", "--disable-extensions",
                    f"--user-data-dir={out.parent / 'chromium-profile'}", f"--screenshot={out}",
                    f"--window-size={size[0]},{size[1]}", url], capture_output=True, timeout=120)
    assert out.is_file() and out.stat().st_size > 0, f"Chromium wrote no screenshot of {url}"
    image = mpimg.imread(out)
    return np.rint(image[..., :3] * 255).astype(int)


def rendered(image) -> list[str]:
    """Why a screenshot does not show a styled page ([] when it does): the theme's header along the top, dark
    text, code block backgrounds, and more than a few colours."""
    import numpy as np

    problems = []
    share = lambda rgb, rows=slice(None): float(np.mean(np.all(np.abs(image[rows] - rgb) <= 3, axis=-1)))
    if share(THEME_HEADER_RGB, slice(0, 40)) < 0.5:
        problems.append("no theme header along the top")
    if float(np.mean(image.max(axis=-1) < 100)) < 0.002:
        problems.append("no dark text")
    if share(CODE_BACKGROUND_RGB) < 0.02:
        problems.append("no code block backgrounds")
    if len(np.unique(image[..., 0] << 16 | image[..., 1] << 8 | image[..., 2])) < 50:  # one int per colour
        problems.append("fewer than 50 colours")
    return problems


@pytest.mark.parametrize("page", ["tutorials/learn.md", "cli.md"])
def test_page_renders_in_headless_chromium(site, page, tmp_path):
    """The built page, opened from disk in Chromium, shows the theme, text and code blocks (a screenshot is
    checked pixel by pixel); the HTML holds the page's code blocks."""
    built = site / page[:-len(".md")] / "index.html"
    assert built.read_text().count('<div class="language-') >= 3
    image = screenshot(built.as_uri(), tmp_path / "page.png")
    assert image.shape[:2] == (1600, 1280)
    problems = rendered(image)
    assert problems == [], problems


def test_screenshot_check_refuses_an_unstyled_or_blank_page(site, tmp_path):
    """The negative control: the same page without its stylesheets (copied alone) and a blank page fail
    ``rendered``."""
    import numpy as np

    alone = tmp_path / "alone.html"
    alone.write_text((site / "tutorials" / "learn" / "index.html").read_text())
    problems = rendered(screenshot(alone.as_uri(), tmp_path / "unstyled.png"))
    assert "no theme header along the top" in problems and "no code block backgrounds" in problems, problems
    blank = np.full((1600, 1280, 3), 255)
    assert len(rendered(blank)) == 4
