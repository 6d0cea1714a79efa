"""Which Trackio run a resource's data asks for: its ``trackio.project`` / ``trackio.run``."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

Route = tuple[str | None, str | None]
"""(``trackio.project``, ``trackio.run``) of a request part; (None, None) when absent (and for
an exporter's own data in its spool)."""

PROJECT_ATTRIBUTE = "trackio.project"
RUN_ATTRIBUTE = "trackio.run"
NO_ROUTE: Route = (None, None)


def route_of(resource_attributes: Mapping[str, Any]) -> Route:
    """The (project, run) a resource asks for through ``trackio.project`` / ``trackio.run``."""
    project = resource_attributes.get(PROJECT_ATTRIBUTE)
    run = resource_attributes.get(RUN_ATTRIBUTE)
    return (
        str(project) if project not in (None, "") else None,
        str(run) if run not in (None, "") else None,
    )
