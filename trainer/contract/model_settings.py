"""Names a config's `model` and `peft` sections may use on the bundled decoder. Plain data, no torch:
the schema (trainer/contract/config.py) and the launcher's pre-flight (trainer/contract/model_checks.py) read it, and
trainer.models builds from it. (trainer.models itself imports torch on import.)"""

from __future__ import annotations

from typing import Optional

ATTN_IMPLEMENTATIONS = ("sdpa", "eager")
# How RMSNorm, SwiGLU and RoPE run (trainer/fused): "torch" memory-lean autograd functions in plain
# torch, "liger" Liger's Triton kernels (CUDA), "reference" the plain module math.
KERNELS = ("torch", "liger", "reference")
# `model.kernels`: one of KERNELS, or "auto" (trainer/fused/runtime.py resolve_kernels picks per device).
KERNEL_SETTINGS = ("auto",) + KERNELS
# `model.moe_router_load_balancing_type` (Megatron's key): the Switch loss with transformers' normalisation,
# DeepSeek-V3's sequence-wise loss, or none (trainer/models/moe_balance.py).
LOAD_BALANCING_TYPES = ("aux_loss", "seq_aux_loss", "none")
# `model.dtype` spellings -> the torch.dtype attribute they name (trainer/recipes/model_io.py parse_dtype).
DTYPES = {"float32": "float32", "fp32": "float32", "bfloat16": "bfloat16", "bf16": "bfloat16",
          "float16": "float16", "fp16": "float16"}
# Leaf names of the decoder's nn.Linear modules (trainer/models/decoder.py): what `peft.target_modules`
# can name on the bundled decoder.
LINEAR_MODULES = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj", "lm_head")
# Where each linear sits in the bundled decoder (trainer/models), as dotted parts ("N" a layer index): a LoRA
# target is a suffix of one of these paths on dot boundaries, as trainer.components.peft._is_target matches it.
LINEAR_PATHS = tuple(("model", "layers", "N", "self_attn", m) for m in ("q_proj", "k_proj", "v_proj", "o_proj")) + \
    tuple(("model", "layers", "N", "mlp", m) for m in ("gate_proj", "up_proj", "down_proj")) + (("lm_head",),)
# DeepSeek-V3 (trainer/models/deepseek.py): the latent attention's projections and the shared experts' SwiGLU.
LATENT_ATTENTION_LINEARS = ("q_a_proj", "q_b_proj", "kv_a_proj_with_mqa", "kv_b_proj")
LINEAR_PATHS += tuple(("model", "layers", "N", "self_attn", m) for m in LATENT_ATTENTION_LINEARS) + \
    tuple(("model", "layers", "N", "mlp", "shared_experts", m) for m in ("gate_proj", "up_proj", "down_proj"))


def target_path(target: str) -> Optional[tuple[str, ...]]:
    """The whole path of the module a LoRA target names on the bundled decoder, a layer index where the target
    gives one, else "N" (every layer): ``self_attn.q_proj`` -> model.layers.N.self_attn.q_proj, ``layers.0.mlp.
    up_proj`` -> model.layers.0.mlp.up_proj; None when no module has that path (module names carry a layer
    index in its plain decimal form, so ``01`` or a superscript names none)."""
    parts = str(target).split(".")
    for path in LINEAR_PATHS:
        tail = path[len(path) - len(parts):] if len(parts) <= len(path) else None
        if tail and all(p == t or (p == "N" and _layer_index(t)) for p, t in zip(tail, parts)):
            return path[:len(path) - len(parts)] + tuple(parts)
    return None


def _layer_index(part: str) -> bool:
    return part.isascii() and part.isdigit() and str(int(part)) == part


# `peft.target_modules: all-linear`: every linear but the LM head (Hugging Face PEFT's spelling).
ALL_LINEAR = "all-linear"
# Hugging Face's LlamaConfig default for a config.json without `max_position_embeddings`; the decoder
# (trainer/models/config.py) and the pre-flight's sequence-length check read the same number.
DEFAULT_MAX_POSITIONS = 2048
