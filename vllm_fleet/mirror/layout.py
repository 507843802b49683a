"""Where each thing is in the fleet's mirror, and what a node fetches it from: the one home of the
mirror's layout, used by the sync that writes it (bom, sync), the roles that read from it (filters
fleet_mirror_url, fleet_mirror_default, fleet_mirror_sources, fleet_mirror_model_url) and the
validation that checks an inventory against it.

With a host in the group ``mirror`` every source of a node defaults to that host
(``fleet_mirror_url``), and every upstream URL the matrix pins (a commit's ``sources``, a
download's ``sources``, an artifact's ``url``) is replaced, on the node, by its place in the mirror:
the node never reaches an upstream. Its apt reads the mirror's apt repository only (``apt_source``).
"""

from __future__ import annotations

from urllib.parse import urlsplit

from vllm_fleet.role_specs import role_default

#: The default revision of a hub repository when the inventory names none (what the clients fetch).
DEFAULT_REVISION = {"huggingface": "main", "modelscope": "master"}
#: A git model source's revision when the inventory names none: the remote's HEAD (what a clone checks out).
GIT_HEAD = "HEAD"
#: The model sources whose snapshot the fleet's mirror holds, with its sha256 list: the hubs' and git's
#: (roles/blocks/model_fetch: _model_fetch_hubs). A url source's files are the mirror's too, each by its
#: own checksum; a path source is on the node already.
SNAPSHOT_SOURCES = (*DEFAULT_REVISION, "git")
GITHUB = "https://github.com"
#: The source variables a mirror gives their default, and the path of each under the mirror.
SOURCE_PATHS = {"fleet_pip_index_url": "/pypi/simple/", "fleet_github_mirror": "/git/github.com",
                "fleet_artifact_base_url": "/artifacts/"}
#: The fleet's apt repository (Debian's reprepro builds it, signed with the site's key): the nodes' release,
#: Debian 12 (the roles' meta platforms, the lab's nodes), and its two components: the distribution's
#: packages (main) and those of the inventory's vendor repositories (vendor), which may carry a package
#: of the distribution's name at another version (one version of a name per component).
APT_DIR = "apt"
APT_RELEASE = "bookworm"
#: The C library of that release (libc6 2.36): the newest manylinux baseline its nodes' pip installs,
#: so the newest the mirror's pip resolution accepts (llguidance, which vLLM requires, ships
#: manylinux_2_31 wheels only).
APT_RELEASE_GLIBC = (2, 36)
APT_COMPONENTS = ("main", "vendor")
#: The repository's public key, ASCII-armored (what the hosts' apt checks its signature with).
APT_KEY = f"{APT_DIR}/vllm-fleet-mirror.asc"
#: Debian's name of each fleet_architecture (also the OCI platform's architecture of an image).
DEB_ARCH = {"x86_64": "amd64", "aarch64": "arm64"}
#: Container images: one OCI image layout per repository (``images/<repository>/``: oci-layout, index.json,
#: blobs/sha256/), each tag a reference in its index.json (skopeo's ``oci:images/<repository>:<tag>``). The
#: mirror host serves them read-only through its nginx at the registry API's ``/v2/``, from Debian's
#: docker-registry on loopback that it fills from the layouts (roles/services/mirror).
IMAGES_DIR = "images"


def url_host(address: str) -> str:
    return f"[{address}]" if ":" in address else address


def mirror_url(mirror_hosts, hostvars) -> str:
    """The URL of the fleet's mirror: the first host of the group `mirror`, at its cluster address (else
    its ansible_host) and its mirror_port (roles/services/mirror); "" without one."""
    hosts = list(mirror_hosts or [])
    if not hosts:
        return ""
    own = hostvars[hosts[0]]
    address = str(own.get("fleet_cluster_address") or own.get("ansible_host") or hosts[0])
    port = own.get("mirror_port") or role_default("mirror_port")
    return f"http://{url_host(address)}:{int(port)}"


def node_source(url: str, name: str, value):
    """What a node fetches `name` from: its place in the mirror at `url`, else the inventory's `value`."""
    if not url:
        return value
    return [] if name == "fleet_pip_extra_index_urls" else source_default(url, name)


def source_default(url: str, name: str):
    """What the source variable `name` defaults to with the mirror at `url` ("" or [] without one)."""
    if name == "fleet_container_registry":
        return registry(url)
    if name == "fleet_pip_trusted_hosts":
        # pip takes an index over plain HTTP only from a host it is told to trust.
        return [urlsplit(url).hostname] if url.startswith("http://") else []
    return url + SOURCE_PATHS[name] if url else ""


def apt_source(url: str) -> dict:
    """The deb822 source of the fleet's apt repository in the mirror at `url` (http://..., or file:<dir>
    on the mirror host itself) and the URL of its key: {uris, suites, components, key_url}; {} without one."""
    if not url:
        return {}
    return {"uris": [f"{url}/{APT_DIR}"], "suites": [APT_RELEASE], "components": list(APT_COMPONENTS),
            "key_url": f"{url}/{APT_KEY}"}


def registry(url: str) -> str:
    """The container registry of the mirror at `url`, as an image name's prefix (host:port: the mirror's
    nginx answers the registry API at /v2/); "" without one."""
    return urlsplit(url).netloc if url.startswith(("http://", "https://")) else ""


def image_path(repository: str) -> str:
    """Where an image repository's OCI layout is in the mirror: images/<repository>."""
    return f"{IMAGES_DIR}/{repository}"


def git_path(url: str) -> str:
    """Where a git URL's repository is in the mirror: git/<host>/<path>.git (its URL's place)."""
    parts = urlsplit(url)
    if not parts.scheme:  # scp-like user@host:path
        host, _, path = url.partition("@")[2].partition(":")
    else:
        host, path = parts.netloc.rpartition("@")[2], parts.path
    path = path.strip("/")
    return f"git/{host}/{path if path.endswith('.git') else path + '.git'}"


def artifact_path(entry: dict) -> str:
    """Where a matrix artifact or download is in the mirror: artifacts/<its file name>."""
    name = entry.get("file") or entry.get("canonical_url") or entry.get("url") or (entry.get("sources") or [""])[0]
    return "artifacts/" + str(name).rstrip("/").rsplit("/", 1)[-1]


def model_path(source: dict) -> str:
    """Where a model's snapshot is in the mirror, under the revision as the inventory names it: a hub's
    models/<org>/<name>/<revision>; a git source's models/git/<host>/<path without .git>/<revision, or HEAD>."""
    if source.get("type") == "git":
        parts = [p for p in git_path(str(source["url"])).removesuffix(".git").split("/") if p]
        return f"models/{'/'.join(parts)}/{source.get('revision') or GIT_HEAD}"
    return f"models/{source['repo']}/{source.get('revision') or DEFAULT_REVISION[source['type']]}"


def mirrored_sources(entry: dict, url: str, kind: str) -> list[str]:
    """The URLs a node fetches a matrix entry from: its place in the mirror when there is one, else
    its own sources (`kind`: git_source, download, artifact)."""
    if kind == "git_source":
        return [f"{url}/{git_path(str(entry['sources'][0]))}"] if url else list(entry.get("sources") or [])
    if kind == "download":
        return [f"{url}/{artifact_path(entry)}"] if url else list(entry.get("sources") or [])
    if kind == "artifact":
        return [f"{url}/{artifact_path(entry)}"] if url else [entry["url"]] if entry.get("url") else []
    raise ValueError(f"unknown kind of matrix entry {kind!r}: git_source, download or artifact")


def parse_sums(text: str) -> list[dict]:
    """The files of a model snapshot's ``<revision>.sha256`` (sha256sum's format): [{name, sha256}].
    A name that would leave the model's directory (absolute, ``..``) is refused: a node writes
    each file under its model's path."""
    files = []
    for number, line in enumerate(str(text).splitlines(), 1):
        if not line.strip():
            continue
        digest, sep, name = line.partition("  ")
        parts = name.split("/")
        if not sep or len(digest) != 64 or any(c not in "0123456789abcdef" for c in digest) or not name \
                or name.startswith("/") or any(p in ("", ".", "..") for p in parts):
            raise ValueError(f"line {number} is not '<sha256>  <relative path inside the model>': {line[:200]!r}")
        files.append({"name": name, "sha256": digest})
    return files
