"""The fleet's apt repository: the distribution packages the roles install (bom.APT_SETS) and a vendor's
packages from the inventory's apt repositories (the vendor contracts' apt_sets), with their dependencies,
collected on the connected machine for the nodes' release and architecture and published in the mirror as
one signed apt repository (``apt/``) by Debian's reprepro.

How the packages are collected: by apt itself, in a state of its own under the cache (``cache_root``:
its package lists, an empty dpkg status, its own sources). It reads none of the machine's apt
configuration but its sources of the nodes' release (the machine's door to Debian's archive, its
mirror and keys; Debian's deb.debian.org where it has none) and the inventory's vendor repositories.
`apt-get install` into that empty root resolves each host's set as a bare node's apt would: one
alternative of each ``a | b``, one provider of a virtual package, the Recommends its role takes, and
nothing the connected machine happens to have installed. ``--print-uris`` gives the closure with its
sizes without fetching a package (``mirror sync --check``); ``--download-only`` fetches it into the
cache, where apt's own ``partial/`` continues a cut transfer and checks each file against the signed
indexes. ``apt-cache depends --recurse`` would list every alternative and every provider of a virtual
package too, packages no node installs, and still leave the fetching to ``apt-get download``.

The repository is one snapshot: when a sync needs a set the mirror does not hold, every set the mirror
holds is resolved again with it, from the same package lists, so that one version of each package
serves every set (reprepro keeps one version of a name per component). The distribution's packages are
in the component ``main``, the vendor repositories' in ``vendor`` (layout.APT_COMPONENTS).

It is signed (InRelease, Release.gpg) with the site's key, whose public half is ``apt/vllm-fleet-mirror.asc``
(layout.APT_KEY): the operator's (``mirror sync --apt-key``, from their GnuPG home, usable without a
prompt) or one the sync creates once in ``keys/`` of the mirror directory, which roles/services/mirror never
serves and ``mirror pack`` never carries.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import tempfile
import urllib.parse
from dataclasses import dataclass
from pathlib import Path

from vllm_fleet.mirror import bom, fetch
from vllm_fleet.mirror.layout import APT_COMPONENTS, APT_DIR, APT_KEY, APT_RELEASE, DEB_ARCH

#: The sync's apt states and the packages they fetched, kept between syncs (a list is fetched again only
#: when it changed, a package once); VLLM_FLEET_APT_CACHE moves it, ~/.cache serves where it is not writable.
CACHE = Path("/var/cache/vllm-fleet/apt")
#: Where in the mirror directory a sync keeps the key it created (secret), and its file.
KEYS_DIR = "keys"
KEY_FILE = "vllm-fleet-mirror.key"
#: The suites of the nodes' release read from the machine's sources (its backports are not the nodes').
SUITES = (APT_RELEASE, f"{APT_RELEASE}-updates", f"{APT_RELEASE}-security")
DEBIAN_KEYRING = "/usr/share/keyrings/debian-archive-keyring.gpg"
#: Debian's archive, where the machine's apt has no source of the nodes' release.
DEBIAN = ({"uris": ["http://deb.debian.org/debian"], "suites": list(SUITES[:2]), "components": ["main"],
           "signed_by": DEBIAN_KEYRING},
          {"uris": ["http://deb.debian.org/debian-security"], "suites": [SUITES[2]], "components": ["main"],
           "signed_by": DEBIAN_KEYRING})
#: The user id of a key the sync creates.
KEY_UID = "vllm-fleet mirror (created by vllm-fleet mirror sync) <apt@vllm-fleet.invalid>"
TIMEOUT = 3600


class AptError(fetch.FetchError):
    """apt, reprepro or gpg refused; the message says which, for what, and why."""


def cache_root() -> Path:
    return fetch.cache_dir(CACHE, "VLLM_FLEET_APT_CACHE")


# ---------------------------------------------------------------- the machine's sources

def _deb822(text: str) -> list[dict[str, str]]:
    """The stanzas of a deb822 file, field names lower-cased, continuation lines joined with newlines."""
    stanzas: list[dict[str, str]] = []
    current: dict[str, str] = {}
    last = ""
    for line in text.splitlines():
        if line.startswith("#"):
            continue
        if not line.strip():
            if current:
                stanzas.append(current)
            current, last = {}, ""
        elif line[0] in " \t" and last:
            current[last] += "\n" + line.strip()
        else:
            key, _, value = line.partition(":")
            last = key.strip().lower()
            current[last] = value.strip()
    if current:
        stanzas.append(current)
    return stanzas


def machine_sources(etc: Path = Path("/etc/apt")) -> list[dict]:
    """The connected machine's apt sources of the nodes' release, [{uris, suites, components, signed_by}]
    (signed_by: a keyring's path, an inline key, or "" for apt's trusted keys); [] where it has none."""
    found = []
    for path in sorted(etc.glob("sources.list.d/*.sources")):
        for stanza in _deb822(path.read_text()):
            suites = [s for s in stanza.get("suites", "").split() if s in SUITES]
            if "deb" in stanza.get("types", "").split() and suites and stanza.get("enabled", "yes").lower() != "no":
                found.append({"uris": stanza.get("uris", "").split(), "suites": suites,
                              "components": stanza.get("components", "").split(),
                              "signed_by": stanza.get("signed-by", "")})
    for path in [etc / "sources.list", *sorted(etc.glob("sources.list.d/*.list"))]:
        if not path.is_file():
            continue
        for line in path.read_text().splitlines():
            words = line.split("#", 1)[0].split()
            if not words or words[0] != "deb":
                continue
            options: dict[str, str] = {}
            rest = words[1:]
            if rest and rest[0].startswith("["):
                while rest:
                    word = rest.pop(0)
                    key, _, value = word.strip("[]").partition("=")
                    if value:
                        options[key] = value
                    if word.endswith("]"):
                        break
            if len(rest) >= 2 and rest[1] in SUITES:
                found.append({"uris": [rest[0]], "suites": [rest[1]], "components": rest[2:],
                              "signed_by": options.get("signed-by", "")})
    return found


# ---------------------------------------------------------------- apt in a state of its own

def pool_name(package: dict) -> str:
    """The file name reprepro gives a package in its pool: <name>_<version without epoch>_<arch>.deb."""
    return f"{package['name']}_{package['version'].split(':', 1)[-1]}_{package['arch']}.deb"


class PrivateApt:
    """apt with its own lists, an empty dpkg status and its own sources (the machine's of the nodes'
    release, the vendor `repositories`), for one Debian architecture."""

    def __init__(self, arch: str, repositories: list[dict], cache: Path | None = None,
                 etc: Path = Path("/etc/apt")):
        self.arch = DEB_ARCH.get(arch, arch)
        self.repositories = [dict(r) for r in repositories]
        self.distribution = machine_sources(etc) or [dict(s) for s in DEBIAN]
        self.cache = Path(cache) if cache else cache_root()
        what = json.dumps([self.arch, self.distribution, self.repositories], sort_keys=True)
        self.home = self.cache / f"{APT_RELEASE}-{self.arch}-{hashlib.sha256(what.encode()).hexdigest()[:12]}"
        self.archives = self.cache / "archives"
        self._updated = False

    # -- setup

    def _key_file(self, name: str, source: dict) -> str:
        """The keyring a source is checked with: its own file, its inline key written out, or a
        vendor repository's key (inline, or fetched with its sha256); "" for trusted or apt's own keys."""
        key = source.get("key") or ""
        signed_by = source.get("signed_by") or ""
        if "BEGIN PGP" in signed_by:  # deb822's inline key: a "." line is an empty one
            key = "\n".join("" if line == "." else line for line in signed_by.split("\n"))
        path = self.home / "keys" / f"{name}.asc"
        if key:
            path.write_text(key.strip() + "\n")
            return str(path)
        if source.get("key_url"):
            fetch.http_file([source["key_url"]], path, source.get("key_sha256"))
            return str(path)
        return signed_by

    def _stanza(self, name: str, source: dict) -> str:
        components = source.get("components") or []
        lines = ["Types: deb", f"URIs: {' '.join(source['uris'])}", f"Suites: {' '.join(source['suites'])}"]
        if components:
            lines.append(f"Components: {' '.join(components)}")
        lines.append(f"Architectures: {self.arch}")
        if source.get("trusted"):
            lines.append("Trusted: yes")
        elif (keyring := self._key_file(name, source)):
            lines.append(f"Signed-By: {keyring}")
        return "\n".join(lines) + "\n"

    def prepare(self) -> None:
        for sub in ("state/lists/partial", "cache", "keys", "none/partial", "log"):
            (self.home / sub).mkdir(parents=True, exist_ok=True)
        (self.archives / "partial").mkdir(parents=True, exist_ok=True)
        (self.home / "status").touch()
        stanzas = [self._stanza(f"distribution-{n}", s) for n, s in enumerate(self.distribution)]
        stanzas += [self._stanza(f"vendor-{n}", r) for n, r in enumerate(self.repositories)]
        (self.home / "sources.sources").write_text("\n".join(stanzas))
        # APT_CONFIG is read first: with Dir::Etc::Parts and main at /dev/null, nothing of the
        # machine's apt configuration is (a proxy: http_proxy in the environment, which apt reads).
        config = {"Dir::Etc::main": "/dev/null", "Dir::Etc::Parts": "/dev/null",
                  "Dir::Etc::SourceList": self.home / "sources.sources", "Dir::Etc::SourceParts": "/dev/null",
                  "Dir::Etc::Preferences": "/dev/null", "Dir::Etc::PreferencesParts": "/dev/null",
                  "Dir::State": self.home / "state", "Dir::State::status": self.home / "status",
                  # apt's binary caches of the lists, kept: each later resolve reads them (a third of the time).
                  "Dir::Cache": self.home / "cache", "Dir::Cache::archives": self.archives,
                  "Dir::Cache::pkgcache": "pkgcache.bin", "Dir::Cache::srcpkgcache": "srcpkgcache.bin",
                  "Dir::Log": self.home / "log",
                  "APT::Architecture": self.arch, "APT::Architectures": self.arch, "Acquire::Languages": "none",
                  "APT::Get::List-Cleanup": "true", "APT::Install-Suggests": "false"}
        (self.home / "apt.conf").write_text("".join(f'{k} "{v}";\n' for k, v in config.items()))

    # -- running apt

    def _env(self) -> dict[str, str]:
        return {**os.environ, "APT_CONFIG": str(self.home / "apt.conf"), "LC_ALL": "C",
                "DEBIAN_FRONTEND": "noninteractive"}

    def _run(self, argv: list[str], what: str) -> str:
        env = self._env()
        if shutil.which(argv[0]) is None:
            raise AptError(f"{argv[0]} is not installed: the fleet's apt repository is collected on a Debian or Ubuntu "
                           "machine (or set fleet_mirror_apt: false to keep the hosts' own apt sources)")
        try:
            done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=TIMEOUT, check=False)
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise AptError(f"apt ({self.arch}), {what}: {exc}") from None
        if done.returncode != 0:
            lines = [ln.strip() for ln in done.stderr.splitlines() if ln.startswith(("E:", "W:"))]
            lines = lines or [ln.strip() for ln in (done.stderr + done.stdout).splitlines() if ln.strip()][-3:]
            raise AptError(f"apt ({self.arch}), {what}: " + (" ".join(lines) or f"exit {done.returncode}"))
        return done.stdout

    def update(self) -> None:
        """Fetch the package lists (once per sync, new_sync; apt asks for a list only when it changed)."""
        if self._updated:
            return
        self.prepare()
        self._run(["apt-get", "update", "-q", "--error-on=any"], "reading the package lists")
        self._updated = True

    def _options(self, recommends: bool) -> list[str]:
        return ["-o", f"APT::Install-Recommends={'true' if recommends else 'false'}"]

    def resolve(self, packages: list[str], recommends: bool = True) -> list[dict]:
        """What installing `packages` on a bare node takes: [{name, version, arch, file, size, uri, component}]."""
        if not packages:
            return []
        self.update()
        try:
            out = self._run(["apt-get", "-qq", "--print-uris", *self._options(recommends), "-o",
                             f"Dir::Cache::archives={self.home / 'none'}", "install", *packages],
                            f"resolving {' '.join(packages)}")
        except AptError as exc:
            raise AptError(f"{exc}{self._unmet(packages, recommends)}") from None
        resolved = []
        for line in out.splitlines():
            words = line.split()
            if len(words) < 3 or not words[0].startswith("'"):
                continue
            uri, file = words[0].strip("'"), words[1]
            name, version, arch = urllib.parse.unquote(file[:-len(".deb")]).split("_")
            vendor = any(uri.startswith(u.rstrip("/") + "/") for r in self.repositories for u in r["uris"])
            resolved.append({"name": name, "version": version, "arch": arch, "file": file, "size": int(words[2]),
                             "uri": uri, "component": APT_COMPONENTS[1] if vendor else APT_COMPONENTS[0]})
        return resolved

    def _unmet(self, packages: list[str], recommends: bool) -> str:
        """apt's own account of what cannot be installed (" tiny : Depends: x but it is not installable"), which
        its quiet run leaves out: the same request simulated, its unmet dependencies."""
        try:
            done = subprocess.run(["apt-get", "-q", "-s", *self._options(recommends), "install", *packages],
                                  env=self._env(), capture_output=True, text=True, timeout=TIMEOUT, check=False)
        except (OSError, subprocess.TimeoutExpired):
            return ""
        unmet = [" ".join(ln.split()) for ln in done.stdout.splitlines()
                 if re.match(r"^\s+(\S+ : )?(Pre-Depends|Depends|Breaks|Conflicts): ", ln)]
        return f"; unmet: {'; '.join(unmet)}" if unmet else ""

    def download(self, packages: list[str], recommends: bool = True) -> None:
        """Fetch the closure of `packages` into the cache (what is there already, whole, stays)."""
        if packages:
            self.update()
            self._run(["apt-get", "-q", "-y", "--download-only", *self._options(recommends), "install", *packages],
                      f"fetching {' '.join(packages)}")

    def path(self, package: dict) -> Path:
        """Where a fetched package is: the cache, or a file: source's own file (apt copies none of those)."""
        if package["uri"].startswith("file:"):
            return Path(urllib.parse.unquote(urllib.parse.urlsplit(package["uri"]).path))
        return self.archives / package["file"]


_APTS: dict[str, PrivateApt] = {}


def new_sync() -> None:
    """Forget the private apts of an earlier sync of this process: a sync reads the lists afresh once."""
    _APTS.clear()


def private_apt(item: bom.Item, cache: Path | None = None) -> PrivateApt:
    """The apt that resolves a deb item: one per architecture and set of vendor repositories, per sync
    (its lists fetched once)."""
    apt = PrivateApt(item.arch, item.index.get("repositories") or [], cache)
    return _APTS.setdefault(str(apt.home), apt)


def _split(item: bom.Item) -> tuple[list[str], list[str]]:
    """What apt installs with recommends (the packages, and the package files the host installs with apt,
    by absolute path: apt resolves what each depends on), and without."""
    without = list(item.index.get("without_recommends") or [])
    return list(item.specs) + list(item.index.get("package_files") or []), without


def closure(item: bom.Item, cache: Path | None = None) -> list[dict]:
    """The packages a deb item's host installs, with every dependency, in the order apt lists them (the
    package files themselves left out: the mirror holds each as the artifact it is)."""
    apt = private_apt(item, cache)
    with_rec, without = _split(item)
    files = {f"file:{f}" for f in item.index.get("package_files") or []}
    try:
        resolved = apt.resolve(with_rec, True) + apt.resolve(without, False)
    except AptError as exc:
        if not files:
            raise
        # apt names the package a file declares, not the matrix's file: the message names the files too.
        names = ", ".join(sorted(Path(f).name for f in item.index["package_files"]))
        raise AptError(f"{exc} (the set installs the matrix's package file(s) {names}: what they depend on must be "
                       "in Debian's archive or in the inventory's apt repositories)") from None
    packages: dict[str, dict] = {}
    for package in resolved:
        if package["uri"] not in files:
            packages.setdefault(package["file"], package)
    return list(packages.values())


def download(item: bom.Item, packages: list[dict], cache: Path | None = None) -> int:
    """Fetch a deb item's closure into the cache; returns the bytes that came from a source."""
    apt = private_apt(item, cache)
    before = {p["file"] for p in packages if apt.path(p).is_file()}
    with_rec, without = _split(item)
    apt.download(with_rec, True)
    apt.download(without, False)
    missing = [p["file"] for p in packages if not apt.path(p).is_file()]
    if missing:
        raise AptError(f"apt ({apt.arch}) did not fetch {', '.join(missing)}")
    return sum(p["size"] for p in packages if p["file"] not in before and not p["uri"].startswith("file:"))


def cached(package: dict, cache: Path | None = None) -> Path | None:
    """A package's file in the cache (or its file: source), if it is there."""
    if package.get("uri", "").startswith("file:"):
        path = Path(urllib.parse.unquote(urllib.parse.urlsplit(package["uri"]).path))
    else:
        path = (Path(cache) if cache else cache_root()) / "archives" / package["file"]
    return path if path.is_file() else None


# ---------------------------------------------------------------- the site's key

@dataclass
class SigningKey:
    fingerprint: str
    home: Path | None     # GNUPGHOME of gpg and reprepro (None: the operator's own)
    own: bool             # the mirror's own key (keys/), in a GnuPG home made for this sync


def _gpg(home: Path | None, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "LC_ALL": "C"}
    if home is not None:
        env["GNUPGHOME"] = str(home)
    try:
        return subprocess.run(["gpg", "--batch", "--no-tty", *args], env=env, capture_output=True, text=True,
                              timeout=300, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise AptError(f"gpg: {exc} (scripts/setup installs gnupg)") from None


def _fingerprint(home: Path | None, key_id: str) -> str:
    done = _gpg(home, "--with-colons", "--list-secret-keys", *([key_id] if key_id else []))
    for line in done.stdout.splitlines():
        if line.startswith("fpr:"):
            return line.split(":")[9]
    return ""


def signing_key(root: Path, key_id: str = "", log=print) -> SigningKey:
    """The key that signs the repository: the operator's `key_id` (from GNUPGHOME, else ~/.gnupg), or the
    mirror's own, ``keys/vllm-fleet-mirror.key`` (ASCII-armored, secret), created the first time: an ed25519
    signing key without a passphrase, the lab's and a site's until it names its own. The own key is
    imported into a GnuPG home made for this sync (a short path: gpg-agent's socket is in it, and a mirror
    directory deep in the file system would not take one); release() removes it."""
    if key_id:
        fingerprint = _fingerprint(None, key_id)
        if not fingerprint:
            raise AptError(f"no secret key {key_id} in the GnuPG home {os.environ.get('GNUPGHOME', '~/.gnupg')}: "
                           "import it there (gpg --import), or sync without --apt-key to use the mirror's own key")
        return SigningKey(fingerprint, None, False)
    secret = Path(root) / KEYS_DIR / KEY_FILE
    home = Path(tempfile.mkdtemp(prefix="vllm-fleet-gpg-"))
    key = SigningKey("", home, True)
    try:
        if secret.is_file():
            done = _gpg(home, "--import", str(secret))
            key.fingerprint = _fingerprint(home, "")
            if not key.fingerprint:
                raise AptError(f"{secret} holds no secret key gpg can import: {done.stderr.strip()[-300:]}")
            return key
        done = _gpg(home, "--passphrase", "", "--quick-gen-key", KEY_UID, "ed25519", "sign", "never")
        key.fingerprint = _fingerprint(home, "")
        exported = _gpg(home, "--armor", "--export-secret-keys", key.fingerprint)
        if not key.fingerprint or "BEGIN PGP PRIVATE KEY BLOCK" not in exported.stdout:
            raise AptError(f"gpg could not create the mirror's key: {(done.stderr + exported.stderr).strip()[-300:]}")
        secret.parent.mkdir(parents=True, exist_ok=True)
        os.chmod(secret.parent, 0o700)
        secret.touch(mode=0o600)
        secret.write_text(exported.stdout)
        log(f"created the mirror's signing key {key.fingerprint} in {secret} (secret: keep it, never serve it)")
        return key
    except BaseException:
        release(key)
        raise


def release(key: SigningKey) -> None:
    """Stop the gpg-agent that signing with the mirror's own key started, and remove its GnuPG home
    (the operator's key and agent are theirs)."""
    if key.own and key.home is not None:
        if shutil.which("gpgconf"):
            subprocess.run(["gpgconf", "--homedir", str(key.home), "--kill", "gpg-agent"], capture_output=True,
                           timeout=60, check=False)
        shutil.rmtree(key.home, ignore_errors=True)


# ---------------------------------------------------------------- the repository

def publish(root: Path, debs: list[tuple[str, Path]], architectures: list[str], key: SigningKey,
            log=print) -> list[str]:
    """Build ``root/apt`` of `debs` ((component, .deb file)) for `architectures` (Debian's names), signed
    with `key`: reprepro writes the new repository beside the old one, which it then replaces whole.
    Returns its files, relative to `root`."""
    if shutil.which("reprepro") is None:
        raise AptError("reprepro is not installed (Debian's package reprepro; scripts/setup installs it)")
    root = Path(root)
    new, old = root / f".{APT_DIR}.new", root / f".{APT_DIR}.old"
    for leftover in (new, old):
        shutil.rmtree(leftover, ignore_errors=True)
    env = {**os.environ, "LC_ALL": "C", **({"GNUPGHOME": str(key.home)} if key.home else {})}
    with tempfile.TemporaryDirectory(prefix="vllm-fleet-reprepro-") as work:
        conf = Path(work) / "conf"
        conf.mkdir()
        (conf / "distributions").write_text("\n".join([
            "Origin: vllm-fleet", "Label: vllm-fleet mirror", f"Suite: {APT_RELEASE}", f"Codename: {APT_RELEASE}",
            f"Architectures: {' '.join(architectures)}", f"Components: {' '.join(APT_COMPONENTS)}",
            "Description: the fleet's own mirror of the packages its hosts install (vllm-fleet mirror sync)",
            f"SignWith: {key.fingerprint}"]) + "\n")
        base = ["reprepro", "--basedir", work, "--confdir", str(conf), "--dbdir", f"{work}/db",
                "--outdir", str(new), "--logdir", f"{work}/logs"]
        steps = [[*base, "-C", component, "includedeb", APT_RELEASE,
                  *sorted({str(path) for c, path in debs if c == component})]
                 for component in APT_COMPONENTS if any(c == component for c, _ in debs)]
        for argv in steps or [[*base, "export", APT_RELEASE]]:
            done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=TIMEOUT, check=False)
            if done.returncode != 0:
                shutil.rmtree(new, ignore_errors=True)
                lines = [ln for ln in done.stderr.splitlines() if ln.strip()]
                raise AptError("reprepro: " + (" ".join(lines[-4:]) or f"exit {done.returncode}"))
    exported = _gpg(key.home, "--armor", "--export", key.fingerprint)
    if "BEGIN PGP PUBLIC KEY BLOCK" not in exported.stdout:
        shutil.rmtree(new, ignore_errors=True)
        raise AptError(f"gpg could not export the public key {key.fingerprint}: {exported.stderr.strip()[-300:]}")
    (new / Path(APT_KEY).relative_to(APT_DIR)).write_text(exported.stdout)
    current = root / APT_DIR
    if current.exists():
        current.rename(old)
    new.rename(current)
    shutil.rmtree(old, ignore_errors=True)
    return sorted(p.relative_to(root).as_posix() for p in current.rglob("*") if p.is_file())
