"""The hubs' own clients for the mirror, run as ``python -m vllm_fleet.mirror.hubclient ACTION HUB REPO
REVISION [DIR]`` in a child process whose environment holds only its endpoint (HF_ENDPOINT,
MODELSCOPE_ENDPOINT). Prints one JSON line:

- ``info``: {"revision": the commit the revision names, "files": [{"name", "size"}]}
- ``download``: the same after ``snapshot_download`` into DIR (each client resumes a cut file)

The clients are imported here only: vllm-fleet's other commands never load them.
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path


def _hf_info(repo: str, revision: str) -> dict:
    from huggingface_hub import HfApi  # noqa: PLC0415 - the client is loaded in this process only

    info = HfApi().model_info(repo, revision=revision, files_metadata=True)
    return {"revision": info.sha or revision,
            "files": [{"name": s.rfilename, "size": s.size} for s in info.siblings or []]}


def _ms_info(repo: str, revision: str) -> dict:
    from modelscope.hub.api import HubApi  # noqa: PLC0415 - the client is loaded in this process only

    files = HubApi().get_model_files(model_id=repo, revision=revision, recursive=True)
    # The client keeps Path and Size of each file (and Type, "tree" for a folder, where it keeps it).
    blobs = [f for f in files if f.get("Type", "blob") != "tree" and f.get("Path")]
    commit = next((f.get("Revision") for f in blobs if f.get("Revision")), revision)
    return {"revision": commit, "files": [{"name": f["Path"], "size": f.get("Size")} for f in blobs]}


def _download(hub: str, repo: str, revision: str, local_dir: Path) -> None:
    if hub == "huggingface":
        from huggingface_hub import snapshot_download  # noqa: PLC0415

        snapshot_download(repo_id=repo, revision=revision, local_dir=str(local_dir))
    else:
        from modelscope import snapshot_download as ms_snapshot_download  # noqa: PLC0415

        ms_snapshot_download(repo, revision=revision, local_dir=str(local_dir))
    # The clients' own bookkeeping (resume state, locks) is not part of the model.
    for meta in (".cache", "._____temp", ".msc", ".mv"):
        target = local_dir / meta
        if target.is_dir():
            shutil.rmtree(target)
        elif target.exists():
            target.unlink()


def main(argv: list[str]) -> int:
    action, hub, repo, revision = argv[:4]
    try:
        # Only the client of this hub: a site that mirrors Hugging Face models needs no ModelScope.
        __import__("huggingface_hub" if hub == "huggingface" else "modelscope")
    except ImportError as exc:
        print(f"{exc.name} is not installed: pip install 'vllm-fleet[mirror]'", file=sys.stderr)
        return 1
    info = (_hf_info if hub == "huggingface" else _ms_info)(repo, revision)
    if action == "download":
        # What the revision named when it was listed, so a moving branch cannot mix two commits.
        _download(hub, repo, info["revision"] if hub == "huggingface" else revision, Path(argv[4]))
    print(json.dumps(info))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
