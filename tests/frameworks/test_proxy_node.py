"""The official ``openai`` Node package (7.55.0, from the committed lockfile in ``tests/js``) as an
agent with no OpenTelemetry, through ``otel-trackio serve --upstream`` to the loopback fake
OpenAI server: 2 steps x 8 concurrent samples, whole and streamed; each sample's Trace read back
from storage holds the conversation it sent, its two model calls and its reward, once."""

from __future__ import annotations

import json
import shutil
from collections import Counter

import pytest
from conftest import npm_ci, read_traces, run_node_script
from fake_openai_server import MODEL, FakeOpenAIServer
from test_proxy import check_sample

from otel_trackio.receiver import OTLPReceiver

pytestmark = pytest.mark.real_packages  # `make test-packages` (CI runs it too)


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
def test_the_node_openai_client_through_the_proxy(project, stream):
    node = shutil.which("node")
    if node is None:
        pytest.skip("node is not installed")
    npm_ci()
    with FakeOpenAIServer() as upstream:
        receiver = OTLPReceiver(
            project, "node", port=0, summary_interval=0, upstream=upstream.base_url
        ).start()
        try:
            plan = {"proxy": receiver.url, "model": MODEL, "steps": 2, "samples": 8}
            result = run_node_script(node, "openai_agent.mjs", {**plan, "stream": stream})
        finally:
            receiver.stop()
    assert result.returncode == 0, result.stderr[-4000:]
    said = [json.loads(line) for line in result.stdout.splitlines()]
    assert all(line["answer"] == "answer to: 4" for line in said) and len(said) == 16
    traces = read_traces(project, "node")
    keys = Counter((t["step"], t["metadata"]["sample_index"]) for t in traces)
    assert keys == Counter((s, i) for s in range(2) for i in range(8))
    for trace in traces:
        check_sample(trace, reward=float(trace["metadata"]["sample_index"]))
