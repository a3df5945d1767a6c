"""`DecoderConfig`: the Llama-family decoder described in Hugging Face `config.json` terms.

Pure Python (no torch import) so the planner and validator could read it too. One dataclass covers
Llama (1/2/3/3.1 with `rope_type: llama3`), Mistral, Qwen2 (q/k/v bias) and Qwen3 (QK-norm), and the
MoE families built on them (trainer/models/moe_config.py): they differ only in flags. `from_hf` accepts
both the transformers 4.x layout (`rope_theta` + `rope_scaling`) and the 5.x one (`rope_parameters`);
`to_hf` writes both so either version loads it.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any, Optional

from trainer.contract.model_settings import (  # noqa: F401  (re-exported: the settings the decoder builds from)
    ATTN_IMPLEMENTATIONS,
    DEFAULT_MAX_POSITIONS,
    DTYPES,
    KERNEL_SETTINGS,
    KERNELS,
    LINEAR_MODULES,
)
from trainer.models.mla_config import MLA_KEYS, MLAConfig, mla_hf_keys, read_mla
from trainer.models.moe_config import MOE_ARCHITECTURES, MOE_KEYS, MoEConfig, MoEConfigError, moe_hf_keys, read_moe
from trainer.models.rope_scaling import YARN_REQUIRED_KEYS

ARCHITECTURES = {
    "llama": "LlamaForCausalLM",
    "mistral": "MistralForCausalLM",
    "qwen2": "Qwen2ForCausalLM",
    "qwen3": "Qwen3ForCausalLM",
    **MOE_ARCHITECTURES,
}
# Qwen2's attention: q/k/v bias, no o_proj bias, whatever `attention_bias` says.
QWEN2_ATTENTION = ("qwen2", "qwen2_moe")
SUPPORTED_ROPE_TYPES = ("default", "linear", "llama3", "yarn")
LLAMA3_ROPE_KEYS = ("factor", "low_freq_factor", "high_freq_factor", "original_max_position_embeddings")


class ModelConfigError(ValueError):
    """A config.json (or model card) the bundled decoder cannot build; the message says which field."""


@dataclass
class DecoderConfig:
    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: Optional[int] = None
    head_dim: Optional[int] = None
    model_type: str = "llama"
    max_position_embeddings: int = DEFAULT_MAX_POSITIONS
    rms_norm_eps: float = 1e-6
    rope_theta: float = 10000.0
    # None or {"rope_type": "linear"|"llama3", ...} exactly as Hugging Face spells it.
    rope_scaling: Optional[dict[str, Any]] = None
    tie_word_embeddings: bool = False
    # Llama/Mistral/Qwen3: bias on q, k, v and o. Qwen2 always has q/k/v bias and no o bias; Qwen2-MoE
    # too, unless its config.json sets `qkv_bias: false` (transformers 5).
    attention_bias: bool = False
    # Mistral: every layer; Qwen2/3 (`use_sliding_window`): layers >= max_window_layers.
    sliding_window: Optional[int] = None
    max_window_layers: Optional[int] = None
    hidden_act: str = "silu"
    initializer_range: float = 0.02
    bos_token_id: Optional[int] = None
    eos_token_id: Optional[Any] = None
    pad_token_id: Optional[int] = None
    torch_dtype: Optional[str] = None
    attn_implementation: str = "sdpa"
    kernels: str = "torch"
    extra: dict[str, Any] = field(default_factory=dict)  # other config.json keys, written back untouched
    moe: Optional[MoEConfig] = None  # experts, router and sparse layers (trainer/models/moe_config.py)
    mla: Optional[MLAConfig] = None  # DeepSeek-V3's latent attention (trainer/models/mla_config.py)

    def __post_init__(self) -> None:
        if self.num_key_value_heads is None:
            self.num_key_value_heads = self.num_attention_heads
        if self.head_dim is None:
            if self.hidden_size % self.num_attention_heads:
                raise ModelConfigError(
                    f"hidden_size ({self.hidden_size}) is not a multiple of num_attention_heads "
                    f"({self.num_attention_heads}); set head_dim explicitly"
                )
            self.head_dim = self.hidden_size // self.num_attention_heads
        self.validate()

    # ---- derived flags -------------------------------------------------------------------------
    @property
    def qkv_bias(self) -> bool:
        if self.model_type == "qwen2_moe":
            return bool(self.extra.get("qkv_bias", True))
        return self.model_type == "qwen2" or self.attention_bias

    @property
    def o_proj_bias(self) -> bool:
        return self.model_type not in QWEN2_ATTENTION and self.attention_bias

    @property
    def qk_norm(self) -> bool:
        return self.model_type in ("qwen3", "qwen3_moe")

    @property
    def rope_type(self) -> str:
        if not self.rope_scaling:
            return "default"
        return self.rope_scaling.get("rope_type", self.rope_scaling.get("type", "default"))

    def layer_sliding_window(self, layer_idx: int) -> Optional[int]:
        """The attention window of one layer (None = full causal attention)."""
        if self.sliding_window is None:
            return None
        if self.max_window_layers is not None and layer_idx < self.max_window_layers:
            return None
        return self.sliding_window

    def num_parameters(self) -> int:
        h, kv = self.hidden_size, self.num_key_value_heads * self.head_dim
        q = self.num_attention_heads * self.head_dim
        attn = h * q + 2 * h * kv + q * h
        attn += (q + 2 * kv) if self.qkv_bias else 0
        attn += h if self.o_proj_bias else 0
        attn += 2 * self.head_dim if self.qk_norm else 0
        if self.mla is not None:
            attn = self.mla.attention_parameters(h, self.num_attention_heads, self.attention_bias)
        block = attn + 3 * h * self.intermediate_size + 2 * h
        head = 0 if self.tie_word_embeddings else self.vocab_size * h
        layers = self.num_hidden_layers * block
        if self.moe is not None:  # MoE layers hold experts + router instead of the dense MLP
            sparse = sum(self.moe.is_moe_layer(i) for i in range(self.num_hidden_layers))
            layers += sparse * (self.moe.expert_parameters(h) - 3 * h * self.intermediate_size)
        return self.vocab_size * h + layers + h + head

    def active_parameters(self) -> int:
        """Parameters one token passes through: an MoE layer's top-k experts of its num_experts (the
        count training FLOPs follow, 6 N per token); all of them for a dense model."""
        if self.moe is None:
            return self.num_parameters()
        sparse = sum(self.moe.is_moe_layer(i) for i in range(self.num_hidden_layers))
        idle = self.moe.num_experts - self.moe.top_k
        return self.num_parameters() - sparse * idle * 3 * self.hidden_size * self.moe.expert_intermediate_size

    def validate(self) -> None:
        if self.model_type not in ARCHITECTURES:
            raise ModelConfigError(
                f"model_type {self.model_type!r} is not a decoder the bundled trainer builds; "
                f"supported: {', '.join(ARCHITECTURES)}"
            )
        if self.hidden_act != "silu":
            raise ModelConfigError(f"hidden_act {self.hidden_act!r} is not supported (SwiGLU needs 'silu')")
        if self.num_attention_heads % self.num_key_value_heads:
            raise ModelConfigError(
                f"num_attention_heads ({self.num_attention_heads}) must be a multiple of "
                f"num_key_value_heads ({self.num_key_value_heads})"
            )
        if self.head_dim % 2:
            raise ModelConfigError(f"head_dim ({self.head_dim}) must be even for rotary embeddings")
        if self.rope_type not in SUPPORTED_ROPE_TYPES:
            raise ModelConfigError(
                f"rope_scaling.rope_type {self.rope_type!r} is not supported; "
                f"supported: {', '.join(SUPPORTED_ROPE_TYPES)}"
            )
        if self.rope_type == "llama3":
            missing = [k for k in LLAMA3_ROPE_KEYS if k not in self.rope_scaling]
            if missing:
                raise ModelConfigError(f"rope_scaling (llama3) lacks {', '.join(missing)}")
        if self.rope_type == "linear" and "factor" not in self.rope_scaling:
            raise ModelConfigError("rope_scaling (linear) lacks factor")
        if self.rope_type == "yarn":
            missing = [k for k in YARN_REQUIRED_KEYS if self.rope_scaling.get(k) is None]
            if missing:
                raise ModelConfigError(f"rope_scaling (yarn) lacks {', '.join(missing)}")
        if self.attn_implementation not in ATTN_IMPLEMENTATIONS:
            raise ModelConfigError(
                f"attn_implementation {self.attn_implementation!r} is not one of {', '.join(ATTN_IMPLEMENTATIONS)}"
            )
        if self.kernels not in KERNELS:
            raise ModelConfigError(f"kernels {self.kernels!r} is not one of {', '.join(KERNELS)}")

    # ---- Hugging Face config.json --------------------------------------------------------------
    @classmethod
    def from_hf(cls, cfg: dict[str, Any], *, attn_implementation: str = "sdpa") -> "DecoderConfig":
        """Read a Hugging Face `config.json` mapping (transformers 4.x or 5.x layout)."""
        cfg = dict(cfg)
        model_type = cfg.get("model_type")
        if model_type is None:
            raise ModelConfigError("config.json has no model_type")
        try:
            moe, mla = read_moe(cfg), read_mla(cfg)
        except MoEConfigError as err:
            raise ModelConfigError(str(err)) from None
        if cfg.get("mlp_bias"):
            raise ModelConfigError("mlp_bias: true is not supported by the bundled trainer")
        required = ("vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads")
        missing = [k for k in required if cfg.get(k) is None]
        if missing:
            raise ModelConfigError(f"config.json lacks {', '.join(missing)}")

        rope_theta, rope_scaling = _read_rope(cfg)
        sliding_window, max_window_layers = None, None
        if model_type in ("mistral", "mixtral"):
            sliding_window = cfg.get("sliding_window")
        elif model_type in ("qwen2", "qwen3", "qwen3_moe") and cfg.get("use_sliding_window"):
            sliding_window = cfg.get("sliding_window")
            max_window_layers = cfg.get("max_window_layers")
        elif model_type == "qwen2_moe" and cfg.get("use_sliding_window"):
            # transformers slides the even layers below max_window_layers there, unlike Qwen2's top layers.
            raise ModelConfigError("use_sliding_window: true is not supported for qwen2_moe by the bundled trainer "
                                   "(full attention only); set it to false")

        known = {f.name for f in fields(cls)}
        consumed = known | {"rope_parameters", "architectures", "use_sliding_window", "dtype", "transformers_version"}
        consumed |= set(MOE_KEYS) if moe is not None else set()
        consumed |= set(MLA_KEYS) if mla is not None else set()
        kwargs = {k: cfg[k] for k in known if k in cfg and k not in ("extra", "attn_implementation", "kernels", "moe",
                                                                    "mla")}
        kwargs.update(
            model_type=model_type,
            rope_theta=rope_theta,
            rope_scaling=rope_scaling,
            sliding_window=sliding_window,
            max_window_layers=max_window_layers,
            torch_dtype=cfg.get("torch_dtype") or cfg.get("dtype"),
            attn_implementation=attn_implementation,
            extra={k: v for k, v in cfg.items() if k not in consumed},
            moe=moe,
            mla=mla,
        )
        if mla is not None:  # the rotary width, as transformers' DeepseekV3Config sets head_dim
            kwargs["head_dim"] = mla.qk_rope_head_dim
        if kwargs.get("head_dim") is None:
            kwargs.pop("head_dim", None)
        return cls(**kwargs)

    @classmethod
    def from_file(cls, path: str | Path, **kwargs: Any) -> "DecoderConfig":
        path = Path(path)
        if path.is_dir():
            path = path / "config.json"
        try:
            data = json.loads(path.read_text())
        except FileNotFoundError:
            raise ModelConfigError(f"{path}: no such file; point at a model folder holding config.json") from None
        except json.JSONDecodeError as err:
            raise ModelConfigError(f"{path}:{err.lineno}: not valid JSON ({err.msg})") from None
        try:
            return cls.from_hf(data, **kwargs)
        except ModelConfigError as err:
            raise ModelConfigError(f"{path}: {err}") from None

    @classmethod
    def from_card(cls, card: Any, **kwargs: Any) -> "DecoderConfig":
        """Build from a `recipe_index.cards.ModelCard` (the normalised view of a config.json)."""
        if getattr(card, "architecture", "dense") != "dense":
            raise ModelConfigError(
                f"{card.id}: architecture {card.architecture!r} is not supported by the bundled trainer "
                "(dense decoders only)"
            )
        rope_scaling = dict(card.rope_scaling) if card.rope_scaling else None
        cfg = {
            "model_type": card.model_type or "llama",
            "vocab_size": card.vocab_size,
            "hidden_size": card.hidden_size,
            "intermediate_size": card.intermediate_size,
            "num_hidden_layers": card.num_hidden_layers,
            "num_attention_heads": card.num_attention_heads,
            "num_key_value_heads": card.num_key_value_heads,
            "head_dim": card.head_dim,
            "max_position_embeddings": card.max_position_embeddings or DEFAULT_MAX_POSITIONS,
            "rms_norm_eps": card.rms_norm_eps,
            "rope_theta": card.rope_theta or 10000.0,
            "rope_scaling": rope_scaling,
            "tie_word_embeddings": card.tie_word_embeddings,
            "attention_bias": card.attention_bias if card.model_type != "qwen2" else False,
            "hidden_act": card.hidden_act,
        }
        try:
            return cls.from_hf(cfg, **kwargs)
        except ModelConfigError as err:
            raise ModelConfigError(f"model card {card.id}: {err}") from None

    def to_hf(self) -> dict[str, Any]:
        """A `config.json` mapping that `transformers.AutoConfig` loads (4.x and 5.x)."""
        out: dict[str, Any] = dict(self.extra)
        out.update(
            architectures=[ARCHITECTURES[self.model_type]],
            model_type=self.model_type,
            vocab_size=self.vocab_size,
            hidden_size=self.hidden_size,
            intermediate_size=self.intermediate_size,
            num_hidden_layers=self.num_hidden_layers,
            num_attention_heads=self.num_attention_heads,
            num_key_value_heads=self.num_key_value_heads,
            head_dim=self.head_dim,
            hidden_act=self.hidden_act,
            max_position_embeddings=self.max_position_embeddings,
            rms_norm_eps=self.rms_norm_eps,
            initializer_range=self.initializer_range,
            tie_word_embeddings=self.tie_word_embeddings,
            rope_theta=self.rope_theta,
            rope_scaling=dict(self.rope_scaling) if self.rope_scaling else None,
            rope_parameters={"rope_type": "default", "rope_theta": self.rope_theta, **(self.rope_scaling or {})},
            bos_token_id=self.bos_token_id,
            eos_token_id=self.eos_token_id,
            pad_token_id=self.pad_token_id,
            use_cache=True,
        )
        if self.model_type not in QWEN2_ATTENTION:
            out["attention_bias"] = self.attention_bias
        if self.model_type == "llama":
            out["mlp_bias"] = False
        if self.model_type in ("mistral", "mixtral"):
            out["sliding_window"] = self.sliding_window
        elif self.model_type in ("qwen2", "qwen3", "qwen3_moe", "qwen2_moe"):
            out["use_sliding_window"] = self.sliding_window is not None
            out["sliding_window"] = self.sliding_window
            out["max_window_layers"] = (
                self.max_window_layers if self.max_window_layers is not None else self.num_hidden_layers
            )
        if self.moe is not None:
            out.update(moe_hf_keys(self.model_type, self.moe))
        if self.mla is not None:
            out.update(mla_hf_keys(self.mla))
        if self.torch_dtype:
            out["torch_dtype"] = self.torch_dtype
            out["dtype"] = self.torch_dtype
        return out

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @property
    def is_moe(self) -> bool:
        return self.moe is not None


def _read_rope(cfg: dict[str, Any]) -> tuple[float, Optional[dict[str, Any]]]:
    """(rope_theta, rope_scaling) from either the 4.x keys or 5.x `rope_parameters`."""
    params = cfg.get("rope_parameters") or {}
    scaling = cfg.get("rope_scaling") or None
    theta = cfg.get("rope_theta") or params.get("rope_theta") or 10000.0
    if scaling is None and params.get("rope_type", params.get("type", "default")) != "default":
        scaling = params
    if scaling is not None:
        scaling = {k: v for k, v in scaling.items() if k != "rope_theta"}
        rope_type = scaling.pop("type", None)
        scaling.setdefault("rope_type", rope_type or "default")
        if scaling["rope_type"] == "default":
            scaling = None
        elif scaling["rope_type"] == "llama3":
            scaling.setdefault("original_max_position_embeddings", cfg.get("max_position_embeddings"))
        elif scaling["rope_type"] == "yarn":  # as transformers: a top-level original_max_position_embeddings wins
            original = cfg.get("original_max_position_embeddings") or scaling.get("original_max_position_embeddings")
            scaling["original_max_position_embeddings"] = original or cfg.get("max_position_embeddings")
    return float(theta), scaling
