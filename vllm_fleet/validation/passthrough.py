"""Option lists passed through to a program: they add to what vllm-fleet renders, never undo a rule.

Two role variables hand options to a program as given: `ray_cluster_start_options` to every
member's `ray start`, and `vllm_service_container.options` to `docker|podman run` in container
mode. Appended after what vllm-fleet sets, such an option would win over it, and reopen what
the rules closed: Ray's dashboard on every interface, its worker ports outside the port
registry, a container with every privilege (vllm_service_container_privileged is the switch),
on the host's network (the engine inside listens on every interface, past the model's
`listen`), or its own port publishing. The options each program keeps to vllm-fleet are listed
once (vllm_fleet.cluster.RAY_GOVERNED_OPTIONS, CONTAINER_GOVERNED_OPTIONS below); `vllm serve`'s
own flags are judged by vLLM's parser and the serve rules (serve.py: host, port, api_key).
"""

from __future__ import annotations

from vllm_fleet.cluster import governed_options
from vllm_fleet.validation.problem import Problem

#: `<runtime> run` options vllm-fleet sets or keeps behind a rule (vllm_fleet.render.container_argv).
CONTAINER_GOVERNED_OPTIONS = ("--privileged", "--cap-add", "--network", "--net", "--pid", "--userns", "--uts",
                              "-p", "--publish", "-P", "--publish-all", "--name", "--rm", "--env-file", "--gpus",
                              "--device", "--restart", "-d", "--detach")


def _container_governed(options: list) -> list[str]:
    out = []
    for option in options:
        if not isinstance(option, str):
            continue
        name = option.split("=", 1)[0].strip()
        if name in CONTAINER_GOVERNED_OPTIONS or (name.startswith("--cap-add") and name != "--cap-drop"):
            out.append(option)
    return out


def passthrough_problems(host_vars: dict) -> list[str]:
    problems = []
    options = host_vars.get("ray_cluster_start_options")
    if isinstance(options, list):
        for option in governed_options(options):
            problems.append(str(Problem(("ray_cluster_start_options",), option, "is an option vllm-fleet sets or "
                                        "keeps behind a rule (the member's address, the dashboard off, the worker "
                                        "ports the registry holds, the session directory)",
                                        "other `ray start` options (e.g. --object-spilling-directory); the worker "
                                        "ports through the model's span.worker_ports")))
    container = host_vars.get("vllm_service_container")
    options = container.get("options") if isinstance(container, dict) else None
    if isinstance(options, list):
        for option in _container_governed(options):
            problems.append(str(Problem(("vllm_service_container", "options"), option, "is a run option vllm-fleet "
                                        "sets or keeps behind a rule (privileges: vllm_service_container_privileged; "
                                        "the network and published port: the model's listen and port; devices: "
                                        "device_pattern and control_devices)",
                                        "other run options, e.g. --ipc=host, --shm-size 16g, --ulimit memlock=-1")))
    return problems
