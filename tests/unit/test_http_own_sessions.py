"""The sessions the HTTP front opens itself: named for the balancer, forgotten when idle.

`OwnSessions` on its own (no SDK, no HTTP), in virtual time: a session idle for
``sessionIdleTimeout`` is forgotten (the client registry with it), as the SDK forgets its own;
one with a call in flight is not idle however long the call takes; every id begins with the
replica's prefix, as the SDK's do.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any, cast

import trio
import trio.testing

from mcpvisor.actors.fronts.clients import ClientRegistry
from mcpvisor.actors.fronts.http_own import OwnSessions
from mcpvisor.actors.fronts.replay import ReplayBudget

IDLE_S = 60.0


async def test_an_idle_session_is_forgotten_and_one_with_a_call_in_flight_is_kept(
        autojump_clock: trio.testing.MockClock) -> None:
    registry = ClientRegistry()
    calling: set[str] = set()
    sdk = cast(Any, SimpleNamespace(manager=None))  # never built: nothing here needs it
    own = OwnSessions(sdk, registry, ReplayBudget(), max_sessions=3, idle_timeout=IDLE_S, prefix="replica-a.",
                      busy=lambda sid: sid in calling)
    answers = cast(Any, SimpleNamespace(initialize={"protocolVersion": "2025-11-25", "capabilities": {}}))
    scope = {"headers": [(b"host", b"127.0.0.1:8848")]}
    idle = own.open(answers, None, scope)
    working = own.open(answers, None, scope)
    assert idle.session_id.startswith("replica-a.")
    assert idle.session_id != working.session_id
    calling.add(working.session_id)
    assert len(registry) == 2  # each is a connected client
    assert not own.full()
    own.open(answers, None, scope)
    assert own.full()  # the limit counts them

    async with trio.open_nursery() as nursery:
        nursery.start_soon(own.expire)
        await trio.sleep(IDLE_S - 1)
        assert own.get(idle.session_id) is idle
        await trio.sleep(IDLE_S)
        assert own.get(idle.session_id) is None
        assert own.get(working.session_id) is working  # its call kept it, far past the timeout
        assert len(registry) == 1  # the two idle ones are gone
        calling.clear()  # the call ended: the session is idle from now on
        await trio.sleep(IDLE_S * 1.5)
        assert own.get(working.session_id) is None
        assert len(registry) == 0
        nursery.cancel_scope.cancel()
