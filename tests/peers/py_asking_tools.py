"""Tools of `py_backend.py --asking-tools`: tools that need the client's input, written with
the Python SDK's resolvers (`Resolve` + `Elicit` / `Sample` / `ListRoots`), so the SDK asks the
way the request's revision allows: on 2025-11-25 a server-to-client request mid-call, on
2026-07-28 an `input_required` result answered by the client's retry (`inputResponses`, the
SDK's own `requestState`). Each result quotes the answer, so a test reads from the result
that the client's answer reached this backend.

  P+"ask"(question: str)     elicits {"response": str}   -> "NAME heard: <response>"
  P+"sample"(prompt: str)    samples one user message     -> "NAME got: <sampled text>"
  P+"roots"()                lists the client's roots     -> "NAME sees: <uri>,<uri>..."
"""

from __future__ import annotations

from typing import Annotated

from mcp.server.mcpserver import Elicit, ListRoots, MCPServer, Resolve, Sample
from mcp_types import CreateMessageResult, ListRootsResult, SamplingMessage, TextContent
from pydantic import BaseModel


class Answer(BaseModel):
    response: str


def ask_user(question: str) -> Elicit[Answer]:
    return Elicit(question, Answer)


def sample_model(prompt: str) -> Sample:
    return Sample([SamplingMessage(role="user", content=TextContent(type="text", text=prompt))], max_tokens=50)


def client_roots() -> ListRoots:
    return ListRoots()


def install(mcp: MCPServer, sname: str, prefix: str) -> None:
    @mcp.tool(name=prefix + "ask", description="Ask the user a question (elicitation)")
    async def ask(question: str, answer: Annotated[Answer, Resolve(ask_user)]) -> str:
        return f"{sname} heard: {answer.response}"

    @mcp.tool(name=prefix + "sample", description="Ask the client's model (sampling)")
    async def sample(prompt: str, reply: Annotated[CreateMessageResult, Resolve(sample_model)]) -> str:
        return f"{sname} got: {getattr(reply.content, 'text', '')}"

    @mcp.tool(name=prefix + "roots", description="List the client's roots")
    async def roots(listed: Annotated[ListRootsResult, Resolve(client_roots)]) -> str:
        return f"{sname} sees: " + ",".join(str(r.uri) for r in listed.roots)
