"""Ansible's values as plain Python: the one copy the filter plugins and the plan use."""

from __future__ import annotations

from typing import Any


def plain(value: Any) -> Any:
    """Deep-copy Ansible's lazy/tagged containers into plain Python values (dicts with str keys,
    lists, and bool/str/int/float instead of their tagged subclasses)."""
    if isinstance(value, dict) or hasattr(value, "items"):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    for kind in (bool, str, int, float):
        if isinstance(value, kind):
            return kind(value)
    return value
