"""The receiver's bearer token: where it comes from, and how a request's header is checked.

A token on the command line is visible to every user of the machine (``ps``), so it can also
come from :data:`TOKEN_ENV` or a file. The ``Authorization`` header's scheme is matched
case-insensitively (RFC 7235 §2.1: ``bearer`` is ``Bearer``); the token itself exactly, in
constant time.
"""

from __future__ import annotations

import hmac
import os
from collections.abc import Mapping
from pathlib import Path

TOKEN_ENV = "OTEL_TRACKIO_RECEIVER_TOKEN"
"""The receiver's token, when neither ``--token`` nor ``--token-file`` is given."""


UPSTREAM_KEY_ENV = "OTEL_TRACKIO_UPSTREAM_KEY"
"""The upstream's API key for ``serve --upstream`` (else ``--upstream-key-file``)."""


def resolve_token(
    token: str | None = None,
    token_file: str | os.PathLike[str] | None = None,
    environ: Mapping[str, str] | None = None,
    *,
    env: str = TOKEN_ENV,
) -> str | None:
    """The token from ``token``, else the first line of ``token_file``, else the variable
    ``env``; None when none is set. ``ValueError`` for an unreadable or empty file, or both
    given."""
    if token and token_file:
        raise ValueError("give the token once: --token or --token-file, not both")
    if token_file:
        try:
            text = Path(token_file).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            where = os.fspath(token_file)
            raise ValueError(f"cannot read the token file {where!r}: {exc}") from None
        lines = text.strip().splitlines()
        if not lines or not lines[0].strip():
            raise ValueError(f"the token file {os.fspath(token_file)!r} is empty")
        return lines[0].strip()
    if token:
        return token
    value = (os.environ if environ is None else environ).get(env, "").strip()
    return value or None


class BearerCheck:
    """Checks ``Authorization: Bearer <token>`` headers against one token."""

    def __init__(self, token: str | None) -> None:
        self._expected = token.encode("utf-8") if token else None

    @property
    def required(self) -> bool:
        """True when requests need the token."""
        return self._expected is not None

    def allows(self, authorization: str | None) -> bool:
        """True when no token is required, or ``authorization`` carries it."""
        if self._expected is None:
            return True
        scheme, _, credentials = (authorization or "").strip().partition(" ")
        given = credentials.strip().encode("utf-8", "replace")
        # compare even on a wrong scheme, so the time taken says nothing about the token
        return hmac.compare_digest(given, self._expected) and scheme.lower() == "bearer"
