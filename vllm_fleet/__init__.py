"""vllm-fleet: provision vLLM inference nodes with Ansible.

The Python API drives the project's playbooks through ansible-runner; the
``vllm-fleet`` command line wraps it. ``vllm_fleet.lab`` manages the local lab
of systemd-nspawn nodes that the test suite and the demo run against.
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
