"""TrainFinetuneRecipe: pretraining, SFT and LoRA with one loop (NeMo AutoModel's train_ft shape).

``setup()`` builds the components through ``_target_`` builders and applies the
infrastructure in the seed's order: model (meta device) -> PEFT -> checkpoint
weights -> freezing -> sharding (TP, FSDP2 / DDP) -> device -> compile; then the
optimizer, data, loss, LR and step schedulers, and the rest of the checkpoint.

The loss of a step is normalised by the label tokens of the whole global batch
(summed over micro-batches and all-reduced over data-parallel ranks), so DP,
FSDP2 and TP runs compute the same loss and gradients as one process.
"""

from __future__ import annotations

import functools
import inspect
import math
import time
from contextlib import nullcontext
from pathlib import Path
from typing import Any, Callable, Optional

import torch
import torch.distributed as dist
from torch import nn

from trainer.components.lr_schedule import build_lr_scheduler
from trainer.components.metrics import (
    JsonlWriter,
    MetricsSample,
    device_peak_flops,
    flops_per_token,
    make_progress_bar,
    peak_memory_gib,
    update_progress_bar,
)
from trainer.components.targets import instantiate, resolve_target
from trainer.contract.builders import dataset_call
from trainer.contract.config import RecipeConfig
from trainer.contract.overrides import ConfigError
from trainer.contract.step_scheduler import StepScheduler, derive_grad_acc_steps
from trainer.data import IGNORE_INDEX, ResumableDataLoader
from trainer.distributed.dist import DistInfo, fault_point
from trainer.distributed.mesh import data_mesh
from trainer.distributed.parallelize import reshard_after_no_grad_forward
from trainer.fused.runtime import check_fp8, cpu_precision_warning, fast_optimizer_kwargs
from trainer.models.moe import collect_router_stats, update_expert_bias
from trainer.recipes import model_io
from trainer.recipes.base_recipe import BaseRecipe, RNGState, log


def build_loss_fn(section) -> Callable[..., tuple[torch.Tensor, int]]:
    """``loss_fn`` absent: trainer.loss.causal_lm_loss. A function target gets its keys bound
    (``{_target_: trainer.loss.causal_lm_loss, chunked: true}``); a class target is instantiated."""
    from trainer.loss import causal_lm_loss

    if section.target is None:
        return functools.partial(causal_lm_loss, **section.kwargs())
    fn = resolve_target(section.target, "loss_fn")
    if inspect.isfunction(fn):
        return functools.partial(fn, **section.kwargs())
    return instantiate({"_target_": section.target, **section.kwargs()}, "loss_fn")


def _grads_by_mesh(parameters: list[nn.Parameter]) -> dict[Any, list[nn.Parameter]]:
    """Parameters with a gradient, grouped by the device mesh of their DTensor gradient (None: plain
    tensors). Under TP without sequence parallel the norms stay FSDP DTensors on the 1-D ``dp`` mesh
    while the TP'd weights live on the 2-D ``(dp, tp)`` mesh; DTensor ops refuse to mix the two."""
    from torch.distributed.tensor import DTensor

    groups: dict[Any, list[nn.Parameter]] = {}
    for p in parameters:
        if p.grad is not None:
            groups.setdefault(p.grad.device_mesh if isinstance(p.grad, DTensor) else None, []).append(p)
    return groups


def clip_grad_norm_(parameters: list[nn.Parameter], max_norm: Optional[float],
                    norm_type: float = 2.0, group=None) -> torch.Tensor:
    """Total ``norm_type`` norm of all gradients, each scaled by ``min(1, max_norm / (total + 1e-6))``
    when ``max_norm`` is set (torch.nn.utils.clip_grad_norm_).

    DTensor-aware for mixed meshes, as torchtitan's ``clip_grad_norm_`` with expert parallel: the norm
    of each mesh group is reduced to a plain tensor (``full_tensor``), the groups combine as
    ``(sum_g n_g^p)^(1/p)`` (the max for the inf-norm), and every group is scaled by the same coefficient.
    ``group``: ranks holding other parameters of the model (pipeline stages), whose norms combine the same way.
    """
    from torch.distributed.tensor import DTensor

    groups = _grads_by_mesh(parameters)
    norms = []
    for params in groups.values():
        norm = torch.nn.utils.get_total_norm([p.grad for p in params], norm_type=norm_type,
                                             error_if_nonfinite=False)
        norms.append(norm.full_tensor() if isinstance(norm, DTensor) else norm)
    if not norms and group is None:
        return torch.zeros(())
    if len(norms) == 1 and group is None:  # one mesh (or none): the norm as torch computes it, not re-rounded
        total = norms[0]
    elif math.isinf(norm_type):
        total = torch.stack(norms).max() if norms else torch.zeros(())
        if group is not None:
            dist.all_reduce(total, op=dist.ReduceOp.MAX, group=group)
    else:
        total = torch.stack(norms).pow(norm_type).sum() if norms else torch.zeros(())
        if group is not None:
            dist.all_reduce(total, group=group)
        total = total.pow(1.0 / norm_type)
    if max_norm is not None:
        for params in groups.values():
            torch.nn.utils.clip_grads_with_norm_(params, max_norm, total)
    return total


class TrainFinetuneRecipe(BaseRecipe):
    """``setup()`` then ``run_train_validation_loop()``; see the module docstring."""

    def __init__(self, cfg: RecipeConfig, raw_config: dict[str, Any], dist_info: DistInfo):
        self.cfg = cfg
        self.raw_config = raw_config
        self.dist = dist_info
        self.checkpoint_dir = Path(cfg.checkpoint.checkpoint_dir)

    # ------------------------------------------------------------------------------------- setup
    def setup(self) -> None:
        cfg, info = self.cfg, self.dist
        torch.manual_seed(cfg.rng.seed)
        self.rng = RNGState()

        if cfg.precision == "fp8":  # refused before anything is built where it cannot run
            check_fp8(info.device.type, torch.cuda.get_device_capability(info.device)
                      if info.device.type == "cuda" else None, cfg.distributed.tp_size)
        precision_warning = cpu_precision_warning(cfg.precision, info.device.type)
        if precision_warning:
            log(f"warning: {precision_warning}", info)
        # 1. model on the meta device: nothing is allocated before the layout is known
        model = model_io.build_model(cfg.model, seed=cfg.rng.seed, device_type=info.device.type,
                                     compile_enabled=cfg.compile.enabled)
        model_io.configure_balancing(model, cfg)
        self.model_config = model.config
        model_io.check_layout(self.model_config, cfg)
        # 2. PEFT
        if cfg.peft is not None:
            model = model_io.apply_peft(model, cfg.peft)
        # 3. checkpoint load: the weights come from the checkpoint when the model is materialised
        self.restore_path = self.select_checkpoint()
        if self.restore_path is not None:
            model_io.restore_weights_before_sharding(model, self.restore_path, peft=cfg.peft is not None)
        # 4. freezing: with PEFT only the adapter trains
        if cfg.peft is not None:
            model_io.freeze_all_but_adapters(model)
        # 5-7. sharding (TP, then FSDP2 or DDP), device placement (materialisation), compile per block
        self.mesh, self.dp_group, self.dp_size = model_io.build_device_mesh(cfg, info)
        # The ranks that average gradients: data parallel x context parallel (trainer/distributed/mesh.py).
        self.grad_group, self.grad_size = model_io.gradient_group(self.mesh)
        self.pipeline = None
        if cfg.distributed.pp_size > 1:  # this rank's stages; self.model is its share of the model
            from trainer.distributed.pipeline import PipelineRunner

            s = cfg.step_scheduler
            micro_batches = derive_grad_acc_steps(s.global_batch_size, s.local_batch_size, self.dp_size)
            self.pipeline = PipelineRunner(model_io.build_pipeline(model, self.mesh, cfg, info.device, micro_batches),
                                           self.mesh)
            self.model = self.pipeline.pipeline.model
        else:
            self.model = model_io.parallelize(model, self.mesh, cfg, info.device)
        self.sequence_sharder = model_io.apply_context_parallel(self.model, self.mesh)
        if self.restore_path is not None:
            model_io.restore_weights_after_sharding(self.model, self.restore_path, peft=cfg.peft is not None)

        params = [p for p in self.model.parameters() if p.requires_grad]
        optimizer_kwargs = fast_optimizer_kwargs(cfg.optimizer.target, cfg.optimizer.kwargs(), info.device.type,
                                                 cfg.distributed.strategy)
        self.optimizer = instantiate({"_target_": cfg.optimizer.target, **optimizer_kwargs}, "optimizer",
                                     params=params)
        self.loss_fn = build_loss_fn(cfg.loss_fn)
        dp_rank = data_mesh(self.mesh).get_local_rank() if self.mesh is not None else 0
        self.dataloader = self._build_dataloader("dataset", cfg.dataset, dp_rank, shuffle=cfg.dataloader.shuffle)
        self.val_dataloader = None
        if cfg.validation_dataset is not None:
            self.val_dataloader = self._build_dataloader("validation_dataset", cfg.validation_dataset, dp_rank,
                                                         shuffle=False)
            if len(self.val_dataloader) == 0:
                raise ConfigError(f"validation_dataset: {len(self.val_dataloader.dataset)} samples are fewer than "
                                  f"one local batch ({cfg.step_scheduler.local_batch_size}) per data-parallel rank "
                                  f"({self.dp_size}); add samples")
            self.untrack_state("val_dataloader")  # validation always reads the whole set from the start
            samples, read = len(self.val_dataloader.dataset), len(self.val_dataloader) * self.val_dataloader.batch_size
            if read * self.dp_size < samples:  # whole local batches on every rank
                log(f"warning: validation reads {read * self.dp_size} of the {samples} samples of validation_dataset "
                    f"(whole local batches of {self.val_dataloader.batch_size} on each of {self.dp_size} data-parallel "
                    "rank(s)), so its loss also depends on the number of ranks; give it a multiple of "
                    f"{self.val_dataloader.batch_size * self.dp_size} samples to read them all", self.dist)
        s = cfg.step_scheduler
        self.step_scheduler = StepScheduler(
            self.dataloader, global_batch_size=s.global_batch_size, local_batch_size=s.local_batch_size,
            dp_size=self.dp_size, max_steps=s.max_steps, num_epochs=s.num_epochs,
            val_check_interval=s.val_check_interval,
            checkpoint_interval=s.checkpoint_interval if cfg.checkpoint.enabled else None,
            log_interval=s.log_interval)
        self.lr_scheduler = build_lr_scheduler(self.optimizer, cfg.lr_scheduler, self.step_scheduler.total_steps)
        model_io.configure_moe(self.model, self.dp_group, self.dp_size, self.step_scheduler.grad_acc_steps)
        for warning in self.step_scheduler.length_warnings(cfg.lr_scheduler.warmup_steps):
            log(f"warning: {warning}", info)
        if self.restore_path is not None:
            self.load_checkpoint_state(self.restore_path)
            log(f"resumed from {self.restore_path} at step {self.step_scheduler.step}", info)

        self.seq_length = self.dataloader.dataset[0]["input_ids"].shape[0]
        active = getattr(self.model_config, "active_parameters", self.model_config.num_parameters)  # MoE: top-k
        self.flops_per_token = flops_per_token(active(),
                                               self.model_config.num_hidden_layers,
                                               self.model_config.hidden_size, self.seq_length,
                                               peft=cfg.peft is not None)
        self.peak_flops = device_peak_flops(cfg.hardware.gpu_type, cfg.precision, info.device.type)
        self.autocast = model_io.autocast(self.model, cfg.precision, info.device.type)
        self.train_log = JsonlWriter(self.checkpoint_dir / "training.jsonl", info.is_main)
        self.val_log = JsonlWriter(self.checkpoint_dir / "validation.jsonl", info.is_main)

    def _build_dataloader(self, key: str, section, dp_rank: int, *, shuffle: bool) -> ResumableDataLoader:
        dataset = instantiate(dataset_call(section, key), key, vocab_size=self.model_config.vocab_size)
        max_id = getattr(dataset, "max_token_id", None)
        if max_id is not None and max_id >= self.model_config.vocab_size:
            raise ConfigError(f"{key}.tokenizer: token id {max_id} is outside the model's vocab_size "
                              f"{self.model_config.vocab_size}; use the model's tokenizer")
        return ResumableDataLoader(dataset, batch_size=self.cfg.step_scheduler.local_batch_size,
                                   dp_size=self.dp_size, dp_rank=dp_rank, shuffle=shuffle, seed=self.cfg.rng.seed,
                                   num_workers=self.cfg.dataloader.num_workers,
                                   pin_memory=self.cfg.dataloader.pin_memory)

    # ---- BaseRecipe hooks ---------------------------------------------------------------------
    def model_signature(self) -> dict[str, Any]:
        peft = self.cfg.peft.model_dump() if self.cfg.peft is not None else None
        from trainer.contract.resume_checks import model_signature

        return model_signature(self.model_config, peft)

    def save_model_files(self, model: nn.Module, out_dir: Path) -> None:
        gather = self.pipeline.gather_full if self.pipeline is not None else None
        model_io.save_model_files(model, out_dir, self.cfg, self.dist, gather=gather)

    # -------------------------------------------------------------------------------------- loop
    def run_train_validation_loop(self) -> None:
        sched, info = self.step_scheduler, self.dist
        resumed_step = sched.step if self.restore_path is not None else None
        self.train_log.start(resumed_step)
        self.val_log.start(resumed_step)
        pbar = make_progress_bar(info.is_main, sched.total_steps, sched.step)
        window_start, window_tokens, window_steps = time.perf_counter(), 0, 0
        self.model.train()
        for epoch in sched.epochs:
            for micro_batches in sched:
                loss, grad_norm, lr, tokens = self._run_train_optim_step(micro_batches)
                window_tokens += tokens
                window_steps += 1
                if sched.is_log_step:
                    sample = self._metrics(epoch, loss, grad_norm, lr, window_tokens,
                                           time.perf_counter() - window_start, window_steps)
                    self.train_log.write(sample.to_dict())
                    update_progress_bar(pbar, sample, window_steps)
                    window_start, window_tokens, window_steps = time.perf_counter(), 0, 0
                fault_point("after_step", sched.step, info.rank)
                if sched.is_val_step and self.val_dataloader is not None:
                    self._run_validation_epoch(epoch, lr)
                if sched.is_ckpt_step and self.cfg.checkpoint.enabled:
                    path = self.save_checkpoint(epoch, sched.step)
                    log(f"saved checkpoint {path}", info)
                if sched.is_val_step or sched.is_ckpt_step:
                    window_start = time.perf_counter()  # throughput counts training time only
        if pbar is not None:
            pbar.close()
        self.train_log.close()
        self.val_log.close()

    def _forward_loss(self, batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, int]:
        device = self.dist.device
        input_ids = batch["input_ids"].to(device, non_blocking=True)
        labels = batch["labels"].to(device, non_blocking=True)
        if self.sequence_sharder is not None:  # context parallel: this rank's tokens, their positions and labels
            input_ids, labels, positions = self.sequence_sharder(input_ids, labels)
            with self.autocast:
                return self.loss_fn(self.model, input_ids, labels, position_ids=positions)
        with self.autocast:
            return self.loss_fn(self.model, input_ids, labels)

    def _run_train_optim_step(self, micro_batches: list[dict[str, torch.Tensor]]) -> tuple[float, float, float, int]:
        """One optimizer step over the global batch; returns (loss, grad_norm, lr, tokens of the global batch)."""
        device = self.dist.device
        local_labels = sum(int((b["labels"] != IGNORE_INDEX).sum()) for b in micro_batches)
        counts = torch.tensor([float(local_labels)], dtype=torch.float64, device=device)
        self._dp_all_reduce(counts)
        label_tokens = max(counts.item(), 1.0)
        # Sum-reduced loss over the global batch's label tokens; x grad_size (data x context parallel ranks)
        # undoes DDP/FSDP's gradient mean.
        scale = self.grad_size / label_tokens
        if self.pipeline is not None:
            loss_sum = self._pipeline_forward_backward(micro_batches, scale)
        else:
            loss_sum = self._forward_backward(micro_batches, scale)
        grad_norm = clip_grad_norm_([p for p in self.model.parameters() if p.requires_grad],
                                    self.cfg.clip_grad_norm.max_norm,
                                    group=self.pipeline.pp_group if self.pipeline is not None else None)
        lr = self.optimizer.param_groups[0]["lr"]
        self.optimizer.step()
        update_expert_bias(self.model)  # DeepSeek-V3's aux-loss-free balancing, on the step's global load
        self.lr_scheduler.step()
        self.optimizer.zero_grad(set_to_none=True)
        self._grad_all_reduce(loss_sum)
        tokens = len(micro_batches) * micro_batches[0]["input_ids"].numel() * self.dp_size
        return loss_sum.item() / label_tokens, float(grad_norm), lr, tokens

    def _forward_backward(self, micro_batches: list[dict[str, torch.Tensor]], scale: float) -> torch.Tensor:
        """Gradient accumulation over the micro batches; returns their summed token loss."""
        loss_sum = torch.zeros((), dtype=torch.float32, device=self.dist.device)
        for i, batch in enumerate(micro_batches):
            last = i == len(micro_batches) - 1
            sync = self.model.no_sync() if hasattr(self.model, "no_sync") and not last else nullcontext()
            with sync:
                batch_loss, _ = self._forward_loss(batch)
                (batch_loss * scale).backward()
            loss_sum += batch_loss.detach().float()
        return loss_sum

    def _pipeline_forward_backward(self, micro_batches: list[dict[str, torch.Tensor]], scale: float) -> torch.Tensor:
        """The micro batches as the pipeline's micro batches (one schedule step); their summed token loss."""
        device = self.dist.device
        input_ids = torch.cat([b["input_ids"] for b in micro_batches]).to(device, non_blocking=True)
        labels = torch.cat([b["labels"] for b in micro_batches]).to(device, non_blocking=True)
        with self.autocast:
            return self.pipeline.step(input_ids, labels, scale=scale).float()

    def _pipeline_eval_loss(self, batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, int]:
        """(summed token loss, label tokens) of one validation batch, forward through the pipeline's stages."""
        device = self.dist.device
        input_ids = batch["input_ids"].to(device, non_blocking=True)
        labels = batch["labels"].to(device, non_blocking=True)
        with self.autocast:
            return self.pipeline.evaluate(input_ids, labels), int((labels != IGNORE_INDEX).sum())

    def _dp_all_reduce(self, tensor: torch.Tensor) -> None:
        if dist.is_initialized() and self.dp_size > 1:
            dist.all_reduce(tensor, op=dist.ReduceOp.SUM, group=self.dp_group)

    def _grad_all_reduce(self, tensor: torch.Tensor) -> None:
        """Sum over data x context parallel ranks (a CP rank's loss covers its share of each sequence)."""
        if dist.is_initialized() and self.grad_size > 1:
            dist.all_reduce(tensor, op=dist.ReduceOp.SUM, group=self.grad_group)

    def _metrics(self, epoch: int, loss: float, grad_norm: float, lr: float, tokens: int,
                 seconds: float, steps: int = 1) -> MetricsSample:
        tps = tokens / max(seconds, 1e-9)
        mfu = None
        if self.peak_flops:
            mfu = self.flops_per_token * tps / (self.peak_flops * self.dist.world_size)
        router = collect_router_stats(self.model, self.dp_group, steps) or {}  # MoE: aux loss, expert load
        return MetricsSample(step=self.step_scheduler.step, epoch=epoch, loss=loss, grad_norm=grad_norm, lr=lr,
                             mem=peak_memory_gib(self.dist.device), tps=tps, mfu=mfu, **router)

    @torch.no_grad()
    def _run_validation_epoch(self, epoch: int, lr: float) -> float:
        """Loss over the whole validation set (eval mode, no grad), normalised by its label tokens."""
        self.model.eval()
        start = time.perf_counter()
        totals = torch.zeros(2, dtype=torch.float64, device=self.dist.device)
        tokens = 0
        self.val_dataloader.rewind()
        for batch in self.val_dataloader:
            if self.pipeline is not None:
                batch_loss, num_labels = self._pipeline_eval_loss(batch)
            else:
                batch_loss, num_labels = self._forward_loss(batch)
            totals[0] += batch_loss.double()
            totals[1] += num_labels
            tokens += batch["input_ids"].numel() * self.dp_size
        self._grad_all_reduce(totals)
        self.model.train()
        reshard_after_no_grad_forward(self.model)
        if self.pipeline is not None:
            self.pipeline.end_evaluation()
        val_loss = (totals[0] / totals[1].clamp(min=1)).item()
        self.val_log.write({"step": self.step_scheduler.step, "epoch": epoch, "loss": val_loss,
                            "num_label_tokens": int(totals[1].item()), "lr": lr,
                            "tps": tokens / max(time.perf_counter() - start, 1e-9)})
        log(f"step {self.step_scheduler.step}: validation loss {val_loss:.4f}", self.dist)
        return val_loss
