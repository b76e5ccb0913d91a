"""The HTTP front's own server settings (`mcpvisor.actors.fronts.http_settings`) against hypercorn's.

The front used to read hypercorn's ``Config``; it now keeps its own so that hypercorn is not
imported before its first answers. What a client sees must not change: the same ``date``
and ``server`` headers, sockets bound the same way, and, where hypercorn serves (TLS, a
websocket upgrade), hypercorn configured with the same values. A regression shows as a
header that differs from hypercorn's, or a value lost on the way to hypercorn.
"""

from __future__ import annotations

import logging
import os
import socket
from wsgiref.handlers import format_date_time

import hypercorn.config
import pytest

from mcpvisor.actors.fronts.http_settings import ServerSettings, http_date


def settings(bind: tuple[str, ...] = ("127.0.0.1:0",), certfile: str | None = None,
             keyfile: str | None = None) -> ServerSettings:
    return ServerSettings(bind=list(bind), graceful_timeout=2.5, keep_alive_timeout=7.0,
                          ssl_handshake_timeout=9.0, errorlog=logging.getLogger("hypercorn.error"),
                          certfile=certfile, keyfile=keyfile)


@pytest.mark.parametrize("at", [0.0, 951782400.0, 1796169600.5, 4102444799.0])
def test_the_date_header_is_written_as_wsgiref_writes_it(at: float) -> None:
    """Epoch, a leap day, today and the last second of 2099: the same text as the standard
    library's HTTP date (what hypercorn sends)."""
    assert http_date(at) == format_date_time(at)


def test_response_headers_are_hypercorns() -> None:
    """``date`` and ``server: hypercorn-h11`` in hypercorn's order and bytes."""
    ours = settings().response_headers("h11")
    theirs = hypercorn.config.Config().response_headers("h11")
    assert [name for name, _ in ours] == [name for name, _ in theirs] == [b"date", b"server"]
    assert ours[1] == theirs[1] == (b"server", b"hypercorn-h11")
    assert ours[0][1].endswith(b" GMT")


def test_sockets_are_bound_as_hypercorn_binds_them() -> None:
    """A ``host:port`` bind gives one listening-ready socket on that address, non-blocking,
    with TCP_NODELAY and SO_REUSEADDR; a port in use raises OSError and leaves nothing open."""
    made = settings().create_sockets()
    try:
        assert len(made) == 1
        sock = made[0]
        host, port = sock.getsockname()
        assert host == "127.0.0.1"
        assert port > 0
        assert sock.getblocking() is False
        assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY)
        assert sock.getsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR)
        sock.listen(1)
        open_before = len(os.listdir("/proc/self/fd"))
        with pytest.raises(OSError, match="in use"):
            settings(bind=("127.0.0.1:0", f"127.0.0.1:{port}")).create_sockets()
        assert len(os.listdir("/proc/self/fd")) == open_before  # the first, bound, was closed
    finally:
        for sock in made:
            sock.close()


def test_hypercorn_gets_every_value_the_front_set() -> None:
    """Where hypercorn serves (TLS, a handed-over connection) it runs with the front's own
    timeouts, binds, certificate and limits, not its defaults."""
    ours = settings(certfile="/c.pem", keyfile="/k.pem")
    config = ours.hypercorn()
    assert ours.hypercorn() is config  # made once
    assert config.bind == ["127.0.0.1:0"]
    timeouts = (config.graceful_timeout, config.keep_alive_timeout, config.ssl_handshake_timeout)
    assert timeouts == (2.5, 7.0, 9.0)
    assert (config.certfile, config.keyfile) == ("/c.pem", "/k.pem")
    assert config.ssl_enabled
    assert ours.ssl_enabled
    assert config.accesslog is None
    assert config.errorlog is ours.errorlog
    defaults = hypercorn.config.Config()
    for name in ("backlog", "h11_max_incomplete_size", "keep_alive_max_requests", "root_path",
                 "wsgi_max_body_size"):
        assert getattr(ours, name) == getattr(defaults, name) == getattr(config, name), name
    assert not settings(certfile="/c.pem").ssl_enabled  # hypercorn's rule: both files or no TLS
