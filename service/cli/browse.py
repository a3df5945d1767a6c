"""`recipe-advisor recipes|models|hardware`: browse the bundled index."""

from __future__ import annotations

import argparse
import json
import sys


def _positive(text: str) -> int:
    digits = text.lstrip("-")
    value = int(text) if digits.isascii() and digits.isdigit() else None
    if value is None or value < 1:
        raise argparse.ArgumentTypeError(f"expected a GPU count of at least 1, got {text!r}")
    return value


def add_parser(subparsers, name: str) -> None:
    p = subparsers.add_parser(name, help=f"list the bundled {name}")
    p.add_argument("--format", choices=["text", "json"], default="text")
    if name in ("recipes", "models"):
        # One meaning for both listings (and GET /v1/models?family=): the card's family or its recipes'.
        p.add_argument("--family",
                       help="model family, e.g. llama or \"Llama 3\" (the card's or its recipes'; case-insensitive)")
    if name == "recipes":
        p.add_argument("--mode", choices=["pretrain", "sft", "peft"])
        p.add_argument("--hardware", help="a hardware card or alias (`recipe-advisor hardware`)")
        p.add_argument("--num-gpus", type=_positive)
        p.add_argument("--kind", choices=["library", "benchmark", "bundled"])
    p.set_defaults(func=run, listing=name)


def _rows(listing: str, args) -> list[dict]:
    """The listing as GET /v1/{listing} answers it: one set of keys for the CLI's JSON and the API's."""
    import recipe_index as index
    from service.catalog import hardware_rows, model_rows

    if listing == "models":
        return model_rows(args.family)
    if listing == "hardware":
        return hardware_rows()
    entries = index.list_recipes(family=args.family, mode=args.mode, hardware=args.hardware,
                                 num_gpus=args.num_gpus, kind=args.kind)
    return [{k: v for k, v in e.model_dump(mode="json").items() if k != "path"} for e in entries]


# The text table's columns (header: key); the JSON has every key of the API's listing.
TEXT_COLUMNS = {
    "models": {"id": "id", "hf_id": "hf_id", "family": "family", "architecture": "architecture",
               "layers": "num_hidden_layers", "hidden": "hidden_size", "heads": "num_attention_heads",
               "kv_heads": "num_key_value_heads", "experts": "num_experts",
               "params": "published_total_params"},
    "hardware": {"name": "name", "memory_gib": "memory_gib", "bf16_tflops": "bf16_tflops", "fp8_tflops": "fp8_tflops",
                 "fp4_tflops": "fp4_tflops", "nvlink_domain": "nvlink_domain", "gpus_per_node": "gpus_per_node"},
}


def run(args) -> int:
    if getattr(args, "hardware", None):
        from recipe_index import get_hardware
        from recipe_index.errors import UnknownHardwareError

        try:
            args.hardware = get_hardware(args.hardware).name  # aliases read as elsewhere
        except UnknownHardwareError as err:
            print(f"error: --hardware: {err}", file=sys.stderr)
            return 2
    rows = _rows(args.listing, args)
    if args.format == "json":
        print(json.dumps(rows, indent=2))
        return 0
    if not rows:
        print(f"no {args.listing} match")
        return 0
    columns = TEXT_COLUMNS.get(args.listing) or {key: key for key in rows[0]}
    cells = [[str(r[key] if r[key] is not None else "-") for key in columns.values()] for r in rows]
    widths = [max(len(header), *(len(row[i]) for row in cells)) for i, header in enumerate(columns)]
    print("  ".join(header.ljust(w) for header, w in zip(columns, widths)))
    for row in cells:
        print("  ".join(cell.ljust(w) for cell, w in zip(row, widths)))
    return 0
