"""The sans-IO cores: plain synchronous code with no trio and no I/O.

* `mcpvisor.actors.core.catalog` — naming and the immutable `Snapshot` clients read.
* `mcpvisor.actors.core.registry` — `RegistryCore`, the router's registration state.
* `mcpvisor.actors.core.registration` — the messages an upstream sends the router.
* `mcpvisor.actors.core.toolsets` — the toolset exposure and configuration mode.
* `mcpvisor.actors.core.pins` — refIds, schema pins and what changed, a tools list's token estimate.
* `mcpvisor.actors.core.model` — the records of toolsets and notes (`Toolset`, `ToolEntry`, ...).
* `mcpvisor.actors.core.policy` — the restart policy of one upstream (backoff, circuit breaker).
* `mcpvisor.actors.core.policy_config` — the numbers of that policy: their defaults and checks.
* `mcpvisor.actors.core.intensity` — OTP's restart intensity window (MaxR restarts in MaxT).
* `mcpvisor.actors.core.plan` — one plan for a ``tools/call``, which every caller executes.
* `mcpvisor.actors.core.lifecycle` — the upstream states, events and the one transition table.
* `mcpvisor.actors.core.spec` — `ServerSpec`, one configured server as the actors read it.

A test imports this package in a fresh interpreter and checks trio stays unloaded.
"""
