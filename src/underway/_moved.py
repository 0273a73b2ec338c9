"""Old import paths of modules that moved into packages, kept for one release.

``import underway.policy`` still works: it warns (:class:`DeprecationWarning`) and hands
back ``underway.guard.policy``, the same module object. :data:`MOVED` maps each old path
to its new one; a submodule of an old path follows its package.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import sys
import warnings
from collections.abc import Sequence
from types import ModuleType

MOVED = {
    "underway._journal_checks": "underway.journal.checks",
    "underway.blobrefs": "underway.journal.blobs",
    "underway.checkpoint": "underway.journal.checkpoint",
    "underway.state": "underway.journal.state",
    "underway.jsonpatch": "underway.journal.patch",
    "underway.projection": "underway.journal.projection",
    "underway.budgets": "underway.guard.budgets",
    "underway.intent": "underway.guard.intent",
    "underway.policy": "underway.guard.policy",
    "underway.approvals": "underway.guard.approvals",
    "underway.erasure": "underway.privacy.erasure",
    "underway.retention": "underway.privacy.retention",
    "underway.schedules": "underway.scheduling.schedules",
    "underway.cron": "underway.scheduling.cron",
    "underway.intake": "underway.scheduling.intake",
    "underway.intake_sources": "underway.scheduling.intake_sources",
    "underway.audit": "underway.ops.audit",
    "underway.evaluation": "underway.ops.evaluation",
    "underway.replay": "underway.ops.replay",
    "underway.deploy": "underway.ops.deploy",
    "underway.drills": "underway.ops.drills",
    "underway._charts": "underway.ops.charts",
    "underway._timeline": "underway.ops.timeline",
    "underway.store.regions": "underway.store.regional",
    "underway.store.regions_keys": "underway.store.regional._keys",
    "underway.store.regions_retention": "underway.store.regional._retention",
    "underway.store.memory_access": "underway.store.memory._access",
    "underway.store.memory_budgets": "underway.store.memory._budgets",
    "underway.store.memory_consent": "underway.store.memory._consent",
    "underway.store.memory_keys": "underway.store.memory._keys",
    "underway.store.memory_retention": "underway.store.memory._retention",
    "underway.store.memory_rows": "underway.store.memory._rows",
}
"""Old module path -> where the module lives now."""


def new_path(old: str) -> str | None:
    """Where the module once at ``old`` lives now, or None if it never moved."""
    for moved, to in MOVED.items():
        if old == moved or old.startswith(moved + "."):
            return to + old[len(moved):]
    return None


class _Alias(importlib.abc.Loader):
    """Loads an old path as the module at its new one."""

    def __init__(self, old: str, new: str) -> None:
        self.old, self.new = old, new
        self.spec: importlib.machinery.ModuleSpec | None = None

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType:
        warnings.warn(f"{self.old} moved to {self.new}; import it from there",
                      DeprecationWarning, stacklevel=2)
        module = importlib.import_module(self.new)
        self.spec = module.__spec__
        return module

    def exec_module(self, module: ModuleType) -> None:
        module.__spec__ = self.spec  # the import system set the old path's spec
        sys.modules[self.old] = module


class _Finder(importlib.abc.MetaPathFinder):
    """Finds old paths, and only them."""

    def find_spec(self, fullname: str, path: Sequence[str] | None,
                  target: ModuleType | None = None) -> importlib.machinery.ModuleSpec | None:
        new = new_path(fullname) if fullname.startswith("underway.") else None
        if new is None:
            return None
        return importlib.machinery.ModuleSpec(fullname, _Alias(fullname, new))


def install() -> None:
    """Let the old paths import (once per process)."""
    if not any(isinstance(f, _Finder) for f in sys.meta_path):
        sys.meta_path.insert(0, _Finder())  # before the path finder sees the new files
