"""The pure core: SDK-free records in, samples, Trace dicts and metric points out.

Nothing here does I/O or imports ``trackio``: records (:mod:`.records`), a sample's identity
(:mod:`.samples`), grouping spans into samples (:mod:`.assembly`), Trace dicts (:mod:`.convert`,
:mod:`.conversation`, :mod:`.conventions`), metric points (:mod:`.metric_convert`) and the value
rules they share (:mod:`.values`).
"""
