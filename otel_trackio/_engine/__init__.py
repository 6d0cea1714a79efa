"""The run engine: what one Trackio run needs, whichever transport feeds it.

The span pipeline (:mod:`.pipeline`), the metric path (:mod:`.metrics`), the latest step
(:mod:`.steps`), sample roots still open (:mod:`.open_samples`) and rate-limited warnings
(:mod:`.warn`); Trackio itself is behind :mod:`otel_trackio._trackio`.
"""
