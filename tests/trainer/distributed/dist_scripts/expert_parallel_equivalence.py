"""Expert parallel must equal one process on the same global batch.

Run by tests/trainer/distributed/test_expert_parallel.py under `torch.distributed.run` (gloo, CPU). For
each requested case the ranks train a tiny MoE decoder for 3 AdamW steps with its experts split over
an ``ep`` mesh dimension (or none: FSDP2 alone), the load-balancing loss on (DeepSeek-V3: its sequence-wise
loss and the aux-loss-free bias update after each step); rank 0 also trains the same model as one process on
the whole batch and writes both loss curves, the aux losses, the selection biases and the largest gradient /
weight differences to OUT/<case>.json.
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

import torch
import torch.distributed as dist
from parallel_equivalence import GLOBAL_BATCH, SEED, batches, full_grads, max_diff

from trainer.distributed.expert_parallel import configure_aux_loss
from trainer.distributed.mesh import data_mesh
from trainer.distributed.parallelize import build_mesh, full_state_dict, parallelize_model
from trainer.loss import causal_lm_loss
from trainer.models import build_causal_lm
from trainer.models.moe import collect_router_stats, update_expert_bias

TINY = {"vocab_size": 128, "hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 4,
        "num_key_value_heads": 2, "head_dim": 8, "max_position_embeddings": 64, "rms_norm_eps": 1e-6,
        "rope_theta": 10000.0, "hidden_act": "silu", "tie_word_embeddings": False}
FAMILIES = {
    "qwen3_moe": {**TINY, "model_type": "qwen3_moe", "intermediate_size": 48, "moe_intermediate_size": 16,
                  "num_experts": 4, "num_experts_per_tok": 2, "norm_topk_prob": True, "mlp_only_layers": [],
                  "decoder_sparse_step": 1, "router_aux_loss_coef": 0.05},
    "qwen2_moe": {**TINY, "model_type": "qwen2_moe", "intermediate_size": 48, "moe_intermediate_size": 16,
                  "shared_expert_intermediate_size": 24, "num_experts": 4, "num_experts_per_tok": 2,
                  "mlp_only_layers": [], "decoder_sparse_step": 1, "router_aux_loss_coef": 0.05},
    "mixtral": {**TINY, "model_type": "mixtral", "intermediate_size": 16, "num_local_experts": 4,
                "num_experts_per_tok": 2, "router_aux_loss_coef": 0.05},
    # Layer 0 dense, layer 1 sigmoid-routed over 2 groups with a shared expert, MLA attention; balanced as
    # DeepSeek-V3 trains: the sequence-wise loss (its alpha raised so that it weighs) and the bias update.
    "deepseek_v3": {**TINY, "model_type": "deepseek_v3", "num_key_value_heads": 4, "intermediate_size": 48,
                    "moe_intermediate_size": 16, "n_routed_experts": 4, "num_experts_per_tok": 2, "n_group": 2,
                    "topk_group": 1, "n_shared_experts": 1, "first_k_dense_replace": 1, "routed_scaling_factor": 2.5,
                    "q_lora_rank": 16, "kv_lora_rank": 16, "qk_nope_head_dim": 8, "qk_rope_head_dim": 4,
                    "v_head_dim": 8, "aux_loss_alpha": 0.05},
}
# case: (family, ep_size, activation checkpointing, build on meta, chunked loss)
CASES = {
    "ep2": ("qwen3_moe", 2, "none", True, False),
    "ep2_mixtral_ac": ("mixtral", 2, "full", False, True),
    "ep2_qwen2_moe": ("qwen2_moe", 2, "none", True, False),
    "fsdp2_moe": ("qwen3_moe", 1, "selective", True, False),
    "ep2_deepseek": ("deepseek_v3", 2, "full", True, False),
    "ep2_dp2": ("qwen3_moe", 2, "none", True, True),
    "ep4": ("mixtral", 4, "full", True, False),
}


def train(model, data, *, dp_rank=0, dp_size=1, dp_group=None, chunked=False):
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.01)
    configure_aux_loss(model, dp_group, dp_size, micro_batches=1)
    local_batch = GLOBAL_BATCH // dp_size
    losses, aux_losses, loads, first_grads, biases = [], [], [], None, []
    for step, (ids, labels) in enumerate(data):
        rows = slice(dp_rank * local_batch, (dp_rank + 1) * local_batch)
        loss_sum, num_tokens = causal_lm_loss(model, ids[rows], labels[rows], chunked=chunked, chunk_size=5)
        stats = torch.tensor([loss_sum.item(), float(num_tokens)], dtype=torch.float64)
        if dp_group is not None:
            dist.all_reduce(stats, group=dp_group)
        (loss_sum * dp_size / stats[1].item()).backward()
        losses.append((stats[0] / stats[1]).item())
        router = collect_router_stats(model, dp_group)
        aux_losses.append(router["moe_aux_loss"])
        loads.append([router["expert_load_min"], router["expert_load_max"]])
        if step == 0:
            first_grads = full_grads(model)
        optimizer.step()
        update_expert_bias(model)
        biases.append(selection_biases(full_state_dict(model)))
        optimizer.zero_grad()
    return losses, aux_losses, loads, first_grads, full_state_dict(model), biases


def selection_biases(state: dict[str, torch.Tensor]) -> list[list[float]]:
    return [t.tolist() for n, t in sorted(state.items()) if n.endswith("e_score_correction_bias")]


def run_case(case: str, config_dir: Path, out: Path) -> None:
    family, ep_size, ac, on_meta, chunked = CASES[case]
    world, rank = dist.get_world_size(), dist.get_rank()
    data = batches(TINY["vocab_size"])
    path = str(config_dir / f"{family}.json")
    mesh = build_mesh(world, 1, "cpu", ep_size=ep_size)
    init = full_state_dict(build_causal_lm(path, device="cpu", seed=SEED))
    model = parallelize_model(build_causal_lm(path, device="meta" if on_meta else "cpu", seed=SEED), mesh,
                              activation_checkpointing=ac, precision="fp32", device="cpu")
    init_diff = max_diff(full_state_dict(model), init)
    dp = data_mesh(mesh)  # edp x ep flattened, kept on the mesh (slicing it from the root is deprecated)
    losses, aux, loads, grads, final, bias = train(model, data, dp_rank=dp.get_local_rank(), dp_size=dp.size(),
                                             dp_group=dp.get_group(), chunked=chunked)
    expert_local_rows = [tuple(p.to_local().shape) for n, p in model.named_parameters() if "experts.gate_proj" in n]
    # Mesh dimensions each kind of parameter is sharded over: the shared expert goes with attention.
    meshes = {kind: [list(p.device_mesh.mesh_dim_names) for n, p in model.named_parameters() if kind in n][0]
              for kind in ("self_attn.q_proj.weight", "experts.gate_proj", "shared_expert.gate_proj")
              if any(kind in n for n, _ in model.named_parameters())}
    if rank == 0:
        reference = build_causal_lm(path, device="cpu", seed=SEED)
        ref_losses, ref_aux, ref_loads, ref_grads, ref_final, ref_bias = train(reference, data, chunked=chunked)
        result = {"losses": losses, "reference_losses": ref_losses, "aux": aux, "reference_aux": ref_aux,
                  "loads": loads, "reference_loads": ref_loads, "init_diff": init_diff,
                  "grad_diff": max_diff(grads, ref_grads), "weight_diff": max_diff(final, ref_final),
                  "weight_change": max_diff(ref_final, init), "world_size": world,
                  "ep_size": mesh["ep"].size() if ep_size > 1 else 1, "expert_local_shape": expert_local_rows[0],
                  "meshes": meshes, "bias": bias, "reference_bias": ref_bias}
        (out / f"{case}.json").write_text(json.dumps(result))
    dist.barrier()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", required=True, type=Path)
    parser.add_argument("cases", nargs="+", choices=sorted(CASES))
    args = parser.parse_args()
    torch.manual_seed(0)
    dist.init_process_group("gloo")
    try:
        if dist.get_rank() == 0:
            for family, cfg in FAMILIES.items():
                (args.out / f"{family}.json").write_text(json.dumps(cfg))
        dist.barrier()
        for case in args.cases:
            run_case(case, args.out, args.out)
        dist.barrier()
    finally:
        dist.destroy_process_group()
    os._exit(0)


if __name__ == "__main__":
    main()
