"""Assemble finished spans into rollout samples (see :mod:`.assembler` for the rules).

One job per module, behind the :class:`SampleAssembler` facade:

- :mod:`.assembler`: the per-trace buffer, holding complete samples for their grace period
  (adopted back by a remote parent that arrives), TTL and capacity eviction;
- :mod:`.events`: GenAI log events joining their span, and placeholder spans for the others;
- :mod:`.identity`: a sample's identity (tags and step), made in one place;
- :mod:`.memory`: what was logged already, so late spans and events continue their sample.
"""

from otel_trackio._core.assembly.assembler import SampleAssembler
from otel_trackio._core.assembly.events import PLACEHOLDER_ATTRIBUTE, PLACEHOLDER_NAME
from otel_trackio._core.assembly.identity import ROLLOUT_N_ATTRIBUTE, VALIDATE_ATTRIBUTE

__all__ = [
    "PLACEHOLDER_ATTRIBUTE",
    "PLACEHOLDER_NAME",
    "ROLLOUT_N_ATTRIBUTE",
    "VALIDATE_ATTRIBUTE",
    "SampleAssembler",
]
