#!/usr/bin/python
# Copyright (c) vllm-fleet contributors
# Apache-2.0 (see pyproject.toml)
"""Ansible module: read-only facts about a node's accelerators."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: accelerator_facts
short_description: Gather facts about the accelerators of a node
description:
  - Reads the PCI tree, the device nodes and the vendor's management tool
    (C(npu-smi) for Huawei Ascend, C(mx-smi) for MetaX, C(mthreads-gmi) for Moore Threads,
    C(nvidia-smi) for NVIDIA) and returns what they say as C(ansible_facts.accelerators).
  - On CPU inference nodes (O(vendor=cpu)) the devices are the NUMA nodes of
    O(node_path), and C(cpu) tells the logical CPUs, the model name, the ISA extensions
    vLLM's CPU build picks kernels by (C(avx2), C(avx512f), C(amx_bf16), ...) and the
    memory, read from O(proc_path).
  - Counts only accelerator-class PCI functions (display controllers, class C(0x03),
    and processing accelerators, class C(0x12)), so companion functions such as a GPU's
    HDMI audio are not taken for accelerators.
  - Never changes anything. When the vendor tool is missing or fails (no driver, a driver
    upgrade waiting for a reboot), the module still succeeds and reports the PCI functions
    and device nodes, with O(ansible_facts.accelerators.smi.available=false) and the tool's
    error text.
  - Runs the tool with C(LC_ALL=C), so its output is the English layout this module parses.
version_added: "0.1.0"
author:
  - vllm-fleet contributors
options:
  vendor:
    description:
      - Accelerator vendor of the node.
      - When omitted, the vendor with the most accelerator functions in O(pci_path) is used.
      - Set it on hosts that carry cards of several vendors.
      - V(cpu) is never detected, since a CPU node has no accelerator on PCI; give it.
      - One of the vendors of C(VENDORS) in C(module_utils/vllm_fleet_accel.py), the project's vendor list.
    type: str
  pci_path:
    description:
      - Directory of PCI functions, one sub-directory per address holding C(vendor),
        C(device) and C(class) files.
      - A path that does not exist reads as a node without accelerators.
    type: path
    default: /sys/bus/pci/devices
  dev_path:
    description:
      - Directory holding the device nodes (C(davinci0), C(nvidiactl), C(dri/renderD128), ...).
    type: path
    default: /dev
  smi_path:
    description:
      - Full path of the vendor tool.
      - When omitted, the tool is looked up in the vendor's usual install directories
        (C(/usr/local/bin) and C(/usr/local/sbin) for C(npu-smi), C(/opt/maca/bin) and
        C(/opt/mxdriver/bin) for C(mx-smi), C(/usr/bin) for C(mthreads-gmi) and C(nvidia-smi)),
        then on E(PATH) and in the C(sbin) directories.
      - Needs O(vendor) on a node where no accelerator is found on PCI, since the module
        could not know which tool it is.
    type: path
  proc_path:
    description:
      - Where C(cpuinfo) and C(meminfo) are read from on CPU nodes.
    type: path
    default: /proc
  node_path:
    description:
      - Directory of the NUMA nodes (C(node0), ... with C(cpulist) and C(meminfo)) on CPU nodes.
    type: path
    default: /sys/devices/system/node
attributes:
  check_mode:
    support: full
    details: The module only reads; it behaves the same in check mode.
  diff_mode:
    support: none
  facts:
    support: full
notes:
  - C(family) comes from the PCI device ID, C(model) from the vendor tool, so a node whose
    driver is not loaded has a family but no model.
  - C(firmware_version) is only known for Ascend, from C(npu-smi info -t board -i N).
  - Ascend C(Alarm) health is reported as C(Critical). C(mx-smi), C(mthreads-gmi) and the
    C(nvidia-smi) query have no warning level; a device they list normally is C(OK) and one
    they flag as unavailable or erroneous is C(Critical).
seealso:
  - name: npu-smi command reference
    description: Huawei's reference for the Ascend management tool.
    link: https://support.huawei.com/enterprise/en/doc/EDOC1100079287
  - name: nvidia-smi documentation
    description: NVIDIA's reference for C(--query-gpu) and C(--format=csv).
    link: https://docs.nvidia.com/deploy/nvidia-smi/index.html
"""

EXAMPLES = r"""
- name: Gather accelerator facts
  accelerator_facts:

- name: Check that the node has the accelerators its group says
  ansible.builtin.assert:
    that:
      - ansible_facts['accelerators']['vendor'] == fleet_accelerator['vendor']
      - ansible_facts['accelerators']['count'] == fleet_accelerator['count']
    fail_msg: >-
      {{ inventory_hostname }} has {{ ansible_facts['accelerators']['count'] }}
      {{ ansible_facts['accelerators']['vendor'] }} accelerators, the inventory expects
      {{ fleet_accelerator['count'] }} {{ fleet_accelerator['vendor'] }}

- name: Read an NVIDIA node whose nvidia-smi lives outside PATH
  accelerator_facts:
    vendor: nvidia
    smi_path: /opt/nvidia/bin/nvidia-smi

- name: Read a fake PCI and /dev tree (tests)
  accelerator_facts:
    vendor: ascend
    pci_path: /tmp/pci
    dev_path: /tmp/dev
"""

RETURN = r"""
ansible_facts:
  description: Facts added to the host.
  returned: always
  type: dict
  contains:
    accelerators:
      description: What the node's PCI tree, device nodes and vendor tool report.
      returned: always
      type: dict
      contains:
        vendor:
          description: Vendor given in O(vendor) or detected on PCI; V(null) when none is found.
          returned: always
          type: str
          sample: ascend
        vendor_id:
          description: PCI vendor ID of O(vendor).
          returned: always
          type: str
          sample: "0x19e5"
        family:
          description: Product family from the PCI device ID of the first accelerator;
            V(null) when the device ID is not known to the module or there is none.
          returned: always
          type: str
          sample: 910B
        model:
          description: Device name reported by the vendor tool for the first device;
            V(null) when the tool is unavailable.
          returned: always
          type: str
          sample: 910B3
        count:
          description: Number of accelerator PCI functions of the vendor.
          returned: always
          type: int
          sample: 8
        pci_devices:
          description: The accelerator PCI functions, by address.
          returned: always
          type: list
          elements: dict
          contains:
            address:
              description: PCI address.
              type: str
              sample: "0000:c1:00.0"
            vendor_id:
              description: PCI vendor ID.
              type: str
              sample: "0x19e5"
            device_id:
              description: PCI device ID.
              type: str
              sample: "0xd802"
            family:
              description: Product family of the device ID, or V(null).
              type: str
              sample: 910B
        device_nodes:
          description: Existing device nodes of the vendor, in natural order.
          returned: always
          type: list
          elements: str
          sample: [/dev/davinci0, /dev/davinci1, /dev/davinci_manager, /dev/devmm_svm, /dev/hisi_hdc]
        device_node_count:
          description: Number of per-device nodes (C(davinciN), C(nvidiaN),
            C(dri/renderDN) for MetaX, C(mtgpu.N) for Moore Threads).
          returned: always
          type: int
          sample: 8
        missing_device_nodes:
          description: Control nodes the vendor's driver creates that are absent
            (C(davinci_manager), C(devmm_svm), C(hisi_hdc); C(nvidiactl), C(nvidia-uvm);
            C(mxcd)).
          returned: always
          type: list
          elements: str
          sample: []
        smi:
          description: The vendor tool and how its listing went.
          returned: always
          type: dict
          contains:
            tool:
              description: Name of the tool; V(null) without a vendor.
              type: str
              sample: npu-smi
            path:
              description: Path of the tool that was run or asked for; V(null) when not found.
              type: str
              sample: /usr/local/bin/npu-smi
            available:
              description: Whether the tool ran and exited 0.
              type: bool
              sample: true
            rc:
              description: Exit status of the listing; V(null) when it did not run.
              type: int
              sample: 0
            error:
              description: Why the tool is unavailable (its output, or why it was not run).
              type: str
              sample: "dcmi module initialize failed. ret is -8005"
        driver_version:
          description: Driver version reported by the tool.
          returned: always
          type: str
          sample: 24.1.0.3
        firmware_version:
          description: Firmware version (Ascend only, from C(npu-smi info -t board)); V(null) otherwise.
          returned: always
          type: str
          sample: 7.5.0.1.129
        devices:
          description: Devices listed by the tool; empty when it is unavailable.
          returned: always
          type: list
          elements: dict
          contains:
            index:
              description: Device index in the tool (NPU ID for Ascend).
              type: int
              sample: 0
            name:
              description: Device name.
              type: str
              sample: 910B3
            health:
              description: V(OK), V(Warning), V(Critical) or V(unknown).
              type: str
              sample: OK
            bus_id:
              description: PCI address in sysfs spelling.
              type: str
              sample: "0000:c1:00.0"
            memory_total_mb:
              description: Device memory in MiB (HBM on Ascend).
              type: int
              sample: 65536
            memory_used_mb:
              description: Device memory in use, in MiB.
              type: int
              sample: 3396
            utilization_percent:
              description: The tool's busy figure in whole percent (GPU-Util on MetaX, %GPU on
                Moore Threads, utilization.gpu on NVIDIA, AICore(%) on Ascend); null when the
                tool shows none (N/A, an error marker) and on CPU nodes.
              type: int
              sample: 0
            cpus:
              description: On CPU nodes, the logical CPUs of the NUMA node.
              type: list
              elements: int
              sample: [0, 1, 2, 3]
        health:
          description: V(OK) when every device is healthy, else the worst of V(Warning) and
            V(Critical); V(unknown) when the tool is unavailable or lists no device.
          returned: always
          type: str
          sample: OK
        cpu:
          description: On CPU nodes (O(vendor=cpu)) only.
          returned: when vendor is cpu
          type: dict
          contains:
            model_name:
              description: The CPU's model name from C(/proc/cpuinfo).
              type: str
              sample: Intel(R) Xeon(R) Platinum 8480+
            logical_cpus:
              description: Logical CPUs the node has.
              type: int
              sample: 224
            isa:
              description: The ISA extensions vLLM's CPU build picks kernels by, among C(avx2), C(avx512f),
                C(avx512_bf16), C(avx512_vnni), C(amx_bf16), C(amx_int8), C(amx_tile).
              type: list
              elements: str
              sample: [avx2, avx512f, amx_bf16]
            memory_mb:
              description: The node's memory (C(MemTotal)) in MiB.
              type: int
              sample: 1031680
"""

import os

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.vllm_fleet_accel import gather


def main():
    module = AnsibleModule(
        argument_spec=dict(
            # No choices=: gather() checks it against the one list, VENDORS.
            vendor=dict(type='str'),
            pci_path=dict(type='path', default='/sys/bus/pci/devices'),
            dev_path=dict(type='path', default='/dev'),
            smi_path=dict(type='path'),
            proc_path=dict(type='path', default='/proc'),
            node_path=dict(type='path', default='/sys/devices/system/node'),
        ),
        supports_check_mode=True,
    )
    for name in ('pci_path', 'dev_path'):
        path = module.params[name]
        if os.path.exists(path) and not os.path.isdir(path):
            module.fail_json(msg='%s=%s is not a directory' % (name, path))

    module.exit_json(changed=False, ansible_facts={'accelerators': gather(module, module.params)})


if __name__ == '__main__':
    main()
