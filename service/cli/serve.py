"""`recipe-advisor serve`: the HTTP service under uvicorn.

The app is stateless (every answer is a pure function of the request and the
bundled index), so ``--workers N`` or N replicas behind a proxy scale it out.
Defaults bind loopback only; pass ``--host 0.0.0.0`` to expose it. The request headers are bounded in
size and in the time to send them (``service.http.server_protocol``).
"""

from __future__ import annotations

import argparse
import math
import os
import socket
import sys

from service.header_limits import (
    HEADER_TIMEOUT_ENV,
    HEADER_TIMEOUT_S,
    MAX_HEADER_BYTES,
    MAX_HEADER_BYTES_ENV,
)

APP_PATH = "service.http.app:app"
PROTOCOL_PATH = "service.http.server_protocol:LimitedHttpToolsProtocol"


def add_parser(subparsers, name: str = "serve") -> argparse.ArgumentParser:
    parser = subparsers.add_parser(name, help="run the HTTP service (REST API, web form, /docs)")
    parser.add_argument("--host", default="127.0.0.1", help="interface to bind (default: 127.0.0.1, loopback only)")
    parser.add_argument("--port", type=int, default=8000, help="TCP port (default: 8000)")
    parser.add_argument(
        "--workers", type=int, default=1, help="worker processes; the app is stateless, so use about one per core"
    )
    parser.add_argument(
        "--root-path",
        default="",
        help="URL prefix when served behind a reverse proxy under a sub-path (e.g. /advisor)",
    )
    parser.add_argument(
        "--proxy-headers",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="trust X-Forwarded-For/-Proto, but only from --forwarded-allow-ips (default: on)",
    )
    parser.add_argument(
        "--forwarded-allow-ips", default="127.0.0.1", help="proxies whose X-Forwarded-* headers are trusted"
    )
    parser.add_argument(
        "--max-header-bytes", type=int, default=MAX_HEADER_BYTES,
        help=f"larger request headers are answered 431 (default: {MAX_HEADER_BYTES:,} bytes)",
    )
    parser.add_argument(
        "--header-timeout", type=float, default=HEADER_TIMEOUT_S,
        help="seconds a client has to send a request's headers, else 408 and the connection is closed "
             f"(default: {HEADER_TIMEOUT_S:g})",
    )
    parser.add_argument("--log-level", default="info", choices=["critical", "error", "warning", "info", "debug"])
    parser.set_defaults(func=run)
    return parser


def _is_loopback(host: str) -> bool:
    import ipaddress

    try:
        return host == "localhost" or ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def run(args: argparse.Namespace) -> int:
    if not 0 < args.port < 65536:
        print(f"recipe-advisor serve: --port {args.port} is not a TCP port (1-65535)", file=sys.stderr)
        return 2
    if args.workers < 1:
        print(f"recipe-advisor serve: --workers {args.workers} must be at least 1", file=sys.stderr)
        return 2
    if args.root_path and not args.root_path.startswith("/"):  # relative, the pages' links break below `/`
        print(f"recipe-advisor serve: --root-path {args.root_path!r} must start with / (e.g. /{args.root_path})",
              file=sys.stderr)
        return 2
    if args.max_header_bytes < 1024:
        print(f"recipe-advisor serve: --max-header-bytes {args.max_header_bytes} is too small for a request "
              "(at least 1024)", file=sys.stderr)
        return 2
    if not 0 < args.header_timeout < math.inf:
        print(f"recipe-advisor serve: --header-timeout {args.header_timeout:g} must be a number of seconds above 0",
              file=sys.stderr)
        return 2
    try:
        socket.getaddrinfo(args.host, args.port, type=socket.SOCK_STREAM)
    except (socket.gaierror, UnicodeError) as err:
        print(f"recipe-advisor serve: --host {args.host!r} cannot be resolved to an address ({err}); "
              "use 127.0.0.1, 0.0.0.0 or an interface's address", file=sys.stderr)
        return 2
    import uvicorn

    # The protocol reads its limits here; --workers processes inherit the environment.
    os.environ[MAX_HEADER_BYTES_ENV] = str(args.max_header_bytes)
    os.environ[HEADER_TIMEOUT_ENV] = repr(args.header_timeout)
    if not _is_loopback(args.host):  # writes to the runs store then need RECIPE_ADVISOR_TOKEN (runs_access)
        os.environ["RECIPE_ADVISOR_PUBLIC"] = "1"
    uvicorn.run(
        APP_PATH,
        http=PROTOCOL_PATH,
        host=args.host,
        port=args.port,
        workers=args.workers,
        root_path=args.root_path,
        proxy_headers=args.proxy_headers,
        forwarded_allow_ips=args.forwarded_allow_ips,
        log_level=args.log_level,
    )
    return 0
