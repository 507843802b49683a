"""The shipped description of `vllm serve` options (vllm_fleet/data/serve_options.json) is what
the real parsers of the pinned releases say: regenerated here and compared, so drift fails.

Regenerate with:  python -m vllm_fleet_dev.argcheck --describe
(one process per release, ~10-40 s each with the cached parser environments.)
"""

from __future__ import annotations

import json

import pytest

from vllm_fleet_dev import argcheck

pytestmark = [pytest.mark.slow, pytest.mark.parser]


def test_shipped_serve_options_match_the_real_parsers():
    shipped = argcheck.SERVE_OPTIONS_FILE.read_text()
    try:
        fresh = argcheck.dump_descriptions(argcheck.describe_all())
    except argcheck.TorchUnavailable as exc:
        pytest.skip(f"no CPU torch on this machine to build the parsers: {exc}")
    if fresh != shipped:
        old, new = json.loads(shipped)["releases"], json.loads(fresh)["releases"]
        def options(serve_options, r):
            return (serve_options.get(r) or {}).get("options", {})

        diff = sorted({f"{r}: {name}" for r in set(old) | set(new)
                       for name in set(options(old, r)) | set(options(new, r))
                       if options(old, r).get(name) != options(new, r).get(name)})
        pytest.fail("vllm_fleet/data/serve_options.json differs from the parsers (run "
                    "`python -m vllm_fleet_dev.argcheck --describe`); "
                    f"releases shipped {sorted(old)}, pinned {sorted(new)}; options that differ: "
                    + ", ".join(diff[:30]))
