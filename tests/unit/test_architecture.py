"""docs/architecture.md and the README's Layout section match the code: every path they
name exists, and the import rules the map states hold. The tests follow one axis — by kind
at the top of ``tests/``, features below — and every test path the docs name exists."""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).parents[2]
PACKAGE = ROOT / "src" / "underway"
ARCHITECTURE = ROOT / "docs" / "architecture.md"
TESTS = ROOT / "tests"
TEST_KINDS = {"unit", "conformance", "integration", "crash", "adversarial"}
"""The top level of ``tests/``: one folder per kind of test (crash holds chaos below it)."""
TEST_SUPPORT = {"fakes", "fixtures", "conftest.py"}
"""Beside the kinds: what several kinds share, and the root conftest."""


def _module(path: Path) -> str:
    parts = list(path.relative_to(ROOT / "src").with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _targets(node: ast.AST, package: str) -> set[str]:
    """The underway modules an import statement in ``package`` names (relative imports
    resolved); empty for anything else."""
    if isinstance(node, ast.ImportFrom) and node.level:
        base = package.split(".")[: len(package.split(".")) - (node.level - 1)]
        if node.module:
            return {".".join([*base, node.module])}
        return {".".join([*base, a.name]) for a in node.names}
    if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("underway"):
        return {str(node.module)}
    if isinstance(node, ast.Import):
        return {a.name for a in node.names if a.name.startswith("underway")}
    return set()


def _package(path: Path) -> str:
    """The package relative imports in ``path`` start from."""
    module = _module(path)
    return module if path.name == "__init__.py" else module.rsplit(".", 1)[0]


def _imports() -> dict[str, set[str]]:
    """Module -> every underway module it imports (type-checking imports included)."""
    found: dict[str, set[str]] = defaultdict(set)
    for path in PACKAGE.rglob("*.py"):
        module, package = _module(path), _package(path)
        for node in ast.walk(ast.parse(path.read_text())):
            found[module] |= _targets(node, package)
    return found


def _function_level_imports(source: str, package: str) -> list[tuple[int, str]]:
    """(line, module) of every import of an underway module inside a function or method
    of ``source``, a module of ``package``. An ``if TYPE_CHECKING:`` block is at module
    level, so its imports are not among them."""
    found: list[tuple[int, str]] = []

    def visit(node: ast.AST, in_function: bool) -> None:
        for child in ast.iter_child_nodes(node):
            inside = in_function or isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef)
            if inside:
                found.extend((child.lineno, t) for t in sorted(_targets(child, package)))
            visit(child, inside)

    visit(ast.parse(source), False)
    return found


def _within(module: str, *packages: str) -> bool:
    """True when ``module`` is one of ``packages`` or inside one of them."""
    return any(module == p or module.startswith(p + ".") for p in packages)


def _top(module: str) -> str:
    return ".".join(module.split(".")[:2])


def test_every_path_the_architecture_map_names_exists() -> None:
    named = re.findall(r"`(src/underway/[^`\s]*)`", ARCHITECTURE.read_text())
    assert len(named) > 30
    missing = [p for p in named if not (ROOT / p).exists()]
    assert missing == []


def test_the_map_names_every_module_of_the_client_and_the_engine() -> None:
    text = ARCHITECTURE.read_text()
    for package in ("client", "engine"):
        for path in (PACKAGE / package).glob("_*.py"):
            if path.name != "__init__.py":
                assert path.name in text, f"docs/architecture.md does not name {path}"


def _layout() -> list[Path]:
    """Every path the README's Layout block names: a top-level line names a folder of the
    repository, the indented lines below it name what is in that folder."""
    readme = (ROOT / "README.md").read_text()
    layout = readme.split("## Layout", 1)[1].split("```")[1]
    named, folder = [], ROOT
    for line in layout.splitlines():
        if not line.strip():
            continue
        if line.startswith("  "):
            named.append(folder / line.split()[0])
        else:
            folder = ROOT / line.split()[0]
            named.append(folder)
    return named


def test_every_path_the_readme_layout_names_exists() -> None:
    named = _layout()
    assert PACKAGE / "engine/" in named and PACKAGE / "client/" in named
    assert [p for p in named if not p.exists()] == []


def test_every_test_path_the_readme_and_the_docs_name_exists() -> None:
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")),
             *sorted((ROOT / "examples").glob("*/README.md"))]
    named = {
        (page.relative_to(ROOT), path.rstrip(".,;:"))
        for page in pages
        for path in re.findall(r"\btests/[\w./<>*-]*", page.read_text())
    }
    assert len(named) > 10
    # ``<role>`` stands for any name: test_<role>.py is a pattern.
    missing = sorted((str(page), path) for page, path in named
                     if not list(ROOT.glob(re.sub(r"<[^>]*>", "*", path.rstrip("/")))))
    assert missing == []


def test_the_top_of_tests_holds_only_the_kinds_and_what_they_share() -> None:
    top = {p.name for p in TESTS.iterdir()
           if not p.name.startswith(".") and p.name != "__pycache__"}
    assert top - TEST_SUPPORT == TEST_KINDS, (
        "tests/ is organised by kind (features go below their kind, e.g. tests/unit/guard/): "
        f"unexpected {sorted(top - TEST_SUPPORT - TEST_KINDS)}, "
        f"missing {sorted(TEST_KINDS - top)}")
    layout = {p.relative_to(TESTS).parts[0] for p in _layout() if p.is_relative_to(TESTS)
              and p != TESTS}
    assert layout == TEST_KINDS | TEST_SUPPORT - {"conftest.py"}, "the README's Layout lists them"


def test_test_modules_outside_packages_have_distinct_names() -> None:
    """The test folders are not packages, so pytest imports each module by its file name:
    two with one name would collide."""
    seen: dict[str, list[str]] = defaultdict(list)
    for path in TESTS.rglob("*.py"):
        if path.name != "conftest.py" and not (path.parent / "__init__.py").exists():
            seen[path.name].append(str(path.relative_to(TESTS)))
    assert {name: paths for name, paths in seen.items() if len(paths) > 1} == {}


def test_the_client_needs_no_executor() -> None:
    imports = _imports()
    forbidden = ("underway.engine", "underway.worker", "underway.runner", "underway.cli")
    bad = sorted(
        (module, target) for module, targets in imports.items()
        if _within(module, "underway.client") for target in targets
        if _within(target, *forbidden)
    )
    assert bad == []


def test_nothing_below_the_executor_imports_it() -> None:
    below = ("underway.flow", "underway.guard", "underway.effects", "underway.journal",
             "underway.store", "underway.events", "underway.control", "underway.client")
    imports = _imports()
    bad = sorted(
        (module, target) for module, targets in imports.items()
        if _within(module, *below) for target in targets
        if _within(target, "underway.engine")
    )
    assert bad == []


def test_no_module_or_subpackage_is_in_an_import_cycle() -> None:
    graph: dict[str, set[str]] = defaultdict(set)
    for module, targets in _imports().items():
        for target in targets:
            a, b = _top(module), _top(target)
            if a != b and "underway" not in (a, b):
                graph[a].add(b)

    def reaches(start: str, goal: str) -> bool:
        seen, todo = set(), [start]
        while todo:
            node = todo.pop()
            for nxt in graph[node]:
                if nxt == goal:
                    return True
                if nxt not in seen:
                    seen.add(nxt)
                    todo.append(nxt)
        return False

    assert "underway.engine" in graph and "underway.client" in graph
    circles = sorted(m for m in list(graph) if reaches(m, m))
    assert circles == []


def test_the_engine_modules_import_one_another_without_a_circle() -> None:
    """Step execution holds a ``StepServices``, never the engine: only the package imports
    ``_executor``, and no module of the engine reaches itself, even for the type checker."""
    imports = _imports()
    inner = {m: {t for t in targets if _within(t, "underway.engine") and t != "underway.engine"}
             for m, targets in imports.items()
             if _within(m, "underway.engine") and m != "underway.engine"}
    assert sorted(m for m, targets in inner.items() if "underway.engine._executor" in targets) \
        == []

    def reaches(start: str, goal: str) -> bool:
        seen, todo = set(), [start]
        while todo:
            for nxt in inner.get(todo.pop(), set()):
                if nxt == goal:
                    return True
                if nxt not in seen:
                    seen.add(nxt)
                    todo.append(nxt)
        return False

    assert "underway.engine._calls" in inner
    assert sorted(m for m in inner if reaches(m, m)) == []


def test_the_cli_reads_runs_through_the_client() -> None:
    bad = sorted(
        (module, target) for module, targets in _imports().items()
        if _within(module, "underway.cli") for target in targets
        if _within(target, "underway.journal")
    )
    assert bad == []


def test_every_module_stays_small() -> None:
    big = {str(path.relative_to(ROOT)): lines for path in sorted(PACKAGE.rglob("*.py"))
           if (lines := len(path.read_text().splitlines())) > 600}
    assert big == {}, "split these modules by concept (at most 600 lines each)"


def test_underway_modules_are_imported_at_module_level() -> None:
    """Only optional third-party packages (provider SDKs, drivers) are imported inside
    functions; a cycle is broken by moving code, a heavy piece loads lazily through its
    package's lazy exports (``underway._lazy``), never through an import in a function."""
    bad = [
        f"{path.relative_to(ROOT)}:{line}: {target}"
        for path in sorted(PACKAGE.rglob("*.py"))
        for line, target in _function_level_imports(path.read_text(), _package(path))
    ]
    assert bad == []


def test_a_function_level_import_is_caught() -> None:
    """The check above can fail: imports in functions and methods are found, relative ones
    resolved; module-level and type-checking imports, and other packages, are not."""
    source = """
from typing import TYPE_CHECKING
from . import events
if TYPE_CHECKING:
    from .store.base import Store

def f():
    import json
    from .policy import Policy
    from .. import errors

class C:
    async def m(self):
        if True:
            import underway.worker
        def inner():
            from .store import connect
"""
    assert _function_level_imports(source, "underway.engine") == [
        (9, "underway.engine.policy"), (10, "underway.errors"), (15, "underway.worker"),
        (17, "underway.engine.store"),
    ]


def test_heavy_pieces_load_on_first_use() -> None:
    """Importing the package root and the packages with lazy exports loads none of what
    they export lazily (docs/architecture.md, "What loads on first use"); reading a name
    loads it, and a submodule read as an attribute is imported then."""
    probe = (
        "import sys, underway, underway.store, underway.knowledge, underway.guard.policy, "
        "underway.models, underway.agent\n"
        "print(' '.join(sorted(sys.modules)))\n"
        "import underway as uw\n"
        "assert set(uw.__all__) <= set(dir(uw))\n"
        "assert uw.Engine.__module__ == 'underway.engine._executor'\n"
        "assert uw.store.SQLiteStore.__module__ == 'underway.store.sqlite'\n"
        "assert uw.journal.Journal is not None\n"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                          check=False)
    assert done.returncode == 0, done.stderr
    loaded = done.stdout.split()
    lazy = ("psycopg", "psycopg_pool", "underway.client", "underway.engine",
            "underway.runner", "underway.worker", "underway.agent._agent",
            "underway.journal._journal",
            "underway.store.sqlite", "underway.store.postgres", "underway.knowledge.sqlite",
            "underway.knowledge.postgres", "underway.guard.policy.policies",
            "underway.guard.policy.rules", "underway.guard.policy._loading",
            "underway.models.types", "underway.models.openai_chat",
            "underway.models.anthropic_messages")
    assert [m for m in loaded if _within(m, *lazy)] == []
