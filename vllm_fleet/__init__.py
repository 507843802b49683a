"""vllm-fleet: provision vLLM inference nodes with Ansible.

The Python API drives the project's playbooks through ansible-runner; the
``vllm-fleet`` command line wraps it. ``vllm_fleet.lab`` manages the local lab
of systemd-nspawn nodes that the test suite and the demo run against.
"""

from pathlib import Path

__version__ = "0.1.0"

#: Root of the vllm-fleet project (the checkout holding site.yml).
PROJECT_DIR = Path(__file__).resolve().parent.parent
