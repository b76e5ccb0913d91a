"""One upstream server as a supervised actor.

* `mcpvisor.actors.upstream.actor` — `Upstream`: the lifecycle loop feeding the core's table
  (`mcpvisor.actors.core.lifecycle`);
* `mcpvisor.actors.upstream.calls` — calls forwarded to the live link, waiting through a restart;
* `mcpvisor.actors.upstream.login` — a server that needs an OAuth login, and the login a running
  proxy runs;
* `mcpvisor.actors.upstream.opener` — `OpenLink` and the production opener (process or SDK client);
* `mcpvisor.actors.upstream.status` — `UpstreamStatus`, the ports it uses, and the states re-exported;
* `mcpvisor.actors.upstream.failures` — why a start or a connection failed, in words;
* `mcpvisor.actors.upstream.tasks` — listing, re-listing, pings, the listen stream.
"""

from __future__ import annotations

from mcpvisor.actors.upstream.actor import Upstream
from mcpvisor.actors.upstream.opener import OpenLink, open_real_link
from mcpvisor.actors.upstream.status import WAITABLE, Hooks, RouterPort, State, UpstreamMeter, UpstreamStatus

__all__ = ["WAITABLE", "Hooks", "OpenLink", "RouterPort", "State", "Upstream", "UpstreamMeter",
           "UpstreamStatus", "open_real_link"]
