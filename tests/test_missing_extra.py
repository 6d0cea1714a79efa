"""On an install without an extra, what needs it says so in one line naming the extra, the same
line everywhere (``otel_trackio.receiver.missing_extra``): ``otel-trackio serve``, the receiver's
classes, the examples. The missing packages are hidden in a subprocess (``sys.modules[name] =
None`` makes their import fail as on a plain install)."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
HINT = "needs the receiver extra: pip install 'otel-trackio[receiver]'"


def _run_without(hidden: list[str], code: str) -> subprocess.CompletedProcess[str]:
    prelude = "import sys\n" + "".join(f"sys.modules[{name!r}] = None\n" for name in hidden)
    return subprocess.run(
        [sys.executable, "-c", prelude + textwrap.dedent(code)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=REPO,
    )


def test_serve_names_the_receiver_extra():
    result = _run_without(
        ["opentelemetry.proto"],
        """
        from otel_trackio.receiver.cli import main
        sys.exit(main(["serve", "--project", "p"]))
        """,
    )
    assert result.returncode == 2
    [line] = result.stderr.strip().splitlines()
    assert line.startswith(
        f"otel-trackio serve {HINT} (from a clone: pip install '.[receiver]'); "
        "missing: opentelemetry.proto"
    ), line


def test_the_receivers_classes_name_the_extra():
    result = _run_without(
        ["opentelemetry.proto"],
        """
        try:
            from otel_trackio.receiver import OTLPReceiver
        except ModuleNotFoundError as exc:
            print(exc.name, exc, sep="\\n")
        """,
    )
    assert result.returncode == 0, result.stderr
    name, message = result.stdout.strip().splitlines()
    assert name.startswith("opentelemetry.proto")
    assert message.startswith(f"otel_trackio.receiver {HINT}")


@pytest.mark.parametrize(
    ("example", "hidden", "extra"),
    [
        ("multiprocess_rollouts.py", ["opentelemetry.proto"], "receiver"),
        ("ray_rollouts.py", ["ray"], "ray"),
    ],
)
def test_an_example_without_its_extra_stops_with_one_line(example, hidden, extra):
    path = REPO / "examples" / example
    result = _run_without(
        hidden,
        f"""
        import runpy
        sys.path.insert(0, {str(path.parent)!r})
        sys.argv = [{str(path)!r}]
        runpy.run_path({str(path)!r}, run_name="__main__")
        """,
    )
    assert result.returncode == 1
    [line] = result.stderr.strip().splitlines()
    assert line.startswith(
        f"examples/{example} needs the {extra} extra: pip install 'otel-trackio[{extra}]' "
        f"(from a clone: pip install '.[{extra}]'); missing: {hidden[0]}"
    ), line
