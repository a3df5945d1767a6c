"""Which fast path a run takes, and that each agrees with its fallback: kernels setting, fused AdamW,
compiled blocks, CPU bf16 detection, FP8 refusal off Hopper, meta-device builds without init,
and the planner-facing defaults (trainer/contract/fast_paths.py)."""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch
from torch import nn

from tests.paths import REPO
from tests.trainer.resume_cases import config_dict
from trainer.contract.config import parse_config
from trainer.contract.fast_paths import (
    CPU_COMPILE_MIN_STEPS,
    DTENSOR_FUSED_OPTIMIZERS,
    FUSED_OPTIMIZERS,
    default_fast_paths,
)
from trainer.contract.overrides import ConfigError
from trainer.contract.preflight import preflight
from trainer.distributed.parallelize import parallelize_model
from trainer.fused.runtime import (
    check_fp8,
    cpu_has_native_bf16,
    cpu_precision_warning,
    fast_optimizer_kwargs,
    fp8_module_filter,
    liger_available,
    resolve_kernels,
    resolve_loss_kernels,
)
from trainer.loss import causal_lm_loss
from trainer.models import CausalLM, build_causal_lm, init_weights
from trainer.models.builder import skip_init
from trainer.models.presets import tiny_config


def test_kernels_setting_resolves_per_device() -> None:
    assert resolve_kernels("auto", "cpu") == "torch"
    assert resolve_kernels("reference", "cpu") == "reference"
    assert resolve_kernels("auto", "cuda", compile_enabled=True) == "torch"  # inductor fuses the same ops
    assert resolve_loss_kernels("auto", "cpu") == "torch"
    assert resolve_loss_kernels("auto", "cuda") == ("liger" if liger_available() else "torch")
    assert resolve_loss_kernels("torch", "cuda") == "torch"
    with pytest.raises(ConfigError, match="model.kernels: liger runs Triton kernels on CUDA"):
        resolve_kernels("liger", "cpu")
    with pytest.raises(ConfigError, match="model.kernels: 'fast' is not one of auto, torch, liger, reference"):
        resolve_kernels("fast", "cpu")


def test_fused_optimizer_is_the_default_unless_the_config_chooses() -> None:
    assert fast_optimizer_kwargs("torch.optim.AdamW", {"lr": 1e-3}, "cpu") == {"lr": 1e-3, "fused": True}
    assert fast_optimizer_kwargs("torch.optim.AdamW", {"foreach": True}, "cpu") == {"foreach": True}
    assert fast_optimizer_kwargs("torch.optim.AdamW", {"fused": False}, "cuda") == {"fused": False}
    assert fast_optimizer_kwargs("torch.optim.RMSprop", {}, "cpu") == {}


def test_fused_adamw_matches_the_for_loop_adamw() -> None:
    params = {}
    for fused in (True, False):
        torch.manual_seed(0)
        model = nn.Sequential(nn.Linear(16, 32), nn.SiLU(), nn.Linear(32, 4))
        opt = torch.optim.AdamW(model.parameters(), lr=1e-2, betas=(0.9, 0.95), weight_decay=0.1, fused=fused,
                                foreach=False if not fused else None)
        data = torch.randn(8, 16, generator=torch.Generator().manual_seed(1))
        for _ in range(5):
            model(data).pow(2).mean().backward()
            opt.step()
            opt.zero_grad()
        params[fused] = [p.detach().clone() for p in model.parameters()]
    for a, b in zip(params[True], params[False]):
        torch.testing.assert_close(a, b, atol=1e-6, rtol=1e-5)


def _tiny_model(name: str) -> nn.Module:
    if name == "tiny-moe":  # the expert counts' host sync breaks each MoE block's graph; it still compiles
        return build_causal_lm("tiny-moe", seed=5)
    model = CausalLM(tiny_config(name))
    init_weights(model, seed=5)
    return model


@pytest.mark.parametrize("model_name", ["llama3", "tiny-moe"])
def test_compiled_blocks_match_eager(model_name: str) -> None:
    """torch.compile per block (aot_eager: the compile path without C++ codegen) against eager; for an MoE
    the gradients include the load-balancing loss's, which joins backward inside the compiled blocks."""
    results = []
    ids = torch.randint(0, 256, (2, 16), generator=torch.Generator().manual_seed(0))
    for compile_blocks in (False, True):
        torch._dynamo.reset()
        model = parallelize_model(_tiny_model(model_name), None, compile=compile_blocks, compile_backend="aot_eager")
        loss, _ = causal_lm_loss(model, ids, ids)
        loss.backward()
        results.append((loss.detach(), {n: p.grad for n, p in model.named_parameters()}))
    (eager_loss, eager_grads), (compiled_loss, compiled_grads) = results
    torch.testing.assert_close(compiled_loss, eager_loss)
    for name, grad in eager_grads.items():
        torch.testing.assert_close(compiled_grads[name], grad, atol=1e-6, rtol=1e-5, msg=name)


def test_cpu_bf16_detection_reads_the_processor_flags() -> None:
    assert cpu_has_native_bf16({"avx2", "avx512_bf16"})
    assert cpu_has_native_bf16({"amx_bf16", "amx_tile"})
    assert cpu_has_native_bf16({"fp", "asimd", "bf16"})  # Arm FEAT_BF16
    assert not cpu_has_native_bf16({"avx2", "fma", "avx512f"})
    assert cpu_precision_warning("bf16", "cpu", {"avx2"}) is not None
    assert cpu_precision_warning("bf16", "cpu", {"avx512_bf16"}) is None
    assert cpu_precision_warning("fp32", "cpu", {"avx2"}) is None
    assert cpu_precision_warning("bf16", "cuda", {"avx2"}) is None


def test_fp8_is_refused_where_it_cannot_run() -> None:
    with pytest.raises(ConfigError, match=r"precision: fp8 .* this run is on cpu\. Use precision: bf16"):
        check_fp8("cpu")
    with pytest.raises(ConfigError, match="compute capability 8.9"):
        check_fp8("cuda", (8, 0))
    with pytest.raises(ConfigError, match="tp_size: 1"):
        check_fp8("cuda", (9, 0), tp_size=2)


def test_fp8_converts_only_eligible_linears() -> None:
    assert fp8_module_filter(nn.Linear(64, 128), "model.layers.0.mlp.up_proj")
    assert not fp8_module_filter(nn.Linear(64, 128), "lm_head")
    assert not fp8_module_filter(nn.Linear(60, 128), "model.layers.0.self_attn.q_proj")
    from trainer.components.peft import LoRALinear

    assert not fp8_module_filter(LoRALinear(nn.Linear(64, 64), rank=4, alpha=8, dropout=0.0), "x.q_proj")


def test_skip_init_leaves_values_alone_and_restores_nn_init() -> None:
    original = nn.init.normal_
    with skip_init():
        layer = nn.Linear(4, 4)
        assert nn.init.normal_ is not original
    assert nn.init.normal_ is original
    with torch.no_grad():
        layer.weight.fill_(3.0)
    nn.init.normal_(layer.weight)
    assert not torch.all(layer.weight == 3.0)


def test_meta_build_does_not_import_dynamo() -> None:
    """nn.init on meta tensors imports torch._dynamo (seconds per process); the build skips it."""
    code = ("import sys, torch\nfrom trainer.models import build_causal_lm\n"
            "from trainer.components.peft import apply_lora\n"
            "m = build_causal_lm('tiny-llama', device='meta')\napply_lora(m, rank=2, alpha=4)\n"
            "assert 'torch._dynamo' not in sys.modules, 'dynamo imported'\nprint('ok')")
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120,
                         env={"HF_HUB_OFFLINE": "1", "PATH": "/usr/bin:/bin", "PYTHONPATH": str(REPO)})
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr[-2000:]


def test_default_fast_paths_per_hardware() -> None:
    hopper = default_fast_paths("h100", "hopper")
    assert hopper == {"model.attn_implementation": "sdpa", "loss_fn.chunked": "auto", "optimizer.fused": True,
                      "model.kernels": "auto", "compile.enabled": True}
    cpu = default_fast_paths("cpu", "cpu")
    assert cpu["compile.enabled"] is False and cpu["model.kernels"] == "torch" and cpu["optimizer.fused"] is True
    # Compilation pays off on CPU only over long runs.
    assert default_fast_paths("cpu", "cpu", max_steps=CPU_COMPILE_MIN_STEPS - 1)["compile.enabled"] is False
    assert default_fast_paths("cpu", "cpu", max_steps=CPU_COMPILE_MIN_STEPS)["compile.enabled"] is True
    assert default_fast_paths("h100", "hopper", max_steps=10)["compile.enabled"] is True
    assert "optimizer.fused" not in default_fast_paths("h100", "hopper", optimizer_target="torch.optim.RMSprop")
    assert "compile.enabled" not in default_fast_paths("mi300x", "cdna3")


def test_fast_paths_leave_a_custom_loss_alone() -> None:
    assert default_fast_paths("h100", "hopper", loss_target="trainer.loss.causal_lm_loss")["loss_fn.chunked"] == "auto"
    assert "loss_fn.chunked" not in default_fast_paths("h100", "hopper", loss_target="torch.nn.CrossEntropyLoss")


def test_capabilities_declare_what_exists() -> None:
    from trainer.contract.capabilities import CAPABILITIES, supports_precision
    from trainer.fused import linear_cross_entropy, ops
    from trainer.fused.runtime import KERNEL_SETTINGS

    assert set(CAPABILITIES["kernels"]) == set(KERNEL_SETTINGS)
    assert all(callable(getattr(ops, name)) for name in CAPABILITIES["fused_ops"])
    assert CAPABILITIES["fused_loss"] and callable(linear_cross_entropy.linear_cross_entropy)
    assert set(CAPABILITIES["fused_optimizers"]) == set(FUSED_OPTIMIZERS)
    # fp8: torchao float8 on compute capability 8.9+ (Ada and newer), data parallel only; never on CPU.
    assert supports_precision("fp8", "hopper") and supports_precision("fp8", "ada")
    assert not supports_precision("fp8", "ampere") and not supports_precision("fp8", "cpu")
    assert not supports_precision("fp8", None) and not supports_precision("fp8", "hopper", tp_size=2)
    assert supports_precision("bf16", "cpu") and not supports_precision("nvfp4", "blackwell")
    with pytest.raises(ConfigError, match="compute capability"):
        check_fp8("cuda", (8, 0))  # ampere: refused by the trainer, as declared
    assert check_fp8_allows("cuda", (8, 9)) and check_fp8_allows("cuda", (9, 0))


def check_fp8_allows(device_type: str, capability: tuple[int, int]) -> bool:
    """check_fp8 passes the device check (it may still ask for torchao, an optional extra)."""
    try:
        check_fp8(device_type, capability)
    except ConfigError as err:
        return "torchao" in str(err)
    return True


def test_capabilities_and_fast_paths_import_without_torch() -> None:
    code = ("import sys\nimport trainer.contract.capabilities, trainer.contract.fast_paths\n"
            "assert 'torch' not in sys.modules, 'torch imported'\nprint('ok')")
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=60,
                         env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(REPO)})
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr[-2000:]


def test_recipe_runs_the_fast_paths_by_default(tmp_path) -> None:
    """One process, no process group: the recipe picks fused kernels, fused AdamW and the fused loss."""
    from trainer.contract.config import parse_config
    from trainer.distributed.dist import DistInfo
    from trainer.recipes.train_ft import TrainFinetuneRecipe

    raw = {"model": {"pretrained_model_name_or_path": "tiny-llama"},
           "step_scheduler": {"global_batch_size": 2, "local_batch_size": 2, "max_steps": 2},
           "dataset": {"_target_": "trainer.data.MockDataset", "seq_length": 16, "num_samples": 8},
           "optimizer": {"_target_": "torch.optim.AdamW", "lr": 1e-3},
           "checkpoint": {"enabled": False, "checkpoint_dir": str(tmp_path)}, "precision": "fp32",
           "hardware": {"gpu_type": "cpu", "gpus_per_node": 1}}
    info = DistInfo(rank=0, world_size=1, local_rank=0, backend="gloo", device=torch.device("cpu"))
    recipe = TrainFinetuneRecipe(parse_config(raw), raw, info)
    recipe.setup()
    assert recipe.model_config.kernels == "torch"
    assert recipe.optimizer.defaults["fused"] is True
    recipe.run_train_validation_loop()
    assert (tmp_path / "training.jsonl").read_text().count("\n") == 2
    raw["precision"] = "fp8"
    with pytest.raises(ConfigError, match="precision: fp8"):
        TrainFinetuneRecipe(parse_config(raw), raw, info).setup()


def test_dtensor_fused_optimizers_are_the_ones_torch_shards():
    import torch
    from torch.distributed.tensor import DTensor

    propagator = DTensor._op_dispatcher.sharding_propagator
    registered = {*propagator.op_strategy_funcs, *propagator.op_single_dim_strategy_funcs}
    ops = {"torch.optim.AdamW": "_fused_adamw_", "torch.optim.Adam": "_fused_adam_",
           "torch.optim.SGD": "_fused_sgd_", "torch.optim.Adagrad": "_fused_adagrad_"}
    assert set(ops) == set(FUSED_OPTIMIZERS)
    for target, op in ops.items():
        sharded = getattr(torch.ops.aten, op).default in registered
        assert sharded == (target in DTENSOR_FUSED_OPTIMIZERS), target


def test_fused_defaults_and_refusals_follow_the_strategy():
    from trainer.fused.runtime import fast_optimizer_kwargs

    assert "optimizer.fused" not in default_fast_paths("cpu", "cpu", optimizer_target="torch.optim.SGD")
    assert default_fast_paths("cpu", "cpu", optimizer_target="torch.optim.SGD", strategy="ddp")["optimizer.fused"]
    assert fast_optimizer_kwargs("torch.optim.SGD", {}, "cpu", "fsdp2") == {}
    assert fast_optimizer_kwargs("torch.optim.SGD", {}, "cpu", "ddp") == {"fused": True}
    assert fast_optimizer_kwargs("torch.optim.AdamW", {}, "cpu", "fsdp2") == {"fused": True}
    sgd = {"_target_": "torch.optim.SGD", "lr": 0.003, "fused": True}
    with pytest.raises(ConfigError) as err:
        preflight(parse_config(config_dict(optimizer=sgd)), 2)
    assert str(err.value).startswith("optimizer.fused: torch.optim.SGD has no fused step for the sharded")
    preflight(parse_config(config_dict(optimizer=sgd, distributed__strategy="ddp")), 2)
