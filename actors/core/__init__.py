"""The sans-IO cores: plain synchronous code with no trio and no I/O.

* `actors.core.catalog` — naming and the immutable `Snapshot` clients read.
* `actors.core.registry` — `RegistryCore`, the router's registration state.
* `actors.core.registration` — the messages an upstream sends the router.
* `actors.core.toolsets` — the toolset exposure and configuration mode.
* `actors.core.model` — the records of toolsets and notes (`Toolset`, `ToolEntry`, ...).
* `actors.core.policy` — the restart policy of one upstream (backoff, circuit breaker).
* `actors.core.plan` — one plan for a ``tools/call``, which every caller executes.

A test imports this package in a fresh interpreter and checks trio stays unloaded.
"""
