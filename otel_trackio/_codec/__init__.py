"""The record codec: where span and log event records come from, and how they cross a spool.

- :mod:`.sdk`: SDK ``ReadableSpan`` / ``ReadableLogRecord`` → records (the in-process exporters;
  cheap, it runs on the rollout's export path).
- :mod:`.otlp`: OTLP protobuf messages → records and SDK ``MetricsData`` (the receiver; needs the
  ``receiver`` extra, so nothing else imports it).
- :mod:`.events`: a log record's fields → a GenAI ``LogEventRecord``
  (both of the above).
- :mod:`.spool`: records ↔ spool entry bytes (the offload writer and the receiver's spool).
- :mod:`.tables`: the one status and span-kind table; :mod:`.routes`: the ``trackio.project`` /
  ``trackio.run`` route of a resource.
"""
