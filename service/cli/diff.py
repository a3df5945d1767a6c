"""`recipe-advisor diff BASE NEW`: every changed key with its layer. Exit 0; 2 when a file is unusable."""

from __future__ import annotations

import argparse
import json
import sys

from service.configs.changes import diff, load_diff_input, summary, value_text, verdict
from service.configs.yamlio import YamlError, read_file, read_stdin
from trainer.contract.text import clipped, one_line

EXIT_OK, EXIT_UNUSABLE = 0, 2
STDIN = "-"  # as `validate -`: `recipe-advisor recommend ... | recipe-advisor diff base.yaml -`


def add_parser(subparsers, name: str) -> None:
    p = subparsers.add_parser(name, help="classify every changed key between two configs",
                              description="List every key that differs between BASE and NEW, each as convergence, "
                                          "execution or benchmark-only (docs/planner.md). "
                                          "Either one (not both) may be - to read it from stdin. "
                                          "Exit 0; 2 when a file cannot be read as a config.")
    p.add_argument("base", metavar="BASE", help="the reference config (e.g. the recipe); - reads stdin")
    p.add_argument("new", metavar="NEW", help="the changed config; - reads stdin")
    p.add_argument("--format", choices=["text", "json"], default="text")
    p.set_defaults(func=run)


def _load(path: str) -> dict:
    if path == STDIN:
        return load_diff_input(read_stdin(), "<stdin>")
    try:
        text = read_file(path)
    except OSError as err:
        raise YamlError(f"cannot read file: {err.strerror or err}", path=path,
                        fix="check the path and permissions") from None
    return load_diff_input(text, path)


def run(args: argparse.Namespace) -> int:
    if args.base == STDIN and args.new == STDIN:
        print("error: BASE and NEW are both - (stdin holds one config): pass at least one of them as a file",
              file=sys.stderr)
        return EXIT_UNUSABLE
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
    width = min(max((len(c.key) for c in changes), default=0), 60)  # one long key must not pad every line
    for c in changes:
        print(one_line(f"{c.layer:<14} {clipped(c.key):<{width}}  {value_text(c.old)} -> {value_text(c.new)}  "
                       f"({c.reason})"))
    counts = summary(changes)
    print(f"{len(changes)} change(s): " + ", ".join(f"{n} {layer}" for layer, n in counts.items())
          + (f". {verdict(changes)}" if changes else ""))
    return EXIT_OK
