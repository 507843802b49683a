"""roles/blocks/vllm_service/files/vllm-fleet-wait against small HTTP servers that answer like vLLM (or do not)."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

HELPER = Path(__file__).resolve().parents[2] / "roles" / "blocks" / "vllm_service" / "files" / "vllm-fleet-wait"


class Engine(BaseHTTPRequestHandler):
    """/health, and chat, embeddings and score answers; `broken` answers chat with nothing."""

    broken = False
    dimension = 8
    seen_keys: list[str] = []

    def log_message(self, *args):
        pass

    def _send(self, status, body):
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):
        self._send(200 if self.path == "/health" else 404, {})

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        self.seen_keys.append(self.headers.get("Authorization", ""))
        if self.path == "/v1/chat/completions":
            text = "" if self.broken else f"an answer to {body['messages'][0]['content']}"
            self._send(200, {"choices": [{"message": {"content": text}}]})
        elif self.path == "/v1/embeddings":
            self._send(200, {"data": [{"embedding": [0.0] * self.dimension}]})
        elif self.path == "/v1/score":
            self._send(200, {"data": [{"score": 0.9}, {"score": 0.1}]})
        else:
            self._send(404, {})


@pytest.fixture
def engine():
    server = ThreadingHTTPServer(("127.0.0.1", 0), Engine)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    Engine.broken, Engine.seen_keys = False, []
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()


def wait(spec: dict) -> tuple[int, list[dict]]:
    proc = subprocess.run([sys.executable, str(HELPER)], input=json.dumps(spec), capture_output=True, text=True,
                          timeout=60)
    return proc.returncode, json.loads(proc.stdout)["models"]


def test_every_kind_is_checked_side_by_side(engine, tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"hidden_size": Engine.dimension}))
    models = [{"unit": f"vllm-{kind}", "name": kind, "url": engine, "smoke": kind, "model": kind,
               "config": str(tmp_path / "config.json"), "key": "sk-test" if kind == "chat" else ""}
              for kind in ("chat", "embedding", "score")]
    rc, results = wait({"timeout": 10, "delay": 0.1, "models": models})
    assert rc == 0, results
    assert [(r["name"], r["ready"], r["smoke"], r["error"]) for r in results] == [
        ("chat", True, True, None), ("embedding", True, True, None), ("score", True, True, None)]
    assert "Bearer sk-test" in Engine.seen_keys


def test_a_model_without_a_smoke_kind_is_only_waited_for(engine, tmp_path):
    """The role asks no smoke request of a unit it did not restart: the broken chat answer that
    would fail it is never asked for, and /health still is."""
    Engine.broken = True
    models = [{"unit": "vllm-chat", "name": "chat", "url": engine, "smoke": None, "model": "chat", "key": "sk-x"}]
    rc, results = wait({"timeout": 10, "delay": 0.1, "models": models})
    assert (rc, [(r["ready"], r["smoke"], r["error"]) for r in results]) == (0, [(True, None, None)])
    assert Engine.seen_keys == []
    models[0]["smoke"] = "chat"
    rc, results = wait({"timeout": 10, "delay": 0.1, "models": models})
    assert (rc, results[0]["smoke"]) == (2, False)


def test_a_wrong_answer_fails_with_the_reason(engine, tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"hidden_size": 1024}))
    Engine.broken = True
    rc, results = wait({"timeout": 10, "delay": 0.1, "models": [
        {"unit": "vllm-a", "url": engine, "smoke": "chat", "model": "a"},
        {"unit": "vllm-e", "url": engine, "smoke": "embedding", "model": "e",
         "config": str(tmp_path / "config.json")}]})
    assert rc == 2
    assert results[0]["ready"] is True and results[0]["smoke"] is False
    assert results[0]["error"] == "chat completion 200 with an empty answer"
    assert results[1]["error"] == f"embedding of {Engine.dimension} values, expected 1024"


def test_a_model_that_never_answers_times_out(tmp_path):
    rc, results = wait({"timeout": 1, "delay": 0.2, "models": [
        {"unit": "vllm-none", "url": "http://127.0.0.1:9", "smoke": "chat", "model": "x"}]})
    assert rc == 2
    assert results[0]["ready"] is False
    assert results[0]["error"].startswith("vllm-none did not answer http://127.0.0.1:9/health within 1 s")
