"""The HTTP server `wal3 console` runs: the standard library's WSGI server on threads.

Threads, because a page may wait seconds on the store (a log set's overview, a fragment walk)
and must not hold up the others, or the verify page's progress while verify runs. A console
serves one operator's browser, so the standard library's server is enough, and it reports a
port in use as an error this module can explain (rather than exiting the process, as Werkzeug's
development server does).
"""

from __future__ import annotations

import errno
import logging
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from socketserver import ThreadingMixIn
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from wal3_spark.errors import InvalidOption

log = logging.getLogger(__name__)

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8340


class _ThreadingServer(ThreadingMixIn, WSGIServer):
    daemon_threads = True  # a page still loading must not keep Ctrl-C from stopping the server


class _Handler(WSGIRequestHandler):
    """Requests go to `logging` (shown with `wal3 -v`), not to stderr line by line."""

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base's name
        log.info("%s %s", self.address_string(), format % args)


class ConsoleServer:
    """`app` served at `host`:`port` (port 0: a free one); `url` is where."""

    def __init__(self, app: Callable[..., Any], host: str = DEFAULT_HOST, port: int = DEFAULT_PORT) -> None:
        try:
            self._server = make_server(host, port, app, server_class=_ThreadingServer, handler_class=_Handler)
        except OSError as exc:
            if exc.errno == errno.EADDRINUSE:
                raise InvalidOption(f"port {port} on {host} is in use (another console or program "
                                    "listens there): give another with --port, or --port 0 for any free one") from None
            raise InvalidOption(f"cannot listen on {host}:{port}: {exc}; check --host (an address "
                                "of this machine, e.g. 127.0.0.1) and --port") from None

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{'[' + host + ']' if ':' in str(host) else host}:{port}/"

    def serve_forever(self) -> None:
        try:
            self._server.serve_forever()
        finally:
            self._server.server_close()

    def shutdown(self) -> None:
        self._server.shutdown()


@contextmanager
def serving(app: Callable[..., Any], host: str = DEFAULT_HOST, port: int = 0) -> Iterator[ConsoleServer]:
    """`app` served on a thread for the duration of the block (tests, scripts)."""
    server = ConsoleServer(app, host, port)
    thread = threading.Thread(target=server.serve_forever, name="wal3-console", daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        thread.join()
