"""`recipe-advisor diff BASE NEW`: every changed key with its layer. Exit 0; 2 when a file is unusable."""

from __future__ import annotations

import argparse
import json
import sys

from service.changes import diff, summary, verdict
from service.yamlio import YamlError, load_yaml, read_file

EXIT_OK, EXIT_UNUSABLE = 0, 2


def add_parser(subparsers, name: str) -> None:
    p = subparsers.add_parser(name, help="classify every changed key between two configs",
                              description="List every key that differs between BASE and NEW, each as convergence, "
                                          "execution or benchmark-only (seeds/mbridge-recipe-recommender.md). "
                                          "Exit 0; 2 when a file cannot be read as a config.")
    p.add_argument("base", metavar="BASE", help="the reference config (e.g. the recipe)")
    p.add_argument("new", metavar="NEW", help="the changed config")
    p.add_argument("--format", choices=["text", "json"], default="text")
    p.set_defaults(func=run)


def _load(path: str) -> dict:
    try:
        return load_yaml(read_file(path), path).data
    except OSError as err:
        raise YamlError(f"cannot read file: {err.strerror or err}", path=path,
                        fix="check the path and permissions") from None


def run(args: argparse.Namespace) -> int:
    try:
        base, new = _load(args.base), _load(args.new)
    except YamlError as err:
        print(f"error: {err}", file=sys.stderr)
        return EXIT_UNUSABLE
    changes = diff(base, new)
    if args.format == "json":
        print(json.dumps({"changes": [c.to_dict() for c in changes], "summary": summary(changes)},
                         indent=2, default=str))
        return EXIT_OK
    width = max((len(c.key) for c in changes), default=0)
    for c in changes:
        print(f"{c.layer:<14} {c.key:<{width}}  {c.old!r} -> {c.new!r}  ({c.reason})")
    counts = summary(changes)
    print(f"{len(changes)} change(s): " + ", ".join(f"{n} {layer}" for layer, n in counts.items())
          + (f". {verdict(changes)}" if changes else ""))
    return EXIT_OK
