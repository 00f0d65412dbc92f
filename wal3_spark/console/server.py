"""The HTTP server `wal3 console` runs: the standard library's WSGI server on threads.

Threads, because a page may wait seconds on the store (a log set's overview, a fragment walk)
and must not hold up the others, or the verify page's progress while verify runs. A console
serves one operator's browser, so the standard library's server is enough, and it reports a
port in use as an error this module can explain (rather than exiting the process, as Werkzeug's
development server does).
"""

from __future__ import annotations

import errno
import ipaddress
import logging
import socket
import threading
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from socketserver import ThreadingMixIn
from typing import Any
from urllib.parse import urlsplit
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from wal3_spark.errors import InvalidOption

logger = logging.getLogger(__name__)

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8340


class _ThreadingServer(ThreadingMixIn, WSGIServer):
    daemon_threads = True  # a page still loading must not keep Ctrl-C from stopping the server


class _Handler(WSGIRequestHandler):
    """Requests go to `logging` (shown with `wal3 -v`), not to stderr line by line."""

    def log_message(self, format: str, *args: Any) -> None:  # `format`: the base's name
        logger.info("%s %s", self.address_string(), format % args)


#: the names a request to a server bound to this machine's loopback may give as its Host
LOOPBACK_NAMES = frozenset({"127.0.0.1", "localhost", "::1", "[::1]"})


def _refuse(start_response: Callable[..., Any], message: str) -> list[bytes]:
    start_response("403 Forbidden", [("Content-Type", "text/plain; charset=utf-8")])
    return [message.encode() + b"\n"]


def same_machine_only(app: Callable[..., Any], loopback: bool) -> Callable[..., Any]:
    """`app`, refusing (403) what a web page on another site could make a local browser send.

    A server bound to the loopback is still reachable from any page the operator's browser
    opens: through DNS rebinding (a name of the attacker's that resolves to 127.0.0.1, so the
    page reads the log's records), and by a form posted to it (starting a verify). So, when
    `loopback`, a request whose Host is not a loopback name is refused (whatever its port: an
    SSH tunnel's local port is fine), and, always, a request other than a read (a POST) from
    another site's page (`_foreign_page`). Every page forbids framing (`_NO_FRAMING`): a page
    of another site that framed the console's verify page under something the operator clicks
    would have the console's own form post it, with the console's own Origin (a refusal, which
    shows nothing, may be framed)."""

    def guarded(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        def unframed(status: str, headers: list[tuple[str, str]], *exc_info: Any) -> Any:
            return start_response(status, [*headers, *_NO_FRAMING], *exc_info)

        host = environ.get("HTTP_HOST", "")
        if loopback and _host_name(host).lower() not in LOOPBACK_NAMES:
            return _refuse(start_response, f"Host {host!r} is not this machine: this server listens on "
                           "the loopback only (open it as http://127.0.0.1:PORT/, or listen with --host)")
        method = environ.get("REQUEST_METHOD", "GET")
        if method not in _READS:
            foreign = _foreign_page(environ, host)
            if foreign is not None:
                return _refuse(start_response, f"a {method} from {foreign} is refused: "
                               "only this server's own pages may start a verify")
        return app(environ, unframed)

    return guarded


#: the methods that only read: any other (POST starts a verify) must come from the server's own page
_READS = frozenset({"GET", "HEAD", "OPTIONS"})
#: no page of another site may frame the console (clickjacking its verify button)
_NO_FRAMING = (("X-Frame-Options", "DENY"), ("Content-Security-Policy", "frame-ancestors 'none'"))

#: what a browser's Sec-Fetch-Site says of a request a page of this server made ("same-origin"),
#: or the operator did by hand (typed, bookmarked: "none")
_OWN_FETCH_SITES = frozenset({"same-origin", "none"})


def _foreign_page(environ: dict[str, Any], host: str) -> str | None:
    """Which other page a browser says a POST comes from, or None for this server's own pages
    and for clients that are no browser (curl, scripts: they send neither header).

    The Origin must be this server's own: `null` is what a sandboxed frame, a `data:` page or a
    redirect across sites sends, so another site's page can send it on purpose, and is refused
    like any other site's. A browser's Sec-Fetch-Site, where sent, must agree."""
    origin = environ.get("HTTP_ORIGIN")
    if origin is not None:
        parts = urlsplit(origin)
        if origin == "null" or parts.scheme not in ("http", "https") or parts.netloc.lower() != host.lower():
            return f"the page of {origin}"
    site = environ.get("HTTP_SEC_FETCH_SITE")
    if site is not None and site.lower() not in _OWN_FETCH_SITES:
        return f"a {site} page (Sec-Fetch-Site)"
    return None


class ConsoleServer:
    """`app` served at `host`:`port` (port 0: a free one); `url` is where. Requests another
    site's page could make are refused (`same_machine_only`)."""

    def __init__(self, app: Callable[..., Any], host: str = DEFAULT_HOST, port: int = DEFAULT_PORT) -> None:
        loopback = _is_loopback(host)
        try:
            self._server = make_server(host, port, same_machine_only(app, loopback),
                                       server_class=_ThreadingServer, handler_class=_Handler)
        except OSError as exc:
            if exc.errno == errno.EADDRINUSE:
                raise InvalidOption(f"port {port} on {host} is in use (another console or program "
                                    "listens there): give another with --port, or --port 0 for any free one") from None
            raise InvalidOption(f"cannot listen on {host}:{port}: {exc}; check --host (an address "
                                "of this machine, e.g. 127.0.0.1) and --port") from None

    @property
    def url(self) -> str:
        host, port = str(self._server.server_address[0]), self._server.server_address[1]
        return f"http://{'[' + host + ']' if ':' in host else host}:{port}/"

    def serve_forever(self) -> None:
        try:
            self._server.serve_forever()
        finally:
            self._server.server_close()

    def shutdown(self) -> None:
        self._server.shutdown()


def _host_name(host: str) -> str:
    """The name in a Host header, without its port ("[::1]:8340" gives "[::1]")."""
    if host.startswith("["):
        return host[: host.find("]") + 1]
    return host.rsplit(":", 1)[0]


def _is_loopback(host: str) -> bool:
    """Whether `host` (an address or a name of this machine) is a loopback address."""
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        pass
    try:
        return ipaddress.ip_address(socket.gethostbyname(host)).is_loopback
    except (OSError, ValueError):
        return False


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
