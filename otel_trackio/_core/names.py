"""Client-chosen names (projects, runs, hosts) as one path component each: injective, so two
distinct names never share a folder, and safe, so no name escapes the folder it is put in.

Letters and digits of ASCII, ``-`` and ``_`` stay as they are (a readable folder for the names
people use); every other character is ``%`` and the two hex digits of each of its UTF-8 bytes
(``.`` is ``%2E``: no name is ``.`` or ``..``, none starts with a dot). The empty name is
``%``. A name whose folder would be longer than :data:`MAX_FOLDER_CHARS` keeps its first
characters and ends in ``~`` and a SHA-256 digest of the whole name (``~`` is always escaped
otherwise, so such a folder never equals another name's).
"""

from __future__ import annotations

import hashlib

MAX_FOLDER_CHARS = 160
"""The longest folder name written (file systems allow 255 bytes; the spool adds suffixes)."""

_KEPT = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_")
_DIGEST_CHARS = 32


def folder_name(name: str) -> str:
    """``name`` as one path component (see the module's docstring)."""
    if not name:
        return "%"
    encoded = "".join(
        c if c in _KEPT else "".join(f"%{b:02X}" for b in c.encode("utf-8", "surrogatepass"))
        for c in name
    )
    if len(encoded) <= MAX_FOLDER_CHARS:
        return encoded
    digest = hashlib.sha256(name.encode("utf-8", "surrogatepass")).hexdigest()[:_DIGEST_CHARS]
    head = encoded[: MAX_FOLDER_CHARS - _DIGEST_CHARS - 1]
    cut = head.find("%", len(head) - 2)  # an escape cut short: left out whole
    return f"{head if cut == -1 else head[:cut]}~{digest}"
