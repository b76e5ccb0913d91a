"""What the HTTP front's own server reads of its settings, with no hypercorn imported.

Owns `ServerSettings`: the values the front's HTTP/1.1 server and its connections read
(`mcpvisor.actors.fronts.http_server`, `mcpvisor.actors.fronts.http_connection`), hypercorn's
``Config`` defaults where the front sets none; the listening sockets, made as hypercorn's
``Config.create_sockets`` makes them for a ``host:port`` bind; the ``date`` and ``server``
headers it adds to every response; and `ServerSettings.hypercorn`, hypercorn's own
``Config`` with the same values, built for what hypercorn serves (a TLS front, a connection
handed over for a websocket upgrade or HTTP/2). Importing ``hypercorn.config`` loads its
logging configuration, TOML and WSGI modules: 8-30 ms of a ``serve --transport http`` before
its first answers, for fronts that mostly never need it.
"""

from __future__ import annotations

import socket
import time
from typing import TYPE_CHECKING, Any, Final

import msgspec

if TYPE_CHECKING:
    from hypercorn.config import Config

__all__ = ["ServerSettings"]

# hypercorn 0.18's `Config` defaults, for what the front sets nowhere (hypercorn/config.py).
BACKLOG: Final = 100
H11_MAX_INCOMPLETE_SIZE: Final = 16 * 1024
"""Bytes of a request's head h11 may hold before it is complete (431 beyond)."""
KEEP_ALIVE_MAX_REQUESTS: Final = 1000
WSGI_MAX_BODY_SIZE: Final = 16 * 1024 * 1024

_DAYS: Final = ("Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun")
_MONTHS: Final = ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec")


def http_date(at: float) -> str:
    """``at`` as an HTTP date (RFC 9110, IMF-fixdate), as ``wsgiref.handlers.format_date_time``
    writes it (English names whatever the locale)."""
    t = time.gmtime(at)
    return (f"{_DAYS[t.tm_wday]}, {t.tm_mday:02d} {_MONTHS[t.tm_mon - 1]} {t.tm_year:4d} "
            f"{t.tm_hour:02d}:{t.tm_min:02d}:{t.tm_sec:02d} GMT")


class ServerSettings(msgspec.Struct, kw_only=True):
    """The HTTP front's server settings (the names are hypercorn ``Config``'s)."""

    bind: list[str]
    """``host:port`` (an IPv6 host in brackets) to listen on."""
    graceful_timeout: float
    keep_alive_timeout: float
    ssl_handshake_timeout: float
    errorlog: Any
    """The `logging.Logger` hypercorn writes its errors to."""
    certfile: str | None = None
    keyfile: str | None = None
    backlog: int = BACKLOG
    h11_max_incomplete_size: int = H11_MAX_INCOMPLETE_SIZE
    keep_alive_max_requests: int = KEEP_ALIVE_MAX_REQUESTS
    root_path: str = ""
    wsgi_max_body_size: int = WSGI_MAX_BODY_SIZE
    made: Any = None
    """hypercorn's ``Config`` once `hypercorn` has made it."""

    @property
    def ssl_enabled(self) -> bool:
        return self.certfile is not None and self.keyfile is not None

    def response_headers(self, protocol: str) -> list[tuple[bytes, bytes]]:
        """What hypercorn adds to every response: ``date`` and ``server: hypercorn-<protocol>``."""
        return [(b"date", http_date(time.time()).encode("ascii")),
                (b"server", f"hypercorn-{protocol}".encode("ascii"))]

    def create_sockets(self) -> list[socket.socket]:
        """The bound, non-blocking listening sockets, one per `bind`, with hypercorn's options
        (``TCP_NODELAY``, ``SO_REUSEADDR``, inheritable).

        Raises:
            OSError: a bind failed (the port is taken, the address is not this host's).
        """
        sockets: list[socket.socket] = []
        try:
            for bind in self.bind:
                host, _, port = bind.replace("[", "").replace("]", "").rpartition(":")
                sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM)
                sockets.append(sock)
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                sock.bind((host, int(port)))
                sock.setblocking(False)
                sock.set_inheritable(True)
        except BaseException:
            for sock in sockets:
                sock.close()
            raise
        return sockets

    def hypercorn(self) -> Config:
        """hypercorn's own ``Config`` with these values (made once, imported on first use)."""
        made: Config | None = self.made
        if made is None:
            import hypercorn.config

            config = hypercorn.config.Config()
            config.bind = list(self.bind)
            config.accesslog = None
            config.errorlog = self.errorlog
            config.graceful_timeout = self.graceful_timeout
            config.keep_alive_timeout = self.keep_alive_timeout
            config.ssl_handshake_timeout = self.ssl_handshake_timeout
            config.certfile = self.certfile
            config.keyfile = self.keyfile
            config.backlog = self.backlog
            config.h11_max_incomplete_size = self.h11_max_incomplete_size
            config.keep_alive_max_requests = self.keep_alive_max_requests
            config.root_path = self.root_path
            config.wsgi_max_body_size = self.wsgi_max_body_size
            made = self.made = config
        return made

