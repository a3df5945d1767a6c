"""Trainer config handling without torch.distributed: overrides, YAML, `_target_` allow-list,
pre-flight checks and the `recipe-advisor train` launcher (dry run)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.paths import REPO
from trainer.components.targets import instantiate, resolve_target
from trainer.contract.builders import check_target
from trainer.contract.overrides import ConfigError, apply_overrides, coerce_value, load_yaml_file, parse_overrides
from trainer.contract.preflight import load_config, preflight

BUNDLED = REPO / "recipe_index" / "recipes" / "bundled"


# ---- overrides -------------------------------------------------------------------------------

def test_overrides_both_spellings_and_coercion():
    cfg = {"optimizer": {"lr": 0.1}, "step_scheduler": {"max_steps": 3}}
    out = apply_overrides(cfg, ["--optimizer.lr", "1e-4", "--step_scheduler.max_steps=8",
                                "--peft.target_modules", "[q_proj, v_proj]", "--compile.enabled", "true",
                                "--optimizer.weight_decay", "-0.5", "--restore_from.path", "LATEST"])
    assert out["optimizer"] == {"lr": 1e-4, "weight_decay": -0.5}
    assert out["step_scheduler"]["max_steps"] == 8
    assert out["peft"] == {"target_modules": ["q_proj", "v_proj"]}
    assert out["compile"]["enabled"] is True
    assert out["restore_from"]["path"] == "LATEST"
    assert cfg["optimizer"] == {"lr": 0.1}, "the input config must not be modified"


@pytest.mark.parametrize("text,value", [("1e-4", 1e-4), ("3", 3), ("0.5", 0.5), ("null", None),
                                        ("off", False), ("fsdp2", "fsdp2"), ("{a: 1}", {"a": 1})])
def test_coerce_value(text, value):
    assert coerce_value(text) == value


@pytest.mark.parametrize("argv,needle", [(["optimizer.lr", "1"], "expected --section.key"),
                                         (["--optimizer.lr"], "has no value"),
                                         (["--bad..key=1"], "not a dotted key")])
def test_bad_overrides(argv, needle):
    with pytest.raises(ConfigError, match=needle):
        parse_overrides(argv)


def test_override_into_a_scalar_is_refused():
    with pytest.raises(ConfigError, match="precision is a str"):
        apply_overrides({"precision": "fp32"}, ["--precision.x", "1"])


# ---- YAML ------------------------------------------------------------------------------------

def test_yaml_reads_bare_exponent_as_float(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("optimizer:\n  lr: 3e-4\n  eps: 1.0e-8\n")
    assert load_yaml_file(path)["optimizer"] == {"lr": 3e-4, "eps": 1e-8}


@pytest.mark.parametrize("content,needle", [
    ("", "empty"),
    ("- a\n- b\n", "not a mapping"),
    ("a: [1, 2\n", "YAML syntax error"),
    ("a: !!python/object/apply:os.system ['true']\n", "YAML"),
    ("a: &x [1]\n" + "".join(f"b{i}: *x\n" for i in range(300)), "aliases"),
])
def test_yaml_bad_files(tmp_path, content, needle):
    path = tmp_path / "c.yaml"
    path.write_text(content)
    with pytest.raises(ConfigError, match=needle):
        load_yaml_file(path)


def test_yaml_missing_and_binary(tmp_path):
    with pytest.raises(ConfigError, match="not found"):
        load_yaml_file(tmp_path / "nope.yaml")
    binary = tmp_path / "b.yaml"
    binary.write_bytes(b"\x00\x01\x02")
    with pytest.raises(ConfigError, match="binary"):
        load_yaml_file(binary)


# ---- _target_ registry ------------------------------------------------------------------------

@pytest.mark.parametrize("target", ["os.system", "builtins.eval", "subprocess.run", "torchvision.models.x",
                                    "torch.load", "torch.nn.modules.module.sys.exit", "torch.optim.adamw.AdamW",
                                    "trainer.contract.atomic_files.write_atomic", "trainer.data.MockDataset",
                                    "torch.optim.__builtins__", "trainer._private", "notdotted"])
def test_targets_outside_the_registry_are_refused_without_import(target):
    before = set(sys.modules)
    with pytest.raises(ConfigError, match="optimizer._target_"):
        resolve_target(target, "optimizer")
    first = target.split(".")[0]
    if first not in before and first not in ("torch", "trainer"):
        assert first not in sys.modules, f"{first} was imported while refusing {target}"


def test_registered_targets_resolve_in_their_section_only():
    import torch

    from trainer.loss import causal_lm_loss

    assert resolve_target("torch.optim.AdamW", "optimizer") is torch.optim.AdamW
    assert resolve_target("trainer.loss.causal_lm_loss", "loss_fn") is causal_lm_loss
    assert check_target("trainer.data.MockDataset", "dataset") == "trainer.data.MockDataset"
    with pytest.raises(ConfigError, match=r"^loss_fn\._target_: torch\.nn\.CrossEntropyLoss is not a registered "
                                          r"loss_fn callable.*nearest: trainer\.loss\.causal_lm_loss"):
        resolve_target("torch.nn.CrossEntropyLoss", "loss_fn")


def test_instantiate_passes_kwargs_and_only_accepted_defaults():
    ds = instantiate({"_target_": "trainer.data.MockDataset", "seq_length": 8, "num_samples": 4}, "dataset",
                     vocab_size=32, not_a_parameter=1)
    assert len(ds) == 4 and ds.vocab_size == 32


def test_instantiate_unknown_kwarg_names_the_section():
    with pytest.raises(ConfigError, match=r"dataset: trainer.data.MockDataset takes no argument\(s\) sequence"):
        instantiate({"_target_": "trainer.data.MockDataset", "sequence": 8}, "dataset", vocab_size=32)


def test_instantiate_field_error_is_prefixed_with_the_section(tmp_path):
    with pytest.raises(ConfigError, match=r"^dataset\.path: file .*missing\.jsonl' not found"):
        instantiate({"_target_": "trainer.data.JsonlSFTDataset", "path": str(tmp_path / "missing.jsonl"),
                     "seq_length": 8}, "dataset")


# ---- pre-flight --------------------------------------------------------------------------------

def _config(tmp_path: Path, **changes) -> Path:
    cfg = yaml.safe_load((BUNDLED / "tiny_llama_pretrain.yaml").read_text())
    cfg["checkpoint"]["checkpoint_dir"] = str(tmp_path / "ckpt")
    for dotted, value in changes.items():
        node = cfg
        *parents, leaf = dotted.split("__")
        for part in parents:
            node = node.setdefault(part, {})
        node[leaf] = value
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


@pytest.mark.parametrize("changes,world,needle", [
    ({"step_scheduler__local_batch_size": 3}, 2, "step_scheduler.local_batch_size: global_batch_size 16"),
    ({"distributed__strategy": "megatron"}, 2, "distributed.strategy: megatron"),
    ({"distributed__pp_size": 4}, 2, "distributed.pp_size: tp_size x cp_size x pp_size = 1 x 1 x 4 = 4 does not"),
    ({"distributed__tp_size": 3}, 2, "distributed.tp_size: 3 does not divide the world size 2"),
    ({"dataset": {"_target_": "trainer.data.JsonlSFTDataset", "path": "no/such.jsonl", "seq_length": 8}}, 2,
     "dataset.path: file 'no/such.jsonl' not found"),
    ({"restore_from": {"path": "epoch_9_step_9"}}, 2, "restore_from.path: 'epoch_9_step_9' does not exist"),
    ({"optimizer": {"_target_": "os.system", "command": "true"}}, 2,
     "optimizer._target_: os.system is not a registered optimizer callable"),
    ({"step_scheduler__global_batch": 3}, 2, "step_scheduler.global_batch: unknown key"),
    ({"dataset": {"preset": "squad", "seq_length": 64}}, 2, "dataset.preset: 'squad' is a Megatron Bridge dataset"),
    ({"validation_dataset": {"seq_length": 64}}, 2, "validation_dataset._target_: missing"),
    # found by the workers after importing torch before; closed sets, checked here
    ({"model__kernels": "foo"}, 2, "model.kernels: Input should be 'auto', 'torch', 'liger' or 'reference'"),
    ({"model__dtype": "float7"}, 2, "model.dtype: Input should be 'float32', 'fp32', 'bfloat16'"),
    ({"model__attn_implementation": "flash9"}, 2, "model.attn_implementation: 'flash9' is not one of sdpa, eager"),
    ({"model__flash": True}, 2, "model: unknown key(s) flash; the default loader takes"),
    ({"model__pretrained_model_name_or_path": "nope"}, 2,
     "model.pretrained_model_name_or_path: 'nope' is not a local folder or config.json, not a bundled model"),
    ({"peft": {"target_modules": ["nope"]}}, 2, "peft.target_modules: ['nope'] matches no linear layer"),
    # a bare string other than all-linear is a typo for a list, not a module name
    ({"peft": {"target_modules": "q_proj"}}, 2,
     "peft.target_modules: Input should be a list of module names (q_proj, v_proj, ...) or 'all-linear' "
     "(got 'q_proj')"),
    ({"precision": "fp8"}, 2, "precision: fp8 runs torchao float8 GEMMs on CUDA GPUs"),
])
def test_preflight_refuses_bad_configs_naming_the_key(tmp_path, monkeypatch, changes, world, needle):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")  # "not in the hub cache" is certain only offline
    with pytest.raises(ConfigError) as err:
        _, cfg = load_config(str(_config(tmp_path, **changes)), [])
        preflight(cfg, world)
    assert needle in str(err.value)
    assert not (tmp_path / "ckpt").exists()


def test_preflight_takes_all_linear_targets(tmp_path):
    _, cfg = load_config(str(_config(tmp_path, peft={"target_modules": "all-linear"})), [])
    preflight(cfg, 2)
    assert cfg.peft.target_modules == "all-linear"


@pytest.mark.parametrize("path", sorted(BUNDLED.glob("*.yaml")), ids=lambda p: p.name)
def test_bundled_recipes_pass_preflight(path):
    _, cfg = load_config(str(path), [])
    assert cfg.metadata.kind == "bundled" and cfg.metadata.hardware == "cpu"
    preflight(cfg, cfg.metadata.num_gpus)


# ---- recipe-advisor train ----------------------------------------------------------------------

def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "service.cli.app", "train", *args], cwd=REPO,
                          capture_output=True, text=True, timeout=60)


def test_train_dry_run_builds_the_torchrun_command():
    recipe = str(BUNDLED / "tiny_llama_pretrain.yaml")
    out = _cli(recipe, "--nproc-per-node", "2", "--optimizer.lr", "1e-4", "--dry-run")
    assert out.returncode == 0, out.stderr
    cmd = out.stdout.strip()
    assert "-m torch.distributed.run --nproc-per-node=2 --standalone -m trainer" in cmd
    assert cmd.endswith(f"{recipe} --optimizer.lr 1e-4")


def test_train_multinode_dry_run_uses_c10d():
    out = _cli(str(BUNDLED / "tiny_llama_pretrain.yaml"), "--nproc-per-node=2", "--nnodes", "2",
               "--rdzv-endpoint", "node0:29400", "--node-rank", "1", "--dry-run")
    assert out.returncode == 0, out.stderr
    assert "--nnodes=2 --rdzv-backend=c10d --rdzv-endpoint=node0:29400" in out.stdout
    assert "--node-rank=1" in out.stdout and "--standalone" not in out.stdout


def test_train_bad_config_stops_in_the_launcher(tmp_path):
    out = _cli(str(_config(tmp_path)), "--nproc-per-node", "2", "--step_scheduler.local_batch_size", "3")
    assert out.returncode == 2
    assert "error: step_scheduler.local_batch_size" in out.stderr
    assert "Traceback" not in out.stderr
    assert not (tmp_path / "ckpt").exists()


def test_train_refuses_a_target_that_does_not_exist_before_any_worker(tmp_path, capsys, monkeypatch):
    from service.cli.train import run_argv
    from trainer.contract import target_registry

    code = run_argv([str(_config(tmp_path)), "--dataset._target_", "trainer.data.Nope", "--dry-run"])
    assert code == 2
    assert ("error: dataset._target_: trainer.data.Nope is not a registered dataset callable; configs are data and "
            "may name only the registry's; nearest: trainer.data.MockDataset") in capsys.readouterr().err
    # A registered name this install lacks (torch.optim.Muon before torch 2.9) is found missing before launch.
    missing = target_registry.Registered("trainer.data.Nope", ("seq_length",))
    monkeypatch.setitem(target_registry.REGISTRY, "dataset", (*target_registry.DATASETS, missing))
    code = run_argv([str(_config(tmp_path)), "--dataset._target_", "trainer.data.Nope", "--dry-run"])
    assert code == 2
    assert "error: dataset._target_: trainer.data.Nope cannot be found (Nope is not defined in trainer.data)" in \
        capsys.readouterr().err


def test_train_checks_the_checkpoint_dir_before_launching(tmp_path, capsys):
    from service.cli.train import run_argv

    blocker = tmp_path / "a_file"
    blocker.write_text("")
    code = run_argv([str(_config(tmp_path)), "--nproc-per-node", "2", "--step_scheduler.max_steps", "1",
                     "--checkpoint.checkpoint_dir", str(blocker / "ckpt")])
    err = capsys.readouterr().err
    assert code == 2
    [error] = [line for line in err.splitlines() if line.startswith("error:")]  # after validate's warnings
    assert error.startswith(f"error: checkpoint.checkpoint_dir: cannot create '{blocker / 'ckpt'}' (Not a directory)")


def _failure(local_rank: int, exitcode: int):
    from torch.distributed.elastic.multiprocessing.errors import ProcessFailure

    return ProcessFailure(local_rank=local_rank, pid=1000 + local_rank, exitcode=exitcode, error_file="")


@pytest.mark.parametrize("codes,expected", [((2, 2), 2), ((2, -15), 2), ((1, -15), 1), ((2, 1), 1), ((-9,), 1)])
def test_worker_exit_codes_map_to_the_launchers(capsys, codes, expected):
    from service.cli.train import exit_code_of_failures

    assert exit_code_of_failures({rank: _failure(rank, code) for rank, code in enumerate(codes)}) == expected
    err = capsys.readouterr().err
    if expected == 2:
        assert err == "", "the workers printed the config error; the launcher adds nothing"
    else:
        assert err.count("error: trainer rank") == len(codes)
        assert ("killed by SIGKILL" in err) == (-9 in codes)


def test_torch_free_model_names_match_the_decoder():
    import torch

    from trainer.contract.model_checks import dtype_name
    from trainer.models import CausalLM, resolve_config
    from trainer.models.config import DTYPES, LINEAR_MODULES

    config, _ = resolve_config("tiny-llama")
    with torch.device("meta"):
        model = CausalLM(config)
    leaves = {name.rsplit(".", 1)[-1] for name, module in model.named_modules() if isinstance(module, torch.nn.Linear)}
    assert leaves == set(LINEAR_MODULES)
    assert {getattr(torch, name) for name in DTYPES.values()} == {torch.float32, torch.bfloat16, torch.float16}
    assert dtype_name("torch.bfloat16") == "bfloat16"


def test_preflight_stays_torch_free():
    code = ("import sys; from trainer.contract.preflight import load_config, preflight; "
            f"_, cfg = load_config({str(BUNDLED / 'tiny_llama_peft.yaml')!r}, []); preflight(cfg, 2); "
            "assert 'torch' not in sys.modules, 'preflight imported torch'")
    result = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr


def test_mock_preset_maps_to_the_mock_dataset():
    from trainer.contract.builders import dataset_call
    from trainer.contract.config import DatasetSection

    section = DatasetSection.model_validate({"preset": "mock", "seq_length": 64, "packed_sequence": True})
    assert dataset_call(section, "dataset") == {"_target_": "trainer.data.MockDataset", "seq_length": 64}


# ---- optimizer hyper-parameters are typed --------------------------------------------------------

@pytest.mark.parametrize("key, value", [
    ("lr", "abc"), ("lr", -1), ("lr", 0), ("lr", "'[1, 2'"), ("lr", ".inf"), ("lr", "true"), ("lr", "null"),
    ("weight_decay", -0.1), ("eps", "tiny"), ("betas", "[0.9, 1.0]"), ("betas", "[0.9]"), ("momentum", -1),
])
def test_bad_optimizer_values_are_ra_c002_at_their_line(key, value):
    from service.validate.document import validate_text

    text = f"model:\n  pretrained_model_name_or_path: x\noptimizer:\n  _target_: torch.optim.AdamW\n  {key}: {value}\n"
    findings = [f for f in validate_text(text, "o.yaml").findings if f.code == "RA-C002"]
    assert [(f.key, f.line, f.severity) for f in findings] == [(f"optimizer.{key}", 5, "error")]


@pytest.mark.parametrize("value", ["abc", "-1", "[1, 2", "--5"])
def test_bad_lr_override_stops_before_any_worker_starts(tmp_path, value):
    out = _cli(str(_config(tmp_path)), "--nproc-per-node", "2", f"--optimizer.lr={value}", "--dry-run")
    assert out.returncode == 2
    assert "error:" in out.stderr and "optimizer.lr" in out.stderr
    assert "Traceback" not in out.stderr and "torch.distributed.run" not in out.stdout


def test_good_optimizer_values_reach_the_optimizer_unchanged():
    from trainer.contract.config import parse_config

    section = parse_config({"optimizer": {"_target_": "torch.optim.AdamW", "lr": "3e-4", "betas": [0.9, 0.95],
                                          "weight_decay": 0, "amsgrad": True}}).optimizer
    assert section.kwargs() == {"lr": 3e-4, "betas": (0.9, 0.95), "weight_decay": 0.0, "amsgrad": True}
    # keys the config leaves out stay out, so the optimizer's own defaults apply
    assert parse_config({"optimizer": {"_target_": "torch.optim.SGD", "lr": 0.1}}).optimizer.kwargs() == {"lr": 0.1}
    # Adafactor's eps is a pair (None or a number, a number), and it builds in torch
    import torch

    adafactor = parse_config({"optimizer": {"_target_": "torch.optim.Adafactor", "lr": 0.01,
                                            "eps": [None, 1e-3]}}).optimizer.kwargs()
    assert adafactor == {"lr": 0.01, "eps": (None, 1e-3)}
    torch.optim.Adafactor([torch.nn.Parameter(torch.zeros(2))], **adafactor)


@pytest.mark.parametrize("flag", ["--nproc-per-node", "--nnodes"])
@pytest.mark.parametrize("value", ["0", "-2"])
def test_train_refuses_zero_or_negative_process_counts(tmp_path, flag, value):
    out = _cli(str(_config(tmp_path)), flag, value, "--dry-run")
    assert out.returncode == 2
    assert flag in out.stderr and "at least 1" in out.stderr
    assert "Traceback" not in out.stderr and "torch.distributed.run" not in out.stdout


@pytest.mark.parametrize("text", ["model: &a {x: *a}\n", "model:\n  layers: &l [1, *l]\n"])
def test_trainer_loader_refuses_a_recursive_alias_with_its_line(tmp_path, text):
    from trainer.contract.overrides import load_yaml_file

    path = tmp_path / "r.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError, match=r"line \d+: recursive alias"):
        load_yaml_file(path)
    shared = tmp_path / "shared.yaml"
    shared.write_text("a: &a [1, 2]\nb: [*a, *a]\n")
    assert load_yaml_file(shared)["b"] == [[1, 2], [1, 2]]


def test_override_value_errors_name_the_flag():
    with pytest.raises(ConfigError, match=r"^override --optimizer\.lr: .*recursive alias"):
        apply_overrides({"optimizer": {"lr": 0.1}}, ["--optimizer.lr", "&a [*a]"])
    # what YAML reads as an impossible date is no YAML value: it stays the string given
    assert apply_overrides({}, ["--metadata.name", "2024-13-45"])["metadata"]["name"] == "2024-13-45"


@pytest.mark.parametrize("value", [True, 2.0])
def test_integer_settings_refuse_booleans_and_floats(value):
    """`tp_size: true` used to read as 1 and `2.0` as 2; a size written so is a typo."""
    from service.validate.document import validate_text

    text = f"distributed:\n  strategy: fsdp2\n  tp_size: {str(value).lower()}\n"
    bad = [f for f in validate_text(text, "c.yaml").findings if f.key == "distributed.tp_size"]
    assert bad and bad[0].severity == "error" and bad[0].line == 3


def test_optimizer_implementation_switches_are_booleans():
    from trainer.contract.config import RecipeConfig

    optimizer = {"_target_": "torch.optim.AdamW", "lr": 1e-3}
    ok = RecipeConfig.model_validate({"optimizer": {**optimizer, "foreach": False}})
    assert ok.optimizer.kwargs() == {"lr": 1e-3, "foreach": False}
    with pytest.raises(ValueError, match="optimizer.fused"):
        RecipeConfig.model_validate({"optimizer": {**optimizer, "fused": "abc"}})


@pytest.mark.parametrize("key, value", [("kernels", "foo"), ("dtype", "float7")])
def test_validate_refuses_model_settings_the_workers_would(key, value):
    """validate used to pass `model.kernels: foo`; the trainer's workers then exited 2 on it."""
    from service.validate.document import validate_text

    text = f"model:\n  pretrained_model_name_or_path: tiny-llama\n  {key}: {value}\n"
    bad = [f for f in validate_text(text, "c.yaml").findings if f.key == f"model.{key}"]
    assert bad and bad[0].code == "RA-C002" and bad[0].line == 3


def test_model_dtype_may_be_spelt_as_torch_names_it():
    from trainer.contract.config import RecipeConfig

    assert RecipeConfig.model_validate({"model": {"dtype": "torch.bfloat16"}}).model.kwargs() == {"dtype": "bfloat16"}


def test_validate_finds_every_trainer_models_name_and_takes_a_model_builder():
    """validate reads targets from source (never importing them): trainer.models' names must be visible."""
    import trainer.models
    from service.validate.document import validate_text
    from service.validate.rules.targets import signature_of

    for name in trainer.models.__all__:
        signature_of(f"trainer.models.{name}")  # raises TargetNotFound when the source hides it
    text = ("model:\n  _target_: trainer.models.build_causal_lm\n  pretrained_model_name_or_path: tiny-llama\n"
            "  dtype: bf16\n  kernels: torch\n")
    assert not [f for f in validate_text(text, "c.yaml").findings if f.code == "RA-S002"]
