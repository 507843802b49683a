"""The mirror's apt key, pinned (issue 34): fleet_mirror_apt_key_fingerprint, the fingerprint read
without gpg (vllm_fleet/mirror/openpgp.py) against real gpg's keys, roles/blocks/apt_mirror refusing
another key before it writes one, the warning when nothing is pinned, and the sync's line to copy."""

from __future__ import annotations

import base64
import copy
import functools
import http.server
import json
import shutil
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

import pytest
import yaml

from tests.conftest import ROOT, ansible_playbook
from vllm_fleet import validation
from vllm_fleet.mirror import openpgp
from vllm_fleet.mirror import sync as mirror_sync
from vllm_fleet.mirror.layout import APT_KEY

needs_gpg = pytest.mark.skipif(not shutil.which("gpg"), reason="needs GnuPG (scripts/setup installs it)")


def _gpg(home: Path, *args: str) -> str:
    return subprocess.run(["gpg", "--batch", "--homedir", str(home), *args], capture_output=True, text=True,
                          check=True, timeout=120).stdout


@pytest.fixture(scope="module")
def keys():
    """Throwaway keys of real gpg: {algorithm: (armored public key, gpg's fingerprint, armored secret key)}."""
    found, homes = {}, []
    try:
        for algo in ("ed25519", "rsa2048"):
            home = Path(tempfile.mkdtemp(prefix="vf-gpg-"))  # short: gpg-agent's socket lives in it
            homes.append(home)
            home.chmod(0o700)
            _gpg(home, "--passphrase", "", "--quick-gen-key", f"test {algo}", algo)
            fingerprint = next(line.split(":")[9] for line in _gpg(home, "--with-colons", "--fingerprint").splitlines()
                               if line.startswith("fpr:"))
            found[algo] = (_gpg(home, "--armor", "--export"), fingerprint,
                           _gpg(home, "--pinentry-mode", "loopback", "--passphrase", "", "--armor",
                                "--export-secret-keys"))
        yield found
    finally:
        for home in homes:
            subprocess.run(["gpgconf", "--homedir", str(home), "--kill", "gpg-agent"], capture_output=True, check=False)
            shutil.rmtree(home, ignore_errors=True)


def _armor(data: bytes) -> str:
    text = base64.b64encode(data).decode()
    crc = base64.b64encode(openpgp._crc24(data).to_bytes(3, "big")).decode()
    return ("-----BEGIN PGP PUBLIC KEY BLOCK-----\n\n" + "\n".join(text[i:i + 64] for i in range(0, len(text), 64))
            + f"\n={crc}\n-----END PGP PUBLIC KEY BLOCK-----\n")


def _new_format(data: bytes, long: bool) -> bytes:
    """The same packets with new-format headers: one- or two-octet lengths, or five-octet ones (`long`)."""
    out = b""
    for tag, body in openpgp.packets(data):
        n = len(body)
        if long:
            length = b"\xff" + n.to_bytes(4, "big")
        elif n < 192:
            length = bytes([n])
        else:
            length = bytes([((n - 192) >> 8) + 192, (n - 192) & 0xFF])
        out += bytes([0xC0 | tag]) + length + body
    return out


def _show(text: str, tmp_path: Path) -> list[str]:
    """The primary keys' fingerprints as gpg reads the block (gpg --show-keys imports nothing)."""
    path = tmp_path / "key.asc"
    path.write_text(text)
    out = subprocess.run(["gpg", "--batch", "--with-colons", "--show-keys", str(path)], capture_output=True, text=True,
                         check=True).stdout.splitlines()
    return [out[i + 1].split(":")[9] for i, line in enumerate(out) if line.startswith("pub:")]


# ---------------------------------------------------------------- the fingerprint, without gpg

@needs_gpg
@pytest.mark.parametrize("algo", ["ed25519", "rsa2048"])
def test_the_fingerprint_is_gpgs(keys, algo):
    public, fingerprint, _secret = keys[algo]
    assert openpgp.fingerprints(public) == [fingerprint]
    assert len(fingerprint) == 40


@needs_gpg
@pytest.mark.parametrize("long", [False, True], ids=["new-short-lengths", "new-five-octet-lengths"])
@pytest.mark.parametrize("algo", ["ed25519", "rsa2048"])
def test_new_format_packet_headers_give_the_same_fingerprint(keys, algo, long, tmp_path):
    public, fingerprint, _secret = keys[algo]
    assert openpgp.dearmor(public)[0] & 0x40 == 0  # gpg writes old-format headers
    text = _armor(_new_format(openpgp.dearmor(public), long))
    assert _show(text, tmp_path) == [fingerprint]  # gpg reads it as the same key
    assert openpgp.fingerprints(text) == [fingerprint]


@needs_gpg
def test_another_key_and_a_key_beside_it_are_seen(keys, tmp_path):
    (ed, ed_fpr, _), (rsa, rsa_fpr, _) = keys["ed25519"], keys["rsa2048"]
    assert ed_fpr != rsa_fpr and openpgp.fingerprints(rsa) == [rsa_fpr]
    # One file of two blocks, and one block of both keys' packets: both are keys apt would trust.
    assert openpgp.fingerprints(ed + rsa) == [ed_fpr, rsa_fpr]
    both = _armor(openpgp.dearmor(ed) + openpgp.dearmor(rsa))
    assert _show(both, tmp_path) == openpgp.fingerprints(both) == [ed_fpr, rsa_fpr]


@needs_gpg
def test_a_tampered_key_is_refused_or_is_another_key(keys):
    public, fingerprint, secret = keys["ed25519"]
    data = bytearray(openpgp.dearmor(public))
    data[20] ^= 0x01  # inside the public key packet's key material
    lines = public.splitlines()
    body_start = lines.index("") + 1
    crc_line = next(i for i, line in enumerate(lines) if line.startswith("="))
    text = base64.b64encode(bytes(data)).decode()
    kept_crc = "\n".join(lines[:body_start] + [text] + lines[crc_line:])
    with pytest.raises(ValueError, match="CRC-24"):
        openpgp.fingerprints(kept_crc)
    altered = openpgp.fingerprints(_armor(bytes(data)))  # its checksum made again: another key
    assert altered != [fingerprint] and len(altered[0]) == 40
    with pytest.raises(ValueError, match="secret key"):
        openpgp.fingerprints(secret.replace("PRIVATE KEY BLOCK", "PUBLIC KEY BLOCK"))
    for bad in ("", "not a key", "-----BEGIN PGP PUBLIC KEY BLOCK-----\n\n!!!!\n-----END PGP PUBLIC KEY BLOCK-----"):
        with pytest.raises(ValueError):
            openpgp.fingerprints(bad)
    with pytest.raises(ValueError, match="past the end"):
        openpgp.fingerprints(_armor(openpgp.dearmor(public)[:30]))


def test_old_format_lengths_of_every_size_are_read():
    body = bytes([4]) + b"\x00" * 9
    expected = openpgp.hashlib.sha1(b"\x99" + len(body).to_bytes(2, "big") + body).hexdigest().upper()  # noqa: S324
    for header in (bytes([0x98, len(body)]), bytes([0x99, 0, len(body)]), bytes([0x9A, 0, 0, 0, len(body)]),
                   bytes([0x9B])):  # 1, 2, 4 octets, and indeterminate (to the end)
        assert openpgp.fingerprints(_armor(header + body)) == [expected]
    # A partial body length (new format): the parts joined.
    assert openpgp.packets(bytes([0xC6, 0xE1]) + body[:2] + bytes([len(body) - 2]) + body[2:]) == [(6, body)]
    with pytest.raises(ValueError, match="version 5"):
        openpgp.fingerprints(_armor(bytes([0x98, len(body)]) + bytes([5]) + body[1:]))


@needs_gpg
def test_the_filter_gives_fingerprints_or_the_problem(keys):
    sys.path.insert(0, str(ROOT / "filter_plugins"))
    try:
        import fleet  # noqa: PLC0415 - filter_plugins/fleet.py, as Ansible loads it
    finally:
        sys.path.pop(0)
    public, fingerprint, _ = keys["rsa2048"]
    assert fleet.fleet_openpgp_key(public) == {"fingerprints": [fingerprint], "problem": ""}
    found = fleet.fleet_openpgp_key("<html>not found</html>")
    assert found["fingerprints"] == [] and "no ASCII-armored OpenPGP public key" in found["problem"]


# ---------------------------------------------------------------- the inventory: pinned, or a warning

def _hosts(example, **variables) -> dict:
    hosts = copy.deepcopy(example)
    for host, host_vars in hosts.items():
        host_vars["group_names"] = ["fleet", f"{host.split('-')[0]}-nodes"]
        host_vars.update(variables)
    hosts["mirror-01"] = {"group_names": ["mirror"], "ansible_host": "192.0.2.9", **variables}
    return hosts


def test_without_a_pin_a_mirror_with_apt_is_a_warning_naming_the_hosts(example):
    hosts = _hosts(example)
    (warning,) = validation.run_warnings(hosts, ["nvidia-01", "mirror-01"], [])["mirror_key"]
    assert warning.startswith("the key that signs the fleet's mirror's apt repository is trusted on first use "
                              "(on mirror-01, nvidia-01): fleet_mirror_apt_key_fingerprint is not set")
    assert "pin it: fleet_mirror_apt_key_fingerprint" in warning and "mirror.json" in warning


@pytest.mark.parametrize("variables", [{"fleet_mirror_apt_key_fingerprint": "9DDA7742285E9393559ABFB0BA8A4DBF9BF5CC61"},
                                       {"fleet_mirror_apt": False}], ids=["pinned", "no-apt"])
def test_a_pin_or_no_mirror_apt_gives_no_warning(example, variables):
    assert validation.run_warnings(_hosts(example, **variables), ["nvidia-01", "mirror-01"], [])["mirror_key"] == []


def test_without_a_mirror_there_is_nothing_to_pin(example):
    hosts = _hosts(example)
    del hosts["mirror-01"]
    assert validation.run_warnings(hosts, sorted(hosts), [])["mirror_key"] == []


def test_strict_refuses_the_unpinned_key(example):
    sys.path.insert(0, str(ROOT / "filter_plugins"))
    try:
        import fleet  # noqa: PLC0415
    finally:
        sys.path.pop(0)
    hosts = _hosts(example)
    warned = fleet.fleet_inventory_report(hosts, ["nvidia-01"], [])
    refused = fleet.fleet_inventory_report(hosts, ["nvidia-01"], [], strict=True)
    assert any("trusted on first use" in w for w in warned["warnings"])
    assert any("trusted on first use" in p for p in refused["problems"])
    assert not any("trusted on first use" in w for w in refused["warnings"])


@pytest.mark.parametrize("value,valid", [
    ("9DDA7742285E9393559ABFB0BA8A4DBF9BF5CC61", True),
    ("9dda7742285e9393559abfb0ba8a4dbf9bf5cc61", True),
    ("9DDA 7742 285E 9393 559A  BFB0 BA8A 4DBF 9BF5 CC61", True),  # as `gpg --fingerprint` prints it
    ("", True),
    ("9DDA7742285E9393559ABFB0BA8A4DBF9BF5CC6", False),  # 39 digits
    ("0x9DDA7742285E9393559ABFB0BA8A4DBF9BF5CC61", False),
    ("BA8A4DBF9BF5CC61", False),  # a long key id, not the fingerprint
    ("9DDA7742285E9393559ABFB0BA8A4DBF9BF5CC6G", False),
])
def test_the_pin_is_a_fingerprint(example, value, valid):
    hosts = _hosts(example, fleet_mirror_apt_key_fingerprint=value)
    problems = [p for p in validation.validate_inventory(hosts, ["nvidia-01"])
                if "fleet_mirror_apt_key_fingerprint" in p]
    assert (problems == []) == valid, problems
    assert valid or "40 hex digits" in problems[0]


def test_one_home_for_the_pin():
    """The fleet's setting, read by the role from there (no option of its own), of class fingerprint."""
    fleet = ROOT / "roles" / "stages" / "fleet"
    assert yaml.safe_load((fleet / "defaults" / "main.yml").read_text())["fleet_mirror_apt_key_fingerprint"] == ""
    assert yaml.safe_load((fleet / "meta" / "classes.yml").read_text())["fleet_mirror_apt_key_fingerprint"] == \
        "fingerprint"
    role = ROOT / "roles" / "blocks" / "apt_mirror"
    assert "fleet_mirror_apt_key_fingerprint" in yaml.safe_load((role / "vars" / "main.yml").read_text())[
        "_apt_mirror_pinned"]
    assert set(yaml.safe_load((role / "defaults" / "main.yml").read_text())) == {"apt_mirror_source"}


# ---------------------------------------------------------------- the sync says what to pin

def test_the_sync_summary_gives_the_line_to_pin():
    lines: list[str] = []
    summary = mirror_sync.Summary([], apt="apt repository apt/: 3 package(s), 1.0 MB, signed by ABC",
                                  apt_fingerprint="9DDA7742285E9393559ABFB0BA8A4DBF9BF5CC61")
    mirror_sync._print_summary(summary, lines.append)
    assert 'pin it: fleet_mirror_apt_key_fingerprint: "9DDA7742285E9393559ABFB0BA8A4DBF9BF5CC61"' in lines[-1]
    assert yaml.safe_load(lines[-1].split("pin it: ", 1)[1].split(" (", 1)[0]) == {
        "fleet_mirror_apt_key_fingerprint": "9DDA7742285E9393559ABFB0BA8A4DBF9BF5CC61"}


# ---------------------------------------------------------------- the role refuses another key

class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


@needs_gpg
@pytest.mark.ansible
def test_the_role_refuses_a_key_other_than_the_pinned_one_before_writing(keys, tmp_path):
    """roles/blocks/apt_mirror on the controller, in check mode: the pinned key passes (gpg's spaced form);
    another key, or the pinned one with another beside it, is refused naming host, both fingerprints and
    what to do, before the task that writes the key."""
    (ed, ed_fpr, _), (rsa, rsa_fpr, _) = keys["ed25519"], keys["rsa2048"]
    web = tmp_path / "web"
    (web / "apt").mkdir(parents=True)
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(_Quiet, directory=str(web)))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}"
    book = tmp_path / "apt.yml"
    book.write_text(yaml.safe_dump([{"hosts": "localhost", "gather_facts": False, "tasks": [
        {"name": "The host's apt", "ansible.builtin.include_role": {"name": "blocks/apt_mirror"},
         "vars": {"apt_mirror_source": "{{ mirror | fleet_mirror_apt_source }}"}}]}]))

    def run(served: str, pinned: str):
        (web / APT_KEY).write_text(served)
        return ansible_playbook("-i", "localhost,", "-c", "local", "-e", f"ansible_python_interpreter={sys.executable}",
                                str(book), "--check", "-e", json.dumps({"mirror": url,
                                                                        "fleet_mirror_apt_key_fingerprint": pinned}))

    spaced = " ".join(ed_fpr[i:i + 4] for i in range(0, 40, 4))
    try:
        ok = run(ed, spaced.lower())
        assert ok.returncode == 0 and "failed=0" in ok.stdout, ok.stdout + ok.stderr
        for served, found in ((rsa, rsa_fpr), (ed + rsa, f"{ed_fpr} and {rsa_fpr}, 2 keys (apt would trust each)")):
            refused = run(served, spaced)
            out = refused.stdout + refused.stderr
            assert refused.returncode != 0, out
            said = f"localhost: the mirror's apt key {url}/{APT_KEY} is {found}, not {ed_fpr}, the key the " \
                   "inventory pins (fleet_mirror_apt_key_fingerprint); nothing was written"
            assert said in " ".join(out.split()), out
            assert "Write the repository's key" not in out, out
    finally:
        server.shutdown()
        server.server_close()
