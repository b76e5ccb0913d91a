"""The OTLP exporter of the fast paths' spans, in a process of its own.

Encoding spans for OTLP is the SDK exporter's Python (protobuf messages built field by
field, copied into their parents): about 23 us a span, 46 us a traced fast-path call, more
than the rest of the proxy's work on that call. In the proxy's process that work holds the
GIL on the batch processor's thread, between the calls. So the fast paths' calls, kept as
data (`mcpvisor.actors.fastspans.FastTrace`), are sent here in batches over a pipe; this
process makes them the SDK's spans and hands them to the same OTLP exporter, configured
as the proxy's would be (the endpoint and protocol it is given, every ``OTEL_EXPORTER_OTLP_*``
variable inherited). Spans the SDK made in the proxy (its slow path, lifecycle events)
are exported by the proxy itself.

Owns:

* `otlp_exporter`: the OTLP span exporter for an endpoint and protocol (both processes);
* `ExportProcess`: the proxy's side: start the process, send it a batch, close it (it
  exports what it has, then exits; it also exits when the proxy's end of the pipe
  closes, so it never outlives the proxy);
* `main`: this process (``python -m mcpvisor.actors.span_export``): frames on stdin, each
  a 4-byte big-endian length and a msgpack body; the first is the setup (resource,
  scope, endpoint, protocol), every later one a batch of packed calls. Nothing is
  written to stdout; errors go to stderr, which is the proxy's.
"""

from __future__ import annotations

import logging
import signal
import struct
import subprocess
import sys
from typing import Any, Final

import msgspec

from mcpvisor.actors import fastspans

logger = logging.getLogger(__name__)

MODULE: Final = "mcpvisor.actors.span_export"
CLOSE_WAIT_S: Final = 3.0
"""How long the proxy waits, stopping, for the process to post what it has (an
unreachable collector must not hold the exit)."""

_LENGTH: Final = struct.Struct(">I")


def otlp_exporter(endpoint: str | None, protocol: str) -> Any:
    """The SDK's OTLP span exporter (``endpoint`` None: it reads ``OTEL_EXPORTER_OTLP_*``).

    Raises:
        ImportError: the exporter for ``protocol`` is not installed.
    """
    if protocol == "grpc":
        from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
    else:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import (  # type: ignore[assignment]
            OTLPSpanExporter,
        )
        if endpoint is not None and not endpoint.rstrip("/").endswith("/v1/traces"):
            # A base URL, as OTEL_EXPORTER_OTLP_ENDPOINT is: the traces path goes after it.
            endpoint = endpoint.rstrip("/") + "/v1/traces"
    return OTLPSpanExporter(endpoint=endpoint) if endpoint is not None else OTLPSpanExporter()


class ExportProcess:
    """The proxy's side of the export process."""

    def __init__(self, endpoint: str | None, protocol: str, resource: Any, scope: Any) -> None:
        """Start the process and send it its setup.

        Raises:
            OSError: it could not be started.
        """
        self._proc = subprocess.Popen([sys.executable, "-m", MODULE], stdin=subprocess.PIPE,
                                      stdout=subprocess.DEVNULL, close_fds=True)
        self._encoder = msgspec.msgpack.Encoder()
        try:
            self.send_frame({"endpoint": endpoint, "protocol": protocol,
                             "resource": dict(resource.attributes), "schema_url": resource.schema_url,
                             "scope": [scope.name, scope.version]})
        except OSError:
            self._proc.kill()
            self.close()
            raise

    @property
    def pid(self) -> int:
        return self._proc.pid

    def send(self, calls: list[fastspans.FastTrace]) -> None:
        """Hand ``calls`` over (blocking while the pipe is full: the batch processor's thread).

        Raises:
            OSError: the process is gone.
        """
        self.send_frame([call.packed() for call in calls])

    def send_frame(self, body: Any) -> None:
        data = self._encoder.encode(body)
        stdin = self._proc.stdin
        assert stdin is not None
        stdin.write(_LENGTH.pack(len(data)) + data)
        stdin.flush()

    def close(self) -> None:
        """No more batches: let it post what it has, within `CLOSE_WAIT_S`, then stop it."""
        stdin = self._proc.stdin
        try:
            if stdin is not None:
                stdin.close()
        except OSError:
            pass
        try:
            self._proc.wait(CLOSE_WAIT_S)
        except subprocess.TimeoutExpired:
            logger.warning("the span export process did not finish within %gs; stopped", CLOSE_WAIT_S)
            self._proc.kill()
            self._proc.wait()


def _frames(stream: Any) -> Any:
    while True:
        head = stream.read(_LENGTH.size)
        if len(head) < _LENGTH.size:
            return
        (size,) = _LENGTH.unpack(head)
        body = stream.read(size)
        if len(body) < size:
            return
        yield msgspec.msgpack.decode(body)


def main() -> int:
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.util.instrumentation import InstrumentationScope
    from opentelemetry.trace import SpanKind

    # Ctrl-C in a terminal reaches the whole process group: the proxy stops its fronts and
    # then closes the pipe, and this process posts what it has on that end of input.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr,
                        format="mcpvisor span export: %(levelname)s %(message)s")
    frames = _frames(sys.stdin.buffer)
    setup = next(frames, None)
    if setup is None:
        return 0
    exporter = otlp_exporter(setup["endpoint"], setup["protocol"])
    made = fastspans.Made(fastspans.stable_resource(Resource(setup["resource"], setup["schema_url"])),
                          InstrumentationScope(setup["scope"][0], setup["scope"][1]),
                          SpanKind.SERVER, SpanKind.CLIENT)
    try:
        for batch in frames:
            spans: list[Any] = []
            for packed in batch:
                spans.extend(fastspans.FastTrace.unpacked(packed).spans(made))
            try:
                exporter.export(spans)
            except Exception:  # one failed post must not stop the next ones
                logging.exception("exporting %d spans failed", len(spans))
    finally:
        exporter.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
