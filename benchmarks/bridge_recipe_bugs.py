"""Recipe bugs that shipped in Megatron Bridge and were fixed later: does validate make each an error on the key the
fix changed, with no new error on the fixed version?

The pairs are in tests/service/validate/bridge_recipe_bugs/ (`cases.json`: the upstream commit, the recipe, the keys
its fix changed; `<name>.buggy.yaml` / `<name>.fixed.yaml`: the recipe before and after the fix, written in this
product's format at the Bridge version of the commit, `metadata.bridge_version`). Each pair is validated as written
and, rewritten as a Megatron Bridge ConfigContainer YAML (the architecture from the model's card), as Bridge users
write it. Outcomes, per pair:

- `error on fixed key`: an error whose key is one the fix changed, and no error on a key it left alone;
- `error on other key`: errors, none on a key the fix changed (or some also on keys it left alone);
- `warning only`: no error, but a warning the fixed version lacks or one on a key the fix changed;
- `missed`: nothing of that.
`new on fixed` counts the pairs whose fixed version has an error (code and key) the buggy one lacks.

    .venv/bin/python benchmarks/bridge_recipe_bugs.py [--smoke] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Optional

import yaml

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))
PAIRS = REPO / "tests" / "service" / "validate" / "bridge_recipe_bugs"
OUTCOMES = ("error on fixed key", "error on other key", "warning only", "missed")

# This product's keys -> the ConfigContainer's (section, name).
BRIDGE_NAMES = {
    "distributed.tp_size": ("model", "tensor_model_parallel_size"),
    "distributed.pp_size": ("model", "pipeline_model_parallel_size"),
    "distributed.vp_size": ("model", "virtual_pipeline_model_parallel_size"),
    "distributed.cp_size": ("model", "context_parallel_size"),
    "distributed.ep_size": ("model", "expert_model_parallel_size"),
    "distributed.etp_size": ("model", "expert_tensor_parallel_size"),
    "distributed.sequence_parallel": ("model", "sequence_parallel"),
    "distributed.use_megatron_fsdp": ("ddp", "use_megatron_fsdp"),
    "distributed.activation_checkpointing": ("model", "recompute_granularity"),
    "step_scheduler.local_batch_size": ("train", "micro_batch_size"),
    "step_scheduler.global_batch_size": ("train", "global_batch_size"),
}
PRECISIONS = {"bf16": "bf16_mixed", "fp8": "bf16_with_fp8_current_scaling_mixed", "nvfp4": "bf16_with_nvfp4_mixed"}
BRIDGE_TARGETS = {("q_proj", "k_proj", "v_proj"): "linear_qkv", ("o_proj",): "linear_proj",
                  ("gate_proj", "up_proj"): "linear_fc1", ("down_proj",): "linear_fc2"}


def load_pairs(smoke: bool = False) -> list[dict]:
    cases = json.loads((PAIRS / "cases.json").read_text())
    return cases[:3] if smoke else cases


def _card(config: dict, folder: Path):
    from recipe_index import find_bundled_model
    from recipe_index.models import resolve_model

    model = config["model"]
    return resolve_model(str(folder / model["config"])) if model.get("config") else find_bundled_model(
        model["pretrained_model_name_or_path"])


def bridge_dialect(config: dict, folder: Path) -> str:
    """The config as a Megatron Bridge ConfigContainer YAML: the sizes under their Bridge names, the architecture
    from the model's card, any other key under the section Bridge reads it from (`model:` or `dataset:`)."""
    card = _card(config, folder)
    out: dict = {"model": {}, "train": {}, "dataset": {}, "ddp": {"use_distributed_optimizer": True}}
    for section in ("distributed", "step_scheduler"):
        for key, value in config.get(section, {}).items():
            where, name = BRIDGE_NAMES.get(f"{section}.{key}", ("model", key))
            if key != "strategy" and value is not None:
                out[where][name] = value
    model = {k: v for k, v in config["model"].items() if k not in ("pretrained_model_name_or_path", "config")}
    out["model"].update(model)
    out["model"].update(num_layers=card.num_hidden_layers, hidden_size=card.hidden_size,
                        num_attention_heads=card.num_attention_heads, num_query_groups=card.num_key_value_heads,
                        kv_channels=card.head_dim, ffn_hidden_size=card.intermediate_size, vocab_size=card.vocab_size)
    if card.is_moe:
        out["model"].update(num_moe_experts=card.num_experts, moe_router_topk=card.num_experts_per_tok,
                            moe_ffn_hidden_size=card.moe_intermediate_size)
    dataset = dict(config.get("dataset", {}))
    out["dataset"] = {k: v for k, v in dataset.items() if k not in ("preset", "packed_sequence")}
    out["model"].setdefault("seq_length", dataset.get("seq_length"))
    out["mixed_precision"] = PRECISIONS.get(config.get("precision", "bf16"), "bf16_mixed")
    if config.get("peft"):
        peft = config["peft"]
        targets = [name for group, name in BRIDGE_TARGETS.items() if set(group) <= set(peft["target_modules"])]
        out["peft"] = {"_target_": "megatron.bridge.peft.lora.LoRA", "dim": peft["rank"], "alpha": peft["alpha"],
                       "target_modules": targets}
    return yaml.safe_dump(out, sort_keys=False)


def findings(text: str, path: str, config: dict) -> list:
    from service.validate.document import validate_text

    hardware, meta = config["hardware"], config.get("metadata") or {}
    flags = {"gpus": hardware["gpus_per_node"], "nodes": hardware["num_nodes"], "gpu_type": hardware["gpu_type"],
             "bridge_version": meta.get("bridge_version")}
    return validate_text(text, path, **flags).findings


def outcome(buggy: list, fixed: list, fix_keys: set[str]) -> str:
    errors = {f.key for f in buggy if f.severity == "error"}
    if errors & fix_keys and errors <= fix_keys:
        return OUTCOMES[0]
    if errors:
        return OUTCOMES[1]
    fixed_warnings = {(f.code, f.key) for f in fixed if f.severity == "warning"}
    warnings = [f for f in buggy if f.severity == "warning"]
    if any(f.key in fix_keys or (f.code, f.key) not in fixed_warnings for f in warnings):
        return OUTCOMES[2]
    return OUTCOMES[3]


def new_errors(buggy: list, fixed: list) -> set[tuple[str, str]]:
    """Errors (code, key) of the fixed version that the buggy one lacks."""
    return {(f.code, f.key) for f in fixed if f.severity == "error"} - {
        (f.code, f.key) for f in buggy if f.severity == "error"}


def judge(case: dict, dialect: str = "ours") -> dict:
    """One pair's outcome in one dialect (`ours` or `bridge`), with the buggy version's error codes and keys."""
    pair = {}
    for version in ("buggy", "fixed"):
        path = PAIRS / f"{case['name']}.{version}.yaml"
        config = yaml.safe_load(path.read_text())
        text = path.read_text() if dialect == "ours" else bridge_dialect(config, PAIRS)
        pair[version] = findings(text, str(path) if dialect == "ours" else f"{case['name']}.{version}.bridge.yaml",
                                 config)
    keys = _bridge_keys(case["fix_keys"]) if dialect == "bridge" else set(case["fix_keys"])
    return {"outcome": outcome(pair["buggy"], pair["fixed"], keys),
            "errors": sorted({f"{f.code} {f.key}" for f in pair["buggy"] if f.severity == "error"}),
            "new_on_fixed": sorted(" ".join(e) for e in new_errors(pair["buggy"], pair["fixed"]))}


def _bridge_keys(keys: list[str]) -> set[str]:
    out = set()
    for key in keys:
        section, name = BRIDGE_NAMES.get(key, (key.partition(".")[0], key.partition(".")[2]))
        out.add(f"{'model' if section in ('distributed', 'model') else section}.{name}")
    return out


def table(cases: list[dict]) -> tuple[list[dict], dict]:
    rows = [dict(case, ours=judge(case), bridge=judge(case, "bridge")) for case in cases]
    totals = {dialect: {o: sum(r[dialect]["outcome"] == o for r in rows) for o in OUTCOMES}
              for dialect in ("ours", "bridge")}
    for dialect in totals:
        totals[dialect]["new on fixed"] = sum(bool(r[dialect]["new_on_fixed"]) for r in rows)
    return rows, totals


def main(argv: Optional[list[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--smoke", action="store_true", help="the first three pairs only")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    rows, totals = table(load_pairs(args.smoke))
    if args.json:
        print(json.dumps({"rows": rows, "totals": totals}, indent=1))
        return 0
    print("| bug (commit) | class | fix changed | ours | errors (ours) | Bridge YAML |")
    print("|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['name']} ({r['commit']}) | {r['kind']} | {', '.join(r['fix_keys'])} | {r['ours']['outcome']} | "
              f"{'; '.join(r['ours']['errors']) or '-'} | {r['bridge']['outcome']} |")
    for dialect, counts in totals.items():
        print(f"{dialect}: " + ", ".join(f"{k} {v}" for k, v in counts.items()) + f" (of {len(rows)})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
