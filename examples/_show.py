"""What the examples print at the end: a ``trackio show`` command that works from any folder."""

from __future__ import annotations

import os
import shlex
import shutil
import sys
from pathlib import Path


def show_command(project: str) -> str:
    """The absolute ``trackio show --project ...`` command for this Python's Trackio, with the
    ``TRACKIO_DIR`` the data went to when one is set."""
    beside = Path(os.path.abspath(sys.executable)).parent / "trackio"
    program = str(beside) if beside.exists() else shutil.which("trackio") or "trackio"
    command = f"{shlex.quote(program)} show --project {shlex.quote(project)}"
    folder = os.environ.get("TRACKIO_DIR")
    if folder:
        command = f"TRACKIO_DIR={shlex.quote(os.path.abspath(folder))} {command}"
    return command
