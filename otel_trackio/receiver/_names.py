"""Client-chosen names made safe for a terminal before anything prints them.

A request names its Trackio project and run (``trackio.project`` / ``trackio.run`` resource
attributes); Trackio prints both when it starts a run, and so do our log lines. Control
characters (ANSI escapes, carriage returns, ...) and invisible format characters (bidi
overrides) are written as ``\\xNN`` / ``\\uNNNN`` instead, so a name can neither repaint the
operator's terminal nor hide what it is.
"""

from __future__ import annotations

import unicodedata

_UNSAFE_CATEGORIES = frozenset({"Cc", "Cf", "Cs", "Zl", "Zp"})


def printable_name(name: str) -> str:
    """``name`` with every control or format character escaped (unchanged when it has none)."""
    if name.isprintable():
        return name
    return "".join(_escape(c) if unicodedata.category(c) in _UNSAFE_CATEGORIES else c for c in name)


def _escape(character: str) -> str:
    code = ord(character)
    if code < 0x100:
        return f"\\x{code:02x}"
    return f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}"
