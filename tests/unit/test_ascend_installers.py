"""The lab's simulated Huawei Ascend .run packages (lab/fixtures/installers/ascend).

The packages are built into a temporary directory and run for real (bash, tar,
sha256sum) against a scratch root: VLLM_FLEET_LAB_ROOT prefixes every path they touch,
and VLLM_FLEET_LAB_UNAME_M makes the host look like the packages' architecture.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from tests.conftest import load_module

REPO = Path(__file__).resolve().parents[2]
BUILD_PY = REPO / "lab" / "fixtures" / "installers" / "ascend" / "build.py"

ARCH = "x86_64"
OLD = {"driver": "25.3.rc1", "firmware": "7.8.0.2.212", "cann": "8.3.RC1"}
NEW = {"driver": "25.5.0", "firmware": "7.8.0.5.201", "cann": "8.5.0"}
# The real simulator (lab/fixtures/hardware/bin/npu-smi) is someone else's; the packages
# only carry a copy, so any file does here.
NPU_SMI = b"#!/bin/sh\necho 'npu-smi stand-in for the installer tests'\n"

DRIVER_VERSION_INFO = (
    "Version=25.3.rc1\n"
    "ascendhal_version=7.35.23\n"
    "aicpu_version=1.0\n"
    "tdt_version=1.0\n"
    "log_version=1.0\n"
    "prof_version=2.0\n"
    "dvppkernels_version=1.1\n"
    "tsfw_version=1.0\n"
    "Innerversion=V100R001C23SPC001B201\n"
    "compatible_version=[V100R001C19],[V100R001C20],[V100R001C21],[V100R001C22],[V100R001C23]\n"
    "compatible_version_fw=[7.0.0,8.9.9]\n"
    "package_version=25.3.rc1\n"
)
DRIVER_INSTALL_INFO = (
    "UserName=HwHiAiUser\n"
    "UserGroup=HwHiAiUser\n"
    "Driver_Install_Type=full\n"
    "Driver_Install_Path_Param=/usr/local/Ascend\n"
    "Driver_Install_For_All=no\n"
    "Driver_Install_Mode=normal\n"
    "Driver_Install_Status=complete\n"
)
FIRMWARE_VERSION_INFO = (
    "Version=7.8.0.2.212\n"
    "firmware_version=1.0\n"
    "package_version=25.3.rc1\n"
    "compatible_version_drv=[25.3.rc1,25.3.rc1.]\n"
)
TOOLKIT_INSTALL_INFO = (
    "package_name=Ascend-cann-toolkit\n"
    "version=8.3.RC1\n"
    "innerversion=V100R001C23SPC001B240\n"
    "compatible_version=[V100R001C15],[V100R001C18],[V100R001C19],[V100R001C20],[V100R001C21],[V100R001C23]\n"
    "arch=x86_64\n"
    "os=linux\n"
    "path=/usr/local/Ascend/ascend-toolkit/8.3.RC1/x86_64-linux\n"
)
KERNELS_VERSION_INFO = (
    "Version=8.3.0.1.240\n"
    "version_dir=8.3.RC1\n"
    "timestamp=20250930_000000000\n"
    "ops_version=8.3.0.1.240\n"
    "adk_version=8.3.0.1.240\n"
    'required_package_compiler_version=">=7.6, <=8.3"\n'
    'required_package_hccl_version=">=7.6, <=8.3"\n'
    'required_package_runtime_version=">=7.6, <=8.3"\n'
    'required_package_toolkit_version=">=7.6, <=8.3"\n'
)
NNAL_VERSION_INFO = (
    "Ascend-cann-atb : 8.3.RC1\n"
    "Ascend-cann-atb Version : 8.3.RC1.B200\n"
    "Platform : x86_64\n"
    "branch : br_release_cann_8.3.RC1\n"
    "commit id : f36a6fbdcfd6991d8c223518d7e3bcf71ce90bc3\n"
)

ASCEND = "usr/local/Ascend"
TOOLKIT = f"{ASCEND}/ascend-toolkit"
KERNEL_DIR = f"{TOOLKIT}/8.3.RC1/opp/built-in/op_impl/ai_core/tbe/kernel"
ATB = f"{ASCEND}/nnal/atb"
MARKER = "run/vllm-fleet-lab/reboot-required"


@pytest.fixture(scope="module")
def builder():
    return load_module(BUILD_PY, "ascend_build", register=True)


@pytest.fixture(scope="module")
def npu_smi(tmp_path_factory):
    path = tmp_path_factory.mktemp("hardware") / "npu-smi"
    path.write_bytes(NPU_SMI)
    return path


@pytest.fixture(scope="module")
def old(builder, npu_smi, tmp_path_factory):
    return builder.build_all(tmp_path_factory.mktemp("old"), OLD, arch=ARCH, npu_smi_src=npu_smi)


@pytest.fixture(scope="module")
def new(builder, npu_smi, tmp_path_factory):
    return builder.build_all(tmp_path_factory.mktemp("new"), NEW, arch=ARCH, npu_smi_src=npu_smi)


@pytest.fixture
def root(tmp_path):
    """A node's filesystem as far as the installers care: /etc and the device nodes."""
    base = tmp_path / "root"
    (base / "etc").mkdir(parents=True)
    (base / "etc" / "passwd").write_text("root:x:0:0:root:/root:/bin/bash\n")
    (base / "etc" / "group").write_text("root:x:0:\n")
    (base / "dev").mkdir()
    for index in range(8):
        (base / "dev" / f"davinci{index}").touch()
    return base


def add_user(root: Path, user: str = "HwHiAiUser", group: str = "HwHiAiUser") -> None:
    with open(root / "etc" / "passwd", "a") as passwd:
        passwd.write(f"{user}:x:1000:1000::/home/{user}:/bin/bash\n")
    with open(root / "etc" / "group", "a") as groups:
        groups.write(f"{group}:x:1000:\n")


def lab_env(root: Path, **extra: str) -> dict[str, str]:
    env = {key: value for key, value in os.environ.items()
           if not key.startswith(("ASCEND_", "ATB_", "VLLM_FLEET_LAB_"))}
    env.update({"VLLM_FLEET_LAB_ROOT": str(root), "VLLM_FLEET_LAB_UNAME_M": ARCH, **extra})
    return env


def run(package: dict, *args: str, root: Path, **env: str) -> subprocess.CompletedProcess:
    """Runs a package the way a user does (./file.run ...), stdout and stderr together."""
    return subprocess.run(
        [package["path"], *args], env=lab_env(root, **env), cwd=root.parent,
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=60,
    )


def ok(package: dict, *args: str, root: Path, **env: str) -> str:
    result = run(package, *args, root=root, **env)
    assert result.returncode == 0, result.stdout
    return result.stdout


def fails(package: dict, *args: str, root: Path, **env: str) -> str:
    result = run(package, *args, root=root, **env)
    assert result.returncode == 1, result.stdout
    return result.stdout


def tree(root: Path) -> list[str]:
    return sorted(str(path.relative_to(root)) for path in root.rglob("*"))


def read(root: Path, relative: str) -> str:
    return (root / relative).read_text()


def install_driver(old: dict, root: Path) -> None:
    add_user(root)
    ok(old["driver"], "--full", root=root)


def install_toolkit(packages: dict, root: Path, *args: str) -> None:
    ok(packages["toolkit"], "--install", *args, root=root)


# --- the builder -------------------------------------------------------------------------


def test_build_is_deterministic_and_named_like_huawei(builder, npu_smi, tmp_path, old):
    again = builder.build_all(tmp_path / "again", OLD, arch=ARCH, npu_smi_src=npu_smi)
    assert {key: value["filename"] for key, value in old.items()} == {
        "driver": "Ascend-hdk-910b-npu-driver_25.3.rc1_linux-x86-64.run",
        "firmware": "Ascend-hdk-910b-npu-firmware_7.8.0.2.212.run",
        "toolkit": "Ascend-cann-toolkit_8.3.RC1_linux-x86_64.run",
        "kernels": "Ascend-cann-kernels-910b_8.3.RC1_linux-x86_64.run",
        "nnal": "Ascend-cann-nnal_8.3.RC1_linux-x86_64.run",
    }
    for key, first in old.items():
        second = again[key]
        content = Path(first["path"]).read_bytes()
        assert content == Path(second["path"]).read_bytes(), key
        assert first["sha256"] == second["sha256"] == hashlib.sha256(content).hexdigest()
        assert first["version"] == second["version"]
        assert os.access(first["path"], os.X_OK)


def test_aarch64_names(builder, npu_smi, tmp_path):
    built = builder.build_all(tmp_path, OLD, arch="aarch64", npu_smi_src=npu_smi)
    assert built["driver"]["filename"] == "Ascend-hdk-910b-npu-driver_25.3.rc1_linux-aarch64.run"
    assert built["toolkit"]["filename"] == "Ascend-cann-toolkit_8.3.RC1_linux-aarch64.run"


def test_build_refuses_missing_inputs(builder, npu_smi, tmp_path):
    with pytest.raises(builder.BuildError, match="npu-smi"):
        builder.build_all(tmp_path, OLD, arch=ARCH, npu_smi_src=tmp_path / "no-such-npu-smi")
    with pytest.raises(builder.BuildError, match="firmware"):
        builder.build_all(tmp_path, {"driver": "25.3.rc1", "cann": "8.3.RC1"}, npu_smi_src=npu_smi)
    with pytest.raises(builder.BuildError, match="arch"):
        builder.build_all(tmp_path, OLD, arch="riscv64", npu_smi_src=npu_smi)
    assert not list(tmp_path.glob("*.run"))


def test_command_line_prints_what_build_all_returns(npu_smi, tmp_path, old):
    result = subprocess.run(
        [sys.executable, str(BUILD_PY), "--out", str(tmp_path), "--arch", ARCH, "--npu-smi", str(npu_smi),
         "--driver", OLD["driver"], "--firmware", OLD["firmware"], "--cann", OLD["cann"]],
        capture_output=True, text=True, check=True,
    )
    printed = json.loads(result.stdout)
    assert {key: value["sha256"] for key, value in printed.items()} == {
        key: value["sha256"] for key, value in old.items()}
    assert printed["driver"]["path"] == str(tmp_path / old["driver"]["filename"])

    result = subprocess.run(
        [sys.executable, str(BUILD_PY), "--out", str(tmp_path / "none"), "--npu-smi", str(tmp_path / "missing"),
         "--driver", "25.3.rc1", "--firmware", "7.8.0.2.212", "--cann", "8.3.RC1"],
        capture_output=True, text=True,
    )
    assert result.returncode == 1
    assert "npu-smi simulator" in result.stderr


def test_header_embeds_the_package_identity(old):
    header = Path(old["toolkit"]["path"]).read_bytes().split(b"\n__ARCHIVE_BELOW__\n")[0].decode()
    assert 'PKG_NAME="Ascend-cann-toolkit"' in header
    assert 'PKG_VERSION="8.3.RC1"' in header
    assert 'PKG_ARCH="x86_64"' in header
    assert "PAYLOAD_SHA256=" in header


# --- what every package does -----------------------------------------------------------


@pytest.mark.parametrize("key", ["driver", "firmware", "toolkit", "kernels", "nnal"])
def test_check_version_and_list(old, root, key):
    before = tree(root)
    assert ok(old[key], "--check", root=root) == (
        "Verifying archive integrity...  100%   SHA256 checksums are OK. All good.\n"
    )
    assert ok(old[key], "--version", root=root) == old[key]["version"] + "\n"
    listing = ok(old[key], "--list", root=root).split()
    assert {"install.sh", "common.sh", "package.info", "version.info"} <= set(listing)
    assert "--install-path=<path>" in ok(old[key], "--help", root=root)
    assert tree(root) == before  # read-only actions write nothing, not even a log


def test_corrupt_payload_is_refused_and_nothing_is_written(old, root, tmp_path):
    corrupt = tmp_path / old["driver"]["filename"]
    content = bytearray(Path(old["driver"]["path"]).read_bytes())
    content[-100] ^= 0xFF
    corrupt.write_bytes(bytes(content))
    corrupt.chmod(0o755)
    package = dict(old["driver"], path=str(corrupt))
    add_user(root)
    before = tree(root)

    assert "Error in SHA256 checksums" in fails(package, "--check", root=root)
    output = fails(package, "--full", root=root)
    assert "Error in SHA256 checksums" in output
    assert "Uncompressing" not in output
    fails(package, "--version", root=root)
    assert tree(root) == before


def test_unknown_options_are_named(old, root):
    add_user(root)
    assert "Unrecognized parameters: --frobnicate." in fails(old["driver"], "--full", "--frobnicate", root=root)
    assert "Unsupported parameters [--frobnicate]" in fails(old["toolkit"], "--install", "--frobnicate", root=root)
    assert not (root / ASCEND).exists()


def test_an_action_is_required(old, root):
    assert "needs to be used with" in fails(old["toolkit"], "--quiet", root=root)
    assert "only support one type" in fails(old["driver"], "--full", "--uninstall", root=root)


def test_wrong_architecture_is_refused(old, root):
    add_user(root)
    output = fails(old["driver"], "--full", root=root, VLLM_FLEET_LAB_UNAME_M="aarch64")
    assert "Arch mismatch, src package is x86_64, cur os is aarch64" in output
    output = fails(old["toolkit"], "--install", root=root, VLLM_FLEET_LAB_UNAME_M="aarch64")
    assert "arch:x86_64 is inconsistent with that of the current environment aarch64" in output
    assert not (root / ASCEND).exists()


def test_quiet_hides_the_archive_messages_only(old, root):
    output = ok(old["toolkit"], "--install", "--quiet", root=root)
    assert "Verifying archive integrity" not in output
    assert "Ascend-cann-toolkit_8.3.RC1_linux-x86_64 install success" in output


# --- driver ------------------------------------------------------------------------------


def test_driver_needs_its_running_user(old, root):
    output = fails(old["driver"], "--full", root=root)
    assert "ERR_NO:0x0091;ERR_DES:HwHiAiUser not exists!" in output
    assert not (root / ASCEND).exists()
    assert not (root / "etc" / "ascend_install.info").exists()


def test_driver_full_install(old, root):
    add_user(root)
    output = ok(old["driver"], "--full", root=root)
    assert "[Driver] [" in output
    assert "[INFO]set username and usergroup, HwHiAiUser:HwHiAiUser" in output
    assert "[INFO]Driver package installed successfully! The new version takes effect immediately." in output

    assert read(root, f"{ASCEND}/driver/version.info") == DRIVER_VERSION_INFO
    assert read(root, "etc/ascend_install.info") == DRIVER_INSTALL_INFO
    for npu_smi in ("usr/local/bin/npu-smi", f"{ASCEND}/driver/tools/npu-smi"):
        assert (root / npu_smi).read_bytes() == NPU_SMI
        assert os.access(root / npu_smi, os.X_OK)
    assert (root / "usr/local/dcmi/dcmi_interface_api.h").is_file()
    assert (root / "usr/local/dcmi/libdcmi.so").is_file()
    assert (root / f"{ASCEND}/driver/lib64/driver/libascend_hal.so").is_file()
    assert (root / f"{ASCEND}/driver/lib64/common/libc_sec.so").is_file()
    assert not (root / MARKER).exists()
    log = read(root, "var/log/ascend_seclog/ascend_install.log")
    assert "Driver package installed successfully!" in log


def test_driver_second_full_suggests_upgrade(old, root):
    install_driver(old, root)
    output = fails(old["driver"], "--full", root=root)
    assert "Driver package has been installed on the path /usr/local/Ascend, the version is 25.3.rc1" in output
    assert "Use --upgrade" in output


def test_driver_upgrade(old, new, root):
    fails(new["driver"], "--upgrade", root=root)  # nothing to upgrade yet
    install_driver(old, root)

    output = ok(old["driver"], "--upgrade", root=root)
    assert "nothing to upgrade" in output
    assert not (root / MARKER).exists()

    output = ok(new["driver"], "--upgrade", root=root)
    assert ("[INFO]Driver package upgraded successfully! Reboot needed for installation/upgrade to take effect!"
            in output)
    assert read(root, MARKER) == "driver upgrade 25.3.rc1 25.5.0\n"
    assert read(root, f"{ASCEND}/driver/version.info").startswith("Version=25.5.0\n")
    assert read(root, "etc/ascend_install.info") == DRIVER_INSTALL_INFO


def test_driver_upgrade_rejects_install_options(old, new, root):
    install_driver(old, root)
    assert "install-path param need used with full" in fails(new["driver"], "--upgrade", "--install-path=/opt/x",
                                                             root=root)
    assert "install-for-all param need used with full" in fails(new["driver"], "--upgrade", "--install-for-all",
                                                                root=root)


def test_driver_with_another_running_user(old, root):
    add_user(root, "aiuser", "aigroup")
    assert "not specified at the same time" in fails(old["driver"], "--full", "--install-username=aiuser", root=root)
    assert "usergroup nogroup not exists!" in fails(
        old["driver"], "--full", "--install-username=aiuser", "--install-usergroup=nogroup", root=root)
    ok(old["driver"], "--full", "--install-username=aiuser", "--install-usergroup=aigroup",
       "--install-for-all", "--install-path=/opt/Ascend", root=root)
    info = read(root, "etc/ascend_install.info")
    assert info.startswith("UserName=aiuser\nUserGroup=aigroup\n")
    assert "Driver_Install_Path_Param=/opt/Ascend\n" in info
    assert "Driver_Install_For_All=yes\n" in info
    assert (root / "opt/Ascend/driver/version.info").is_file()


# --- firmware ----------------------------------------------------------------------------


def test_firmware_needs_the_driver(old, root):
    output = fails(old["firmware"], "--full", root=root)
    assert "please install the driver first" in output
    assert not (root / ASCEND).exists()


def test_firmware_install_and_upgrade(old, new, root):
    install_driver(old, root)
    output = ok(old["firmware"], "--full", root=root)
    assert "The firmware of [8] chips are successfully upgraded." in output
    assert "Firmware package installed successfully! Reboot now or after driver installation" in output
    assert read(root, f"{ASCEND}/firmware/version.info") == FIRMWARE_VERSION_INFO
    assert read(root, "etc/ascend_install.info") == DRIVER_INSTALL_INFO + (
        "Firmware_Install_Type=full\nFirmware_Install_Path_Param=/usr/local/Ascend\n")
    assert read(root, MARKER) == "firmware install - 7.8.0.2.212\n"

    assert "Use --upgrade" in fails(old["firmware"], "--full", root=root)
    ok(new["firmware"], "--upgrade", root=root)
    assert read(root, f"{ASCEND}/firmware/version.info").startswith("Version=7.8.0.5.201\n")
    assert read(root, MARKER) == "firmware install - 7.8.0.2.212\nfirmware upgrade 7.8.0.2.212 7.8.0.5.201\n"


# --- CANN toolkit, kernels, NNAL ---------------------------------------------------------


def sourced_env(root: Path, script: str, *args: str) -> dict[str, str]:
    """The environment after sourcing a set_env.sh in bash."""
    result = subprocess.run(
        ["bash", "-c", 'source "$0" "$@" && env -0', str(root / script), *args],
        env=lab_env(root), stdout=subprocess.PIPE, check=True,
    )
    pairs = (item.split("=", 1) for item in result.stdout.decode().split("\0") if "=" in item)
    return dict(pairs)


def test_toolkit_install(old, root):
    output = ok(old["toolkit"], "--install", root=root)
    assert ("Toolkit:  Ascend-cann-toolkit_8.3.RC1_linux-x86_64 install success, installed in /usr/local/Ascend."
            in output)
    assert "Driver:   Not installed." in output
    assert read(root, f"{TOOLKIT}/8.3.RC1/x86_64-linux/ascend_toolkit_install.info") == TOOLKIT_INSTALL_INFO
    assert os.readlink(root / TOOLKIT / "latest") == "8.3.RC1"
    assert read(root, "etc/Ascend/ascend_cann_install.info") == (
        "Install_Path=/usr/local/Ascend\nToolkit_InstallPath=/usr/local/Ascend/ascend-toolkit\n")
    assert (root / TOOLKIT / "8.3.RC1/lib64/libascendcl.so").is_file()

    home = f"{root}/{TOOLKIT}/latest"
    env = sourced_env(root, f"{TOOLKIT}/set_env.sh")
    assert env["ASCEND_TOOLKIT_HOME"] == home
    assert env["ASCEND_HOME_PATH"] == home
    assert env["ASCEND_AICPU_PATH"] == home
    assert env["ASCEND_OPP_PATH"] == f"{home}/opp"
    assert env["TOOLCHAIN_HOME"] == f"{home}/toolkit"
    assert env["LD_LIBRARY_PATH"].startswith(f"{home}/tools/aml/lib64:{home}/tools/aml/lib64/plugin:{home}/lib64:")
    assert env["PYTHONPATH"].startswith(f"{home}/python/site-packages:{home}/opp/built-in/op_impl/ai_core/tbe:")
    assert env["PATH"].startswith(f"{home}/bin:{home}/compiler/ccec_compiler/bin:")
    # On a node the lab root is empty and the text is the real path.
    assert "/usr/local/Ascend/ascend-toolkit/latest" in read(root, f"{TOOLKIT}/set_env.sh")
    assert str(root) not in read(root, f"{TOOLKIT}/set_env.sh")

    output = fails(old["toolkit"], "--full", root=root)
    assert "Ascend-cann-toolkit 8.3.RC1 has been installed" in output and "Use --upgrade" in output


def test_toolkit_upgrade_installs_side_by_side(old, new, root):
    assert "Use --install" in fails(new["toolkit"], "--upgrade", root=root)
    install_toolkit(old, root)
    assert "nothing to upgrade" in ok(old["toolkit"], "--upgrade", root=root)
    output = ok(new["toolkit"], "--upgrade", root=root)
    assert "Ascend-cann-toolkit_8.5.0_linux-x86_64 upgrade success" in output
    assert (root / TOOLKIT / "8.3.RC1/x86_64-linux/ascend_toolkit_install.info").is_file()
    assert (root / TOOLKIT / "8.5.0/x86_64-linux/ascend_toolkit_install.info").is_file()
    assert os.readlink(root / TOOLKIT / "latest") == "8.5.0"

    ok(new["toolkit"], "--uninstall", root=root)
    assert not (root / TOOLKIT / "8.5.0").exists()
    assert os.readlink(root / TOOLKIT / "latest") == "8.3.RC1"


def test_kernels_need_the_toolkit_of_their_version(old, new, root):
    assert "Ascend-cann-toolkit 8.3.RC1 is not installed" in fails(old["kernels"], "--install", root=root)
    install_toolkit(old, root)
    before = tree(root / TOOLKIT)

    output = fails(new["kernels"], "--install", root=root)
    assert ("Ascend-cann-toolkit 8.5.0 is not installed in /usr/local/Ascend/ascend-toolkit (installed: 8.3.RC1)"
            in output)
    assert tree(root / TOOLKIT) == before

    output = ok(old["kernels"], "--install", root=root)
    assert ("Ascend-cann-kernels-910b_8.3.RC1_linux-x86_64 install success. "
            "The installation path is /usr/local/Ascend/ascend-toolkit.") in output
    assert read(root, f"{TOOLKIT}/8.3.RC1/opp_kernel/version.info") == KERNELS_VERSION_INFO
    assert list((root / KERNEL_DIR / "ascend910b" / "add").glob("Add_*.o"))
    assert (root / KERNEL_DIR / "config/ascend910b/binary_info_config.json").is_file()
    assert "Use --upgrade" in fails(old["kernels"], "--install", root=root)

    ok(old["kernels"], "--uninstall", root=root)
    assert tree(root / TOOLKIT) == before


def test_nnal_needs_the_toolkit_environment(old, root, tmp_path):
    install_toolkit(old, root)
    output = fails(old["nnal"], "--install", root=root)
    assert "ASCEND_TOOLKIT_HOME is unset" in output and "set_env.sh" in output
    missing = str(tmp_path / "no-toolkit")
    assert f"ASCEND_TOOLKIT_HOME is {missing}" in fails(old["nnal"], "--install", root=root,
                                                        ASCEND_TOOLKIT_HOME=missing)
    assert not (root / ASCEND / "nnal").exists()

    result = subprocess.run(
        ["bash", "-c", 'source "$0" && "$1" --install', str(root / TOOLKIT / "set_env.sh"), old["nnal"]["path"]],
        env=lab_env(root), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )
    assert result.returncode == 0, result.stdout
    assert ("Ascend-cann-nnal_8.3.RC1_linux-x86_64 install success, installed in /usr/local/Ascend/nnal."
            in result.stdout)
    assert read(root, f"{ATB}/8.3.RC1/version.info") == NNAL_VERSION_INFO
    assert os.readlink(root / ATB / "latest") == "8.3.RC1"
    for abi in ("cxx_abi_0", "cxx_abi_1"):
        assert (root / ATB / "8.3.RC1/atb" / abi / "lib/libatb.so").is_file()

    env = sourced_env(root, f"{ATB}/set_env.sh", "--cxx_abi=0")
    atb_home = f"{root}/{ATB}/latest/atb/cxx_abi_0"
    assert env["ATB_HOME_PATH"] == atb_home
    assert env["LD_LIBRARY_PATH"].startswith(f"{atb_home}/lib:{atb_home}/examples:{atb_home}/tests/atbopstest")
    assert env["PATH"].startswith(f"{atb_home}/bin:")
    assert env["ATB_OPSRUNNER_SETUP_CACHE_ENABLE"] == "1"


def test_cann_packages_follow_the_recorded_install_path(old, root):
    install_toolkit(old, root, "--install-path=/opt/Ascend")
    assert read(root, "etc/Ascend/ascend_cann_install.info") == (
        "Install_Path=/opt/Ascend\nToolkit_InstallPath=/opt/Ascend/ascend-toolkit\n")
    ok(old["kernels"], "--install", root=root)
    assert (root / "opt/Ascend/ascend-toolkit/8.3.RC1/opp_kernel/version.info").is_file()
    assert not (root / ASCEND).exists()


# --- uninstall ---------------------------------------------------------------------------


def test_uninstall_removes_what_was_installed(old, root):
    install_driver(old, root)
    ok(old["firmware"], "--full", root=root)
    install_toolkit(old, root)
    ok(old["kernels"], "--install", root=root)
    subprocess.run(
        ["bash", "-c", 'source "$0" && "$1" --install', str(root / TOOLKIT / "set_env.sh"), old["nnal"]["path"]],
        env=lab_env(root), check=True, stdout=subprocess.DEVNULL,
    )

    ok(old["nnal"], "--uninstall", root=root)
    assert not (root / ASCEND / "nnal").exists()
    ok(old["kernels"], "--uninstall", root=root)
    assert not (root / TOOLKIT / "8.3.RC1/opp_kernel").exists()
    assert not (root / KERNEL_DIR).exists()
    assert "Ascend-cann-toolkit_8.3.RC1_linux-x86_64 uninstall success" in ok(old["toolkit"], "--uninstall", root=root)
    assert not (root / TOOLKIT).exists()
    assert not (root / "etc/Ascend/ascend_cann_install.info").exists()
    output = ok(old["firmware"], "--uninstall", root=root)
    assert "Firmware package uninstalled successfully! Uninstallation takes effect immediately." in output
    assert not (root / ASCEND / "firmware").exists()
    output = ok(old["driver"], "--uninstall", root=root)
    assert "Driver package uninstalled successfully! Reboot needed for uninstallation to take effect!" in output

    for gone in (ASCEND, "usr/local/bin/npu-smi", "usr/local/dcmi", "etc/ascend_install.info"):
        assert not (root / gone).exists(), gone
    assert read(root, MARKER) == "firmware install - 7.8.0.2.212\ndriver uninstall 25.3.rc1 -\n"
    assert sorted(path.name for path in (root / "var/log/ascend_seclog").iterdir()) == [
        "ascend_install.log", "ascend_kernels_910b_install.log",
        "ascend_nnal_install.log", "ascend_toolkit_install.log",
    ]


@pytest.mark.parametrize("key", ["driver", "firmware", "toolkit", "kernels", "nnal"])
def test_uninstall_of_what_is_not_installed_fails(old, root, key):
    assert "not installed" in fails(old[key], "--uninstall", root=root)


def test_extract_only(old, root, tmp_path):
    target = tmp_path / "extracted"
    ok(old["driver"], "--noexec", f"--extract={target}", root=root)
    assert (target / "install.sh").is_file()
    assert (target / "files" / "npu-smi").read_bytes() == NPU_SMI
    assert not (root / ASCEND).exists()
    assert "--noexec must be used with --extract" in fails(old["driver"], "--noexec", root=root)


@pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("setpriv"), reason="needs root to become nobody")
def test_without_a_lab_root_a_plain_user_gets_home_paths_and_no_driver(old):
    """No VLLM_FLEET_LAB_ROOT: the packages act on the real filesystem, so this runs them
    as nobody, who can write only to its scratch HOME."""
    home = Path(tempfile.mkdtemp(prefix="ascend-nobody-"))
    try:
        for key in ("driver", "toolkit"):
            shutil.copy(old[key]["path"], home)
        home.chmod(0o777)
        for path in home.iterdir():
            path.chmod(0o755)
        env = {"PATH": os.environ["PATH"], "HOME": str(home), "VLLM_FLEET_LAB_UNAME_M": ARCH}

        def as_nobody(filename: str, *args: str) -> subprocess.CompletedProcess:
            return subprocess.run(
                ["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups", str(home / filename), *args],
                env=env, cwd=home, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=60,
            )

        result = as_nobody(old["driver"]["filename"], "--full")
        assert result.returncode == 1
        assert "do not have root permission" in result.stdout

        result = as_nobody(old["toolkit"]["filename"], "--install")
        assert result.returncode == 0, result.stdout
        assert f"installed in {home}/Ascend." in result.stdout
        assert (home / "Ascend/ascend-toolkit/8.3.RC1/x86_64-linux/ascend_toolkit_install.info").is_file()
        assert (home / "Ascend/ascend_cann_install.info").read_text() == (
            f"Install_Path={home}/Ascend\nToolkit_InstallPath={home}/Ascend/ascend-toolkit\n")
        assert (home / "var/log/ascend_seclog/ascend_toolkit_install.log").is_file()
    finally:
        shutil.rmtree(home)
