"""vllm-fleet: provision vLLM inference nodes with Ansible.

The Python API drives the project's playbooks through ansible-runner; the
``vllm-fleet`` command line wraps it.

The package is layered. Each numbered line below is a layer, bottom up, naming its modules (a
package with everything in it; an aside in parentheses names none): a module imports only from
its own layer or those below, never round in a circle. tests/unit/test_layers.py reads this list
and enforces it, every import statement counted (inside functions and under TYPE_CHECKING too),
and fails on a module the list does not name.

0. pure helpers: ``project``, ``plain``, ``exit_codes``, ``render``, ``state``, ``release``, ``secrets``;
1. project data: ``vendors`` (the vendor list and contracts), ``models``, ``cluster``, ``role_specs``;
2. domain: ``validation`` (one module per class of value, ``vendor_rules/<vendor>``), ``router``,
   ``monitoring``, ``inventory`` (the one reader of an inventory's hosts and variables), ``mirror`` (the
   fleet's own mirror: its layout, an inventory's bill of materials, the sync), ``plans`` (the plan's
   directory and files), ``distribution`` (a model revision to many nodes in
   waves, from the mirror and from peers);
3. features: ``live_status``, ``bench``, ``canary``;
4. surfaces: ``api``, which the package itself, ``vllm_fleet``, re-exports, and ``cli``.

Above the product stand two packages of their own, outside its wheel, that nothing in it imports
(tests/unit/test_packaging.py): the lab simulator ``vllm_fleet_lab`` (lab/), the local lab of
systemd-nspawn nodes that the test suite and the demo run against, whose ``vllm-fleet lab``
reaches the command line through the entry point group ``vllm_fleet.commands``; and the
developer tools ``vllm_fleet_dev`` (dev/: ``argcheck``, the pinned vLLM releases' own parsers).
"""

from vllm_fleet.project import PROJECT_DIR

__version__ = "0.1.0"

_API = ("CanaryRollout", "EXIT_FAILED", "EXIT_INVALID_INVENTORY", "EXIT_OK", "EXIT_UNREACHABLE", "HostResult",
        "PlanResult", "RunResult", "TaskFailure", "canary_rollout", "doctor", "plan", "provision", "rollback",
        "rollout", "status", "verify")


def __getattr__(name: str):
    # The API is imported on first use (PEP 562): the filter plugins import vllm_fleet's
    # models and rendering in every Ansible worker, which must not pay for ansible-runner.
    if name in _API:
        from vllm_fleet import api  # noqa: PLC0415 - PEP 562: loaded on first use

        return getattr(api, name)
    raise AttributeError(f"module 'vllm_fleet' has no attribute {name!r}")


__all__ = ["PROJECT_DIR", "provision", "doctor", "verify", "plan", "rollback", "rollout", "canary_rollout", "status",
           "RunResult", "HostResult", "TaskFailure", "PlanResult", "CanaryRollout", "EXIT_OK", "EXIT_FAILED",
           "EXIT_UNREACHABLE", "EXIT_INVALID_INVENTORY"]
