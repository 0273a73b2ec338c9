"""The public surface, pinned: every module of the package with a public name declares
``__all__``, and is listed in ``public_surface.json`` with exactly those names, each
documented; the examples and the docs' code import only public names (a name in the
``__all__`` of the module they import it from). Changing the surface means changing the
pin, on purpose."""

from __future__ import annotations

import ast
import importlib
import inspect
import json
import pkgutil
import re
from pathlib import Path
from types import ModuleType

import underway
from underway import events as ev

ROOT = Path(__file__).resolve().parents[2]
PINNED = Path(__file__).with_name("public_surface.json")


def public_named() -> dict[str, ModuleType]:
    """Every importable module of the package whose own names are not private (no ``_``
    part below ``underway``); the CLI is a command, not an API. Old paths
    (``underway._moved``) are no files, so never among them."""
    found = {"underway": underway}
    for info in pkgutil.walk_packages(underway.__path__, "underway."):
        parts = info.name.split(".")[1:]
        if any(p.startswith("_") for p in parts) or parts[0] == "cli":
            continue
        found[info.name] = importlib.import_module(info.name)
    return found


def public_modules() -> dict[str, ModuleType]:
    """The modules of :func:`public_named` that declare ``__all__``."""
    return {name: m for name, m in public_named().items() if hasattr(m, "__all__")}


def test_every_public_named_module_declares_its_surface() -> None:
    """A module with a public name promises its names: it says which (``__all__``), or
    its name starts with ``_``."""
    missing = sorted(name for name, m in public_named().items() if not hasattr(m, "__all__"))
    assert missing == [], "declare __all__ in these modules, or make them private"


def test_every_declared_surface_is_pinned() -> None:
    pinned = json.loads(PINNED.read_text(encoding="utf-8"))
    actual = {name: sorted(m.__all__) for name, m in public_modules().items()}
    assert actual == pinned, (
        "the public surface changed; if on purpose, update tests/unit/public_surface.json")


def test_every_public_name_exists_and_is_documented() -> None:
    for name, module in public_modules().items():
        for attr in module.__all__:
            value = getattr(module, attr)  # raises for a name that is not there
            if inspect.isclass(value) or inspect.isfunction(value) or inspect.ismodule(value):
                assert value.__doc__, f"{name}.{attr} has no docstring"


def test_root_exports_what_a_flow_author_needs() -> None:
    for attr in ("Next", "RetryPolicy", "CircuitBreaker", "Client", "Flow", "Tool"):
        assert attr in underway.__all__ and getattr(underway, attr) is not None


def test_every_event_type_is_public() -> None:
    assert set(ev.EVENT_TYPES) <= set(ev.__all__)


def _imports(path: Path) -> list[tuple[int, str, str | None]]:
    """(line, module, name) of every import of the package in a Python file; name None
    for a module imported whole."""
    out: list[tuple[int, str, str | None]] = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0 \
                and node.module.split(".")[0] == "underway":
            out += [(node.lineno, node.module, a.name) for a in node.names]
        elif isinstance(node, ast.Import):
            out += [(node.lineno, a.name, None) for a in node.names
                    if a.name.split(".")[0] == "underway"]
    return out


def _doc_snippets() -> list[tuple[str, str]]:
    """(where, code) of every Python block in the README and docs."""
    found = []
    for md in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        text = md.read_text(encoding="utf-8")
        for i, block in enumerate(re.findall(r"```python\n(.*?)```", text, re.S)):
            found.append((f"{md.relative_to(ROOT)} block {i + 1}", block))
    return found


def _not_public(module: str, name: str | None) -> str | None:
    modules = public_modules()
    if name is not None and f"{module}.{name}" in modules:
        return None  # a public submodule imported by name (`from underway import events`)
    if module not in modules:
        return f"{module} declares no public surface (__all__)"
    if name is not None and name != "*" and name not in modules[module].__all__:
        return f"{name} is not in {module}.__all__"
    return None


def test_examples_import_only_public_names() -> None:
    problems = []
    for path in sorted((ROOT / "examples").rglob("*.py")):
        for line, module, name in _imports(path):
            why = _not_public(module, name)
            if why:
                problems.append(f"{path.relative_to(ROOT)}:{line}: {why}")
    assert problems == []


def test_the_docs_code_imports_only_public_names(tmp_path: Path) -> None:
    problems = []
    for where, code in _doc_snippets():
        snippet = tmp_path / "snippet.py"
        try:
            snippet.write_text(code, encoding="utf-8")
            imports = _imports(snippet)
        except SyntaxError:
            continue  # a fragment, not a program: nothing to check
        for _, module, name in imports:
            why = _not_public(module, name)
            if why:
                problems.append(f"{where}: {why}")
    assert problems == []


def test_a_private_import_is_caught(tmp_path: Path) -> None:
    """The check above can fail: an import of an engine internal is reported."""
    bad = tmp_path / "bad.py"
    bad.write_text("from underway.engine._calls import StepExecution\n"
                   "from underway.flow import _step_name\n", encoding="utf-8")
    whys = [_not_public(m, n) for _, m, n in _imports(bad)]
    assert whys == ["underway.engine._calls declares no public surface (__all__)",
                    "_step_name is not in underway.flow.__all__"]
