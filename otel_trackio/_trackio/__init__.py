"""Trackio behind one door: the only package that imports ``trackio``, and the only one that names
its private members.

- :mod:`.installed`: what the installed Trackio offers, detected once (its private members, the
  active run, its folder, reserved keys), each missing piece said once with what is lost;
- :mod:`.payloads`: Traces, tables and histograms in the shape ``run.log`` takes;
- :mod:`.runs`: which run: found, started, shared per project and name, opened by name;
- :mod:`.sink`: ``TrackioSink``, a held run and the one place that calls ``run.log`` and
  ``run.finish`` and makes what was logged durable;
- :mod:`.storage`: reads of what a run has stored (to tell a resent sample from a new one);
- :mod:`.store`: Trackio's storage writes in a process of their own (the writer's, the receiver's).

Trackio's private surface used, and what is lost without it (each missing piece is reported once,
with one warning, and Trackio's public behaviour is used instead):

- ``Run._flush_queues_inline``, ``Run._client_lock``, ``Run._is_local``: what was logged is
  written before ``export()`` returns (durable exports). Without: Trackio's own thread writes it
  within about 0.5 s.
- ``Run._queued_logs``, ``Run._queue_lock``, ``Run._config_logged``, ``Run._next_step``,
  ``trackio.utils.to_json_safe``: a log entry of Traces is queued as ``run.log`` queues it,
  without the deep copy ``run.log`` makes of every value first, and everything queued until a
  flush is written in one storage write. Without: ``run.log`` (the same rows, stored more
  slowly).
- ``Run._storage_mode``, ``SQLiteStorage.bulk_log`` called as ``Run._write_logs_to_sqlite`` calls
  it: the writer and the receiver write Traces in their store process, beside the conversion.
  Without: they are written in the writer's (or receiver's) own process.
- ``Run._warned_failures``: failed storage writes (disk full, read-only) are detected and counted
  as lost samples. Without: they stay Trackio's own warnings.
- ``Run._next_step``: step-less metrics follow the run's own step clock. Without: they follow the
  metric exporter's own counter.
- ``trackio.context_vars.current_run``: the run active in the user's thread is reused. Without:
  ``project`` or ``run=`` must be given.
- ``trackio.utils.RESERVED_KEYS``: series Trackio would rename are prefixed ``otel/``. Without:
  the list of Trackio 0.43.
- ``Trace._to_dict``'s payload shape: Traces are logged as stored payload dicts (no deep copy).
  Without: they are logged as ``trackio.Trace`` objects (slower).

Trackio is imported only when a run is opened (or read) in this process: with ``offload=True``
the writer process opens the run (``TrackioSink(defer=True)``), so a rollout process that never
imports ``trackio`` itself never loads it: its many objects would make every full garbage
collection on the rollout's event loop slower.
"""
