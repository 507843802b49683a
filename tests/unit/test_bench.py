"""`vllm-fleet bench` (vllm_fleet/bench.py) against a streaming OpenAI-style server in this
process: seed 000's conversations sent turn by turn with the history, the figures computed
from what was streamed, the files written; seed 001's evalscope command lines."""

from __future__ import annotations

import csv
import json
import shlex
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
import yaml

from tests.conftest import ROOT
from vllm_fleet import bench, cli

KEY = "sk-bench-test-key-0123"


class FakeEngine:
    """Answers /v1/chat/completions with Server-Sent Events as vLLM does: word-sized deltas,
    then a chunk with the usage when stream_options.include_usage asks, then [DONE].

    Answer n (counted over the server's life) is `answers(n)`: a list of deltas; each delta
    counts as one completion token. `first_delay` seconds pass before the first delta,
    `delay` between deltas. With `key`, requests without `Authorization: Bearer <key>` get 401."""

    def __init__(self, answers, *, key: str | None = None, first_delay: float = 0.0, delay: float = 0.0,
                 reasoning: list[str] | None = None, status: int = 200):
        self.answers, self.key, self.first_delay, self.delay = answers, key, first_delay, delay
        self.reasoning = reasoning or []
        self.status = status
        self.requests: list[dict] = []
        engine = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_POST(self):  # noqa: N802 - http.server's name
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                engine.requests.append({"path": self.path, "body": body,
                                        "authorization": self.headers.get("Authorization")})
                if engine.key and self.headers.get("Authorization") != f"Bearer {engine.key}":
                    return self._plain(401, b'{"error": "Unauthorized"}')
                if engine.status != 200:
                    return self._plain(engine.status, b'{"error": "engine failed"}')
                deltas = engine.answers(len(engine.requests) - 1)
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream; charset=utf-8")
                self.end_headers()
                time.sleep(engine.first_delay)
                self._event({"choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}]})
                for text in engine.reasoning:
                    self._event({"choices": [{"index": 0, "delta": {"reasoning_content": text}}]})
                for i, text in enumerate(deltas):
                    if i:
                        time.sleep(engine.delay)
                    self._event({"object": "chat.completion.chunk",
                                 "choices": [{"index": 0, "delta": {"content": text}, "finish_reason": None}]})
                self._event({"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]})
                if (body.get("stream_options") or {}).get("include_usage"):
                    self._event({"choices": [], "usage": {"prompt_tokens": 7,
                                                          "completion_tokens": len(deltas) + len(engine.reasoning)}})
                self.wfile.write(b"data: [DONE]\n\n")

            def _event(self, data):
                self.wfile.write(b"data: " + json.dumps(data, ensure_ascii=False).encode() + b"\n\n")
                self.wfile.flush()

            def _plain(self, status, body):
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        self.url = f"http://127.0.0.1:{self.port}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()


def answer_deltas(n: int) -> list[str]:
    # Chinese, ASCII, an emoji (one code point, four UTF-8 bytes) and a newline.
    return [f"第{n}个回答：", "新加坡", " is ", "😀", "\nok"]


@pytest.fixture
def engine():
    e = FakeEngine(answer_deltas, first_delay=0.05, delay=0.01)
    yield e
    e.close()


def target(engine, key="", names=("tiny-chat",)):
    return bench.Target(host="node-01", name="tiny-chat", served="tiny-served", url=engine.url, names=list(names),
                        api_key=key)


# ------------------------------------------------------------------ seed 000's data

def test_the_conversations_are_seed_000s():
    convs = bench.seed_conversations()
    assert [len(c["user_questions"]) for c in convs] == [4, 4, 3, 2]
    assert convs[0]["user_questions"][0] == "能给我介绍一下新加坡吗"
    assert convs[1]["user_questions"][3] == "有善终的开国功臣吗"
    assert convs[2]["user_questions"][0] == "今有鸡兔同笼，上有三十五头，下有九十四足，问鸡兔各几何？"
    # The seed's own typography is kept (closing quote first, the stray `>`).
    assert convs[3]["user_questions"][0] == "你知道黄健翔著名的”伟大的意大利左后卫“的事件吗"
    assert "- 讲话像连珠炮，>但会突然冒出超温柔语气\n" in convs[0]["system_prompt"]
    assert convs[0]["system_prompt"] == convs[1]["system_prompt"]
    assert [c["system_prompt"] for c in convs[2:]] == ["You are a helpful assistant."] * 2


def test_the_results_table_is_seed_000s():
    rows = bench.seed_results()
    assert len(rows) == 23
    assert rows[0] == {"model": "unsloth/gpt-oss-20b-BF16", "a100": 80.1, "metax": 52.9, "note": ""}
    assert rows[-1]["model"] == "Qwen/Qwen3-0.6B-GPTQ-Int8" and (rows[-1]["a100"], rows[-1]["metax"]) == (117.4, 95.0)
    assert [r["model"] for r in rows if r["note"]] == ["Qwen/Qwen-14B-Chat-Int8"]


@pytest.mark.parametrize("names, expected", [
    (["qwen3-4b", "Qwen/Qwen3-4B"], "Qwen/Qwen3-4B"),
    (["qwen3-4b", "qwen/qwen3-4b"], "Qwen/Qwen3-4B"),
    # The seed writes this one without its organisation.
    (["x", "Qwen/Qwen2.5-7B-Instruct-GPTQ-Int4"], "Qwen2.5-7B-Instruct-GPTQ-Int4"),
    (["tiny-chat", "/home/models/tiny"], None),
])
def test_a_model_is_matched_to_the_seed_table_by_its_names(names, expected):
    row = bench.seed_match(names)
    assert (row["model"] if row else None) == expected


# ------------------------------------------------------------------ the procedure

def test_every_question_is_sent_with_the_conversation_so_far(engine):
    convs = bench.seed_conversations()
    result = bench.bench_model(target(engine), convs)
    assert result.error is None
    assert len(engine.requests) == 13 == len(result.turns)
    n = 0
    for conv in convs:
        expected = [{"role": "system", "content": conv["system_prompt"]}]
        for question in conv["user_questions"]:
            expected.append({"role": "user", "content": question})
            body = engine.requests[n]["body"]
            assert body["messages"] == expected
            assert body["model"] == "tiny-served" and body["stream"] is True
            assert "max_tokens" not in body  # the seed sets none
            expected.append({"role": "assistant", "content": "".join(answer_deltas(n))})
            n += 1


def test_characters_are_those_streamed_and_tokens_those_of_the_usage(engine):
    result = bench.bench_model(target(engine), bench.seed_conversations()[:2])
    for n, turn in enumerate(result.turns):
        streamed = "".join(answer_deltas(n))
        assert turn.answer == streamed
        assert turn.chars == len(streamed)
        assert turn.output_tokens == len(answer_deltas(n))
        # The first token came after the server's first delay; the last after every delta.
        assert 0.05 <= turn.ttft_s < turn.total_s
        assert turn.total_s >= 0.05 + 0.01 * (len(answer_deltas(n)) - 1)
        assert turn.chars_per_s == pytest.approx(turn.chars / turn.total_s)
    assert result.chars == sum(len("".join(answer_deltas(n))) for n in range(8))
    assert result.output_tokens == 8 * 5
    assert result.chars_per_s == pytest.approx(result.chars / result.total_s)
    assert result.output_tokens_per_s * result.total_s == pytest.approx(result.output_tokens)
    assert result.total_s == pytest.approx(sum(t.total_s for t in result.turns))


def test_reasoning_is_counted_apart_and_not_put_in_the_history():
    e = FakeEngine(answer_deltas, reasoning=["Let me think", " about it."])
    try:
        result = bench.bench_model(target(e), bench.seed_conversations()[:1])
    finally:
        e.close()
    assert [t.reasoning_chars for t in result.turns] == [len("Let me think about it.")] * 4
    assert [t.chars for t in result.turns] == [len("".join(answer_deltas(n))) for n in range(4)]
    assert e.requests[1]["body"]["messages"][2] == {"role": "assistant", "content": "".join(answer_deltas(0))}
    assert result.output_tokens == 4 * (5 + 2)


def test_max_tokens_is_sent_only_when_asked(engine):
    bench.bench_model(target(engine), bench.seed_conversations()[:1], max_tokens=16)
    assert {r["body"]["max_tokens"] for r in engine.requests} == {16}


def test_the_key_is_sent_as_bearer_and_shown_nowhere(tmp_path):
    e = FakeEngine(answer_deltas, key=KEY)
    try:
        result = bench.bench_targets([target(e, key=KEY)], out_dir=tmp_path, conversations=[1], chart_file=False)
        unkeyed = bench.bench_model(target(e), bench.seed_conversations()[:1])
    finally:
        e.close()
    assert result.ok, result.results[0].error
    assert {r["authorization"] for r in e.requests[:4]} == {f"Bearer {KEY}"}
    assert e.requests[4]["authorization"] is None
    assert unkeyed.error is not None and "401" in unkeyed.error
    shown = str(result) + json.dumps(result.to_dict()) + "".join(p.read_text() for p in tmp_path.iterdir())
    assert KEY not in shown
    assert KEY not in repr(result)


def test_a_failing_model_is_reported_and_fails_the_run(tmp_path):
    e = FakeEngine(answer_deltas, status=500)
    try:
        result = bench.bench_targets([target(e)], out_dir=tmp_path, conversations=[1])
    finally:
        e.close()
    assert not result.ok and result.exit_code == bench.EXIT_FAILED
    assert "HTTP 500" in result.results[0].error
    assert "FAILED" in str(result)


def test_conversations_are_chosen_by_their_seed_numbers(engine):
    result = bench.bench_targets([target(engine)], conversations=[4, 3])
    assert result.conversations == [4, 3]
    assert [(t.conversation, t.turn) for t in result.results[0].turns] == [(4, 1), (4, 2), (3, 1), (3, 2), (3, 3)]
    assert engine.requests[0]["body"]["messages"][1]["content"] == bench.seed_conversations()[3]["user_questions"][0]


def test_conversations_out_of_range_are_refused(engine):
    with pytest.raises(bench.BenchError, match="--conversations 5 0: seed 000 has 4 conversations"):
        bench.bench_targets([target(engine)], conversations=[2, 5, 0])
    assert engine.requests == []


# ------------------------------------------------------------------ files

def test_json_csv_and_a_png_chart_are_written(engine, tmp_path):
    seeded = bench.Target(host="node-02", name="qwen3-4b", served="qwen3-4b", url=engine.url,
                          names=["qwen3-4b", "Qwen/Qwen3-4B"])
    result = bench.bench_targets([target(engine), seeded], out_dir=tmp_path, conversations=[1])
    assert result.ok
    assert set(result.files) == {"json", "csv", "png"}
    png = (tmp_path / "bench.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 5000
    data = json.loads((tmp_path / "bench.json").read_text())
    assert [m["model"] for m in data["models"]] == ["tiny-chat", "qwen3-4b"]
    assert data["models"][1]["seed_a100_chars_per_s"] == 171.8
    assert data["models"][1]["seed_metax_chars_per_s"] == 112.3
    assert data["models"][0]["seed_model"] is None
    assert [t["answer"] for t in data["models"][0]["turn_figures"]] == ["".join(answer_deltas(n)) for n in range(4)]
    rows = list(csv.DictReader((tmp_path / "bench.csv").open()))
    assert [r["model"] for r in rows] == ["tiny-chat", "qwen3-4b"]
    assert float(rows[0]["chars_per_s"]) == pytest.approx(result.results[0].chars_per_s, abs=0.05)
    assert int(rows[0]["chars"]) == result.results[0].chars
    table = str(result)
    assert table.splitlines()[0].split()[:4] == ["HOST", "MODEL", "TURNS", "CHARS"]
    assert "171.8" in table


def test_a_model_is_compared_with_the_seed_row_it_is_given(engine, tmp_path):
    result = bench.bench_targets([target(engine)], out_dir=tmp_path, conversations=[3],
                                 seed_models={"tiny-chat": "Qwen/Qwen3-0.6B-GPTQ-Int8"})
    assert (result.results[0].seed_model, result.results[0].seed_a100, result.results[0].seed_metax) == (
        "Qwen/Qwen3-0.6B-GPTQ-Int8", 117.4, 95.0)
    with pytest.raises(bench.BenchError, match="no such model in seed 000's table"):
        bench.bench_targets([target(engine)], seed_models={"tiny-chat": "Qwen/Qwen9"})


# ------------------------------------------------------------------ which models, where

def host_vars(**extra):
    return {"ansible_host": "192.0.2.7", "fleet_accelerator": {"vendor": "cpu", "model": "x86_64", "count": 1},
            "fleet_models": [
                {"name": "tiny-chat", "kind": "chat", "path": "/m/tiny",
                 "source": {"type": "hf", "repo": "Qwen/Qwen3-4B"}, "serve": {"served_model_name": "tiny"}},
                {"name": "tiny-embed", "kind": "embedding", "path": "/m/embed"},
                {"name": "tiny-off", "kind": "chat", "path": "/m/off", "enabled": False},
                {"name": "own-key", "kind": "gptq", "path": "/m/gptq", "secret_env": {"VLLM_API_KEY": "model-key"}}],
            **extra}


def test_chat_models_of_the_hosts_are_the_targets():
    found = bench.targets_from_hostvars({"cpu-01": host_vars(fleet_serve_listen="0.0.0.0", fleet_serve_api_key=KEY)})
    assert [(t.host, t.name, t.served, t.url) for t in found] == [
        ("cpu-01", "tiny-chat", "tiny", "http://192.0.2.7:8000"), ("cpu-01", "own-key", "own-key", "http://192.0.2.7:8002")]
    # The model's own key wins over its group's, as in roles/blocks/vllm_service.
    assert [t.api_key for t in found] == [KEY, "model-key"]
    assert bench.seed_match(found[0].names)["model"] == "Qwen/Qwen3-4B"


def test_extra_vars_and_secrets_win_and_models_can_be_chosen():
    found = bench.targets_from_hostvars({"cpu-01": host_vars(fleet_serve_listen="10.0.0.9")},
                                        extravars={"fleet_serve_base_port": 9100},
                                        secrets={"fleet_serve_api_key": KEY}, only=["tiny"])
    assert [(t.name, t.url, t.api_key) for t in found] == [("tiny-chat", "http://10.0.0.9:9100", KEY)]


def test_a_model_on_a_remote_nodes_loopback_is_reported_unreachable_and_not_asked():
    found = bench.targets_from_hostvars({"cpu-01": host_vars()})  # listen: 127.0.0.1 by default
    assert found[0].unreachable and "listens on 127.0.0.1 only" in found[0].unreachable
    result = bench.bench_targets(found[:1], conversations=[3])
    assert result.results[0].error == found[0].unreachable and result.exit_code == bench.EXIT_FAILED
    local = bench.targets_from_hostvars({"cpu-01": host_vars(ansible_host="127.0.0.1")})
    assert local[0].unreachable is None  # the lab: nodes share the controller's loopback


def test_a_templated_value_is_refused():
    with pytest.raises(bench.BenchError, match="fleet_serve_api_key is a template"):
        bench.targets_from_hostvars({"cpu-01": host_vars(fleet_serve_api_key="{{ vault_key }}")})


@pytest.mark.ansible
def test_the_inventorys_templates_are_rendered_as_a_play_renders_them(tmp_path):
    """One reader (vllm_fleet.inventory): group vars, host vars and templates as ansible-playbook sees them."""
    hv = host_vars(ansible_host="127.0.0.1")
    hv["fleet_serve_base_port"] = "{{ base + 100 }}"
    hv["fleet_models"] = [m for m in hv["fleet_models"] if "secret_env" not in m]
    (tmp_path / "group_vars" / "fleet").mkdir(parents=True)
    (tmp_path / "group_vars" / "fleet" / "ports.yml").write_text("base: 9000\n")
    (tmp_path / "hosts.yml").write_text(yaml.safe_dump({"all": {"children": {"fleet": {"hosts": {"cpu-01": hv}}}}}))
    read = bench.inventory_hostvars(str(tmp_path))
    assert read["cpu-01"]["fleet_serve_base_port"] == 9100
    assert [t.url for t in bench.targets_from_hostvars(read)] == ["http://127.0.0.1:9100"]


@pytest.mark.ansible
def test_the_command_reads_the_inventory_and_benches_its_models(engine, tmp_path, capsys):
    inventory = tmp_path / "inventory"
    (inventory / "group_vars" / "cpu-nodes").mkdir(parents=True)
    (inventory / "hosts.yml").write_text(yaml.safe_dump(
        {"all": {"children": {"fleet": {"children": {"cpu-nodes": {"hosts": {
            "cpu-01": {"ansible_host": "127.0.0.1"}, "cpu-02": {"ansible_host": "127.0.0.2"}}}}}}}}))
    hv = host_vars(fleet_serve_base_port=engine.port)
    hv.pop("ansible_host")
    hv["fleet_models"] = hv["fleet_models"][:2]
    (inventory / "group_vars" / "cpu-nodes" / "models.yml").write_text(yaml.safe_dump(hv))
    out = tmp_path / "out"
    rc = cli.main(["bench", "-i", str(inventory), "-l", "cpu-01", "-o", str(out), "--conversations", "1",
                   "--max-tokens", "4", "--json", "--secrets", str(_secrets(tmp_path))])
    printed = json.loads(capsys.readouterr().out)
    assert rc == 0, printed
    assert [(m["host"], m["model"], m["turns"]) for m in printed["models"]] == [("cpu-01", "tiny-chat", 4)]
    assert {r["authorization"] for r in engine.requests} == {f"Bearer {KEY}"}
    assert (out / "bench.png").read_bytes()[:4] == b"\x89PNG"
    assert printed["models"][0]["seed_model"] == "Qwen/Qwen3-4B"


def _secrets(tmp_path):
    path = tmp_path / "secrets.yml"
    path.write_text(yaml.safe_dump({"fleet_serve_api_key": KEY}))
    return path


def test_an_unreadable_inventory_is_an_invalid_inventory(tmp_path):
    (tmp_path / "hosts.yml").write_text("all: [unclosed\n")
    assert cli.main(["bench", "-i", str(tmp_path / "hosts.yml"), "-o", str(tmp_path / "out")]) == cli.EXIT_INVALID


# ------------------------------------------------------------------ seed 001 through evalscope

def test_perf_is_seed_001s_command_line():
    t = bench.Target(host="h", name="gpt-oss-120b", served="gpt-oss-120b-bf16", url="http://10.0.0.5:8000")
    argv = bench.evalscope_perf_argv(t, "/models/gpt-oss-120b-BF16")
    # Seed 001's `evalscope perf` script, argument for argument, with this model's URL.
    assert argv == ["evalscope", "perf", "--parallel", "417", "833", "--number", "1000", "2000",
                    "--model", "gpt-oss-120b-bf16", "--url", "http://10.0.0.5:8000/v1/completions", "--api", "openai",
                    "--dataset", "random", "--max-tokens", "1024", "--min-tokens", "1024", "--prefix-length", "0",
                    "--min-prompt-length", "1024", "--max-prompt-length", "1024", "--log-every-n-query", "20",
                    "--tokenizer-path", "/models/gpt-oss-120b-BF16", "--extra-args", '{"ignore_eos": true}']
    small = bench.evalscope_perf_argv(t, "/tok", overrides={"parallel": [1], "number": [2]}, outputs_dir="/o")
    assert small[2:7] == ["--parallel", "1", "--number", "2", "--model"]
    assert small[-2:] == ["--outputs-dir", "/o"]


def test_accuracy_reads_the_dataset_from_its_path_and_the_key_is_masked():
    t = bench.Target(host="h", name="m", served="m-served", url="http://[fd00::5]:8000", api_key=KEY)
    argv = bench.evalscope_accuracy_argv(t, "/data/mmlu", limit=5)
    assert argv[:8] == ["evalscope", "eval", "--model", "m-served", "--api-url", "http://[fd00::5]:8000/v1",
                        "--eval-type", "openai_api"]
    assert json.loads(argv[argv.index("--dataset-args") + 1]) == {"mmlu": {"local_path": "/data/mmlu"}}
    assert argv[argv.index("--eval-batch-size") + 1] == "256"
    assert argv[argv.index("--generation-config") + 1] == "timeout=1200"
    assert argv[argv.index("--limit") + 1] == "5"
    assert argv[-2:] == ["--api-key", KEY]
    assert KEY not in bench.masked(argv, t) and bench.MASK in bench.masked(argv, t)


def test_evalscope_needs_its_local_inputs_and_a_dry_run_runs_nothing(tmp_path):
    t = bench.Target(host="h", name="m", served="m", url="http://127.0.0.1:1", api_key=KEY)
    with pytest.raises(bench.BenchError, match="--tokenizer-path"):
        bench.run_evalscope([t], checks=["perf"], out_dir=tmp_path, dry_run=True)
    with pytest.raises(bench.BenchError, match="--dataset"):
        bench.run_evalscope([t], checks=["accuracy"], out_dir=tmp_path, dry_run=True)
    rows = bench.run_evalscope([t], checks=["perf", "accuracy"], out_dir=tmp_path, tokenizer_path="/tok",
                               dataset_path="/mmlu", dry_run=True)
    assert [(r["check"], r["rc"]) for r in rows] == [("perf", None), ("accuracy", None)]
    assert all(KEY not in r["command"] for r in rows)
    assert not (tmp_path / "evalscope").exists()
    # A run reads the set: one without the dataset card evalscope needs is refused before it starts.
    with pytest.raises(bench.BenchError, match="--dataset .*: no dataset card \\(README.md\\)"):
        bench.run_evalscope([t], checks=["accuracy"], out_dir=tmp_path, dataset_path=str(tmp_path))
    with pytest.raises(bench.BenchError, match="--dataset /nope: not a directory"):
        bench.run_evalscope([t], checks=["accuracy"], out_dir=tmp_path, dataset_path="/nope")
    assert bench.accuracy_set_problem(ROOT / "lab" / "fixtures" / "datasets" / "mmlu-tiny") is None


@pytest.mark.ansible
def test_the_command_prints_seed_001s_command_lines_with_overrides(engine, tmp_path, capsys):
    inventory = tmp_path / "hosts.yml"
    # The key as a user gives it (a secret written in clear in an inventory file is refused).
    hv = host_vars(fleet_serve_base_port=engine.port, ansible_host="127.0.0.1")
    hv["fleet_models"] = [m for m in hv["fleet_models"] if "secret_env" not in m]
    inventory.write_text(yaml.safe_dump({"all": {"hosts": {"cpu-01": hv}}}))
    rc = cli.main(["bench", "-i", str(inventory), "--model", "tiny-chat", "--evalscope", "perf", "--dry-run", "--json",
                   "--secrets", str(_secrets(tmp_path)),
                   "--tokenizer-path", "/tok", "--parallel", "1", "--number", "2", "--prompt-length", "64",
                   "--output-tokens", "8", "-o", str(tmp_path / "out")])
    rows = json.loads(capsys.readouterr().out)
    assert rc == 0
    assert [(r["model"], r["check"], r["rc"]) for r in rows] == [("tiny-chat", "perf", None)]
    words = shlex.split(rows[0]["command"])
    for flag, value in (("--parallel", "1"), ("--number", "2"), ("--min-prompt-length", "64"),
                        ("--max-prompt-length", "64"), ("--min-tokens", "8"), ("--max-tokens", "8"),
                        ("--model", "tiny"), ("--url", f"http://127.0.0.1:{engine.port}/v1/completions"),
                        ("--api-key", bench.MASK)):
        assert words[words.index(flag) + 1] == value, flag
    assert KEY not in rows[0]["command"]
    assert engine.requests == []


def test_evalscopes_own_parsers_read_the_command_lines_as_the_seed_wrote_them():
    """Only where evalscope is installed (vllm-fleet[evalscope]; not in the test setup)."""
    import argparse

    pytest.importorskip("evalscope")
    from evalscope import arguments as eval_arguments
    from evalscope.perf import arguments as perf_arguments

    t = bench.Target(host="h", name="m", served="gpt-oss-120b-bf16", url="http://10.0.0.5:8000", api_key=KEY)
    perf, acc = argparse.ArgumentParser(), argparse.ArgumentParser()
    perf_arguments.add_argument(perf)
    eval_arguments.add_argument(acc)
    p = perf.parse_args(bench.evalscope_perf_argv(t, "/tok")[2:])
    assert (p.parallel, p.number, p.url, p.dataset, p.max_tokens, p.min_tokens, p.extra_args, p.api_key) == (
        [417, 833], [1000, 2000], "http://10.0.0.5:8000/v1/completions", "random", [1024], 1024,
        {"ignore_eos": True}, KEY)
    a = acc.parse_args(bench.evalscope_accuracy_argv(t, "/data/mmlu")[2:])
    assert (a.eval_type, a.datasets, a.dataset_args, a.eval_batch_size, a.generation_config) == (
        "openai_api", ["mmlu"], {"mmlu": {"local_path": "/data/mmlu"}}, 256, {"timeout": 1200})
