"""Value helpers shared by every stage: one copy of each rule.

- the int64 bound (SQLite, and so Trackio, stores nothing wider; steps outside it are no steps);
- numbers and text from attribute values (:func:`as_int`, :func:`as_float`, :func:`as_text`,
  :func:`parse_step`);
- the visible truncation marker ``…[otel-trackio cut N chars]`` (:func:`cut_text`, :func:`limit`);
- OTel attribute values as JSON (:func:`attribute_json`) and arbitrary Python objects as bounded
  JSON (:func:`json_safe`, what ``@traced`` records);
- what Trackio can store (:func:`storable`): one UTF-8 repair rule (a lone surrogate becomes
  U+FFFD, :func:`utf8`) and ints within 64 bits.

Pure: no I/O, no Trackio.
"""

from __future__ import annotations

import dataclasses
import datetime
import enum
import json
import math
from collections.abc import Mapping
from typing import Any, TypeVar, cast

import orjson

_T = TypeVar("_T")

INT64 = 2**63
"""Ints must lie in ``[-INT64, INT64)`` to be stored."""

CUT_MARKER = "…[otel-trackio cut {} chars]"

#: caps of :func:`json_safe` (what ``@traced`` records on the calling thread)
MAX_STRING_CHARS = 4096
MAX_ITEMS = 64
MAX_DEPTH = 6


# -- numbers and text -----------------------------------------------------------------------


def as_int(value: Any) -> int | None:
    """An int from an attribute value (ints, finite floats, strings of ints); else None."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float) and math.isfinite(value) and abs(value) < 1e18:
        return int(value)
    if isinstance(value, str):
        try:
            return int(value.strip())
        except ValueError:
            return None
    return None


def as_float(value: Any) -> float | None:
    """A finite float from an attribute value; else None."""
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        number = float(value)
    elif isinstance(value, str):
        try:
            number = float(value.strip())
        except ValueError:
            return None
    else:
        return None
    return number if math.isfinite(number) else None


def as_text(value: Any) -> str:
    """Strings as they are, ``None`` as empty, anything else as compact JSON."""
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False, default=str)


def parse_step(value: Any) -> int | None:
    """A step from an attribute value: ints, integral floats and strings of ints; else None.

    Steps outside the signed 64-bit range are None too: SQLite cannot store them, and Trackio
    would drop the whole log entry in its background thread.
    """
    if isinstance(value, float) and not value.is_integer():
        return None  # 2.5 is no step; as_int would truncate it
    step = as_int(value)
    if step is None or not -INT64 <= step < INT64:
        return None
    return step


# -- cutting ----------------------------------------------------------------------------------


def cut_text(text: str, max_chars: int) -> str:
    """``text`` cut to ``max_chars`` with a marker saying how much went."""
    if len(text) <= max_chars:
        return text
    return text[:max_chars] + CUT_MARKER.format(len(text) - max_chars)


def limit(value: Any, max_chars: int) -> Any:
    """Cut long strings (and the strings inside lists and dicts) with the marker.

    Returns the same object when nothing is too long (the common case: nothing is copied).
    """
    if isinstance(value, (list, dict)):
        try:
            # No string inside can be longer than the whole serialised value.
            if len(orjson.dumps(value)) <= max_chars:
                return value
        except (TypeError, ValueError):
            pass
    if not _too_long(value, max_chars):
        return value
    if isinstance(value, str):
        return cut_text(value, max_chars)
    if isinstance(value, list):
        return [limit(v, max_chars) for v in value]
    if isinstance(value, dict):
        return {k: limit(v, max_chars) for k, v in value.items()}
    return value


def _too_long(value: Any, max_chars: int) -> bool:
    """True when :func:`limit` would cut something in ``value`` (a walk that allocates nothing)."""
    if isinstance(value, str):
        return len(value) > max_chars
    if isinstance(value, list):
        return any(_too_long(item, max_chars) for item in value)
    if isinstance(value, dict):
        return any(_too_long(item, max_chars) for item in value.values())
    return False


# -- JSON -------------------------------------------------------------------------------------


def attribute_json(value: Any) -> Any:
    """An OTel attribute value as JSON data: sequences as lists, bytes summarised, non-finite
    floats and other objects as text. Lossless for everything JSON can hold."""
    if value is None or isinstance(value, (str, bool, int)):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else str(value)
    if isinstance(value, Mapping):
        return {str(k): attribute_json(v) for k, v in value.items()}
    if isinstance(value, (bytes, bytearray, memoryview)):
        return f"<{len(value)} bytes>"
    if isinstance(value, (list, tuple, set, frozenset)):
        return [attribute_json(v) for v in value]
    return str(value)


def json_safe(value: Any, *, max_chars: int = MAX_STRING_CHARS, _depth: int = 0) -> Any:
    """Any Python value as plain JSON data, bounded in size; never raises.

    Handles dicts, sequences, sets, dataclasses, pydantic models (``model_dump``), numpy
    scalars and arrays and torch tensors (summarised when large) without importing them, bytes
    (summarised as ``<N bytes>``), enums, dates and paths; anything else becomes its ``repr``.
    Strings longer than ``max_chars`` and containers longer than ``MAX_ITEMS`` are cut visibly.
    """
    try:
        return _safe(value, max_chars, _depth)
    except Exception as exc:  # noqa: BLE001 - recording a value must never break the call
        return f"<unserialisable {type(value).__name__}: {exc!r}>"


def _safe(value: Any, max_chars: int, depth: int) -> Any:
    if value is None or isinstance(value, bool):
        return value
    if isinstance(value, int):
        return value if -INT64 <= value < INT64 else str(value)
    if isinstance(value, float):
        return value if math.isfinite(value) else str(value)
    if isinstance(value, str):
        return cut_text(value, max_chars)
    if isinstance(value, (bytes, bytearray, memoryview)):
        return f"<{len(value)} bytes>"
    if depth >= MAX_DEPTH:
        return cut_text(repr(value), 200)
    module = type(value).__module__ or ""
    if module.startswith("numpy") or module.startswith("torch"):
        return _array(value, max_chars, depth)
    if isinstance(value, Mapping):
        out: dict[str, Any] = {}
        for i, (k, v) in enumerate(value.items()):
            if i >= MAX_ITEMS:
                out["…"] = f"{len(value) - MAX_ITEMS} more items"
                break
            out[str(k)] = _safe(v, max_chars, depth + 1)
        return out
    if isinstance(value, (list, tuple, set, frozenset)):
        items = value if isinstance(value, (list, tuple)) else sorted(value, key=repr)
        out_list = [
            # token ids and flags are the common case: no call per item for them
            v
            if (t := type(v)) is bool or v is None or (t is int and -INT64 <= v < INT64)
            else _safe(v, max_chars, depth + 1)
            for v in items[:MAX_ITEMS]
        ]
        if len(items) > MAX_ITEMS:
            out_list.append(f"… {len(items) - MAX_ITEMS} more items")
        return out_list
    if isinstance(value, enum.Enum):
        return _safe(value.value, max_chars, depth + 1)
    if isinstance(value, (datetime.datetime, datetime.date, datetime.time)):
        return value.isoformat()
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {
            f.name: _safe(getattr(value, f.name, None), max_chars, depth + 1)
            for f in dataclasses.fields(value)[:MAX_ITEMS]
        }
    dump = getattr(value, "model_dump", None)  # pydantic v2
    if callable(dump) and not isinstance(value, type):
        return _safe(dump(), max_chars, depth + 1)
    dump = getattr(value, "dict", None)  # pydantic v1
    if callable(dump) and hasattr(value, "__fields__") and not isinstance(value, type):
        return _safe(dump(), max_chars, depth + 1)
    if hasattr(value, "__fspath__"):
        return str(value)
    return cut_text(repr(value), max_chars)


def _array(value: Any, max_chars: int, depth: int) -> Any:
    """numpy / torch values: scalars as numbers, small arrays as lists, large ones summarised."""
    shape = getattr(value, "shape", None)
    if shape is not None and len(shape) == 0 and hasattr(value, "item"):
        return _safe(value.item(), max_chars, depth + 1)
    if shape is None:
        item = getattr(value, "item", None)
        return _safe(item(), max_chars, depth + 1) if callable(item) else repr(value)
    size = 1
    for dim in shape:
        size *= int(dim)
    if size <= MAX_ITEMS and hasattr(value, "tolist"):
        if hasattr(value, "detach"):  # torch: no grad, on the CPU
            value = value.detach().cpu()
        return _safe(value.tolist(), max_chars, depth + 1)
    return {"dtype": str(getattr(value, "dtype", "?")), "shape": [int(d) for d in shape]}


# -- what Trackio can store -------------------------------------------------------------------


def utf8(text: str) -> str:
    """``text`` encodable as UTF-8: each lone surrogate (non-UTF-8 input) becomes U+FFFD.

    Trackio drops a whole log entry's key it cannot encode, which would lose every value logged
    with it.
    """
    if text.isascii():
        return text
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return text.encode("utf-16", "surrogatepass").decode("utf-16", "replace")
    return text


def storable(value: _T) -> _T:
    """``value`` in a form Trackio can serialise; the same object when it already is.

    Trackio round-trips every log entry through orjson. When orjson takes the value as it is
    (nearly always), nothing is copied; otherwise it is repaired: text by :func:`utf8`, ints
    beyond 64 bits as strings, bytes summarised, other objects as text.
    """
    try:
        orjson.dumps(value)
    except (TypeError, ValueError):  # orjson.JSONEncodeError is a TypeError
        return cast(_T, _storable(value))
    return value


def _storable(value: Any) -> Any:
    if isinstance(value, str):
        return utf8(value)
    if isinstance(value, bool) or value is None or isinstance(value, float):
        return value
    if isinstance(value, int):
        return value if -INT64 <= value < INT64 else str(value)
    if isinstance(value, dict):
        return {_storable(str(k)): _storable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_storable(v) for v in value]
    if isinstance(value, (bytes, bytearray, memoryview)):
        return f"<{len(value)} bytes>"
    return _storable(str(value))


#: how long a value recorded as a span attribute on the calling thread may be (JSON text)
MAX_RECORDED_CHARS = 32 * 1024


def json_text(value: Any) -> str:
    """A value as the JSON text a span attribute records (made JSON-safe, cut to
    :data:`MAX_RECORDED_CHARS`): what ``@traced`` and the verl integration record."""
    text = json.dumps(json_safe(value), ensure_ascii=False, allow_nan=False)
    return cut_text(text, MAX_RECORDED_CHARS)
