"""The router's registry core as a state machine (docs/reliability.md R4), under Hypothesis.

Random sequences of build, equip, unequip, delete, annotate, configuration mode on/off,
and upstreams coming up, going down (withdrawn or not) and changing their tools
(including schema changes against pinned toolsets) drive a `RegistryCore` with a
`ToolsetExposure` through `ExposureCall`, exactly as the router does. After every step:

* what clients see is a pure function of the state: a fresh core built from the same
  catalog and exposure state lists exactly the same tools, in the same order;
* it matches a plain model (which toolset, which mode, which servers are up, which
  schemas changed under ``pinSchemas``);
* exposed names are unique, 1-64 characters of ``[A-Za-z0-9_-]``, routed to a server
  that is up, management tools first;
* a step is announced (its `Changes` says tools changed) exactly when the list clients
  see changed, so every change is announced once and no-ops are not announced.

Rules are synchronous (pytest-trio has no async stateful testing; docs/style.md notes).
"""

from __future__ import annotations

import re
from typing import Any

import msgspec
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from mcpvisor.actors.core.catalog import UpstreamLists
from mcpvisor.actors.core.model import Note, SavedState, ToolEntry, Toolset
from mcpvisor.actors.core.pins import pin_of, ref_id
from mcpvisor.actors.core.registration import UpstreamDown, UpstreamListed, UpstreamUp
from mcpvisor.actors.core.registry import RegistryCore
from mcpvisor.actors.core.toolsets import (
    CONFIG_TOOLS,
    ENTER_CONFIG,
    EXIT_CONFIG,
    ToolsetError,
    ToolsetExposure,
)
from mcpvisor.actors.router import ExposureCall

SERVERS = ("a", "b")
TOOLS = ("t0", "t-2", "t_2")  # t-2 and t_2 flatten alike: collisions happen
NAMES = ("x", "y", "z")
ALIASES = (None, None, "al", "t0")
NAME_OK = re.compile(r"[A-Za-z0-9_-]{1,64}\Z")

tools_st = st.dictionaries(st.sampled_from(TOOLS), st.integers(0, 1), min_size=1, max_size=len(TOOLS))
"""A server's tool list: name -> schema version."""
entries_st = st.lists(st.tuples(st.sampled_from(SERVERS), st.sampled_from(TOOLS), st.sampled_from(ALIASES)),
                      min_size=1, max_size=4)


def wire(name: str, version: int) -> dict[str, Any]:
    kind = "string" if version == 0 else "number"
    return {"name": name, "description": f"{name} v{version}",
            "inputSchema": {"type": "object", "properties": {"x": {"type": kind}}}}


class RegistryMachine(RuleBasedStateMachine):
    mode = "menu"
    pin = "warn"

    @initialize()
    def start(self) -> None:
        self.ex = ToolsetExposure(self.mode, pin_schemas=self.pin)
        self.core = RegistryCore(list(SERVERS), exposure=self.ex)
        self.up: dict[str, dict[str, int]] = {}  # model: servers in the catalog and their tools
        self.state = SavedState(equipped=None, toolsets={}, annotations={})  # model: the state file
        self.equipped: str | None = None
        self.configuring = self.mode == "menu"
        self.last = self.core.snapshot.tools_list

    # --- helpers --------------------------------------------------------------------------
    def _step(self, changes: Any) -> None:
        now = self.core.snapshot.tools_list
        assert bool(changes.tools) == (now != self.last), "announced iff what clients see changed"
        self.last = now

    def _call(self, fn: Any) -> Any:
        before = self.core.snapshot
        try:
            answer, changes = ExposureCall(fn).run(self.core)
        except ToolsetError:
            assert self.core.snapshot is before
            return None
        self._step(changes)
        return answer

    # --- upstream rules -------------------------------------------------------------------
    @rule(server=st.sampled_from(SERVERS), tools=tools_st)
    def upstream_up(self, server: str, tools: dict[str, int]) -> None:
        self.up[server] = dict(tools)
        lists = UpstreamLists(tools=tuple(wire(n, v) for n, v in tools.items()))
        self._step(self.core.apply(UpstreamUp(server, lists)))

    @rule(server=st.sampled_from(SERVERS), withdraw=st.booleans())
    def upstream_down(self, server: str, withdraw: bool) -> None:
        if withdraw:
            self.up.pop(server, None)
        self._step(self.core.apply(UpstreamDown(server, withdraw=withdraw, reason="crashed")))

    @rule(server=st.sampled_from(SERVERS), tools=tools_st)
    def tools_changed(self, server: str, tools: dict[str, int]) -> None:
        if server in self.up:
            self.up[server] = dict(tools)
        items = tuple(wire(n, v) for n, v in tools.items())
        self._step(self.core.apply(UpstreamListed(server, "tools", items)))

    @precondition(lambda self: any(self.up.values()))
    @rule(data=st.data())
    def schema_changed(self, data: st.DataObject) -> None:
        """An upstream changes one tool's schema (what pins are for)."""
        server = data.draw(st.sampled_from(sorted(s for s, tools in self.up.items() if tools)))
        name = data.draw(st.sampled_from(sorted(self.up[server])))
        self.up[server][name] = 1 - self.up[server][name]
        items = tuple(wire(n, v) for n, v in self.up[server].items())
        self._step(self.core.apply(UpstreamListed(server, "tools", items)))

    # --- toolset rules ----------------------------------------------------------------------
    @rule(name=st.sampled_from(NAMES), entries=entries_st, auto=st.booleans(), data=st.data())
    def build(self, name: str, entries: list[tuple[str, str, str | None]], auto: bool,
              data: st.DataObject) -> None:
        if name in self.state.toolsets:
            return  # build-toolset refuses a taken name before anything changes
        listed = [(s, t) for s in SERVERS for t in self.up.get(s, {})]
        if listed:  # mostly tools that are up (pinned), some that are not (pending, missing)
            picks = data.draw(st.lists(st.sampled_from(listed), min_size=1, max_size=3))
            entries = [*((s, t, None) for s, t in picks), *entries[:1]]
        built = []
        for server, tool, alias in entries:
            version = self.up.get(server, {}).get(tool)
            if version is None:
                built.append(ToolEntry(f"{server}.{tool}", None, alias, None))
            else:
                t = wire(tool, version)
                built.append(ToolEntry(f"{server}.{tool}", ref_id(server, tool, t), alias, pin_of(t)))
        ts = Toolset(name=name, tools=tuple(built), description=None, created_at="t", updated_at="t")
        self.state = msgspec.structs.replace(self.state, toolsets={**self.state.toolsets, name: ts},
                                         equipped=name if auto else self.state.equipped)
        new = self.state

        def apply(ex: ToolsetExposure, core: RegistryCore) -> None:
            ex.sync(new)
            if auto:
                ex.equip(new.toolsets[name])

        self._call(apply)
        if auto:
            self.equipped, self.configuring = name, False

    @precondition(lambda self: bool(self.state.toolsets))
    @rule(data=st.data())
    def equip(self, data: st.DataObject) -> None:
        name = data.draw(st.sampled_from(sorted(self.state.toolsets)))
        ts = self.state.toolsets[name]
        self.state = msgspec.structs.replace(self.state, equipped=name)
        self._call(lambda ex, core: ex.equip(ts))
        self.equipped, self.configuring = name, False

    @rule()
    def unequip(self) -> None:
        answer = self._call(lambda ex, core: ex.unequip())
        if self.equipped is None:
            assert answer is None  # a typed error, nothing changed
            return
        self.equipped = None
        self.configuring = self.mode == "menu"

    @precondition(lambda self: bool(self.state.toolsets))
    @rule(data=st.data())
    def delete(self, data: st.DataObject) -> None:
        name = data.draw(st.sampled_from(sorted(self.state.toolsets)))
        s = self.state
        self.state = SavedState(equipped=None if s.equipped == name else s.equipped,
                           toolsets={k: v for k, v in s.toolsets.items() if k != name},
                           annotations={k: v for k, v in s.annotations.items() if k != name})
        new = self.state

        def apply(ex: ToolsetExposure, core: RegistryCore) -> bool:
            ex.sync(new)
            return ex.drop(name)

        self._call(apply)
        if self.equipped == name:
            self.equipped = None
            self.configuring = self.mode == "menu"

    @precondition(lambda self: self.equipped is not None)
    @rule(note=st.sampled_from(("n1", "n2")), data=st.data())
    def annotate(self, note: str, data: st.DataObject) -> None:
        assert self.equipped is not None
        ts = self.state.toolsets[self.equipped]
        target = data.draw(st.sampled_from([e.namespaced_name for e in ts.tools]))
        per = dict(self.state.annotations.get(self.equipped, {}))
        per[target] = (Note("tip", note),)
        self.state = msgspec.structs.replace(self.state,
                                         annotations={**self.state.annotations, self.equipped: per})
        new = self.state
        self._call(lambda ex, core: ex.sync(new))

    @rule(on=st.booleans())
    def configuration_mode(self, on: bool) -> None:
        self._call(lambda ex, core: ex.set_configuring(on))
        if self.mode == "menu":
            self.configuring = on

    # --- invariants ----------------------------------------------------------------------------
    def _expected(self) -> list[tuple[str, str, str | None, str]]:
        """(server, tool, alias, description) clients should see, in order."""
        out: list[tuple[str, str, str | None, str]] = []
        if self.equipped is None:
            if self.mode == "all":
                for server in SERVERS:
                    for name, version in self.up.get(server, {}).items():
                        out.append((server, name, None, wire(name, version)["description"]))
            return out
        if self.configuring:
            return out
        ts = self.ex.equipped
        assert ts is not None
        assert ts.name == self.equipped
        notes = self.state.annotations.get(self.equipped, {})
        seen = set()
        for e in ts.tools:
            server, _, name = e.namespaced_name.partition(".")
            listed = self.up.get(server, {}).get(name)
            if listed is None or (e.namespaced_name, e.alias) in seen:
                continue
            seen.add((e.namespaced_name, e.alias))
            now = wire(name, listed)
            changed = e.pinned is not None and pin_of(now) != e.pinned
            if changed and self.pin == "refuse":
                continue
            desc = now["description"]
            extra = notes.get(e.namespaced_name, ())
            if extra:
                desc += "\n\n" + "\n".join(f"Note: {n.name}: {n.note}" for n in extra)
            out.append((server, name, e.alias, desc))
        return out

    @invariant()
    def matches_the_model(self) -> None:
        snap = self.core.snapshot
        if self.mode == "all":
            local = list(CONFIG_TOOLS)
        else:
            local = [*CONFIG_TOOLS, EXIT_CONFIG] if self.configuring else [ENTER_CONFIG]
        assert list(snap.local_tools) == local
        listed = snap.exposed_names()
        assert listed[: len(local)] == local, "management tools come first"
        routes = [snap.tools[n] for n in listed[len(local):]]
        got = [(r.server, r.original, r.wire["description"]) for r in routes]
        assert got == [(s, t, d) for s, t, _, d in self._expected()]
        for (_, _, alias, _), name in zip(self._expected(), listed[len(local):], strict=True):
            if alias is not None and alias != ENTER_CONFIG:
                assert name.startswith(alias)

    @invariant()
    def names_are_valid_unique_and_routed_to_servers_that_are_up(self) -> None:
        snap = self.core.snapshot
        listed = snap.exposed_names()
        assert len(listed) == len(set(listed))
        for name in listed:
            assert NAME_OK.match(name), name
        for route in snap.tools.values():
            assert route.server in self.core.lists

    @invariant()
    def what_clients_see_is_a_pure_function_of_the_state(self) -> None:
        fresh_ex = ToolsetExposure(self.mode, pin_schemas=self.pin)
        fresh_ex.sync(SavedState(equipped=None, toolsets=dict(self.ex.saved),
                                 annotations=dict(self.ex.annotations)))
        fresh_ex.equipped = self.ex.equipped
        fresh_ex.configuring = self.ex.configuring
        fresh = RegistryCore(list(SERVERS), exposure=fresh_ex)
        for server in SERVERS:  # a different arrival order must not matter
            if server in self.core.lists:
                fresh.apply(UpstreamUp(server, self.core.lists[server]))
        assert fresh.snapshot.tools_list == self.core.snapshot.tools_list


RegistryMachine.TestCase.settings = settings(max_examples=30, stateful_step_count=25, deadline=None)
test_registry_menu_warn = RegistryMachine.TestCase


class RefuseAllMachine(RegistryMachine):
    mode = "all"
    pin = "refuse"


RefuseAllMachine.TestCase.settings = settings(max_examples=20, stateful_step_count=25, deadline=None)
test_registry_all_refuse = RefuseAllMachine.TestCase
