"""Concurrent Python SDK (`mcp` 2.3.0) clients that answer what a server asks them during
calls (`elicitation_callback`, `sampling_callback`, `list_roots_callback`) and record
every question, so a test can tell whose question reached whom.

Usage:
    .peers/venv/bin/python tests/peers/py_asked.py URL < plan.json

plan.json:
    {"clients": [{"mode": "legacy" | "2026-07-28" | "auto",
                  "name": "A",                      (put into every answer)
                  "answers": ["elicitation", "sampling", "roots"],   (callbacks to pass:
                                                     a client without one does not
                                                     declare that capability)
                  "stall": false,                   (true: record each question, then
                                                     never answer it)
                  "calls": [{"tool": NAME, "arguments": {...}}
                            | {"prompt": NAME, "arguments": {...}}]}]}

Answers: an elicitation is accepted with every requested property's schema default, or
"<name> says yes" for a string property without one (and always under "response"); a sampling request gets the text "<name> sampled:
<the request's first message text>" from model "model-<name>"; roots are
[file:///<name>]. Every client runs at the same time over its own connection; a
client's calls run in order. Prints one JSON object:
    {"clients": [{"protocol": V,
                  "asked": [{"method": M, "text": T}, ...],   (T: the elicitation's
                                                                message or the sampling
                                                                request's first text)
                  "calls": [{"text": T, "is_error": B} | {"error": "..."}]}]}
    (a prompt's T: its messages' texts joined with newlines)
"""

from __future__ import annotations

import json
import sys
from typing import Any

import anyio
import mcp.types as types
from mcp import Client

TIMEOUT = 30.0


def _text(result: Any) -> str:
    return "".join(getattr(b, "text", "") for b in result.content if getattr(b, "type", None) == "text")


async def run_client(url: str, spec: dict[str, Any], out: dict[str, Any]) -> None:
    name = spec.get("name", "client")
    answers = set(spec.get("answers", []))
    asked: list[dict[str, Any]] = out.setdefault("asked", [])
    calls: list[dict[str, Any]] = out.setdefault("calls", [])

    async def on_elicit(_context: Any, params: Any) -> Any:
        asked.append({"method": "elicitation/create", "text": params.message})
        if spec.get("stall"):
            await anyio.sleep_forever()
        content: dict[str, Any] = {"response": f"{name} says yes"}
        schema = getattr(params, "requested_schema", None) or {}
        for prop, prop_schema in (schema.get("properties") or {}).items():
            if isinstance(prop_schema, dict) and "default" in prop_schema:
                content.setdefault(prop, prop_schema["default"])
            elif isinstance(prop_schema, dict) and prop_schema.get("type") == "string":
                content.setdefault(prop, f"{name} says yes")
        return types.ElicitResult(action="accept", content=content)

    async def on_sample(_context: Any, params: Any) -> Any:
        first = params.messages[0].content if params.messages else None
        text = getattr(first, "text", "") if first is not None else ""
        asked.append({"method": "sampling/createMessage", "text": text})
        return types.CreateMessageResult(
            role="assistant",
            content=types.TextContent(type="text", text=f"{name} sampled: {text}"),
            model=f"model-{name}",
            stop_reason="endTurn",
        )

    async def on_roots(_context: Any) -> Any:
        asked.append({"method": "roots/list", "text": ""})
        return types.ListRootsResult(roots=[types.Root(uri=f"file:///{name}", name=name)])

    async with Client(
        url,
        mode=spec.get("mode", "auto"),
        elicitation_callback=on_elicit if "elicitation" in answers else None,
        sampling_callback=on_sample if "sampling" in answers else None,
        list_roots_callback=on_roots if "roots" in answers else None,
        read_timeout_seconds=TIMEOUT,
    ) as client:
        out["protocol"] = client.protocol_version
        for call in spec.get("calls", []):
            try:
                if "prompt" in call:
                    prompt = await client.get_prompt(call["prompt"], call.get("arguments") or None)
                    text = "\n".join(getattr(m.content, "text", "") for m in prompt.messages)
                    calls.append({"text": text, "is_error": False})
                    continue
                result = await client.call_tool(call["tool"], call.get("arguments", {}))
                calls.append({"text": _text(result), "is_error": bool(result.is_error)})
            except Exception as exc:  # noqa: BLE001 - reported, not raised
                calls.append({"error": f"{type(exc).__name__}: {exc}"})


async def main(url: str, plan: dict[str, Any]) -> dict[str, Any]:
    outs: list[dict[str, Any]] = [{} for _ in plan.get("clients", [])]
    with anyio.fail_after(TIMEOUT * 4):
        async with anyio.create_task_group() as tg:
            for spec, out in zip(plan.get("clients", []), outs):
                tg.start_soon(run_client, url, spec, out)
    return {"clients": outs}


if __name__ == "__main__":
    if len(sys.argv) != 2:
        print(__doc__, file=sys.stderr)
        sys.exit(2)
    print(json.dumps(anyio.run(main, sys.argv[1], json.load(sys.stdin))))
