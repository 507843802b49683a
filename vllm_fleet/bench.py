"""`vllm-fleet bench`: seed 000's multi-turn chat test against every chat model of the fleet,
and seed 001's evalscope checks (`--evalscope`).

Seed 000 (the MetaX C500 README) describes its test in one sentence and two blocks of data;
it has no code. Line numbers below are those of the seed file
(/work/shared/seeds/000_6a8afc83f9bcad37.txt):

- line 8: "在相同模型和输入条件下，测试平均输出速度（单位：字每秒）：我们采用相同的prompt对模型的
  chat/completion接口测试多轮对话，测试数据如下：" - the same prompts for every model, the
  chat/completions API, multi-turn conversations, the mean output speed in characters per second;
- lines 10-44: the four conversations (a system prompt and the user's questions), shipped
  verbatim as data/bench/seed000_conversations.json;
- lines 48-71 (under the heading 模型测试结果): the results table (model, A100 and MetaX C500
  characters per second, a remark), shipped verbatim as data/bench/seed000_results.tsv.

Where the seed says nothing, the choice made here is named where it is made (`run_turn`,
`ModelResult`): the sentence gives the unit and the procedure, not the formula.
"""

from __future__ import annotations

import csv
import io
import ipaddress
import json
import os
import shlex
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from vllm_fleet import inventory as inventory_reader
from vllm_fleet import models as fleet_models
from vllm_fleet import router
from vllm_fleet.exit_codes import EXIT_ERROR, EXIT_FAILED, EXIT_OK
from vllm_fleet.exit_codes import EXIT_INVALID as EXIT_INVALID  # re-exported: bench.EXIT_INVALID
from vllm_fleet.secrets import MASK, mask_text, scrub_bytes
from vllm_fleet.validation.files import file_problems as inventory_syntax_problems

BENCH_DATA = fleet_models.DATA_DIR / "bench"
CONVERSATIONS_FILE = BENCH_DATA / "seed000_conversations.json"
SEED_RESULTS_FILE = BENCH_DATA / "seed000_results.tsv"

#: Seed 001's `evalscope perf` command (its "性能验证脚本"), argument for argument. The
#: tokenizer path is the seed's local model directory: here it must be given (--tokenizer-path).
PERF_PRESET: dict[str, Any] = {
    "parallel": [417, 833],
    "number": [1000, 2000],
    "api": "openai",
    "dataset": "random",
    "max_tokens": 1024,
    "min_tokens": 1024,
    "prefix_length": 0,
    "min_prompt_length": 1024,
    "max_prompt_length": 1024,
    "log_every_n_query": 20,
    "extra_args": {"ignore_eos": True},
}
#: Seed 001's accuracy script: TaskConfig(eval_type='server', datasets=['mmlu'],
#: eval_batch_size=256, timeout=1200). evalscope 1.x calls 'server' 'openai_api' and takes
#: the timeout in --generation-config.
ACCURACY_PRESET: dict[str, Any] = {"eval_type": "openai_api", "dataset": "mmlu", "eval_batch_size": 256,
                                   "timeout": 1200}
#: What seed 001 measured for gpt-oss-120b on MMLU, and what the paper says.
ACCURACY_REFERENCE = {"model": "gpt-oss-120b", "dataset": "mmlu", "mean_acc": 0.8755, "paper": 0.88}


class BenchError(Exception):
    """The options or a model's answer do not allow a bench run to go on."""


class InventoryError(BenchError):
    """Ansible could not read the inventory (nothing was sent)."""


# ------------------------------------------------------------------ seed 000's data

def seed_conversations() -> list[dict]:
    """Seed 000's four conversations (lines 10-44): [{system_prompt, user_questions}]."""
    return json.loads(CONVERSATIONS_FILE.read_text(encoding="utf-8"))


def seed_results() -> list[dict]:
    """Seed 000's results table (lines 48-71): [{model, a100, metax, note}], in the seed's order."""
    rows = []
    lines = SEED_RESULTS_FILE.read_text(encoding="utf-8").splitlines()
    for line in lines[1:]:  # line 48 is the header: 模型名称 A100出字速度(字/秒) 沐曦卡出字速度(字/秒) 备注
        cells = line.split("\t")
        rows.append({"model": cells[0], "a100": float(cells[1]), "metax": float(cells[2]),
                     "note": cells[3] if len(cells) > 3 else ""})
    return rows


def seed_match(names: list[str]) -> dict | None:
    """The seed table's row for a model known by any of `names` (served name, inventory name,
    source repository): the same name, else the same last path part ("Qwen2.5-7B-Instruct-GPTQ-Int4"
    is written without its organisation in the seed), case-insensitive."""
    table = seed_results()
    wanted = [n.lower() for n in names if n]
    for row in table:
        if row["model"].lower() in wanted:
            return row
    tails = {n.rsplit("/", 1)[-1] for n in wanted}
    for row in table:
        if row["model"].lower().rsplit("/", 1)[-1] in tails:
            return row
    return None


# ------------------------------------------------------------------ what to ask

@dataclass
class Target:
    """One chat model of one node, as the controller reaches it."""

    host: str
    name: str
    served: str
    url: str
    names: list[str] = field(default_factory=list)
    api_key: str = field(default="", repr=False)
    #: Why the controller cannot reach the model (it listens on the node's loopback only).
    unreachable: str | None = None


def inventory_hostvars(inventory: str, limit: str | None = None,
                       keys: tuple[str, ...] = inventory_reader.HOST_KEYS) -> dict[str, dict]:
    """Each selected host's variables the targets are resolved from, rendered as a play
    sees them (vllm_fleet.inventory, Ansible's own reader, vault and all, without a playbook run)."""
    if not Path(inventory).exists():
        raise InventoryError(f"inventory {inventory} does not exist")
    syntax = inventory_syntax_problems(inventory)
    if syntax:
        raise InventoryError("; ".join(syntax))
    try:
        return inventory_reader.host_vars(inventory, limit, pattern="all", keys=keys)
    except inventory_reader.InventoryError as exc:
        raise InventoryError(str(exc)) from None


def base_url(address: str, port: int) -> str:
    """http://address:port, brackets around an IPv6 address."""
    try:
        return fleet_models.local_url(str(ipaddress.ip_address(address)), port)
    except ValueError:
        return f"http://{address}:{port}"


def _needs_key(model: dict) -> bool:
    """Whether the engine of a resolved model refuses requests without an API key: validation
    demands one of a model beyond loopback that is not declared unauthenticated."""
    try:
        loopback = ipaddress.ip_address(str(model.get("listen"))).is_loopback
    except ValueError:
        loopback = False
    return not loopback and not model.get("unauthenticated")


def targets_from_hostvars(hostvars: dict[str, dict], extravars: dict | None = None,
                          secrets: dict | None = None, only: list[str] | None = None) -> list[Target]:
    """The chat models of the hosts (the kinds whose smoke request is a chat completion),
    resolved as the roles resolve them (models.resolve_models through router.served_models),
    reached where router.node_address says. Extra variables and secrets win over the
    inventory, as -e does in a playbook run."""
    out = []
    for host in sorted(hostvars):
        hv = {**hostvars[host], **(extravars or {}), **(secrets or {})}
        for var in ("fleet_models", "fleet_serve_api_key", "fleet_serve_listen", "ansible_host",
                    "fleet_serve_base_port"):
            if "{{" in json.dumps(hv.get(var), default=str):
                raise BenchError(f"host {host}: {var} is a template given with -e or --secrets, which bench does "
                                 "not render (the inventory's are rendered); give its value")
        for model in router.served_models(hv, host):
            if model.get("smoke") != "chat":
                continue
            if only and model["name"] not in only and not set(model["served_model_name"]) & set(only):
                continue
            source = model.get("source") if isinstance(model.get("source"), dict) else {}
            names = [*model["served_model_name"], model["name"], str(source.get("repo") or ""),
                     str(model.get("path") or "")]
            # The controller asks as a router would, from its own loopback.
            unreachable = (f"it listens on {model['listen']} only, on a node the controller reaches at "
                           f"{hv.get('ansible_host') or host}; give it a listen address (fleet_serve_listen "
                           "or the model's listen)") if router.unreachable_from("127.0.0.1", host, hv, model) else None
            key = fleet_models.host_engine_api_key(hv, model["name"])
            if not key and _needs_key(model):
                # Without it every request would be refused (401), and a --dry-run would print
                # command lines without --api-key: neither is the run asked for.
                raise BenchError(f"host {host}: {model['name']} listens on {model['listen']} behind an API key "
                                 "(fleet_serve_api_key or its secret_env.VLLM_API_KEY) that this inventory does not "
                                 "hold in clear: give it with --secrets FILE")
            out.append(Target(host=host, name=model["name"], served=model["served_model_name"][0],
                              url=base_url(router.node_address(host, hv, model), model["port"]),
                              names=[n for n in names if n], api_key=key, unreachable=unreachable))
    return out


# ------------------------------------------------------------------ one turn, one model

@dataclass
class Turn:
    conversation: int
    turn: int
    question: str
    answer: str = ""
    chars: int = 0
    reasoning_chars: int = 0
    output_tokens: int | None = None
    ttft_s: float | None = None
    total_s: float = 0.0
    chars_per_s: float | None = None


def stream_chat(session, url: str, payload: dict, headers: dict, timeout: float):
    """POST a streamed chat completion; yield each event's JSON as it arrives.

    vLLM sends Server-Sent Events, one `data: {json}` line per chunk and `data: [DONE]`
    at the end; reading those lines is all the framing needs, so no SSE library."""
    with session.post(f"{url}/v1/chat/completions", json=payload, headers=headers, stream=True,
                      timeout=timeout) as response:
        if response.status_code != 200:
            raise BenchError(f"HTTP {response.status_code} from {url}/v1/chat/completions: {response.text[:300]}")
        for line in response.iter_lines(decode_unicode=False):
            if not line.startswith(b"data:"):
                continue
            data = line[5:].strip()
            if data == b"[DONE]":
                return
            yield json.loads(data)


def run_turn(session, target: Target, messages: list[dict], *, max_tokens: int | None, timeout: float,
             clock: Callable[[], float] = time.perf_counter) -> tuple[str, dict]:
    """One request: the answer's text and its figures.

    Seed line 8 asks the chat/completions API; streamed here so that the first token's time
    is seen. The time is the request's, from sending it to the stream's end (the speed a
    user of the API sees). Characters are those of the answer (`delta.content`), counted as
    Python counts them (code points: one per Chinese character, as 字 counts them; spaces
    and punctuation count too). Reasoning text (`reasoning_content`/`reasoning` of reasoning
    models) is counted apart and is not part of the answer; its first token still ends the
    time to first token. Output tokens come from the usage vLLM adds to the last chunk when
    asked (stream_options.include_usage). The seed sets no sampling parameter and no
    max_tokens: none is sent unless --max-tokens says so."""
    payload: dict[str, Any] = {"model": target.served, "messages": messages, "stream": True,
                               "stream_options": {"include_usage": True}}
    if max_tokens:
        payload["max_tokens"] = max_tokens
    headers = {"Authorization": f"Bearer {target.api_key}"} if target.api_key else {}
    parts: list[str] = []
    reasoning = 0
    usage = None
    first = None
    started = clock()
    for chunk in stream_chat(session, target.url, payload, headers, timeout):
        if isinstance(chunk.get("usage"), dict) and chunk["usage"].get("completion_tokens") is not None:
            usage = int(chunk["usage"]["completion_tokens"])
        for choice in chunk.get("choices") or []:
            delta = choice.get("delta") or {}
            text = delta.get("content") or ""
            think = delta.get("reasoning_content") or delta.get("reasoning") or ""
            if (text or think) and first is None:
                first = clock()
            parts.append(text)
            reasoning += len(think)
    ended = clock()
    answer = "".join(parts)
    total = ended - started
    return answer, {"chars": len(answer), "reasoning_chars": reasoning, "output_tokens": usage,
                    "ttft_s": (first - started) if first is not None else None, "total_s": total,
                    "chars_per_s": len(answer) / total if total > 0 else None}


@dataclass
class ModelResult:
    """A model's figures over every turn it answered.

    chars_per_s, the seed's measure (line 8: 平均输出速度, 字每秒): all the answers'
    characters over all their requests' time, i.e. the mean speed of the whole test, each
    turn weighing as much as its time (the per-turn speeds are in `turns`).
    output_tokens_per_s: all the usage's completion tokens over the same time.
    ttft_s: the mean of the turns' times to first token. total_s: the test's time."""

    host: str
    model: str
    served: str
    url: str
    turns: list[Turn] = field(default_factory=list)
    error: str | None = None
    seed_model: str | None = None
    seed_a100: float | None = None
    seed_metax: float | None = None

    @property
    def chars(self) -> int:
        return sum(t.chars for t in self.turns)

    @property
    def total_s(self) -> float:
        return sum(t.total_s for t in self.turns)

    @property
    def output_tokens(self) -> int | None:
        counts = [t.output_tokens for t in self.turns]
        return None if not counts or None in counts else sum(counts)  # type: ignore[arg-type]

    @property
    def chars_per_s(self) -> float | None:
        return self.chars / self.total_s if self.turns and self.total_s > 0 else None

    @property
    def output_tokens_per_s(self) -> float | None:
        tokens = self.output_tokens
        return tokens / self.total_s if tokens is not None and self.total_s > 0 else None

    @property
    def ttft_s(self) -> float | None:
        values = [t.ttft_s for t in self.turns if t.ttft_s is not None]
        return sum(values) / len(values) if values else None

    def summary(self) -> dict:
        return {"host": self.host, "model": self.model, "served": self.served, "url": self.url,
                "turns": len(self.turns), "chars": self.chars, "output_tokens": self.output_tokens,
                "chars_per_s": _round(self.chars_per_s), "output_tokens_per_s": _round(self.output_tokens_per_s),
                "ttft_s": _round(self.ttft_s, 3), "total_s": _round(self.total_s, 3),
                "seed_model": self.seed_model, "seed_a100_chars_per_s": self.seed_a100,
                "seed_metax_chars_per_s": self.seed_metax, "error": self.error}

    def to_dict(self) -> dict:
        return {**self.summary(), "turn_figures": [asdict(t) for t in self.turns]}


def _round(value: float | None, digits: int = 1) -> float | None:
    return None if value is None else round(value, digits)


def bench_model(target: Target, convs: list[dict], *, max_tokens: int | None = None, timeout: float = 600.0,
                session=None, seed_model: str | None = None,
                log: Callable[[str], None] = lambda m: None) -> ModelResult:
    """Seed 000's procedure for one model: each conversation starts from its system prompt;
    each question is sent with the conversation so far, and the model's answer joins it
    as the assistant's turn before the next question (line 8: 多轮对话, multi-turn). Only
    the answer joins the history, not the reasoning text (vLLM's advice for reasoning models).
    `seed_model` names the row of seed 000's table to compare with, when the model's own
    names do not find it."""
    import requests  # noqa: PLC0415 - the optional extra vllm-fleet[bench]

    seed = seed_match([seed_model] if seed_model else target.names)
    if seed_model and seed is None:
        raise BenchError(f"--seed-model {target.name}={seed_model}: no such model in seed 000's table")
    result = ModelResult(host=target.host, model=target.name, served=target.served, url=target.url,
                         seed_model=seed["model"] if seed else None, seed_a100=seed["a100"] if seed else None,
                         seed_metax=seed["metax"] if seed else None)
    if target.unreachable:
        result.error = target.unreachable
        return result
    own_session = session is None
    if own_session:
        session = requests.Session()
        # Only what bench sets goes to the nodes: no proxy, no ~/.netrc credentials from the environment.
        session.trust_env = False
    try:
        for ci, conv in enumerate(convs):
            number = conv.get("number", ci + 1)  # the seed's numbering, from 1
            messages = [{"role": "system", "content": conv["system_prompt"]}]
            for ti, question in enumerate(conv["user_questions"]):
                messages.append({"role": "user", "content": question})
                answer, figures = run_turn(session, target, messages, max_tokens=max_tokens, timeout=timeout)
                result.turns.append(Turn(conversation=number, turn=ti + 1, question=question, answer=answer, **figures))
                messages.append({"role": "assistant", "content": answer})
                log(f"{target.host} {target.name}: conversation {number} turn {ti + 1}: {figures['chars']} chars "
                    f"in {figures['total_s']:.2f} s")
    except (requests.RequestException, BenchError, ValueError) as exc:
        result.error = mask_text(str(exc), [target.api_key]) if target.api_key else str(exc)
    finally:
        if own_session:
            session.close()
    return result


# ------------------------------------------------------------------ results

COLUMNS = ["host", "model", "turns", "chars", "chars_per_s", "output_tokens", "output_tokens_per_s", "ttft_s",
           "total_s", "seed_model", "seed_a100_chars_per_s", "seed_metax_chars_per_s", "error"]
HEADINGS = {"chars_per_s": "CHARS/S", "output_tokens_per_s": "TOKENS/S", "ttft_s": "TTFT S", "total_s": "TOTAL S",
            "output_tokens": "TOKENS", "seed_a100_chars_per_s": "SEED A100", "seed_metax_chars_per_s": "SEED METAX",
            "seed_model": "SEED MODEL"}


@dataclass
class BenchResult:
    results: list[ModelResult]
    out_dir: str = ""
    files: dict[str, str] = field(default_factory=dict)
    conversations: list[int] = field(default_factory=list)
    max_tokens: int | None = None

    @property
    def ok(self) -> bool:
        return bool(self.results) and all(r.error is None for r in self.results)

    @property
    def exit_code(self) -> int:
        """0 every model answered; 2 a model failed; 1 no chat model was selected."""
        if not self.results:
            return EXIT_ERROR
        return EXIT_OK if self.ok else EXIT_FAILED

    def to_dict(self) -> dict:
        return {"procedure": "seed 000 multi-turn chat", "conversations": self.conversations,
                "max_tokens": self.max_tokens, "out_dir": self.out_dir, "files": self.files,
                "models": [r.to_dict() for r in self.results]}

    def table(self) -> str:
        columns = [c for c in COLUMNS if c != "error"]
        rows = [{c: "" if v is None else str(v) for c, v in r.summary().items()} for r in self.results]
        heads = {c: HEADINGS.get(c, c.upper()) for c in columns}
        widths = {c: max([len(heads[c])] + [len(row[c]) for row in rows]) for c in columns}
        lines = ["  ".join(heads[c].ljust(widths[c]) for c in columns)]
        lines += ["  ".join(row[c].ljust(widths[c]) for c in columns) for row in rows]
        lines += [f"{r.host} {r.model}: FAILED: {r.error}" for r in self.results if r.error]
        return "\n".join(lines)

    def __str__(self) -> str:
        if not self.results:
            return "no chat model on the selected hosts"
        files = "".join(f"\n{kind}: {path}" for kind, path in self.files.items())
        return self.table() + files


def write_csv(results: list[ModelResult], path: Path) -> None:
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=COLUMNS, extrasaction="ignore")
    writer.writeheader()
    for r in results:
        writer.writerow(r.summary())
    path.write_text(buf.getvalue(), encoding="utf-8")


def chart(results: list[ModelResult], path: Path, title: str = "") -> None:
    """A bar chart of characters per second per model: the measured figure, and beside it, for a
    model of seed 000's table, the seed's A100 and MetaX C500 figures."""
    import matplotlib  # noqa: PLC0415 - the optional extra vllm-fleet[bench]

    matplotlib.use("Agg")  # files only, no display
    import matplotlib.pyplot as plt  # noqa: PLC0415

    measured = [r for r in results if r.chars_per_s is not None or r.seed_model]
    labels = [f"{r.model}\n({r.host})" + (f"\nseed: {r.seed_model}" if r.seed_model else "") for r in measured]
    series = [("measured", [r.chars_per_s for r in measured], "#1f77b4"),
              ("seed 000: A100", [r.seed_a100 for r in measured], "#2ca02c"),
              ("seed 000: MetaX C500", [r.seed_metax for r in measured], "#ff7f0e")]
    width = 0.27
    drawn = 0
    fig, ax = plt.subplots(figsize=(max(6.5, 1.6 * len(measured) + 2), 4.5))
    for i, (name, values, colour) in enumerate(series):
        xs = [x + (i - 1) * width for x in range(len(measured))]
        present = [(x, v) for x, v in zip(xs, values, strict=False) if v is not None]
        if not present:
            continue
        bars = ax.bar([x for x, _ in present], [v for _, v in present], width, label=name, color=colour)
        ax.bar_label(bars, fmt="%.1f", fontsize=8)
        drawn += 1
    ax.set_xticks(range(len(measured)), labels, fontsize=8)
    ax.set_xlim(-0.6, len(measured) - 0.4)
    ax.set_ylabel("characters per second")
    ax.set_title(title or "seed 000 multi-turn chat: output speed", fontsize=10)
    if drawn:
        ax.legend(fontsize=8)
    else:
        ax.text(0.5, 0.5, "no model answered", ha="center", va="center", transform=ax.transAxes)
    fig.tight_layout()
    fig.savefig(path, format="png", dpi=110)
    plt.close(fig)


def bench(inventory: str | os.PathLike, limit: str | None = None, *, extravars: dict | None = None,
          secrets: dict | None = None, out_dir: str | os.PathLike | None = None, conversations: list[int] | None = None,
          max_tokens: int | None = None, timeout: float = 600.0, models: list[str] | None = None,
          chart_file: bool = True, seed_models: dict[str, str] | None = None,
          log: Callable[[str], None] = lambda m: None) -> BenchResult:
    """Run seed 000's multi-turn chat test on every chat model of the selected hosts, one model
    after the other (as the seed measured them: alone); write bench.json, bench.csv and
    bench.png (the chart) into `out_dir` when given."""
    targets = targets_from_hostvars(inventory_hostvars(str(inventory), limit), extravars, secrets, models)
    return bench_targets(targets, out_dir=out_dir, conversations=conversations, max_tokens=max_tokens,
                         timeout=timeout, chart_file=chart_file, seed_models=seed_models, log=log)


def bench_targets(targets: list[Target], *, out_dir=None, conversations: list[int] | None = None,
                  max_tokens: int | None = None, timeout: float = 600.0, chart_file: bool = True,
                  seed_models: dict[str, str] | None = None,
                  log: Callable[[str], None] = lambda m: None) -> BenchResult:
    """`conversations`: the numbers (1-4, in the seed's order) of seed 000's conversations to
    run, all of them by default. `seed_models`: {model name: row of seed 000's table} for
    models whose names differ from the seed's."""
    seed_models = seed_models or {}
    for name, row in seed_models.items():
        if seed_match([row]) is None:
            raise BenchError(f"--seed-model {name}={row}: no such model in seed 000's table")
    seed = seed_conversations()
    numbers = list(conversations) if conversations else list(range(1, len(seed) + 1))
    wrong = [n for n in numbers if not 1 <= n <= len(seed)]
    if wrong:
        raise BenchError(f"--conversations {' '.join(map(str, wrong))}: seed 000 has {len(seed)} conversations; "
                         f"accepted: numbers from 1 to {len(seed)}")
    convs = [{"number": n, **seed[n - 1]} for n in numbers]
    results = [bench_model(t, convs, max_tokens=max_tokens, timeout=timeout, log=log,
                           seed_model=seed_models.get(t.name) or seed_models.get(t.served)) for t in targets]
    outcome = BenchResult(results=results, conversations=numbers, max_tokens=max_tokens)
    if out_dir is not None:
        out = Path(out_dir)
        out.mkdir(parents=True, exist_ok=True)
        outcome.out_dir = str(out.resolve())
        outcome.files = {"json": str(out / "bench.json"), "csv": str(out / "bench.csv")}
        write_csv(results, out / "bench.csv")
        if chart_file and results:
            cap = f", answers capped at {max_tokens} tokens" if max_tokens else ""
            chart(results, out / "bench.png", title=f"seed 000 multi-turn chat: output speed\nconversations "
                                                    f"{', '.join(map(str, numbers))}{cap}")
            outcome.files["png"] = str(out / "bench.png")
        (out / "bench.json").write_text(json.dumps(outcome.to_dict(), indent=2, ensure_ascii=False) + "\n",
                                        encoding="utf-8")
    return outcome


# ------------------------------------------------------------------ seed 001: evalscope

def evalscope_perf_argv(target: Target, tokenizer_path: str, *, outputs_dir: str | None = None,
                        overrides: dict | None = None, executable: str = "evalscope") -> list[str]:
    """Seed 001's `evalscope perf` command line for one model (PERF_PRESET, the seed's URL
    `${API_URL}/completions`), with `overrides` (e.g. parallel, number) over the preset."""
    preset = {**PERF_PRESET, **(overrides or {})}
    argv = [executable, "perf", "--parallel", *map(str, preset["parallel"]), "--number", *map(str, preset["number"]),
            "--model", target.served, "--url", f"{target.url}/v1/completions", "--api", preset["api"],
            "--dataset", preset["dataset"], "--max-tokens", str(preset["max_tokens"]),
            "--min-tokens", str(preset["min_tokens"]), "--prefix-length", str(preset["prefix_length"]),
            "--min-prompt-length", str(preset["min_prompt_length"]),
            "--max-prompt-length", str(preset["max_prompt_length"]),
            "--log-every-n-query", str(preset["log_every_n_query"]), "--tokenizer-path", str(tokenizer_path),
            "--extra-args", json.dumps(preset["extra_args"])]
    if outputs_dir:
        argv += ["--outputs-dir", str(outputs_dir)]
    if target.api_key:
        argv += ["--api-key", target.api_key]
    return argv


def evalscope_accuracy_argv(target: Target, dataset_path: str, *, work_dir: str | None = None,
                            overrides: dict | None = None, limit: int | None = None,
                            executable: str = "evalscope") -> list[str]:
    """Seed 001's accuracy run (its TaskConfig) as an `evalscope eval` command line for one
    model, on a dataset read from `dataset_path` (dataset-args local_path: no hub)."""
    preset = {**ACCURACY_PRESET, **(overrides or {})}
    dataset = preset["dataset"]
    argv = [executable, "eval", "--model", target.served, "--api-url", f"{target.url}/v1",
            "--eval-type", preset["eval_type"], "--datasets", dataset,
            "--dataset-args", json.dumps({dataset: {"local_path": str(dataset_path)}}),
            "--eval-batch-size", str(preset["eval_batch_size"]),
            "--generation-config", f"timeout={preset['timeout']}"]
    if limit:
        argv += ["--limit", str(limit)]
    if work_dir:
        argv += ["--work-dir", str(work_dir)]
    if target.api_key:
        argv += ["--api-key", target.api_key]
    return argv


#: Hubs stay shut while evalscope runs: the dataset and the tokenizer are local paths.
OFFLINE_ENV = {"HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
               "MODELSCOPE_OFFLINE": "1"}


def accuracy_set_problem(path: str | os.PathLike) -> str | None:
    """Why `path` cannot be an accuracy run's MMLU set, or None. evalscope 1.14.1 reads a local set
    as its hub keeps it: a dataset card (README.md) whose `configs` name each subset's split files;
    without one it stops with "BuilderConfig 'all' not found" (scripts/check-evalscope's finding),
    after the canary was converged."""
    where = Path(path)
    if not where.is_dir():
        return f"{path}: not a directory (the dataset's files, read locally)"
    if not (where / "README.md").is_file():
        return (f"{path}: no dataset card (README.md) whose configs name the subsets' files, as the hub keeps "
                "cais/mmlu (docs/operations/rollouts.md, lab/fixtures/datasets/mmlu-tiny)")
    return None


def run_caches(work: Path) -> dict[str, str]:
    """The dataset caches of one evalscope run, inside its own directory. Hugging Face's datasets
    library caches a local set under the home by its path: a set changed in place (12 questions cut to
    6) was read as before by the next run (evalscope 1.14.1, datasets 4.1.1, scripts/check-evalscope's
    set), so a gate would judge a canary on a set the site no longer has."""
    return {"HF_DATASETS_CACHE": str(work / "cache" / "datasets"),
            "MODELSCOPE_CACHE": str(work / "cache" / "modelscope")}


def masked(argv: list[str], target: Target) -> str:
    """The command line as it may be shown: the API key masked."""
    return shlex.join([MASK if target.api_key and a == target.api_key else a for a in argv])


def evalscope_executable() -> str | None:
    beside = Path(sys.executable).with_name("evalscope")
    return str(beside) if beside.exists() else shutil.which("evalscope")


def evalscope_score(work_dir: str | os.PathLike, model: str, dataset: str = ACCURACY_PRESET["dataset"]) -> float:
    """The score (0-1) of the newest report `evalscope eval` wrote for `model` on `dataset` under
    `work_dir` (<work_dir>/<timestamp>/reports/<model>/<dataset>.json). evalscope 1.14's report
    (schema_version 2, the release vllm-fleet[evalscope] pins) names its conclusion by
    `primary_metric_identity`; the metric with that identity carries the score. A report of the
    schema before (no schema_version) carries it at the top. Read by hand: evalscope is an
    optional extra, and its Report class needs pandas and the rest of it."""
    reports = sorted(Path(work_dir).glob(f"**/reports/{model}/{dataset}.json"), key=lambda p: p.stat().st_mtime)
    if not reports:
        raise BenchError(f"evalscope wrote no {dataset} report for {model} under {work_dir}")
    try:
        report = json.loads(reports[-1].read_text())
        if "schema_version" not in report:
            return float(report["score"])
        primary = report.get("primary_metric_identity")
        (metric,) = [m for m in report.get("metrics") or [] if m.get("identity") == primary] if primary else [None]
        if metric is None:
            raise BenchError(f"{reports[-1]}: the report names no primary metric "
                             f"({report.get('primary_metric_unavailable_reason') or 'no reason given'})")
        return float(metric["score"])
    except (ValueError, KeyError, TypeError) as exc:
        raise BenchError(f"{reports[-1]}: not an evalscope report this release reads ({exc})") from exc


def evalscope_accuracy(target: Target, dataset_path: str | os.PathLike, *, work_dir: str | os.PathLike,
                       limit: int | None = None, timeout: float = 3600) -> float:
    """Seed 001's accuracy run on one model (the local dataset at `dataset_path`, at most `limit`
    samples per subset), as a percentage; its log is <work_dir>/accuracy.log (the key scrubbed)."""
    executable = evalscope_executable()
    if executable is None:
        raise BenchError("evalscope is not installed: pip install 'vllm-fleet[evalscope]'")
    work = Path(work_dir)
    work.mkdir(parents=True, exist_ok=True)
    argv = evalscope_accuracy_argv(target, str(dataset_path), work_dir=str(work), limit=limit, executable=executable)
    log = work / "accuracy.log"
    try:
        with open(log, "wb") as fh:
            proc = subprocess.run(argv, stdout=fh, stderr=subprocess.STDOUT, check=False, timeout=timeout,
                                  env={**os.environ, **OFFLINE_ENV, **run_caches(work)})
    except subprocess.TimeoutExpired as exc:
        raise BenchError(f"evalscope eval did not finish within {timeout:g} s (log: {log})") from exc
    finally:
        _scrub_tree(work, target.api_key)
    if proc.returncode != 0:
        tail = log.read_text(errors="replace").strip().splitlines()[-1:] or ["no output"]
        raise BenchError(f"evalscope eval exited {proc.returncode}: {tail[0]} (log: {log})")
    return 100 * evalscope_score(work, target.served)


def _scrub_tree(directory: Path, key: str) -> None:
    """evalscope logs its arguments, the key among them: mask it in every file it wrote."""
    if not key:
        return
    for path in directory.rglob("*"):
        if path.is_file():
            data = path.read_bytes()
            if scrub_bytes(data, [key]) != data:
                path.write_bytes(scrub_bytes(data, [key]))


def run_evalscope(targets: list[Target], *, checks: list[str], out_dir: str | os.PathLike,
                  tokenizer_path: str | None = None, dataset_path: str | None = None,
                  perf_overrides: dict | None = None, accuracy_limit: int | None = None, dry_run: bool = False,
                  log: Callable[[str], None] = lambda m: None) -> list[dict]:
    """Seed 001's checks per model: [{host, model, check, command (key masked), rc, out}]."""
    if "perf" in checks and not tokenizer_path:
        raise BenchError("--evalscope perf needs --tokenizer-path (the model's tokenizer files; seed 001 passes "
                         "the model's directory)")
    if "accuracy" in checks and not dataset_path:
        raise BenchError("--evalscope accuracy needs --dataset PATH (the MMLU files; nothing is fetched from a hub)")
    if "accuracy" in checks and not dry_run and (problem := accuracy_set_problem(dataset_path)):
        raise BenchError(f"--dataset {problem}")
    executable = evalscope_executable()
    if executable is None and not dry_run:
        raise BenchError("evalscope is not installed: pip install 'vllm-fleet[evalscope]'")
    executable = executable or "evalscope"
    out = Path(out_dir)
    rows = []
    for t in targets:
        base = out / "evalscope" / f"{t.host}-{t.name}"
        for check in checks:
            if check == "perf":
                argv = evalscope_perf_argv(t, str(tokenizer_path), outputs_dir=str(base / "perf"),
                                           overrides=perf_overrides, executable=executable)
            else:
                argv = evalscope_accuracy_argv(t, str(dataset_path), work_dir=str(base / "accuracy"),
                                               limit=accuracy_limit, executable=executable)
            row = {"host": t.host, "model": t.name, "check": check, "command": masked(argv, t), "rc": None,
                   "out": str(base / check)}
            if not dry_run:
                log(f"{t.host} {t.name}: evalscope {check}")
                base.mkdir(parents=True, exist_ok=True)
                with open(base / f"{check}.log", "w", encoding="utf-8") as fh:
                    proc = subprocess.run(argv, stdout=fh, stderr=subprocess.STDOUT, check=False,
                                          env={**os.environ, **OFFLINE_ENV, **run_caches(base / check)})
                row["rc"] = proc.returncode
                row["log"] = str(base / f"{check}.log")
                _scrub_tree(base, t.api_key)
            rows.append(row)
    return rows
