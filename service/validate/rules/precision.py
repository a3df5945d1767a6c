"""Precision rules: what the GPU's tensor cores run (FP8, blockwise FP8, MXFP8, NVFP4), Megatron Bridge's precision
tokens (the `_bf16_` / `_fp8cs_` part of a recipe name, `metadata.precision_recipe`), and what `--precision` takes
(a precision, or for fp8 Bridge's FP8 recipe token).

Sources: Transformer Engine's FP8 / blockwise FP8 / MXFP8 support checks and the hardware cards
(`recipe_index/hardware.yaml`).
"""

from __future__ import annotations

import re
from dataclasses import replace
from typing import Optional

from recipe_index import list_hardware
from service.facts import Facts
from service.validate.rules.registry import Violation, layout_rule

FP8_RECIPES = ("fp8cs", "fp8ds", "fp8mx", "fp8sc")  # Bridge tokens: current, delayed, MX block, subchannel scaling
PRECISIONS = ("bf16", "fp16", "fp32", "fp8", "nvfp4")  # trainer/contract/config.py `precision`
# What `plan`/`recommend` --precision (and the API's `precision`) take: a precision, or for fp8 the FP8 recipe.
PRECISION_CHOICES = PRECISIONS + FP8_RECIPES
PRECISION_TOKEN = re.compile(r"_(bf16|fp8cs|fp8ds|fp8mx|fp8sc|nvfp4)(?:_|$)")  # Bridge recipe names
MXFP8_ARCHS = ("blackwell", "rubin")  # Transformer Engine check_mxfp8_support: compute capability >= 10.0
# Transformer Engine check_fp8_block_scaling_support: compute capability >= 9.0 (Ada's 8.9 has no blockwise FP8).
FP8_BLOCKWISE_ARCHS = ("hopper", "blackwell", "rubin")


def split_precision(value: str) -> tuple[str, Optional[str]]:
    """(precision, FP8 recipe) of a --precision value: ``fp8mx`` -> (fp8, fp8mx), ``bf16`` -> (bf16, None)."""
    return ("fp8", value) if value in FP8_RECIPES else (value, None)


def precision_token_of(label: Optional[str], recipe_name: Optional[str]) -> Optional[str]:
    """The precision token a recipe or config trains with: its label (``metadata.precision_recipe``), else the token
    in its Bridge recipe's name (a few upstream names say bf16 for an fp8cs recipe: the label wins)."""
    match = PRECISION_TOKEN.search(recipe_name or "")
    return label or (match.group(1) if match else None)


def fp8_recipe_of(config: dict) -> Optional[str]:
    """The FP8 recipe a config (a recipe's or an advised one) runs, from its ``metadata`` labels
    (:func:`precision_token_of`); None when it names no FP8 scaling."""
    meta = config.get("metadata") if isinstance(config.get("metadata"), dict) else {}
    token = precision_token_of(meta.get("precision_recipe"), meta.get("megatron_recipe"))
    return token if token in FP8_RECIPES else None


def token_runs_on(token: Optional[str], hw) -> bool:
    """Whether a Bridge precision token's recipe (or a precision) runs on hardware ``hw`` (RA-P001..4 as a
    predicate)."""
    if token == "fp8mx":
        return hw.arch in MXFP8_ARCHS
    if token == "fp8sc":
        return hw.arch in FP8_BLOCKWISE_ARCHS
    if token in FP8_RECIPES or token == "fp8":
        return hw.supports_fp8
    return hw.supports_fp4 if token == "nvfp4" else True


def precision_of_token(token: Optional[str]) -> Optional[str]:
    """The config ``precision`` a Bridge precision token (recipe name, ``metadata.precision_recipe``)
    trains in; None for a token we do not know."""
    if token in FP8_RECIPES:
        return "fp8"
    return token if token in PRECISIONS else None


def recipe_precision(f: Facts) -> tuple[Optional[str], Optional[str]]:
    """(token, key) of the precision recipe Megatron Bridge runs: ``metadata.precision_recipe``, else
    the token in ``metadata.megatron_recipe`` (what ``run_recipe.py --recipe`` loads); (None, None).
    Only for ``strategy: megatron``: the bundled trainer reads ``precision`` and ignores the labels."""
    if f.strategy != "megatron":
        return None, None
    label = f.extra.get("precision_recipe")
    token = precision_token_of(label, f.extra.get("megatron_recipe"))
    if token is None:
        return None, None
    return token, "metadata.precision_recipe" if label else "metadata.megatron_recipe"


def _gpus_of(archs: tuple[str, ...]) -> str:
    return ", ".join(hw.name for hw in list_hardware() if hw.arch in archs)


def _precision_without_tensor_cores(f: Facts, precision: str, capability: str, cores: str,
                                    fix: str) -> Optional[Violation]:
    """A violation when the config asks for ``precision`` (in ``precision``, or in the precision recipe
    Megatron Bridge runs: ``recipe_precision``) on hardware lacking ``capability``."""
    hw = f.hardware
    token, key = recipe_precision(f)
    by_value, by_recipe = f.precision == precision, precision_of_token(token) == precision
    if not (by_value or by_recipe) or hw is None or getattr(hw, capability):
        return None
    if by_value:
        asked = f"precision {precision}" + (f" ({token})" if by_recipe and token != precision else "")
    else:
        asked = f"{key} {token if key == 'metadata.precision_recipe' else f.extra['megatron_recipe']}"
    return Violation(f"{asked} on {hw.name}, which has no {cores} tensor cores", fix,
                     key=None if by_value else key)


@layout_rule("RA-P001", "error", "precision", "FP8 needs Ada/Hopper or newer",
             "Transformer Engine FP8 needs compute capability >= 8.9")
def fp8_needs_hardware(f: Facts) -> Optional[Violation]:
    violation = _precision_without_tensor_cores(f, "fp8", "supports_fp8", "FP8", "")
    if violation is None:
        return None
    target = (f"a {_gpus_of(MXFP8_ARCHS)} GPU for MXFP8" if recipe_precision(f)[0] == "fp8mx"
              else "an H100/H200/B200-class GPU for fp8")
    if violation.key:  # raised by the Bridge label alone: `precision` is already fine, the label is not
        return replace(violation, fix=f"point {violation.key} at a bf16 recipe on this hardware, or use {target}")
    return replace(violation, fix=f"use precision: bf16 on this hardware, or {target}")


@layout_rule("RA-P002", "error", "precision", "NVFP4 needs Blackwell or newer",
             "NVFP4 tensor cores exist from Blackwell on")
def nvfp4_needs_hardware(f: Facts) -> Optional[Violation]:
    return _precision_without_tensor_cores(f, "nvfp4", "supports_fp4", "FP4",
                                           "use precision: bf16 (or fp8 on Hopper), or a B200/B300/GB200/GB300")


def _fp8_recipe_needs_arch(f: Facts, token: str, archs: tuple[str, ...], what: str, since: str) -> Optional[Violation]:
    """A violation when the FP8 recipe Bridge runs is ``token`` on an FP8 GPU outside ``archs``."""
    hw = f.hardware
    asked, key = recipe_precision(f)
    if asked != token or hw is None or hw.arch in archs:
        return None
    if not hw.supports_fp8:
        return None  # no FP8 at all: RA-P001 says so, with a fix that covers every FP8 recipe
    named = token if key == "metadata.precision_recipe" else f.extra["megatron_recipe"]
    return Violation(f"{key} {named} ({what}) on {hw.name} ({hw.arch}): its tensor-core kernels exist from {since} "
                     "on, and Transformer Engine refuses the recipe on older GPUs",
                     f"use metadata.precision_recipe: fp8cs (FP8 current scaling: Bridge's *_fp8cs recipes, "
                     f"bf16_with_fp8_current_scaling_mixed), which runs on {hw.name}, or a GPU of {_gpus_of(archs)}",
                     key=key)


@layout_rule("RA-P003", "error", "metadata.precision_recipe", "MXFP8 needs Blackwell or newer",
             "Transformer Engine check_mxfp8_support: compute capability >= 10.0, asserted when the recipe starts")
def mxfp8_needs_hardware(f: Facts) -> Optional[Violation]:
    return _fp8_recipe_needs_arch(f, "fp8mx", MXFP8_ARCHS, "MXFP8, block-scaled FP8", "Blackwell")


@layout_rule("RA-P004", "error", "metadata.precision_recipe", "blockwise FP8 needs Hopper or newer",
             "Transformer Engine check_fp8_block_scaling_support: compute capability >= 9.0")
def blockwise_fp8_needs_hardware(f: Facts) -> Optional[Violation]:
    return _fp8_recipe_needs_arch(f, "fp8sc", FP8_BLOCKWISE_ARCHS, "blockwise FP8, a scale per 128 values", "Hopper")
