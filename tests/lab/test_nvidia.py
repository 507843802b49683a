"""NVIDIA end to end on lab nodes: a driver change needs a reboot, which vllm-fleet does
only after a change and only when allowed; the doctor reads the loaded driver."""

from __future__ import annotations

import yaml

from .conftest import LAB, ROOT, group_vars, recap, run_doc_command, run_playbook

VERSIONS = yaml.safe_load((ROOT / "lab" / "inventory" / "versions.yml").read_text())["nvidia"]
SMI_DRIVER = "nvidia-smi --query-gpu=driver_version --format=csv,noheader 2>&1 | sort -u"


def test_driver_change_without_reboot_stops_that_host_then_reboots_when_allowed(lab):
    # releases.md's provision, as written.
    proc = run_doc_command("docs/operations/releases.md", "vllm-fleet provision")
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    driver = group_vars("nvidia-nodes")["fleet_matrix"]["nvidia_driver"]
    older = VERSIONS["nvidia_driver_packages"][0]
    # Someone moves nvidia-01 to an older driver by hand: the loaded module no longer matches.
    lab.run(LAB, "nvidia-01", "DEBIAN_FRONTEND=noninteractive apt-get install -y -q --allow-downgrades "
            f"--allow-change-held-packages nvidia-driver-{driver['branch']}={older}", timeout=120)
    assert "Driver/library version mismatch" in lab.run(LAB, "nvidia-01", SMI_DRIVER)

    proc = run_playbook("-l", "nvidia-nodes", "-e", '{"nvidia_driver_reboot": false}')
    counts = recap(proc.stdout)
    assert counts["nvidia-01"]["failed"] == 1, proc.stdout[-3000:]
    assert counts["nvidia-02"]["failed"] == 0 and counts["nvidia-02"]["changed"] == 0, proc.stdout[-3000:]
    assert "nvidia-01: reboot required. The nvidia driver packages (nvidia-driver-" in proc.stdout
    # The matrix's package is installed and held again; its module waits for a reboot.
    selection = lab.run(LAB, "nvidia-01", f"dpkg-query -W -f='${{Version}} ${{db:Status-Abbrev}}' "
                                          f"nvidia-driver-{driver['branch']}")
    assert selection.strip() == f"{driver['package_version']} hi"
    assert "Driver/library version mismatch" in lab.run(LAB, "nvidia-01", SMI_DRIVER)

    # Allowed to reboot, the next run reboots for the change of the run before (nothing changes
    # in its own packages), and the node serves again.
    proc = run_playbook("-l", "nvidia-01", check=True)
    assert "Reboot the node for the new driver" in proc.stdout
    assert lab.run(LAB, "nvidia-01", SMI_DRIVER).strip() == driver["version"]
    assert lab.run(LAB, "nvidia-01", "systemctl is-active vllm-gpt-oss-20b.service").strip() == "active"


def test_unchanged_driver_means_no_reboot(lab):
    boot = lab.run(LAB, "nvidia-02", "cat /proc/sys/kernel/random/boot_id")
    proc = run_playbook("-l", "nvidia-02", check=True)
    assert recap(proc.stdout)["nvidia-02"]["changed"] == 0, proc.stdout[-3000:]
    assert lab.run(LAB, "nvidia-02", "cat /proc/sys/kernel/random/boot_id") == boot


def test_doctor_names_a_driver_that_is_not_loaded(lab):
    ok = run_playbook("-l", "nvidia-02", playbook="playbooks/doctor.yml", check=True)
    assert "6 components match the matrix" in ok.stdout
    # What an upgrade behind vllm-fleet's back leaves: the packages on disk, the old module loaded.
    lab.run(LAB, "nvidia-02", "mkdir -p /run/vllm-fleet-lab && touch /run/vllm-fleet-lab/reboot-required")
    try:
        bad = run_playbook("-l", "nvidia-02", playbook="playbooks/doctor.yml")
    finally:
        lab.run(LAB, "nvidia-02", "rm -f /run/vllm-fleet-lab/reboot-required")
    assert bad.returncode != 0
    assert ("nvidia-02 differs from the matrix:\n  - driver: expected 570.195.03, nvidia-smi fails: "
            "Failed to initialize NVML: Driver/library version mismatch") in bad.stdout


def test_container_toolkit_is_held_and_its_cdi_spec_generated_once(lab):
    # Container mode is not run in the lab (no container engine): its toolkit role alone,
    # with podman's CDI specification, which needs no daemon.
    book = ROOT / ".cache" / "itest" / "container-toolkit.yml"
    book.parent.mkdir(parents=True, exist_ok=True)
    book.write_text("- hosts: nvidia-02\n  gather_facts: false\n"
                    "  roles: [stages/fleet, vendors/nvidia_container_toolkit]\n")
    first = run_playbook("-e", "fleet_container_runtime=podman", playbook=str(book), check=True)
    assert recap(first.stdout)["nvidia-02"]["changed"] > 0
    again = run_playbook("-e", "fleet_container_runtime=podman", playbook=str(book), check=True)
    assert recap(again.stdout)["nvidia-02"]["changed"] == 0, again.stdout[-3000:]
    held = lab.run(LAB, "nvidia-02", "apt-mark showhold").split()
    assert {"nvidia-container-toolkit", "nvidia-container-toolkit-base", "libnvidia-container-tools",
            "libnvidia-container1"} <= set(held)
    spec = lab.run(LAB, "nvidia-02", "cat /etc/cdi/nvidia.yaml")
    assert "kind: nvidia.com/gpu" in spec and "libcuda.so.570.195.03" in spec
