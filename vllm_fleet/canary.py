"""Canaries judged by seed 000's benchmark (issue 23): which nodes go first, the figures a
release must keep, where they are kept, and the verdict.

`vllm-fleet rollout --canary N --gate bench` (vllm_fleet.api.canary_rollout) converges the first N
nodes of the run, benches their chat models with seed 000's conversations
(vllm_fleet.bench, the controller asking each model directly, so that a canary is measured,
not the pool), and compares each model's figures with the last ones accepted for it: output
speed (chars/s, the seed's measure) may fall and the time to first token may rise by at most
the inventory's tolerances, in percent (a rise of the time to first token smaller than
`fleet_canary_ttft_rise_min_s` seconds is not judged: on a baseline of tens of milliseconds,
a percentage alone judges noise). With an accuracy set (`--accuracy-set PATH`, seed 001's
evalscope accuracy run on a local dataset), the canary's accuracy may also lose at most
`fleet_canary_accuracy_drop_points` against the last accuracy accepted on the same set.
Accepted figures are kept per model and release, one
JSON file per model in the history directory (`vllm-fleet bench --history` prints them). A
model without accepted figures yet is not judged: its canary's figures become its baseline,
and the verdict says so.
"""

from __future__ import annotations

import json
import re
import time
from dataclasses import dataclass, field
from pathlib import Path

from vllm_fleet.bench import ModelResult
from vllm_fleet.role_specs import role_default
from vllm_fleet.validation.classes import NUMBER_RANGES, class_of

#: The inventory's tolerances (fleet_* variables; their defaults are roles/stages/fleet's).
TOLERANCES = ("fleet_canary_speed_drop_percent", "fleet_canary_ttft_rise_percent", "fleet_canary_ttft_rise_min_s",
              "fleet_canary_accuracy_drop_points")
#: Where gated rollouts keep the figures they accepted, by default (relative to the working directory).
HISTORY_DIR = "vllm-fleet-bench/history"
_SAFE = re.compile(r"[^A-Za-z0-9._-]")


def split(nodes: list[str], count: int) -> tuple[list[str], list[str]]:
    """The canaries (the first `count` nodes of the run, in inventory order) and the rest."""
    if isinstance(count, bool) or not isinstance(count, int) or count < 1:
        raise ValueError(f"canary {count!r}: a number of nodes, at least 1")
    if count > len(nodes):
        raise ValueError(f"canary {count}: the run has {len(nodes)} fleet node(s) ({', '.join(nodes) or 'none'}); "
                         f"accepted: 1 to {len(nodes)}")
    return nodes[:count], nodes[count:]


def tolerances(host_vars: list[dict]) -> dict[str, float]:
    """The strictest of the canaries' tolerances (each in its class's range, which validation
    enforces on every route: this refuses what got past it)."""
    out = {}
    for name in TOLERANCES:
        default = role_default(name)
        low, high, _, _ = NUMBER_RANGES[class_of(name)]
        values = [v.get(name, default) for v in host_vars] or [default]
        for value in values:
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not low <= value <= high:
                raise ValueError(f"{name} = {value!r}: a number from {low:g} to {high:g}")
        out[name] = float(min(values))
    return out


@dataclass
class Judgement:
    """One canary model's verdict."""

    host: str
    model: str
    release: str
    figures: dict
    baseline: dict | None = None
    problems: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems

    def line(self) -> str:
        now = f"{self.figures.get('chars_per_s')} chars/s, TTFT {self.figures.get('ttft_s')} s"
        then = f"{(self.baseline or {}).get('chars_per_s')} chars/s, TTFT {(self.baseline or {}).get('ttft_s')} s"
        if self.figures.get("accuracy") is not None:
            now += f", accuracy {self.figures['accuracy']}"
            if _same_set(self.figures, self.baseline):
                then += f", accuracy {self.baseline['accuracy']}"
        if self.problems:
            return f"{self.host} {self.model}: REFUSED: " + "; ".join(self.problems)
        if self.baseline is None:
            return (f"{self.host} {self.model}: {now} on release {self.release}; no baseline for this model yet: "
                    "recorded as its baseline, not judged")
        line = (f"{self.host} {self.model}: {now} on release {self.release}, within tolerance of {then} "
                f"(release {self.baseline.get('release')})")
        if self.figures.get("accuracy") is not None and not _same_set(self.figures, self.baseline):
            line += (f"; no accuracy accepted yet on {self.figures['accuracy_set']}: "
                     "recorded as the baseline's, not judged")
        return line


def _same_set(figures: dict, baseline: dict | None) -> bool:
    """Whether the baseline has an accuracy measured on the same set as `figures`."""
    return bool(baseline) and baseline.get("accuracy") is not None \
        and baseline.get("accuracy_set") == figures.get("accuracy_set")


def judge(result: ModelResult, release: str, baseline: dict | None, limits: dict[str, float],
          accuracy: Accuracy | None = None) -> Judgement:
    """A canary model's figures against its baseline (None: none yet, nothing to judge); with
    `accuracy`, its accuracy too, against the baseline's on the same set."""
    figures = {"chars_per_s": _round(result.chars_per_s), "ttft_s": _round(result.ttft_s, 3),
               "turns": len(result.turns), "error": result.error}
    if accuracy is not None:
        figures.update(accuracy=_round(accuracy.percent, 2), accuracy_set=accuracy.set)
    verdict = Judgement(host=result.host, model=result.served, release=release, figures=figures, baseline=baseline)
    if result.error or result.chars_per_s is None:
        verdict.problems.append(f"the benchmark failed: {result.error or 'no answer'}")
        return verdict
    if accuracy is not None and accuracy.error:
        verdict.problems.append(f"the accuracy check failed: {accuracy.error}")
        return verdict
    if baseline is None:
        return verdict
    if accuracy is not None and _same_set(figures, baseline):
        points, before = limits["fleet_canary_accuracy_drop_points"], baseline["accuracy"]
        if accuracy.percent < before - points:
            lost = before - accuracy.percent
            verdict.problems.append(f"accuracy {accuracy.percent:.2f} on {accuracy.set} is {lost:.2f} points below "
                                    f"the baseline's {before:.2f} (release {baseline.get('release')}); "
                                    f"fleet_canary_accuracy_drop_points allows {points:g}")
    drop, rise = limits["fleet_canary_speed_drop_percent"], limits["fleet_canary_ttft_rise_percent"]
    rise_min = limits["fleet_canary_ttft_rise_min_s"]
    before = baseline.get("chars_per_s")
    if before and result.chars_per_s < before * (1 - drop / 100):
        fell = 100 * (1 - result.chars_per_s / before)
        verdict.problems.append(f"output speed {result.chars_per_s:.1f} chars/s is {fell:.0f}% "
                                f"below the baseline's {before:.1f} (release {baseline.get('release')}); "
                                f"fleet_canary_speed_drop_percent allows {drop:g}%")
    ttft_before = baseline.get("ttft_s")
    if ttft_before and result.ttft_s is not None and result.ttft_s > ttft_before * (1 + rise / 100) \
            and round(result.ttft_s - ttft_before, 3) >= rise_min:
        rose = 100 * (result.ttft_s / ttft_before - 1)
        verdict.problems.append(f"time to first token {result.ttft_s:.3f} s is {rose:.0f}% "
                                f"({result.ttft_s - ttft_before:.3f} s) above the baseline's {ttft_before:.3f} s "
                                f"(release {baseline.get('release')}); fleet_canary_ttft_rise_percent allows "
                                f"{rise:g}% and fleet_canary_ttft_rise_min_s judges rises from {rise_min:g} s")
    return verdict


@dataclass
class Accuracy:
    """A canary model's accuracy (percent) on an accuracy set, or why it could not be measured."""

    set: str
    percent: float | None = None
    error: str = ""


def _round(value, digits=1):
    return None if value is None else round(value, digits)


# ------------------------------------------------------------------ the history of accepted figures

def history_file(history_dir: str | Path, model: str) -> Path:
    return Path(history_dir) / f"{_SAFE.sub('_', model)}.json"


def entries(history_dir: str | Path, model: str) -> list[dict]:
    path = history_file(history_dir, model)
    return json.loads(path.read_text()) if path.exists() else []


def baseline(history_dir: str | Path, model: str) -> dict | None:
    """The last figures accepted for the model, whatever its release."""
    found = entries(history_dir, model)
    return found[-1] if found else None


def record(history_dir: str | Path, verdict: Judgement, conversations: list[int], max_tokens: int | None) -> dict:
    """Keep an accepted canary's figures as the model's newest baseline (per model and release)."""
    entry = {"model": verdict.model, "release": verdict.release, "host": verdict.host,
             "chars_per_s": verdict.figures["chars_per_s"], "ttft_s": verdict.figures["ttft_s"],
             "conversations": conversations, "max_tokens": max_tokens,
             **({k: verdict.figures[k] for k in ("accuracy", "accuracy_set")} if "accuracy" in verdict.figures else {}),
             "recorded_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    path = history_file(history_dir, verdict.model)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps([*entries(history_dir, verdict.model), entry], indent=2) + "\n")
    tmp.replace(path)
    return entry


def history(history_dir: str | Path) -> list[dict]:
    """Every accepted figure of every model, oldest first per model."""
    directory = Path(history_dir)
    return [e for path in sorted(directory.glob("*.json")) for e in json.loads(path.read_text())] \
        if directory.is_dir() else []


def history_table(rows: list[dict]) -> str:
    if not rows:
        return "no baseline recorded yet (a gated rollout records one: vllm-fleet rollout --canary N --gate bench)"
    heads = ("model", "release", "host", "chars_per_s", "ttft_s", "accuracy", "recorded_at")
    cells = [[str(r.get(h, "")) for h in heads] for r in rows]
    widths = [max(len(h), *(len(c[i]) for c in cells)) for i, h in enumerate(heads)]
    return "\n".join("  ".join(v.ljust(w) for v, w in zip(row, widths, strict=True)).rstrip()
                     for row in [list(map(str.upper, heads)), *cells])
