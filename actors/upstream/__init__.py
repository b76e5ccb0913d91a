"""One upstream server as a supervised actor.

* `actors.upstream.actor` — `Upstream`: the lifecycle loop, the state machine, calls;
* `actors.upstream.status` — its states, `UpstreamStatus`, and the ports it uses;
* `actors.upstream.failures` — why a start or a connection failed, in words;
* `actors.upstream.tasks` — listing, re-listing, pings, the listen stream.
"""

from __future__ import annotations

from actors.upstream.actor import OpenLink, Upstream, open_real_link
from actors.upstream.status import WAITABLE, Hooks, RouterPort, State, UpstreamStatus

__all__ = ["WAITABLE", "Hooks", "OpenLink", "RouterPort", "State", "Upstream", "UpstreamStatus",
           "open_real_link"]
