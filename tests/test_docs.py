"""The README is a short guide and docs/ holds the reference: every page is reachable from the
README, and every relative link and #anchor in them points at something that exists."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
PAGES = [README, *sorted((ROOT / "docs").glob("*.md")), ROOT / "examples" / "README.md"]
LINK = re.compile(r"\]\(([^)\s]+)\)")
README_LIMIT_BYTES = 12 * 1024


def _anchors(page: Path) -> set[str]:
    """GitHub's heading anchors: lower case, punctuation dropped, spaces as hyphens."""
    anchors, fenced = set(), False
    for line in page.read_text().splitlines():
        if line.startswith("```"):
            fenced = not fenced
        elif not fenced and re.match(r"#{1,6} ", line):
            heading = re.sub(r"[^\w\- ]", "", line.lstrip("#").strip().lower())
            anchors.add(heading.replace(" ", "-"))
    return anchors


def _links(page: Path) -> list[str]:
    text = re.sub(r"```.*?```", "", page.read_text(), flags=re.DOTALL)
    return [t for t in LINK.findall(text) if not re.match(r"[a-z]+:", t)]


def test_readme_is_a_short_guide():
    assert len(README.read_bytes()) <= README_LIMIT_BYTES


def test_every_docs_page_is_linked_from_the_readme():
    linked = {(README.parent / t.partition("#")[0]).resolve() for t in _links(README)}
    missing = [p.name for p in PAGES[1:] if p.resolve() not in linked]
    assert not missing, missing


def test_every_relative_link_and_anchor_resolves():
    broken = []
    for page in PAGES:
        for target in _links(page):
            file, _, anchor = target.partition("#")
            dest = (page.parent / file).resolve() if file else page
            if not dest.exists():
                broken.append(f"{page.name}: {target} (no such file)")
            elif anchor and dest.suffix == ".md" and anchor not in _anchors(dest):
                broken.append(f"{page.name}: {target} (no such heading)")
    assert not broken, broken


def test_every_example_names_the_install_it_needs():
    for example in sorted((ROOT / "examples").glob("[!_]*.py")):
        doc = ast.get_docstring(ast.parse(example.read_text())) or ""
        assert re.search(r"plain install|the ``\w+`` extra", doc), example.name


def _imported_modules(path: Path) -> set[str]:
    """Every module ``path`` imports (at any depth: lazy imports inside functions too)."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
            names.update(f"{node.module}.{alias.name}" for alias in node.names)
    return names


def test_the_layers_import_as_the_architecture_page_says():
    """docs/architecture.md: nothing under the private layers imports a public module of the
    package (the settings too live in a private module, which the public ``settings`` re-exports),
    and the door to Trackio (``_trackio/``) is the one package that imports ``trackio``."""
    package = ROOT / "otel_trackio"
    upward: dict[str, set[str]] = {}
    private = [
        package / "_wiring.py",
        package / "_plan.py",
        package / "_preemption.py",
        package / "_settings.py",
        package / "_environment_variables.py",
    ] + [
        path
        for layer in ("_codec", "_core", "_engine", "_spool", "_offload", "_trackio")
        for path in sorted((package / layer).rglob("*.py"))
    ]
    for path in private:
        public = {
            name
            for name in _imported_modules(path)
            if re.fullmatch(r"otel_trackio\.[a-z]\w*", name)
        }
        if public:
            upward[str(path.relative_to(ROOT))] = public
    assert upward == {}
    trackio = {
        str(path.relative_to(ROOT))
        for path in package.rglob("*.py")
        if any(n == "trackio" or n.startswith("trackio.") for n in _imported_modules(path))
    }
    assert trackio and all(name.startswith("otel_trackio/_trackio/") for name in trackio), trackio


def test_the_architecture_page_names_every_module():
    """The layout on docs/architecture.md matches the tree: every module of the package is named
    there, so a newcomer finds where each thing lives."""
    page = (ROOT / "docs" / "architecture.md").read_text()
    layout = page.split("## The layout", 1)[1].split("```")[1]
    named = set(re.findall(r"\w+", layout))
    unnamed = [
        str(path.relative_to(ROOT))
        for path in sorted((ROOT / "otel_trackio").rglob("*.py"))
        if path.stem not in ("__init__", "__main__") and path.stem not in named
    ]
    assert unnamed == []
