"""A durable spool between OpenTelemetry and Trackio.

Producers (the offloading span exporter in a rollout process, the OTLP receiver's request
handlers) append compact entries to an append-only, segmented queue on disk and return at once; a
drainer (a writer process started by the exporter, or a thread of the receiver) feeds them through
the one span pipeline and removes what is durable in Trackio.

- :mod:`.segments`: the on-disk queue (entries, segments, checkpoint, bound, locks);
- :mod:`.codec`: what an entry holds (SDK spans as lean tuples, span records, control entries);
- :mod:`.drain`: the drain loop, with crash recovery (no sample lost, none logged twice).

The offload writer process that drains a rollout process's spool is :mod:`otel_trackio._offload`.
"""
