"""The fleet's own mirror: everything an inventory's nodes would fetch, collected on a connected
machine into one directory, carried across the air gap and served inside the site
(docs/air-gapped.md).

- ``bom``: what the nodes would fetch, read from the inventory (every matrix entry by its declared
  type, the vendors' pins, every model), and nothing else;
- ``store``: the directory's layout and its manifest (``mirror.json``: every file with its size and
  sha256), and the check of a directory against it;
- ``fetch``: the transfers, each resumable and verified (HTTP with ranges, git, pip's resolver, the
  hubs' own clients);
- ``sync``: the sync itself (``--check`` first: what, how large, whether it fits), its progress
  and summary;
- ``oci``: container images, copied by skopeo into OCI image layouts, sized from their manifests and
  verified blob by blob;
- ``apt``: the hosts' distribution packages with their dependencies, collected by apt in a state of
  its own, and the signed apt repository reprepro builds of them;
- ``pack``: tarballs of a bounded size with a checksummed manifest, for carrying the directory.

A mirror directory::

    mirror.json                  what it holds (store.MANIFEST)
    artifacts/<file>             the matrices' installers, overlays and tokenizer files
    git/<host>/<path>.git        bare repositories with the pinned commits, and the third-party
                                 sources their builds fetch (CMake's FetchContent), laid out by URL
    pypi/packages/, pypi/simple/ wheels for the nodes' platform and Python, a PEP 503 index with hashes
    models/<org>/<name>/<revision>/  model snapshots
    images/<repository>/         container images of the nodes in container mode: an OCI image layout
                                 (oci-layout, index.json naming each tag, blobs/sha256/)
    apt/                         the hosts' packages, a signed apt repository (dists/, pool/) and its public
                                 key vllm-fleet-mirror.asc
    keys/                        the key a sync created to sign it (secret: never served, never packed)
"""
