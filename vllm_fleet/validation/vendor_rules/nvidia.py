"""The rules of NVIDIA nodes (seed 003: the driver from the distribution's packages, vLLM from PyPI) that a schema cannot express."""

from __future__ import annotations

import re

from vllm_fleet.validation.vendor_rules import vendor_rule


def _upstream_version(deb_version: str) -> str:
    """The upstream part of a Debian package version: 1:570.195.03-0ubuntu0.22.04.1 -> 570.195.03."""
    version = re.sub(r"^[0-9]+:", "", deb_version)
    return version.rsplit("-", 1)[0] if "-" in version else version


@vendor_rule("nvidia")
def _nvidia_driver_names_one_driver(doc: dict, models: list[dict]) -> list[str]:
    """Branch, version and package version of fleet_matrix.nvidia_driver must name the same driver.

    The role installs `packages` at `package_version` and gates on nvidia-smi reporting
    `version`: a package version of another driver would install, then fail the gate.
    """
    driver = (doc.get("fleet_matrix") or {}).get("nvidia_driver")
    if not isinstance(driver, dict):
        return []
    branch, version, package_version = driver.get("branch"), driver.get("version"), driver.get("package_version")
    packages = driver.get("packages") if isinstance(driver.get("packages"), list) else []
    problems = []
    if isinstance(branch, str) and isinstance(version, str) and not version.startswith(branch + "."):
        problems.append(f"fleet_matrix.nvidia_driver.version = {version!r} is not a driver of branch {branch!r}; "
                        f"accepted: a {branch}.x version, or branch {version.split('.')[0]!r} for this version")
    if isinstance(version, str) and isinstance(package_version, str) and _upstream_version(package_version) != version:
        where = f" (apt-cache policy {packages[0]})" if packages else ""
        problems.append(f"fleet_matrix.nvidia_driver.package_version = {package_version!r} installs driver "
                        f"{_upstream_version(package_version)}, not version {version!r}; accepted: the package version "
                        f"of driver {version} as your apt repository lists it{where}, e.g. {version}-0ubuntu0.22.04.1")
    return problems


@vendor_rule("nvidia")
def _nvidia_container_mode(doc: dict, models: list[dict]) -> list[str]:
    """Container mode pulls the vLLM OpenAI image of the matrix's release and needs the container toolkit."""
    matrix = doc.get("fleet_matrix") or {}
    container = doc.get("fleet_deploy_mode") == "container"
    problems = []
    if container and "nvidia_container_toolkit" not in matrix:
        problems.append("fleet_matrix.nvidia_container_toolkit is missing; container mode gives the GPUs to the "
                        "container through the NVIDIA Container Toolkit, so set {package_version} (e.g. \"1.17.8-1\")")
    image = matrix.get("vllm_image")
    if container and image is None:
        problems.append("fleet_matrix.vllm_image is missing; container mode runs the vLLM OpenAI image, so set "
                        "{repository, tag} (e.g. vllm/vllm-openai, v0.11.2)")
    version = str((matrix.get("vllm") or {}).get("version", "")) if isinstance(matrix.get("vllm"), dict) else ""
    tag = image.get("tag") if isinstance(image, dict) else None
    if isinstance(tag, str) and version and not re.search(rf"(?<![0-9.]){re.escape(version)}(?![0-9])", tag):
        problems.append(f"fleet_matrix.vllm_image.tag = {tag!r} does not name vLLM {version} (fleet_matrix.vllm.version), "
                        f"so containers would run another vLLM than host mode installs; accepted: the image of that "
                        f"release, e.g. v{version}")
    return problems
