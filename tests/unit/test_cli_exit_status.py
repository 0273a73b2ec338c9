"""The CLI's exit status: 2 for a usage error (the command must change), 1 for a runtime
failure (it was sound and failed while it ran); a command that reports findings keeps 1
for a finding and exits 2 for any error."""

from __future__ import annotations

import sqlite3

import pytest
import typer
from typer.testing import CliRunner

from underway.cli import app
from underway.cli._common import (
    Failure,
    Problem,
    exit_status,
    handle_check_errors,
    handle_errors,
)
from underway.errors import (
    AmbiguousRunId,
    ConfigurationError,
    IntegrityError,
    InvalidInput,
    KeyUnavailable,
    MigrationError,
    RunNotFound,
    SignedResolutionRequired,
    StoreError,
)


@pytest.mark.parametrize("exc", [
    Problem("--status must be one of ..."),
    ConfigurationError("unsupported database URL"),
    InvalidInput("input.name", "holds NUL"),
    AmbiguousRunId("default", "ab", ["ab1", "ab2"]),
    RunNotFound("default", "nope"),
    SignedResolutionRequired("r-1", "resolve"),
    KeyUnavailable("give the keys: --keyring FILE"),
    FileNotFoundError(2, "No such file or directory", "routes.json"),
])
def test_usage_errors_exit_2(exc: Exception) -> None:
    assert exit_status(exc) == 2


@pytest.mark.parametrize("exc", [
    Failure("cannot connect to PostgreSQL"),
    StoreError("the database refused"),
    MigrationError("the schema is newer than this underway"),
    IntegrityError("hash mismatch"),
    sqlite3.OperationalError("database is locked"),
    RuntimeError("unexpected"),
])
def test_runtime_failures_exit_1(exc: Exception) -> None:
    assert exit_status(exc) == 1


def _raises(exc: Exception) -> None:
    raise exc


@pytest.mark.parametrize(("exc", "general", "check"), [
    (Problem("bad option"), 2, 2),
    (Failure("unreachable"), 1, 2),
    (StoreError("refused"), 1, 2),
])
def test_a_check_command_never_exits_1_for_an_error(
    exc: Exception, general: int, check: int, capsys: pytest.CaptureFixture[str]
) -> None:
    for wrap, status in ((handle_errors, general), (handle_check_errors, check)):
        with pytest.raises(typer.Exit) as stopped:
            wrap(_raises)(exc)
        assert stopped.value.exit_code == status
        assert capsys.readouterr().err == f"underway: error: {exc}\n"


def test_an_unknown_option_is_a_usage_error() -> None:
    result = CliRunner().invoke(app, ["runs", "ls", "--no-such-option"])
    assert result.exit_code == 2
