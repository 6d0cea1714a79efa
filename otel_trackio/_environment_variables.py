"""The ``OTEL_EXPORTER_TRACKIO_*`` environment variables, declared once.

This module is the ``opentelemetry_environment_variables`` entry point: every module-level name
starting with ``OTEL_`` becomes an ``opentelemetry-instrument`` flag (``--exporter_trackio_project``
...). So it holds these names and nothing else. Each is read by the setting of
:class:`otel_trackio.TrackioSettings` that names it, where its default and meaning live.
"""

OTEL_EXPORTER_TRACKIO_PROJECT = "OTEL_EXPORTER_TRACKIO_PROJECT"
"""Trackio project to log into. Required for the zero-code ``trackio`` exporters."""

OTEL_EXPORTER_TRACKIO_RUN = "OTEL_EXPORTER_TRACKIO_RUN"
"""Trackio run name. Default: a name Trackio generates. Span and metric exporters share it."""

OTEL_EXPORTER_TRACKIO_GROUP = "OTEL_EXPORTER_TRACKIO_GROUP"
"""Trackio run group (``trackio.init(group=...)``)."""

OTEL_EXPORTER_TRACKIO_SERVER_URL = "OTEL_EXPORTER_TRACKIO_SERVER_URL"
"""A self-hosted Trackio server to log to (``trackio.init(server_url=...)``)."""

OTEL_EXPORTER_TRACKIO_SPACE_ID = "OTEL_EXPORTER_TRACKIO_SPACE_ID"
"""A Hugging Face Space to log to (``trackio.init(space_id=...)``)."""

OTEL_EXPORTER_TRACKIO_RESUME = "OTEL_EXPORTER_TRACKIO_RESUME"
"""``never``, ``allow`` or ``must``: whether to continue an existing run of that name."""

OTEL_EXPORTER_TRACKIO_KEY = "OTEL_EXPORTER_TRACKIO_KEY"
"""Trackio key the Traces are logged under. Default ``rollout/traces``."""

OTEL_EXPORTER_TRACKIO_STEP_ATTRIBUTE = "OTEL_EXPORTER_TRACKIO_STEP_ATTRIBUTE"
"""Span / data point attribute holding the training step. Default ``step``."""

OTEL_EXPORTER_TRACKIO_SAMPLE_ATTRIBUTE = "OTEL_EXPORTER_TRACKIO_SAMPLE_ATTRIBUTE"
"""Span attribute marking a sample's root. Default ``sample_index``."""

OTEL_EXPORTER_TRACKIO_SAMPLE_TTL_SECONDS = "OTEL_EXPORTER_TRACKIO_SAMPLE_TTL_SECONDS"
"""An idle trace is logged as partial after this many seconds. Default ``300``."""

OTEL_EXPORTER_TRACKIO_MAX_BUFFERED_SPANS = "OTEL_EXPORTER_TRACKIO_MAX_BUFFERED_SPANS"
"""Past this many waiting spans and log events the oldest open samples go out as partial. Default
``100000``."""

OTEL_EXPORTER_TRACKIO_MAX_VALUE_CHARS = "OTEL_EXPORTER_TRACKIO_MAX_VALUE_CHARS"
"""Longer strings are cut with a visible marker. Default ``65536``."""

OTEL_EXPORTER_TRACKIO_MAX_SPAN_ATTRIBUTES = "OTEL_EXPORTER_TRACKIO_MAX_SPAN_ATTRIBUTES"
"""The OTLP receiver keeps the first this many attributes of a span, event, log record or resource
(the cut is marked ``otel_trackio.dropped_attributes``). Default ``1024``."""

OTEL_EXPORTER_TRACKIO_MAX_SPAN_EVENTS = "OTEL_EXPORTER_TRACKIO_MAX_SPAN_EVENTS"
"""The OTLP receiver keeps the first this many events of a span (the cut is marked
``otel_trackio.dropped_events``). Default ``1024``."""

OTEL_EXPORTER_TRACKIO_TOKEN_DECODER = "OTEL_EXPORTER_TRACKIO_TOKEN_DECODER"
"""``module:function`` turning token id lists into text; ``none``/``off`` or unset: no decoding."""

OTEL_EXPORTER_TRACKIO_TOKEN_ID_ATTRIBUTES = "OTEL_EXPORTER_TRACKIO_TOKEN_ID_ATTRIBUTES"
"""Span attributes holding token ids and the side each fills: ``prompt_ids=input,ids=output``."""

OTEL_EXPORTER_TRACKIO_LOG_DISTRIBUTIONS = "OTEL_EXPORTER_TRACKIO_LOG_DISTRIBUTIONS"
"""``true``: also log histogram buckets as ``trackio.Histogram``. Default ``false``."""

OTEL_EXPORTER_TRACKIO_HISTOGRAM_STATS = "OTEL_EXPORTER_TRACKIO_HISTOGRAM_STATS"
"""Histogram statistics logged as plots, a comma list of ``count,sum,mean,min,max``.
Default ``mean,min,max`` (what verl logs: for a 0/1 reward the mean is the success rate, min and
max say whether any sample failed or scored)."""

OTEL_EXPORTER_TRACKIO_COUNTER_TOTALS = "OTEL_EXPORTER_TRACKIO_COUNTER_TOTALS"
"""``true``: counters plot their running total. Default ``false``: what was added at each step."""

OTEL_EXPORTER_TRACKIO_OUTCOME_ATTRIBUTES = "OTEL_EXPORTER_TRACKIO_OUTCOME_ATTRIBUTES"
"""Attribute names that are a sample's outcome, a comma list: they lead the Trace header and are
columns of the per-step outcome table; the first one a sample has is shown in its status pill.
Default ``reward``."""

OTEL_EXPORTER_TRACKIO_OUTCOME_TABLE_KEY = "OTEL_EXPORTER_TRACKIO_OUTCOME_TABLE_KEY"
"""Trackio key of the per-step outcome table (Media & Tables tab); ``none``/``off``: no table.
Default ``rollout/outcomes``."""

OTEL_EXPORTER_TRACKIO_STEP_DURATIONS_KEY = "OTEL_EXPORTER_TRACKIO_STEP_DURATIONS_KEY"
"""Trackio key prefix of a step's own spans' durations (``<key>/<span name>``, seconds);
``none``/``off``: those spans are a Trace of their own. Default ``step_time``."""

OTEL_EXPORTER_TRACKIO_MAX_SAMPLES_PER_STEP = "OTEL_EXPORTER_TRACKIO_MAX_SAMPLES_PER_STEP"
"""Keep at most this many samples per step in this process (a ``StepSampler``). Default: all."""

OTEL_EXPORTER_TRACKIO_SAMPLING_SEED = "OTEL_EXPORTER_TRACKIO_SAMPLING_SEED"
"""Seed of the per-step sampler's choice. Default ``0``."""

OTEL_EXPORTER_TRACKIO_SUMMARY = "OTEL_EXPORTER_TRACKIO_SUMMARY"
"""``false``: no summary at shutdown (samples logged, partial, lost, the command to open them)
and no note when a sampler starts leaving samples out. Default ``true``."""

OTEL_EXPORTER_TRACKIO_GC_FREEZE = "OTEL_EXPORTER_TRACKIO_GC_FREEZE"
"""``false``: ``configure()`` and a span exporter built by hand leave the garbage collector alone.
Default ``true``: they end their setup with ``gc.collect(); gc.freeze()`` (undone by the last
``shutdown()`` of them)."""

OTEL_EXPORTER_TRACKIO_SAMPLE_GRACE_SECONDS = "OTEL_EXPORTER_TRACKIO_SAMPLE_GRACE_SECONDS"
"""How long a completed sample waits for spans and log events arriving after its root. Default: 0 in
process (2 with a log exporter), 5 in the OTLP receiver."""

OTEL_EXPORTER_TRACKIO_OFFLOAD = "OTEL_EXPORTER_TRACKIO_OFFLOAD"
"""``true``: the span exporter only spools compact records; a writer process logs them."""

OTEL_EXPORTER_TRACKIO_WRITER_MAX_LAG_SECONDS = "OTEL_EXPORTER_TRACKIO_WRITER_MAX_LAG_SECONDS"
"""With offload, how far behind (seconds) the writer may fall at the lowest CPU priority before it
takes a normal share to catch up. Default ``30``."""

OTEL_EXPORTER_TRACKIO_SHUTDOWN_TIMEOUT_SECONDS = "OTEL_EXPORTER_TRACKIO_SHUTDOWN_TIMEOUT_SECONDS"
"""With offload, the longest ``shutdown()`` waits for everything spooled to be stored. Default: no
limit while storing moves on."""

OTEL_EXPORTER_TRACKIO_SPOOL_DIR = "OTEL_EXPORTER_TRACKIO_SPOOL_DIR"
"""Where spools live. Default: ``otel-trackio-spool`` in the Trackio folder (``TRACKIO_DIR``)."""

OTEL_EXPORTER_TRACKIO_SPOOL_MAX_MB = "OTEL_EXPORTER_TRACKIO_SPOOL_MAX_MB"
"""The bound of one spool on disk, in MiB. Default ``1024``."""

OTEL_EXPORTER_TRACKIO_SPOOL_FSYNC = "OTEL_EXPORTER_TRACKIO_SPOOL_FSYNC"
"""When the spool forces its bytes to the disk: ``request`` (every acknowledged append),
``cycle`` (the checkpoint and what it covers, once per drain cycle; the default) or ``never``."""
