"""`recipe-advisor serve`: the HTTP service under uvicorn.

The app is stateless (every answer is a pure function of the request and the
bundled index), so ``--workers N`` or N replicas behind a proxy scale it out.
Defaults bind loopback only; pass ``--host 0.0.0.0`` to expose it.
"""

from __future__ import annotations

import argparse
import socket
import sys

APP_PATH = "service.http.app:app"


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
    parser.add_argument("--log-level", default="info", choices=["critical", "error", "warning", "info", "debug"])
    parser.set_defaults(func=run)
    return parser


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
    try:
        socket.getaddrinfo(args.host, args.port, type=socket.SOCK_STREAM)
    except (socket.gaierror, UnicodeError) as err:
        print(f"recipe-advisor serve: --host {args.host!r} cannot be resolved to an address ({err}); "
              "use 127.0.0.1, 0.0.0.0 or an interface's address", file=sys.stderr)
        return 2
    import uvicorn

    uvicorn.run(
        APP_PATH,
        host=args.host,
        port=args.port,
        workers=args.workers,
        root_path=args.root_path,
        proxy_headers=args.proxy_headers,
        forwarded_allow_ips=args.forwarded_allow_ips,
        log_level=args.log_level,
    )
    return 0
