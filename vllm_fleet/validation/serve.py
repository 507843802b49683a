"""Typed `vllm serve` options, against the pinned releases' own parsers (data/serve_options.json)."""

from __future__ import annotations

import difflib
import json
import re
from collections.abc import Callable
from functools import lru_cache
from typing import Any

from vllm_fleet import vendors
from vllm_fleet.models import DATA_DIR, flag_key
from vllm_fleet.validation.engine import engine_problems
from vllm_fleet.validation.problem import Problem, _describe, _numeric

SERVE_OPTIONS_FILE = DATA_DIR / "serve_options.json"
#: What vLLM checks only when the engine starts (minutes into a unit's life), checked here.
SERVE_RANGES: dict[str, tuple[Callable[[float], bool], str]] = {
    "gpu_memory_utilization": (lambda v: 0 < v <= 1, "a fraction of the device memory in (0, 1], e.g. 0.9"),
    "swap_space": (lambda v: 0 <= v <= 2**20, "a number of GiB, 0-1048576"),
    "cpu_offload_gb": (lambda v: 0 <= v <= 2**20, "a number of GiB, 0-1048576"),
    "kv_cache_memory_bytes": (lambda v: 1 <= v <= 2**50, "a number of bytes, 1-2^50"),
    **{key: (lambda v: 1 <= v <= 2**24, "a positive integer, at most 16777216 (2^24 tokens)") for key in (
        "max_model_len", "max_num_batched_tokens", "num_gpu_blocks_override", "max_seq_len_to_capture")},
    **{key: (lambda v: 1 <= v <= 1024, "a positive integer, at most 1024") for key in (
        "tensor_parallel_size", "pipeline_parallel_size", "data_parallel_size", "data_parallel_size_local",
        "block_size", "max_loras", "max_lora_rank", "max_cpu_loras", "max_parallel_loading_workers",
        "api_server_count")},
    "max_num_seqs": (lambda v: 1 <= v <= 65536, "a positive integer, at most 65536"),
}
#: The largest number a JSON option's value may carry (vLLM's configs are C ints underneath).
JSON_LARGEST = 2**31 - 1
_BOOLEAN_WORDS = ("true", "false", "yes", "no", "on", "off")


#: The largest batch a CUDA graph is captured for (vLLM's sizes stay at or below max_num_seqs).
LARGEST_SIZE = 65536
#: Keys of JSON options whose values are counts: whole numbers.
_COUNTS = ("limit_mm_per_prompt",)


def _json_problems(where: str, value: Any, key: str = "", parents: tuple = ()) -> list[str]:
    """The values inside a JSON option (compilation_config, hf_overrides, limit_mm_per_prompt,
    ...): numbers finite, not negative, at most 2^31-1; sizes and counts whole (sizes 1-65536);
    a sub-configuration (*_config) a mapping; a switch never a quoted word."""
    if isinstance(value, dict):
        if key.endswith("sizes") or any(p in _COUNTS for p in parents):
            return [f"{where} = {_describe(value)}: not a {'list of sizes' if key.endswith('sizes') else 'count'}; "
                    f"accepted: {'a list of whole numbers >= 1' if key.endswith('sizes') else 'a whole number >= 0'}"]
        return [p for k, v in value.items() for p in _json_problems(f"{where}.{k}", v, str(k), parents + (key,))]
    if key.endswith("_mode") and value is not None and not isinstance(value, str):
        return [f"{where} = {_describe(value)}: a mode is one word; accepted: a string such as PIECEWISE"]
    if parents and key.endswith("_config") and value is not None:
        return [f"{where} = {_describe(value)}: a sub-configuration; accepted: a mapping"]
    if isinstance(value, list):
        if key.endswith("sizes"):
            bad = [v for v in value if not isinstance(v, int) or isinstance(v, bool) or not 1 <= v <= LARGEST_SIZE]
            return [f"{where} = {_describe(value)}: {_describe(bad[0])} is not a size; accepted: whole numbers "
                    f"1-{LARGEST_SIZE}"] if bad else []
        if any(p in _COUNTS for p in parents):
            return [f"{where} = {_describe(value)}: not a count; accepted: a whole number >= 0"]
        return [p for i, v in enumerate(value) for p in _json_problems(f"{where}[{i}]", v, key, parents)]
    if isinstance(value, bool):
        if any(p in _COUNTS for p in parents + (key,)):  # true is 1 to pydantic, and no count anyone meant
            return [f"{where} = {_describe(value)}: a boolean, not a count; accepted: a whole number 0-{LARGEST_SIZE}"]
        return []
    if isinstance(value, (int, float)):
        if value != value or not 0 <= value <= JSON_LARGEST:
            return [f"{where} = {_describe(value)}: out of range; accepted: a number 0-{JSON_LARGEST}"]
        if any(p in _COUNTS for p in parents + (key,)) and (not isinstance(value, int) or value > LARGEST_SIZE):
            return [f"{where} = {_describe(value)}: not a count; accepted: a whole number 0-{LARGEST_SIZE}"]
        return []
    if isinstance(value, str) and value.strip().lower() in _BOOLEAN_WORDS:
        return [f"{where} = {_describe(value)}: a switch given as a quoted word (any non-empty string is true); "
                "accepted: true or false, unquoted"]
    if isinstance(value, str) and key.endswith("sizes"):
        return [f"{where} = {_describe(value)}: not a list of sizes; accepted: a list of whole numbers >= 1"]
    return []


def _json_text_problem(value: Any) -> str | None:
    """A JSON option given as text: vLLM parses it as JSON (a mapping), or a bare optimisation
    level for --compilation-config ("3")."""
    if not isinstance(value, str):
        return None
    text = value.strip()
    if text.isdigit():
        return None
    try:
        parsed = json.loads(text)
    except ValueError:
        return "is text that is not JSON, which vLLM cannot parse"
    return None if isinstance(parsed, dict) else "is JSON but not a mapping"


_HUMAN_INT = re.compile(r"^\d+(\.\d+)?[kKmMgGtT]?$")
_FLAGS_INSIDE = re.compile(r"\s-{1,2}[A-Za-z]")
_TYPE_WORDS = {"int": "an integer", "float": "a number", "str": "a string", "json": "a mapping (rendered as JSON)",
               "bool": "true or false", "flag": "true (a flag without a value)"}


@lru_cache(maxsize=1)
def serve_options() -> dict[str, dict]:
    """release -> {vllm_version, options} from data/serve_options.json (see vllm_fleet_dev.argcheck --describe)."""
    return json.loads(SERVE_OPTIONS_FILE.read_text())["releases"]


def serve_release(doc: dict) -> str | None:
    """The vLLM release whose parser judges the host's command lines (as tests/parser pins it)."""
    matrix, accelerator = doc.get("fleet_matrix"), doc.get("fleet_accelerator")
    vllm = matrix.get("vllm") if isinstance(matrix, dict) else None
    if not isinstance(vllm, dict):
        return None
    release = vllm.get("release") or vllm.get("version")
    if not isinstance(release, str):
        return None
    vendor = accelerator.get("vendor") if isinstance(accelerator, dict) else None
    return vendors.parser_release(release, vendor)


#: The one command that describes a release's `vllm serve` options into SERVE_OPTIONS_FILE
#: (the developer tools' vllm_fleet_dev.argcheck, dev/; the product never imports it).
DESCRIBE_COMMAND = ".venv/bin/python -m vllm_fleet_dev.argcheck --describe {release}"


def unchecked_serve_warnings(hosts: dict[str, dict]) -> list[str]:
    """One warning per pinned vLLM release that data/serve_options.json does not describe, naming
    the hosts that pin it (`hosts`: fleet node -> its variables) and the one command that describes
    it: without a description, serve_option_problems cannot judge those hosts' `serve` flags (a
    misspelt option would reach `vllm serve` as it is written)."""
    by_release: dict[str, list[str]] = {}
    for host, host_vars in sorted(hosts.items()):
        release = serve_release(host_vars)
        if release and release not in serve_options():
            by_release.setdefault(release, []).append(host)
    out = []
    for release, names in sorted(by_release.items()):
        groups = sorted({vendors.group(v) for h in names if isinstance(hosts[h].get("fleet_accelerator"), dict)
                         and (v := hosts[h]["fleet_accelerator"].get("vendor")) in vendors.VENDORS})
        key = "release" if hosts[names[0]]["fleet_matrix"]["vllm"].get("release") else "version"
        out.append(f"vLLM {release} (fleet_matrix.vllm.{key} of {', '.join(names)}"
                   + (f", group {', '.join(groups)}" if groups else "")
                   + f") has no description of its `vllm serve` options in vllm_fleet/data/{SERVE_OPTIONS_FILE.name}: "
                   "the serve flags of these hosts were not checked (a misspelt or mistyped option reaches vllm serve "
                   f"as written); describe the release once with `{DESCRIBE_COMMAND.format(release=release)}` "
                   "(it builds that release's parser from PyPI: about 2 minutes and 4 GB the first time)")
    return out


def _number(value: Any) -> float | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return value
    if isinstance(value, str) and _numeric(value.strip()):
        return float(value)
    return None


def _item_problem(spec: dict, item: Any) -> str | None:
    """Why one value does not fit the option's type and choices; None when it does."""
    kind = spec.get("type")
    if isinstance(item, str) and _FLAGS_INSIDE.search(item):
        return "has spaces and more flags inside one value (it reaches vLLM as one argument)"
    if isinstance(item, bool):
        return None if kind == "bool" and spec.get("bool") == "value" else "is a boolean, which renders as a flag"
    if kind == "int":
        if isinstance(item, float) or (isinstance(item, str) and _numeric(item) and not item.strip().isdigit()
                                       and not spec.get("human")):
            return "is not a whole number"
        if not isinstance(item, int) and not (isinstance(item, str) and (item.strip().isdigit() or (
                spec.get("human") and _HUMAN_INT.match(item.strip())))):
            return "is not an integer"
    elif kind == "float" and _number(item) is None:
        return "is not a number"
    elif kind == "str" and isinstance(item, (dict, list)):
        return "is a mapping or list, but the option takes one word"
    elif kind == "bool" and spec.get("bool") == "value" and str(item).lower() not in ("true", "false"):
        return "is not true or false"
    choices = spec.get("choices")
    if choices and str(item) not in choices and str(item).lower() not in [c.lower() for c in choices]:
        return "is not one of the option's choices"
    return None


def serve_option_problems(doc: dict, models: list[dict]) -> list[str]:
    """Every enabled model's merged `serve` against the `vllm serve` options of the host's release.

    Unknown options (with a did-you-mean), types, choices, nargs, boolean styles, values
    smuggling more flags, the ranges vLLM checks only at engine start, and the options against
    each other as vLLM's engine configs judge them then (engine.py). Options the
    vendor's fork adds (`fleet_matrix.vllm.fork_serve_options`) are the fork's to judge.
    """
    release = serve_release(doc)
    described = serve_options().get(release or "")
    if not described:
        return []  # a release we have no description of: unchecked_serve_warnings says so
    options = described["options"]
    vllm = (doc.get("fleet_matrix") or {}).get("vllm") or {}
    fork = set(vllm.get("fork_serve_options") or []) if isinstance(vllm, dict) else set()
    problems = []
    for m in models:
        for key, value in m["serve"].items():
            where = f"model {m['name']}: serve.{key} = {_describe(value)}"
            spec = options.get(key)
            if spec is None:
                if key in fork:
                    continue
                close = difflib.get_close_matches(key, list(options), n=1)
                problems.append(f"{where}: vLLM {release}'s `vllm serve` has no option --{key.replace('_', '-')}"
                                + (f" (did you mean {close[0]!r}?)" if close else "")
                                + "; accepted: an option of that release (vllm serve --help), or one the vendor's fork "
                                "adds listed in fleet_matrix.vllm.fork_serve_options")
                continue
            flag = "--" + key.replace("_", "-")
            kind, style = spec.get("type"), spec.get("bool")
            accepted = _TYPE_WORDS.get(kind, kind)
            if spec.get("choices"):
                accepted = "one of " + ", ".join(spec["choices"])
            takes = f"vLLM {release}'s {flag} takes {accepted}"
            if kind == "bool" and style in ("optional", "store_true", "store_false"):
                if not isinstance(value, bool):
                    hint = (f" (a string would render `{flag} {value}`)" if isinstance(value, str) else "")
                    problems.append(f"{where}: {flag} is a switch{hint}; accepted: true or false, unquoted")
                elif style != "optional" and value is not (style == "store_true") and ("no_" + key) not in options:
                    problems.append(f"{where}: vLLM {release} has {flag} but no --no-{key.replace('_', '-')}; "
                                    "accepted: true, or leave the option out")
                continue
            if kind == "flag":
                if value is not True:
                    problems.append(f"{where}: {takes}; accepted: true, or leave the option out")
                continue
            nargs = spec.get("nargs")
            many = nargs in ("+", "*") or (isinstance(nargs, int) and nargs > 1)
            if isinstance(value, list) and not many and kind != "json":
                problems.append(f"{where}: {takes}, one value; accepted: a single value, not a list")
                continue
            items = value if isinstance(value, list) and many else [value]
            for item in items:
                why = _item_problem(spec, item)
                if why:
                    problems.append(f"{where}: {_describe(item) + ' ' if item is not value else ''}{why}; {takes}"
                                    + ("; give each flag its own key in serve" if "more flags" in why else ""))
                    break
            else:
                rule = SERVE_RANGES.get(key)
                number = _number(value)
                if rule and number is not None and not rule[0](number):
                    problems.append(f"{where}: out of range for {flag}; accepted: {rule[1]} (vLLM checks it only "
                                    "when the engine starts)")
        # The options against each other, as vLLM's engine configs judge them at start (engine.py).
        for key, value, why, accepted in engine_problems(m["serve"], options):
            problems.append(f"model {m['name']}: serve.{key} = {_describe(m['serve'].get(key, value))}: {why}; "
                            f"accepted: {accepted}")
    return problems


def _serve_mappings(host_vars: dict):
    """(variable path, serve mapping) of every `serve` the host's variables give: the group's
    defaults, each launch profile's and each model's (enabled or not)."""
    if isinstance(host_vars.get("fleet_serve_defaults"), dict):
        yield ("fleet_serve_defaults",), host_vars["fleet_serve_defaults"]
    profiles = host_vars.get("fleet_launch_profiles")
    for name, profile in (profiles.items() if isinstance(profiles, dict) else []):
        if isinstance(profile, dict) and isinstance(profile.get("serve"), dict):
            yield ("fleet_launch_profiles", name, "serve"), profile["serve"]
    models = host_vars.get("fleet_models")
    for i, model in enumerate(models if isinstance(models, list) else []):
        if isinstance(model, dict) and isinstance(model.get("serve"), dict):
            yield ("fleet_models", i, "serve"), model["serve"]


def spelling_problems(host_vars: dict) -> list[str]:
    """One option under two spellings in one `serve` (max_model_len and max-model-len, tp and
    tensor_parallel_size): which one wins would be an accident of YAML's key order."""
    problems = []
    for path, serve in _serve_mappings(host_vars):
        seen: dict[str, str] = {}
        for key in serve:
            flag = flag_key(str(key))
            if flag in seen:
                problems.append(str(Problem(path + (str(key),), serve[key],
                                            f"is option --{flag.replace('_', '-')} again (as {seen[flag]!r})",
                                            "each option once per serve, in either spelling")))
            seen.setdefault(flag, str(key))
    return problems


@lru_cache(maxsize=1)
def json_options() -> frozenset[str]:
    """The `vllm serve` options that take JSON (a mapping), in any described release."""
    return frozenset(key for release in serve_options().values() for key, spec in release["options"].items()
                     if spec.get("type") == "json")


def json_option_problems(host_vars: dict) -> list[str]:
    """Every JSON option (compilation_config, hf_overrides, limit_mm_per_prompt, ...) of every
    `serve` the host gives (the defaults, every launch profile, used or not, every model): a
    mapping, or text vLLM parses as one; and what is inside it (_json_problems). Judged
    whatever the host's release, so that a profile no model uses yet is judged too."""
    problems = []
    for path, serve in _serve_mappings(host_vars):
        for key, value in serve.items():
            if flag_key(str(key)) not in json_options():
                continue
            where = ".".join(str(p) if not isinstance(p, int) else f"[{p}]" for p in path).replace(".[", "[")
            where = f"{where}.{key}"
            if isinstance(value, list) or isinstance(value, (bool, float)) or (
                    isinstance(value, int) and flag_key(str(key)) != "compilation_config"):
                problems.append(f"{where} = {_describe(value)}: is not a mapping; accepted: a mapping (rendered as "
                                "JSON), as in the seeds")
                continue
            text = _json_text_problem(value)
            if text:
                problems.append(f"{where} = {_describe(value)}: {text}; accepted: a mapping (rendered as JSON), as "
                                "in the seeds")
            elif isinstance(value, dict):
                problems += _json_problems(where, value, str(key))
    return problems
