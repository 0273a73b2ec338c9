"""The anchor log as a JSON-lines file, the :class:`~underway.ops.audit._anchors.AnchorSink`
that ``underway audit anchor --log PATH`` and ``underway worker --anchor-log PATH`` use.

Keep the file where those who can write the database cannot rewrite it: another machine,
a volume mounted append-only (``chattr +a``), a directory synced to write-once storage.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from ...errors import ConfigurationError
from ._anchors import AnchorRecord, line_digest


class FileAnchorLog:
    """An append-only JSON-lines file of anchor records at ``path`` (created on first use).

    Appenders on one host take turns through an exclusive ``flock`` on the file; each
    record is written with one ``write`` and flushed to disk before it counts.
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)

    def append(self, build: Callable[[int, str | None], AnchorRecord]) -> AnchorRecord:
        """Append the record ``build(n, prev)`` makes from the lines already there."""
        if not self.path.parent.is_dir():
            raise ConfigurationError(
                f"cannot write anchor log {str(self.path)!r}: directory "
                f"{str(self.path.parent)!r} does not exist"
            )
        with self._locked() as fd:
            count, last = 0, None
            for line in _lines(fd):
                count, last = count + 1, line
            record = build(count + 1, None if last is None else line_digest(last))
            data = record.line().encode("utf-8") + b"\n"
            if os.lseek(fd, 0, os.SEEK_END) > 0 and not _ends_with_newline(fd):
                # A torn last line stays a line of its own; the next record still chains.
                data = b"\n" + data
            os.write(fd, data)
            os.fsync(fd)
        return record

    def lines(self) -> list[str]:
        """Every line of the log, without newlines (empty lines left out)."""
        try:
            fd = os.open(self.path, os.O_RDONLY)
        except FileNotFoundError:
            raise ConfigurationError(f"no anchor log at {str(self.path)!r}") from None
        except OSError as exc:
            raise ConfigurationError(
                f"cannot read anchor log {str(self.path)!r}: {exc.strerror}"
            ) from None
        try:
            return list(_lines(fd))
        finally:
            os.close(fd)

    @contextmanager
    def _locked(self) -> Iterator[int]:
        import fcntl

        try:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o644)
        except OSError as exc:
            raise ConfigurationError(
                f"cannot open anchor log {str(self.path)!r}: {exc.strerror}"
            ) from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield fd
        finally:
            os.close(fd)


def _lines(fd: int) -> Iterator[str]:
    os.lseek(fd, 0, os.SEEK_SET)
    with open(os.dup(fd), "rb") as f:
        for raw in f:
            line = raw.rstrip(b"\n").decode("utf-8", "surrogateescape")
            if line.strip():
                yield line


def _ends_with_newline(fd: int) -> bool:
    os.lseek(fd, -1, os.SEEK_END)
    return os.read(fd, 1) == b"\n"
