#!/usr/bin/env python3
"""Collect the retrieval benchmark's tool catalog from real MCP servers.

Installs each server below from its registry (npm into WORK/node, PyPI into WORK/venv),
starts it over stdio, and asks it `tools/list` (raw JSON-RPC, every page), then writes
bench/catalog/tools.json: every tool as the server listed it, with the package name and
version it came from. The JSON is committed; rerun this only to refresh it.

Usage:  python3 bench/catalog/collect.py [--work DIR] [--out bench/catalog/tools.json]

The servers need no account to list their tools: the API keys below are placeholders
that are never used (no tool is called), only present so servers that check for a key
at start do start.
"""

from __future__ import annotations

import argparse
import json
import os
import select
import subprocess
import sys
import time
from pathlib import Path

# (package, version, extra arguments). Each server's tools are prefixed with a short
# name in the catalog, as a gateway prefixes its backends' tools. Left out because they
# list nothing without a live account or store: @modelcontextprotocol/server-redis
# (exits when it cannot connect), @supabase/mcp-server-supabase (fetches at list time).
NPM = [
    ("@modelcontextprotocol/server-everything", "2026.8.31", []),
    ("@modelcontextprotocol/server-filesystem", "2026.8.31", ["/tmp"]),
    ("@modelcontextprotocol/server-memory", "2026.8.31", []),
    ("@modelcontextprotocol/server-sequential-thinking", "2026.8.31", []),
    ("@modelcontextprotocol/server-github", "2025.4.8", []),
    ("@modelcontextprotocol/server-gitlab", "2025.4.25", []),
    ("@modelcontextprotocol/server-slack", "2025.4.25", []),
    ("@modelcontextprotocol/server-google-maps", "0.6.2", []),
    ("@modelcontextprotocol/server-brave-search", "0.6.2", []),
    ("@modelcontextprotocol/server-puppeteer", "2025.5.12", []),
    ("@modelcontextprotocol/server-postgres", "0.6.2", ["postgresql://127.0.0.1:1/none"]),
    ("@modelcontextprotocol/server-everart", "0.6.2", []),
    ("@modelcontextprotocol/server-aws-kb-retrieval", "0.6.2", []),
    ("@notionhq/notion-mcp-server", "2.5.2", []),
    ("mcp-server-kubernetes", "4.1.7", []),
    ("@playwright/mcp", "0.0.83", []),
    ("chrome-devtools-mcp", "1.11.0", []),
    ("@antv/mcp-server-chart", "0.9.10", []),
    ("firecrawl-mcp", "3.26.0", []),
    ("@upstash/context7-mcp", "4.1.1", []),
    ("@wonderwhy-er/desktop-commander", "0.2.52", []),
    ("tavily-mcp", "0.2.22", []),
    ("@hubspot/mcp-server", "0.4.0", []),
]
PYPI = [
    ("mcp-server-git", "2026.10.19", "mcp-server-git", ["--repository", "."]),
    ("mcp-server-time", "2026.10.19", "mcp-server-time", []),
    ("mcp-server-fetch", "2026.10.24", "mcp-server-fetch", []),
]

PLACEHOLDER_ENV = {
    name: "placeholder-not-a-key"
    for name in [
        "GITHUB_PERSONAL_ACCESS_TOKEN",
        "GITLAB_PERSONAL_ACCESS_TOKEN",
        "SLACK_BOT_TOKEN",
        "SLACK_TEAM_ID",
        "GOOGLE_MAPS_API_KEY",
        "BRAVE_API_KEY",
        "EVERART_API_KEY",
        "AWS_ACCESS_KEY_ID",
        "AWS_SECRET_ACCESS_KEY",
        "NOTION_TOKEN",
        "FIRECRAWL_API_KEY",
        "SUPABASE_ACCESS_TOKEN",
        "TAVILY_API_KEY",
        "PRIVATE_APP_ACCESS_TOKEN",
    ]
} | {"AWS_REGION": "us-east-1", "PUPPETEER_SKIP_DOWNLOAD": "1"}


PREFIXES = {"@playwright/mcp": "playwright", "@hubspot/mcp-server": "hubspot"}


def short_name(package: str) -> str:
    """`@modelcontextprotocol/server-github` → `github`, `tavily-mcp` → `tavily`."""
    if package in PREFIXES:
        return PREFIXES[package]
    name = package.rsplit("/", 1)[-1]
    for cut in ("mcp-server-", "server-", "-mcp-server", "-mcp", "mcp-"):
        name = name.replace(cut, "")
    return name.replace("-", "") or package


def npm_bin(node_modules: Path, package: str) -> Path:
    manifest = json.loads((node_modules / package / "package.json").read_text())
    bins = manifest.get("bin")
    if isinstance(bins, dict):
        bins = next(iter(bins.values()))
    return node_modules / package / bins


def list_tools(command: list[str], timeout: float = 60.0) -> list[dict]:
    """Start `command`, speak MCP over its stdio, return every page of tools/list."""
    env = os.environ | PLACEHOLDER_ENV
    proc = subprocess.Popen(
        command,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        env=env,
        cwd=str(Path(__file__).resolve().parents[2]),
    )
    deadline = time.monotonic() + timeout
    buffer = b""

    def send(message: dict) -> None:
        proc.stdin.write(json.dumps(message).encode() + b"\n")
        proc.stdin.flush()

    def answer(request_id: int) -> dict:
        nonlocal buffer
        while time.monotonic() < deadline:
            while b"\n" in buffer:
                line, buffer = buffer.split(b"\n", 1)
                try:
                    message = json.loads(line)
                except ValueError:
                    continue  # a server that logs to stdout
                if message.get("id") == request_id:
                    if "error" in message:
                        raise RuntimeError(message["error"])
                    return message["result"]
            ready, _, _ = select.select([proc.stdout], [], [], 1.0)
            if ready:
                chunk = os.read(proc.stdout.fileno(), 65536)
                if not chunk:
                    raise RuntimeError("the server exited")
                buffer += chunk
        raise TimeoutError("no answer")

    try:
        send({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-06-18", "capabilities": {},
            "clientInfo": {"name": "vmcp-bench-collect", "version": "1"}}})
        answer(1)
        send({"jsonrpc": "2.0", "method": "notifications/initialized"})
        tools, cursor, request_id = [], None, 2
        while True:
            params = {"cursor": cursor} if cursor else {}
            send({"jsonrpc": "2.0", "id": request_id, "method": "tools/list", "params": params})
            page = answer(request_id)
            tools += page.get("tools", [])
            cursor = page.get("nextCursor")
            request_id += 1
            if not cursor:
                return tools
    finally:
        proc.kill()
        proc.wait()


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--work", default=str(Path(__file__).resolve().parent / ".work"))
    parser.add_argument("--out", default=str(Path(__file__).resolve().parent / "tools.json"))
    parser.add_argument("--skip-install", action="store_true")
    args = parser.parse_args()
    work = Path(args.work)
    node_prefix, venv = work / "node", work / "venv"
    if not args.skip_install:
        node_prefix.mkdir(parents=True, exist_ok=True)
        manifest = node_prefix / "package.json"
        if not manifest.exists():
            manifest.write_text('{"name": "vmcp-bench-catalog", "private": true}\n')
        subprocess.run(
            ["npm", "install", "--prefix", str(node_prefix), "--save-exact", "--no-audit",
             "--no-fund", "--loglevel=error", "--ignore-scripts"]
            + [f"{p}@{v}" for p, v, _ in NPM],
            check=True,
            env=os.environ | {"PUPPETEER_SKIP_DOWNLOAD": "1",
                              "PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD": "1"},
        )
        if not (venv / "bin" / "python").exists():
            subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        subprocess.run(
            [str(venv / "bin" / "python"), "-m", "pip", "install", "--quiet",
             "--disable-pip-version-check"] + [f"{p}=={v}" for p, v, _, _ in PYPI],
            check=True,
        )
    servers = []
    node_modules = node_prefix / "node_modules"
    for package, version, extra in NPM:
        servers.append(("npm", package, version,
                        ["node", str(npm_bin(node_modules, package))] + extra))
    for package, version, script, extra in PYPI:
        servers.append(("pypi", package, version, [str(venv / "bin" / script)] + extra))
    catalog = {"servers": [], "tools": []}
    for registry, package, version, command in servers:
        try:
            tools = list_tools(command)
        except Exception as e:  # noqa: BLE001 - report and go on with the others
            print(f"{package}@{version}: {e}", file=sys.stderr)
            continue
        prefix = short_name(package)
        print(f"{package}@{version}: {len(tools)} tools", file=sys.stderr)
        catalog["servers"].append({"registry": registry, "package": package,
                                   "version": version, "prefix": prefix,
                                   "tools": len(tools)})
        for tool in tools:
            catalog["tools"].append({"server": prefix, **tool})
    Path(args.out).write_text(json.dumps(catalog, indent=1, ensure_ascii=False) + "\n")
    print(f"{len(catalog['tools'])} tools from {len(catalog['servers'])} servers",
          file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
