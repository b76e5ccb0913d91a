"""Demo MCP server: small text utilities, one of which asks the user before answering.

Run: ``python -m mcpvisor.demo.text`` (stdio).

Tools:
* ``word_count(text)`` - words, characters and lines.
* ``slugify(text)`` - ``"Hello, World!"`` -> ``"hello-world"`` (ASCII, URL-safe).
* ``reverse(text)`` - the text backwards.
* ``shout(text)`` - upper case with an exclamation mark.
* ``confirm_and_shout(text)`` - asks the user to confirm through elicitation first. On
  handshake-era connections (<= 2025-11-25) this is an ``elicitation/create`` request sent
  mid-call; on 2026-07-28 it is an ``InputRequiredResult`` the client answers and retries
  (the SDK's ``Resolve``/``Elicit`` machinery picks per connection). A client that did not
  declare form elicitation gets the shouted text with an "unconfirmed" note instead of an
  error.
"""

from __future__ import annotations

import re
import unicodedata
from typing import Annotated

from mcp.server.mcpserver import (
    AcceptedElicitation,
    Context,
    Elicit,
    ElicitationResult,
    MCPServer,
    Resolve,
)
from mcp.types import ToolAnnotations
from mcp.types.version import MODERN_PROTOCOL_VERSIONS
from pydantic import BaseModel, Field

PURE = ToolAnnotations(read_only_hint=True, idempotent_hint=True, open_world_hint=False)

mcp = MCPServer(
    "text",
    version="1.0.0",
    instructions="Text utilities: count words, make slugs, reverse and shout text.",
)


class WordCount(BaseModel):
    words: int
    characters: int
    lines: int


class Confirmation(BaseModel):
    confirm: bool = Field(description="Shout it?")


def shouted(text: str) -> str:
    return text.upper().rstrip("!") + "!"


@mcp.tool(annotations=PURE)
def word_count(text: str) -> WordCount:
    """Count the words, characters and lines in a text."""
    return WordCount(words=len(text.split()), characters=len(text), lines=len(text.splitlines()))


@mcp.tool(annotations=PURE)
def slugify(text: str) -> str:
    """Turn a text into a lowercase, ASCII, hyphen-separated slug (e.g. for URLs or file names)."""
    ascii_text = unicodedata.normalize("NFKD", text).encode("ascii", "ignore").decode("ascii")
    return re.sub(r"[^a-z0-9]+", "-", ascii_text.lower()).strip("-")


@mcp.tool(annotations=PURE)
def reverse(text: str) -> str:
    """Reverse a text."""
    return text[::-1]


@mcp.tool(annotations=PURE)
def shout(text: str) -> str:
    """Upper-case a text and end it with an exclamation mark."""
    return shouted(text)


def can_elicit(ctx: Context) -> bool:
    """Whether this request's client can answer a form elicitation."""
    capabilities = ctx.client_capabilities
    elicitation = capabilities.elicitation if capabilities is not None else None
    # A bare `elicitation: {}` (before modes existed) means form support; url-only does not.
    if elicitation is None or (elicitation.form is None and elicitation.url is not None):
        return False
    return ctx.protocol_version in MODERN_PROTOCOL_VERSIONS or ctx.session.can_send_request


async def ask_to_confirm(text: str, ctx: Context) -> Elicit[Confirmation] | None:
    """Resolver: ask the user, or answer None when the client cannot be asked."""
    if not can_elicit(ctx):
        return None
    return Elicit(f"Shout {text!r}?", Confirmation)


@mcp.tool(annotations=ToolAnnotations(read_only_hint=True, open_world_hint=False))
async def confirm_and_shout(
    text: str,
    confirmation: Annotated[ElicitationResult[Confirmation], Resolve(ask_to_confirm)],
) -> str:
    """Ask the user to confirm, then shout the text. Without elicitation support it shouts with a note."""
    if not isinstance(confirmation, AcceptedElicitation):
        return f"Not shouting: the user chose to {confirmation.action}."
    if confirmation.data is None:
        return f"{shouted(text)} (unconfirmed: this client cannot answer elicitation requests)"
    if not confirmation.data.confirm:
        return "Not shouting: the user said no."
    return shouted(text)


def main() -> None:
    mcp.run()


if __name__ == "__main__":
    main()
