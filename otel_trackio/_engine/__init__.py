"""The run engine: what one Trackio run needs, whichever transport feeds it.

The span pipeline (:mod:`.pipeline`), the one door to Trackio (:mod:`.sink`), the latest step
(:mod:`.steps`), sample roots still open (:mod:`.open_samples`) and rate-limited warnings
(:mod:`.warn`).
"""
