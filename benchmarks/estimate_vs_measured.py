"""The planner's memory model (service/estimate/memory.py) next to what the bundled trainer measures.

For each config the real recipe (`TrainFinetuneRecipe`; bf16 mixed precision through FSDP2's
policy as on a GPU, autocast under DDP, or fp32) is set up and one optimizer step is measured on
every rank by trainer/components/memory_probe.py: weights, gradients and optimizer states exactly (bytes of
this rank's tensors), activations as the bytes allocated during the forward (model + loss) still
alive when it ends, and FSDP2's unsharded parameters (with its all-gather buffers) at their most in
backward. The estimate is `service.estimate.memory.estimate_memory` for the
same model card (read from the same config.json), layout, world size and sequence length with
`engine="bundled"`. Runs on CPU (gloo); 2-process configs run under torch.distributed.run.

Run: .venv/bin/python benchmarks/estimate_vs_measured.py [--markdown]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

SHAPE = dict(vocab_size=8192, hidden_size=256, intermediate_size=768, num_hidden_layers=2,
             num_attention_heads=8, num_key_value_heads=4, max_position_embeddings=4096)
# An MoE of the tiny-moe family (Qwen3-MoE): every layer sparse, 8 experts, top-2.
MOE_SHAPE = dict(model_type="qwen3_moe", architectures=["Qwen3MoeForCausalLM"], vocab_size=8192, hidden_size=256,
                 intermediate_size=768, moe_intermediate_size=256, num_experts=8, num_experts_per_tok=2,
                 norm_topk_prob=True, decoder_sparse_step=1, mlp_only_layers=[], router_aux_loss_coef=0.001,
                 num_hidden_layers=2, num_attention_heads=8, num_key_value_heads=4, head_dim=32,
                 max_position_embeddings=4096, rms_norm_eps=1e-6, rope_theta=1e6, tie_word_embeddings=False,
                 hidden_act="silu", attention_bias=False)
SEQ, MICRO_BATCH = 512, 2
LORA = {"rank": 8, "alpha": 16.0}
# name -> (processes, distributed overrides, peft or None, precision)
CONFIGS = {
    "FSDP2 x1, recompute none": (1, {"activation_checkpointing": "none"}, None, "bf16"),
    "FSDP2 x1, recompute selective": (1, {"activation_checkpointing": "selective"}, None, "bf16"),
    "FSDP2 x1, recompute full": (1, {"activation_checkpointing": "full"}, None, "bf16"),
    "FSDP2 x1, LoRA r8": (1, {"activation_checkpointing": "none"}, LORA, "bf16"),
    "FSDP2 x1, fp32": (1, {"activation_checkpointing": "none"}, None, "fp32"),
    "FSDP2 x2, recompute none": (2, {"activation_checkpointing": "none"}, None, "bf16"),
    "FSDP2 x2, recompute full": (2, {"activation_checkpointing": "full"}, None, "bf16"),
    "FSDP2 x2, LoRA r8": (2, {"activation_checkpointing": "none"}, LORA, "bf16"),
    "DDP x2, recompute none": (2, {"strategy": "ddp", "activation_checkpointing": "none"}, None, "bf16"),
    "DDP x2, recompute selective": (2, {"strategy": "ddp", "activation_checkpointing": "selective"}, None, "bf16"),
    "DDP x2, recompute full": (2, {"strategy": "ddp", "activation_checkpointing": "full"}, None, "bf16"),
    # context parallel: each rank holds half of each sequence; pipeline: each rank one stage, 1F1B over PP micro
    # batches (the first stage holds PP of them in flight)
    "FSDP2 x2, CP 2": (2, {"cp_size": 2, "activation_checkpointing": "none"}, None, "bf16"),
    "FSDP2 x2, PP 2 (1F1B)": (2, {"pp_size": 2, "activation_checkpointing": "none"}, None, "bf16"),
}
# The MoE model (MOE_SHAPE): experts inside each block's FSDP2 unit without EP; with EP each rank holds
# experts / EP and FSDP2 shards them over the expert-data-parallel group (trainer/distributed/expert_parallel.py).
MOE_CONFIGS = {
    "MoE FSDP2 x1": (1, {"activation_checkpointing": "none"}, None, "bf16"),
    "MoE FSDP2 x2, EP 1": (2, {"activation_checkpointing": "none"}, None, "bf16"),
    "MoE FSDP2 x2, EP 2": (2, {"ep_size": 2, "activation_checkpointing": "none"}, None, "bf16"),
    "MoE FSDP2 x2, EP 2, recompute full": (2, {"ep_size": 2, "activation_checkpointing": "full"}, None, "bf16"),
    "MoE FSDP2 x2, EP 2, fp32": (2, {"ep_size": 2, "activation_checkpointing": "none"}, None, "fp32"),
}
CONFIGS.update(MOE_CONFIGS)
TERMS = ("weights", "grads", "optimizer", "activations", "fsdp_unsharded")
TERM_NAMES = {"weights": "weights (sharded)", "grads": "gradients (sharded)", "optimizer": "optimizer states",
              "activations": "activations kept for backward",
              "fsdp_unsharded": "FSDP2 unsharded parameters (most in backward)"}


def micro_batches(distributed: dict) -> int:
    """Micro batches per step: one, or PP of them for a pipeline (1F1B fills it)."""
    return distributed.get("pp_size", 1)


def recipe_config(model_dir: Path, out_dir: Path, nproc: int, distributed: dict, peft, precision: str,
                  seq: int = SEQ) -> dict:
    dp = nproc // (distributed.get("cp_size", 1) * distributed.get("pp_size", 1))
    raw = {
        "model": {"pretrained_model_name_or_path": str(model_dir)},
        "step_scheduler": {"global_batch_size": MICRO_BATCH * dp * micro_batches(distributed),
                           "local_batch_size": MICRO_BATCH, "max_steps": 1},
        "distributed": {"strategy": "fsdp2", **distributed},
        "dataset": {"_target_": "trainer.data.MockDataset", "seq_length": seq, "num_samples": 64},
        "optimizer": {"_target_": "torch.optim.AdamW", "lr": 1e-4},
        "checkpoint": {"enabled": False, "checkpoint_dir": str(out_dir)},
        "precision": precision,
        "hardware": {"gpu_type": "cpu", "gpus_per_node": nproc},
    }
    if peft:
        raw["peft"] = {"method": "lora", **peft}
    return raw


def estimate(model_dir: Path, nproc: int, distributed: dict, peft, precision: str, seq: int = SEQ) -> dict[str, float]:
    """The model's terms, split as the probe measures them: sharded training state, the FSDP2
    unsharded working set, activations kept for backward (full recompute's re-run layer apart)."""
    from recipe_index.models import card_from_config
    from service.estimate import constants as C
    from service.estimate.memory import MemoryModel, fsdp2_working_set_bytes, model_shape
    from service.facts import Layout

    card = card_from_config(json.loads((model_dir / "config.json").read_text()), "bench-model", str(model_dir))
    shape = model_shape(card)
    recompute = distributed.get("activation_checkpointing", "none")
    layout = Layout(micro_batch_size=MICRO_BATCH, recompute=recompute, cp=distributed.get("cp_size", 1),
                    pp=distributed.get("pp_size", 1), ep=distributed.get("ep_size", 1))
    sharding = "none" if distributed.get("strategy") == "ddp" else "full"
    model = MemoryModel(shape, world_size=nproc, seq_length=seq, engine="bundled", peft=peft is not None, cpu=True,
                        precision=precision, lora_rank=peft["rank"] if peft else None)
    weights, grads, optimizer, activations = model.parts(layout, sharding, micro_batches(distributed))
    dp_shards = nproc // layout.pp
    unsharded = (fsdp2_working_set_bytes(shape, dp_shards=dp_shards, param_bytes=model.compute_param_bytes,
                                         ep=layout.ep) if sharding == "full" else 0.0)
    if layout.pp > 1 and sharding == "full":  # the bundled pipeline keeps its whole stage gathered: the weights
        unsharded = weights - optimizer / 2  # beyond the fp32 shards (half the two fp32 Adam moments)
    # Gradients carry FSDP's unsharded block gradients only with more than one shard (service/estimate/memory.py).
    grad_blocks = (shape.unsharded_block_params(1, layout.ep) * C.FSDP_UNSHARDED_BLOCKS * model.compute_param_bytes
                   if sharding == "full" and dp_shards > 1 and peft is None else 0.0)
    _, working = model._activation_per_token(1, False, recompute, sharding)
    tokens = MICRO_BATCH * seq / layout.cp
    return {"weights": weights - unsharded, "grads": grads - grad_blocks, "optimizer": optimizer,
            "activations": activations - working * tokens, "fsdp_unsharded": unsharded,
            "recompute_working": working * tokens}


def worker(config_path: Path) -> None:
    """One rank: set the recipe up, measure one step, print this rank's figures."""
    import torch

    torch.set_num_threads(1)
    from trainer.components.memory_probe import measure_pipeline_step, measure_recipe_step
    from trainer.contract.config import parse_config
    from trainer.distributed.dist import init_distributed
    from trainer.recipes.train_ft import TrainFinetuneRecipe

    raw = json.loads(config_path.read_text())
    info = init_distributed("gloo")
    recipe = TrainFinetuneRecipe(parse_config(raw), raw, info)
    recipe.setup()
    measured = measure_pipeline_step(recipe) if recipe.pipeline is not None else measure_recipe_step(recipe)
    # One file per rank: two ranks printing to one pipe can interleave on a single line.
    result = config_path.parent / f"result_{info.rank}.json"
    partial = result.with_suffix(".tmp")
    partial.write_text(json.dumps(measured.__dict__))
    partial.replace(result)


def measure(raw: dict, nproc: int, folder: Path) -> dict[str, int]:
    path = folder / "config.json"
    path.write_text(json.dumps(raw))
    env = dict(os.environ, OMP_NUM_THREADS="1", HF_HUB_OFFLINE="1",
               PYTHONPATH=os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])))
    for key in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
        env.pop(key, None)
    launcher = [sys.executable] if nproc == 1 else [sys.executable, "-m", "torch.distributed.run",
                                                    f"--nproc-per-node={nproc}", "--standalone"]
    results = [folder / f"result_{rank}.json" for rank in range(nproc)]
    for stale in results:  # a folder measured before must not report for this run
        stale.unlink(missing_ok=True)
    out = subprocess.run(launcher + [__file__, "--worker", str(path)], env=env, capture_output=True, text=True,
                         timeout=900)
    reported = [r for r in results if r.exists()]
    if out.returncode != 0 or len(reported) != nproc:
        raise SystemExit(f"measurement failed (exit {out.returncode}, {len(reported)} of {nproc} ranks reported):\n"
                         f"{out.stdout[-2000:]}\n{out.stderr[-3000:]}")
    per_rank = [json.loads(r.read_text()) for r in results]
    return {k: max(r[k] for r in per_rank) for k in per_rank[0]}  # the fullest rank, as the estimate


def write_model_dir(folder: Path, moe: bool = False) -> Path:
    from trainer.models.config import DecoderConfig

    folder.mkdir(parents=True, exist_ok=True)
    config = MOE_SHAPE if moe else DecoderConfig(**SHAPE).to_hf()
    (folder / "config.json").write_text(json.dumps(config, indent=1))
    return folder


def compare(names: list[str], seq: int = SEQ) -> list[dict]:
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        model_dirs = {moe: write_model_dir(Path(tmp) / ("moe" if moe else "dense"), moe) for moe in (False, True)}
        for name in names:
            nproc, distributed, peft, precision = CONFIGS[name]
            model_dir = model_dirs[name in MOE_CONFIGS]
            folder = Path(tmp) / f"run{len(rows)}"
            folder.mkdir()
            raw = recipe_config(model_dir, folder / "out", nproc, distributed, peft, precision, seq)
            rows.append({"config": name, "measured": measure(raw, nproc, folder),
                         "estimate": estimate(model_dir, nproc, distributed, peft, precision, seq)})
    return rows


def summary_table(rows: list[dict]) -> str:
    """One line per config, "estimate / measured (ratio)" in MiB per term (benchmarks/README.md)."""
    lines = ["| config | weights | gradients | optimizer | activations kept | FSDP2 unsharded |",
             "|---|---|---|---|---|---|"]
    for row in rows:
        cells = []
        for term in TERMS:
            est, got = row["estimate"][term], row["measured"][term]
            if not est and not got:
                cells.append("-")
                continue
            ratio = est / got if got else float("inf")
            cells.append(f"{est / 2**20:.2f} / {got / 2**20:.2f}"
                         + ("" if abs(ratio - 1) < 5e-4 else f" ({ratio:.2f})"))
        lines.append(f"| {row['config']} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--worker", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--config", action="append", choices=list(CONFIGS), help="only these (repeatable)")
    parser.add_argument("--seq", type=int, default=SEQ, help=f"sequence length (default {SEQ})")
    parser.add_argument("--json", type=Path)
    parser.add_argument("--smoke", action="store_true",
                        help="the same code path in seconds (the suite runs it): one 1-process config at seq 64")
    args = parser.parse_args()
    if args.smoke:
        args.config, args.seq = args.config or ["FSDP2 x1, recompute none"], 64
    if args.worker:
        worker(args.worker)
        return
    rows = compare(args.config or list(CONFIGS), args.seq)
    shape = ", ".join(f"{k}={v}" for k, v in SHAPE.items() if k != "max_position_embeddings")
    print(f"{shape}; seq {args.seq}, micro-batch {MICRO_BATCH}, bf16 (FSDP2 mixed precision / DDP autocast) unless "
          "named fp32, AdamW, CPU gloo")
    print("| config | term | estimate (MiB) | measured (MiB) | estimate / measured |")
    print("|---|---|---|---|---|")
    worst = 0.0
    for row in rows:
        for term in TERMS:
            est, got = row["estimate"][term], row["measured"][term]
            if not est and not got:
                continue
            ratio = est / got if got else float("inf")
            worst = max(worst, abs(ratio - 1))
            print(f"| {row['config']} | {TERM_NAMES[term]} | {est / 2**20:.2f} | {got / 2**20:.2f} | {ratio:.3f} |")
        if row["estimate"]["recompute_working"]:
            print(f"| {row['config']} | re-run layer in backward (modelled, not measured apart) | "
                  f"{row['estimate']['recompute_working'] / 2**20:.2f} | | |")
        if row["measured"].get("fsdp_unsharded_forward"):
            print(f"| {row['config']} | FSDP2 unsharded, most in forward (before the activations: see README) | | "
                  f"{row['measured']['fsdp_unsharded_forward'] / 2**20:.2f} | |")
    print(f"\nlargest deviation of a term: {worst:.1%}\n")
    print(summary_table(rows))
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
