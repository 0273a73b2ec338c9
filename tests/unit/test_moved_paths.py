"""Modules that moved into packages still import from their old paths for one release:
with a DeprecationWarning, as the very module at the new path (one module, one set of
classes), submodules included."""

from __future__ import annotations

import importlib
import subprocess
import sys

import pytest

from underway._moved import MOVED, new_path


@pytest.mark.parametrize("old", sorted(MOVED))
def test_an_old_path_warns_and_is_the_new_module(old: str) -> None:
    new = MOVED[old]
    module = importlib.import_module(new)
    sys.modules.pop(old, None)
    with pytest.warns(DeprecationWarning, match=f"{old} moved to {new}"):
        again = importlib.import_module(old)
    assert again is module
    assert module.__spec__ is not None and module.__spec__.name == new


def test_a_submodule_of_an_old_path_is_the_one_module() -> None:
    probe = (
        "import warnings\n"
        "warnings.simplefilter('ignore')\n"
        "from underway.policy.rules import Rule as old\n"
        "from underway.guard.policy.rules import Rule as new\n"
        "import underway.approvals.notify as n, underway.guard.approvals.notify as m\n"
        "assert old is new and n is m\n"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                          check=False)
    assert done.returncode == 0, done.stderr


def test_only_moved_paths_are_aliased() -> None:
    assert new_path("underway.flow") is None
    assert new_path("underway.policyx") is None
    assert new_path("underway.policy.rules") == "underway.guard.policy.rules"
    with pytest.warns(DeprecationWarning), pytest.raises(ModuleNotFoundError):
        importlib.import_module("underway.policy.no_such_module")
