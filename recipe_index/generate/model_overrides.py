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
_DSV3_MLA = {"qk_rope_head_dim": 64, "qk_nope_head_dim": 128, "v_head_dim": 128}

_NEMOTRON3_NANO = {
    "vocab_size": 131072,
    "hybrid_override_pattern": "MEMEM*EMEMEM*EMEMEM*EMEMEM*EMEMEM*EMEMEMEM*EMEMEMEME",
    "mamba_num_heads": 64,
    "mamba_head_dim": 64,
    "ssm_state_size": 128,
    "max_position_embeddings": 262144,
}
_NEMOTRON3_NANO_SRC = (
    "Megatron-Bridge src/megatron/bridge/models/nemotronh/nemotron_h_provider.py::Nemotron3NanoProvider "
    "and the public config.json of nvidia/NVIDIA-Nemotron-3-Nano-30B-A3B-BF16"
)
_NEMOTRONH_SRC = "Megatron-Bridge src/megatron/bridge/models/nemotronh/nemotron_h_provider.py::{}"
_QWEN35_MOE_35B = {
    "num_hidden_layers": 40,
    "hidden_size": 2048,
    "intermediate_size": 512,
    "num_attention_heads": 16,
    "num_key_value_heads": 2,
    "head_dim": 256,
    "vocab_size": 248320,
    "max_position_embeddings": 262144,
    "num_experts": 256,
    "num_experts_per_tok": 8,
    "moe_intermediate_size": 512,
    "shared_expert_intermediate_size": 512,
    "tie_word_embeddings": False,
}
_QWEN3_VL_30B = {
    "num_hidden_layers": 48, "hidden_size": 2048, "intermediate_size": 6144, "num_attention_heads": 32,
    "num_key_value_heads": 4, "head_dim": 128, "vocab_size": 151936, "max_position_embeddings": 262144,
    "num_experts": 128, "num_experts_per_tok": 8, "moe_intermediate_size": 768, "tie_word_embeddings": False,
}
_QWEN3_VL_235B = {
    "num_hidden_layers": 94, "hidden_size": 4096, "intermediate_size": 12288, "num_attention_heads": 64,
    "num_key_value_heads": 4, "head_dim": 128, "vocab_size": 151936, "max_position_embeddings": 262144,
    "num_experts": 128, "num_experts_per_tok": 8, "moe_intermediate_size": 1536, "tie_word_embeddings": False,
}
_LLAMA31_ROPE = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                 "original_max_position_embeddings": 8192}
_LLAMA32_ROPE = {**_LLAMA31_ROPE, "factor": 32.0}

_NOT_PUBLIC = "architecture values not stated in the reference nor in a public config we could check"

OVERRIDES: dict[str, dict[str, Any]] = {
    "deepseek-ai/DeepSeek-V2": {
        "model_type": "deepseek_v2",
        "fill": {"num_attention_heads": 128, "num_key_value_heads": 128, "q_lora_rank": 1536, "kv_lora_rank": 512,
                 **_DSV3_MLA, "max_position_embeddings": 163840},
        "sources": {"fill": _HF.format("deepseek-ai/DeepSeek-V2")},
    },
    "deepseek-ai/DeepSeek-V2-Lite": {
        "model_type": "deepseek_v2",
        "fill": {"num_key_value_heads": 16, "kv_lora_rank": 512, **_DSV3_MLA, "max_position_embeddings": 163840},
        "sources": {"fill": _HF.format("deepseek-ai/DeepSeek-V2-Lite") + " (q_lora_rank null: no q compression)"},
    },
    "deepseek-ai/DeepSeek-V3": {
        "model_type": "deepseek_v3",
        "fill": dict(_DSV3_MLA),
        "sources": {"fill": _HF.format("deepseek-ai/DeepSeek-V3")},
    },
    "deepseek-ai/DeepSeek-V4-Flash": {"skip": _NOT_PUBLIC},
    "deepseek-ai/DeepSeek-V4-Pro": {"skip": _NOT_PUBLIC},
    "LGAI-EXAONE/EXAONE-4.0-1.2B": {
        "model_type": "exaone4",
        "fill": {"num_hidden_layers": 30, "hidden_size": 2048, "intermediate_size": 4096, "num_attention_heads": 32,
                 "num_key_value_heads": 8, "head_dim": 64, "vocab_size": 102400, "max_position_embeddings": 65536,
                 "rope_theta": 1000000.0, "tie_word_embeddings": True},
        "sources": {"fill": _HF.format("LGAI-EXAONE/EXAONE-4.0-1.2B")
                    + "; tied embeddings: the published 1.28B total only adds up with them"},
    },
    "LGAI-EXAONE/EXAONE-4.5-33B": {"skip": _NOT_PUBLIC},
    "LGAI-EXAONE/K-EXAONE-2.0-750B-A37B": {"skip": _NOT_PUBLIC},
    "LGAI-EXAONE/K-EXAONE-236B-A23B": {"skip": _NOT_PUBLIC},
    "black-forest-labs/FLUX.1-dev": {"skip": "diffusion model, not a causal language model"},
    "zai-org/GLM-4.5": {"model_type": "glm4_moe", "fill": {"attention_bias": True},
                        "sources": {"fill": _HF.format("zai-org/GLM-4.5")}},
    "zai-org/GLM-4.5-Air": {"model_type": "glm4_moe", "fill": {"attention_bias": True},
                            "sources": {"fill": _HF.format("zai-org/GLM-4.5-Air")}},
    "zai-org/GLM-4.5V": {"model_type": "glm4v_moe", "fill": {"attention_bias": True},
                         "sources": {"fill": _HF.format("zai-org/GLM-4.5V") + " (text_config)"}},
    "zai-org/GLM-5.1": {"skip": _NOT_PUBLIC + " (hidden size, MLA ranks, vocab)"},
    "zai-org/GLM-5.2": {"skip": _NOT_PUBLIC + " (hidden size, MLA ranks, vocab)"},
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
    "openai/gpt-oss-120b": {
        "model_type": "gpt_oss",
        "fill": {"max_position_embeddings": 131072, "attention_bias": True, "tie_word_embeddings": False},
        "sources": {"fill": _HF.format("openai/gpt-oss-120b")},
        "published": ("116.8B", "5.1B"),
        "published_source": "OpenAI gpt-oss model card",
    },
    "openai/gpt-oss-20b": {
        "model_type": "gpt_oss",
        "fill": {"max_position_embeddings": 131072, "attention_bias": True, "tie_word_embeddings": False},
        "sources": {"fill": _HF.format("openai/gpt-oss-20b")},
        "published": ("20.9B", "3.6B"),
        "published_source": "OpenAI gpt-oss model card",
    },
    "google/gemma-2-27b": {"model_type": "gemma2", "fill": {"max_position_embeddings": 8192},
                           "sources": {"fill": _HF.format("google/gemma-2-27b")}},
    "google/gemma-2-2b": {"model_type": "gemma2", "fill": {"max_position_embeddings": 8192},
                          "sources": {"fill": _HF.format("google/gemma-2-2b")}},
    "google/gemma-2-9b": {"model_type": "gemma2"},
    "google/gemma-3-1b-pt": {"model_type": "gemma3_text"},
    "google/gemma-3-12b-it": {"model_type": "gemma3", "fill": {"max_position_embeddings": 131072},
                              "sources": {"fill": _HF.format("google/gemma-3-12b-it") + " (text_config)"}},
    "google/gemma-3-27b-it": {"model_type": "gemma3"},
    "google/gemma-3-4b-it": {"model_type": "gemma3"},
    "google/gemma-4-E4B-it": {"skip": _NOT_PUBLIC},
    "google/gemma-4-26B-A4B-it": {"skip": _NOT_PUBLIC},
    "moonshotai/Kimi-K2-Instruct": {
        "model_type": "kimi_k2",
        "fill": {"num_key_value_heads": 64, **_DSV3_MLA, "max_position_embeddings": 131072},
        "sources": {"fill": _HF.format("moonshotai/Kimi-K2-Instruct")},
        "published": ("1T", "32B"),
        "published_source": "Kimi K2 model card",
    },
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
    "meta-llama/Llama-2-7b-hf": {"model_type": "llama", "fill": {"rope_theta": 10000.0},
                                 "sources": {"fill": _HF.format("meta-llama/Llama-2-7b-hf")},
                                 "published": ("6.74B", "6.74B"),
                                 "published_source": "parameter count of the released Llama-2-7b-hf weights"},
    "meta-llama/Meta-Llama-3-70B": {"model_type": "llama", "fill": {"rope_theta": 500000.0},
                                    "sources": {"fill": _HF.format("meta-llama/Meta-Llama-3-70B")},
                                    "published": ("70.6B", "70.6B"), "published_source": "Llama 3 model card"},
    "meta-llama/Meta-Llama-3-8B": {"model_type": "llama", "fill": {"rope_theta": 500000.0},
                                   "sources": {"fill": _HF.format("meta-llama/Meta-Llama-3-8B")},
                                   "published": ("8.03B", "8.03B"), "published_source": "Llama 3 model card"},
    "meta-llama/Meta-Llama-3.1-405B": {"model_type": "llama",
                                       "fill": {"rope_theta": 500000.0, "rope_scaling": _LLAMA31_ROPE},
                                       "sources": {"fill": _HF.format("meta-llama/Meta-Llama-3.1-405B")},
                                       "published": ("405B", "405B"), "published_source": "Llama 3.1 model card"},
    "meta-llama/Meta-Llama-3.1-70B": {"model_type": "llama",
                                      "fill": {"rope_theta": 500000.0, "rope_scaling": _LLAMA31_ROPE},
                                      "sources": {"fill": _HF.format("meta-llama/Meta-Llama-3.1-70B")}},
    "meta-llama/Meta-Llama-3.1-8B": {"model_type": "llama",
                                     "fill": {"rope_theta": 500000.0, "rope_scaling": _LLAMA31_ROPE},
                                     "sources": {"fill": _HF.format("meta-llama/Meta-Llama-3.1-8B")}},
    "meta-llama/Llama-3.2-1B": {"model_type": "llama",
                                "fill": {"rope_theta": 500000.0, "rope_scaling": _LLAMA32_ROPE,
                                         "tie_word_embeddings": True},
                                "sources": {"fill": _HF.format("meta-llama/Llama-3.2-1B")},
                                "published": ("1.23B", "1.23B"), "published_source": "Llama 3.2 model card"},
    "meta-llama/Llama-3.2-3B": {"model_type": "llama",
                                "fill": {"rope_theta": 500000.0, "rope_scaling": _LLAMA32_ROPE,
                                         "tie_word_embeddings": True},
                                "sources": {"fill": _HF.format("meta-llama/Llama-3.2-3B")},
                                "published": ("3.21B", "3.21B"), "published_source": "Llama 3.2 model card"},
    "MiniMaxAI/MiniMax-M3": {"skip": _NOT_PUBLIC + " (FFN and expert widths, vocab)"},
    "mistralai/Ministral-3-14B-Instruct-2512": {
        "model_type": "mistral3", "fill": {"vocab_size": 131072, "max_position_embeddings": 262144},
        "sources": {"fill": _HF.format("mistralai/Ministral-3-14B-Instruct-2512") + " (text_config)"}},
    "mistralai/Ministral-3-3B-Instruct-2512": {
        "model_type": "mistral3", "fill": {"vocab_size": 131072, "max_position_embeddings": 262144},
        "sources": {"fill": _HF.format("mistralai/Ministral-3-3B-Instruct-2512") + " (text_config)"}},
    "mistralai/Ministral-3-8B-Instruct-2512": {
        "model_type": "mistral3", "fill": {"vocab_size": 131072, "max_position_embeddings": 262144},
        "sources": {"fill": _HF.format("mistralai/Ministral-3-8B-Instruct-2512") + " (text_config)"}},
    "moonshotai/Moonlight-16B-A3B": {
        "model_type": "deepseek_v3",
        "fill": {"num_key_value_heads": 16, "kv_lora_rank": 512, **_DSV3_MLA, "max_position_embeddings": 8192},
        "sources": {"fill": _HF.format("moonshotai/Moonlight-16B-A3B") + " (q_lora_rank null)"},
    },
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
    "nvidia/NVIDIA-Nemotron-3-Ultra-550B-A55B-BF16": {"skip": _NOT_PUBLIC},
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
    "mistralai/Ministral-3-14B-Base-2512": {"skip": "Nemotron Labs diffusion LM (dLLM) recipe base"},
    "mistralai/Ministral-3-3B-Base-2512": {"skip": "Nemotron Labs diffusion LM (dLLM) recipe base"},
    "mistralai/Ministral-3-8B-Base-2512": {"skip": "Nemotron Labs diffusion LM (dLLM) recipe base"},
    "nemotron_labs_diffusion (user-supplied provider)": {"skip": "diffusion LM with a user-supplied provider"},
    "nvidia/NVIDIA-Nemotron-Nano-12B-v2-Base": {
        "model_type": "nemotron_h",
        "fill": {"vocab_size": 131072, "max_position_embeddings": 131072, "mamba_num_heads": 128,
                 "mamba_head_dim": 80, "ssm_state_size": 128,
                 "hybrid_override_pattern": "M-M-M-M*-M-M-M-M*-M-M-M-M*-M-M-M-M*-M-M-M-M*-M-M-M-M*-M-M-M-M-"},
        "sources": {"fill": _NEMOTRONH_SRC.format("NemotronNanoModelProvider12Bv2") + "; vocab: public config"},
    },
    "nvidia/NVIDIA-Nemotron-Nano-9B-v2-Base": {
        "model_type": "nemotron_h",
        "fill": {"vocab_size": 131072, "max_position_embeddings": 131072, "mamba_num_heads": 128,
                 "mamba_head_dim": 80, "ssm_state_size": 128,
                 "hybrid_override_pattern": "M-M-M-MM-M-M-M*-M-M-M*-M-M-M-M*-M-M-M-M*-M-MM-M-M-M-M-M-"},
        "sources": {"fill": _NEMOTRONH_SRC.format("NemotronNanoModelProvider9Bv2") + "; vocab: public config"},
    },
    "nvidia/NVIDIA-Nemotron-Nano-12B-v2-VL-BF16": {
        "model_type": "nemotron_h",
        "fill": {"vocab_size": 131072, "max_position_embeddings": 131072, "mamba_num_heads": 128,
                 "mamba_head_dim": 80, "ssm_state_size": 128,
                 "hybrid_override_pattern": "M-M-M-M*-M-M-M-M*-M-M-M-M*-M-M-M-M*-M-M-M-M*-M-M-M-M*-M-M-M-M-"},
        "sources": {"fill": "language model of Nemotron Nano 12B v2: "
                            + _NEMOTRONH_SRC.format("NemotronNanoModelProvider12Bv2")},
    },
    "nvidia/Nemotron-3-Nano-Omni-30B-A3B-Reasoning-BF16": {"skip": _NOT_PUBLIC},
    "nvidia/Nemotron-H-47B-Base-8K": {
        "model_type": "nemotron_h",
        "fill": {"head_dim": 128, "vocab_size": 131072, "max_position_embeddings": 8192, "mamba_num_heads": 256,
                 "mamba_head_dim": 64, "ssm_state_size": 256,
                 "hybrid_override_pattern": "M-M-M-M-M-M-M-M-M*-M-M-M-M-M-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-"
                                            "M-M-M-M-M-M-M---MM---M-M*-M-M-M-M-M-"},
        "sources": {"fill": _NEMOTRONH_SRC.format("NemotronHModelProvider47B") + "; vocab: public config"},
    },
    "nvidia/Nemotron-H-4B-Base-8K": {
        "model_type": "nemotron_h",
        "fill": {"vocab_size": 131072, "max_position_embeddings": 8192, "mamba_num_heads": 112,
                 "mamba_head_dim": 64, "ssm_state_size": 128,
                 "hybrid_override_pattern": "M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M-"},
        "sources": {"fill": _NEMOTRONH_SRC.format("NemotronHModelProvider4B") + "; vocab: public config"},
    },
    "nvidia/Nemotron-H-56B-Base-8K": {
        "model_type": "nemotron_h",
        "fill": {"head_dim": 128, "vocab_size": 131072, "max_position_embeddings": 8192, "mamba_num_heads": 256,
                 "mamba_head_dim": 64, "ssm_state_size": 256,
                 "hybrid_override_pattern": "M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-"
                                            "M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M-"},
        "sources": {"fill": _NEMOTRONH_SRC.format("NemotronHModelProvider56B") + "; vocab: public config"},
    },
    "nvidia/Nemotron-H-8B-Base-8K": {
        "model_type": "nemotron_h",
        "fill": {"head_dim": 128, "vocab_size": 131072, "max_position_embeddings": 8192, "mamba_num_heads": 128,
                 "mamba_head_dim": 64, "ssm_state_size": 128,
                 "hybrid_override_pattern": "M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M-"},
        "sources": {"fill": _NEMOTRONH_SRC.format("NemotronHModelProvider8B") + "; vocab: public config"},
    },
    "allenai/OLMoE-1B-7B-0924": {"model_type": "olmoe"},
    "Qwen/Qwen2-0.5B": {"model_type": "qwen2", "fill": {"tie_word_embeddings": True, "rope_theta": 1000000.0},
                        "sources": {"fill": _HF.format("Qwen/Qwen2-0.5B")}},
    "Qwen/Qwen2-1.5B": {"model_type": "qwen2", "fill": {"tie_word_embeddings": True, "rope_theta": 1000000.0},
                        "sources": {"fill": _HF.format("Qwen/Qwen2-1.5B")}},
    "Qwen/Qwen2-72B": {"model_type": "qwen2"},
    "Qwen/Qwen2-7B": {"model_type": "qwen2"},
    "Qwen/Qwen2-Audio-7B-Instruct": {"skip": "audio-language model; text tower values not in the reference"},
    "Qwen/Qwen2.5-0.5B": {"model_type": "qwen2", "fill": {"tie_word_embeddings": True, "rope_theta": 1000000.0},
                          "sources": {"fill": _HF.format("Qwen/Qwen2.5-0.5B")}},
    "Qwen/Qwen2.5-1.5B": {"model_type": "qwen2", "fill": {"tie_word_embeddings": True, "rope_theta": 1000000.0},
                          "sources": {"fill": _HF.format("Qwen/Qwen2.5-1.5B")}},
    "Qwen/Qwen2.5-14B": {"model_type": "qwen2"},
    "Qwen/Qwen2.5-32B": {"model_type": "qwen2"},
    "Qwen/Qwen2.5-72B": {"model_type": "qwen2"},
    "Qwen/Qwen2.5-7B": {"model_type": "qwen2"},
    "Qwen/Qwen2.5-VL-32B-Instruct": {
        "model_type": "qwen2_5_vl",
        "fill": {"num_hidden_layers": 64, "hidden_size": 5120, "intermediate_size": 27648, "num_attention_heads": 40,
                 "num_key_value_heads": 8, "vocab_size": 152064, "max_position_embeddings": 128000,
                 "tie_word_embeddings": False},
        "sources": {"fill": _HF.format("Qwen/Qwen2.5-VL-32B-Instruct") + " (language model)"}},
    "Qwen/Qwen2.5-VL-3B-Instruct": {
        "model_type": "qwen2_5_vl",
        "fill": {"num_hidden_layers": 36, "hidden_size": 2048, "intermediate_size": 11008, "num_attention_heads": 16,
                 "num_key_value_heads": 2, "vocab_size": 151936, "max_position_embeddings": 128000,
                 "tie_word_embeddings": True},
        "sources": {"fill": _HF.format("Qwen/Qwen2.5-VL-3B-Instruct") + " (language model)"}},
    "Qwen/Qwen2.5-VL-72B-Instruct": {
        "model_type": "qwen2_5_vl",
        "fill": {"num_hidden_layers": 80, "hidden_size": 8192, "intermediate_size": 29568, "num_attention_heads": 64,
                 "num_key_value_heads": 8, "vocab_size": 152064, "max_position_embeddings": 128000,
                 "tie_word_embeddings": False},
        "sources": {"fill": _HF.format("Qwen/Qwen2.5-VL-72B-Instruct") + " (language model)"}},
    "Qwen/Qwen2.5-VL-7B-Instruct": {
        "model_type": "qwen2_5_vl",
        "fill": {"num_hidden_layers": 28, "hidden_size": 3584, "intermediate_size": 18944, "num_attention_heads": 28,
                 "num_key_value_heads": 4, "vocab_size": 152064, "max_position_embeddings": 128000,
                 "tie_word_embeddings": False},
        "sources": {"fill": _HF.format("Qwen/Qwen2.5-VL-7B-Instruct") + " (language model)"}},
    "Qwen/Qwen3-235B-A22B": {"model_type": "qwen3_moe"},
    "Qwen/Qwen3-30B-A3B": {"model_type": "qwen3_moe"},
    "Qwen/Qwen3-0.6B": {"model_type": "qwen3", "fill": {"tie_word_embeddings": True, "max_position_embeddings": 40960},
                        "sources": {"fill": _HF.format("Qwen/Qwen3-0.6B")}},
    "Qwen/Qwen3-1.7B": {"model_type": "qwen3", "fill": {"tie_word_embeddings": True},
                        "sources": {"fill": _HF.format("Qwen/Qwen3-1.7B")}},
    "Qwen/Qwen3-14B": {"model_type": "qwen3", "fill": {"max_position_embeddings": 40960},
                       "sources": {"fill": _HF.format("Qwen/Qwen3-14B")}},
    "Qwen/Qwen3-32B": {"model_type": "qwen3", "fill": {"max_position_embeddings": 40960},
                       "sources": {"fill": _HF.format("Qwen/Qwen3-32B")}},
    "Qwen/Qwen3-4B": {"model_type": "qwen3", "fill": {"tie_word_embeddings": True, "max_position_embeddings": 40960},
                      "sources": {"fill": _HF.format("Qwen/Qwen3-4B")}},
    "Qwen/Qwen3-8B": {"model_type": "qwen3", "fill": {"max_position_embeddings": 40960},
                      "sources": {"fill": _HF.format("Qwen/Qwen3-8B")}},
    "Qwen/Qwen3-Next-80B-A3B-Instruct": {"model_type": "qwen3_next"},
    "Qwen/Qwen3-Omni-30B-A3B-Instruct": {"skip": "omni (audio/vision) model; thinker sizes not in the reference"},
    "Qwen/Qwen3-VL-235B-A22B-Instruct": {
        "model_type": "qwen3_vl_moe", "fill": dict(_QWEN3_VL_235B),
        "sources": {"fill": _HF.format("Qwen/Qwen3-VL-235B-A22B-Instruct") + " (text_config)"}},
    "Qwen/Qwen3-VL-30B-A3B-Instruct": {
        "model_type": "qwen3_vl_moe", "fill": dict(_QWEN3_VL_30B),
        "sources": {"fill": _HF.format("Qwen/Qwen3-VL-30B-A3B-Instruct") + " (text_config)"}},
    "Qwen/Qwen3-VL-8B-Instruct": {
        "model_type": "qwen3_vl",
        "fill": {"num_hidden_layers": 36, "hidden_size": 4096, "intermediate_size": 12288, "num_attention_heads": 32,
                 "num_key_value_heads": 8, "head_dim": 128, "vocab_size": 151936,
                 "max_position_embeddings": 262144, "tie_word_embeddings": False},
        "sources": {"fill": _HF.format("Qwen/Qwen3-VL-8B-Instruct") + " (text_config)"}},
    "Qwen/Qwen3.5-35B-A3B-Base": {
        "model_type": "qwen3_5_moe", "fill": dict(_QWEN35_MOE_35B),
        "sources": {"fill": _HF.format("Qwen/Qwen3.5-35B-A3B-Base") + " (text_config)"},
        "published": ("35B", "3B"), "published_source": "Qwen3.5 model card"},
    "Qwen/Qwen3.5-9B-Base": {"skip": _NOT_PUBLIC},
    "Qwen/Qwen3.5-0.8B": {"skip": _NOT_PUBLIC},
    "Qwen/Qwen3.5-122B-A10B": {"skip": _NOT_PUBLIC},
    "Qwen/Qwen3.5-27B": {"model_type": "qwen3_5", "fill": {"head_dim": 256, "tie_word_embeddings": False},
                         "sources": {"fill": "Megatron-Bridge tests/unit_tests/models/qwen/test_qwen35_bridge.py "
                                             "fixture; head_dim: qwen3_5 config default (256)"}},
    "Qwen/Qwen3.5-2B": {"skip": _NOT_PUBLIC},
    "Qwen/Qwen3.5-35B-A3B": {
        "model_type": "qwen3_5_moe",
        "fill": {k: v for k, v in _QWEN35_MOE_35B.items()},
        "sources": {"fill": _HF.format("Qwen/Qwen3.5-35B-A3B") + " (text_config)"}},
    "Qwen/Qwen3.5-397B-A17B": {"model_type": "qwen3_5_moe", "fill": {"head_dim": 256, "tie_word_embeddings": False},
                               "sources": {"fill": "Megatron-Bridge tests/unit_tests/models/qwen/"
                                                   "test_qwen35_bridge.py fixture; head_dim: qwen3_5 config default"}},
    "Qwen/Qwen3.5-4B": {"skip": _NOT_PUBLIC},
    "Qwen/Qwen3.5-9B": {"skip": _NOT_PUBLIC},
    "stepfun-ai/Step-3.5-Flash": {"skip": _NOT_PUBLIC},
    "stepfun-ai/Step-3.7-Flash": {"skip": _NOT_PUBLIC},
    "vanilla_gpt (synthetic: GPTModelProvider in recipe)": {"skip": "synthetic provider without fixed sizes"},
    "wan_14b (WanModelProvider in recipe)": {"skip": "diffusion model, not a causal language model"},
    "wan_1_3b (WanModelProvider in recipe)": {"skip": "diffusion model, not a causal language model"},
}

# Tiny models for CPU runs of the bundled trainer (not in the reference).
TINY_MODELS: dict[str, dict[str, Any]] = {
    "tiny-llama": {
        "model_type": "llama", "hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
        "num_key_value_heads": 2, "head_dim": 16, "intermediate_size": 128, "vocab_size": 512,
        "max_position_embeddings": 256, "tie_word_embeddings": False, "rope_theta": 10000.0,
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
}
