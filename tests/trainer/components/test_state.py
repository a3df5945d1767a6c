"""LR schedule, step scheduler, checkpoint folder handling, signatures, state tracking, launch env."""

from __future__ import annotations

import json
import math

import pytest
import torch

from trainer.components import checkpoint as ckpt
from trainer.components.lr_schedule import WarmupDecayLR, lr_at
from trainer.contract import checkpoint_layout, resume_checks
from trainer.contract.checkpoint_dir import check_writable_dir
from trainer.contract.config import parse_config
from trainer.contract.overrides import ConfigError
from trainer.contract.step_scheduler import StepScheduler, derive_grad_acc_steps
from trainer.distributed.dist import first_host, pick_backend, read_launch_env
from trainer.recipes.base_recipe import BaseRecipe, RNGState

# ---- LR schedule -------------------------------------------------------------------------------

def test_lr_formula():
    kw = dict(warmup_steps=4, decay_steps=10, min_lr=0.1)
    assert lr_at(1, 1.0, schedule="cosine", **kw) == pytest.approx(0.25)
    assert lr_at(4, 1.0, schedule="cosine", **kw) == pytest.approx(1.0)
    assert lr_at(9, 1.0, schedule="cosine", **kw) == pytest.approx(0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * 0.5)))
    assert lr_at(14, 1.0, schedule="cosine", **kw) == pytest.approx(0.1)
    assert lr_at(99, 1.0, schedule="cosine", **kw) == pytest.approx(0.1)
    assert lr_at(9, 1.0, schedule="linear", **kw) == pytest.approx(0.1 + 0.9 * 0.5)
    assert lr_at(9, 1.0, schedule="constant", **kw) == 1.0
    with pytest.raises(ValueError, match="schedule"):
        lr_at(1, 1.0, schedule="step", **kw)


def test_scheduler_sets_group_lrs_and_restores_from_its_step():
    params = [torch.nn.Parameter(torch.zeros(1))]
    opt = torch.optim.SGD([{"params": params, "lr": 1.0}, {"params": [torch.nn.Parameter(torch.zeros(1))],
                                                           "lr": 0.5}])
    sched = WarmupDecayLR(opt, schedule="linear", warmup_steps=2, decay_steps=4, min_lr=0.0)
    seen = []
    for _ in range(4):
        seen.append(sched.get_last_lr())
        sched.step()
    assert seen == [[0.5, 0.25], [1.0, 0.5], [0.75, 0.375], [0.5, 0.25]]
    opt2 = torch.optim.SGD([{"params": params, "lr": 1.0}, {"params": [torch.nn.Parameter(torch.zeros(1))],
                                                            "lr": 0.5}])
    resumed = WarmupDecayLR(opt2, schedule="linear", warmup_steps=2, decay_steps=4, min_lr=0.0)
    resumed.load_state_dict(sched.state_dict())
    assert resumed.get_last_lr() == sched.get_last_lr() == [0.25, 0.125]


# ---- step scheduler ----------------------------------------------------------------------------

class _Loader:
    def __init__(self, n):
        self.n, self.epoch, self.pos = n, 0, 0

    def __len__(self):
        return self.n

    def set_epoch(self, epoch):
        if epoch != self.epoch:
            self.epoch, self.pos = epoch, 0

    def __iter__(self):
        while self.pos < self.n:
            self.pos += 1
            yield (self.epoch, self.pos - 1)


def test_grad_accumulation_is_derived_and_checked():
    assert derive_grad_acc_steps(32, 4, 2) == 4
    with pytest.raises(ConfigError, match=r"local_batch_size: global_batch_size 30 .* 4 x data-parallel size 2"):
        derive_grad_acc_steps(30, 4, 2)


def test_a_data_parallel_size_no_local_batch_can_fix_gets_a_real_fix():
    # 16 samples over 3 data-parallel ranks (--nproc-per-node 3): no local batch size divides it.
    with pytest.raises(ConfigError) as err:
        derive_grad_acc_steps(16, 8, 3)
    message = str(err.value)
    assert "[]" not in message, "an empty list of local batch sizes is no fix"
    assert "multiple of 24" in message and "divides 16, such as 1, 2, 4, 8, 16" in message


def test_step_scheduler_groups_micro_batches_over_epochs():
    sched = StepScheduler(_Loader(7), global_batch_size=12, local_batch_size=2, dp_size=2, num_epochs=2,
                          val_check_interval=2, checkpoint_interval=3, log_interval=2)
    assert sched.grad_acc_steps == 3 and sched.steps_per_epoch == 2 and sched.total_steps == 4
    steps = []
    for epoch in sched.epochs:
        for group in sched:
            steps.append((epoch, sched.step, group, sched.is_log_step, sched.is_val_step, sched.is_ckpt_step))
    assert [s[:2] for s in steps] == [(0, 1), (0, 2), (1, 3), (1, 4)]
    assert steps[2][2] == [(1, 0), (1, 1), (1, 2)], "the partial group at the end of epoch 0 is dropped"
    assert [s[3:] for s in steps] == [(False, False, False), (True, True, False), (False, False, True),
                                      (True, True, True)]
    assert sched.done


def test_step_scheduler_max_steps_and_resume():
    loader = _Loader(10)
    sched = StepScheduler(loader, global_batch_size=2, local_batch_size=1, dp_size=1, max_steps=3, num_epochs=5)
    assert sched.total_steps == 3
    for _ in sched.epochs:
        for _ in sched:
            pass
    assert sched.step == 3 and loader.pos == 6
    again = StepScheduler(_Loader(10), global_batch_size=2, local_batch_size=1, dp_size=1, max_steps=5)
    again.load_state_dict(sched.state_dict())
    assert (again.step, again.epoch) == (3, 0)


def test_too_little_data_is_a_config_error():
    with pytest.raises(ConfigError, match="fewer than one global batch"):
        StepScheduler(_Loader(1), global_batch_size=4, local_batch_size=1, dp_size=1)


# ---- checkpoint folders ------------------------------------------------------------------------

def _complete(root, name):
    path = root / name
    path.mkdir(parents=True)
    (path / checkpoint_layout.COMPLETE_MARKER).write_text("{}")
    return path


def test_discovery_ignores_half_written_and_staging_folders(tmp_path):
    _complete(tmp_path, "epoch_0_step_4")
    (tmp_path / "epoch_0_step_8").mkdir()  # a save killed before its marker
    (tmp_path / ".tmp_epoch_0_step_12").mkdir()
    (tmp_path / "notes").mkdir()
    assert [p.name for p in checkpoint_layout.list_complete(tmp_path)] == ["epoch_0_step_4"]
    assert checkpoint_layout.find_latest(tmp_path).name == "epoch_0_step_4"
    # LATEST naming an incomplete folder falls back to the newest complete one.
    (tmp_path / checkpoint_layout.LATEST_FILE).write_text("epoch_0_step_8\n")
    assert checkpoint_layout.find_latest(tmp_path).name == "epoch_0_step_4"
    assert [p.name for p in ckpt.CheckpointDir(tmp_path).remove_stale_staging()] == [".tmp_epoch_0_step_12"]


def test_resolve_restore(tmp_path):
    assert checkpoint_layout.resolve_restore(None, tmp_path) == (None, False)
    assert checkpoint_layout.resolve_restore("LATEST", tmp_path) == (None, True)
    first = _complete(tmp_path, "epoch_0_step_2")
    newest = _complete(tmp_path, "epoch_1_step_10")
    assert checkpoint_layout.resolve_restore(None, tmp_path) == (newest, False)
    assert checkpoint_layout.resolve_restore("epoch_0_step_2", tmp_path) == (first, True)
    assert checkpoint_layout.resolve_restore(str(first), tmp_path / "elsewhere") == (first, True)
    with pytest.raises(ConfigError, match=r"restore_from.path: 'epoch_5_step_5' does not exist.*epoch_0_step_2"):
        checkpoint_layout.resolve_restore("epoch_5_step_5", tmp_path)
    (tmp_path / "epoch_2_step_20").mkdir()
    with pytest.raises(ConfigError, match="not a complete checkpoint"):
        checkpoint_layout.resolve_restore("epoch_2_step_20", tmp_path)


def test_restore_from_a_file_says_it_is_not_a_checkpoint_folder(tmp_path):
    config = tmp_path / "c.yaml"
    config.write_text("model: {}\n")
    with pytest.raises(ConfigError, match=r"restore_from.path: .*c\.yaml is a file, not a checkpoint folder"):
        checkpoint_layout.resolve_restore(str(config), tmp_path / "ckpt")


def test_explicit_latest_without_a_checkpoint_warns_and_starts_fresh(tmp_path, capsys):
    recipe = BaseRecipe()
    recipe.cfg = parse_config({"restore_from": {"path": "LATEST"}, "checkpoint": {"checkpoint_dir": str(tmp_path)}})
    recipe.checkpoint_dir = tmp_path
    recipe.dist = None
    assert recipe.select_checkpoint() is None
    err = capsys.readouterr().err
    assert f"warning: restore_from.path is LATEST but {tmp_path} holds no complete checkpoint" in err
    assert "starting fresh from step 0" in err


def test_checkpoint_dir_is_created_and_probed_at_startup(tmp_path, monkeypatch):
    target = tmp_path / "runs" / "a"
    check_writable_dir(target)
    assert target.is_dir() and not list(target.iterdir()), "the probe file is gone"
    blocker = tmp_path / "a_file"
    blocker.write_text("")
    with pytest.raises(ConfigError, match=r"^checkpoint.checkpoint_dir: cannot create '.*a_file/ckpt' "
                                          r"\(Not a directory\); choose a folder"):
        check_writable_dir(blocker / "ckpt")
    with pytest.raises(ConfigError, match=r"^checkpoint.checkpoint_dir: '.*a_file' is a file, not a folder"):
        check_writable_dir(blocker)

    def read_only(*args, **kwargs):
        raise PermissionError(13, "Permission denied")

    from trainer.contract import checkpoint_dir

    monkeypatch.setattr(checkpoint_dir.tempfile, "NamedTemporaryFile", read_only)
    with pytest.raises(ConfigError, match=r"cannot write in '.*runs/a' \(Permission denied\)"):
        check_writable_dir(target)


def test_publish_is_atomic_and_retention_keeps_the_newest(tmp_path):
    store = ckpt.CheckpointDir(tmp_path, keep_last=2)
    for step in (2, 4, 6):
        staging = store.prepare_staging(0, step)
        (staging / "payload.txt").write_text(str(step))
        final = store.publish(staging, 0, step)
        assert final.name == f"epoch_0_step_{step}" and checkpoint_layout.is_complete(final)
        assert not staging.exists()
        assert (tmp_path / checkpoint_layout.LATEST_FILE).read_text().strip() == final.name
    assert [p.name for p in checkpoint_layout.list_complete(tmp_path)] == ["epoch_0_step_4", "epoch_0_step_6"]
    assert not (tmp_path / "epoch_0_step_2").exists()
    marker = json.loads((tmp_path / "epoch_0_step_6" / checkpoint_layout.COMPLETE_MARKER).read_text())
    assert marker["step"] == 6


def test_signature_differences_are_listed_and_normalised():
    class Cfg:
        model_type, vocab_size, hidden_size, intermediate_size = "llama", 512, 64, 128
        num_hidden_layers, num_attention_heads, num_key_value_heads, head_dim = 2, 4, 2, 16
        tie_word_embeddings, attention_bias = False, False

    peft = {"method": "lora", "rank": 8, "alpha": 16, "target_modules": ["v_proj", "q_proj"]}
    sig = resume_checks.model_signature(Cfg, peft)
    saved = json.loads(json.dumps(sig))
    saved["peft"]["alpha"] = 16  # YAML/JSON round trip: int instead of float
    assert resume_checks.signature_differences(sig, saved) == []
    Cfg.hidden_size = 128
    diffs = resume_checks.signature_differences(resume_checks.model_signature(Cfg, None), saved)
    assert len(diffs) == 2
    assert diffs[0] == "hidden_size: checkpoint 64, this run 128"
    assert diffs[1].startswith("peft: checkpoint {") and diffs[1].endswith("this run None")
    all_linear = resume_checks.model_signature(Cfg, {**peft, "target_modules": "all-linear"})
    written_out = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
    assert all_linear == resume_checks.model_signature(Cfg, {**peft, "target_modules": written_out})  # one setting


# ---- state tracking ----------------------------------------------------------------------------

def test_base_recipe_tracks_stateful_attributes():
    recipe = BaseRecipe()
    recipe.model = torch.nn.Linear(2, 2)
    recipe.optimizer = torch.optim.SGD(recipe.model.parameters(), lr=0.1)
    recipe.rng = RNGState()
    recipe.name = "plain value"
    assert recipe.tracked_state == ["model", "optimizer", "rng"]
    recipe.untrack_state("rng")
    assert recipe.tracked_state == ["model", "optimizer"]
    recipe.optimizer = None
    assert recipe.tracked_state == ["model"]
    with pytest.raises(ValueError, match="_state_tracked"):
        recipe._state_tracked = set()


def test_rng_state_round_trip():
    import random

    state = RNGState().state_dict()
    expected = (torch.rand(3), random.random())
    torch.manual_seed(99)
    random.seed(99)
    RNGState().load_state_dict(state)
    got = (torch.rand(3), random.random())
    assert torch.equal(got[0], expected[0]) and got[1] == expected[1]


# ---- launch environment --------------------------------------------------------------------------

def test_launch_env_torchrun_slurm_and_single():
    assert read_launch_env({"RANK": "3", "WORLD_SIZE": "4", "LOCAL_RANK": "1"}) == (3, 4, 1)
    slurm = {"SLURM_PROCID": "5", "SLURM_NTASKS": "8", "SLURM_LOCALID": "1", "SLURM_JOB_NODELIST": "gpu[07-08]",
             "SLURM_JOB_ID": "1234"}
    assert read_launch_env(slurm) == (5, 8, 1)
    assert slurm["MASTER_ADDR"] == "gpu07" and slurm["MASTER_PORT"] == "21234"
    single: dict = {}
    assert read_launch_env(single) == (0, 1, 0) and int(single["MASTER_PORT"]) > 0


@pytest.mark.parametrize("nodelist,host", [("gpu[07-09,12],cpu01", "gpu07"), ("node1", "node1"),
                                           ("a-b[3]", "a-b3"), ("n1,n2", "n1")])
def test_first_host(nodelist, host):
    assert first_host(nodelist) == host


def test_backend_choice():
    assert pick_backend("auto", cuda_available=False) == "gloo"
    assert pick_backend("auto", cuda_available=True) == "nccl"
    assert pick_backend("gloo", cuda_available=True) == "gloo"
    with pytest.raises(ConfigError, match="distributed.backend: nccl"):
        pick_backend("nccl", cuda_available=False)


# ---- metrics and loss builder --------------------------------------------------------------------

def test_peak_flops_only_for_the_card_of_this_device():
    from trainer.components.metrics import device_peak_flops, flops_per_token

    assert device_peak_flops("cpu", "fp32", "cpu") > 0
    assert device_peak_flops("h100", "bf16", "cpu") is None, "a CPU run is not measured against an H100"
    assert device_peak_flops("h100", "bf16", "cuda") > 1e14
    assert device_peak_flops("no-such-gpu", "bf16", "cuda") is None
    assert flops_per_token(1000, 2, 8, 16) == 6 * 1000 + 12 * 2 * 8 * 16 / 2  # causal: half the attention
    # LoRA: no weight gradients for the frozen base, as the planner counts (service.estimate.steptime.gemm_passes).
    from service.estimate.steptime import gemm_passes

    assert flops_per_token(1000, 2, 8, 16, peft=True) == gemm_passes(True) * 1000 + 12 * 2 * 8 * 16 / 2


def test_jsonl_writer_resume_truncates_and_fresh_start_moves_aside(tmp_path):
    from trainer.components.metrics import JsonlWriter

    path = tmp_path / "training.jsonl"
    path.write_text("".join(json.dumps({"step": s}) + "\n" for s in (1, 2, 3)) + '{"step": 4, "lo')
    writer = JsonlWriter(path, enabled=True)
    writer.start(resumed_step=2)
    writer.write({"step": 3, "loss": 1.0})
    writer.close()
    assert [json.loads(x)["step"] for x in path.read_text().splitlines()] == [1, 2, 3]
    JsonlWriter(path, enabled=True).start(resumed_step=None)
    assert not path.exists() and len(list(tmp_path.glob("training.jsonl.*.old"))) == 1
    JsonlWriter(tmp_path / "other.jsonl", enabled=False).write({"step": 1})
    assert not (tmp_path / "other.jsonl").exists(), "only rank 0 writes"


def test_loss_fn_section_binds_function_targets():
    from trainer.contract.config import LossSection
    from trainer.models import build_causal_lm
    from trainer.recipes.train_ft import build_loss_fn

    model = build_causal_lm("tiny-llama", seed=0)
    ids = torch.randint(512, (2, 16), generator=torch.Generator().manual_seed(0))
    labels = ids.roll(-1, dims=1)
    labels[:, -1] = -100
    default = build_loss_fn(LossSection())(model, ids, labels)
    chunked = build_loss_fn(LossSection.model_validate({"_target_": "trainer.loss.causal_lm_loss",
                                                        "chunked": True, "chunk_size": 5}))(model, ids, labels)
    assert default[1] == chunked[1] == 30
    torch.testing.assert_close(default[0], chunked[0], atol=1e-4, rtol=1e-5)
    with pytest.raises(ConfigError, match="loss_fn._target_"):
        build_loss_fn(LossSection.model_validate({"_target_": "os.getcwd"}))


# ---- gradient clipping over DTensor meshes --------------------------------------------------------

@pytest.fixture
def one_process_group():
    import torch.distributed as dist

    started = not dist.is_initialized()
    if started:
        dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    yield
    if started:
        dist.destroy_process_group()


@pytest.mark.parametrize("norm_type", [2.0, math.inf])
def test_grad_norm_clipping_combines_gradients_on_different_meshes(one_process_group, norm_type):
    """TP without sequence parallel: some gradients on the 1-D dp mesh, others on the 2-D (dp, tp)
    mesh. The total and the clipped gradients must equal torch's on the same plain tensors."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import Replicate, distribute_tensor

    from trainer.recipes.train_ft import clip_grad_norm_

    dp = init_device_mesh("cpu", (1,), mesh_dim_names=("dp",))
    dp_tp = init_device_mesh("cpu", (1, 1), mesh_dim_names=("dp", "tp"))
    grads = [torch.randn(4, 3, generator=torch.Generator().manual_seed(i)) for i in range(3)]
    sharded, plain = [], []
    for grad, mesh in zip(grads, (dp, dp_tp, dp_tp)):
        param = torch.nn.Parameter(distribute_tensor(torch.zeros_like(grad), mesh, [Replicate()] * mesh.ndim))
        param.grad = distribute_tensor(grad.clone(), mesh, [Replicate()] * mesh.ndim)
        sharded.append(param)
        plain.append(torch.nn.Parameter(torch.zeros_like(grad)))
        plain[-1].grad = grad.clone()
    want = torch.nn.utils.clip_grad_norm_(plain, 0.5, norm_type=norm_type)
    got = clip_grad_norm_(sharded, 0.5, norm_type=norm_type)
    assert want > 0.5, "clipping must be active"
    assert got.item() == pytest.approx(want.item(), rel=1e-6)
    for param, reference in zip(sharded, plain):
        torch.testing.assert_close(param.grad.full_tensor(), reference.grad)


class _FixedLengthLoader:
    def __init__(self, batches: int):
        self.batches = batches

    def __len__(self) -> int:
        return self.batches


def test_the_step_scheduler_says_when_the_data_or_the_warmup_does_not_fit_the_run():
    sched = StepScheduler(_FixedLengthLoader(8), global_batch_size=8, local_batch_size=2, dp_size=2, max_steps=100)
    assert sched.total_steps == 4
    ends, warmup = sched.length_warnings(warmup_steps=10)
    assert ends.startswith("the data ends the run after 4 steps (1 epoch(s) of 4), before step_scheduler.max_steps 100")
    assert warmup.startswith("lr_scheduler.warmup_steps 10 is longer than the run (4 steps)")
    assert StepScheduler(_FixedLengthLoader(8), global_batch_size=8, local_batch_size=2, dp_size=2,
                         max_steps=4).length_warnings(warmup_steps=2) == []
