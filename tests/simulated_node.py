"""A simulated accelerator node in a temporary directory, for tests that run the lab's SMI
simulators (lab/fixtures/hardware/bin) without a lab: what `vllm-fleet lab up` and the
stand-in installers leave behind on a node (the hardware profile, /dev nodes, the driver's
version files, a PCI tree). The facts module's, the health agent's and the monitoring
collector's tests share it."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

HARDWARE = Path(__file__).resolve().parents[1] / 'lab' / 'fixtures' / 'hardware'
BIN = HARDWARE / 'bin'
PROFILES = HARDWARE / 'profiles'

# Versions the simulated driver installers "install" in these tests.
DRIVER_VERSIONS = {'ascend': '24.1.0.3', 'metax': '2.14.8', 'musa': '3.0.0',
                   'nvidia': '535.161.08'}
ASCEND_FIRMWARE = '7.5.0.1.129'


def profile(vendor):
    return json.loads((PROFILES / f'{vendor}.json').read_text())


class Node:
    """A temporary node: root tree for the simulators, PCI tree and /dev for the module."""

    def __init__(self, tmp_path, vendor, count=None, driver=True, reboot=False,
                 health=None, control=True, devices=None, **overrides):
        self.vendor = vendor
        self.profile = {**profile(vendor), **overrides}
        if health:
            self.profile['health'] = health
        self.root = tmp_path / 'root'
        self.pci = tmp_path / 'pci'
        self.dev = self.root / 'dev'
        self.smi = BIN / self.profile['smi']['tool']
        count = self.profile['count'] if count is None else count
        indices = list(range(count)) if devices is None else devices

        etc = self.root / 'etc' / 'vllm-fleet-lab'
        etc.mkdir(parents=True)
        (etc / 'hardware.json').write_text(json.dumps(self.profile))

        nodes = self.profile['device_nodes']
        for index in indices:
            for pattern in [nodes['per_device']] + nodes['per_device_extra']:
                self.touch(self.dev / pattern.format(index=index, render_minor=128 + index))
        if control:
            for name in nodes['control']:
                self.touch(self.dev / name)
        self.dev.mkdir(parents=True, exist_ok=True)

        if driver:
            self.write_driver()
        if reboot:
            self.touch(self.root / 'run' / 'vllm-fleet-lab' / 'reboot-required')

        pci = self.profile['pci']
        for index in indices:
            self.pci_function(self.profile['bus_ids'][index], pci['vendor_id'],
                              pci['device_id'], pci['class'])

    @staticmethod
    def touch(path, text=''):
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)

    def under_root(self, path):
        return self.root / path.lstrip('/')

    def write_driver(self):
        files = self.profile['driver']
        version = DRIVER_VERSIONS[self.vendor]
        text = f'Version={version}\n'
        if self.vendor == 'ascend':
            text += 'ascendhal_version=7.35.19\nInnerversion=V100R001C15SPC006B220\n'
            self.touch(self.under_root(files['firmware_file']),
                       f'Version={ASCEND_FIRMWARE}\nfirmware_version=1.0\n')
        if self.vendor == 'nvidia':
            text += 'CudaVersion=12.2\n'
        self.touch(self.under_root(files['version_file']), text)

    def pci_function(self, address, vendor_id, device_id, pci_class=None):
        base = self.pci / address
        self.touch(base / 'vendor', vendor_id + '\n')
        self.touch(base / 'device', device_id + '\n')
        if pci_class is not None:
            self.touch(base / 'class', pci_class + '\n')

    def env(self):
        return dict(os.environ, VLLM_FLEET_LAB_ROOT=str(self.root), LC_ALL='C')

    def run(self, *args):
        """Run the simulator as the module would; return (rc, stdout, stderr)."""
        proc = subprocess.run([str(self.smi), *args], env=self.env(), capture_output=True,
                              text=True, check=False)
        return proc.returncode, proc.stdout, proc.stderr

    def set_health(self, health):
        """Each device's health as the simulator reports it ({"1": "Critical"}; {} for all OK)."""
        self.profile['health'] = health
        (self.root / 'etc' / 'vllm-fleet-lab' / 'hardware.json').write_text(json.dumps(self.profile))
