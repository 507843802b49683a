"""Tests of the accelerator facts: parsers, PCI and /dev scanning, simulators, module.

Three layers, each against something real:
- the parsers of ``module_utils/vllm_fleet_accel.py`` on recorded outputs of the real
  vendor tools (``fixtures/smi``, provenance in its README);
- the lab's simulators (``lab/fixtures/hardware/bin``) run against a temporary node built
  from the default profiles, their output read by the same parsers, so the lab cannot
  drift from what the module understands;
- ``library/accelerator_facts.py`` end to end, in-process and through the ``ansible`` CLI.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import ansible.module_utils
import pytest

REPO = Path(__file__).resolve().parents[2]
FIXTURES = Path(__file__).resolve().parent / 'fixtures' / 'smi'

# Ansible finds module_utils through ansible.cfg when it runs a module; in-process tests
# have to add the directory to the package path themselves (no conftest, on purpose).
if str(REPO / 'module_utils') not in ansible.module_utils.__path__:
    ansible.module_utils.__path__.append(str(REPO / 'module_utils'))

from ansible.module_utils import vllm_fleet_accel as accel  # noqa: E402
from ansible.module_utils.testing import patch_module_args  # noqa: E402

from tests.conftest import load_module  # noqa: E402
from tests.simulated_node import ASCEND_FIRMWARE, BIN, DRIVER_VERSIONS, PROFILES, profile  # noqa: E402, F401
from tests.simulated_node import Node as SimulatedNode  # noqa: E402

accelerator_facts = load_module(REPO / 'library' / 'accelerator_facts.py')

FACT_KEYS = {
    'vendor', 'vendor_id', 'family', 'model', 'count', 'pci_devices', 'device_nodes',
    'device_node_count', 'missing_device_nodes', 'smi', 'driver_version', 'firmware_version',
    'devices', 'health',
}
DEVICE_KEYS = {'index', 'name', 'health', 'bus_id', 'memory_total_mb', 'memory_used_mb', 'utilization_percent'}


def fixture(name):
    return (FIXTURES / name).read_text()


class Node(SimulatedNode):
    """A simulated node (tests/simulated_node.py) and the facts module's options for it."""

    def module_args(self, **extra):
        args = {'pci_path': str(self.pci), 'dev_path': str(self.dev), 'smi_path': str(self.smi)}
        args.update(extra)
        return args


def run_module(args, capsys):
    """Run accelerator_facts in-process; return (exit code, result dict)."""
    with patch_module_args(args):
        with pytest.raises(SystemExit) as exc:
            accelerator_facts.main()
    return exc.value.code, json.loads(capsys.readouterr().out)


def facts_of(args, capsys, monkeypatch, node=None):
    if node is not None:
        monkeypatch.setenv('VLLM_FLEET_LAB_ROOT', str(node.root))
    code, result = run_module(args, capsys)
    assert code == 0, result
    assert result['changed'] is False
    facts = result['ansible_facts']['accelerators']
    assert set(facts) == FACT_KEYS
    for device in facts['devices']:
        assert set(device) == DEVICE_KEYS
    return facts


# ---------------------------------------------------------------------------
# Parsers on recorded outputs
# ---------------------------------------------------------------------------
class TestNpuSmi:
    def test_910b3_x8(self):
        result = accel.parse_npu_smi_info(fixture('npu-smi-info-910b3-x8.txt'))
        assert result['tool_version'] == '24.1.0.3'
        assert result['driver_version'] == '24.1.0.3'
        devices = result['devices']
        assert [d['index'] for d in devices] == list(range(8))
        assert {d['name'] for d in devices} == {'910B3'}
        assert {d['health'] for d in devices} == {'OK'}
        assert [d['bus_id'] for d in devices] == [
            '0000:c1:00.0', '0000:01:00.0', '0000:c2:00.0', '0000:02:00.0',
            '0000:81:00.0', '0000:41:00.0', '0000:82:00.0', '0000:42:00.0']
        assert {d['memory_total_mb'] for d in devices} == {65536}
        assert [d['memory_used_mb'] for d in devices] == [3396, 3394, 3201, 3201, 3381, 3200, 3201, 3200]
        # AICore(%) leads the chip row; this host was idle.
        assert [d['utilization_percent'] for d in devices] == [0] * 8
        assert accel.overall_health(devices) == 'OK'

    def test_aicore_utilisation(self):
        # The recorded hosts are idle: give NPUs 0 and 3 some load in the AICore(%) column.
        text = fixture('npu-smi-info-910b3-x8.txt')
        for bus, load in (('0000:C1:00.0', '87'), ('0000:02:00.0', '100')):
            row = '| %s  | 0           0    / 0' % bus
            assert text.count(row) == 1
            text = text.replace(row, '| %s  | %s0    / 0' % (bus, load.ljust(12)))
        devices = accel.parse_npu_smi_info(text)['devices']
        assert [d['utilization_percent'] for d in devices] == [87, 0, 0, 100, 0, 0, 0, 0]
        # Memory still read from the HBM pair, not from the AICore figure.
        assert [d['memory_used_mb'] for d in devices][:4] == [3396, 3394, 3201, 3201]

    @pytest.mark.parametrize('cell, expected', [
        ('0           0    / 0          3396 / 65536', 0),
        ('NA          0    / 0          3396 / 65536', None),
        # No AICore figure at all: the first number is half of a memory pair, not a load.
        ('0    / 0          3396 / 65536', None),
        # 310P layout: AICore, then only Memory-Usage(MB).
        ('12           1392 / 21527', 12),
    ])
    def test_aicore_cell(self, cell, expected):
        text = ('| npu-smi 23.0.0                   Version: 23.0.0                   |\n'
                '+===========================+===============+=====================+\n'
                '| 8     310P3               | OK            | NA          47      |\n'
                '| 0     0                   | 0000:01:00.0  | %s |\n'
                '+===========================+===============+=====================+\n' % cell)
        (device,) = accel.parse_npu_smi_info(text)['devices']
        assert device['utilization_percent'] == expected
        assert device['memory_total_mb'] in (65536, 21527)

    def test_910b4_x8(self):
        result = accel.parse_npu_smi_info(fixture('npu-smi-info-910b4-x8.txt'))
        assert result['driver_version'] == '25.2.0'
        assert len(result['devices']) == 8
        assert {d['name'] for d in result['devices']} == {'910B4'}
        assert {d['memory_total_mb'] for d in result['devices']} == {32768}
        assert result['devices'][6] == {
            'index': 6, 'name': '910B4', 'health': 'OK', 'bus_id': '0000:82:00.0',
            'memory_total_mb': 32768, 'memory_used_mb': 2655, 'utilization_percent': 0}

    def test_wide_layout_of_npu_smi_26(self):
        result = accel.parse_npu_smi_info(fixture('npu-smi-info-910b4-x1-wide.txt'))
        assert result['driver_version'] == '26.0.rc1'
        assert result['devices'] == [{
            'index': 0, 'name': '910B4', 'health': 'OK', 'bus_id': '0000:c1:00.0',
            'memory_total_mb': 32768, 'memory_used_mb': 2871, 'utilization_percent': 0}]

    def test_warning_health(self):
        result = accel.parse_npu_smi_info(fixture('npu-smi-info-910a-warning.txt'))
        assert result['driver_version'] == '23.0.rc3'
        assert result['devices'] == [{
            'index': 1, 'name': '910A', 'health': 'Warning', 'bus_id': '0000:81:00.0',
            'memory_total_mb': 32768, 'memory_used_mb': 1, 'utilization_percent': 0}]
        assert accel.overall_health(result['devices']) == 'Warning'

    @pytest.mark.parametrize('word, expected', [('Alarm', 'Critical'), ('Critical', 'Critical'),
                                                ('NA', 'unknown')])
    def test_other_health_words(self, word, expected):
        text = fixture('npu-smi-info-910a-warning.txt').replace('Warning       ', word.ljust(14))
        devices = accel.parse_npu_smi_info(text)['devices']
        assert devices[0]['health'] == expected
        assert accel.overall_health(devices) == expected

    def test_driver_not_loaded(self):
        result = accel.parse_npu_smi_info(fixture('npu-smi-info-dcmi-8005.txt'))
        assert result == {'tool_version': None, 'driver_version': None, 'devices': []}
        assert accel.overall_health(result['devices']) == 'unknown'

    def test_running_processes_are_not_devices(self):
        busy = '| 0       0                 | 123456        | python3.11               | 58220                   |'
        text = fixture('npu-smi-info-910b3-x8.txt').replace(
            '| No running processes found in NPU 0                                                            |',
            busy)
        assert text.count(busy) == 1
        assert len(accel.parse_npu_smi_info(text)['devices']) == 8

    def test_board(self):
        board = accel.parse_npu_smi_keyvalues(fixture('npu-smi-board-910.txt'))
        assert board['Firmware Version'] == '7.1.0.7.220'
        assert board['Software Version'] == '23.0.5'
        assert board['PCI Device ID'] == '0xD801'
        assert board['Class ID'] is None

    def test_list(self):
        values = fixture('npu-smi-info-l-910b4-x8.txt')
        assert accel.parse_npu_smi_keyvalues(values)['Total Count'] == '8'


class TestMxSmi:
    def test_c500_x8_with_processes(self):
        result = accel.parse_mx_smi(fixture('mx-smi-c500-x8.txt'))
        assert result['tool_version'] == '2.1.12'
        assert result['driver_version'] == '2.12.13'
        assert result['maca_version'] == '2.29.0.19'
        assert result['bios_version'] == '1.22.3.0'
        devices = result['devices']
        assert [d['index'] for d in devices] == list(range(8))
        assert {d['name'] for d in devices} == {'MetaX C500'}
        assert [d['bus_id'] for d in devices] == [
            '0000:0e:00.0', '0000:0f:00.0', '0000:10:00.0', '0000:12:00.0',
            '0000:35:00.0', '0000:36:00.0', '0000:37:00.0', '0000:38:00.0']
        assert [d['memory_used_mb'] for d in devices] == [5680] + [4986] * 7
        assert {d['memory_total_mb'] for d in devices} == {65536}
        # GPU-Util, the last cell of each GPU's first row.
        assert [d['utilization_percent'] for d in devices] == [0, 0, 0, 1, 0, 1, 0, 0]
        # mx-smi 2.1 has no GPU-State column: a listed GPU is OK.
        assert accel.overall_health(devices) == 'OK'

    def test_gpu_state_column(self):
        result = accel.parse_mx_smi(fixture('mx-smi-c500-x1-gpu-state.txt'))
        assert result['tool_version'] == '2.2.4'
        assert result['driver_version'] == '2.14.8'
        assert result['devices'] == [{
            'index': 0, 'name': 'MetaX C500', 'health': 'OK', 'bus_id': '0000:01:00.0',
            'memory_total_mb': 65536, 'memory_used_mb': 858, 'utilization_percent': 0}]

    @pytest.mark.parametrize('util, expected', [('93%', 93), ('100%', 100), ('N/A', None)])
    def test_gpu_util(self, util, expected):
        text = fixture('mx-smi-c500-x1-gpu-state.txt').replace('| 0%                   |',
                                                                '| %s |' % util.ljust(20))
        assert accel.parse_mx_smi(text)['devices'][0]['utilization_percent'] == expected

    def test_unavailable_gpu_is_critical(self):
        text = fixture('mx-smi-c500-x1-gpu-state.txt').replace('| Available    ', '| Not Available')
        devices = accel.parse_mx_smi(text)['devices']
        assert devices[0]['health'] == 'Critical'
        assert accel.overall_health(devices) == 'Critical'


class TestMthreadsGmi:
    def test_s5000_x8(self):
        result = accel.parse_mthreads_gmi(fixture('mthreads-gmi-s5000-x8.txt'))
        assert result['tool_version'] == '2.4.1'
        assert result['driver_version'] == '5.1.0-server'
        devices = result['devices']
        assert [d['index'] for d in devices] == list(range(8))
        assert {d['name'] for d in devices} == {'MTT S5000'}
        assert [d['bus_id'] for d in devices] == [
            '0000:18:00.0', '0000:3a:00.0', '0000:4b:00.0', '0000:5c:00.0',
            '0000:9a:00.0', '0000:ba:00.0', '0000:ca:00.0', '0000:da:00.0']
        assert {(d['memory_used_mb'], d['memory_total_mb']) for d in devices} == {(0, 81920)}
        assert [d['utilization_percent'] for d in devices] == [0] * 8
        assert accel.overall_health(devices) == 'OK'

    def test_gpu_utilisation(self):
        text = fixture('mthreads-gmi-s5000-x8.txt').replace(
            '|00000000:3a:00.0    |0%    0MiB', '|00000000:3a:00.0    |64%   50132MiB')
        devices = accel.parse_mthreads_gmi(text)['devices']
        assert [d['utilization_percent'] for d in devices] == [0, 64, 0, 0, 0, 0, 0, 0]
        assert devices[1]['memory_used_mb'] == 50132

    def test_older_layout(self):
        result = accel.parse_mthreads_gmi(fixture('mthreads-gmi-s80-x1.txt'))
        assert (result['tool_version'], result['driver_version']) == ('1.14.0', '2.7.0')
        assert result['devices'] == [{
            'index': 0, 'name': 'MTT S80', 'health': 'OK', 'bus_id': '0000:04:00.0',
            'memory_total_mb': 16384, 'memory_used_mb': 2, 'utilization_percent': 0}]


class TestNvidiaSmi:
    def test_a100_x8(self):
        result = accel.parse_nvidia_smi_csv(fixture('nvidia-smi-query-a100-x8.csv'))
        assert result['driver_version'] == '535.161.08'
        devices = result['devices']
        assert [d['index'] for d in devices] == list(range(8))
        assert {d['name'] for d in devices} == {'NVIDIA A100-SXM4-80GB'}
        assert [d['bus_id'] for d in devices] == [
            '0000:07:00.0', '0000:0f:00.0', '0000:47:00.0', '0000:4e:00.0',
            '0000:87:00.0', '0000:90:00.0', '0000:b7:00.0', '0000:bd:00.0']
        assert {(d['memory_used_mb'], d['memory_total_mb']) for d in devices} == {(4, 81920)}
        assert [d['utilization_percent'] for d in devices] == [0] * 8
        assert accel.overall_health(devices) == 'OK'

    def test_utilization_is_queried(self):
        assert accel.NVIDIA_QUERY_FIELDS[-1] == 'utilization.gpu'
        assert accel.NVIDIA_QUERY_ARGS[0].endswith(',temperature.gpu,utilization.gpu')
        busy = fixture('nvidia-smi-query-a100-x8.csv').replace('81920, 4, 32, 0', '81920, 70113, 32, 87')
        devices = accel.parse_nvidia_smi_csv(busy)['devices']
        assert [d['utilization_percent'] for d in devices] == [0, 0, 0, 87, 0, 0, 0, 0]
        assert devices[3]['memory_used_mb'] == 70113

    def test_header_and_units(self):
        result = accel.parse_nvidia_smi_csv(fixture('nvidia-smi-query-a100-x2-header-units.csv'))
        assert result['driver_version'] == '545.23.08'
        assert [(d['index'], d['bus_id'], d['memory_used_mb'], d['memory_total_mb'])
                for d in result['devices']] == [(0, '0000:01:00.0', 87, 81920),
                                                (1, '0000:41:00.0', 87, 81920)]
        # GPUs in MIG mode report no utilisation ([N/A]): unknown, and still healthy.
        assert [(d['utilization_percent'], d['health']) for d in result['devices']] == [(None, 'OK')] * 2

    def test_utilization_with_units(self):
        text = fixture('nvidia-smi-query-a100-x2-header-units.csv').replace('87 MiB, 26, [N/A]', '87 MiB, 26, 45 %', 1)
        assert [d['utilization_percent'] for d in accel.parse_nvidia_smi_csv(text)['devices']] == [45, None]

    def test_error_markers_are_critical(self):
        devices = accel.parse_nvidia_smi_csv(fixture('nvidia-smi-query-unknown-error.csv'))['devices']
        assert [d['health'] for d in devices] == ['OK', 'Critical']
        assert devices[1]['memory_used_mb'] is None
        assert [d['utilization_percent'] for d in devices] == [0, None]
        assert accel.overall_health(devices) == 'Critical'

    @pytest.mark.parametrize('name', ['nvidia-smi-no-driver.txt', 'nvidia-smi-version-mismatch.txt'])
    def test_failures_list_nothing(self, name):
        assert accel.parse_nvidia_smi_csv(fixture(name))['devices'] == []


class TestHelpers:
    @pytest.mark.parametrize('raw, expected', [
        ('0000:C1:00.0', '0000:c1:00.0'),
        ('00000000:4E:00.0', '0000:4e:00.0'),
        ('0000:xx:00.0', '0000:xx:00.0'),
        (' 0001:3a:00.7 ', '0001:3a:00.7'),
    ])
    def test_normalize_bus_id(self, raw, expected):
        assert accel.normalize_bus_id(raw) == expected

    def test_natural_order(self):
        names = ['davinci10', 'davinci2', 'davinci_manager', 'davinci1']
        assert sorted(names, key=accel.natural_key) == ['davinci1', 'davinci2', 'davinci10',
                                                        'davinci_manager']

    @pytest.mark.parametrize('healths, expected', [
        ([], 'unknown'),
        (['OK', 'OK'], 'OK'),
        (['OK', 'Warning', 'OK'], 'Warning'),
        (['Warning', 'Critical', 'OK'], 'Critical'),
        (['OK', 'unknown'], 'unknown'),
        (['unknown', 'Warning'], 'Warning'),
        (['OK', 'bogus'], 'unknown'),
    ])
    def test_overall_health(self, healths, expected):
        assert accel.overall_health([{'health': h} for h in healths]) == expected


# ---------------------------------------------------------------------------
# PCI tree and device nodes
# ---------------------------------------------------------------------------
def make_function(root, address, vendor_id, device_id, pci_class=None):
    base = root / address
    base.mkdir(parents=True)
    (base / 'vendor').write_text(vendor_id + '\n')
    (base / 'device').write_text(device_id + '\n')
    if pci_class is not None:
        (base / 'class').write_text(pci_class + '\n')


class TestPci:
    def test_only_accelerator_functions_count(self, tmp_path):
        for bus in ('17', '65'):
            make_function(tmp_path, '0000:%s:00.0' % bus, '0x10de', '0x2684', '0x030000')
            # The GPU's HDMI audio function: same vendor, not a GPU.
            make_function(tmp_path, '0000:%s:00.1' % bus, '0x10de', '0x22ba', '0x040300')
        make_function(tmp_path, '0000:03:00.0', '0x1a03', '0x2000', '0x030000')  # BMC VGA
        make_function(tmp_path, '0000:5e:00.0', '0x19e5', '0x1822', '0x020000')  # Huawei NIC
        make_function(tmp_path, '0000:00:00.0', '0x8086', '0x09a2', '0x088000')
        found = accel.scan_pci(str(tmp_path))
        assert [f['address'] for f in found] == ['0000:17:00.0', '0000:65:00.0']
        assert {f['vendor'] for f in found} == {'nvidia'}
        assert found[0]['family'] is None  # 0x2684 is not in the family table
        assert accel.detect_vendor(found) == 'nvidia'

    def test_family_and_class(self, tmp_path):
        make_function(tmp_path, '0000:C1:00.0', '0x19e5', '0xD802', '0x120000')
        assert accel.scan_pci(str(tmp_path)) == [{
            'address': '0000:c1:00.0', 'vendor': 'ascend', 'vendor_id': '0x19e5',
            'device_id': '0xd802', 'class': '0x120000', 'family': '910B'}]

    def test_without_class_only_known_devices_count(self, tmp_path):
        make_function(tmp_path, '0000:01:00.0', '0x19e5', '0xd500')
        make_function(tmp_path, '0000:02:00.0', '0x19e5', '0x1822')
        found = accel.scan_pci(str(tmp_path))
        assert [(f['address'], f['family']) for f in found] == [('0000:01:00.0', '310P')]

    def test_missing_tree_is_empty(self, tmp_path):
        assert accel.scan_pci(str(tmp_path / 'absent')) == []
        assert accel.detect_vendor([]) is None

    def test_majority_vendor_wins(self, tmp_path):
        make_function(tmp_path, '0000:01:00.0', '0x10de', '0x20b2', '0x030200')
        for bus in ('81', '82'):
            make_function(tmp_path, '0000:%s:00.0' % bus, '0x9999', '0x4001', '0x038000')
        assert accel.detect_vendor(accel.scan_pci(str(tmp_path))) == 'metax'

    def test_tie_goes_to_first_listed_vendor(self, tmp_path):
        make_function(tmp_path, '0000:01:00.0', '0x10de', '0x20b2', '0x030200')
        make_function(tmp_path, '0000:81:00.0', '0x1ed5', '0x0327', '0x030200')
        assert accel.detect_vendor(accel.scan_pci(str(tmp_path))) == 'musa'


class TestDeviceNodes:
    def test_ascend(self, tmp_path):
        for name in ['davinci%d' % i for i in (0, 1, 2, 10)] + ['davinci_manager', 'hisi_hdc',
                                                                 'null', 'nvidia0']:
            (tmp_path / name).write_text('')
        nodes = accel.find_device_nodes(str(tmp_path), 'ascend')
        assert nodes['nodes'] == [str(tmp_path / n) for n in (
            'davinci0', 'davinci1', 'davinci2', 'davinci10', 'davinci_manager', 'hisi_hdc')]
        assert nodes['per_device_count'] == 4
        assert nodes['missing'] == [str(tmp_path / 'devmm_svm')]

    def test_metax_counts_render_nodes_only(self, tmp_path):
        dri = tmp_path / 'dri'
        dri.mkdir()
        # card0 belongs to the BMC's display adapter, which has no render node.
        for name in ('card0', 'card1', 'card2', 'renderD128', 'renderD129', 'by-path'):
            (dri / name).write_text('')
        nodes = accel.find_device_nodes(str(tmp_path), 'metax')
        assert nodes['per_device_count'] == 2
        assert nodes['nodes'] == [str(dri / n) for n in ('card0', 'card1', 'card2',
                                                         'renderD128', 'renderD129')]
        assert nodes['missing'] == [str(tmp_path / 'mxcd')]

    def test_absent_dev_path(self, tmp_path):
        nodes = accel.find_device_nodes(str(tmp_path / 'absent'), 'nvidia')
        assert nodes == {'nodes': [], 'per_device_count': 0,
                         'missing': [str(tmp_path / 'absent' / n) for n in ('nvidiactl', 'nvidia-uvm')]}


# ---------------------------------------------------------------------------
# Simulators, read by the module's parsers
# ---------------------------------------------------------------------------
VENDOR_NAMES = ['ascend', 'metax', 'musa', 'nvidia']


def simulated_listing(node):
    rc, out, err = node.run(*accel.listing_args(node.vendor))
    assert rc == 0, err
    return accel.listing_parser(node.vendor)(out)


class TestSimulators:
    @pytest.mark.parametrize('vendor', VENDOR_NAMES)
    def test_default_profile_parses(self, tmp_path, vendor):
        node = Node(tmp_path, vendor)
        result = simulated_listing(node)
        assert result['driver_version'] == DRIVER_VERSIONS[vendor]
        devices = result['devices']
        assert len(devices) == 8
        assert [d['index'] for d in devices] == list(range(8))
        assert {d['name'] for d in devices} == {node.profile['model']}
        assert [d['bus_id'] for d in devices] == node.profile['bus_ids']
        assert {d['memory_total_mb'] for d in devices} == {node.profile['memory_mb']}
        assert {d['memory_used_mb'] for d in devices} == {node.profile['memory_used_mb']}
        # The lab's accelerators idle unless the profile says otherwise.
        assert {d['utilization_percent'] for d in devices} == {0}
        assert accel.overall_health(devices) == 'OK'

    @pytest.mark.parametrize('vendor', VENDOR_NAMES)
    @pytest.mark.parametrize('load', [37, 100])
    def test_profile_utilisation_parses(self, tmp_path, vendor, load):
        node = Node(tmp_path, vendor)
        node.profile.update(utilization_percent=load, memory_used_mb=41000)
        (node.root / 'etc' / 'vllm-fleet-lab' / 'hardware.json').write_text(json.dumps(node.profile))
        devices = simulated_listing(node)['devices']
        assert [(d['utilization_percent'], d['memory_used_mb'], d['memory_total_mb']) for d in devices] == [
            (load, 41000, node.profile['memory_mb'])] * 8

    @pytest.mark.parametrize('vendor', VENDOR_NAMES)
    def test_devices_follow_device_nodes(self, tmp_path, vendor):
        node = Node(tmp_path, vendor, devices=[0, 1, 5])
        assert [d['index'] for d in simulated_listing(node)['devices']] == [0, 1, 5]

    def test_ascend_health_overrides(self, tmp_path):
        node = Node(tmp_path, 'ascend', health={'3': 'Critical', '5': 'Warning', '6': 'Alarm'})
        devices = simulated_listing(node)['devices']
        assert [d['health'] for d in devices] == ['OK', 'OK', 'OK', 'Critical', 'OK',
                                                  'Warning', 'Critical', 'OK']
        assert accel.overall_health(devices) == 'Critical'

    @pytest.mark.parametrize('vendor', ['metax', 'musa', 'nvidia'])
    def test_gpu_health_override_reads_critical(self, tmp_path, vendor):
        node = Node(tmp_path, vendor, health={'2': 'Critical'})
        devices = simulated_listing(node)['devices']
        assert [d['index'] for d in devices if d['health'] != 'OK'] == [2]
        assert devices[2]['health'] == 'Critical'
        assert len(devices) == 8
        if vendor == 'nvidia':
            # The query shows [Unknown Error] for the sick GPU's utilisation: unknown, not 0.
            assert [d['utilization_percent'] for d in devices] == [0, 0, None, 0, 0, 0, 0, 0]

    @pytest.mark.parametrize('vendor, rc, text', [
        ('ascend', 1, 'dcmi module initialize failed. ret is -8005'),
        ('metax', 1, 'Failed to initialize MXSML'),
        ('musa', 1, 'Failed to initialize MTML: Driver Not Loaded'),
        ('nvidia', 9, "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver"),
    ])
    def test_no_driver(self, tmp_path, vendor, rc, text):
        node = Node(tmp_path, vendor, driver=False)
        got_rc, out, _err = node.run(*accel.listing_args(vendor))
        assert got_rc == rc
        assert text in out
        assert accel.listing_parser(vendor)(out)['devices'] == []

    @pytest.mark.parametrize('vendor, rc, text', [
        ('ascend', 1, 'dcmi module initialize failed'),
        ('metax', 1, 'reboot'),
        ('musa', 1, 'Driver/library version mismatch'),
        ('nvidia', 18, 'Failed to initialize NVML: Driver/library version mismatch'),
    ])
    def test_pending_reboot(self, tmp_path, vendor, rc, text):
        node = Node(tmp_path, vendor, reboot=True)
        got_rc, out, _err = node.run(*accel.listing_args(vendor))
        assert (got_rc, text in out) == (rc, True)

    def test_npu_smi_follows_the_recorded_install_path(self, tmp_path):
        node = Node(tmp_path, 'ascend', driver=False)
        node.touch(node.root / 'etc' / 'ascend_install.info',
                   'UserName=HwHiAiUser\nDriver_Install_Path_Param=/opt/ascend\n'
                   'Firmware_Install_Path_Param=/opt/ascend\n')
        node.touch(node.root / 'opt' / 'ascend' / 'driver' / 'version.info', 'Version=25.5.0\n')
        node.touch(node.root / 'opt' / 'ascend' / 'firmware' / 'version.info',
                   'Version=7.8.0.2.212\n')
        assert simulated_listing(node)['driver_version'] == '25.5.0'
        board = accel.parse_npu_smi_keyvalues(node.run('info', '-t', 'board', '-i', '0')[1])
        assert board['Firmware Version'] == '7.8.0.2.212'

    def test_real_failure_texts_match_recordings(self, tmp_path):
        ascend = Node(tmp_path / 'a', 'ascend', driver=False)
        assert ascend.run('info')[1] == fixture('npu-smi-info-dcmi-8005.txt')
        nvidia = Node(tmp_path / 'n', 'nvidia', driver=False)
        assert nvidia.run()[1] == fixture('nvidia-smi-no-driver.txt')

    def test_missing_profile(self, tmp_path):
        node = Node(tmp_path, 'nvidia')
        (node.root / 'etc' / 'vllm-fleet-lab' / 'hardware.json').unlink()
        rc, _out, err = node.run('-L')
        assert rc == 2
        assert 'vllm-fleet lab simulator' in err and 'hardware.json' in err

    @pytest.mark.parametrize('vendor, args', [
        ('ascend', ['upgrade', '-b', 'mcu', '-i', '0']),
        ('metax', ['topo', '-m']),
        ('musa', ['-q']),
        ('nvidia', ['--bogus']),
    ])
    def test_unsupported_arguments_fail_loudly(self, tmp_path, vendor, args):
        rc, out, err = Node(tmp_path, vendor).run(*args)
        assert rc == 2
        assert out + err


class TestSimulatorLayouts:
    """The simulators print the real tools' layout, rule for rule."""

    def test_npu_smi_table(self, tmp_path):
        real = fixture('npu-smi-info-910b3-x8.txt').splitlines()
        simulated = Node(tmp_path, 'ascend').run('info')[1].splitlines()
        # Same headers and rules, and every line as wide as the real one.
        assert simulated[2:6] == real[2:6]
        assert simulated[-4:] == real[-4:]
        assert len(simulated) == len(real)
        assert {len(line) for line in simulated} == {len(line) for line in real} == {98}

    def test_npu_smi_list_and_board(self, tmp_path):
        node = Node(tmp_path, 'ascend')
        rc, out, _err = node.run('info', '-l')
        assert rc == 0
        assert out == fixture('npu-smi-info-l-910b4-x8.txt')
        rc, out, _err = node.run('info', '-t', 'board', '-i', '3')
        board = accel.parse_npu_smi_keyvalues(out)
        assert rc == 0
        assert board['Firmware Version'] == ASCEND_FIRMWARE
        assert board['Software Version'] == DRIVER_VERSIONS['ascend']
        assert board['PCIe Bus Info'] == '0000:02:00.0'
        assert board['PCI Device ID'] == '0xD802'
        real_keys = list(accel.parse_npu_smi_keyvalues(fixture('npu-smi-board-910.txt')))
        assert list(board) == real_keys
        assert node.run('info', '-t', 'board', '-i', '8')[0] == 2

    def test_npu_smi_health_query(self, tmp_path):
        node = Node(tmp_path, 'ascend', health={'4': 'Warning'})
        values = accel.parse_npu_smi_keyvalues(node.run('info', '-t', 'health', '-i', '4')[1])
        assert values['Health Status'] == 'Warning'

    def test_mx_smi_table(self, tmp_path):
        real = fixture('mx-smi-c500-x1-gpu-state.txt').splitlines()
        simulated = Node(tmp_path, 'metax').run()[1].splitlines()
        start = real.index('|------------------------------------+---------------------+----------------------+')
        sim_start = simulated.index(real[start])
        assert simulated[sim_start:sim_start + 4] == real[start:start + 4]
        assert simulated[-10:] == real[-10:]

    def test_mx_smi_list(self, tmp_path):
        out = Node(tmp_path, 'metax', health={'1': 'Critical'}).run('-L')[1].splitlines()
        assert out[0] == 'mx-smi  version: 2.2.4'
        assert out[1].startswith('GPU#0    MXC500      0000:0e:00.0   Available (UUID: GPU-')
        assert out[2] == 'GPU#1    MXC500      0000:0f:00.0   Not Available'
        assert len(out) == 9

    def test_mthreads_gmi_table(self, tmp_path):
        real = [line.rstrip() for line in fixture('mthreads-gmi-s5000-x8.txt').splitlines()]
        simulated = [line.rstrip() for line in Node(tmp_path, 'musa').run()[1].splitlines()]
        assert simulated[1] == real[1]
        assert simulated[4:8] == real[4:8]
        assert simulated[-8:] == real[-8:]
        assert len(simulated) == len(real)

    def test_nvidia_smi_list(self, tmp_path):
        out = Node(tmp_path, 'nvidia').run('-L')[1].splitlines()
        assert len(out) == 8
        assert out[3].startswith('GPU 3: NVIDIA A100-SXM4-80GB (UUID: GPU-')
        assert len({line.split('UUID: ')[1] for line in out}) == 8

    def test_nvidia_smi_query_with_header_and_units(self, tmp_path):
        node = Node(tmp_path, 'nvidia')
        rc, out, _err = node.run('--query-gpu=' + ','.join(accel.NVIDIA_QUERY_FIELDS),
                                 '--format=csv')
        assert rc == 0
        header = fixture('nvidia-smi-query-a100-x2-header-units.csv').splitlines()[0]
        assert out.splitlines()[0] == header
        assert accel.parse_nvidia_smi_csv(out)['devices'] == simulated_listing(node)['devices']

    def test_nvidia_smi_query_by_id_and_bad_field(self, tmp_path):
        node = Node(tmp_path, 'nvidia')
        rc, out, _err = node.run('-i', '3', '--query-gpu=index,pci.bus_id',
                                 '--format=csv,noheader')
        assert (rc, out) == (0, '3, 00000000:4E:00.0\n')
        rc, out, _err = node.run('--query-gpu=index,bogus', '--format=csv')
        assert rc == 2
        assert 'Field "bogus" is not a valid field to query.' in out

    def test_nvidia_smi_table(self, tmp_path):
        out = Node(tmp_path, 'nvidia', health={'1': 'Critical'}).run()[1].splitlines()
        assert 'Driver Version: 535.161.08   CUDA Version: 12.2' in out[2]
        assert {len(line) for line in out[1:]} == {89}
        # Row 2 of GPU 0 (line 9) is healthy; row 2 of GPU 1 (line 13) shows the errors.
        assert 'ERR!' not in out[9]
        assert out[13].count('ERR!') == 4


# ---------------------------------------------------------------------------
# The module
# ---------------------------------------------------------------------------
class TestModule:
    def test_unknown_vendor_is_refused_with_the_list(self, tmp_path, capsys):
        code, result = run_module({'vendor': 'acme', 'pci_path': str(tmp_path)}, capsys)
        assert code == 1 and result['failed'] is True
        assert result['msg'] == 'vendor=acme is not one of ' + ', '.join(sorted(accel.VENDORS))

    def test_every_spec_names_functions_of_the_file(self):
        for vendor, spec in accel.VENDORS.items():
            for key in ('parser', 'firmware', 'reader'):
                if spec.get(key):
                    assert callable(getattr(accel, spec[key])), (vendor, key)
            # A vendor has either a device listing to parse or a reader of its own.
            assert bool(accel.listing_parser(vendor)) != bool(spec.get('reader')), vendor

    def test_ascend_node(self, tmp_path, capsys, monkeypatch):
        node = Node(tmp_path, 'ascend')
        facts = facts_of(node.module_args(), capsys, monkeypatch, node)
        dev = str(node.dev)
        assert facts['vendor'] == 'ascend'
        assert facts['vendor_id'] == '0x19e5'
        assert facts['family'] == '910B'
        assert facts['model'] == '910B3'
        assert facts['count'] == 8
        assert facts['pci_devices'][0] == {'address': '0000:01:00.0', 'vendor_id': '0x19e5',
                                           'device_id': '0xd802', 'family': '910B'}
        assert [p['address'] for p in facts['pci_devices']] == sorted(node.profile['bus_ids'])
        assert facts['device_nodes'] == ['%s/davinci%d' % (dev, i) for i in range(8)] + [
            dev + '/davinci_manager', dev + '/devmm_svm', dev + '/hisi_hdc']
        assert facts['device_node_count'] == 8
        assert facts['missing_device_nodes'] == []
        assert facts['smi'] == {'tool': 'npu-smi', 'path': str(node.smi), 'available': True,
                                'rc': 0, 'error': None}
        assert facts['driver_version'] == '24.1.0.3'
        assert facts['firmware_version'] == ASCEND_FIRMWARE
        assert len(facts['devices']) == 8
        assert facts['devices'][0] == {'index': 0, 'name': '910B3', 'health': 'OK',
                                       'bus_id': '0000:c1:00.0', 'memory_total_mb': 65536,
                                       'memory_used_mb': 3396, 'utilization_percent': 0}
        assert facts['health'] == 'OK'

    def test_ascend_without_driver(self, tmp_path, capsys, monkeypatch):
        node = Node(tmp_path, 'ascend', driver=False)
        facts = facts_of(node.module_args(vendor='ascend'), capsys, monkeypatch, node)
        assert (facts['count'], facts['family'], facts['device_node_count']) == (8, '910B', 8)
        assert facts['smi']['available'] is False
        assert facts['smi']['rc'] == 1
        assert facts['smi']['error'] == fixture('npu-smi-info-dcmi-8005.txt').strip()
        assert facts['devices'] == []
        assert (facts['model'], facts['driver_version'], facts['firmware_version']) == (None, None, None)
        assert facts['health'] == 'unknown'

    def test_ascend_sick_npu(self, tmp_path, capsys, monkeypatch):
        node = Node(tmp_path, 'ascend', health={'6': 'Alarm'})
        facts = facts_of(node.module_args(), capsys, monkeypatch, node)
        assert facts['health'] == 'Critical'
        assert [d['index'] for d in facts['devices'] if d['health'] == 'Critical'] == [6]

    def test_missing_control_nodes(self, tmp_path, capsys, monkeypatch):
        node = Node(tmp_path, 'ascend', control=False, count=4)
        facts = facts_of(node.module_args(), capsys, monkeypatch, node)
        assert facts['missing_device_nodes'] == [
            str(node.dev / n) for n in ('davinci_manager', 'devmm_svm', 'hisi_hdc')]
        assert (facts['count'], facts['device_node_count'], len(facts['devices'])) == (4, 4, 4)

    @pytest.mark.parametrize('vendor, family', [('metax', 'C500'), ('musa', 'S4000'),
                                                ('nvidia', 'A100')])
    def test_gpu_nodes_detected_from_pci(self, tmp_path, capsys, monkeypatch, vendor, family):
        node = Node(tmp_path, vendor)
        if vendor == 'nvidia':
            # Companion functions of another kind must not be counted.
            node.pci_function('0000:07:00.1', '0x10de', '0x1aef', '0x040300')
        facts = facts_of(node.module_args(), capsys, monkeypatch, node)
        assert facts['vendor'] == vendor
        assert facts['vendor_id'] == node.profile['pci']['vendor_id']
        assert facts['family'] == family
        assert facts['model'] == node.profile['model']
        assert facts['count'] == 8
        assert facts['device_node_count'] == 8
        assert facts['missing_device_nodes'] == []
        assert facts['driver_version'] == DRIVER_VERSIONS[vendor]
        assert facts['firmware_version'] is None
        assert [d['bus_id'] for d in facts['devices']] == node.profile['bus_ids']
        assert facts['health'] == 'OK'
        assert facts['smi']['available'] is True

    def test_nvidia_pending_reboot(self, tmp_path, capsys, monkeypatch):
        node = Node(tmp_path, 'nvidia', reboot=True)
        facts = facts_of(node.module_args(), capsys, monkeypatch, node)
        assert facts['smi']['rc'] == 18
        assert facts['smi']['error'] == ('Failed to initialize NVML: Driver/library version '
                                         'mismatch\nNVML library version: 535.161.08')
        assert (facts['count'], facts['devices'], facts['health']) == (8, [], 'unknown')

    @pytest.mark.skipif(any(os.path.exists(os.path.join(d, 'npu-smi')) for d in
                             accel.VENDORS['ascend']['tool_dirs'] + ['/sbin', '/usr/sbin']),
                        reason='this machine has a real npu-smi')
    def test_tool_not_found(self, tmp_path, capsys, monkeypatch):
        node = Node(tmp_path, 'ascend')
        monkeypatch.setenv('PATH', str(tmp_path / 'empty'))
        args = node.module_args()
        del args['smi_path']
        facts = facts_of(args, capsys, monkeypatch, node)
        assert facts['smi'] == {
            'tool': 'npu-smi', 'path': None, 'available': False, 'rc': None,
            'error': 'npu-smi not found in /usr/local/bin, /usr/local/sbin, on PATH or in the '
                     'sbin directories'}
        assert (facts['count'], facts['health'], facts['devices']) == (8, 'unknown', [])

    @pytest.mark.skipif(os.path.exists('/usr/bin/mthreads-gmi'),
                        reason='a real mthreads-gmi in /usr/bin comes before PATH')
    def test_tool_found_on_path(self, tmp_path, capsys, monkeypatch):
        node = Node(tmp_path, 'musa')
        # python3 must stay reachable: the simulators start with `#!/usr/bin/env python3`.
        monkeypatch.setenv('PATH', str(BIN) + os.pathsep + os.environ['PATH'])
        args = node.module_args()
        del args['smi_path']
        facts = facts_of(args, capsys, monkeypatch, node)
        assert facts['smi']['path'] == str(BIN / 'mthreads-gmi')
        assert len(facts['devices']) == 8

    def test_explicit_tool_missing(self, tmp_path, capsys, monkeypatch):
        node = Node(tmp_path, 'nvidia')
        absent = str(tmp_path / 'nvidia-smi')
        facts = facts_of(node.module_args(smi_path=absent), capsys, monkeypatch, node)
        assert facts['smi'] == {'tool': 'nvidia-smi', 'path': absent, 'available': False,
                                'rc': None, 'error': '%s is not an executable file' % absent}

    def test_tool_exits_non_zero(self, tmp_path, capsys, monkeypatch):
        node = Node(tmp_path, 'metax')
        broken = tmp_path / 'mx-smi'
        broken.write_text('#!/bin/sh\necho "starting" \necho "line one" >&2\n'
                          'echo "mxsml: device lost" >&2\nexit 3\n')
        broken.chmod(0o755)
        facts = facts_of(node.module_args(smi_path=str(broken)), capsys, monkeypatch, node)
        assert facts['smi'] == {'tool': 'mx-smi', 'path': str(broken), 'available': False,
                                'rc': 3, 'error': 'line one\nmxsml: device lost'}
        assert (facts['count'], facts['model'], facts['health']) == (8, None, 'unknown')

    def test_tool_that_cannot_execute(self, tmp_path, capsys, monkeypatch):
        node = Node(tmp_path, 'nvidia')
        broken = tmp_path / 'nvidia-smi'
        broken.write_text('#!/nonexistent/interpreter\n')
        broken.chmod(0o755)
        facts = facts_of(node.module_args(smi_path=str(broken)), capsys, monkeypatch, node)
        assert facts['smi']['available'] is False
        assert facts['smi']['rc'] is None
        assert str(broken) in facts['smi']['error']

    def test_no_accelerators(self, tmp_path, capsys, monkeypatch):
        facts = facts_of({'pci_path': str(tmp_path / 'x'), 'dev_path': str(tmp_path / 'y')},
                         capsys, monkeypatch)
        assert facts == {
            'vendor': None, 'vendor_id': None, 'family': None, 'model': None, 'count': 0,
            'pci_devices': [], 'device_nodes': [], 'device_node_count': 0,
            'missing_device_nodes': [],
            'smi': {'tool': None, 'path': None, 'available': False, 'rc': None,
                    'error': 'no accelerator vendor given or found on PCI'},
            'driver_version': None, 'firmware_version': None, 'devices': [],
            'health': 'unknown'}

    def test_check_mode_reports_the_same(self, tmp_path, capsys, monkeypatch):
        node = Node(tmp_path, 'nvidia')
        normal = facts_of(node.module_args(), capsys, monkeypatch, node)
        checked = facts_of(dict(node.module_args(), _ansible_check_mode=True), capsys,
                           monkeypatch, node)
        assert checked == normal

    def test_smi_path_without_vendor_fails_early(self, tmp_path, capsys):
        code, result = run_module({'pci_path': str(tmp_path), 'smi_path': '/usr/bin/true'},
                                  capsys)
        assert code == 1
        assert result['failed'] is True
        assert 'smi_path=/usr/bin/true needs vendor' in result['msg']

    def test_pci_path_must_be_a_directory(self, tmp_path, capsys):
        not_dir = tmp_path / 'file'
        not_dir.write_text('')
        code, result = run_module({'pci_path': str(not_dir)}, capsys)
        assert code == 1
        assert result['msg'] == 'pci_path=%s is not a directory' % not_dir

    def test_unknown_vendor_is_refused(self, capsys):
        code, result = run_module({'vendor': 'intel'}, capsys)
        assert code == 1
        assert 'vendor' in result['msg'] and 'ascend, cpu, metax, musa, nvidia' in result['msg']


# ---------------------------------------------------------------------------
# Through Ansible itself: module_utils from ansible.cfg, documentation
# ---------------------------------------------------------------------------
ANSIBLE_BIN = Path(sys.executable).parent


@pytest.mark.ansible
def test_ad_hoc_run_through_ansible(tmp_path):
    """`ansible -m accelerator_facts` from the repository, as the lab's playbooks run it."""
    node = Node(tmp_path, 'ascend', count=2)
    args = ' '.join('%s=%s' % item for item in node.module_args(vendor='ascend').items())
    proc = subprocess.run(
        [str(ANSIBLE_BIN / 'ansible'), 'localhost', '-i', 'localhost,', '-c', 'local',
         '-e', 'ansible_python_interpreter=%s' % sys.executable,
         '-m', 'accelerator_facts', '-a', args],
        # Ansible itself insists on a UTF-8 locale; the module sets LC_ALL=C for the tool.
        cwd=REPO, env=dict(node.env(), LC_ALL='C.UTF-8'), capture_output=True, text=True,
        check=False, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    result = json.loads(proc.stdout.split(' => ', 1)[1])
    facts = result['ansible_facts']['accelerators']
    assert (facts['count'], facts['model'], facts['driver_version']) == (2, '910B3', '24.1.0.3')
    assert [d['bus_id'] for d in facts['devices']] == ['0000:c1:00.0', '0000:01:00.0']
    assert result['changed'] is False


@pytest.mark.ansible
def test_documentation_matches_argument_spec_and_facts(tmp_path, capsys, monkeypatch):
    proc = subprocess.run([str(ANSIBLE_BIN / 'ansible-doc'), '-M', str(REPO / 'library'),
                           '-j', 'accelerator_facts'],
                          cwd=REPO, capture_output=True, text=True, check=True, timeout=120)
    doc = json.loads(proc.stdout)['accelerator_facts']
    options = doc['doc']['options']
    assert set(options) == {'vendor', 'pci_path', 'dev_path', 'smi_path', 'proc_path', 'node_path'}
    # The list has one home (VENDORS); the documentation points to it.
    assert 'choices' not in options['vendor']
    assert 'VENDORS' in ' '.join(options['vendor']['description'])
    assert options['pci_path']['default'] == '/sys/bus/pci/devices'
    assert options['dev_path']['default'] == '/dev'
    assert doc['examples'].strip()

    documented = doc['return']['ansible_facts']['contains']['accelerators']['contains']
    assert set(documented) == FACT_KEYS | {'cpu'}
    assert set(documented['devices']['contains']) == DEVICE_KEYS | {'cpus'}
    assert set(documented['cpu']['contains']) == {'model_name', 'logical_cpus', 'isa', 'memory_mb'}
    assert set(documented['smi']['contains']) == {'tool', 'path', 'available', 'rc', 'error'}
    assert set(documented['pci_devices']['contains']) == {'address', 'vendor_id', 'device_id',
                                                          'family'}

    node = Node(tmp_path, 'ascend')
    facts = facts_of(node.module_args(), capsys, monkeypatch, node)
    assert set(facts['smi']) == set(documented['smi']['contains'])
    assert set(facts['pci_devices'][0]) == set(documented['pci_devices']['contains'])


# ---------------------------------------------------------------------------
# CPU nodes: NUMA nodes as devices, cores, ISA and memory from /proc and sysfs
# ---------------------------------------------------------------------------
CPUINFO = """processor\t: 0
model name\t: Intel(R) Xeon(R) Platinum 8480+
flags\t\t: fpu sse2 avx avx2 avx512f avx512_bf16 amx_bf16 amx_tile amx_int8

processor\t: 1
model name\t: Intel(R) Xeon(R) Platinum 8480+
flags\t\t: fpu sse2 avx avx2 avx512f avx512_bf16 amx_bf16 amx_tile amx_int8

processor\t: 2
processor\t: 3
"""


def cpu_node(tmp_path, numa=(("0-1", 4096), ("2-3", 4096))):
    proc = tmp_path / 'proc'
    proc.mkdir()
    (proc / 'cpuinfo').write_text(CPUINFO)
    (proc / 'meminfo').write_text('MemTotal:        8388608 kB\nMemFree:  1 kB\n')
    nodes = tmp_path / 'node'
    nodes.mkdir()
    for i, (cpus, mb) in enumerate(numa):
        (nodes / f'node{i}').mkdir()
        (nodes / f'node{i}' / 'cpulist').write_text(cpus + '\n')
        (nodes / f'node{i}' / 'meminfo').write_text(f'Node {i} MemTotal:       {mb * 1024} kB\n')
    (nodes / 'online').write_text('0-1\n')
    return {'vendor': 'cpu', 'proc_path': str(proc), 'node_path': str(nodes)}


class TestCpu:
    def test_numa_nodes_are_the_devices(self, tmp_path, capsys):
        code, result = run_module(cpu_node(tmp_path), capsys)
        assert code == 0, result
        facts = result['ansible_facts']['accelerators']
        assert set(facts) == FACT_KEYS | {'cpu'}
        assert facts['vendor'] == 'cpu' and facts['count'] == 2 and facts['health'] == 'OK'
        assert facts['model'] == os.uname().machine
        assert [(d['index'], d['cpus'], d['memory_total_mb']) for d in facts['devices']] == [
            (0, [0, 1], 4096), (1, [2, 3], 4096)]
        # The device shape of the GPU vendors, with nothing to say about load or memory in use.
        assert all(set(d) == DEVICE_KEYS | {'cpus'} for d in facts['devices'])
        assert {(d['utilization_percent'], d['memory_used_mb']) for d in facts['devices']} == {(None, None)}
        assert facts['cpu'] == {'model_name': 'Intel(R) Xeon(R) Platinum 8480+', 'logical_cpus': 4,
                                'isa': ['avx2', 'avx512f', 'avx512_bf16', 'amx_bf16', 'amx_int8', 'amx_tile'],
                                'memory_mb': 8192}
        assert facts['smi']['available'] is True and facts['pci_devices'] == []

    def test_a_container_without_numa_in_sysfs_is_one_node(self, tmp_path, capsys):
        args = cpu_node(tmp_path, numa=())
        code, result = run_module(args, capsys)
        facts = result['ansible_facts']['accelerators']
        assert facts['count'] == 1 and facts['devices'][0]['cpus'] == [0, 1, 2, 3]
        assert facts['devices'][0]['memory_total_mb'] == 8192

    @pytest.mark.parametrize('text, cpus', [('0-3,8,10-11', [0, 1, 2, 3, 8, 10, 11]), ('', []),
                                            ('5', [5]), ('x,2', [2])])
    def test_cpu_lists(self, text, cpus):
        assert accel.parse_cpulist(text) == cpus
