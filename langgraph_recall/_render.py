"""How a tool call reads to a person or a model: ``name(arg=value)``, long values as their size."""

from __future__ import annotations

from typing import Any

import orjson


def value_text(value: Any, max_len: int = 200) -> str:
    if isinstance(value, str):
        text = repr(value)
    else:
        try:
            text = orjson.dumps(value, default=str).decode()
        except TypeError:
            text = repr(value)
    if len(text) > max_len:
        return f"<{len(text)} chars>"
    return text


def call_text(name: str, args: dict[str, Any], max_arg: int = 200) -> str:
    inner = ", ".join(f"{k}={value_text(v, max_arg)}" for k, v in args.items())
    return f"{name}({inner})"
