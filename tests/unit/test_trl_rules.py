"""``otel_trackio.trl``'s rules that need no TRL: the step a batch's Traces are logged at, what a
trainer without TRL's members gets, ``sample()`` outside a batch, a completion's messages.
(TRL itself runs in tests/frameworks/test_trl.py.)"""

from __future__ import annotations

import json
import logging

import pytest

from otel_trackio import trl


@pytest.mark.parametrize(
    ("global_step", "logging_steps", "max_steps", "logged_at"),
    [
        (0, 1, 4, 1),  # generated at 0, TRL logs its reward when global_step is 1
        (3, 1, 4, 4),
        (0, 2, 7, 2),  # logging every 2 steps: the batches of steps 0 and 1 at 2
        (1, 2, 7, 2),
        (6, 2, 7, 7),  # the last logging step is max_steps
        (0, 3, 7, 3),  # steps_per_generation 2: batches at 0, 2, 4, 6 -> 3, 3, 6, 7
        (2, 3, 7, 3),
        (4, 3, 7, 6),
        (6, 3, 7, 7),
        (5, 1, 0, 6),  # max_steps unknown: no cap
    ],
)
def test_a_batch_is_logged_at_trls_next_logging_step(
    global_step: int, logging_steps: int, max_steps: int, logged_at: int
) -> None:
    assert trl.trace_step(global_step, logging_steps, max_steps) == logged_at


def test_without_logging_by_steps_a_batch_is_logged_at_the_next_step() -> None:
    assert trl.trace_step(5, 10, 100, logs_by_steps=False) == 6


def test_a_trainer_without_trls_members_is_left_untouched(caplog) -> None:
    class OldTrainer:
        args = object()

        def _generate_and_score_completions(self, inputs):
            return inputs

    trainer = OldTrainer()
    before = trainer._generate_and_score_completions
    with caplog.at_level(logging.WARNING):
        assert trl.trace_rollouts(trainer) is None
    (record,) = [r for r in caplog.records if "otel-trackio" in r.getMessage()]
    assert "OldTrainer has no _logs" in record.getMessage()
    assert "training runs untouched" in record.getMessage()
    assert trainer._generate_and_score_completions == before


def test_sample_outside_a_batch_changes_nothing() -> None:
    with trl.sample(0) as span:
        assert span is None


def test_a_completion_with_tool_turns_keeps_them_as_tool_calls_and_results() -> None:
    completion = [
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [
                {"id": "c1", "function": {"name": "add", "arguments": '{"a": 2, "b": 3}'}}
            ],
        },
        {"role": "tool", "tool_call_id": "c1", "content": "5"},
        {"role": "assistant", "content": "five"},
    ]
    messages = json.loads(trl._messages_json(completion, "assistant"))
    assert [m["role"] for m in messages] == ["assistant", "tool", "assistant"]
    assert messages[0]["parts"][-1] == {
        "type": "tool_call", "id": "c1", "name": "add", "arguments": '{"a": 2, "b": 3}'
    }  # fmt: skip
    assert messages[1]["parts"] == [{"type": "tool_call_response", "id": "c1", "response": "5"}]
    assert json.loads(trl._messages_json("plain text", "assistant")) == [
        {"role": "assistant", "parts": [{"type": "text", "content": "plain text"}]}
    ]


def test_a_multimodal_prompts_images_become_png_blobs_encoded_once() -> None:
    """TRL's multimodal prompt (``prepare_multimodal_messages``: PIL images in the parts) as OTel
    ``blob`` parts the exporter draws as images; one prompt's image encoded once for all of its
    completions."""
    import base64
    import io

    from PIL import Image

    picture = Image.new("RGB", (8, 8), (255, 0, 0))
    prompt = [
        {
            "role": "user",
            "content": [{"type": "image", "image": picture}, {"type": "text", "text": "color?"}],
        }
    ]
    images: dict[int, str] = {}
    first = json.loads(trl._messages_json(prompt, "user", images))
    again = json.loads(trl._messages_json(prompt, "user", images))
    assert first == again and len(images) == 1
    blob, text = first[0]["parts"]
    assert text == {"type": "text", "content": "color?"}
    assert (blob["type"], blob["modality"], blob["mime_type"]) == ("blob", "image", "image/png")
    assert Image.open(io.BytesIO(base64.b64decode(blob["content"]))).size == (8, 8)
