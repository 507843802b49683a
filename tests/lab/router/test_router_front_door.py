"""The front door on the router lab (after test_router.py, before the rollouts): a key per team
at the endpoint, the vLLM project's router (vllm-router from the lab's pip index, policy
cache_aware) holding the model's pool behind HAProxy, and the chat page's server (nginx; the
page itself, in a real browser, is tested against the real CPU engine: molecule/cpu/tests). At
the end the router goes back to HAProxy's own policy, no team keys and no page, as the rollout
tests expect."""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request

import pytest
import yaml

from tests.lab.conftest import answer_text
from tests.lab.router.conftest import (
    LAB,
    MODEL,
    NODES,
    ROUTER,
    UNIT,
    WORK,
    Client,
    answered,
    delta,
    engine_args,
    flag,
    host_vars,
    playbook,
    set_host_vars,
    vllm_fleet,
)

TEAMS = [{"name": "team-a", "key": "team-a-0123456789abcdef"},
         {"name": "team-b", "key": "team-b-0123456789abcdef", "requests_per_minute": 3}]
ROUTER_VARS = ("router_models", "router_metrics_port", "router_page_port")


def post(port: int, key: str | None, body: dict | None = None, timeout: float = 30) -> tuple[int, dict]:
    body = body or {"model": MODEL, "messages": [{"role": "user", "content": "who are you"}], "max_tokens": 8}
    headers = {"Content-Type": "application/json", **({"Authorization": f"Bearer {key}"} if key else {})}
    request = urllib.request.Request(f"http://127.0.0.1:{port}/v1/chat/completions", data=json.dumps(body).encode(),
                                     headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=timeout) as answer:
            return answer.status, json.loads(answer.read())
    except urllib.error.HTTPError as err:
        raw = err.read()
        try:
            return err.code, json.loads(raw or b"{}")
        except ValueError:
            return err.code, {"raw": raw.decode(errors="replace")}


def metrics(port: int, path: str = "/metrics") -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=10) as answer:
        return answer.read().decode()


@pytest.fixture(scope="module")
def front_door(routed):
    """The router with team keys (given as a secrets file, -e @FILE) and a cache_aware pool."""
    from vllm_fleet_lab.paths import lab_paths

    lab_api, port = routed
    paths = lab_paths(LAB)
    ports = {"pool": paths.service_port(2, 1), "pool_metrics": paths.service_port(2, 2),
             "metrics": paths.service_port(2, 3), "page": paths.service_port(2, 4)}
    before = {name: host_vars(ROUTER).get(name) for name in ROUTER_VARS}
    secrets = WORK / "router-secrets.yml"
    secrets.write_text(yaml.safe_dump({"router_api_keys": TEAMS}))
    set_host_vars(ROUTER, router_metrics_port=ports["metrics"], router_page_port=ports["page"], router_models=[
        {"name": MODEL, "port": port, "policy": "cache_aware", "pool_port": ports["pool"],
         "metrics_port": ports["pool_metrics"]}])
    start = time.monotonic()
    proc = playbook("-l", ROUTER, "-e", f"@{secrets}")
    print(f"\nsite.yml -l {ROUTER} with a vllm-router pool and team keys: {time.monotonic() - start:.1f} s")
    assert proc.returncode == 0, proc.stdout[-5000:] + proc.stderr[-2000:]
    for team in TEAMS:
        assert team["key"] not in proc.stdout + proc.stderr
    yield lab_api, port, ports, secrets
    set_host_vars(ROUTER, **before)
    proc = playbook("-l", ROUTER)
    assert proc.returncode == 0, proc.stdout[-5000:] + proc.stderr[-2000:]
    # Without team keys, the teams' counters are gone with them.
    assert lab_api.run(LAB, ROUTER, "ls /etc/haproxy/vllm-fleet-teams.lua 2>/dev/null || true").strip() == ""


def test_unknown_and_missing_keys_get_401(front_door):
    _, port, _, _ = front_door
    for key in (None, "not-a-team-key-0123456789"):
        status, body = post(port, key)
        assert status == 401 and "unknown API key" in body["error"]["message"], (status, body)


def test_a_team_key_reaches_both_engines_through_the_pool(front_door):
    lab_api, port, ports, _ = front_door
    before = answered(lab_api)
    for i in range(8):
        # Different prompts: cache_aware spreads what shares no prefix by load.
        status, body = post(port, TEAMS[0]["key"], {"model": MODEL, "max_tokens": 8,
                                                    "messages": [{"role": "user", "content": f"{i} " * (i + 1)}]})
        assert status == 200 and answer_text(body), body
    spread = delta(before, answered(lab_api))
    assert sum(spread.values()) == 8, spread
    text = metrics(ports["pool_metrics"])
    assert 'vllm_router_policy_decisions_total{policy="cache_aware"' in text
    # The pool's unit runs sandboxed, under an account made for the run.
    unit = f"vllm-fleet-router-model_{MODEL}"
    show = lab_api.run(LAB, ROUTER, f"systemctl show -p DynamicUser -p ActiveState -p NoNewPrivileges {unit}")
    assert "DynamicUser=yes" in show and "ActiveState=active" in show and "NoNewPrivileges=yes" in show


def test_a_team_over_its_limit_gets_429_alone(front_door):
    _, port, ports, _ = front_door
    codes = [post(port, TEAMS[1]["key"])[0] for _ in range(5)]
    assert codes[:3] == [200, 200, 200] and set(codes[3:]) == {429}, codes
    assert post(port, TEAMS[0]["key"])[0] == 200  # the other team is not limited
    teams = metrics(ports["metrics"], "/metrics/teams")
    counts = {line.split('"')[1]: float(line.split()[-1]) for line in teams.splitlines()
              if line.startswith("vllm_fleet_router_team_requests_total{")}
    assert counts.get("team-b") == 5 and counts.get("team-a", 0) >= 9, teams
    assert "haproxy_frontend_http_requests_total" in metrics(ports["metrics"])


def test_a_stopped_engine_is_ejected_by_the_pool(front_door):
    lab_api, port, _, _ = front_door
    lab_api.run(LAB, "nvidia-01", f"systemctl stop {UNIT}")
    try:
        codes = [post(port, TEAMS[0]["key"], {"model": MODEL, "max_tokens": 4, "messages": [
            {"role": "user", "content": f"q{i}"}]})[0] for i in range(6)]
        assert codes == [200] * 6, codes
    finally:
        lab_api.run(LAB, "nvidia-01", f"systemctl start {UNIT}")


def test_drain_and_ready_through_the_pool(front_door):
    lab_api, port, ports, secrets = front_door
    # nvidia-01 is back (previous test): the pool's health check finds both engines healthy,
    # and its circuit for nvidia-01 (open since the stop) is past its timeout.
    deadline = time.monotonic() + 90
    while True:
        health = [line for line in metrics(ports["pool_metrics"]).splitlines()
                  if line.startswith("vllm_router_worker_health{")]
        if len(health) == 2 and all(line.endswith(" 1") for line in health):
            break
        assert time.monotonic() < deadline, health
        time.sleep(1)
    time.sleep(4)  # the circuit's timeout: router_check_interval 1 s x router_check_rise 2, and a margin
    proc = playbook("-e", f"router_drain_model={MODEL}", "-e", "router_drain_node=nvidia-02", "-e", f"@{secrets}",
                    playbook="playbooks/router-drain.yml")
    assert proc.returncode == 0, proc.stdout[-4000:]
    listed = json.loads(lab_api.run(LAB, ROUTER, f"curl -s http://127.0.0.1:{ports['pool']}/list_workers"))
    assert len(listed["urls"]) == 1, listed
    before = answered(lab_api)
    for i in range(4):
        assert post(port, TEAMS[0]["key"], {"model": MODEL, "max_tokens": 4, "messages": [
            {"role": "user", "content": f"d{i}"}]})[0] == 200
    assert delta(before, answered(lab_api))["nvidia-02"] == 0
    proc = playbook("-e", f"router_drain_model={MODEL}", "-e", "router_drain_node=nvidia-02", "-e",
                    "router_drain_state=ready", "-e", f"@{secrets}", playbook="playbooks/router-drain.yml")
    assert proc.returncode == 0, proc.stdout[-4000:]
    listed = json.loads(lab_api.run(LAB, ROUTER, f"curl -s http://127.0.0.1:{ports['pool']}/list_workers"))
    assert len(listed["urls"]) == 2, listed


def test_a_second_run_changes_nothing(front_door):
    _, _, _, secrets = front_door
    proc = playbook("-l", ROUTER, "-e", f"@{secrets}")
    assert proc.returncode == 0 and "changed=0" in proc.stdout.split("PLAY RECAP")[-1], proc.stdout[-4000:]


def test_a_flag_change_rolls_out_through_the_pool_without_a_failed_request(front_door):
    """The issue's target: a rollout through the vLLM router's pool fails no request. While a
    team's client sends requests through HAProxy and the pool without pause, `vllm-fleet rollout`
    changes a flag one node at a time, each node taken out of the pool (/remove_worker) until its
    engine runs nothing, restarted, put back (/add_worker) once healthy."""
    lab_api, port, ports, secrets = front_door
    assert {flag(engine_args(lab_api, node), "--max-num-seqs") for node in NODES} == {"256"}
    for node in NODES:
        (model,) = host_vars(node)["fleet_models"]
        set_host_vars(node, fleet_models=[{**model, "serve": {**model["serve"], "max_num_seqs": 128}}])
    start = time.monotonic()
    with Client(port, key=TEAMS[0]["key"]) as client:
        proc = vllm_fleet("rollout", "--serial", "1", "--json", "--secrets", str(secrets))
        time.sleep(1)  # a few requests after the last node is back
    took = time.monotonic() - start
    print(f"\nrollout of a flag change over 2 nodes through the vLLM router's pool {took:.1f} s, "
          f"{client.sent} requests, {len(client.failures)} failed")
    assert proc.returncode == 0, proc.stdout[-5000:] + proc.stderr[-2000:]
    assert json.loads(proc.stdout)["rollout"]["reached"] == list(NODES)
    assert client.failures == [] and client.sent >= 10, client.failures[:5]
    for node in NODES:
        assert flag(engine_args(lab_api, node), "--max-num-seqs") == "128", node
    listed = json.loads(lab_api.run(LAB, ROUTER, f"curl -s http://127.0.0.1:{ports['pool']}/list_workers"))
    assert len(listed["urls"]) == 2, listed


# The chat page in a real browser runs against the real CPU engine, through a router of
# the same make (HAProxy with a team key, a cache_aware pool): molecule/cpu/tests. Here the
# page's server is checked running (its memory) and retired with its port.


def test_the_router_hosts_new_parts_are_running(front_door):
    """The pool, HAProxy and the page server are active; their resident memory is printed (the
    issue's figure: at most 300 MB at idle for the router's new parts)."""
    lab_api, _, _, _ = front_door
    units = [f"vllm-fleet-router-model_{MODEL}", "haproxy", "nginx"]
    rss = {}
    for unit in units:
        assert lab_api.run(LAB, ROUTER, f"systemctl is-active {unit} || true").strip() == "active", unit
        main = lab_api.run(LAB, ROUTER, f"systemctl show -p MainPID --value {unit}").strip()
        pids = [main, *lab_api.run(LAB, ROUTER, f"pgrep -P {main} || true").split()]
        kib = lab_api.run(LAB, ROUTER, "ps -o rss= -p " + ",".join(pids)).split()
        rss[unit] = sum(int(k) for k in kib) / 1024
    print("\nresident memory at idle (MiB): " + ", ".join(f"{u} {m:.1f}" for u, m in rss.items())
          + f"; the vLLM router and nginx together {rss[units[0]] + rss['nginx']:.1f}")


def test_the_pool_and_page_are_retired_with_their_entries(front_door):
    """Back to HAProxy's own policy and no page (what the fixture's end does for the rollout
    tests): the pool's unit and the page's site are gone, requests still answered."""
    lab_api, port, ports, secrets = front_door
    entry = {"name": MODEL, "port": port}
    set_host_vars(ROUTER, router_models=[entry], router_page_port=None)
    proc = playbook("-l", ROUTER, "-e", f"@{secrets}")
    assert proc.returncode == 0, proc.stdout[-4000:]
    unit = f"vllm-fleet-router-model_{MODEL}"
    assert lab_api.run(LAB, ROUTER, f"systemctl is-active {unit} || true").strip() in ("inactive", "unknown")
    assert lab_api.run(LAB, ROUTER, f"ls /etc/systemd/system/{unit}.service "
                       "/etc/nginx/sites-enabled/vllm-fleet-chat.conf 2>/dev/null || true").strip() == ""
    assert post(port, TEAMS[0]["key"])[0] == 200
