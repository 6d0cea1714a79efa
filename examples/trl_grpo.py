"""GRPO (or RLOO) with TRL, every completion a Trackio Trace beside TRL's own curves: one line.

Runs offline on CPU in seconds: a tiny random Qwen2 and a word-level tokenizer are built in code
(nothing is downloaded; the model says nonsense, the point is what you see).
Needs the ``trl`` extra, and torch (its CPU build, on a machine without a GPU)::

    pip install torch --index-url https://download.pytorch.org/whl/cpu
    pip install "otel-trackio[trl]"
    python examples/trl_grpo.py
    trackio show --project trl-demo   # Traces page: a Trace per completion, at TRL's steps

The line is ``otel_trackio.trl.trace_rollouts(trainer)``. The judge reward function shows how
your own spans join a completion's Trace: ``with otel_trackio.trl.sample(i):``.
"""

from __future__ import annotations

import argparse
import os
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # everything here is built in code

from datasets import Dataset
from opentelemetry import trace
from tokenizers import Tokenizer, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast, Qwen2Config, Qwen2ForCausalLM
from trl import GRPOConfig, GRPOTrainer, RLOOConfig, RLOOTrainer

import otel_trackio
import otel_trackio.trl

WORDS = [
    "<pad>", "<unk>", "<eos>", "<|im_start|>", "<|im_end|>", "user", "assistant",
    "what", "is", "two", "plus", "three", "five", "six", "four", "the", "answer", "say", "hello",
]  # fmt: skip
PROMPTS = ["what is two plus three", "what is three plus three", "say hello", "the answer is"]
TEMPLATE = (
    "{% for m in messages %}<|im_start|> {{ m['role'] }} {{ m['content'] }} <|im_end|> "
    "{% endfor %}{% if add_generation_prompt %}<|im_start|> assistant {% endif %}"
)


def tiny_tokenizer() -> PreTrainedTokenizerFast:
    """A word-level tokenizer over :data:`WORDS` with a small chat template."""
    tokenizer = Tokenizer(models.WordLevel({w: i for i, w in enumerate(WORDS)}, unk_token="<unk>"))
    tokenizer.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tokenizer,
        pad_token="<pad>",
        eos_token="<eos>",
        unk_token="<unk>",
        padding_side="left",
    )
    fast.chat_template = TEMPLATE
    return fast


def tiny_model(tokenizer: PreTrainedTokenizerFast) -> Qwen2ForCausalLM:
    """A random two-layer Qwen2 of a few thousand parameters."""
    config = Qwen2Config(
        hidden_size=16,
        num_attention_heads=4,
        num_key_value_heads=2,
        num_hidden_layers=2,
        intermediate_size=32,
        vocab_size=len(tokenizer),
        max_position_embeddings=128,
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id,
        bos_token_id=tokenizer.eos_token_id,
    )
    config._name_or_path = "tiny-qwen2"
    return Qwen2ForCausalLM(config)


def prompts(count: int) -> Dataset:
    """``count`` conversational prompts."""
    return Dataset.from_dict(
        {"prompt": [[{"role": "user", "content": PROMPTS[i % len(PROMPTS)]}] for i in range(count)]}
    )


def text(completion: Any) -> str:
    """A completion's text (conversational: its last turn's)."""
    if isinstance(completion, list):
        return str(completion[-1].get("content") or "") if completion else ""
    return str(completion)


def brevity(completions: list[Any], **kwargs: Any) -> list[float]:
    """Shorter answers score higher."""
    return [1.0 / (1 + len(text(c).split())) for c in completions]


def judge(completions: list[Any], **kwargs: Any) -> list[float]:
    """Says "five"? Each check is a span of that completion's Trace."""
    tracer = trace.get_tracer("judge")
    scores = []
    for i, completion in enumerate(completions):
        with otel_trackio.trl.sample(i), tracer.start_as_current_span("judge") as span:
            score = 1.0 if "five" in text(completion).split() else 0.0
            span.set_attribute("judge.says_five", score == 1.0)
        scores.append(score)
    return scores


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--project", default="trl-demo")
    parser.add_argument("--trainer", choices=("grpo", "rloo"), default="grpo")
    parser.add_argument("--run-name", default="grpo-tiny", help="'' lets Trackio pick one")
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--steps-per-generation", type=int, default=1)
    parser.add_argument("--logging-steps", type=int, default=1)
    parser.add_argument("--eval-steps", type=int, default=0, help="evaluate every N steps")
    parser.add_argument("--max-samples-per-step", type=int, default=None)
    parser.add_argument(
        "--configure-first",
        action="store_true",
        help="call otel_trackio.configure() before the trainer exists (either order gives one run)",
    )
    parser.add_argument(
        "--without-traces", action="store_true", help="train without the one line (to compare)"
    )
    parser.add_argument("--output-dir", default=os.path.join("/tmp", "trl-grpo-demo"))
    args = parser.parse_args()

    if args.configure_first:
        otel_trackio.configure(args.project, args.run_name or None)
    tokenizer = tiny_tokenizer()
    config_class, trainer_class = (
        (GRPOConfig, GRPOTrainer) if args.trainer == "grpo" else (RLOOConfig, RLOOTrainer)
    )
    config = config_class(
        output_dir=args.output_dir,
        use_cpu=True,
        num_generations=2,
        per_device_train_batch_size=4,
        steps_per_generation=args.steps_per_generation,
        max_completion_length=8,
        max_steps=args.steps,
        logging_steps=args.logging_steps,
        report_to="trackio",
        project=args.project,
        run_name=args.run_name or None,
        save_strategy="no",
        seed=0,
        beta=0.0,  # no reference model: this one is built in code, not loadable by name
        eval_strategy="steps" if args.eval_steps else "no",
        eval_steps=args.eval_steps or None,
        per_device_eval_batch_size=4,
    )
    trainer = trainer_class(
        model=tiny_model(tokenizer),
        processing_class=tokenizer,
        reward_funcs=[brevity, judge],
        args=config,
        train_dataset=prompts(64),
        eval_dataset=prompts(4) if args.eval_steps else None,
    )
    if not args.without_traces:
        otel_trackio.trl.trace_rollouts(trainer, max_samples_per_step=args.max_samples_per_step)
    trainer.train()


if __name__ == "__main__":
    main()
