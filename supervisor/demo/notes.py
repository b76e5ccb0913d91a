"""Demo MCP server: a small note store.

Run: ``python -m mcpvisor.demo.notes`` (stdio). Notes live in memory; set ``NOTES_FILE``
to a path to keep them in a JSON file across restarts (written atomically after every
change; an unreadable file stops the server rather than being overwritten).

Tools: ``add_note(title, body, tags?)``, ``list_notes(tag?)``, ``search_notes(query)``,
``delete_note(id)``.
Resources: ``notes://all`` (every note, JSON), one ``notes://{id}`` entry per note in
``resources/list`` (Markdown), readable through the ``notes://{id}`` template.
Prompt: ``summarize_notes(tag?)``.

Adding or deleting a note changes the resource list, so the server announces
``resources/list_changed`` (and ``resources/updated`` for ``notes://all`` and the note):
on handshake-era connections as notifications, on 2026-07-28 as events on
``subscriptions/listen`` streams.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ResourceNotFoundError, ToolError
from mcp.types import Resource, ToolAnnotations
from mcp.types.version import MODERN_PROTOCOL_VERSIONS
from pydantic import BaseModel, Field

MAX_TITLE = 200
MAX_BODY = 100_000
MAX_TAGS = 20


class Note(BaseModel):
    id: str
    title: str
    body: str
    tags: list[str] = Field(default_factory=list)
    created: str


class NoteStore:
    """Notes in insertion order, optionally mirrored to a JSON file."""

    def __init__(self, path: Path | None) -> None:
        self.path = path
        self.notes: dict[str, Note] = {}
        self.next_id = 1
        if path is not None and path.exists():
            self._load(path)

    def _load(self, path: Path) -> None:
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
            notes = [Note.model_validate(item) for item in data["notes"]]
            next_id = int(data.get("next_id", 1))
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise SystemExit(f"notes: cannot read NOTES_FILE {str(path)!r}: {exc}") from None
        self.notes = {note.id: note for note in notes}
        numeric = [int(note.id) for note in notes if note.id.isdigit()]
        self.next_id = max([next_id, *(n + 1 for n in numeric)])

    def save(self) -> None:
        if self.path is None:
            return
        payload = {"next_id": self.next_id, "notes": [note.model_dump() for note in self.notes.values()]}
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=self.path.parent, prefix=f".{self.path.name}.", suffix=".tmp")
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                json.dump(payload, f, indent=2, ensure_ascii=False)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, self.path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise

    def add(self, title: str, body: str, tags: list[str]) -> Note:
        note = Note(
            id=str(self.next_id),
            title=title,
            body=body,
            tags=tags,
            created=datetime.now(UTC).isoformat(timespec="seconds"),
        )
        self.next_id += 1
        self.notes[note.id] = note
        self.save()
        return note

    def delete(self, note_id: str) -> Note | None:
        note = self.notes.pop(note_id, None)
        if note is not None:
            self.save()
        return note

    def with_tag(self, tag: str | None) -> list[Note]:
        if tag is None:
            return list(self.notes.values())
        wanted = tag.strip().lower()
        return [note for note in self.notes.values() if wanted in note.tags]

    def search(self, query: str) -> list[Note]:
        terms = query.lower().split()
        found = []
        for note in self.notes.values():
            haystack = " ".join([note.title, note.body, *note.tags]).lower()
            if all(term in haystack for term in terms):
                found.append(note)
        return found


def _store_path() -> Path | None:
    value = os.environ.get("NOTES_FILE", "").strip()
    return Path(value).expanduser() if value else None


def render(note: Note) -> str:
    tags = f"\n\nTags: {', '.join(note.tags)}" if note.tags else ""
    return f"# {note.title}\n\n{note.body}{tags}\n\n(note {note.id}, created {note.created})\n"


class NotesServer(MCPServer[Any]):
    """`MCPServer` whose resource list also names each note (`notes://{id}`)."""

    def __init__(self, store: NoteStore) -> None:
        super().__init__(
            "notes",
            version="1.0.0",
            instructions="A note store: add, list, search and delete notes; read them as notes:// resources.",
        )
        self.store = store

    async def list_resources(self) -> list[Resource]:
        listed = await super().list_resources()
        listed.extend(
            Resource(
                uri=f"notes://{note.id}", name=f"note-{note.id}", title=note.title, mime_type="text/markdown"
            )
            for note in self.store.notes.values()
        )
        return listed


store = NoteStore(_store_path())
mcp = NotesServer(store)


async def announce_change(ctx: Context, note_id: str) -> None:
    """Tell clients the resource list (and the affected resources) changed, in the connection's era."""
    await ctx.notify_resources_changed()
    await ctx.notify_resource_updated("notes://all")
    await ctx.notify_resource_updated(f"notes://{note_id}")
    if ctx.protocol_version not in MODERN_PROTOCOL_VERSIONS:
        await ctx.session.send_resource_list_changed()


def _clean_tags(tags: list[str] | None) -> list[str]:
    cleaned: list[str] = []
    for tag in tags or []:
        tag = tag.strip().lower()
        if tag and tag not in cleaned:
            cleaned.append(tag)
    if len(cleaned) > MAX_TAGS:
        raise ToolError(f"at most {MAX_TAGS} tags")
    return cleaned


@mcp.tool(annotations=ToolAnnotations(read_only_hint=False, destructive_hint=False, idempotent_hint=False))
async def add_note(title: str, body: str, ctx: Context, tags: list[str] | None = None) -> Note:
    """Add a note. Tags are optional, case-insensitive labels used by list_notes(tag)."""
    title = title.strip()
    if not title or len(title) > MAX_TITLE:
        raise ToolError(f"title must be 1-{MAX_TITLE} characters")
    if len(body) > MAX_BODY:
        raise ToolError(f"body must be at most {MAX_BODY} characters")
    note = store.add(title, body, _clean_tags(tags))
    await announce_change(ctx, note.id)
    return note


@mcp.tool(annotations=ToolAnnotations(read_only_hint=True, open_world_hint=False))
async def list_notes(tag: str | None = None) -> list[Note]:
    """List all notes, or only those carrying the given tag."""
    return store.with_tag(tag)


@mcp.tool(annotations=ToolAnnotations(read_only_hint=True, open_world_hint=False))
async def search_notes(query: str) -> list[Note]:
    """Find notes whose title, body or tags contain every word of the query (case-insensitive)."""
    return store.search(query)


@mcp.tool(annotations=ToolAnnotations(read_only_hint=False, destructive_hint=True, idempotent_hint=True))
async def delete_note(id: str, ctx: Context) -> str:
    """Delete the note with the given id."""
    note = store.delete(id.strip())
    if note is None:
        raise ToolError(f"no note with id {id!r}")
    await announce_change(ctx, note.id)
    return f"deleted note {note.id} ({note.title})"


@mcp.resource("notes://all", name="all-notes", title="All notes", mime_type="application/json")
def all_notes() -> str:
    """Every note, as a JSON array."""
    return json.dumps([note.model_dump() for note in store.notes.values()], indent=2, ensure_ascii=False)


@mcp.resource("notes://{id}", name="note", title="One note", mime_type="text/markdown")
def one_note(id: str) -> str:
    """One note, as Markdown."""
    note = store.notes.get(id)
    if note is None:
        raise ResourceNotFoundError(f"no note with id {id!r}")
    return render(note)


@mcp.prompt(title="Summarize notes")
def summarize_notes(tag: str | None = None) -> str:
    """Ask the model for a summary of the notes (optionally only those with a tag)."""
    notes = store.with_tag(tag)
    scope = f"tagged {tag!r}" if tag else "in my note store"
    if not notes:
        return f"I have no notes {scope}. Say so briefly."
    listing = "\n---\n".join(render(note) for note in notes)
    count = "the note" if len(notes) == 1 else f"the {len(notes)} notes"
    return (
        f"Summarize {count} {scope} below in a few bullet points, "
        f"grouping related notes and pointing out open tasks.\n\n{listing}"
    )


def main() -> None:
    if store.path is not None:
        print(f"notes: using {store.path}", file=sys.stderr)
    mcp.run()


if __name__ == "__main__":
    main()
