"""What an inventory's nodes would fetch (the mirror's bill of materials), and nothing else.

Read from each host's rendered variables (vllm_fleet.inventory.host_vars):

- every ``fleet_matrix`` entry by the type its vendor's matrix schema declares for it
  (roles/vendors/<vendor>/meta/matrix.schema.yml): ``artifact`` (an installer or overlay, fetched from
  ``fleet_artifact_base_url`` or its own ``url``), ``download`` (a file tried from its sources, the
  tokenizer), ``git_source`` (a pinned commit), ``image`` (container mode only); an entry whose
  schema gives no type but the artifact's shape (sha256 with file or url, as MetaX's overlays) is an
  artifact too;
- the pip distributions of every virtualenv the roles create: the vendor contract's pins at the
  matrix's versions (vllm_fleet.release.pin_specs, as the install steps), the hub clients of the
  model sources the node uses (roles/blocks/model_fetch), vllm-router on router hosts (roles/services/router),
  resolved for the node's Python (the matrix's) and architecture (``fleet_architecture``);
- every model whose source is a hub (modelscope, huggingface) or a git repository (its checkout with
  the LFS files, the remote's HEAD unless it names a revision) at its revision, and the files of a
  ``url`` source with their checksums;
- the distribution packages the roles install with apt on each host (``APT_SETS``: by the groups the
  host is in), and a vendor's packages from the inventory's apt repositories at the matrix's version
  (its contract's ``apt_sets``), one set per host resolved with its dependencies for the node's architecture
  (vllm_fleet.mirror.apt), unless ``fleet_mirror_apt`` is false.

Sources are the host's own: what its inventory says the nodes would use (a GitHub proxy in
``fleet_github_mirror``, the hub endpoints of ``fleet_hub``, ``fleet_pip_index_url``), so the
connected machine fetches through the same doors. Each item records which host and variable
want it, for the summary and for the refusals that name what is missing.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass, field
from functools import cache

import yaml

from vllm_fleet import models, release, vendors
from vllm_fleet.mirror.layout import (
    APT_DIR,
    APT_RELEASE,
    APT_RELEASE_GLIBC,
    DEB_ARCH,
    DEFAULT_REVISION,
    GIT_HEAD,
    GITHUB,
    artifact_path,
    git_path,
    model_path,
)
from vllm_fleet.project import role_dir
from vllm_fleet.role_specs import role_default

#: The variables of a host the bill is read from (rendered, as a play sees them).
KEYS = ("groups", "fleet_accelerator", "fleet_matrix", "fleet_models", "fleet_deploy_mode", "fleet_architecture",
        "fleet_artifact_base_url", "fleet_github_mirror", "fleet_pip_index_url", "fleet_pip_extra_index_urls",
        "fleet_pip_trusted_hosts", "fleet_hub", "fleet_container_registry", "fleet_container_runtime",
        "fleet_system_python", "fleet_mirror_apt")


@dataclass(frozen=True)
class AptSet:
    """Distribution packages a role installs with apt on the hosts of `groups`: the names a role option
    lists (its value on the host, else the role's default), the names the role's tasks list themselves,
    or the node's vendor contract's ``packages``."""

    role: str                          # roles/<layer>/<role> that installs them
    groups: tuple[str, ...]            # the hosts it installs them on
    option: str = ""
    names: tuple[str, ...] = ()
    contract: bool = False
    recommends: bool = True            # the task takes their Recommends (apt's default), or install_recommends: false
    when: str = ""                     # only where the inventory has hosts in this group (the role runs only then)
    deploy_mode: str = ""              # only on nodes in this fleet_deploy_mode
    runtime: str = ""                  # only on nodes whose fleet_container_runtime is this


#: Every apt package a role installs from the distribution, by the hosts it installs it on: with the
#: vendor contracts' `apt_sets`, the one list of the fleet's apt repository. tests/unit/test_mirror_apt.py
#: reads every `ansible.builtin.apt` task of the roles and fails on a package, or a role option, that this
#: list does not know. A package installed only when an option asks for it (the waves' downloader, the
#: router's chat page) is listed for every host of the group: the mirror holds it before the option is
#: turned on.
APT_SETS = (
    AptSet("stages/node_base", ("fleet",), option="node_base_packages"),
    AptSet("stages/node_base", ("fleet",), contract=True),            # node_base's vars: + fleet_vendor.packages
    AptSet("blocks/model_fetch", ("fleet",), names=("aria2", "nginx-light")),   # tools.yml, share.yml (waves)
    AptSet("services/monitoring", ("fleet", "monitoring"), option="monitoring_node_exporter_packages",
           recommends=False, when="monitoring"),
    AptSet("services/monitoring", ("monitoring",), option="monitoring_prometheus_packages", recommends=False),
    AptSet("services/router", ("router",), option="router_packages"),
    AptSet("services/router", ("router",), names=("python3-venv", "nginx-light")),  # the pools' venv, the page
    AptSet("services/mirror", ("mirror",), option="mirror_packages"),
    # The container engine of the nodes in container mode, by their fleet_container_runtime (tasks/engine.yml).
    AptSet("blocks/container_image", ("fleet",), option="container_image_podman_packages", deploy_mode="container",
           runtime="podman"),
    AptSet("blocks/container_image", ("fleet",), option="container_image_docker_packages", deploy_mode="container",
           runtime="docker"),
    # Installed only when the mirror holds images (tasks/registry.yml): listed for every mirror host.
    AptSet("services/mirror", ("mirror",), option="mirror_registry_packages"),
    # Ansible's apt module installs python3-apt itself on a host that lacks it, before any role's package.
    AptSet("ansible.builtin.apt", ("fleet", "router", "monitoring", "mirror"), names=("python3-apt",)),
)


def vendor_apt_sets() -> list[tuple[str, dict]]:
    """(vendor, set) of every vendor contract's `apt_sets`: the packages its roles install from the
    inventory's apt repositories (roles/blocks/apt_packages), {role, matrix, repositories, names_var,
    deploy_modes}: the role that does, the matrix entry with `package_version` (and `packages`, unless the
    role's vars list `names_var`), the role option naming the repositories (the sync's door; with the
    mirror the nodes take them from it), and in which deploy modes (all, unless said)."""
    return [(vendor, dict(s)) for vendor in vendors.VENDORS for s in vendors.contract(vendor)["apt_sets"]]


#: The host variables the apt sets read, beside KEYS.
APT_KEYS = tuple(dict.fromkeys([s.option for s in APT_SETS if s.option]
                               + [s["repositories"] for _, s in vendor_apt_sets()]))
KEYS = KEYS + APT_KEYS

#: Hub clients per model source type, as roles/blocks/model_fetch installs them ({distribution: matrix key}).
HUB_CLIENTS = {"modelscope": {"modelscope": "modelscope", "modelscope-hub": "modelscope_hub"},
               "huggingface": {"huggingface_hub": "huggingface_hub"}}


def platform_tags(arch: str, glibc: tuple[int, int] = APT_RELEASE_GLIBC) -> list[str]:
    """pip's platform tags on a node of `arch` whose C library is `glibc`, newest baseline first, as pip
    lists them there (PEP 600's manylinux_2_N down to manylinux_2_17 on aarch64, manylinux_2_5 on
    x86_64, with the legacy aliases manylinux2014, manylinux2010 and manylinux1, then linux_<arch>).
    Written here because pip's own list (packaging.tags) is the running machine's, not the nodes'."""
    major, newest = glibc
    oldest = 5 if arch == "x86_64" else 17
    legacy = {17: "manylinux2014", 12: "manylinux2010", 5: "manylinux1"}
    tags = []
    for minor in range(newest, oldest - 1, -1):
        tags.append(f"manylinux_{major}_{minor}_{arch}")
        if minor in legacy:
            tags.append(f"{legacy[minor]}_{arch}")
    return [*tags, f"linux_{arch}"]


#: pip's platform tags for a node's architecture on the mirror's release.
PLATFORM_TAGS = {arch: platform_tags(arch) for arch in ("x86_64", "aarch64")}


@dataclass
class Item:
    """One thing the mirror holds. ``key`` is its identity (and, for files, where it lands)."""

    kind: str                      # artifact | git | pip | model | image | deb
    key: str
    sources: list[str] = field(default_factory=list)
    sha256: str = ""               # artifact: its checksum; image: the manifest digest the matrix pins (hex)
    ref: str = ""                  # git: commit or tag; model: revision; image: tag
    specs: list[str] = field(default_factory=list)   # pip: the requirements resolved together; deb: the packages
    python: str = ""               # pip: the nodes' Python (major.minor)
    arch: str = ""                 # pip, deb: the nodes' architecture; image: theirs ("": every one)
    index: dict = field(default_factory=dict)        # pip: index_url, extra_index_urls...; git: github_mirror;
    #                                                  deb: without_recommends, repositories
    hub: str = ""                  # model: modelscope | huggingface | git | url
    files: list[dict] = field(default_factory=list)  # model of a url source: [{name, sha256}]
    size_hint: int = 0             # bytes the inventory declares (a model's size_gb), when nothing else says
    wanted_by: list[str] = field(default_factory=list)

    def want(self, who: str) -> None:
        if who not in self.wanted_by:
            self.wanted_by.append(who)


@dataclass
class Bill:
    items: dict[str, Item] = field(default_factory=dict)
    #: What the inventory asks for that a mirror cannot hold (a node-local path), with why.
    skipped: list[str] = field(default_factory=list)

    def add(self, item: Item, who: str) -> Item:
        known = self.items.setdefault(f"{item.kind}:{item.key}", item)
        if known is not item:
            _merge(known, item, who)
        known.want(who)
        return known

    def of(self, kind: str) -> list[Item]:
        return [i for i in self.items.values() if i.kind == kind]


def _merge(known: Item, item: Item, who: str) -> None:
    if known.kind == "artifact" and item.sha256 != known.sha256:
        raise BillError(f"{who}: the file {known.key} is wanted with two checksums ({known.wanted_by[0]}: "
                        f"{known.sha256}, here: {item.sha256}); a mirror holds one file of a name")
    if known.kind == "image":
        if item.sha256 != known.sha256:
            raise BillError(f"{who}: the image {known.key} is wanted with two digests ({known.wanted_by[0]}: "
                            f"{known.sha256 or 'none'}, here: {item.sha256 or 'none'}); a mirror holds one image "
                            "of a tag")
        if item.arch != known.arch:
            known.arch = ""  # nodes of two architectures: every platform of the image
    for src in item.sources:
        if src not in known.sources:
            known.sources.append(src)


class BillError(ValueError):
    """The inventory asks the mirror for two different things under one name."""


def _join(base: str, name: str) -> str:
    return base.rstrip("/") + "/" + name


def via_github_mirror(url: str, github_mirror: str) -> list[str]:
    """The URL to fetch a GitHub URL from: through the inventory's GitHub proxy when it names one (as
    the nodes' builds are rewritten to use it: a site with a proxy may have no other way out)."""
    if github_mirror and url.startswith(GITHUB + "/"):
        return [github_mirror.rstrip("/") + url[len(GITHUB):]]
    return [url]


def _schema_kinds(node: dict | None) -> set[str]:
    """The $defs a matrix entry's schema names at its own level (through allOf/anyOf/oneOf)."""
    if not isinstance(node, dict):
        return set()
    kinds = set()
    ref = node.get("$ref", "")
    if ref.startswith("#/$defs/"):
        kinds.add(ref.rsplit("/", 1)[1])
    for key in ("allOf", "anyOf", "oneOf"):
        for sub in node.get(key) or []:
            kinds |= _schema_kinds(sub)
    props = node.get("properties") or {}
    if not kinds and "sha256" in props and ("file" in props or "url" in props):
        kinds.add("artifact")  # an artifact's shape without the $ref (MetaX's overlays)
    return kinds


def matrix_entries(vendor: str, matrix: dict):
    """(path, kind, value) of every matrix entry of a fetched type, walking lists by their items' schema."""
    schema = vendors.matrix_schema(vendor) or {}
    for key, value in (matrix or {}).items():
        sub = (schema.get("properties") or {}).get(key)
        yield from _walk(f"fleet_matrix.{key}", sub, value)


def _walk(path: str, node, value):
    if isinstance(value, list) and isinstance(node, dict) and isinstance(node.get("items"), dict):
        for index, element in enumerate(value):
            yield from _walk(f"{path}[{index}]", node["items"], element)
        return
    kinds = _schema_kinds(node) & {"artifact", "download", "git_source", "image"}
    if kinds and isinstance(value, dict):
        yield path, kinds.pop(), value


def platform_of(host_vars: dict) -> str:
    return str(host_vars.get("fleet_architecture") or role_default("fleet_architecture"))


def system_python_of(host_vars: dict) -> str:
    """The node's own Python (fleet_system_python, roles/stages/fleet's default where the inventory says none)."""
    return str(host_vars.get("fleet_system_python") or role_default("fleet_system_python"))


def python_of(matrix: dict) -> str:
    """The matrix's Python as major.minor (pip's --python-version): "3.11.13" -> "3.11"."""
    version = str((matrix or {}).get("python") or "")
    match = re.match(r"^(\d+)\.(\d+)", version)
    return f"{match[1]}.{match[2]}" if match else ""


def bill_of_materials(hosts: dict[str, dict]) -> Bill:
    """Everything the hosts (name -> rendered variables, KEYS) would fetch."""
    bill = Bill()
    for name, hv in hosts.items():
        groups = hv.get("groups") or {}
        matrix = hv.get("fleet_matrix") or {}
        accel = hv.get("fleet_accelerator") or {}
        vendor = accel.get("vendor") if isinstance(accel, dict) else None
        system = system_python_of(hv)
        if name in (groups.get("fleet") or []) and vendor in vendors.VENDORS:
            _vendor_entries(bill, name, hv, vendor, matrix)
            # The vendor's venv at the matrix's Python (a vendor that brings its own environment,
            # as Moore Threads' AIModule, pins nothing; Ray only on a span's members); the hub
            # clients' venv at the node's own.
            pins = vendors.pins(vendor, models.spans_node(hv.get("fleet_models"), name))
            _pip(bill, f"{name}: {vendor}'s pins", hv, python_of(matrix) or system, release.pin_specs(pins, matrix))
            _pip(bill, f"{name}: the hub clients", hv, system, _models(bill, name, hv, matrix))
        if name in (groups.get("router") or []) and isinstance(matrix.get("vllm_router"), dict):
            # roles/services/router installs vllm-router into its own venv (the node's Python), at the matrix's version.
            _pip(bill, f"{name}: fleet_matrix.vllm_router", hv, system,
                 [f"vllm-router=={matrix['vllm_router']['version']}"])
        _debs(bill, name, hv, vendor, matrix)
    return bill


def apt_enabled(hv: dict) -> bool:
    """Whether the host's distribution packages come from the fleet's mirror (fleet_mirror_apt)."""
    return bool(hv["fleet_mirror_apt"] if "fleet_mirror_apt" in hv else role_default("fleet_mirror_apt"))


@cache
def _role_var(role: str, name: str):
    """A plain (untemplated) variable of a role's vars/main.yml."""
    return (yaml.safe_load((role_dir(role.rsplit("/", 1)[-1]) / "vars" / "main.yml").read_text()) or {})[name]


def apt_packages(host: str, hv: dict, vendor: str | None,
                 matrix: dict) -> tuple[list[str], list[str], list[dict], list[str]]:
    """What the roles install with apt on `host`: (packages with their Recommends, packages without,
    the vendor's apt repositories, the variables they come from)."""
    groups = hv.get("groups") or {}
    member = {g for g, hosts in groups.items() if host in (hosts or [])}
    fleet = "fleet" in member and vendor in vendors.VENDORS
    with_rec: set[str] = set()
    without: set[str] = set()
    whence: list[str] = []
    mode = hv.get("fleet_deploy_mode") or role_default("fleet_deploy_mode")
    runtime = hv.get("fleet_container_runtime") or role_default("fleet_container_runtime")
    for row in APT_SETS:
        if not member & set(row.groups) or (row.when and not groups.get(row.when)) \
                or (row.deploy_mode and row.deploy_mode != mode) or (row.runtime and row.runtime != runtime):
            continue
        if row.contract:
            names = vendors.contract(vendor)["packages"] if fleet else []
            if isinstance(names, str):
                raise BillError(f"{host}: {vendor}'s contract lists its packages as a template ({names}); "
                                "the mirror reads a plain list")
            source = f"{vendor}'s contract"
        elif row.option:
            names = hv[row.option] if row.option in hv else role_default(row.option)
            source = row.option
        else:
            names, source = row.names, row.role
        if names:
            (with_rec if row.recommends else without).update(str(n) for n in names)
            whence.append(source)
    repositories: list[dict] = []
    for owner, row in vendor_apt_sets():
        entry = matrix.get(row["matrix"])
        if not fleet or vendor != owner or mode not in row.get("deploy_modes", [mode]) \
                or not isinstance(entry, dict) or not entry.get("package_version"):
            continue
        names = _role_var(row["role"], row["names_var"]) if row.get("names_var") else entry.get("packages") or []
        with_rec.update(f"{n}={entry['package_version']}" for n in names)
        option = row["repositories"]
        for repository in hv[option] if option in hv else role_default(option):
            if repository not in repositories:
                repositories.append(repository)
        whence.append(f"fleet_matrix.{row['matrix']}")
    return sorted(with_rec), sorted(without - with_rec), repositories, whence


def _debs(bill: Bill, host: str, hv: dict, vendor: str | None, matrix: dict) -> None:
    if not apt_enabled(hv):
        return
    with_rec, without, repositories, whence = apt_packages(host, hv, vendor, matrix)
    if with_rec or without:
        bill.add(deb_item(with_rec, without, platform_of(hv), repositories),
                 f"{host}: the distribution's packages ({', '.join(whence)})")


def deb_item(packages: list[str], without_recommends: list[str], arch: str, repositories: list[dict]) -> Item:
    """One host's apt packages, resolved together with their dependencies for the nodes' release and
    architecture from the distribution and `repositories`; named by them (hosts alike share it)."""
    what = json.dumps([arch, packages, without_recommends, repositories], sort_keys=True)
    digest = hashlib.sha256(what.encode()).hexdigest()[:12]
    return Item("deb", f"{APT_DIR}/{APT_RELEASE}-{DEB_ARCH.get(arch, arch)}-{digest}", specs=list(packages), arch=arch,
                index={"without_recommends": list(without_recommends), "repositories": list(repositories)})


def _vendor_entries(bill: Bill, host: str, hv: dict, vendor: str, matrix: dict) -> None:
    base = str(hv.get("fleet_artifact_base_url") or "")
    github = str(hv.get("fleet_github_mirror") or "")
    container = hv.get("fleet_deploy_mode") == "container"
    for path, kind, value in matrix_entries(vendor, matrix):
        who = f"{host}: {path}"
        if kind == "artifact":
            if value.get("path"):
                bill.skipped.append(f"{who}: a file already on the node ({value['path']}): not mirrored")
                continue
            url = value.get("url") or (_join(base, value["file"]) if base and value.get("file") else "")
            if not url:
                bill.skipped.append(f"{who}: {value.get('file')} has no source: fleet_artifact_base_url is empty")
                continue
            bill.add(Item("artifact", artifact_path(value), sources=[url], sha256=value["sha256"]), who)
        elif kind == "download":
            sources = [str(s) for s in value.get("sources") or []]
            bill.add(Item("artifact", artifact_path(value), sources=sources, sha256=value["sha256"]), who)
        elif kind == "git_source":
            sources = [u for s in value.get("sources") or [] for u in via_github_mirror(str(s), github)]
            # The venv the source is installed into: its build and requirements are resolved for it.
            bill.add(Item("git", f"{git_path(str(value['sources'][0]))}@{value['commit']}", sources=sources,
                          ref=value["commit"], python=python_of(matrix) or system_python_of(hv),
                          arch=platform_of(hv), index={"github_mirror": github, **pip_index(hv)}), who)
        elif kind == "image" and container:
            registry = str(hv.get("fleet_container_registry") or "").rstrip("/")
            ref = f"{value['repository']}:{value['tag']}"
            digest = str(value.get("digest") or "").removeprefix("sha256:")
            bill.add(Item("image", ref, sources=[f"{registry}/{ref}" if registry else ref], ref=value["tag"],
                          sha256=digest, arch=platform_of(hv)), who)


def _models(bill: Bill, host: str, hv: dict, matrix: dict) -> list[str]:
    """Add the host's hub, git and url models; return the hub clients' pins its model fetch installs."""
    hub = hv.get("fleet_hub") or {}
    types = set()
    fetched = []
    for index, model in enumerate(hv.get("fleet_models") or []):
        if not isinstance(model, dict) or model.get("state") == "absent" or model.get("enabled") is False:
            continue
        fetched.append((f"fleet_models[{index}]", model))
        # A model's LoRA adapters come from sources of their own (roles/blocks/model_fetch fetches them too).
        for number, adapter in enumerate(model.get("lora_adapters") or []):
            if isinstance(adapter, dict):
                fetched.append((f"fleet_models[{index}].lora_adapters[{number}]", adapter))
    for where, model in fetched:
        source = model.get("source") or {}
        kind = source.get("type")
        who = f"{host}: {where} ({model.get('name')})"
        size = int(float(model.get("size_gb") or 0) * 1e9)
        if kind in DEFAULT_REVISION:
            types.add(kind)
            endpoint = str(hub.get("hf_endpoint" if kind == "huggingface" else "modelscope_endpoint") or "")
            revision = str(source.get("revision") or DEFAULT_REVISION[kind])
            bill.add(Item("model", model_path(source), sources=[endpoint], ref=revision, hub=kind,
                          size_hint=size), who)
        elif kind == "url":
            files = [{"name": f["name"], "sha256": f["sha256"]} for f in source.get("files") or []]
            bill.add(Item("model", f"models/{model.get('name')}", sources=[str(source.get("url"))], hub="url",
                          files=files, size_hint=size), who)
        elif kind == "git":
            # The repository's checkout at the revision (the remote's HEAD when it names none), its LFS
            # files whole: a snapshot like a hub's, from the one URL the inventory names.
            bill.add(Item("model", model_path(source), sources=[str(source["url"])],
                          ref=str(source.get("revision") or GIT_HEAD), hub="git", size_hint=size), who)
        elif kind == "path":
            bill.skipped.append(f"{who}: a path source is on the node already: not mirrored")
    pins = {dist: key for kind in sorted(types) for dist, key in HUB_CLIENTS[kind].items() if key in matrix}
    return release.pin_specs(pins, matrix)


def _pip(bill: Bill, who: str, hv: dict, python: str, specs: list[str]) -> None:
    """One virtualenv's distributions for the node's Python and architecture: each pin resolved
    with what it requires, on its own. The vendors install their pins in steps (MetaX's vLLM, then
    its torch over vLLM's; vLLM's sources, then Ascend's torch again), which no single resolution of
    the whole set reproduces; the mirror holds what every step takes. Hosts share the items."""
    for spec in specs:
        bill.add(pip_item([spec], python, platform_of(hv), pip_index(hv)), who)


def pip_index(hv: dict) -> dict:
    """The pip index a host's inventory names (the door the connected machine resolves through)."""
    return {"index_url": str(hv.get("fleet_pip_index_url") or ""),
            "extra_index_urls": [str(u) for u in hv.get("fleet_pip_extra_index_urls") or []],
            "trusted_hosts": [str(h) for h in hv.get("fleet_pip_trusted_hosts") or []]}


def pip_item(specs: list[str], python: str, arch: str, index: dict) -> Item:
    """One set of requirements resolved together for a Python and architecture; named by them."""
    specs = sorted(set(specs))
    digest = hashlib.sha256("\n".join([python, arch, *specs]).encode()).hexdigest()[:12]
    return Item("pip", f"pypi/cp{python.replace('.', '')}-{arch}-{digest}", specs=specs, python=python, arch=arch,
                index={k: v for k, v in index.items() if k != "github_mirror"})
