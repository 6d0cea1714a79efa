"""Images and other media in a Trace: inline data taken out of the text, once.

Model calls send images inline (an OTel ``blob`` part with base64 ``content``, an OpenAI
``image_url`` with a ``data:`` URI, the AI SDK's ``image`` / ``file`` parts): copied into the Trace
as text, each image would be stored as base64 in every place it appears (the conversation, the
root's input, each model call's input), and the Traces page would draw none. :func:`take_media`
replaces each inline image with a reference to one entry of the Trace's :data:`MEDIA_KEY` table
(one per distinct image), which the sink saves as a Trackio image file the page draws; an image
given by URL becomes the ``image_url`` part the page draws; other media (audio, video, files)
become a short text saying what they were. Pure: plain dicts in and out.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping
from typing import Any

MEDIA_KEY = "_media"
"""The Trace dict's table of inline images: reference -> ``{"mime_type", "data"}`` (base64).
Never stored: the sink turns it into Trackio image files, or drops it."""
REFERENCE_KEY = "otel_trackio.media"
"""A message part ``{"type": "image", REFERENCE_KEY: <reference>}`` stands for an inline image."""

_BASE64 = re.compile(r"[A-Za-z0-9+/]*={0,2}")
_DATA_URI = re.compile(r"data:([\w.+-]+/[\w.+-]+)?(?:;[\w=.+-]+)*;base64,([A-Za-z0-9+/=]+)")


MediaTable = dict[str, dict[str, str]]
"""A Trace's inline images by reference (what :data:`MEDIA_KEY` holds)."""


def take_media(value: Any, table: MediaTable) -> Any:
    """``value`` (messages, a span's input or output) with its inline media taken out: images
    as references into ``table`` (one entry per distinct image), other media as a text naming
    their type and size, a ``data:`` URI inside a text as such a text too; an image given by
    URL as the ``image_url`` part the page draws. Run it before values are cut to size."""
    return _walk(value, table)


def media_text(mime_type: str | None, size: int | None, what: str = "") -> str:
    """The readable stand-in of media that is not drawn: ``[audio/wav, 12 KB]``."""
    kind = mime_type or "media"
    told = f", {_size(size)}" if size is not None else ""
    return f"[{kind}{told}{what}]"


def _size(count: int) -> str:
    if count < 1024:
        return f"{count} B"
    if count < 1024 * 1024:
        return f"{count / 1024:.0f} KB"
    return f"{count / (1024 * 1024):.1f} MB"


def _decoded_size(data: str) -> int:
    return len(data.replace("\n", "").replace(" ", "")) * 3 // 4


def _walk(value: Any, table: MediaTable) -> Any:
    """``value`` with its media taken out; ``value`` itself (no copy) when it holds none."""
    if isinstance(value, str):
        if "base64," not in value:
            return value
        return _DATA_URI.sub(lambda m: media_text(m.group(1), _decoded_size(m.group(2))), value)
    if isinstance(value, list):
        items = [_walk(item, table) for item in value]
        return value if all(a is b for a, b in zip(items, value, strict=True)) else items
    if isinstance(value, Mapping):
        part = _media_part(value, table)
        if part is not None:
            return part
        walked = {key: _walk(item, table) for key, item in value.items()}
        return value if all(walked[k] is v for k, v in value.items()) else walked
    return value


def _media_part(part: Mapping[str, Any], table: MediaTable) -> Any:
    """A media part in the form the page draws (or a text), or None when ``part`` is none."""
    kind = part.get("type")
    if kind == "image_url":
        url = part.get("image_url")
        url = url.get("url") if isinstance(url, Mapping) else url
        return _from_url(url, None, table) if isinstance(url, str) else None
    if kind == "blob":
        mime = _text(part.get("mime_type"))
        return _from_data(part.get("content"), mime, part.get("modality"), table)
    if kind == "uri":
        mime = _text(part.get("mime_type"))
        uri = part.get("uri")
        if not isinstance(uri, str):
            return None
        if _is_image(mime, part.get("modality")) or (mime is None and uri.startswith("data:")):
            return _from_url(uri, mime, table)
        return {"type": "text", "text": media_text(mime, None, f": {uri}")}
    if kind == "image":  # the AI SDK (base64, a data URI or a URL), OpenInference ({"url": ...})
        image = part.get("image")
        image = image.get("url") if isinstance(image, Mapping) else image
        mime = _text(part.get("mimeType") or part.get("mediaType"))
        if isinstance(image, str):
            if image.startswith(("http://", "https://", "data:")):
                return _from_url(image, mime, table)
            return _from_data(image, mime or "image/png", "image", table)
        return None
    if kind == "file":
        mime = _text(part.get("mediaType") or part.get("mime_type") or part.get("mimeType"))
        data = part.get("data") if "data" in part else part.get("content")
        if isinstance(data, str):
            return _from_data(data, mime, part.get("modality"), table)
        told = part.get("file_id") or part.get("filename") or part.get("uri")
        what = f": {told}" if told else ""
        return {"type": "text", "text": media_text(mime or "file", None, what)}
    if kind == "input_audio":
        audio = part.get("input_audio")
        data = audio.get("data") if isinstance(audio, Mapping) else None
        fmt = audio.get("format") if isinstance(audio, Mapping) else None
        size = _decoded_size(data) if isinstance(data, str) else None
        return {"type": "text", "text": media_text(f"audio/{fmt}" if fmt else "audio", size)}
    return None


def _from_url(url: str, mime: str | None, table: MediaTable) -> Any:
    found = _DATA_URI.fullmatch(url.strip())
    if found is None:  # a link: the page draws it
        return {"type": "image_url", "image_url": {"url": url}}
    return _from_data(found.group(2), found.group(1) or mime, None, table)


def _from_data(data: Any, mime: str | None, modality: Any, table: MediaTable) -> Any:
    if not isinstance(data, str):
        return {"type": "text", "text": media_text(mime, None)}
    size = _decoded_size(data)
    if not _is_image(mime, modality):
        return {"type": "text", "text": media_text(mime or _text(modality), size)}
    compact = "".join(data.split())
    if not _BASE64.fullmatch(compact):
        return {"type": "text", "text": media_text(mime, size, ": not base64")}
    reference = hashlib.sha256(compact.encode()).hexdigest()[:32]
    table.setdefault(reference, {"mime_type": mime or "image", "data": compact})
    return {"type": "image", REFERENCE_KEY: reference}


def _is_image(mime: str | None, modality: Any) -> bool:
    return (mime or "").startswith("image") or modality == "image"


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None
