"""The numbers of one upstream's restart policy: their defaults and their checks (sans-IO).

`PolicyConfig` is what `mcpvisor.actors.core.policy.RestartPolicy` runs with, read from a
server's configured knobs (`PolicyConfig.from_spec`) and validated once, on construction.
The ``DEFAULT_*`` constants are the defaults of those knobs: `mcpvisor.actors.core.spec`
and the config file's knob table take them from here, so each default is written once.
The policy's own fixed rules (growth rates, half-open trials) stay with the policy.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Final

import msgspec

if TYPE_CHECKING:
    from mcpvisor.actors.core.spec import ServerSpec

DEFAULT_RESTART_DELAY_S: Final = 0.25
"""First backoff delay. docs/design.md "restart backoff": 0.25 s doubling (systemd's
RestartSec is 100 ms, the kubelet's first delay 10 s)."""
DEFAULT_RESTART_DELAY_MAX_S: Final = 30.0
"""Backoff cap. docs/design.md: "doubling to 30 s"; docs/reliability.md's tenacity ``max=30``."""
DEFAULT_JITTER_S: Final = 0.25
"""Most random seconds added to a delay. docs/reliability.md pairs ``jitter=1`` with a 1 s
first delay; docs/design.md starts at 0.25 s, so the jitter is one first delay, as there."""
DEFAULT_RESTART_RESET_AFTER_S: Final = 60.0
"""Healthy uptime that forgives past failures. docs/design.md: "reset after 60 s of healthy
uptime" (the kubelet waits 10 min)."""
DEFAULT_CIRCUIT_FAILURES: Final = 5
"""Consecutive failures that open the circuit. docs/design.md; pybreaker's ``fail_max=5``."""
DEFAULT_CIRCUIT_OPEN_FOR_S: Final = 30.0
"""First open period. docs/design.md "circuit open for 30 s" (pybreaker 60 s, Hystrix 5 s)."""
DEFAULT_CIRCUIT_OPEN_MAX_S: Final = 300.0
"""Longest open period. docs/design.md "at most 5 min"; the kubelet's 5 min backoff cap."""
DEFAULT_INTENSITY: Final = 10
"""Restarts of healthy lives allowed per :data:`DEFAULT_PERIOD_S` before the backoff
grows anyway (OTP's MaxR; issue 18: "more than 10 in 60 s" is a storm)."""
DEFAULT_PERIOD_S: Final = 60.0
"""Window of :data:`DEFAULT_INTENSITY` (OTP's MaxT)."""

class PolicyConfig(msgspec.Struct, frozen=True):
    """The numbers of one server's restart policy; all in seconds except counts.

    Raises:
        ValueError: on construction, for a negative, infinite or NaN duration, a
            ``restart_delay_max`` below ``restart_delay``, a ``circuit_open_max`` below
            ``circuit_open_for``, a zero ``circuit_open_for`` or ``circuit_failures < 1``.
    """

    restart_delay: float = DEFAULT_RESTART_DELAY_S
    restart_delay_max: float = DEFAULT_RESTART_DELAY_MAX_S
    jitter: float = DEFAULT_JITTER_S
    restart_reset_after: float = DEFAULT_RESTART_RESET_AFTER_S
    circuit_failures: int = DEFAULT_CIRCUIT_FAILURES
    circuit_open_for: float = DEFAULT_CIRCUIT_OPEN_FOR_S
    circuit_open_max: float = DEFAULT_CIRCUIT_OPEN_MAX_S
    restart_intensity: int = DEFAULT_INTENSITY
    restart_period: float = DEFAULT_PERIOD_S

    def __post_init__(self) -> None:
        for name in ("restart_delay", "restart_delay_max", "jitter", "restart_reset_after",
                     "circuit_open_for", "circuit_open_max", "restart_period"):
            value = getattr(self, name)
            if not (math.isfinite(value) and value >= 0):
                raise ValueError(f"{name} must be a finite number of seconds >= 0, got {value!r}")
        if self.restart_delay_max < self.restart_delay:
            raise ValueError(f"restart_delay_max ({self.restart_delay_max}) is below "
                             f"restart_delay ({self.restart_delay})")
        if self.circuit_open_for <= 0:
            # A zero open period would let trials run back to back: the hammering we prevent.
            raise ValueError("circuit_open_for must be > 0")
        if self.circuit_open_max < self.circuit_open_for:
            raise ValueError(f"circuit_open_max ({self.circuit_open_max}) is below "
                             f"circuit_open_for ({self.circuit_open_for})")
        if self.circuit_failures < 1:
            raise ValueError(f"circuit_failures must be >= 1, got {self.circuit_failures!r}")
        if self.restart_intensity < 1:
            raise ValueError(f"restart_intensity must be >= 1, got {self.restart_intensity!r}")
        if self.restart_period <= 0:
            raise ValueError("restart_period must be > 0")

    @classmethod
    def from_spec(cls, spec: ServerSpec, *, jitter: float = DEFAULT_JITTER_S) -> PolicyConfig:
        """The restart policy numbers of one configured server.

        Args:
            spec: the server; its restart knobs (``restartDelay``, ``circuitFailures``, ...)
                are read as they are.
            jitter: the most random seconds added to a delay (no config key sets it; a
                test passes 0 to make backoff times exact).

        Returns:
            The validated config.

        Raises:
            ValueError: as for the constructor.
        """
        return cls(
            restart_delay=float(spec.restart_delay),
            restart_delay_max=float(spec.restart_delay_max),
            jitter=float(jitter),
            restart_reset_after=float(spec.restart_reset_after),
            circuit_failures=int(spec.circuit_failures),
            circuit_open_for=float(spec.circuit_open_for),
            circuit_open_max=float(spec.circuit_open_max),
            restart_intensity=int(spec.restart_intensity),
            restart_period=float(spec.restart_period),
        )


DEFAULT_POLICY_CONFIG: Final = PolicyConfig()
"""The docs/design.md defaults."""
