"""`recipe-advisor recipes|models|hardware`: browse the bundled index."""

from __future__ import annotations

import argparse
import json
import sys


def _positive(text: str) -> int:
    value = int(text) if text.lstrip("-").isdigit() else None
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
    import recipe_index as index

    if listing == "models":
        cards = index.list_models(family=args.family)
        return [{"id": m.id, "hf_id": m.hf_id, "family": m.family, "architecture": m.architecture,
                 "layers": m.num_hidden_layers, "hidden": m.hidden_size, "heads": m.num_attention_heads,
                 "kv_heads": m.num_key_value_heads, "experts": m.num_experts} for m in cards]
    if listing == "hardware":
        return [{"name": h.name, "memory_gib": h.memory_gib, "bf16_tflops": h.bf16_tflops,
                 "fp8_tflops": h.fp8_tflops, "fp4_tflops": h.fp4_tflops, "nvlink_domain": h.nvlink_domain,
                 "gpus_per_node": h.gpus_per_node} for h in index.list_hardware()]
    entries = index.list_recipes(family=args.family, mode=args.mode, hardware=args.hardware,
                                 num_gpus=args.num_gpus, kind=args.kind)
    return [{k: v for k, v in e.model_dump(mode="json").items() if k != "path"} for e in entries]


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
    columns = list(rows[0])
    widths = {c: max(len(c), *(len(str(r[c])) for r in rows)) for c in columns}
    print("  ".join(c.ljust(widths[c]) for c in columns))
    for r in rows:
        print("  ".join(str(r[c] if r[c] is not None else "-").ljust(widths[c]) for c in columns))
    return 0
