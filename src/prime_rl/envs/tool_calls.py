"""Tool calls written in a model's text, parsed into OpenAI ``tool_calls`` entries.

The orchestrator samples token ids (it must train on exactly what was sampled), so it reads tool
calls from the sampled text itself rather than relying on a server-side parser. ``hermes`` is the
format of the Hermes / Qwen2.5 / Qwen3 chat templates (and of vLLM's ``--tool-call-parser
hermes``)::

    <tool_call>
    {"name": "python", "arguments": {"code": "print(1 + 1)"}}
    </tool_call>

A block that is not valid JSON still becomes a call (name ``""`` when none can be read, the raw
text as its arguments), so that the tool runner records it as ``bad_arguments`` or
``unknown_tool`` and the model is told: a malformed call is data, never a crash.
"""

from __future__ import annotations

import json
import re
from typing import Any, Literal

ToolParser = Literal["hermes", "none"]
"""Tool-call formats the orchestrator can read from sampled text (``none``: no tool calls)."""

_HERMES_BLOCK = re.compile(r"<tool_call>\s*(.*?)\s*(?:</tool_call>|$)", re.DOTALL)
_NAME = re.compile(r'"name"\s*:\s*"([^"]*)"')


def parse_tool_calls(text: str, parser: ToolParser = "hermes") -> list[dict[str, Any]]:
    """The OpenAI ``tool_calls`` written in ``text`` (ids ``call_0``, ``call_1``, ...)."""
    if parser == "none" or "<tool_call>" not in text:
        return []
    calls = []
    for i, match in enumerate(_HERMES_BLOCK.finditer(text)):
        raw = match.group(1)
        name, arguments = _read_call(raw)
        calls.append(
            {"id": f"call_{i}", "type": "function", "function": {"name": name, "arguments": arguments}}
        )
    return calls


def _read_call(raw: str) -> tuple[str, str]:
    try:
        body = json.loads(raw)
    except json.JSONDecodeError:
        found = _NAME.search(raw)
        return (found.group(1) if found else ""), raw
    if not isinstance(body, dict):
        return "", raw
    name = body.get("name")
    args = body.get("arguments", body.get("parameters", {}))
    return (name if isinstance(name, str) else ""), (args if isinstance(args, str) else json.dumps(args))
