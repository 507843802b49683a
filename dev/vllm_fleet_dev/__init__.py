"""vllm-fleet's developer tools: what the project's own tests and maintainers run on a checkout,
never a fleet's operator.

``argcheck``: the pinned vLLM releases' own ``vllm serve`` parsers, offline (tests/parser), and
the generator of the product's ``vllm_fleet/data/serve_options.json``
(``python -m vllm_fleet_dev.argcheck --describe``).

``pages``: what the benchmark scripts (scripts/bench-*) write beside their figures (the machine, their
section of a page).
"""
