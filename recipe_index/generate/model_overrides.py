"""Hand-kept facts for the model-card generator, keyed by the reference's ``model_key``.

Every model of ``shared/reference/model_cards.json`` has an entry, so a refresh that adds a
model fails until someone decides about it. An entry either

* ``skip``s the model, with the reason, or
* gives its HF ``model_type`` and, in ``fill``, HF config.json values for dimensions the
  reference leaves null, each with a source in ``sources``. ``fill`` never overrides a
  value the reference has: the generator refuses that.

``id`` overrides the bundled id derived from the Megatron ``model`` key (``llama3_8b`` ->
``llama3-8b``); ``published`` gives total/active parameter counts the reference lacks.
"""

from __future__ import annotations

from typing import Any

_HF = "public Hugging Face config.json of {}"
_NOT_PUBLIC = "architecture values not stated in the reference nor in a public config we could check"
_DSV3_MLA = {"qk_rope_head_dim": 64, "qk_nope_head_dim": 128, "v_head_dim": 128}
_LLAMA31_ROPE = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                 "original_max_position_embeddings": 8192}
_LLAMA32_ROPE = {**_LLAMA31_ROPE, "factor": 32.0}
_TEXT_DIMS = ("num_hidden_layers", "hidden_size", "intermediate_size", "num_attention_heads", "num_key_value_heads",
              "vocab_size", "tie_word_embeddings")


def _text_dims(*dims: Any, **more: Any) -> dict[str, Any]:
    """HF keys for the dimensions in the order of ``_TEXT_DIMS``, plus any further keys."""
    return {**dict(zip(_TEXT_DIMS, dims, strict=True)), **more}


def _public_config(model_type: str, fill: dict[str, Any], *model_ids: str, note: str = "",
                   **extra: Any) -> dict[str, dict[str, Any]]:
    """Entries for models whose ``fill`` comes from each one's own public config.json."""
    return {model_id: {"model_type": model_type, "fill": dict(fill),
                       "sources": {"fill": _HF.format(model_id) + note}, **extra}
            for model_id in model_ids}


def _complete(model_type: str, *model_ids: str) -> dict[str, dict[str, Any]]:
    """Entries for models whose reference record already has every dimension."""
    return {model_id: {"model_type": model_type} for model_id in model_ids}


def _skip(reason: str, *model_keys: str) -> dict[str, dict[str, Any]]:
    return {model_key: {"skip": reason} for model_key in model_keys}


_NEMOTRONH_SRC = "Megatron-Bridge src/megatron/bridge/models/nemotronh/nemotron_h_provider.py::{}"


def _nemotron_h(provider: str, pattern: str, context: int, mamba_heads: int, mamba_head_dim: int, state: int,
                **more: Any) -> dict[str, Any]:
    """A Nemotron-H entry: layer pattern and Mamba sizes from Megatron Bridge's provider, vocab from the public
    config."""
    return {
        "model_type": "nemotron_h",
        "fill": {"vocab_size": 131072, "max_position_embeddings": context, "mamba_num_heads": mamba_heads,
                 "mamba_head_dim": mamba_head_dim, "ssm_state_size": state, "hybrid_override_pattern": pattern,
                 **more},
        "sources": {"fill": _NEMOTRONH_SRC.format(provider) + "; vocab: public config"},
    }


_NEMOTRON3_NANO = {
    "vocab_size": 131072,
    "hybrid_override_pattern": "MEMEM*EMEMEM*EMEMEM*EMEMEM*EMEMEM*EMEMEMEM*EMEMEMEME",
    "mamba_num_heads": 64,
    "mamba_head_dim": 64,
    "ssm_state_size": 128,
    "max_position_embeddings": 262144,
}
_NEMOTRON3_NANO_SRC = (_NEMOTRONH_SRC.format("Nemotron3NanoProvider")
                       + " and the public config.json of nvidia/NVIDIA-Nemotron-3-Nano-30B-A3B-BF16")
_NEMOTRON_NANO_12B_V2 = _nemotron_h("NemotronNanoModelProvider12Bv2",
                                    "M-M-M-M*-M-M-M-M*-M-M-M-M*-M-M-M-M*-M-M-M-M*-M-M-M-M*-M-M-M-M-",
                                    context=131072, mamba_heads=128, mamba_head_dim=80, state=128)


def _qwen25_vl() -> dict[str, dict[str, Any]]:
    """The Qwen2.5-VL language models (public config.json), dimensions in ``_TEXT_DIMS`` order."""
    entries: dict[str, dict[str, Any]] = {}
    for size, dims in {"3B": (36, 2048, 11008, 16, 2, 151936, True), "7B": (28, 3584, 18944, 28, 4, 152064, False),
                       "32B": (64, 5120, 27648, 40, 8, 152064, False),
                       "72B": (80, 8192, 29568, 64, 8, 152064, False)}.items():
        entries.update(_public_config("qwen2_5_vl", _text_dims(*dims, max_position_embeddings=128000),
                                      f"Qwen/Qwen2.5-VL-{size}-Instruct", note=" (language model)"))
    return entries


_QWEN3_VL_MOE = {"head_dim": 128, "max_position_embeddings": 262144, "num_experts": 128, "num_experts_per_tok": 8}
_QWEN35_MOE_35B = _text_dims(40, 2048, 512, 16, 2, 248320, False, head_dim=256, max_position_embeddings=262144,
                             num_experts=256, num_experts_per_tok=8, moe_intermediate_size=512,
                             shared_expert_intermediate_size=512)
_QWEN35_BRIDGE_FIXTURE = "Megatron-Bridge tests/unit_tests/models/qwen/test_qwen35_bridge.py fixture"

OVERRIDES: dict[str, dict[str, Any]] = {
    **_public_config("deepseek_v2", {"num_attention_heads": 128, "num_key_value_heads": 128, "q_lora_rank": 1536,
                                     "kv_lora_rank": 512, **_DSV3_MLA, "max_position_embeddings": 163840},
                     "deepseek-ai/DeepSeek-V2"),
    **_public_config("deepseek_v2", {"num_key_value_heads": 16, "kv_lora_rank": 512, **_DSV3_MLA,
                                     "max_position_embeddings": 163840},
                     "deepseek-ai/DeepSeek-V2-Lite", note=" (q_lora_rank null: no q compression)"),
    **_public_config("deepseek_v3", _DSV3_MLA, "deepseek-ai/DeepSeek-V3"),
    **_skip(_NOT_PUBLIC, "deepseek-ai/DeepSeek-V4-Flash", "deepseek-ai/DeepSeek-V4-Pro"),
    **_public_config("exaone4", _text_dims(30, 2048, 4096, 32, 8, 102400, True, head_dim=64,
                                           max_position_embeddings=65536, rope_theta=1000000.0),
                     "LGAI-EXAONE/EXAONE-4.0-1.2B",
                     note="; tied embeddings: the published 1.28B total only adds up with them"),
    **_skip(_NOT_PUBLIC, "LGAI-EXAONE/EXAONE-4.5-33B", "LGAI-EXAONE/K-EXAONE-2.0-750B-A37B",
            "LGAI-EXAONE/K-EXAONE-236B-A23B"),
    **_skip("diffusion model, not a causal language model", "black-forest-labs/FLUX.1-dev",
            "wan_14b (WanModelProvider in recipe)", "wan_1_3b (WanModelProvider in recipe)"),
    **_public_config("glm4_moe", {"attention_bias": True}, "zai-org/GLM-4.5", "zai-org/GLM-4.5-Air"),
    **_public_config("glm4v_moe", {"attention_bias": True}, "zai-org/GLM-4.5V", note=" (text_config)"),
    **_skip(_NOT_PUBLIC + " (hidden size, MLA ranks, vocab)", "zai-org/GLM-5.1", "zai-org/GLM-5.2"),
    "gpt3_175b (synthetic: GPTModelProvider in recipe)": {
        "id": "gpt3-175b",
        "model_type": "gpt3",
        "fill": {"num_key_value_heads": 96, "vocab_size": 50257, "max_position_embeddings": 2048,
                 "tie_word_embeddings": True},
        "sources": {"fill": "Brown et al. 2020, Language Models are Few-Shot Learners: 96 heads (MHA), "
                            "2048 context, GPT-2 BPE vocabulary of 50257; Megatron GPT ties embeddings"},
        "published": ("175B", "175B"),
        "published_source": "Brown et al. 2020",
    },
    **_public_config("gpt_oss", {"max_position_embeddings": 131072, "attention_bias": True,
                                 "tie_word_embeddings": False},
                     "openai/gpt-oss-120b", published=("116.8B", "5.1B"), published_source="OpenAI gpt-oss model card"),
    **_public_config("gpt_oss", {"max_position_embeddings": 131072, "attention_bias": True,
                                 "tie_word_embeddings": False},
                     "openai/gpt-oss-20b", published=("20.9B", "3.6B"), published_source="OpenAI gpt-oss model card"),
    **_public_config("gemma2", {"max_position_embeddings": 8192}, "google/gemma-2-27b", "google/gemma-2-2b"),
    **_complete("gemma2", "google/gemma-2-9b"),
    **_complete("gemma3_text", "google/gemma-3-1b-pt"),
    **_public_config("gemma3", {"max_position_embeddings": 131072}, "google/gemma-3-12b-it", note=" (text_config)"),
    **_complete("gemma3", "google/gemma-3-27b-it", "google/gemma-3-4b-it"),
    **_skip(_NOT_PUBLIC, "google/gemma-4-E4B-it", "google/gemma-4-26B-A4B-it"),
    **_public_config("kimi_k2", {"num_key_value_heads": 64, **_DSV3_MLA, "max_position_embeddings": 131072},
                     "moonshotai/Kimi-K2-Instruct", published=("1T", "32B"), published_source="Kimi K2 model card"),
    "moonshotai/Kimi-K2.5": {
        "model_type": "kimi_k25",
        "fill": {"num_hidden_layers": 61, "hidden_size": 7168, "intermediate_size": 18432, "num_attention_heads": 64,
                 "num_key_value_heads": 64, "vocab_size": 163840, "max_position_embeddings": 262144,
                 "n_routed_experts": 384, "num_experts_per_tok": 8, "moe_intermediate_size": 2048,
                 "n_shared_experts": 1, "first_k_dense_replace": 1, "q_lora_rank": 1536, "kv_lora_rank": 512,
                 **_DSV3_MLA},
        "sources": {"fill": "Kimi K2.5 model card (61 layers, MLA, 384 experts / 8 selected / 1 shared, 7168 "
                            "hidden, 2048 expert width, 64 heads, 160K vocab, 256K context): the Kimi K2 text "
                            "architecture, whose config.json gives the remaining values"},
        "published": ("1T", "32B"),
        "published_source": "Kimi K2.5 model card",
    },
    **_public_config("llama", {"rope_theta": 10000.0}, "meta-llama/Llama-2-7b-hf", published=("6.74B", "6.74B"),
                     published_source="parameter count of the released Llama-2-7b-hf weights"),
    **_public_config("llama", {"rope_theta": 500000.0}, "meta-llama/Meta-Llama-3-70B",
                     published=("70.6B", "70.6B"), published_source="Llama 3 model card"),
    **_public_config("llama", {"rope_theta": 500000.0}, "meta-llama/Meta-Llama-3-8B",
                     published=("8.03B", "8.03B"), published_source="Llama 3 model card"),
    **_public_config("llama", {"rope_theta": 500000.0, "rope_scaling": _LLAMA31_ROPE}, "meta-llama/Meta-Llama-3.1-405B",
                     published=("405B", "405B"), published_source="Llama 3.1 model card"),
    **_public_config("llama", {"rope_theta": 500000.0, "rope_scaling": _LLAMA31_ROPE},
                     "meta-llama/Meta-Llama-3.1-70B", "meta-llama/Meta-Llama-3.1-8B"),
    **_public_config("llama", {"rope_theta": 500000.0, "rope_scaling": _LLAMA32_ROPE, "tie_word_embeddings": True},
                     "meta-llama/Llama-3.2-1B", published=("1.23B", "1.23B"), published_source="Llama 3.2 model card"),
    **_public_config("llama", {"rope_theta": 500000.0, "rope_scaling": _LLAMA32_ROPE, "tie_word_embeddings": True},
                     "meta-llama/Llama-3.2-3B", published=("3.21B", "3.21B"), published_source="Llama 3.2 model card"),
    **_skip(_NOT_PUBLIC + " (FFN and expert widths, vocab)", "MiniMaxAI/MiniMax-M3"),
    **_public_config("mistral3", {"vocab_size": 131072, "max_position_embeddings": 262144},
                     "mistralai/Ministral-3-14B-Instruct-2512", "mistralai/Ministral-3-3B-Instruct-2512",
                     "mistralai/Ministral-3-8B-Instruct-2512", note=" (text_config)"),
    **_skip("Nemotron Labs diffusion LM (dLLM) recipe base", "mistralai/Ministral-3-14B-Base-2512",
            "mistralai/Ministral-3-3B-Base-2512", "mistralai/Ministral-3-8B-Base-2512"),
    **_skip("diffusion LM with a user-supplied provider", "nemotron_labs_diffusion (user-supplied provider)"),
    **_public_config("deepseek_v3", {"num_key_value_heads": 16, "kv_lora_rank": 512, **_DSV3_MLA,
                                     "max_position_embeddings": 8192},
                     "moonshotai/Moonlight-16B-A3B", note=" (q_lora_rank null)"),
    "nvidia/NVIDIA-Nemotron-3-Nano-30B-A3B-BF16": {
        "id": "nemotron-3-nano-30b-a3b",
        "model_type": "nemotron_h", "fill": dict(_NEMOTRON3_NANO), "sources": {"fill": _NEMOTRON3_NANO_SRC},
        "published": ("31.6B", "3.6B"),
        "published_source": "NVIDIA Nemotron 3 Nano model card (3.6B active including embeddings)",
    },
    "nvidia/NVIDIA-Nemotron-3-Nano-4B-BF16": {
        "model_type": "nemotron_h",
        "fill": {"hybrid_override_pattern": "M-M-M-MM-M-M*-M-M*-M-M-M*-M-M-MM*-MMM-M-M-", "mamba_num_heads": 96,
                 "mamba_head_dim": 80, "ssm_state_size": 128, "tie_word_embeddings": False},
        "sources": {"fill": "Megatron-Bridge src/megatron/bridge/recipes/nemotronh/h100/nemotron_3_nano_4b.py::"
                            "_model_config"},
    },
    "nvidia/NVIDIA-Nemotron-3-Super-120B-A12B-BF16": {
        "skip": "latent MoE (experts run in a 1024-wide latent space): ModelCard has no moe_latent_size, "
                "so sizes and memory would be 4x off"},
    **_skip(_NOT_PUBLIC, "nvidia/NVIDIA-Nemotron-3-Ultra-550B-A55B-BF16",
            "nvidia/Nemotron-3-Nano-Omni-30B-A3B-Reasoning-BF16"),
    "nvidia/NVIDIA-Nemotron-3.5-Lightning-30B-A3B-BF16": {
        "id": "nemotron-3-5-lightning-30b-a3b",
        "model_type": "nemotron_h",
        "fill": {"num_hidden_layers": 52, "hidden_size": 2688, "intermediate_size": 1856, "num_attention_heads": 32,
                 "num_key_value_heads": 2, "head_dim": 128, "n_routed_experts": 128, "num_experts_per_tok": 6,
                 "moe_intermediate_size": 1856, "moe_shared_expert_intermediate_size": 3712, "n_shared_experts": 1,
                 **_NEMOTRON3_NANO},
        "sources": {"fill": "public config of nvidia/NVIDIA-Nemotron-3.5-Lightning-30B-A3B (same layer list, "
                            "sizes and experts as Nemotron 3 Nano 30B-A3B, plus one MTP layer); "
                            + _NEMOTRON3_NANO_SRC},
    },
    "nvidia/NVIDIA-Nemotron-Nano-12B-v2-Base": _NEMOTRON_NANO_12B_V2,
    "nvidia/NVIDIA-Nemotron-Nano-12B-v2-VL-BF16": {
        **_NEMOTRON_NANO_12B_V2,
        "sources": {"fill": "language model of Nemotron Nano 12B v2: "
                            + _NEMOTRONH_SRC.format("NemotronNanoModelProvider12Bv2")},
    },
    "nvidia/NVIDIA-Nemotron-Nano-9B-v2-Base": _nemotron_h(
        "NemotronNanoModelProvider9Bv2", "M-M-M-MM-M-M-M*-M-M-M*-M-M-M-M*-M-M-M-M*-M-MM-M-M-M-M-M-",
        context=131072, mamba_heads=128, mamba_head_dim=80, state=128),
    "nvidia/Nemotron-H-4B-Base-8K": _nemotron_h(
        "NemotronHModelProvider4B", "M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M-",
        context=8192, mamba_heads=112, mamba_head_dim=64, state=128),
    "nvidia/Nemotron-H-8B-Base-8K": _nemotron_h(
        "NemotronHModelProvider8B", "M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M-",
        context=8192, mamba_heads=128, mamba_head_dim=64, state=128, head_dim=128),
    "nvidia/Nemotron-H-47B-Base-8K": _nemotron_h(
        "NemotronHModelProvider47B",
        "M-M-M-M-M-M-M-M-M*-M-M-M-M-M-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M-M-M---MM---M-M*-M-M-M-M-M-",
        context=8192, mamba_heads=256, mamba_head_dim=64, state=256, head_dim=128),
    "nvidia/Nemotron-H-56B-Base-8K": _nemotron_h(
        "NemotronHModelProvider56B",
        "M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-"
        "M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M-",
        context=8192, mamba_heads=256, mamba_head_dim=64, state=256, head_dim=128),
    **_complete("olmoe", "allenai/OLMoE-1B-7B-0924"),
    **_public_config("qwen2", {"tie_word_embeddings": True, "rope_theta": 1000000.0},
                     "Qwen/Qwen2-0.5B", "Qwen/Qwen2-1.5B", "Qwen/Qwen2.5-0.5B", "Qwen/Qwen2.5-1.5B"),
    **_complete("qwen2", "Qwen/Qwen2-72B", "Qwen/Qwen2-7B", "Qwen/Qwen2.5-14B", "Qwen/Qwen2.5-32B",
                "Qwen/Qwen2.5-72B", "Qwen/Qwen2.5-7B"),
    **_skip("audio-language model; text tower values not in the reference", "Qwen/Qwen2-Audio-7B-Instruct"),
    **_qwen25_vl(),
    **_complete("qwen3_moe", "Qwen/Qwen3-235B-A22B", "Qwen/Qwen3-30B-A3B"),
    **_public_config("qwen3", {"tie_word_embeddings": True, "max_position_embeddings": 40960},
                     "Qwen/Qwen3-0.6B", "Qwen/Qwen3-4B"),
    **_public_config("qwen3", {"tie_word_embeddings": True}, "Qwen/Qwen3-1.7B"),
    **_public_config("qwen3", {"max_position_embeddings": 40960}, "Qwen/Qwen3-14B", "Qwen/Qwen3-32B", "Qwen/Qwen3-8B"),
    **_complete("qwen3_next", "Qwen/Qwen3-Next-80B-A3B-Instruct"),
    **_skip("omni (audio/vision) model; thinker sizes not in the reference", "Qwen/Qwen3-Omni-30B-A3B-Instruct"),
    **_public_config("qwen3_vl_moe", _text_dims(94, 4096, 12288, 64, 4, 151936, False, moe_intermediate_size=1536,
                                                **_QWEN3_VL_MOE),
                     "Qwen/Qwen3-VL-235B-A22B-Instruct", note=" (text_config)"),
    **_public_config("qwen3_vl_moe", _text_dims(48, 2048, 6144, 32, 4, 151936, False, moe_intermediate_size=768,
                                                **_QWEN3_VL_MOE),
                     "Qwen/Qwen3-VL-30B-A3B-Instruct", note=" (text_config)"),
    **_public_config("qwen3_vl", _text_dims(36, 4096, 12288, 32, 8, 151936, False, head_dim=128,
                                            max_position_embeddings=262144),
                     "Qwen/Qwen3-VL-8B-Instruct", note=" (text_config)"),
    **_public_config("qwen3_5_moe", _QWEN35_MOE_35B, "Qwen/Qwen3.5-35B-A3B-Base", note=" (text_config)",
                     published=("35B", "3B"), published_source="Qwen3.5 model card"),
    **_public_config("qwen3_5_moe", _QWEN35_MOE_35B, "Qwen/Qwen3.5-35B-A3B", note=" (text_config)"),
    **_skip(_NOT_PUBLIC, "Qwen/Qwen3.5-9B-Base", "Qwen/Qwen3.5-0.8B", "Qwen/Qwen3.5-122B-A10B", "Qwen/Qwen3.5-2B",
            "Qwen/Qwen3.5-4B", "Qwen/Qwen3.5-9B"),
    "Qwen/Qwen3.5-27B": {"model_type": "qwen3_5", "fill": {"head_dim": 256, "tie_word_embeddings": False},
                         "sources": {"fill": _QWEN35_BRIDGE_FIXTURE + "; head_dim: qwen3_5 config default (256)"}},
    "Qwen/Qwen3.5-397B-A17B": {"model_type": "qwen3_5_moe", "fill": {"head_dim": 256, "tie_word_embeddings": False},
                               "sources": {"fill": _QWEN35_BRIDGE_FIXTURE + "; head_dim: qwen3_5 config default"}},
    **_skip(_NOT_PUBLIC, "stepfun-ai/Step-3.5-Flash", "stepfun-ai/Step-3.7-Flash"),
    **_skip("synthetic provider without fixed sizes", "vanilla_gpt (synthetic: GPTModelProvider in recipe)"),
}

# Tiny models for CPU runs of the bundled trainer (not in the reference).
TINY_MODELS: dict[str, dict[str, Any]] = {
    "tiny-llama": {
        "model_type": "llama", "hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
        "num_key_value_heads": 2, "head_dim": 16, "intermediate_size": 128, "vocab_size": 512,
        "max_position_embeddings": 256, "tie_word_embeddings": False, "rope_theta": 10000.0,
        "attention_bias": False, "rms_norm_eps": 1e-5, "hidden_act": "silu", "architectures": ["LlamaForCausalLM"],
    },
    # tiny-llama's shape with a long context: context-parallel runs at 8K+ tokens on CPU.
    "tiny-llama-long": {
        "model_type": "llama", "hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
        "num_key_value_heads": 2, "head_dim": 16, "intermediate_size": 128, "vocab_size": 512,
        "max_position_embeddings": 32768, "tie_word_embeddings": False, "rope_theta": 500000.0,
        "attention_bias": False, "rms_norm_eps": 1e-5, "hidden_act": "silu", "architectures": ["LlamaForCausalLM"],
    },
    "tiny-qwen3": {
        "model_type": "qwen3", "hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
        "num_key_value_heads": 2, "head_dim": 16, "intermediate_size": 128, "vocab_size": 512,
        "max_position_embeddings": 256, "tie_word_embeddings": False, "rope_theta": 1000000.0,
        "attention_bias": False, "rms_norm_eps": 1e-6, "hidden_act": "silu", "architectures": ["Qwen3ForCausalLM"],
    },
    "tiny-moe": {
        "model_type": "qwen3_moe", "hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
        "num_key_value_heads": 2, "head_dim": 16, "intermediate_size": 128, "moe_intermediate_size": 32,
        "num_experts": 8, "num_experts_per_tok": 2, "decoder_sparse_step": 1, "mlp_only_layers": [],
        "norm_topk_prob": True, "vocab_size": 512, "max_position_embeddings": 256, "tie_word_embeddings": False,
        "rope_theta": 1000000.0, "attention_bias": False, "rms_norm_eps": 1e-6, "hidden_act": "silu",
        "architectures": ["Qwen3MoeForCausalLM"],
    },
    # Qwen2-MoE's shape at tiny-moe's size: a shared expert beside 8 routed ones, top-k not renormalised.
    "tiny-qwen2-moe": {
        "model_type": "qwen2_moe", "hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
        "num_key_value_heads": 2, "head_dim": 16, "intermediate_size": 128, "moe_intermediate_size": 32,
        "shared_expert_intermediate_size": 64, "num_experts": 8, "num_experts_per_tok": 2,
        "decoder_sparse_step": 1, "mlp_only_layers": [], "norm_topk_prob": False, "vocab_size": 512,
        "max_position_embeddings": 256, "tie_word_embeddings": False, "rope_theta": 1000000.0,
        "use_sliding_window": False, "rms_norm_eps": 1e-6, "hidden_act": "silu",
        "architectures": ["Qwen2MoeForCausalLM"],
    },
    # DeepSeek-V3's shape at tiny-moe's size: MLA (query compression), layer 0 dense, then 8 routed experts in
    # 4 groups (a token may use the best 2), sigmoid scores with the selection bias, one shared expert.
    "tiny-deepseek-v3": {
        "model_type": "deepseek_v3", "hidden_size": 64, "num_hidden_layers": 3, "num_attention_heads": 4,
        "num_key_value_heads": 4, "intermediate_size": 128, "moe_intermediate_size": 32, "n_routed_experts": 8,
        "num_experts_per_tok": 2, "n_group": 4, "topk_group": 2, "n_shared_experts": 1, "first_k_dense_replace": 1,
        "routed_scaling_factor": 2.5, "norm_topk_prob": True, "q_lora_rank": 32, "kv_lora_rank": 32,
        "qk_nope_head_dim": 16, "qk_rope_head_dim": 8, "v_head_dim": 16, "rope_interleave": True,
        "vocab_size": 512, "max_position_embeddings": 256, "tie_word_embeddings": False, "rope_theta": 10000.0,
        "attention_bias": False, "rms_norm_eps": 1e-6, "hidden_act": "silu", "architectures": ["DeepseekV3ForCausalLM"],
    },
}

# Hub repos renamed after the reference recorded them: the current id finds the card too (model pages and
# `huggingface-cli download` use it).
RENAMED_HUB_IDS = {f"meta-llama/Meta-Llama-3.1-{size}": f"meta-llama/Llama-3.1-{size}"
                   for size in ("8B", "70B", "405B")}
