"""File helpers: JSONL reading with precise errors, atomic writes, done markers, fingerprints.

Every file the pipeline produces is written under a temporary name in the same folder and
renamed into place only when complete, so no reader ever sees a half-written file.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import tempfile
from collections.abc import Iterable, Iterator
from pathlib import Path

from snakeskills.errors import SnakeskillsError


def read_jsonl(path: str | os.PathLike) -> list[dict]:
    """Read a JSONL file; a malformed line raises an error naming the file and line number."""
    return list(iter_jsonl(path))


def iter_jsonl(path: str | os.PathLike) -> Iterator[dict]:
    path = Path(path)
    if not path.exists():
        raise SnakeskillsError(f"{path}: file does not exist")
    with path.open(encoding="utf-8") as handle:
        for line_number, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError as error:
                raise SnakeskillsError(f"{path}:{line_number}: malformed JSON line ({error.msg})") from None
            if not isinstance(record, dict):
                raise SnakeskillsError(f"{path}:{line_number}: expected a JSON object, got {type(record).__name__}")
            yield record


def dumps_record(record: dict) -> str:
    """One JSONL line, deterministic (key order as given, no ASCII escaping)."""
    return json.dumps(record, ensure_ascii=False)


@contextlib.contextmanager
def atomic_open(path: str | os.PathLike, mode: str = "w") -> Iterator:
    """Open a temporary sibling of ``path``; rename it to ``path`` only if the block succeeds."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    file_descriptor, temporary_name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(file_descriptor, mode, encoding=None if "b" in mode else "utf-8") as handle:
            yield handle
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temporary_name, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temporary_name)
        raise


def write_jsonl(path: str | os.PathLike, records: Iterable[dict]) -> int:
    """Atomically write records as JSONL; returns the number of rows written."""
    count = 0
    with atomic_open(path) as handle:
        for record in records:
            handle.write(dumps_record(record) + "\n")
            count += 1
    return count


def write_json(path: str | os.PathLike, data) -> None:
    with atomic_open(path) as handle:
        json.dump(data, handle, indent=2, ensure_ascii=False)
        handle.write("\n")


def write_text(path: str | os.PathLike, text: str) -> None:
    with atomic_open(path) as handle:
        handle.write(text)


def read_json(path: str | os.PathLike):
    path = Path(path)
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise SnakeskillsError(f"{path}: file does not exist") from None
    except json.JSONDecodeError as error:
        raise SnakeskillsError(f"{path}:{error.lineno}: malformed JSON ({error.msg})") from None


@contextlib.contextmanager
def atomic_directory(path: str | os.PathLike) -> Iterator[Path]:
    """Yield a temporary sibling folder; it replaces ``path`` only if the block succeeds."""
    import shutil

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = Path(tempfile.mkdtemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent))
    try:
        yield temporary
    except BaseException:
        shutil.rmtree(temporary, ignore_errors=True)
        raise
    publish_directory(temporary, path)


def publish_directory(staging: str | os.PathLike, path: str | os.PathLike) -> None:
    """Rename the finished folder ``staging`` to ``path``, replacing what was there; on failure remove it."""
    import shutil

    try:
        if Path(path).exists():
            shutil.rmtree(path)
        os.replace(staging, path)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise


def concatenate_jsonl(paths: list[str | os.PathLike], output_path: str | os.PathLike) -> int:
    """Concatenate JSONL files in order (validating every line); returns the number of rows."""
    return write_jsonl(output_path, (record for path in paths for record in iter_jsonl(path)))


def fingerprint(files: list[str | Path], settings: dict) -> str:
    """A hash of ``settings`` and of each file's identity (path, size, modification time).

    A file's identity rather than its bytes: a rewritten input (an upstream job rerun) changes it
    even with the same content, which errs on the side of starting over, and it costs a ``stat``.
    """
    identities = []
    for path in files:
        try:
            status = os.stat(path)
        except OSError as error:
            raise SnakeskillsError(f"{path}: cannot read the file ({error.strerror})") from None
        identities.append([str(path), status.st_size, status.st_mtime_ns])
    text = json.dumps([identities, settings], sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()
