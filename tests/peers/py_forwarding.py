"""Concurrent Python SDK (`mcp` 2.3.0) clients that record what reaches them during calls:
progress (the call's `progress_callback`) and log messages (`logging_callback`).

Usage:
    .peers/venv/bin/python tests/peers/py_forwarding.py URL < plan.json

plan.json:
    {"clients": [{"mode": "legacy" | "2026-07-28" | "auto",
                  "level": "debug" | "info" | ... | null,      (legacy: logging/setLevel;
                                                               modern: _meta logLevel)
                  "elicit": {...} | null,      (declare elicitation; accept with this content)
                  "sample": TEXT | null,       (declare sampling; answer with this text)
                  "roots": [URI, ...] | null,  (declare roots; list these)
                  "calls": [{"tool": NAME, "arguments": {...},
                             "progress": true,                 (pass a progress callback)
                             "abandon_after": SECONDS | null}]}],  (cancel the call then)
     "then": [{"tool": NAME, "arguments": {...}}]}              (one legacy client, after all)

Every client runs at the same time, each over its own connection; a client's calls run in
order. Prints one JSON object:
    {"clients": [{"protocol": V, "logs": [{"level": L, "data": D}, ...],
                  "asked": [{"kind": "elicitation" | "sampling" | "roots", "text": T}, ...],
                  "calls": [{"text": T, "progress": [[p, total, message], ...]}
                            | {"abandoned": true, "progress": [...]}
                            | {"error": "..."}]}],
     "then": [T, ...]}
"""

from __future__ import annotations

import json
import sys
from typing import Any

import anyio
from mcp import Client, types

TIMEOUT = 30.0


def _text(result: Any) -> str:
    return "".join(getattr(b, "text", "") for b in result.content if getattr(b, "type", None) == "text")


async def run_client(url: str, spec: dict[str, Any], out: dict[str, Any]) -> None:
    logs: list[dict[str, Any]] = out.setdefault("logs", [])
    calls: list[dict[str, Any]] = out.setdefault("calls", [])

    async def on_log(params: Any) -> None:
        logs.append({"level": params.level, "data": params.data})

    asked: list[dict[str, Any]] = out.setdefault("asked", [])

    async def on_elicit(_context: Any, params: Any) -> types.ElicitResult:
        asked.append({"kind": "elicitation", "text": getattr(params, "message", "")})
        return types.ElicitResult(action="accept", content=spec["elicit"])

    async def on_sample(_context: Any, params: Any) -> types.CreateMessageResult:
        texts = [getattr(m.content, "text", "") for m in params.messages]
        asked.append({"kind": "sampling", "text": " ".join(texts)})
        return types.CreateMessageResult(
            role="assistant",
            content=types.TextContent(type="text", text=spec["sample"]),
            model="py-forwarding-model",
            stop_reason="endTurn",
        )

    async def on_roots(_context: Any) -> types.ListRootsResult:
        asked.append({"kind": "roots", "text": ""})
        return types.ListRootsResult(roots=[types.Root(uri=u) for u in spec["roots"]])

    mode = spec.get("mode", "auto")
    level = spec.get("level")
    modern_level = level if mode != "legacy" else None
    async with Client(
        url,
        mode=mode,
        logging_callback=on_log,
        log_level=modern_level,
        read_timeout_seconds=TIMEOUT,
        elicitation_callback=on_elicit if spec.get("elicit") is not None else None,
        sampling_callback=on_sample if spec.get("sample") is not None else None,
        list_roots_callback=on_roots if spec.get("roots") is not None else None,
    ) as client:
        out["protocol"] = client.protocol_version
        if level and mode == "legacy":
            try:
                await client.set_logging_level(level)
            except Exception as exc:  # noqa: BLE001 - reported, not raised
                out["set_level_error"] = f"{type(exc).__name__}: {exc}"

        for call in spec.get("calls", []):
            progress: list[list[Any]] = []

            async def on_progress(p: float, total: float | None, message: str | None, progress=progress) -> None:
                progress.append([p, total, message])

            record: dict[str, Any] = {"progress": progress}
            try:
                abandon = call.get("abandon_after")
                with anyio.move_on_after(abandon if abandon is not None else TIMEOUT * 2) as scope:
                    result = await client.call_tool(
                        call["tool"],
                        call.get("arguments", {}),
                        progress_callback=on_progress if call.get("progress") else None,
                    )
                    record["text"] = _text(result)
                if scope.cancelled_caught:
                    record["abandoned"] = True
            except Exception as exc:  # noqa: BLE001 - reported, not raised
                record["error"] = f"{type(exc).__name__}: {exc}"
            calls.append(record)
        # Log messages of the last call may still be in flight on a separate stream.
        await anyio.sleep(0.3)


async def main(url: str, plan: dict[str, Any]) -> dict[str, Any]:
    outs: list[dict[str, Any]] = [{} for _ in plan.get("clients", [])]
    with anyio.fail_after(TIMEOUT * 4):
        async with anyio.create_task_group() as tg:
            for spec, out in zip(plan.get("clients", []), outs):
                tg.start_soon(run_client, url, spec, out)
        then: list[str] = []
        if plan.get("then"):
            async with Client(url, mode="legacy", read_timeout_seconds=TIMEOUT) as client:
                for call in plan["then"]:
                    then.append(_text(await client.call_tool(call["tool"], call.get("arguments", {}))))
    return {"clients": outs, "then": then}


if __name__ == "__main__":
    if len(sys.argv) != 2:
        print(__doc__, file=sys.stderr)
        sys.exit(2)
    print(json.dumps(anyio.run(main, sys.argv[1], json.load(sys.stdin))))
