"""Images as images: inline image parts of model calls (an OTel ``blob``, an OpenAI ``image_url``
with a ``data:`` URI, the AI SDK's ``image``) become one Trackio image file each, drawn by the
Traces page, never base64 in the stored row; a URL stays a link; audio and files a short text.
Through ``configure()`` (offloaded, the default) and in process, read back from Trackio storage.
"""

from __future__ import annotations

import base64
import io
import json
from pathlib import Path
from typing import Any

import pytest
from conftest import project_db_rows, read_traces
from opentelemetry import trace

import otel_trackio

PIL = pytest.importorskip("PIL.Image", reason="Pillow comes with Trackio")


def _png(width: int, height: int, color: tuple[int, int, int]) -> str:
    buffer = io.BytesIO()
    PIL.new("RGB", (width, height), color).save(buffer, format="PNG")
    return base64.b64encode(buffer.getvalue()).decode()


def _parts(image: str, big: str) -> list[dict[str, Any]]:
    """The user's turn: text, the same image three ways, a big image, a link, audio, a file."""
    return [
        {"type": "text", "content": "what is in these?"},
        {"type": "blob", "modality": "image", "mime_type": "image/png", "content": image},
        {"type": "uri", "modality": "image", "uri": "https://example.com/cat.png"},
        {"type": "blob", "modality": "image", "mime_type": "image/png", "content": big},
        {
            "type": "blob",
            "modality": "audio",
            "mime_type": "audio/wav",
            "content": "UklGRg==" * 512,
        },
        {"type": "file", "modality": "image", "file_id": "file-123"},
    ]


def _rollout(index: int, image: str, big: str) -> None:
    tracer = trace.get_tracer("test")
    user = {"role": "user", "parts": _parts(image, big)}
    answer = {"role": "assistant", "parts": [{"type": "text", "content": "a red square"}]}
    openai_style = [
        {"role": "user", "content": [
            {"type": "text", "text": "again"},
            {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{image}"}},
        ]},
    ]  # fmt: skip
    with tracer.start_as_current_span("rollout", attributes={"step": 0, "sample_index": index}):
        with tracer.start_as_current_span("chat m", attributes={
            "gen_ai.operation.name": "chat",
            "gen_ai.input.messages": json.dumps([user]),
            "gen_ai.output.messages": json.dumps([answer]),
        }):  # fmt: skip
            pass
        with tracer.start_as_current_span("chat again", attributes={
            "gen_ai.operation.name": "chat",
            "gen_ai.input.messages": json.dumps([user, answer, *openai_style]),
        }):  # fmt: skip
            pass


def _image_files(project: str) -> list[Path]:
    from trackio.utils import MEDIA_DIR

    return sorted((Path(MEDIA_DIR) / project).rglob("*.png"))


@pytest.mark.parametrize("offload", [True, False], ids=["offloaded", "in-process"])
def test_inline_images_are_trackio_images_stored_once(project, offload):
    image, big = _png(300, 300, (255, 0, 0)), _png(2048, 1024, (0, 0, 255))
    handle = otel_trackio.configure(project, "r", offload=offload)
    for index in range(2):
        _rollout(index, image, big)
    handle.shutdown()

    traces = read_traces(project, "r")
    assert len(traces) == 2
    for t in traces:
        user, answer, again = t["messages"]
        assert (user["role"], answer["role"], again["role"]) == ("user", "assistant", "user")
        parts = user["content"]
        red, link, blue, audio, file = parts[1:]
        assert red["_type"] == "trackio.image" and red.get("caption") is None
        assert link == {"type": "image_url", "image_url": {"url": "https://example.com/cat.png"}}
        assert blue["_type"] == "trackio.image" and blue["caption"] == "scaled down from 2048x1024"
        assert audio == {"type": "text", "text": "[audio/wav, 3 KB]"}
        assert file == {"type": "text", "text": "[file: file-123]"}
        # The same image sent twice (an OTel blob, an OpenAI data URI) is one file.
        again_image = next(p for p in again["content"] if isinstance(p, dict) and "_type" in p)
        assert again_image["file_path"] == red["file_path"]
    # One file per distinct image of a Trace, the big one scaled down; no base64 in the rows.
    files = _image_files(project)
    assert len(files) == 2 * 2, files
    sizes = sorted(PIL.open(f).size for f in files)
    assert sizes == [(300, 300), (300, 300), (1024, 512), (1024, 512)]
    rows = project_db_rows(project, "SELECT messages, spans FROM traces")
    for messages, spans in rows:
        row = bytes(messages).decode() + bytes(spans).decode()
        assert image[:40] not in row and "base64" not in row
        assert len(row) < 16_000, len(row)


def test_a_data_uri_in_text_and_an_unreadable_image_say_what_they_were(project):
    handle = otel_trackio.configure(project, "r")
    tracer = trace.get_tracer("test")
    words = f"look: data:image/png;base64,{_png(8, 8, (0, 0, 0))} ok"
    broken = {"type": "blob", "modality": "image", "mime_type": "image/png", "content": "AAAA"}
    user = {"role": "user", "parts": [{"type": "text", "content": words}, broken]}
    with tracer.start_as_current_span("rollout", attributes={"step": 1, "sample_index": 0}):
        with tracer.start_as_current_span("chat m", attributes={
            "gen_ai.operation.name": "chat", "gen_ai.input.messages": json.dumps([user]),
        }):  # fmt: skip
            pass
    handle.shutdown()
    ((t),) = read_traces(project, "r")
    text, unreadable = t["messages"][0]["content"]
    assert text["text"].startswith("look: [image/png, ") and text["text"].endswith(" B] ok"), text
    assert unreadable == {"type": "text", "text": "[image/png, 3 B: not a readable image]"}


_AI_SDK = {"ai.operationId": "ai.generateText.doGenerate", "ai.response.text": "a dot"}


@pytest.mark.parametrize(
    ("name", "attributes"),
    [
        ("ai sdk image", {**_AI_SDK, "ai.prompt.messages": [
            {"type": "image", "image": "{png}", "mediaType": "image/png"}]}),
        ("ai sdk file", {**_AI_SDK, "ai.prompt.messages": [
            {"type": "file", "data": "{png}", "mediaType": "image/png"}]}),
        ("openinference", {
            "openinference.span.kind": "LLM",
            "llm.input_messages.0.message.role": "user",
            "llm.input_messages.0.message.contents.0.message_content.type": "image",
            "llm.input_messages.0.message.contents.0.message_content.image.image.url":
                "data:image/png;base64,{png}",
            "llm.output_messages.0.message.role": "assistant",
            "llm.output_messages.0.message.content": "a dot",
        }),
    ],
)  # fmt: skip
def test_every_instrumentations_inline_image_is_taken_out_once(name, attributes):
    """The AI SDK's and OpenInference's image forms, as their readers give them: one entry in
    the Trace's media table, a reference in its place (the sink draws it as the OTel form)."""
    from otel_trackio._core.convert import sample_to_trace
    from otel_trackio._core.media import MEDIA_KEY, REFERENCE_KEY
    from otel_trackio._core.records import SpanRecord
    from otel_trackio._core.samples import Sample, SampleIdentity

    png = _png(4, 4, (0, 0, 0))
    filled = {}
    for key, value in attributes.items():
        if key == "ai.prompt.messages":
            value = json.dumps([{"role": "user", "content": value}]).replace("{png}", png)
        elif isinstance(value, str):
            value = value.replace("{png}", png)
        filled[key] = value
    root = SpanRecord(trace_id=1, span_id=1, name="rollout", start_ns=0, end_ns=10,
                      attributes={"step": 0, "sample_index": 0})  # fmt: skip
    call = SpanRecord(trace_id=1, span_id=2, name=name, start_ns=1, end_ns=5, parent_id=1,
                      attributes=filled)  # fmt: skip
    identity = SampleIdentity(trace_id=1, root_span_id=1, step=0, sample_index=0)
    converted = sample_to_trace(Sample(spans=[root, call], root=root, identity=identity))
    (reference,) = converted[MEDIA_KEY]
    assert converted[MEDIA_KEY][reference] == {"mime_type": "image/png", "data": png}
    user = converted["messages"][0]
    assert {"type": "image", REFERENCE_KEY: reference} in user["content"]
    assert png not in json.dumps({k: v for k, v in converted.items() if k != MEDIA_KEY})
