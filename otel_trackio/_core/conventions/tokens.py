"""Token id lists on spans (``prompt_ids``, ``response_ids``, ``token_ids``) decoded to text.

RL rollouts often record only token ids. With a ``token_decoder`` the exporter turns them into
text on its own thread (conversion runs in ``export()``), never on the rollout thread. A span that
already carries the decoded text beside its ids (``prompt_text`` / ``response_text``, verl's
``token2text`` names: the worker decoded them, e.g. :mod:`otel_trackio.verl` before sending over
OTLP) needs no decoder: that text is used with those ids.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, NamedTuple

from otel_trackio._settings import TokenDecoder

#: side → the attribute holding the text already decoded from that side's token ids
DECODED_TEXT_ATTRIBUTES: Mapping[str, str] = {"input": "prompt_text", "output": "response_text"}


def token_ids(value: Any) -> list[int] | None:
    """A list of ints from an attribute (a sequence of ints, or a JSON string of one); else None."""
    if isinstance(value, str):
        text = value.strip()
        if not text.startswith("["):
            return None
        try:
            value = json.loads(text)
        except ValueError:
            return None
    if not isinstance(value, (list, tuple)) or not value:
        return None
    if not all(isinstance(v, int) and not isinstance(v, bool) for v in value):
        return None
    return list(value)


class TokenText(NamedTuple):
    """What a span's token id attributes gave: whether any were present, and per side the
    decoded text with the ids it came from (None when absent or not decoded)."""

    found: bool = False
    input: str | None = None
    output: str | None = None
    input_ids: list[int] | None = None
    output_ids: list[int] | None = None


def decode(decoder: TokenDecoder, ids: list[int]) -> str:
    """``decoder(ids)`` as text (may raise: the caller decides what a failure costs)."""
    decoded = decoder(ids)
    return decoded if isinstance(decoded, str) else str(decoded)


def read(
    attrs: Mapping[str, Any],
    decoder: TokenDecoder | None,
    names: Mapping[str, str],
    consumed: set[str],
    extra: dict[str, Any],
) -> TokenText:
    """The span's token ids, decoded (or their text, when the span carries it already). A failing
    decoder leaves the ids in metadata and notes the error; it never raises."""
    found = False
    texts: dict[str, tuple[str, list[int]]] = {}
    for name, side in names.items():
        ids = token_ids(attrs.get(name))
        if ids is None:
            continue
        found = True
        decoded = attrs.get(DECODED_TEXT_ATTRIBUTES.get(side, ""))
        if isinstance(decoded, str) and side not in texts:
            consumed.update((name, DECODED_TEXT_ATTRIBUTES[side]))
            extra[f"{name}.count"] = len(ids)
            texts[side] = (decoded, ids)
            continue
        if decoder is None:
            continue
        try:
            text = decode(decoder, ids)
        except Exception as exc:  # noqa: BLE001 - a user callable must not cost the sample
            extra[f"{name}.decode_error"] = repr(exc)
            continue
        consumed.add(name)
        extra[f"{name}.count"] = len(ids)
        if side in texts or side not in ("input", "output"):
            extra[f"{name}.text"] = text
        else:
            texts[side] = (text, ids)
    prompt, response = texts.get("input"), texts.get("output")
    return TokenText(
        found,
        prompt[0] if prompt else None,
        response[0] if response else None,
        prompt[1] if prompt else None,
        response[1] if response else None,
    )
