"""The overlay logic (module_utils/vllm_fleet_overlay.py) and the fleet_overlay module.

The promise under test: an overlay laid over an installed package can be taken off again
and every original file comes back byte for byte, with its mode and times; nothing the
overlay added stays behind; applying the same overlay twice changes nothing; and a file
someone else changed in between is never clobbered.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import os
import subprocess
import sys
import tarfile
from pathlib import Path

import ansible.module_utils
import pytest

from tests.conftest import ansible_module

REPO = Path(__file__).resolve().parents[2]
ANSIBLE_BIN = Path(sys.executable).parent
if str(REPO / "module_utils") not in ansible.module_utils.__path__:
    ansible.module_utils.__path__.append(str(REPO / "module_utils"))

from ansible.module_utils import vllm_fleet_overlay as ov  # noqa: E402

from tests.conftest import load_module  # noqa: E402

PACKAGE = {
    "vllm/__init__.py": (b"from vllm.version import __version__\n", 0o644),
    "vllm/version.py": (b"__version__ = '0.10.2'\n", 0o644),
    "vllm/platforms/__init__.py": (b"def resolve():\n    return 'cuda'\n", 0o644),
    "vllm/platforms/interface.py": (b"class Platform:\n    pass\n", 0o644),
    "vllm/_C.abi3.so": (bytes(range(256)) * 4, 0o755),
    "vllm/entrypoints/cli/main.py": (b"def main():\n    return 0\n", 0o644),
    "triton/__init__.py": (b"__version__ = '3.0.0'\n", 0o644),
    "triton/compiler/__init__.py": (b"", 0o644),
    "triton/compiler/code_generator.py": (b"MACA_SUPPORT = False\n", 0o644),
}
# MetaX-style patched vllm/: two files replaced, a module and a package added.
OVERLAY = {
    "vllm/platforms/__init__.py": b"def resolve():\n    return 'maca'\n",
    "vllm/_C.abi3.so": b"\x7fELF maca kernels",
    "vllm/platforms/maca.py": b"class MacaPlatform:\n    pass\n",
    "vllm/maca_ops/__init__.py": b"",
    "vllm/maca_ops/kernels.py": b"KERNELS = ['paged_attention']\n",
}


def make_site(root: Path) -> Path:
    site = root / "site-packages"
    for rel, (data, mode) in PACKAGE.items():
        path = site / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
        path.chmod(mode)
        # A fixed, old mtime, as pip leaves it: restoring must bring it back too.
        os.utime(path, (1_700_000_000, 1_700_000_000))
    return site


def snapshot(site: Path) -> dict[str, tuple[str, int, int]]:
    """Every file and directory: (sha256 or 'dir', mode, mtime in ns for files)."""
    out = {}
    for path in sorted(site.rglob("*")):
        rel = str(path.relative_to(site))
        st = path.lstat()
        if path.is_dir():
            out[rel] = ("dir", st.st_mode & 0o7777, 0)
        else:
            out[rel] = (hashlib.sha256(path.read_bytes()).hexdigest(), st.st_mode & 0o7777, st.st_mtime_ns)
    return out


def make_tar(path: Path, files: dict[str, bytes], extra: list[tarfile.TarInfo] | None = None) -> str:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        dirs = sorted({str(Path(rel).parent) for rel in files} - {"."})
        for d in dirs:
            info = tarfile.TarInfo(d)
            info.type, info.mode = tarfile.DIRTYPE, 0o755
            tar.addfile(info)
        for rel, data in sorted(files.items()):
            info = tarfile.TarInfo(rel)
            info.size, info.mode = len(data), 0o644
            tar.addfile(info, io.BytesIO(data))
        for info in extra or []:
            tar.addfile(info)
    path.write_bytes(gzip.compress(buf.getvalue(), mtime=0))
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture
def env(tmp_path):
    site = make_site(tmp_path)
    archive = tmp_path / "vllm-overlay.tar.gz"
    sha = make_tar(archive, OVERLAY)
    generator = tmp_path / "code_generator.py"
    generator.write_bytes(b"MACA_SUPPORT = True  # MetaX\n")
    gen_sha = hashlib.sha256(generator.read_bytes()).hexdigest()
    return {"site": site, "state": tmp_path / "overlays", "archive": archive, "sha": sha,
            "generator": generator, "gen_sha": gen_sha, "tmp": tmp_path}


def apply_vllm(env, **kw):
    return ov.apply("vllm", str(env["archive"]), "directory", "vllm", str(env["site"]), str(env["state"]),
                    env["sha"], version="0.10.2+metax", **kw)


def apply_triton(env, **kw):
    return ov.apply("triton-code-generator", str(env["generator"]), "file", "triton/compiler/code_generator.py",
                    str(env["site"]), str(env["state"]), env["gen_sha"], **kw)


def test_apply_lays_the_files_and_records_them(env):
    result = apply_vllm(env)
    assert result["changed"] and result["files"] == len(OVERLAY)
    for rel, data in OVERLAY.items():
        assert (env["site"] / rel).read_bytes() == data
    # Files the overlay does not have are left as they were (cp -r semantics).
    assert (env["site"] / "vllm/version.py").read_bytes() == PACKAGE["vllm/version.py"][0]
    # A replaced file keeps its mode; the shared object stays executable.
    assert (env["site"] / "vllm/_C.abi3.so").stat().st_mode & 0o777 == 0o755
    manifest = json.loads((env["state"] / "vllm" / "manifest.json").read_text())
    assert manifest["sha256"] == env["sha"] and manifest["version"] == "0.10.2+metax"
    actions = {f["path"]: f["action"] for f in manifest["files"]}
    assert actions == {"vllm/platforms/__init__.py": "replaced", "vllm/_C.abi3.so": "replaced",
                       "vllm/platforms/maca.py": "added", "vllm/maca_ops/__init__.py": "added",
                       "vllm/maca_ops/kernels.py": "added"}
    assert manifest["created_dirs"] == ["vllm/maca_ops"]
    originals = env["state"] / "vllm" / "original"
    assert (originals / "vllm/_C.abi3.so").read_bytes() == PACKAGE["vllm/_C.abi3.so"][0]


def test_undo_restores_every_original_byte_for_byte(env):
    before = snapshot(env["site"])
    apply_vllm(env)
    apply_triton(env)
    assert snapshot(env["site"]) != before
    # Python compiled the added module meanwhile: its bytecode must go too.
    cache = env["site"] / "vllm/platforms/__pycache__"
    cache.mkdir()
    (cache / "maca.cpython-311.pyc").write_bytes(b"pyc")
    (env["site"] / "vllm/maca_ops/__pycache__").mkdir()
    (env["site"] / "vllm/maca_ops/__pycache__/kernels.cpython-311.pyc").write_bytes(b"pyc")
    gone_triton = ov.remove("triton-code-generator", str(env["state"]))
    gone_vllm = ov.remove("vllm", str(env["state"]))
    assert gone_vllm["changed"] and gone_triton["changed"]
    assert sorted(gone_vllm["restored"]) == ["vllm/_C.abi3.so", "vllm/platforms/__init__.py"]
    assert gone_triton["restored"] == ["triton/compiler/code_generator.py"]
    assert gone_vllm["left"] == [] and gone_triton["left"] == []
    # Content, mode and mtime of every file, and the set of files and directories.
    assert snapshot(env["site"]) == before
    assert not (env["state"] / "vllm").exists() and not (env["state"] / "triton-code-generator").exists()


def test_apply_twice_changes_nothing(env):
    assert apply_vllm(env)["changed"]
    manifest = (env["state"] / "vllm" / "manifest.json").read_bytes()
    again = apply_vllm(env)
    assert not again["changed"] and again["files"] == len(OVERLAY)
    assert (env["state"] / "vllm" / "manifest.json").read_bytes() == manifest


def test_remove_without_overlay_changes_nothing(env):
    assert not ov.remove("vllm", str(env["state"]))["changed"]


def test_check_mode_writes_nothing(env):
    before = snapshot(env["site"])
    assert apply_vllm(env, check_mode=True)["changed"]
    assert snapshot(env["site"]) == before and not env["state"].exists()
    apply_vllm(env)
    applied = snapshot(env["site"])
    assert ov.remove("vllm", str(env["state"]), check_mode=True)["changed"]
    assert snapshot(env["site"]) == applied


def test_a_reinstall_in_between_is_taken_as_the_new_original(env):
    """pip reinstalls vllm (new files, our additions left behind): apply again, then undo."""
    apply_vllm(env)
    reinstalled = b"def resolve():\n    return 'cuda'  # 0.10.2.post1\n"
    (env["site"] / "vllm/platforms/__init__.py").write_bytes(reinstalled)
    (env["site"] / "vllm/_C.abi3.so").write_bytes(PACKAGE["vllm/_C.abi3.so"][0])  # pip's file is back
    assert ov.inspect(str(env["state"] / "vllm" / "manifest.json"))["differing"] == [
        "vllm/_C.abi3.so", "vllm/platforms/__init__.py"]
    result = apply_vllm(env)
    assert result["changed"]
    # The drifted file was not restored over; our added files were cleared before re-laying.
    assert result["restored"] == [] and sorted(result["removed"]) == [
        "vllm/maca_ops/__init__.py", "vllm/maca_ops/kernels.py", "vllm/platforms/maca.py"]
    assert (env["site"] / "vllm/platforms/__init__.py").read_bytes() == OVERLAY["vllm/platforms/__init__.py"]
    ov.remove("vllm", str(env["state"]))
    assert (env["site"] / "vllm/platforms/__init__.py").read_bytes() == reinstalled


def test_undo_leaves_a_file_changed_by_someone_else(env):
    apply_vllm(env)
    (env["site"] / "vllm/platforms/__init__.py").write_bytes(b"# edited by hand\n")
    result = ov.remove("vllm", str(env["state"]))
    assert result["left"] == ["vllm/platforms/__init__.py: changed since the overlay was applied; left as it is"]
    assert (env["site"] / "vllm/platforms/__init__.py").read_bytes() == b"# edited by hand\n"
    assert (env["site"] / "vllm/_C.abi3.so").read_bytes() == PACKAGE["vllm/_C.abi3.so"][0]


def test_a_new_artifact_replaces_the_old_one_and_undo_still_gives_the_originals(env):
    before = snapshot(env["site"])
    apply_vllm(env)
    newer = env["tmp"] / "vllm-overlay-2.tar.gz"
    sha2 = make_tar(newer, {"vllm/platforms/__init__.py": b"def resolve():\n    return 'maca2'\n"})
    result = ov.apply("vllm", str(newer), "directory", "vllm", str(env["site"]), str(env["state"]), sha2)
    assert result["changed"]
    assert not (env["site"] / "vllm/platforms/maca.py").exists()
    assert (env["site"] / "vllm/_C.abi3.so").read_bytes() == PACKAGE["vllm/_C.abi3.so"][0]
    ov.remove("vllm", str(env["state"]))
    assert snapshot(env["site"]) == before


def test_inspect_reports_drift(env):
    manifest = str(env["state"] / "vllm" / "manifest.json")
    assert ov.inspect(manifest) == {"applied": False}
    apply_vllm(env)
    state = ov.inspect(manifest)
    assert state["applied"] and state["sha256"] == env["sha"] and state["differing"] == [] and state["missing"] == []
    (env["site"] / "vllm/maca_ops/kernels.py").unlink()
    assert ov.inspect(manifest)["missing"] == ["vllm/maca_ops/kernels.py"]


def test_wrong_checksum_writes_nothing(env):
    before = snapshot(env["site"])
    with pytest.raises(ov.OverlayError, match="does not have the sha256"):
        ov.apply("vllm", str(env["archive"]), "directory", "vllm", str(env["site"]), str(env["state"]), "0" * 64)
    assert snapshot(env["site"]) == before


def _info(name, kind, **attrs):
    info = tarfile.TarInfo(name)
    info.type = kind
    for key, value in attrs.items():
        setattr(info, key, value)
    return info


@pytest.mark.parametrize("bad,message", [
    (_info("../evil.py", tarfile.REGTYPE), "not a plain relative path"),
    (_info("/etc/passwd", tarfile.REGTYPE), "not a plain relative path"),
    (_info("vllm/link", tarfile.SYMTYPE, linkname="/etc/passwd"), "link or special file"),
    (_info("torch/__init__.py", tarfile.REGTYPE), "is not under vllm/"),
])
def test_unsafe_archives_are_refused_before_anything_is_written(env, bad, message):
    archive = env["tmp"] / "bad.tar.gz"
    sha = make_tar(archive, {"vllm/platforms/__init__.py": b"x = 1\n"}, extra=[bad])
    before = snapshot(env["site"])
    with pytest.raises(ov.OverlayError, match=message):
        ov.apply("vllm", str(archive), "directory", "vllm", str(env["site"]), str(env["state"]), sha)
    assert snapshot(env["site"]) == before


def test_a_failure_half_way_rolls_back(env):
    """A directory of the archive where the package has a file: stop, and undo what was laid."""
    archive = env["tmp"] / "clash.tar.gz"
    sha = make_tar(archive, {"vllm/platforms/__init__.py": b"x = 1\n", "vllm/version.py/inner.py": b"y = 2\n"})
    before = snapshot(env["site"])
    with pytest.raises(ov.OverlayError, match="the overlay has a directory there"):
        ov.apply("vllm", str(archive), "directory", "vllm", str(env["site"]), str(env["state"]), sha)
    assert snapshot(env["site"]) == before


def run_module(args: dict, check: bool = False) -> dict:
    """fleet_overlay through the ansible CLI on localhost, as a role runs it."""
    return ansible_module("fleet_overlay", args, check=check)


@pytest.mark.ansible
def test_module_end_to_end(env):
    before = snapshot(env["site"])
    args = {"name": "vllm", "root": str(env["site"]), "target": "vllm", "type": "directory",
            "src": str(env["archive"]), "sha256": env["sha"], "state_dir": str(env["state"])}
    assert run_module(args, check=True)["changed"] is True
    assert not env["state"].exists()
    assert run_module(args)["changed"] is True
    assert run_module(args)["changed"] is False
    removed = run_module({"name": "vllm", "state": "absent", "state_dir": str(env["state"])})
    assert removed["changed"] is True
    assert sorted(removed["restored"]) == ["vllm/_C.abi3.so", "vllm/platforms/__init__.py"]
    assert snapshot(env["site"]) == before
    failed = run_module({**args, "sha256": "abc"})
    assert "64 lowercase hexadecimal" in failed["msg"] and failed["changed"] is False


@pytest.mark.ansible
def test_documentation_matches_argument_spec():
    spec_file = REPO / "library" / "fleet_overlay.py"
    module = load_module(spec_file, "fleet_overlay_module")
    proc = subprocess.run([str(ANSIBLE_BIN / "ansible-doc"), "-M", str(REPO / "library"), "-j", "fleet_overlay"],
                          cwd=REPO, capture_output=True, text=True, check=True, timeout=120)
    doc = json.loads(proc.stdout)["fleet_overlay"]
    options = doc["doc"]["options"]
    assert set(options) == set(module.ARGUMENT_SPEC)
    for name, option in options.items():
        spec = module.ARGUMENT_SPEC[name]
        assert option["type"] == spec["type"], name
        assert option.get("default") == spec.get("default"), name
        assert option.get("required", False) == spec.get("required", False), name
        assert option.get("choices") == spec.get("choices"), name
    assert doc["examples"].strip()
    assert set(doc["return"]) == {"manifest", "files", "restored", "removed", "left"}
    assert doc["doc"]["attributes"]["check_mode"]["support"] == "full"


# ---------------------------------------------------------------------------
# fleet_versions: applied overlays (what `doctor` checks on MetaX)
# ---------------------------------------------------------------------------
def run_versions(args: dict) -> tuple[int, dict]:
    cmd = [str(ANSIBLE_BIN / "ansible"), "localhost", "-c", "local", "-i", "localhost,", "--check",
           "-e", f"ansible_python_interpreter={sys.executable}", "-m", "fleet_versions", "-a", json.dumps(args)]
    proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=120,
                          env={**os.environ, "LC_ALL": "C.UTF-8"})
    return proc.returncode, json.loads(proc.stdout.split(" => ", 1)[1])


@pytest.mark.ansible
def test_versions_check_applied_overlays(env):
    apply_vllm(env)
    generator_manifest = env["state"] / "triton-code-generator" / "manifest.json"
    args = {
        "overlays": {"vllm": {"manifest": str(env["state"] / "vllm" / "manifest.json"), "sha256": env["sha"]},
                     "triton-code-generator": {"manifest": str(generator_manifest), "sha256": env["gen_sha"]}},
        "fail_on_mismatch": False,
    }
    code, result = run_versions(args)
    assert code == 0
    vllm_row, triton_row = result["versions"]
    assert (vllm_row["kind"], vllm_row["ok"], vllm_row["installed"]) == ("overlay", True, env["sha"])
    assert vllm_row["detail"] == f"5 file(s) of vllm in {env['site']}, version 0.10.2+metax"
    assert not triton_row["ok"] and triton_row["installed"] is None
    assert result["mismatches"] == [
        f"triton-code-generator overlay: expected sha256 {env['gen_sha']}, not applied (no {generator_manifest})"]

    # A reinstall put pip's file back: the overlay no longer holds, and the check says which file.
    apply_triton(env)
    (env["site"] / "vllm/platforms/__init__.py").write_bytes(PACKAGE["vllm/platforms/__init__.py"][0])
    args["fail_on_mismatch"] = True
    code, result = run_versions(args)
    assert code == 2
    assert result["mismatches"] == [
        f"vllm overlay: expected sha256 {env['sha']}, 1 file(s) changed since it was applied: "
        "vllm/platforms/__init__.py"]
    # Another artifact than the matrix's.
    args["overlays"]["vllm"]["sha256"] = "f" * 64
    _code, result = run_versions(args)
    assert result["mismatches"][0].startswith(
        f"vllm overlay: expected sha256 {'f' * 64}, applied sha256 {env['sha']}; ")


@pytest.mark.ansible
def test_versions_overlay_options_are_checked_first():
    code, result = run_versions({"overlays": {"vllm": {"manifest": "relative.json", "sha256": "0" * 63}}})
    assert code == 2
    assert result["msg"] == ("invalid options:\n"
                             "overlays.vllm.sha256: '" + "0" * 63 + "' is not 64 lowercase hex digits\n"
                             "overlays.vllm.manifest must be an absolute path, got 'relative.json'")
