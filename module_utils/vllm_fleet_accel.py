# Copyright (c) vllm-fleet contributors
# Apache-2.0 (see pyproject.toml)
"""Pure functions behind ``library/accelerator_facts.py``.

Everything here reads text or a directory tree and returns plain data, so it can be
unit-tested against recorded outputs without Ansible and without hardware:

- :func:`scan_pci` reads a sysfs-like PCI tree (``<pci_path>/<address>/vendor|device|class``);
- :func:`detect_vendor` picks the accelerator vendor from those functions;
- :func:`find_device_nodes` lists the vendor's device nodes under a ``/dev``-like tree;
- ``parse_*`` read the vendor management tools' output: ``npu-smi`` (Huawei Ascend),
  ``mx-smi`` (MetaX), ``mthreads-gmi`` (Moore Threads), ``nvidia-smi`` (NVIDIA);
- :func:`overall_health` folds per-device health into one word.

Every parser returns the same shape::

    {"tool_version": str|None, "driver_version": str|None,
     "devices": [{"index", "name", "health", "bus_id", "memory_total_mb", "memory_used_mb",
                  "utilization_percent"}]}

Device ``health`` is normalised to ``OK``, ``Warning``, ``Critical`` or ``unknown``, and
``bus_id`` to the sysfs spelling (``0000:c1:00.0``) so it can be matched to PCI functions.
``utilization_percent`` is the tool's busy figure as a whole percentage (GPU-Util, %GPU,
``utilization.gpu``; AICore(%) on Ascend), ``None`` where the tool shows none (``N/A``, an
error marker); memory figures are MiB, ``None`` when unreadable.
"""

from __future__ import annotations

import csv
import os
import re
import shutil
import subprocess

# nvidia-smi's device listing: the fields parse_nvidia_smi_csv expects, in this order.
NVIDIA_QUERY_FIELDS = ('index', 'name', 'uuid', 'pci.bus_id', 'driver_version',
                       'memory.total', 'memory.used', 'temperature.gpu', 'utilization.gpu')
NVIDIA_QUERY_ARGS = ['--query-gpu=' + ','.join(NVIDIA_QUERY_FIELDS),
                     '--format=csv,noheader,nounits']

# ---------------------------------------------------------------------------
# Vendor table: one spec per vendor
# ---------------------------------------------------------------------------
# Each spec says how the vendor's devices are found on a node:
# - pci_vendor_id and families (device ID -> family name): the PCI scan (scan_pci);
# - tool, tool_dirs: the management tool and where its installers put it (locate_tool);
# - listing: the tool's arguments for its device listing, and parser: the name of the
#   function of this file that reads that listing (every parser returns the same shape);
# - firmware: the name of a function reading the firmware version (or None);
# - per_device_node, extra_nodes, control_nodes: its device nodes (find_device_nodes);
# - reader: the name of a function reading a node without PCI accelerators (CPU nodes).
# A new vendor is one entry here (docs/CONTRIBUTING-VENDOR.md).
#
# PCI vendor and device IDs, and where they come from:
# - Huawei 0x19e5 with devices 0xd801 (910), 0xd802 (910B), 0xd500 (310P): given by the
#   project; 0xd802 with class 0x1200 ("Processing accelerators") matches `lspci` output
#   of Atlas 800I A2 hosts, and 0xd801 matches `npu-smi info -t board` in Huawei's
#   MindCluster log-collection guide ("PCI Device ID : 0xD801").
# - MetaX 0x9999: gpustack-runtime's MetaX detector (`get_pci_devices(vendor="0x9999")`,
#   citing the PCI-SIG member list). Device 0x4001: a public note that "a MetaX MACA part
#   enumerates as `Display controller: Device 9999:4001`"; that it is the C500 in
#   particular is an assumption (no C500-specific listing was found).
# - Moore Threads 0x1ed5: gpustack-runtime's MThreads detector and Moore Threads' own
#   docs (`lspci -d 1ed5:`). Devices 0x0327 and 0x0323 (MTT S4000) and 0x0321 (MTT S5000):
#   GPU_TYPE_MAP in Moore Threads' musa_deploy tool.
# - NVIDIA 0x10de; device 0x20b2 is "GA100 [A100 SXM4 80GB]" in `lspci -nn` output, and
#   0x20b5 is another GA100 (A100) board.
VENDORS = {
    'ascend': {
        'pci_vendor_id': '0x19e5',
        'families': {'0xd801': '910', '0xd802': '910B', '0xd500': '310P'},
        'tool': 'npu-smi',
        # The driver package installs npu-smi in /usr/local/bin; containers often
        # bind-mount it to /usr/local/sbin.
        'tool_dirs': ['/usr/local/bin', '/usr/local/sbin'],
        'listing': ['info'],
        'parser': 'parse_npu_smi_info',
        'firmware': 'ascend_firmware',
        'per_device_node': r'davinci(\d+)',
        'extra_nodes': [],
        'control_nodes': ['davinci_manager', 'devmm_svm', 'hisi_hdc'],
    },
    'metax': {
        'pci_vendor_id': '0x9999',
        'families': {'0x4001': 'C500'},
        'tool': 'mx-smi',
        # The SDK puts it in /opt/maca/bin; the host driver package in /opt/mxdriver/bin.
        'tool_dirs': ['/opt/maca/bin', '/opt/mxdriver/bin'],
        # Render nodes, not cardN: a BMC's display adapter (e.g. ASPEED) also gets a
        # /dev/dri/cardN but never a render node, so render nodes count only the GPUs.
        'listing': [],
        'parser': 'parse_mx_smi',
        'per_device_node': r'dri/renderD(\d+)',
        'extra_nodes': [r'dri/card\d+'],
        'control_nodes': ['mxcd'],
    },
    'musa': {
        'pci_vendor_id': '0x1ed5',
        'families': {'0x0327': 'S4000', '0x0323': 'S4000', '0x0321': 'S5000'},
        'tool': 'mthreads-gmi',
        'tool_dirs': ['/usr/bin'],
        # Moore Threads' container docs pass --device /dev/mtgpu.N plus /dev/dri.
        'listing': [],
        'parser': 'parse_mthreads_gmi',
        'per_device_node': r'mtgpu\.(\d+)',
        'extra_nodes': [r'dri/card\d+', r'dri/renderD\d+'],
        'control_nodes': [],
    },
    'nvidia': {
        'pci_vendor_id': '0x10de',
        'families': {'0x20b2': 'A100', '0x20b5': 'A100'},
        'tool': 'nvidia-smi',
        'tool_dirs': ['/usr/bin'],
        'listing': NVIDIA_QUERY_ARGS,
        'parser': 'parse_nvidia_smi_csv',
        'per_device_node': r'nvidia(\d+)',
        'extra_nodes': [r'nvidia-uvm-tools', r'nvidia-modeset'],
        'control_nodes': ['nvidiactl', 'nvidia-uvm'],
    },
    # CPU inference nodes (vLLM's CPU backend): no PCI accelerator and no SMI tool; the
    # node's "devices" are its NUMA nodes, read from sysfs, and /proc tells its cores,
    # ISA extensions and memory (read_cpu).
    'cpu': {
        'pci_vendor_id': None,
        'families': {},
        'tool': 'cpuinfo',
        'tool_dirs': [],
        'reader': 'read_cpu',
        'per_device_node': None,
        'extra_nodes': [],
        'control_nodes': [],
    },
}

# PCI base classes that mark an accelerator function: 0x03 display controllers (VGA, 3D,
# "Display controller") and 0x12 processing accelerators. An NVIDIA GPU's HDMI audio
# function (0x0403) shares the vendor ID and must not count as a GPU.
ACCELERATOR_CLASSES = ('0x03', '0x12')

HEALTH_ORDER = ('OK', 'unknown', 'Warning', 'Critical')

_BUS_ID = re.compile(r'^([0-9a-fA-F]{1,8}):([0-9a-fA-F]{2}):([0-9a-fA-F]{2})\.([0-7])$')


# ---------------------------------------------------------------------------
# Small helpers
# ---------------------------------------------------------------------------
def natural_key(text):
    """Sort key that orders ``davinci2`` before ``davinci10``."""
    return [int(part) if part.isdigit() else part for part in re.split(r'(\d+)', text)]


def normalize_bus_id(bus_id):
    """Return a PCI address in sysfs spelling: 4-digit domain, lower case.

    Tools print ``0000:C1:00.0`` (npu-smi) or ``00000000:07:00.0`` (nvidia-smi,
    mthreads-gmi); sysfs names the same function ``0000:c1:00.0``. Text that is not an
    address (npu-smi output is sometimes redacted to ``0000:xx:00.0``) is returned
    stripped and lower-cased, never guessed.
    """
    if bus_id is None:
        return None
    text = bus_id.strip()
    match = _BUS_ID.match(text)
    if not match:
        return text.lower() or None
    domain, bus, slot, function = match.groups()
    return '%04x:%s:%s.%s' % (int(domain, 16) & 0xFFFF, bus.lower(), slot.lower(), function)


def _hex_id(text):
    """``'0x19E5\\n'`` -> ``'0x19e5'``; ``None`` when the text is not hexadecimal."""
    text = (text or '').strip().lower()
    if not text.startswith('0x'):
        text = '0x' + text
    try:
        int(text, 16)
    except ValueError:
        return None
    return text


def _read(path):
    try:
        with open(path, encoding='ascii', errors='replace') as handle:
            return handle.read()
    except OSError:
        return None


def _int_or_none(text):
    match = re.match(r'^\s*(\d+)', text or '')
    return int(match.group(1)) if match else None


def _percent(text):
    """``'37%'``, ``'37 %'``, ``' 37 '`` or ``'36.6'`` -> 37; ``None`` for ``N/A``, an error marker or nothing."""
    match = re.match(r'^\s*(\d+(?:\.\d+)?)\s*%?\s*$', text or '')
    return int(round(float(match.group(1)))) if match else None


# ---------------------------------------------------------------------------
# PCI and device nodes
# ---------------------------------------------------------------------------
def _family(vendor, device_id):
    return VENDORS[vendor]['families'].get(device_id) if vendor else None


def _vendor_by_pci_id(vendor_id):
    for name, spec in VENDORS.items():
        if spec['pci_vendor_id'] is not None and spec['pci_vendor_id'] == vendor_id:
            return name
    return None


def scan_pci(pci_path):
    """List the accelerator functions of the known vendors under ``pci_path``.

    Each entry of ``pci_path`` is a PCI function directory holding ``vendor`` and
    ``device`` files and, on real systems, ``class``. A function counts when its class
    is a display controller or a processing accelerator. Without a ``class`` file (a
    hand-made tree) only device IDs listed in :data:`VENDORS` count, so an unknown
    function is never taken for an accelerator.

    A missing ``pci_path`` reads as a machine with no accelerators.

    :returns: list of ``{address, vendor, vendor_id, device_id, class, family}``,
        sorted by address.
    """
    try:
        entries = sorted(os.listdir(pci_path))
    except OSError:
        return []
    found = []
    for address in entries:
        base = os.path.join(pci_path, address)
        vendor_id = _hex_id(_read(os.path.join(base, 'vendor')))
        device_id = _hex_id(_read(os.path.join(base, 'device')))
        vendor = _vendor_by_pci_id(vendor_id)
        if vendor is None or device_id is None:
            continue
        pci_class = _hex_id(_read(os.path.join(base, 'class')))
        if pci_class is not None:
            # sysfs writes the 24-bit class code as 0xCCSSPP; the base class is CC.
            if not pci_class.startswith(ACCELERATOR_CLASSES) or len(pci_class) != 8:
                continue
        elif _family(vendor, device_id) is None:
            continue
        found.append({
            'address': address.lower(),
            'vendor': vendor,
            'vendor_id': vendor_id,
            'device_id': device_id,
            'class': pci_class,
            'family': _family(vendor, device_id),
        })
    return sorted(found, key=lambda function: function['address'])


def detect_vendor(pci_functions):
    """The vendor with the most accelerator functions, or ``None``.

    A tie (a host with two vendors' cards in equal numbers) goes to the vendor listed
    first in :data:`VENDORS`; pass ``vendor`` explicitly on such hosts.
    """
    counts = {}
    for function in pci_functions:
        counts[function['vendor']] = counts.get(function['vendor'], 0) + 1
    if not counts:
        return None
    order = list(VENDORS)
    return max(counts, key=lambda name: (counts[name], -order.index(name)))


def find_device_nodes(dev_path, vendor):
    """Find the vendor's device nodes under ``dev_path``.

    :returns: dict with ``nodes`` (every existing vendor node, natural order),
        ``per_device_count`` (nodes that stand for one accelerator each, e.g.
        ``davinciN``) and ``missing`` (control nodes the vendor needs that are absent).
    """
    spec = VENDORS[vendor]
    per_device = re.compile(r'^%s$' % spec['per_device_node'])
    extras = [re.compile(r'^%s$' % pattern) for pattern in spec['extra_nodes']]
    controls = set(spec['control_nodes'])

    candidates = []
    for sub in ('', 'dri'):
        try:
            names = os.listdir(os.path.join(dev_path, sub) if sub else dev_path)
        except OSError:
            continue
        candidates.extend(sub + '/' + name if sub else name for name in names)

    nodes, per_device_count = [], 0
    for rel in candidates:
        if per_device.match(rel):
            per_device_count += 1
        elif rel not in controls and not any(extra.match(rel) for extra in extras):
            continue
        nodes.append(os.path.join(dev_path, rel))
    missing = [os.path.join(dev_path, name) for name in spec['control_nodes']
               if not os.path.exists(os.path.join(dev_path, name))]
    return {
        'nodes': sorted(nodes, key=natural_key),
        'per_device_count': per_device_count,
        'missing': missing,
    }


# ---------------------------------------------------------------------------
# Health
# ---------------------------------------------------------------------------
# npu-smi reports OK, Warning, Alarm (major alarm) or Critical (urgent alarm). Alarm is
# folded into Critical: both mean the chip needs attention before it serves traffic.
_ASCEND_HEALTH = {'ok': 'OK', 'warning': 'Warning', 'alarm': 'Critical', 'critical': 'Critical'}


def overall_health(devices):
    """Fold device health into one word: the worst device wins.

    ``OK`` only when there is at least one device and all are ``OK``; ``unknown`` when
    there are no devices or a device reports a state this module does not recognise
    (unless another is worse).
    """
    if not devices:
        return 'unknown'
    worst = 'OK'
    for device in devices:
        health = device.get('health') if device.get('health') in HEALTH_ORDER else 'unknown'
        if HEALTH_ORDER.index(health) > HEALTH_ORDER.index(worst):
            worst = health
    return worst


def _result(tool_version=None, driver_version=None, devices=None, **extra):
    result = {'tool_version': tool_version, 'driver_version': driver_version,
              'devices': devices or []}
    result.update(extra)
    return result


def _device(index, name, health, bus_id, total, used, utilization=None):
    return {
        'index': index,
        'name': name,
        'health': health,
        'bus_id': normalize_bus_id(bus_id),
        'memory_total_mb': total,
        'memory_used_mb': used,
        'utilization_percent': utilization,
    }


def _cells(line):
    """``'| a | b |'`` -> ``[' a ', ' b ']``."""
    return line.strip().strip('|').split('|')


# ---------------------------------------------------------------------------
# Huawei Ascend: npu-smi
# ---------------------------------------------------------------------------
def parse_npu_smi_info(text):
    """Parse ``npu-smi info``.

    Layout (one block per chip, between ``+===`` or ``+---`` rules)::

        | npu-smi 24.1.0.3                 Version: 24.1.0.3                    |
        | NPU   Name                | Health        | Power(W)    Temp(C) ...    |
        | Chip                      | Bus-Id        | AICore(%)   Memory-Usage(MB)  HBM-Usage(MB) |
        +===========================+===============+=============================+
        | 0     910B3               | OK            | 94.7        54    0    / 0 |
        | 0                         | 0000:C1:00.0  | 0     0    / 0    3396 / 65536 |

    The first row of a block holds the NPU id, name and health, the second the bus id,
    the AICore utilisation (the first figure of its third cell, unless that figure is the
    first half of a ``used / total`` pair) and memory. Blocks are read by position because
    the second row of multi-chip boards (``| 0     0  | 0000:9D:00.0 |``) has two tokens in
    its first cell, like a first row.
    Memory is the HBM column, or the DDR column on boards without HBM. Reading stops at
    the process table.
    """
    tool_version = driver_version = None
    devices = []
    block = []
    in_table = False

    def flush():
        if len(block) < 2:
            return
        first, second = _cells(block[0]), _cells(block[1])
        if len(first) < 2 or len(second) < 3:
            return
        tokens = first[0].split()
        if not tokens or not tokens[0].isdigit():
            return
        health = _ASCEND_HEALTH.get(first[1].strip().lower(), 'unknown')
        pairs = [(int(a), int(b)) for a, b in re.findall(r'(\d+)\s*/\s*(\d+)', second[2])]
        used = total = None
        if pairs:
            # [Memory-Usage(MB), HBM-Usage(MB)]: prefer HBM when the board has it.
            used, total = pairs[-1] if pairs[-1][1] > 0 else pairs[0]
        # AICore(%) leads the cell: '0           0    / 0          3396 / 65536'.
        figures = second[2].split()
        aicore = _percent(figures[0]) if len(figures) > 1 and figures[1] != '/' else None
        devices.append(_device(int(tokens[0]), ' '.join(tokens[1:]) or None, health,
                               second[1].strip(), total, used, aicore))

    for line in text.splitlines():
        header = re.match(r'^\|\s*npu-smi\s+(\S+)\s+Version:\s*(\S+)', line)
        if header:
            tool_version, driver_version = header.groups()
            continue
        if 'Process id' in line:
            break
        if line.startswith('+'):
            if line.startswith('+='):
                in_table = True
            flush()
            block = []
        elif in_table and line.startswith('|'):
            block.append(line)
    else:
        flush()
    return _result(tool_version, driver_version, devices)


def parse_npu_smi_keyvalues(text):
    """Parse ``npu-smi info -t <type> -i N`` (``Key   : value`` lines) into a dict.

    ``NA`` values become ``None``. Used for ``-t board``, whose ``Firmware Version`` is
    the only place npu-smi shows the firmware.
    """
    values = {}
    for line in text.splitlines():
        key, sep, value = line.partition(':')
        if not sep or not key.strip():
            continue
        value = value.strip()
        values[key.strip()] = None if value in ('', 'NA', 'N/A') else value
    return values


# ---------------------------------------------------------------------------
# MetaX: mx-smi
# ---------------------------------------------------------------------------
def parse_mx_smi(text):
    """Parse plain ``mx-smi``.

    Layout::

        mx-smi  version: 2.2.4
        | MX-SMI 2.2.4                        Kernel Mode Driver Version: 2.14.8    |
        | MACA Version: 2.33.0.5              BIOS Version: 1.24.4.0                |
        |====================================+=====================+===============|
        | 0           MetaX C500             | 0000:01:00.0        | 0%            |
        | 45C         48W / 350W             | 858/65536 MiB       | Available     |
        +------------------------------------+---------------------+---------------+

    ``GPU-State`` (the last cell of the second row, mx-smi 2.2 and later) reads
    ``Available`` for a usable GPU; any other state is reported as ``Critical``. Older
    mx-smi has no state column; a GPU it lists is then taken as ``OK``. ``GPU-Util`` is
    the last cell of the first row.
    """
    # 'mx-smi  version: X' opens the output; some copies start at the log banner, so
    # fall back to the 'MX-SMI X' cell of the table header.
    tool = (re.search(r'mx-smi\s+version:\s*(\S+)', text)
            or re.search(r'MX-SMI\s+(\S+)', text))
    driver = re.search(r'Kernel Mode Driver Version:\s*(\S+)', text)
    maca = re.search(r'MACA Version:\s*(\S+)', text)
    bios = re.search(r'BIOS Version:\s*(\S+)', text)

    devices = []
    rows = []
    in_table = False

    def flush():
        if len(rows) != 2 or len(rows[0]) < 2 or len(rows[1]) < 2:
            return
        head = rows[0][0].split(None, 1)
        if not head or not head[0].isdigit():
            return
        memory = re.search(r'(\d+)\s*/\s*(\d+)\s*MiB', rows[1][1])
        state = rows[1][2].strip() if len(rows[1]) > 2 else ''
        devices.append(_device(
            int(head[0]), head[1].strip() if len(head) > 1 else None,
            'OK' if state in ('', 'Available') else 'Critical',
            rows[0][1].strip(),
            int(memory.group(2)) if memory else None,
            int(memory.group(1)) if memory else None,
            _percent(rows[0][2]) if len(rows[0]) > 2 else None))

    for line in text.splitlines():
        if 'Process:' in line:
            break
        if line.startswith('|='):
            in_table = True
        elif in_table and line.startswith('+'):
            flush()
            rows = []
        elif in_table and line.startswith('|'):
            rows.append(_cells(line))
    flush()
    return _result(tool.group(1) if tool else None, driver.group(1) if driver else None,
                   devices,
                   maca_version=maca.group(1) if maca else None,
                   bios_version=bios.group(1) if bios else None)


# ---------------------------------------------------------------------------
# Moore Threads: mthreads-gmi
# ---------------------------------------------------------------------------
_GMI_DEVICE = re.compile(
    r'^(\d+)\s+(.+?)\s*\|\s*([0-9a-fA-F]{4,8}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7])\s*'
    r'\|\s*(\S+)\s+(\S+)')


def parse_mthreads_gmi(text):
    """Parse plain ``mthreads-gmi``.

    Layout (three rows per GPU; the first carries what we need)::

            mthreads-gmi:2.2.0           Driver Version:3.0.0
        ID   Name                 |PCIe                |%GPU  Mem
        0    MTT S4000            |00000000:08:00.0    |0%    0MiB(49152MiB)
             Physical      N/A    |16x(16x)            |44C   YES

    The table has no health column: a GPU listed with a readable memory figure is
    ``OK``; one whose memory reads otherwise (``N/A``, an error) is ``Critical``. ``%GPU``
    is the utilisation.
    Reading stops at the ``Processes:`` table.
    """
    header = re.search(r'mthreads-gmi:\s*(\S+)\s+Driver Version:\s*(\S+)', text)
    devices = []
    for line in text.splitlines():
        if line.startswith('Processes:'):
            break
        match = _GMI_DEVICE.match(line)
        if not match:
            continue
        index, name, bus_id, util, memory = match.groups()
        mem = re.match(r'^(\d+)MiB\((\d+)MiB\)$', memory)
        devices.append(_device(int(index), name, 'OK' if mem else 'Critical', bus_id,
                               int(mem.group(2)) if mem else None,
                               int(mem.group(1)) if mem else None,
                               _percent(util)))
    return _result(header.group(1) if header else None,
                   header.group(2) if header else None, devices)


# ---------------------------------------------------------------------------
# NVIDIA: nvidia-smi --query-gpu
# ---------------------------------------------------------------------------
# Values nvidia-smi prints in place of a reading when the GPU itself is in trouble (as
# opposed to "[N/A]", which only means "not supported on this board").
_NVIDIA_ERRORS = ('[Unknown Error]', '[GPU is lost]', '[GPU requires reset]', 'ERR!')


def parse_nvidia_smi_csv(text):
    """Parse ``nvidia-smi`` with :data:`NVIDIA_QUERY_ARGS`.

    One line per GPU: ``0, NVIDIA A100-SXM4-80GB, GPU-…, 00000000:07:00.0, 535.161.08,
    81920, 4, 31, 0``. A header line (``--format=csv`` without ``noheader``) is skipped and
    unit suffixes (without ``nounits``) are ignored. A GPU showing one of nvidia-smi's
    error markers in any field is ``Critical``; otherwise it is ``OK``. ``utilization.gpu``
    reads ``[N/A]`` where the board does not report it (MIG mode): ``None``.
    """
    devices = []
    driver_version = None
    for row in csv.reader(text.splitlines(), skipinitialspace=True):
        if len(row) < len(NVIDIA_QUERY_FIELDS) or row[0].strip() == 'index':
            continue
        fields = dict(zip(NVIDIA_QUERY_FIELDS, (value.strip() for value in row), strict=False))
        if not fields['index'].isdigit():
            continue
        broken = any(value in _NVIDIA_ERRORS for value in fields.values())
        if driver_version is None and re.match(r'^\d', fields['driver_version']):
            driver_version = fields['driver_version']
        devices.append(_device(int(fields['index']), fields['name'],
                               'Critical' if broken else 'OK', fields['pci.bus_id'],
                               _int_or_none(fields['memory.total']),
                               _int_or_none(fields['memory.used']),
                               _percent(fields['utilization.gpu'])))
    return _result(None, driver_version, devices)


def _spec_function(vendor, key):
    """The function of this file that VENDORS[vendor][key] names, or None."""
    name = VENDORS[vendor].get(key)
    return globals()[name] if name else None


def listing_args(vendor):
    """The arguments of the vendor tool's device listing."""
    return list(VENDORS[vendor].get('listing') or [])


def listing_parser(vendor):
    """The parser of the vendor tool's device listing, or None for a vendor without a tool (cpu)."""
    return _spec_function(vendor, 'parser')


# ---------------------------------------------------------------------------
# CPU nodes
# ---------------------------------------------------------------------------
#: The ISA extensions vLLM's CPU build picks its kernels by, as /proc/cpuinfo names them
#: (AVX2 everywhere on x86-64 since Haswell; AVX-512 and AMX on recent Xeons and EPYCs).
CPU_ISA_FLAGS = ('avx2', 'avx512f', 'avx512_bf16', 'avx512_vnni', 'amx_bf16', 'amx_int8', 'amx_tile')


def parse_cpulist(text):
    """sysfs CPU lists (``0-3,8,10-11``) -> sorted list of CPU numbers; [] for nothing."""
    cpus = set()
    for part in (text or '').strip().split(','):
        part = part.strip()
        if not part:
            continue
        first, _, last = part.partition('-')
        if not first.isdigit() or (last and not last.isdigit()):
            continue
        cpus.update(range(int(first), int(last or first) + 1))
    return sorted(cpus)


def parse_cpuinfo(text):
    """/proc/cpuinfo -> ``{model_name, logical_cpus, isa}``: the ISA of CPU_ISA_FLAGS the first CPU has."""
    logical = 0
    model_name = None
    flags = set()
    for line in (text or '').splitlines():
        key, sep, value = line.partition(':')
        if not sep:
            continue
        key = key.strip()
        if key == 'processor':
            logical += 1
        elif key == 'model name' and model_name is None:
            model_name = value.strip()
        elif key == 'flags' and not flags:
            flags = set(value.split())
    return {'model_name': model_name, 'logical_cpus': logical,
            'isa': [flag for flag in CPU_ISA_FLAGS if flag in flags]}


def parse_meminfo_mb(text):
    """MemTotal of /proc/meminfo (or of a NUMA node's meminfo) in MiB, or None."""
    match = re.search(r'MemTotal:\s+(\d+)\s*kB', text or '')
    return int(match.group(1)) // 1024 if match else None


def read_cpu(proc_path='/proc', node_path='/sys/devices/system/node', machine=None):
    """The CPU node's facts, in the module's shape: one device per NUMA node.

    A node without NUMA information in sysfs (some containers) counts as one NUMA node
    with every CPU. ``cpu`` adds the logical CPUs, the model name, the ISA extensions of
    CPU_ISA_FLAGS and the memory in MiB.
    """
    cpuinfo = parse_cpuinfo(_read(os.path.join(proc_path, 'cpuinfo')))
    memory_mb = parse_meminfo_mb(_read(os.path.join(proc_path, 'meminfo')))
    devices = []
    try:
        names = sorted((n for n in os.listdir(node_path) if re.match(r'^node\d+$', n)), key=natural_key)
    except OSError:
        names = []
    for name in names:
        base = os.path.join(node_path, name)
        devices.append({'index': int(name[4:]), 'name': 'NUMA %s' % name, 'health': 'OK', 'bus_id': None,
                        'cpus': parse_cpulist(_read(os.path.join(base, 'cpulist'))),
                        'memory_total_mb': parse_meminfo_mb(_read(os.path.join(base, 'meminfo'))),
                        'memory_used_mb': None, 'utilization_percent': None})
    if not devices:
        devices = [{'index': 0, 'name': 'NUMA node0', 'health': 'OK', 'bus_id': None,
                    'cpus': list(range(cpuinfo['logical_cpus'])), 'memory_total_mb': memory_mb,
                    'memory_used_mb': None, 'utilization_percent': None}]
    available = cpuinfo['logical_cpus'] > 0
    return {
        'vendor': 'cpu', 'vendor_id': None, 'family': None,
        'model': machine or os.uname()[4], 'count': len(devices),
        'pci_devices': [], 'device_nodes': [], 'device_node_count': 0, 'missing_device_nodes': [],
        'smi': {'tool': 'cpuinfo', 'path': os.path.join(proc_path, 'cpuinfo'), 'available': available,
                'rc': 0 if available else None, 'error': None if available else 'no CPU in %s/cpuinfo' % proc_path},
        'driver_version': None, 'firmware_version': None,
        'devices': devices, 'health': 'OK' if available else 'unknown',
        'cpu': {'model_name': cpuinfo['model_name'], 'logical_cpus': cpuinfo['logical_cpus'],
                'isa': cpuinfo['isa'], 'memory_mb': memory_mb},
    }


# ---------------------------------------------------------------------------
# Gathering (library/accelerator_facts.py and library/fleet_state.py)
# ---------------------------------------------------------------------------
# Keep error texts short in facts: a failing tool can print pages.
ERROR_TAIL_LINES = 5


def locate_tool(module, vendor, smi_path):
    """Return ``(path, error)`` for the vendor tool; ``path`` is None when not usable."""
    spec = VENDORS[vendor]
    if smi_path:
        if os.path.isfile(smi_path) and os.access(smi_path, os.X_OK):
            return smi_path, None
        return smi_path, '%s is not an executable file' % smi_path
    path = module.get_bin_path(spec['tool'], opt_dirs=spec['tool_dirs'])
    if path:
        return path, None
    return None, '%s not found in %s, on PATH or in the sbin directories' % (
        spec['tool'], ', '.join(spec['tool_dirs']))


def run_tool(module, path, args):
    """Run the tool in the C locale; never fails the module (a broken tool is a fact)."""
    try:
        return module.run_command([path] + list(args), environ_update={'LC_ALL': 'C'},
                                  handle_exceptions=False)
    except OSError as exc:
        return None, '', '%s: %s' % (path, exc.strerror or exc)


def error_text(rc, out, err):
    """The tool's own words on why it failed: stderr, else stdout (npu-smi uses stdout)."""
    text = (err or '').strip() or (out or '').strip()
    if not text:
        return 'exited with status %s and printed nothing' % rc
    return '\n'.join(text.splitlines()[-ERROR_TAIL_LINES:])


def ascend_firmware(module, path, devices):
    """Firmware version from ``npu-smi info -t board`` of the first NPU, or None."""
    if not devices:
        return None
    rc, out, _err = run_tool(module, path, ['info', '-t', 'board', '-i', str(devices[0]['index'])])
    if rc != 0:
        return None
    return parse_npu_smi_keyvalues(out).get('Firmware Version')


def gather(module, params):
    """Collect the facts; the only side effect is running the vendor tool read-only.

    ``module`` runs the tool (an AnsibleModule: get_bin_path, run_command, fail_json);
    ``params`` holds vendor, pci_path, dev_path, smi_path, proc_path and node_path
    (library/accelerator_facts.py's options, which library/fleet_state.py passes on too).
    """
    if params['vendor'] and params['vendor'] not in VENDORS:
        module.fail_json(msg='vendor=%s is not one of %s' % (params['vendor'], ', '.join(sorted(VENDORS))))
    reader = _spec_function(params['vendor'], 'reader') if params['vendor'] else None
    if reader:
        return reader(params['proc_path'], params['node_path'])
    functions = scan_pci(params['pci_path'])
    vendor = params['vendor'] or detect_vendor(functions)

    if params['smi_path'] and vendor is None:
        module.fail_json(msg='smi_path=%s needs vendor: no accelerator was found under %s to '
                             'tell which tool it is' % (params['smi_path'], params['pci_path']))

    facts = {
        'vendor': vendor,
        'vendor_id': VENDORS[vendor]['pci_vendor_id'] if vendor else None,
        'family': None,
        'model': None,
        'count': 0,
        'pci_devices': [],
        'device_nodes': [],
        'device_node_count': 0,
        'missing_device_nodes': [],
        'smi': {'tool': None, 'path': None, 'available': False, 'rc': None,
                'error': 'no accelerator vendor given or found on PCI'},
        'driver_version': None,
        'firmware_version': None,
        'devices': [],
        'health': 'unknown',
    }
    if vendor is None:
        return facts

    mine = [f for f in functions if f['vendor'] == vendor]
    facts['pci_devices'] = [{key: f[key] for key in ('address', 'vendor_id', 'device_id', 'family')}
                            for f in mine]
    facts['count'] = len(mine)
    facts['family'] = mine[0]['family'] if mine else None

    nodes = find_device_nodes(params['dev_path'], vendor)
    facts['device_nodes'] = nodes['nodes']
    facts['device_node_count'] = nodes['per_device_count']
    facts['missing_device_nodes'] = nodes['missing']

    path, error = locate_tool(module, vendor, params['smi_path'])
    smi = {'tool': VENDORS[vendor]['tool'], 'path': path, 'available': False, 'rc': None,
           'error': error}
    facts['smi'] = smi
    if error:
        return facts

    rc, out, err = run_tool(module, path, listing_args(vendor))
    smi['rc'] = rc
    if rc != 0:
        smi['error'] = error_text(rc, out, err)
        return facts
    smi['available'] = True

    parsed = listing_parser(vendor)(out)
    facts['devices'] = parsed['devices']
    facts['driver_version'] = parsed['driver_version']
    facts['model'] = parsed['devices'][0]['name'] if parsed['devices'] else None
    facts['health'] = overall_health(parsed['devices'])
    firmware = _spec_function(vendor, 'firmware')
    if firmware:
        facts['firmware_version'] = firmware(module, path, parsed['devices'])
    return facts


# ---------------------------------------------------------------------------
# Reading outside Ansible: the node's own helpers (roles/services/monitoring's device health
# collector, roles/blocks/health_agent's agent), copied beside this file on the node
# ---------------------------------------------------------------------------
SMI_TIMEOUT_S = 20


def read_devices(vendor, smi_path=None, timeout=SMI_TIMEOUT_S):
    """``(devices, error)``: the vendor tool's listing read by its parser, as the facts module
    reads it; ``error`` (the tool missing or failing, in its own words) when it could not be
    read, then ``devices`` is empty. A vendor without a tool (cpu) has no devices and no error."""
    if vendor not in VENDORS or not listing_parser(vendor):
        return [], None
    spec = VENDORS[vendor]
    tool = smi_path or shutil.which(spec['tool'], path=os.pathsep.join(
        spec['tool_dirs'] + [os.environ.get('PATH', os.defpath)]))
    if not tool:
        return [], '%s not found in %s or on PATH' % (spec['tool'], ', '.join(spec['tool_dirs']))
    try:
        done = subprocess.run([tool] + listing_args(vendor), capture_output=True, text=True,
                              timeout=timeout, env=dict(os.environ, LC_ALL='C'), check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return [], '%s: %s' % (tool, exc)
    if done.returncode != 0:
        return [], '%s %s' % (tool, error_text(done.returncode, done.stdout, done.stderr))
    return listing_parser(vendor)(done.stdout)['devices'], None
