"""This user's private runtime folder: where model servers keep their sockets and locks and GPU claims their
lock files (``$XDG_RUNTIME_DIR/snakeskills``, else ``/tmp/snakeskills-<uid>``), refused unless private."""

from __future__ import annotations

import contextlib
import os
import stat
from pathlib import Path

from snakeskills.errors import SnakeskillsError


def default_directory() -> str:
    runtime = os.environ.get("XDG_RUNTIME_DIR")
    return str(Path(runtime) / "snakeskills") if runtime else f"/tmp/snakeskills-{os.getuid()}"


def short_runtime_directory() -> str:
    """The runtime folder if its path leaves room for a socket name in it, else ``/tmp/snakeskills-<uid>``."""
    folder = default_directory()
    return folder if len(os.fsencode(folder)) <= 48 else f"/tmp/snakeskills-{os.getuid()}"


def private_directory(directory: str | Path) -> Path:
    """The servers' folder, created mode 0700 if missing; refused unless it is this user's own and private.

    Checked on the folder itself, not through a symbolic link: in a shared /tmp another user can create
    ``/tmp/snakeskills-<uid>`` (or a link of that name) before us.
    """
    folder = Path(directory)
    folder.parent.mkdir(parents=True, exist_ok=True)
    with contextlib.suppress(FileExistsError):
        folder.mkdir(mode=0o700)
    info = os.lstat(folder)
    remedy = "remove it, or set generation.share_model.directory to a folder of your own"
    if not stat.S_ISDIR(info.st_mode):
        raise SnakeskillsError(f"model server folder {folder} is not a folder (a link or a file): {remedy}")
    if info.st_uid != os.getuid():
        raise SnakeskillsError(
            f"model server folder {folder} belongs to uid {info.st_uid}, not to you (uid {os.getuid()}): another "
            f"user could read your prompts and answer them through it; {remedy}"
        )
    if stat.S_IMODE(info.st_mode) & 0o077:
        raise SnakeskillsError(
            f"model server folder {folder} has mode {stat.S_IMODE(info.st_mode):04o}: other users could create "
            f"sockets in it or reach yours; `chmod 700 {folder}`, or {remedy}"
        )
    return folder
