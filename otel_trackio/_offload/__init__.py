"""``offload=True``: the rollout process appends to a spool, a writer process drains it.

- :mod:`.client`: the exporter side (starting and watching the writer);
- :mod:`.writer`: the writer process's ``main`` (``python -m otel_trackio._offload``).
"""
