"""Every command and example the README, docs/ and examples/README.md write, run as they are
(read from the files, not copied here), in a shell whose PATH is this environment's, as an
activated venv's is; what each stored is counted in Trackio's storage by (step, sample_index).

``DOCUMENTED`` places every command line of the pages: a test here runs it, another suite does
(named), or it cannot run here (said why). A command added to a page fails
:func:`test_every_documented_command_is_run_somewhere` until it is placed. Every Python block
parses; the ones that are whole programs run.
"""

from __future__ import annotations

import ast
import json
import os
import re
import shutil
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
MULTI_PROCESS = ROOT / "docs" / "multi-process.md"
WIRING = ROOT / "docs" / "wiring.md"
PAGES = [README, *sorted((ROOT / "docs").glob("*.md")), ROOT / "examples" / "README.md"]

ZERO_CODE = r"OTEL_TRACES_EXPORTER=trackio .* opentelemetry-instrument python app\.py"
INGEST = r"otel-trackio ingest .*"
EXAMPLES = r"(\.venv/bin/)?python examples/(rollout_demo|multiprocess_rollouts)\.py.*"

#: Every command line the pages write (a pattern each), and where it runs.
DOCUMENTED: dict[str, str] = {
    r"cd otel-trackio": "a change of folder: nothing to run",
    r"pip install (\.|-e \.|'\.\[\w+\]'|\"otel-trackio\[\w+\]\"|opentelemetry-distro)": (
        "test_every_extra_the_pages_install_exists (the registry is not for tests)"
    ),
    r"pip install otel-trackio cachetools fastapi": "the verl environment of `make test-packages`",
    r"pip install torch --index-url \S+": "the TRL environment of `make test-packages`",
    r"make (demo|test)": "CI runs `make test`; the examples' test runs what `make demo` runs",
    r"otel-trackio serve --project my-rl --name run-1": "test_the_receiver_commands_run_as_written",
    r"otel-trackio serve --project my-rl --name run-1 --upstream \S+": (
        "tests/test_proxy.py: examples/agent_without_otel.py runs it on free ports, its upstream "
        "a scripted model"
    ),
    r"OTEL_TRACES_EXPORTER=otlp .*python worker\.py": "test_the_receiver_commands_run_as_written",
    ZERO_CODE: "test_the_zero_code_command_runs_as_written",
    INGEST: "test_the_ingest_commands_run_as_written",
    EXAMPLES: "test_the_examples_readmes_commands_run_as_written",
    r"python examples/trl_grpo\.py|trackio show --project trl-demo": (
        "tests/frameworks/test_trl.py::test_the_trl_pages_commands_run_as_written"
    ),
    r"python -m verl\.trainer\.main_ppo .*": (
        "not here: a PPO training needs a model and GPUs; tests/frameworks/test_verl.py runs "
        "verl's agent loop and Tracking with the settings it names"
    ),
}


def _blocks(page: Path, language: str) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", page.read_text(), flags=re.S)


def command_lines(page: Path) -> list[str]:
    """The page's shell commands: continuation lines joined, comments and blank lines left out."""
    lines = []
    for block in _blocks(page, "bash"):
        for line in block.replace("\\\n", " ").splitlines():
            line = line.split("  #", 1)[0].strip()
            if line and not line.startswith("#"):
                lines.append(re.sub(r"\s+", " ", line))
    return lines


def documented(pattern: str) -> list[str]:
    """The command lines of every page that ``pattern`` (a key of ``DOCUMENTED``) places."""
    return [c for page in PAGES for c in command_lines(page) if re.fullmatch(pattern, c)]


def _shell_env(trackio_dir: Path) -> dict[str, str]:
    """An activated venv's shell: this environment's PATH first, no OTel settings of ours."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "TRACKIO_DIR"))}
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    env["TRACKIO_DIR"] = str(trackio_dir)
    return env


def _run_shell(command: str, cwd: Path, env: dict[str, str]) -> str:
    done = subprocess.run(
        command, shell=True, cwd=cwd, env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, (command, done.stdout[-2000:], done.stderr[-4000:])
    assert "Traceback" not in done.stderr, (command, done.stderr)
    return done.stdout + done.stderr


def _commands(page: Path) -> tuple[str, list[str]]:
    """The ``otel-trackio serve`` line and the worker lines of the page's receiver block."""
    [block] = [b for b in _blocks(page, "bash") if "otel-trackio serve" in b and "worker.py" in b]
    lines = [line.split("  #", 1)[0].strip() for line in block.splitlines()]
    [serve] = [line for line in lines if line.startswith("otel-trackio serve")]
    workers = [line for line in lines if line.endswith("python worker.py")]
    return serve, workers


def _worker_file() -> str:
    [worker] = [b for b in _blocks(README, "python") if b.startswith("# worker.py")]
    return worker


def _stored(trackio_dir: Path, project: str) -> list[tuple[str, int, int]]:
    with sqlite3.connect(trackio_dir / f"{project}.db") as db:
        rows = db.execute("SELECT run_id, step, metadata FROM traces").fetchall()
    return sorted((run, step, json.loads(meta)["sample_index"]) for run, step, meta in rows)


def test_the_worker_extra_holds_what_the_worker_commands_run():
    pyproject = (ROOT / "pyproject.toml").read_text()
    [extra] = re.findall(r"^worker = \[(.*?)^\]", pyproject, flags=re.S | re.M)
    names = set(re.findall(r'"([a-z0-9-]+)', extra))
    assert {
        "opentelemetry-distro",  # opentelemetry-instrument
        "opentelemetry-exporter-otlp-proto-grpc",  # OTEL_TRACES_EXPORTER=otlp's default
        "opentelemetry-exporter-otlp-proto-http",  # OTEL_EXPORTER_OTLP_PROTOCOL=http/protobuf
    } <= names


@pytest.mark.parametrize("page", [README, MULTI_PROCESS], ids=lambda p: p.name)
def test_the_receiver_commands_run_as_written(page, tmp_path):
    serve, workers = _commands(page)
    assert len(workers) == 2  # gRPC, then HTTP
    project = re.search(r"--project (\S+)", serve).group(1)
    (tmp_path / "worker.py").write_text(_worker_file())
    trackio_dir = tmp_path / "trackio"
    env = _shell_env(trackio_dir)
    said = tmp_path / "serve.out"
    with open(said, "w") as out:
        receiver = subprocess.Popen(
            f"exec {serve}",  # the shell becomes the receiver: Ctrl-C reaches it
            shell=True,
            cwd=tmp_path,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:
        deadline = time.monotonic() + 120
        while "otel-trackio serve: listening on" not in said.read_text():  # its start-up line
            assert receiver.poll() is None, said.read_text()
            assert time.monotonic() < deadline, said.read_text()
            time.sleep(0.1)
        for number, worker in enumerate(workers, start=1):
            done = subprocess.run(
                worker,
                shell=True,
                cwd=tmp_path,
                env=env,
                capture_output=True,
                text=True,
                timeout=120,
            )
            assert done.returncode == 0, (worker, done.stderr)
            assert "Traceback" not in done.stderr, (worker, done.stderr)
            deadline = time.monotonic() + 60  # each worker's 8 samples, stored once
            expected = sorted((s, i) for s in range(2) for i in range(4)) * number
            while sorted((s, i) for _, s, i in _stored(trackio_dir, project)) != sorted(expected):
                assert time.monotonic() < deadline, (worker, _stored(trackio_dir, project))
                time.sleep(0.2)
    finally:
        receiver.send_signal(signal.SIGINT)
        receiver.wait(timeout=120)
    assert len({run for run, _, _ in _stored(trackio_dir, project)}) == 1  # one run


def test_every_documented_command_is_run_somewhere():
    for page in PAGES:
        for command in command_lines(page):
            places = [p for p in DOCUMENTED if re.fullmatch(p, command)]
            assert len(places) == 1, f"{page.name}: {command!r} is placed {len(places)} times"
    for pattern in DOCUMENTED:
        assert documented(pattern), f"{pattern!r} places no command of the pages any more"


def test_every_extra_the_pages_install_exists():
    optional = (ROOT / "pyproject.toml").read_text().split("[project.optional-dependencies]")[1]
    extras = set(re.findall(r"^([a-z-]+) = \[", optional.split("\n[", 1)[0], flags=re.M))
    named = {
        extra
        for page in PAGES
        for command in command_lines(page)
        if command.startswith("pip install")
        for extra in re.findall(r"\[(\w[\w-]*)\]", command)
    }
    assert named and named <= extras, named - extras


def test_every_python_block_of_the_pages_parses():
    for page in PAGES:
        for block in _blocks(page, "python"):
            ast.parse(block, filename=page.name)  # fragments with `...` parse too


def _stored_in(trackio_dir: Path, project: str) -> list[tuple[str, int, int]]:
    """(run name, step, sample_index) of every Trace, all in one run (checked by run id)."""
    with sqlite3.connect(trackio_dir / f"{project}.db") as db:
        rows = db.execute("SELECT run_id, run_name, step, metadata FROM traces").fetchall()
    assert len({run_id for run_id, _, _, _ in rows}) <= 1, rows
    return sorted((name, step, json.loads(meta)["sample_index"]) for _, name, step, meta in rows)


def _metric_steps(trackio_dir: Path, project: str, prefix: str) -> list[int]:
    with sqlite3.connect(trackio_dir / f"{project}.db") as db:
        rows = db.execute("SELECT step, metrics FROM metrics").fetchall()
    return sorted(step for step, row in rows if any(k.startswith(prefix) for k in json.loads(row)))


def _program(page: Path, first_line: str) -> str:
    [block] = [b for b in _blocks(page, "python") if b.startswith(first_line)]
    return block


@pytest.mark.parametrize("page", [README, WIRING], ids=lambda p: p.name)
def test_the_configure_example_runs_as_written(page, tmp_path):
    (tmp_path / "example.py").write_text(_program(page, "import otel_trackio"))
    _run_shell("python example.py", tmp_path, _shell_env(tmp_path))
    stored = _stored_in(tmp_path, "my-rl")
    assert {run for run, _, _ in stored} == {"run-1"}
    steps = [step for _, step, _ in stored]
    assert sorted(set(steps)) == [0, 1, 2] and all(steps.count(s) == 4 for s in range(3))
    assert len(set(stored)) == len(stored) == 12  # max_samples_per_step=4, each sample once
    assert _metric_steps(tmp_path, "my-rl", "reward") == [0, 1, 2]


def test_the_hand_built_exporter_example_runs_as_written(tmp_path):
    (tmp_path / "example.py").write_text(_program(WIRING, "import trackio"))
    _run_shell("python example.py", tmp_path, _shell_env(tmp_path))
    assert _stored_in(tmp_path, "my-rl") == [("run-1", 3, 0)]


def test_the_metrics_example_runs_as_written(tmp_path):
    (tmp_path / "example.py").write_text(_program(ROOT / "docs" / "metrics.md", "import math"))
    _run_shell("python example.py", tmp_path, _shell_env(tmp_path))
    assert _metric_steps(tmp_path, "my-rl", "reward") == [3]
    assert _metric_steps(tmp_path, "my-rl", "tokens") == [3]


def test_the_zero_code_command_runs_as_written(tmp_path):
    [command] = documented(ZERO_CODE)
    (tmp_path / "app.py").write_text(_worker_file())  # any traced app: two steps of four samples
    _run_shell(command, tmp_path, _shell_env(tmp_path))
    assert _stored_in(tmp_path, "my-rl") == [("run-1", s, i) for s in range(2) for i in range(4)]


def test_the_ingest_commands_run_as_written(tmp_path):
    from test_ingest import write_collector_files

    commands = documented(INGEST)
    assert len(commands) == 2  # the files, then a folder of them
    folder = tmp_path / "collector-output"
    folder.mkdir()
    for file in write_collector_files(tmp_path):  # the same files, so the folder adds nothing
        shutil.copy(file, folder)
    for number, command in enumerate(commands, start=1):
        said = _run_shell(command, tmp_path, _shell_env(tmp_path / "trackio"))
        expected = "12 samples logged" if number == 1 else "12 found stored already (kept once)"
        assert expected in said, said
        stored = _stored_in(tmp_path / "trackio", "P")
        assert {run for run, _, _ in stored} == {"R"}
        assert stored == [("R", s, i) for s in range(3) for i in range(4)], number  # stored once


def test_the_examples_readmes_commands_run_as_written(tmp_path):
    commands = documented(EXAMPLES)
    assert len(commands) == 2
    demo, multiprocess = commands
    if not (ROOT / ".venv" / "bin" / "python").exists():  # the README's .venv, made by make
        pytest.skip("no .venv in this checkout: `make demo` makes it")
    said = _run_shell(demo, ROOT, _shell_env(tmp_path / "demo"))
    assert "24 samples logged to 'otel-trackio-demo'" in said, said
    said = _run_shell(multiprocess, ROOT, _shell_env(tmp_path / "mp"))
    stored = _stored_in(tmp_path / "mp", "otel-trackio-multiprocess")
    assert {run for run, _, _ in stored} == {"mp-1"} and len(set(stored)) == len(stored) > 0
