"""Dual-era MCP test client on the Python SDK `mcp` 2.3.0 (`mcp.Client`).

Usage:
    .peers/venv/bin/python tests/peers/py_client.py URL MODE [--timeout SECONDS]
        [--transport auto|streamable-http|sse] < ops.json

MODE is `auto` (probe server/discover, fall back to initialize), `legacy` (initialize handshake,
2025-11-25) or `2026-07-28` (stateless modern, no probe). stdin holds a JSON array of operations;
they run in order over ONE client connection and exactly one JSON object is printed to stdout:

    {"protocol": "<negotiated version>", "server": "<serverInfo.name or null>", "results": [...]}

with one entry per operation (see tests/peers/README.md for the operation list). An operation that
raises yields {"error": {"code": <int|null>, "message": "..."}} and the next one still runs. If the
connection cannot be established at all the output is {"connect_error": "..."}. Exit status is 0 in
both cases; it is non-zero only for bad usage / bad stdin (status 2).

"server" is serverInfo.name from the initialize/discover result; with MODE 2026-07-28 (no probe)
it is taken from the first result's `_meta` "io.modelcontextprotocol/serverInfo" stamp; null if none.

--transport auto (default) uses the legacy HTTP+SSE transport (GET URL, POST to the announced
endpoint) when the URL path ends in "/sse", and Streamable HTTP otherwise.
PY_CLIENT_BEARER in the environment, if set, is sent as `Authorization: Bearer ...` (Streamable HTTP).
The SDK's client-side response cache is disabled, so every operation reaches the server.
--timeout (default 20 s) bounds each request and, times the number of operations + 1, the whole run.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any
from urllib.parse import urlsplit

import anyio
from mcp import Client
from mcp.client.sse import sse_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client
from mcp.shared.exceptions import MCPError
from mcp.types import ElicitResult, PromptReference, ResourceTemplateReference

MODES = ("auto", "legacy", "2026-07-28")
OPS = (
    "list_tools",
    "list_tools_page",
    "list_resources",
    "list_resource_templates",
    "list_prompts",
    "call_tool",
    "read_resource",
    "get_prompt",
    "complete",
    "subscribe",
    "unsubscribe",
    "listen",
    "stop_listen",
    "wait_notification",
    "count_notifications",
    "on_elicitation",
    "elicitations",
    "signal",
    "wait_file",
)
MAX_PAGES = 1000  # guard against a server that never stops returning nextCursor


def _leaf(exc: BaseException) -> BaseException:
    """Unwrap (single-member) exception groups raised through anyio task groups."""
    while isinstance(exc, BaseExceptionGroup) and len(exc.exceptions) == 1:
        exc = exc.exceptions[0]
    return exc


def _describe(exc: BaseException) -> str:
    exc = _leaf(exc)
    if isinstance(exc, BaseExceptionGroup):
        return "; ".join(_describe(e) for e in exc.exceptions)
    text = str(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def is_connect_failure(exc: BaseException) -> bool:
    """True when the request never reached a server (refused, unreachable, connect timeout)."""
    leaf = _leaf(exc)
    names = {c.__name__ for c in type(leaf).__mro__}
    return bool(names & {"ConnectError", "ConnectTimeout"}) or isinstance(leaf, ConnectionError)


def error_entry(exc: BaseException) -> dict[str, Any]:
    leaf = _leaf(exc)
    if isinstance(leaf, MCPError):
        err: dict[str, Any] = {"code": leaf.code, "message": leaf.message}
        if leaf.data is not None:
            err["data"] = leaf.data
        return {"error": err}
    if isinstance(leaf, TimeoutError):
        return {"error": {"code": None, "message": f"timeout: {_describe(leaf)}"}}
    return {"error": {"code": None, "message": _describe(leaf)}}


def _dump(model: Any) -> Any:
    if model is None:
        return None
    return model.model_dump(mode="json", by_alias=True, exclude_none=True)


def _text_of_content(blocks: Any) -> str:
    """Concatenate the text of text content blocks (other block types are skipped)."""
    if not isinstance(blocks, list):
        blocks = [blocks]
    return "".join(getattr(b, "text", "") for b in blocks if getattr(b, "type", None) == "text")


SERVER_INFO_KEY = "io.modelcontextprotocol/serverInfo"


class Seen:
    """Server name stamped in result `_meta` (2026-07-28), for pinned-modern connections.

    With mode="2026-07-28" the client adopts a synthesized discover result, so
    `client.server_info` stays None; the server still stamps `_meta.serverInfo` on results.
    """

    server: str | None = None

    @classmethod
    def note(cls, result: Any) -> Any:
        meta = getattr(result, "meta", None) or {}
        info = meta.get(SERVER_INFO_KEY) if isinstance(meta, dict) else None
        if cls.server is None and isinstance(info, dict) and isinstance(info.get("name"), str):
            cls.server = info["name"]
        return result


async def _all_pages(fetch: Any, key: str) -> tuple[list[Any], int]:
    items: list[Any] = []
    cursor: str | None = None
    pages = 0
    while True:
        page = Seen.note(await fetch(cursor=cursor))
        pages += 1
        items.extend(getattr(page, key))
        cursor = page.next_cursor
        if cursor is None:  # "" is a valid cursor, only absence ends the listing
            return items, pages
        if pages >= MAX_PAGES:
            raise RuntimeError(f"more than {MAX_PAGES} pages, last nextCursor {cursor!r}")


def _ref(ref: dict[str, Any]) -> PromptReference | ResourceTemplateReference:
    kind = ref.get("type")
    if kind == "ref/prompt":
        return PromptReference(type="ref/prompt", name=ref["name"])
    if kind == "ref/resource":
        return ResourceTemplateReference(type="ref/resource", uri=ref["uri"])
    raise ValueError(f"unknown ref type {kind!r}")


class Inbox:
    """Change notifications received so far (Legacy: session messages; Modern: listen events),
    as wire method names in arrival order, plus the URI of resources/updated."""

    def __init__(self) -> None:
        self.seen: list[dict[str, Any]] = []
        self.consumed = 0
        self.changed = anyio.Event()
        self.listen_scope: anyio.CancelScope | None = None

    def add(self, method: str, uri: str | None = None) -> None:
        entry: dict[str, Any] = {"method": method}
        if uri is not None:
            entry["uri"] = uri
        self.seen.append(entry)
        self.changed.set()
        self.changed = anyio.Event()

    async def on_message(self, message: Any) -> None:
        root = getattr(message, "root", message)
        method = getattr(root, "method", None)
        if isinstance(method, str) and method.startswith("notifications/") and "list_changed" in method or method == "notifications/resources/updated":
            params = getattr(root, "params", None)
            uri = getattr(params, "uri", None)
            self.add(method, str(uri) if uri is not None else None)

    async def wait(self, method: str, timeout: float, uri: str | None = None) -> dict[str, Any]:
        """The next unconsumed notification with `method` (and `uri`, if given; earlier others are
        skipped)."""
        with anyio.fail_after(timeout):
            while True:
                for i in range(self.consumed, len(self.seen)):
                    if self.seen[i]["method"] == method and uri in (None, self.seen[i].get("uri")):
                        self.consumed = i + 1
                        return self.seen[i]
                await self.changed.wait()


class Elicitations:
    """Answers elicitation requests with the results of the `on_elicitation` ops (in order, the
    last one repeated) and records each request. Without such an op the client declares no
    elicitation capability."""

    def __init__(self, ops: list[dict[str, Any]]) -> None:
        self.answers = [a for o in ops if o.get("op") == "on_elicitation" for a in o.get("answers") or []]
        self.seen: list[dict[str, Any]] = []

    def callback(self) -> Any:
        if not self.answers:
            return None

        async def answer(context: Any, params: Any) -> ElicitResult:
            schema = getattr(params, "requested_schema", None)
            self.seen.append({"message": params.message, "schema": schema if isinstance(schema, dict) else _dump(schema)})
            chosen = self.answers[min(len(self.seen), len(self.answers)) - 1]
            return ElicitResult(action=chosen["action"], content=chosen.get("content"))

        return answer


EVENT_METHODS = {
    "ToolsListChanged": "notifications/tools/list_changed",
    "PromptsListChanged": "notifications/prompts/list_changed",
    "ResourcesListChanged": "notifications/resources/list_changed",
    "ResourceUpdated": "notifications/resources/updated",
}


async def run_op(
    client: Client, op: dict[str, Any], inbox: Inbox | None = None, tg: Any = None, asked: Elicitations | None = None
) -> dict[str, Any]:
    kind = op.get("op")
    inbox = inbox or Inbox()
    if kind == "on_elicitation":  # applied when connecting
        return {"ok": True}
    if kind == "elicitations":
        return {"seen": asked.seen if asked else []}
    if kind == "signal":  # tell the test driving this client where it is (creates `path`)
        with open(op["path"], "w", encoding="utf-8") as f:
            f.write("1")
        return {"ok": True}
    if kind == "wait_file":  # wait for the test's go-ahead (it creates `path`)
        with anyio.fail_after(float(op.get("timeout", 30))):
            while not os.path.exists(op["path"]):
                await anyio.sleep(0.05)
        return {"ok": True}
    if kind == "subscribe":
        await client.subscribe_resource(op["uri"])
        return {"ok": True}
    if kind == "unsubscribe":
        await client.unsubscribe_resource(op["uri"])
        return {"ok": True}
    if kind == "listen":
        ready = anyio.Event()
        honored: dict[str, Any] = {}
        failure: list[BaseException] = []
        scope = anyio.CancelScope()
        inbox.listen_scope = scope

        async def pump() -> None:
            with scope:
                try:
                    async with client.listen(
                        tools_list_changed=bool(op.get("tools")),
                        prompts_list_changed=bool(op.get("prompts")),
                        resources_list_changed=bool(op.get("resources")),
                        resource_subscriptions=list(op.get("uris") or []),
                    ) as sub:
                        honored.update(_dump(sub.honored) or {})
                        ready.set()
                        async for event in sub:
                            uri = getattr(event, "uri", None)
                            inbox.add(EVENT_METHODS.get(type(event).__name__, type(event).__name__), str(uri) if uri is not None else None)
                except Exception as exc:  # noqa: BLE001 - reported through the op result
                    failure.append(exc)
                    ready.set()

        tg.start_soon(pump)
        await ready.wait()
        if failure:
            raise failure[0]
        return {"honored": honored}
    if kind == "stop_listen":
        if inbox.listen_scope is not None:
            inbox.listen_scope.cancel()
        return {"ok": True}
    if kind == "wait_notification":
        return await inbox.wait(op["method"], float(op.get("timeout", 10)), op.get("uri"))
    if kind == "count_notifications":
        return {"count": sum(1 for n in inbox.seen if n["method"] == op["method"])}
    if kind == "list_tools":
        tools, pages = await _all_pages(client.list_tools, "tools")
        return {
            "tools": [
                {"name": t.name, "description": t.description, "annotations": _dump(t.annotations)} for t in tools
            ],
            "pages": pages,
        }
    if kind == "list_tools_page":
        page = Seen.note(await client.list_tools(cursor=op.get("cursor")))
        return {"names": [t.name for t in page.tools], "nextCursor": page.next_cursor}
    if kind == "list_resources":
        res, pages = await _all_pages(client.list_resources, "resources")
        return {"resources": [{"uri": str(r.uri), "name": r.name} for r in res], "pages": pages}
    if kind == "list_resource_templates":
        tpl, pages = await _all_pages(client.list_resource_templates, "resource_templates")
        return {"templates": [{"uriTemplate": t.uri_template, "name": t.name} for t in tpl], "pages": pages}
    if kind == "list_prompts":
        prompts, pages = await _all_pages(client.list_prompts, "prompts")
        return {"prompts": [{"name": p.name, "description": p.description} for p in prompts], "pages": pages}
    if kind == "call_tool":
        r = Seen.note(await client.call_tool(op["name"], op.get("arguments") or {}))
        return {"isError": bool(r.is_error), "text": _text_of_content(r.content), "structured": r.structured_content}
    if kind == "read_resource":
        r = Seen.note(await client.read_resource(op["uri"]))
        return {"text": "".join(getattr(c, "text", "") for c in r.contents)}
    if kind == "get_prompt":
        r = Seen.note(await client.get_prompt(op["name"], op.get("arguments") or {}))
        return {"messages": [_text_of_content(m.content) for m in r.messages]}
    if kind == "complete":
        r = Seen.note(await client.complete(_ref(op["ref"]), dict(op["argument"])))
        return {"values": list(r.completion.values)}
    raise ValueError(f"unknown op {kind!r}")


def use_sse(url: str, transport: str) -> bool:
    if transport == "auto":
        return urlsplit(url).path.rstrip("/").endswith("/sse")
    return transport == "sse"


async def run(url: str, mode: str, ops: list[dict[str, Any]], timeout: float, transport: str) -> dict[str, Any]:
    out: dict[str, Any] = {"protocol": None, "server": None, "results": []}
    connected = False
    reached = False  # did any request reach a server? (mode 2026-07-28 has no connect-time request)
    first_connect_error: str | None = None
    try:
        with anyio.fail_after(timeout * (len(ops) + 1)):
            server: Any = sse_client(url, timeout=timeout) if use_sse(url, transport) else url
            bearer = os.environ.get("PY_CLIENT_BEARER")
            if bearer and not use_sse(url, transport):
                server = streamable_http_client(
                    url, http_client=create_mcp_http_client(headers={"Authorization": f"Bearer {bearer}"})
                )
            inbox = Inbox()
            asked = Elicitations(ops)
            async with anyio.create_task_group() as tg, Client(
                server,
                mode=mode,
                cache=None,
                read_timeout_seconds=timeout,
                message_handler=inbox.on_message,
                elicitation_callback=asked.callback(),
            ) as client:
                connected = True
                out["protocol"] = client.protocol_version
                out["server"] = client.server_info.name if client.server_info else None
                for op in ops:
                    try:
                        out["results"].append(await run_op(client, op, inbox, tg, asked))
                        reached = True
                    except Exception as exc:  # noqa: BLE001 - every failure is reported, then we go on
                        out["results"].append(error_entry(exc))
                        if not is_connect_failure(exc):
                            reached = True
                        elif first_connect_error is None:
                            first_connect_error = _describe(exc)
                    if out["server"] is None:
                        out["server"] = Seen.server
                if inbox.listen_scope is not None:
                    inbox.listen_scope.cancel()
    except Exception as exc:  # noqa: BLE001
        if not connected or (not reached and is_connect_failure(exc)):
            return {"connect_error": _describe(exc)}
        # Raised while closing the connection (or the overall deadline hit): keep what we have.
        print(f"py_client: after {len(out['results'])} ops: {_describe(exc)}", file=sys.stderr)
        while len(out["results"]) < len(ops):
            out["results"].append(error_entry(exc))
    if ops and not reached and first_connect_error is not None:
        return {"connect_error": first_connect_error}
    return out


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("url")
    p.add_argument("mode", choices=MODES)
    p.add_argument("--timeout", type=float, default=20.0, help="seconds per request (default 20)")
    p.add_argument("--transport", choices=["auto", "streamable-http", "sse"], default="auto")
    args = p.parse_args()
    try:
        ops = json.load(sys.stdin)
    except json.JSONDecodeError as exc:
        print(f"py_client: stdin is not JSON: {exc}", file=sys.stderr)
        return 2
    if not isinstance(ops, list) or not all(isinstance(o, dict) for o in ops):
        print("py_client: stdin must be a JSON array of objects", file=sys.stderr)
        return 2
    unknown = [o.get("op") for o in ops if o.get("op") not in OPS]
    if unknown:
        print(f"py_client: unknown op(s) {unknown}; known: {', '.join(OPS)}", file=sys.stderr)
        return 2
    out = anyio.run(run, args.url, args.mode, ops, args.timeout, args.transport)
    sys.stdout.write(json.dumps(out) + "\n")
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
