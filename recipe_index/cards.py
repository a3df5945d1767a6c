"""Typed views of the index data: model cards and hardware cards.

A model card is a Hugging Face ``config.json`` (the bundled files under
``models/`` are exactly that, plus a few ``advisor_*`` keys), read into one
normalised shape whatever the model family calls its fields.
"""

from __future__ import annotations

from typing import Any, Mapping, Optional

from pydantic import BaseModel, ConfigDict, Field

from recipe_index._hf_names import NON_GATED_MODEL_TYPES, normalise_hf_config


class ModelCard(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)

    id: str  # bundled id, e.g. "llama3-8b"; for a local/hub config: the path or repo id
    hf_id: Optional[str] = None
    aliases: tuple[str, ...] = ()
    family: Optional[str] = None
    model_type: Optional[str] = None
    architecture: str = "dense"  # dense | moe | mla-moe | hybrid | hybrid-moe

    hidden_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    intermediate_size: int
    vocab_size: int
    max_position_embeddings: Optional[int] = None
    tie_word_embeddings: bool = False
    rope_theta: Optional[float] = None
    rope_scaling: Optional[dict[str, Any]] = None
    attention_bias: bool = False
    qk_norm: bool = False
    rms_norm_eps: float = 1e-6
    hidden_act: str = "silu"

    # MoE (0 experts = dense)
    num_experts: int = 0
    num_experts_per_tok: int = 0
    moe_intermediate_size: Optional[int] = None
    num_shared_experts: int = 0
    shared_expert_intermediate_size: Optional[int] = None
    first_k_dense: int = 0

    # MLA (DeepSeek-style latent attention)
    q_lora_rank: Optional[int] = None
    kv_lora_rank: Optional[int] = None
    qk_rope_head_dim: Optional[int] = None
    qk_nope_head_dim: Optional[int] = None
    v_head_dim: Optional[int] = None

    # Hybrid Mamba-Transformer
    hybrid_layer_pattern: Optional[str] = None
    mamba_num_heads: Optional[int] = None
    mamba_head_dim: Optional[int] = None
    mamba_state_dim: Optional[int] = None

    published_total_params: Optional[str] = None
    published_active_params: Optional[str] = None
    sources: dict[str, str] = Field(default_factory=dict)

    # What a config.json outside the index says of itself, for choosing a stand-in recipe and naming the
    # config built from it; not part of the card's published fields (excluded from its JSON).
    name_or_path: Optional[str] = Field(default=None, exclude=True)  # config.json's `_name_or_path`
    vision_language: bool = Field(default=False, exclude=True)  # the config has a vision tower

    @property
    def is_moe(self) -> bool:
        return self.num_experts > 0

    @property
    def uses_mla(self) -> bool:
        return self.kv_lora_rank is not None

    @property
    def is_hybrid(self) -> bool:
        return self.hybrid_layer_pattern is not None

    @property
    def gated_mlp(self) -> bool:
        """SwiGLU/GeGLU (gate, up, down) rather than a plain two-matrix MLP.

        Plain MLPs: GPT-2/GPT-3 (GELU) and Nemotron-H / Nemotron (squared ReLU).
        """
        return self.model_type not in NON_GATED_MODEL_TYPES

    @property
    def shared_expert_ffn_total(self) -> int:
        """FFN width of all shared experts of one MoE layer together.

        Qwen-style configs give ``shared_expert_intermediate_size`` as the total; DeepSeek-style
        configs give ``n_shared_experts`` copies of ``moe_intermediate_size``.
        """
        if self.shared_expert_intermediate_size:
            return self.shared_expert_intermediate_size
        return self.num_shared_experts * (self.moe_intermediate_size or self.intermediate_size)

    @classmethod
    def from_hf_config(cls, cfg: Mapping[str, Any], id: str) -> "ModelCard":
        """Read a Hugging Face ``config.json`` mapping (any family's field names) into a card.

        Raises pydantic.ValidationError when a core dimension is missing; ``resolve_model``
        turns that into a ``ModelConfigError`` naming the fields.
        """
        return cls.model_validate(normalise_hf_config(cfg, id))


class HardwareCard(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)

    name: str
    aliases: tuple[str, ...] = ()
    description: str = ""
    arch: str  # ampere | ada | hopper | blackwell | cpu
    memory_gib: float
    bf16_tflops: float  # dense, no sparsity
    fp8_tflops: Optional[float] = None
    fp4_tflops: Optional[float] = None
    hbm_tbps: float
    nvlink_domain: int  # GPUs that share one NVLink/NVSwitch domain
    gpus_per_node: int
    intra_node_gbps: float  # GB/s per GPU, one direction, inside the NVLink domain
    inter_node_gbps: float  # GB/s per GPU, one direction, across nodes (IB/RoCE)
    sources: dict[str, str] = Field(default_factory=dict)

    @property
    def supports_fp8(self) -> bool:
        return self.fp8_tflops is not None

    @property
    def supports_fp4(self) -> bool:
        return self.fp4_tflops is not None

    def peak_tflops(self, precision: str) -> float:
        """Dense peak for a training precision; falls back to bf16 where the format has no units."""
        if precision == "nvfp4" and self.fp4_tflops:
            return self.fp4_tflops
        if precision == "fp8" and self.fp8_tflops:
            return self.fp8_tflops
        if precision == "fp32":
            # TF32 tensor cores run at half the bf16 rate on every NVIDIA part listed.
            return self.bf16_tflops / 2
        return self.bf16_tflops
