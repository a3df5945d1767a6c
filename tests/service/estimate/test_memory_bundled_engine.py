"""The planner's memory model for the bundled engine against what the trainer holds.

Hand-computed terms of service/estimate/memory.py for the bundled engine (the fused loss, FSDP2's unsharded
root and blocks, expert parallel's expert units, PEFT adapters on separate projections, DDP's autocast over
fp32 parameters, fp32 training), then the model next to a measured run (benchmarks/estimate_vs_measured.py:
one process and two, FSDP2 and DDP) within 10% per term, and for an MoE within 3% per term.
"""

from __future__ import annotations

import pytest

from recipe_index.models import card_from_config
from service.estimate import constants as C
from service.estimate.memory import MemoryModel, estimate_memory, fsdp2_working_set_bytes, model_shape
from service.facts import Layout
from tests import launch_server
from tests.benchmarks.scripts import load_script

H, V, FFN, LAYERS, HEADS, KV, D = 256, 8192, 768, 2, 8, 4, 32
CONFIG = {"model_type": "llama", "vocab_size": V, "hidden_size": H, "intermediate_size": FFN,
          "num_hidden_layers": LAYERS, "num_attention_heads": HEADS, "num_key_value_heads": KV, "head_dim": D,
          "tie_word_embeddings": False, "max_position_embeddings": 4096}


@pytest.fixture(scope="module")
def shape():
    return model_shape(card_from_config(CONFIG, "bench-llama", "test"))


def test_fused_loss_keeps_hidden_gradient_and_fp32_head_gradient(shape) -> None:
    tokens = 2 * 512
    layout = Layout(micro_batch_size=2)
    fused = MemoryModel(shape, world_size=1, seq_length=512, engine="bundled").parts(layout, "full", 1)[3]
    plain = MemoryModel(shape, world_size=1, seq_length=512, engine="bundled",
                        fused_loss=False).parts(layout, "full", 1)[3]
    # plain: bf16 logits + fp32 copy + fp32 log-softmax per token; fused: d hidden (bf16) + fp32 d W_head
    assert plain - fused == pytest.approx(tokens * V * 10 - tokens * 2 * H - V * H * 4)
    frozen = MemoryModel(shape, world_size=1, seq_length=512, engine="bundled", peft=True).parts(layout, "full", 1)[3]
    assert fused - frozen == pytest.approx(V * H * 4)  # a frozen head (LoRA) needs no gradient accumulator
    tp2 = MemoryModel(shape, world_size=2, seq_length=512, engine="bundled").loss_bytes(2)
    assert tp2 == (V / 2 * 10 + 2 * H, 0.0)  # tensor parallel runs the plain loss


BLOCK = 2 * H * HEADS * D + 2 * H * KV * D + 3 * H * FFN + 2 * H
ROOT = 2 * V * H + H


def test_fsdp2_holds_the_root_and_one_block_per_rank_or_two_when_sharded(shape) -> None:
    # One rank: a block's shard is copied in when it runs; sharded: the next block's all-gather is
    # prefetched while one computes (FSDP2's defaults, on any device).
    assert fsdp2_working_set_bytes(shape, dp_shards=1) == pytest.approx((ROOT + BLOCK) * 2)
    assert fsdp2_working_set_bytes(shape, dp_shards=2) == pytest.approx((ROOT + 2 * BLOCK) * 2)
    assert fsdp2_working_set_bytes(shape, dp_shards=8, param_bytes=4) == pytest.approx((ROOT + 2 * BLOCK) * 4)
    params = LAYERS * BLOCK + ROOT
    one_rank = estimate_memory(shape, Layout(), world_size=1, seq_length=512, sharding="full", engine="bundled")
    assert one_rank.weights * 2**30 == pytest.approx(params * 4 + (ROOT + BLOCK) * 2)
    two_ranks = estimate_memory(shape, Layout(), world_size=2, seq_length=512, sharding="full", engine="bundled")
    assert two_ranks.weights * 2**30 == pytest.approx(params * 4 / 2 + (ROOT + 2 * BLOCK) * 2)
    fp32 = estimate_memory(shape, Layout(), world_size=1, seq_length=512, sharding="full", engine="bundled",
                           precision="fp32")
    assert fp32.weights * 2**30 == pytest.approx(params * 4 + (ROOT + BLOCK) * 4)  # no bf16 policy: fp32 copies


def test_ddp_autocast_keeps_an_fp32_residual_stream_and_bf16_copies(shape) -> None:
    tokens, layout = 2 * 512, Layout(micro_batch_size=2)
    model = MemoryModel(shape, world_size=2, seq_length=512, engine="bundled")
    fsdp2, ddp = model.parts(layout, "full", 1)[3], model.parts(layout, "none", 1)[3]
    residual = tokens * 2 * H * (2 * LAYERS + 2)  # 2 norm inputs per layer, the final norm's, d hidden: +2 bytes
    input_casts = tokens * 2 * H * (2 + 1) * LAYERS  # q/k/v read one norm output, gate/up the other
    weight_copies = LAYERS * BLOCK * 2  # the GEMMs save bf16 copies of the fp32 weights
    assert ddp - fsdp2 == pytest.approx(residual + input_casts + weight_copies)
    # Selective recompute re-runs the casts; full recompute keeps one fp32 block input per layer.
    sel = model.parts(Layout(micro_batch_size=2, recompute="selective"), "none", 1)[3]
    sel_fsdp2 = model.parts(Layout(micro_batch_size=2, recompute="selective"), "full", 1)[3]
    assert sel - sel_fsdp2 == pytest.approx(residual)
    kept_full = model._activation_per_token(1, False, "full", "none")[0]
    assert kept_full == pytest.approx(2 * model._activation_per_token(1, False, "full", "full")[0])


def test_fp32_training_keeps_every_activation_in_fp32(shape) -> None:
    layout = Layout(micro_batch_size=2)
    head_grad = V * H * 4  # the fused loss's fp32 LM-head gradient accumulator, in any precision
    bf16 = MemoryModel(shape, world_size=1, seq_length=512, engine="bundled").parts(layout, "full", 1)[3]
    fp32 = MemoryModel(shape, world_size=1, seq_length=512, engine="bundled",
                       precision="fp32").parts(layout, "full", 1)[3]
    assert fp32 - head_grad == pytest.approx(2 * (bf16 - head_grad))


def test_bundled_pipeline_keeps_its_stage_gathered_and_context_parallel_splits_the_tokens(shape) -> None:
    model = MemoryModel(shape, world_size=2, seq_length=512, engine="bundled")
    first = model.state_bytes(1, 2, 1, 1, 1, "full")[0]
    stage_params = BLOCK + V * H  # one block and the embedding
    assert first.weights == pytest.approx(stage_params * 4 + stage_params * 2)  # fp32 shard + the bf16 stage
    layout = Layout(micro_batch_size=2)
    kept = model._activation_per_token(1, False, "none", "full")[0]
    per_token_loss = model.loss_bytes(1, "full")[0]
    whole, split = model.parts(layout, "full", 1)[3], model.parts(Layout(micro_batch_size=2, cp=2), "full", 1)[3]
    # CP 2: each rank keeps the activations and the loss's share of half of each sequence's tokens
    assert whole - split == pytest.approx((kept + per_token_loss) * 2 * 512 / 2)


def test_bundled_lora_adapters_sit_on_separate_projections(shape) -> None:
    rank = 8
    per_layer = rank * ((H + HEADS * D) + (H + KV * D) * 2 + (HEADS * D + H) + (H + FFN) * 2 + (FFN + H))
    model = MemoryModel(shape, world_size=1, seq_length=512, engine="bundled", peft=True, lora_rank=rank)
    assert model.lora_params == pytest.approx(LAYERS * per_layer)
    w, g, o, _ = model.parts(Layout(), "full", 1)
    assert g == pytest.approx(LAYERS * per_layer * 4) and o == pytest.approx(LAYERS * per_layer * 8)
    default = MemoryModel(shape, world_size=1, seq_length=512, engine="bundled", peft=True)
    assert default.lora_params == pytest.approx(LAYERS * per_layer * C.LORA_DEFAULT_RANK_BUNDLED / rank)


MOE_CONFIG = {"model_type": "qwen3_moe", "vocab_size": V, "hidden_size": H, "intermediate_size": FFN,
              "moe_intermediate_size": 128, "num_experts": 8, "num_experts_per_tok": 2, "num_hidden_layers": LAYERS,
              "num_attention_heads": HEADS, "num_key_value_heads": KV, "head_dim": D, "tie_word_embeddings": False,
              "max_position_embeddings": 4096}
EXPERTS = 8 * 3 * H * 128  # one layer's routed experts
MOE_BLOCK = 2 * H * HEADS * D + 2 * H * KV * D + 2 * D + 2 * H + 8 * H  # attention, q/k norms, norms, router


def test_expert_parallel_gathers_a_ranks_own_experts_as_their_own_unit() -> None:
    moe = model_shape(card_from_config(MOE_CONFIG, "bench-moe", "test"))
    assert moe.largest_block_params == MOE_BLOCK + EXPERTS  # no dense-MLP layer: intermediate_size unused
    # Without EP the experts are part of their block's unit; with EP 2 over 2 ranks the expert-data-parallel
    # group has one rank (one expert unit at a time) while the rest of the block is sharded over both.
    assert fsdp2_working_set_bytes(moe, dp_shards=2) == pytest.approx((ROOT + 2 * (MOE_BLOCK + EXPERTS)) * 2)
    assert fsdp2_working_set_bytes(moe, dp_shards=2, ep=2) == pytest.approx((ROOT + 2 * MOE_BLOCK + EXPERTS / 2) * 2)
    assert fsdp2_working_set_bytes(moe, dp_shards=8, ep=2) == pytest.approx((ROOT + 2 * MOE_BLOCK + EXPERTS) * 2)


def test_qk_norm_keeps_the_query_and_key_inputs(shape) -> None:
    normed = model_shape(card_from_config({**CONFIG, "qk_norm": True}, "bench-llama-qk", "test"))
    plain = MemoryModel(shape, world_size=1, seq_length=512, engine="bundled")._activation_per_token(1, False, "none")
    with_norm = MemoryModel(normed, world_size=1, seq_length=512, engine="bundled")._activation_per_token(
        1, False, "none")
    assert with_norm[0] - plain[0] == pytest.approx(LAYERS * (2 * (HEADS + KV) * D + 4 * (HEADS + KV)))


@pytest.mark.slow
@pytest.mark.parametrize("config", ["MoE FSDP2 x1", "MoE FSDP2 x2, EP 1", "MoE FSDP2 x2, EP 2",
                                    "MoE FSDP2 x2, EP 2, recompute full"])
def test_moe_estimate_within_three_percent_of_measured(config: str) -> None:
    (row,) = _measured_rows(config)
    for term in ("weights", "grads", "optimizer", "activations", "fsdp_unsharded"):
        est, got = row["estimate"][term], row["measured"][term]
        assert got > 0 and est == pytest.approx(got, rel=0.03), (term, est, got)


def _measured_rows(config: str) -> list[dict]:
    """benchmarks/estimate_vs_measured.py for one config at seq 256, called in this process; the measured run's
    processes start from the launch server (tests/launch_server.py)."""
    bench = load_script("estimate_vs_measured")
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(bench.subprocess, "run", launch_server.subprocess_run)
        return bench.compare([config], seq=256)


@pytest.mark.slow
@pytest.mark.parametrize("config", ["FSDP2 x1, recompute none", "FSDP2 x2, recompute full", "FSDP2 x1, LoRA r8",
                                    "DDP x2, recompute none", "FSDP2 x2, CP 2", "FSDP2 x2, PP 2 (1F1B)"])
def test_estimate_within_ten_percent_of_measured(config: str) -> None:
    (row,) = _measured_rows(config)
    for term in ("weights", "grads", "optimizer", "activations", "fsdp_unsharded"):
        est, got = row["estimate"][term], row["measured"][term]
        if term == "fsdp_unsharded" and config.startswith("DDP"):
            assert est == got == 0
            continue
        assert got > 0 and est == pytest.approx(got, rel=0.10), (term, est, got)
