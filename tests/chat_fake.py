"""A stand-in for what the router serves the web chat page (roles/services/router/files/chat/), standard
library only, on 127.0.0.1: the page's files and a config.json under PREFIX, each model's
`/v1/models` and streaming `/v1/chat/completions` (vLLM's Server-Sent Events, checked against a
team key), and the Prometheus text the fleet panel reads (a replica's vLLM metrics, a node's
vllm_fleet_accelerator_* gauges).

Used by tests/unit/test_chat_page.py and scripts/chat-page-screenshot. Attributes are read per
request, so a test changes the answer, delays or max_model_len between requests."""

from __future__ import annotations

import json
import math
import re
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

PAGE_DIR = Path(__file__).resolve().parent.parent / "roles" / "services" / "router" / "files" / "chat"
PAGE_FILES = {"index.html": "text/html; charset=utf-8", "chat.js": "text/javascript; charset=utf-8",
              "chat.css": "text/css; charset=utf-8"}
PREFIX = "/ui/"  # the page is not at the root: every path it calls is relative
MODEL = "qwen3-8b"
VERSION = "Qwen/Qwen3-8B@9c925d64d72725edaf899c6cb9c377fd0709d9c5"
TEAM_KEY = "sk-team-test-0123456789"
GIB = 1024 ** 3

# The deltas of an answer: a word (or up to four CJK characters) with the space before it, or a
# punctuation mark; joined they give the answer back exactly.
DELTA = re.compile(r"\s*\w{1,4}|\s*[^\w\s]|\s+")


class FakeFleet:
    def __init__(self, *, key: str = TEAM_KEY, answer: str = "Hello from the fleet.", reasoning: str = "",
                 delay: float = 0.02, first_delay: float = 0.05, max_model_len: int | None = 32768,
                 node: str = "nvidia-01"):
        self.key, self.answer, self.reasoning = key, answer, reasoning
        self.delay, self.first_delay, self.max_model_len, self.node = delay, first_delay, max_model_len, node
        self.status: int | None = None  # answer chat completions with this error status instead
        self.error_message = "engine failed"  # and this message
        self.refresh_seconds = 5  # config.json's fleet_refresh_seconds
        self.chat_requests: list[dict] = []  # bodies of /v1/chat/completions
        self.disconnects: list[int] = []  # deltas written when a client closed mid-stream
        self.finished = 0  # streams written to the end
        self.paths: list[str] = []  # every request's path, in order
        self.generated = 123456  # vllm:generation_tokens_total
        self.lock = threading.Lock()
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def origin(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    @property
    def url(self) -> str:
        return self.origin + PREFIX

    def config(self) -> dict:
        return {
            "title": "vllm-fleet",
            "currency": "CNY",
            "fleet_refresh_seconds": self.refresh_seconds,
            "presets": ["写一封辞职信", "生成Python函数注释"],
            "models": [{
                "name": MODEL, "version": VERSION, "path": f"models/{MODEL}",
                "price_input_per_1k": 0.002, "price_output_per_1k": 0.006,
                "replicas": [
                    {"node": "nvidia-01", "metrics": f"fleet/nvidia-01/{MODEL}/metrics",
                     "node_metrics": "fleet/nvidia-01/node/metrics"},
                    # No engine answers there: the panel shows it down.
                    {"node": "nvidia-02", "metrics": f"fleet/nvidia-02/{MODEL}/metrics",
                     "node_metrics": "fleet/nvidia-02/node/metrics"},
                ],
            }],
        }

    def replica_metrics(self) -> str:
        return "\n".join([
            "# HELP vllm:num_requests_running Number of requests in model execution batches.",
            "# TYPE vllm:num_requests_running gauge",
            f'vllm:num_requests_running{{engine="0",model_name="{MODEL}"}} 1.0',
            "# TYPE vllm:num_requests_waiting gauge",
            f'vllm:num_requests_waiting{{engine="0",model_name="{MODEL}"}} 2.0',
            "# TYPE vllm:kv_cache_usage_perc gauge",
            f'vllm:kv_cache_usage_perc{{engine="0",model_name="{MODEL}"}} 0.125',
            "# TYPE vllm:generation_tokens_total counter",
            f'vllm:generation_tokens_total{{engine="0",model_name="{MODEL}"}} {float(self.generated)}',
            # A label value with an escaped quote, a comma and a brace; a NaN value.
            'vllm:cache_config_info{block_size="16",note="say \\"hi\\", {a,b}"} NaN',
            "",
        ])

    @staticmethod
    def node_metrics() -> str:
        return "\n".join([
            "# HELP vllm_fleet_accelerator_utilization_percent Accelerator utilisation.",
            "# TYPE vllm_fleet_accelerator_utilization_percent gauge",
            'vllm_fleet_accelerator_utilization_percent{index="0",vendor="nvidia"} 73',
            'vllm_fleet_accelerator_utilization_percent{index="1",vendor="nvidia"} NaN',
            'vllm_fleet_accelerator_memory_used_bytes{index="0",vendor="nvidia"} ' + f"{20 * GIB:.6e}",
            'vllm_fleet_accelerator_memory_total_bytes{index="0",vendor="nvidia"} ' + f"{80 * GIB:.6e}",
            'vllm_fleet_accelerator_memory_used_bytes{index="1",vendor="nvidia"} ' + f"{GIB:.6e}",
            'vllm_fleet_accelerator_memory_total_bytes{index="1",vendor="nvidia"} ' + f"{80 * GIB:.6e}",
            "",
        ])

    def start(self) -> FakeFleet:
        self.thread.start()
        return self

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def __enter__(self) -> FakeFleet:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    def _handler(self):
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_GET(self):  # noqa: N802 - http.server's name
                path = self.path.split("?", 1)[0]
                with fake.lock:
                    fake.paths.append(path)
                if path == PREFIX.rstrip("/"):
                    self.send_response(301)
                    self.send_header("Location", PREFIX)
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                if not path.startswith(PREFIX):
                    return self._send(404, b"not found", "text/plain")
                rel = path[len(PREFIX):]
                if rel in ("", "index.html", "chat.js", "chat.css"):
                    name = rel or "index.html"
                    return self._send(200, (PAGE_DIR / name).read_bytes(), PAGE_FILES[name])
                if rel == "config.json":
                    return self._json(200, fake.config())
                if rel == f"models/{MODEL}/v1/models":
                    if not self._authorized():
                        return self._json(401, {"error": "Unauthorized"})
                    entry = {"id": MODEL, "object": "model", "owned_by": "vllm", "root": VERSION.split("@")[0]}
                    if fake.max_model_len:
                        entry["max_model_len"] = fake.max_model_len
                    return self._json(200, {"object": "list", "data": [entry]})
                if rel == f"fleet/nvidia-01/{MODEL}/metrics":
                    return self._send(200, fake.replica_metrics().encode(), "text/plain; version=0.0.4")
                if rel == "fleet/nvidia-01/node/metrics":
                    return self._send(200, fake.node_metrics().encode(), "text/plain; version=0.0.4")
                if rel.startswith("fleet/"):
                    return self._send(503, b"no server is available to handle this request", "text/plain")
                return self._send(404, b"not found", "text/plain")

            def do_POST(self):  # noqa: N802
                path = self.path.split("?", 1)[0]
                with fake.lock:
                    fake.paths.append(path)
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"{}")
                if path != f"{PREFIX}models/{MODEL}/v1/chat/completions":
                    return self._send(404, b"not found", "text/plain")
                with fake.lock:
                    fake.chat_requests.append(body)
                if not self._authorized():
                    return self._json(401, {"error": "Unauthorized"})
                if fake.status:
                    return self._json(fake.status, {"error": {"message": fake.error_message, "code": fake.status}})
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream; charset=utf-8")
                self.send_header("Cache-Control", "no-cache")
                self.send_header("X-Vllm-Fleet-Node", fake.node)
                self.end_headers()  # HTTP/1.0: the body ends when the connection closes
                reasoning, answer = DELTA.findall(fake.reasoning), DELTA.findall(fake.answer)
                events = [{"delta": {"role": "assistant", "content": ""}}]
                events += [{"delta": {"reasoning_content": d}} for d in reasoning]
                events += [{"delta": {"content": d}} for d in answer]
                written = 0
                try:
                    time.sleep(fake.first_delay)
                    for k, choice in enumerate(events):
                        if k > 1:
                            time.sleep(fake.delay)
                        self._event({"id": "chatcmpl-fake", "object": "chat.completion.chunk", "model": MODEL,
                                     "choices": [{"index": 0, "finish_reason": None, **choice}]})
                        written = k
                        with fake.lock:
                            fake.generated += 1
                    self._event({"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]})
                    if (body.get("stream_options") or {}).get("include_usage"):
                        prompt = sum(math.ceil(len(m.get("content", "")) / 3) + 4 for m in body.get("messages", []))
                        completion = len(reasoning) + len(answer)
                        self._event({"choices": [], "usage": {"prompt_tokens": prompt, "completion_tokens": completion,
                                                              "total_tokens": prompt + completion}})
                    self.wfile.write(b"data: [DONE]\n\n")
                    with fake.lock:
                        fake.finished += 1
                except (BrokenPipeError, ConnectionResetError, ConnectionAbortedError):
                    # The client went away (Stop): vLLM aborts the request here; so do we.
                    with fake.lock:
                        fake.disconnects.append(written)
                    self.close_connection = True

            def _authorized(self) -> bool:
                return self.headers.get("Authorization") == f"Bearer {fake.key}"

            def _event(self, data: dict) -> None:
                self.wfile.write(b"data: " + json.dumps(data, ensure_ascii=False).encode() + b"\n\n")
                self.wfile.flush()

            def _json(self, status: int, data: dict) -> None:
                self._send(status, json.dumps(data).encode(), "application/json")

            def _send(self, status: int, body: bytes, ctype: str) -> None:
                self.send_response(status)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(body)))
                self.send_header("Cache-Control", "no-store")
                self.end_headers()
                self.wfile.write(body)

        return Handler
