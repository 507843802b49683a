"""Where the project's files are (roles, playbooks, module_utils, ansible.cfg): the checkout
holding site.yml. Re-exported as vllm_fleet.PROJECT_DIR."""

from pathlib import Path

#: Root of the vllm-fleet project (the checkout holding site.yml).
PROJECT_DIR = Path(__file__).resolve().parent.parent
