"""What a rollout process and its offload writer tell each other, through files in the spool
directory: the writer's config (:data:`CONFIG_FILE`, written by the rollout process, completed by
the writer once it opened the run) and the writer's report on opening the run
(:data:`OPENED_FILE`). Kept apart from the writer so the rollout process imports none of the
writer's engine.

The config is data (:mod:`~otel_trackio._codec.packing`: plain values and the two config classes
only; a token decoder travels as its ``module:function`` name, imported again by the writer as
``OTEL_EXPORTER_TRACKIO_TOKEN_DECODER`` would be)."""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from otel_trackio._codec.events import plain_value
from otel_trackio._codec.packing import (
    Classes,
    UnpackableValue,
    UnreadablePayload,
    pack,
    unpack,
)
from otel_trackio._settings import TrackioSettings, load_token_decoder
from otel_trackio._trackio.runs import OpenedElsewhere

CONFIG_FILE = "writer.config"
OPENED_FILE = "opened.json"
SPLIT_FILE = "split.txt"
"""Written by the writer when its run is not the only run of its name (what to say, in the
rollout process's summary too)."""
"""What the writer reports once it has the run: ``{"name", "id", "banner"}`` (``banner``: what
``trackio.init`` printed, for the rollout's terminal), or ``{"error"}``."""
FINISHING_FILE = "finishing"
"""Written by the rollout process when its ``shutdown()`` begins: it gave the writer a normal CPU
share, which the writer keeps until the end."""
FINISH_FLAG = "--finish"
"""The writer's flag to keep the CPU priority it started with (a writer started at shutdown to
store what is left, or by ``otel-trackio drain``) rather than take the lowest."""
STOPPED = 3
"""Exit status of a writer stopped by a signal with data left in its spool."""
OPEN_FAILED = 4
"""Exit status of a writer that could not open the run (the reason is in :data:`OPENED_FILE`);
it is not started again."""


@dataclass(frozen=True)
class WriterConfig:
    """What the rollout process tells its writer (:data:`CONFIG_FILE` in the spool directory).

    ``run_id`` None: the rollout process has not opened the run; the writer opens it (with
    ``name`` None, Trackio picks the name) and writes the name and id back here."""

    settings: TrackioSettings
    project: str
    name: str | None
    parent_pid: int
    run_id: str | None = None
    token_decoder: str | None = None
    """The settings' token decoder as ``module:function`` (the settings hold None)."""


def _settings(fields: dict[str, Any]) -> TrackioSettings:
    """The settings built again; ``trackio_init``'s values as they were given to ``trackio.init``
    (lists, not the tuples every array is read back as)."""
    fields["trackio_init"] = plain_value(fields.get("trackio_init") or {})
    return TrackioSettings(**fields)


_CONFIG_CLASSES = Classes.of(WriterConfig, TrackioSettings, build={TrackioSettings: _settings})


def encode_config(config: WriterConfig) -> bytes:
    """The bytes of :data:`CONFIG_FILE`. Raises ``ValueError`` when the settings hold what the
    writer could not read back (a token decoder it cannot import, a value that is not plain
    data)."""
    settings = config.settings
    decoder = settings.token_decoder
    spec = config.token_decoder
    if decoder is not None:
        module = getattr(decoder, "__module__", None) or ""
        qualname = getattr(decoder, "__qualname__", "") or ""
        if not module or module == "__main__" or "<" in qualname:
            raise ValueError(
                f"token_decoder {qualname or decoder!r} is defined in __main__ or inside a "
                "function, so the writer process cannot import it"
            )
        spec = f"{module}:{qualname}"
        settings = dataclasses.replace(settings, token_decoder=None)
    try:
        data = pack(
            dataclasses.replace(config, settings=settings, token_decoder=spec), _CONFIG_CLASSES
        )
        unpack(data, _CONFIG_CLASSES)
    except (UnpackableValue, UnreadablePayload) as exc:
        raise ValueError(f"the settings hold more than plain data ({exc})") from None
    return data


def decode_config(data: bytes) -> WriterConfig:
    """What :func:`encode_config` wrote, the token decoder imported again. Raises
    :class:`~otel_trackio._codec.packing.UnreadablePayload` for a config it cannot read."""
    config = unpack(data, _CONFIG_CLASSES)
    if not isinstance(config, WriterConfig):
        raise UnreadablePayload(f"it holds a {type(config).__name__}, not a writer config")
    if config.token_decoder is None:
        return config
    try:
        decoder = load_token_decoder(config.token_decoder)
    except ValueError as exc:
        raise UnreadablePayload(f"its token decoder {config.token_decoder!r} {exc}") from None
    return dataclasses.replace(
        config, settings=dataclasses.replace(config.settings, token_decoder=decoder)
    )


@dataclass(frozen=True)
class OpenedReport:
    """The writer's report on opening the run: the run, and what Trackio printed meanwhile."""

    run: OpenedElsewhere
    banner: str = ""


def read_opened(path: Path) -> OpenedReport | str | None:
    """The run the writer of spool ``path`` opened, the reason it could not (a string), or None
    while it has not said yet."""
    try:
        report: dict[str, Any] = json.loads((path / OPENED_FILE).read_bytes())
    except (FileNotFoundError, ValueError):
        return None
    if "error" in report:
        return str(report["error"])
    run = OpenedElsewhere(str(report["name"]), report.get("id"))
    return OpenedReport(run, str(report.get("banner") or ""))
