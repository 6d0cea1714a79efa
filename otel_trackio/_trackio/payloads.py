"""Traces, tables and histograms in the shape ``run.log`` takes."""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from typing import Any

from otel_trackio._core.media import MEDIA_KEY, REFERENCE_KEY, media_text
from otel_trackio._trackio.installed import lost, module


def histogram(counts: Sequence[int], edges: Sequence[float]) -> Any:
    """A ``trackio.Histogram`` from precomputed bucket counts and their ``len + 1`` edges."""
    return module().Histogram(np_histogram=(list(counts), list(edges)))


def _payload(trace: Mapping[str, Any]) -> dict[str, Any]:
    return {
        "_type": module().Trace.TYPE,
        "messages": trace.get("messages") or [],
        "metadata": trace.get("metadata") or {},
        "spans": trace.get("spans") or [],
    }


@functools.cache
def payloads_as_stored() -> bool:
    """True when our payload dict is what ``trackio.Trace._to_dict`` stores for the same Trace."""
    sample: dict[str, Any] = {
        "messages": [{"role": "user", "content": "q"}],
        "metadata": {"step": 1},
        "spans": [{"id": "1", "name": "n", "kind": "span"}],
    }
    try:
        stored = (
            module()
            .Trace(sample["messages"], metadata=sample["metadata"], spans=sample["spans"])
            ._to_dict("p", "r", 0)
        )
    except Exception:  # noqa: BLE001 - any difference means: use the public class
        return False
    return bool(stored == _payload(sample))


def trace_entries(
    traces: Sequence[Mapping[str, Any]], project: str, run: str, step: int, *, remote: bool = False
) -> list[Any]:
    """Trace dicts (messages, metadata, spans) as what ``run.log`` takes for a list of Traces
    logged at ``step`` of ``project``/``run``.

    They go in as Trackio's stored trace payload (``{"_type": Trace.TYPE, ...}``, what
    ``Trace._to_dict`` makes) rather than ``trackio.Trace`` objects: our dicts are already plain
    JSON, and Trackio's deep copy of every trace is skipped. A Trace with inline images (its
    ``_media`` table) holds ``trackio.Image`` parts, saved as the run's media files as its
    payload is made (``remote``: a run on a Trackio server, which Trackio uploads them to:
    ``trackio.Trace`` objects). When the installed Trackio stores Traces differently,
    ``trackio.Trace`` objects are logged instead.
    """
    stored_shape = payloads_as_stored()
    if stored_shape and not any(t.get(MEDIA_KEY) for t in traces):
        return [_payload(t) for t in traces]
    if not stored_shape:
        lost("Trace._to_dict in the shape of 0.43", "Traces are logged as trackio.Trace objects")
    import tempfile

    trackio = module()
    saved_here = stored_shape and not remote
    entries = []
    # Images kept as they came are files Trackio copies as each payload is made: then gone.
    with tempfile.TemporaryDirectory(prefix="otel-trackio-images-") as folder:
        for t in traces:
            images = {
                ref: _image(entry, folder if saved_here else None)
                for ref, entry in (t.get(MEDIA_KEY) or {}).items()
            }
            entry = trackio.Trace(
                messages=_with_images(list(t.get("messages") or []), images),
                metadata=dict(t.get("metadata") or {}),
                spans=_with_images(list(t.get("spans") or []), images),
            )
            entries.append(entry._to_dict(project, run, step) if saved_here else entry)
    return entries


MAX_IMAGE_SIDE = 1024
"""An image wider or taller is stored scaled down to this many pixels on its longer side."""
MAX_IMAGE_BYTES = 32 * 1024 * 1024
"""An inline image larger than this is not decoded: a text says what it was."""


def _image(entry: Mapping[str, str], folder: str | None) -> Any:
    """A ``trackio.Image`` of an inline image, or a text part saying why there is none. An
    image within :data:`MAX_IMAGE_SIDE` is kept as it came: its bytes written to a file in
    ``folder``, which Trackio copies (no decoding); a larger one is decoded and scaled down (its
    caption says from what size); so is every image when ``folder`` is None."""
    import base64
    import binascii
    import io
    import os
    import tempfile

    mime = entry.get("mime_type")
    data = entry.get("data") or ""
    size = len(data) * 3 // 4
    if size > MAX_IMAGE_BYTES:
        return {"type": "text", "text": media_text(mime, size, ": too large to keep")}
    try:
        from PIL import Image
    except ImportError:  # Trackio brings Pillow; without it, no image is drawn
        return {"type": "text", "text": media_text(mime, size)}
    try:
        raw = base64.b64decode(data)
        picture = Image.open(io.BytesIO(raw))  # reads the header: the size, the format
        width, height = picture.size
        if max(width, height) <= MAX_IMAGE_SIDE and folder is not None and picture.format:
            fd, path = tempfile.mkstemp(suffix=f".{picture.format.lower()}", dir=folder)
            with os.fdopen(fd, "wb") as file:
                file.write(raw)
            return module().Image(path)
        picture.load()
    except (binascii.Error, ValueError, OSError, Image.DecompressionBombError):
        return {"type": "text", "text": media_text(mime, size, ": not a readable image")}
    caption = None
    if max(width, height) > MAX_IMAGE_SIDE:
        picture.thumbnail((MAX_IMAGE_SIDE, MAX_IMAGE_SIDE))
        caption = f"scaled down from {width}x{height}"
    return module().Image(picture, caption=caption)


def _with_images(value: Any, images: Mapping[str, Any]) -> Any:
    """``value`` with each image reference replaced by its image (or its text)."""
    if isinstance(value, list):
        return [_with_images(item, images) for item in value]
    if isinstance(value, Mapping):
        reference = value.get(REFERENCE_KEY)
        if isinstance(reference, str) and value.get("type") == "image":
            return images.get(reference, {"type": "text", "text": media_text("image", None)})
        return {key: _with_images(item, images) for key, item in value.items()}
    return value


def as_table(rows: Sequence[Mapping[str, Any]]) -> Any:
    """Plain rows as a ``trackio.Table`` (its columns: the first row's keys, in order)."""
    data: Any = [dict(row) for row in rows]  # Trackio takes dict rows (typed as lists)
    return module().Table(data=data)
