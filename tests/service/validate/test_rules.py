"""Every rule: a config that breaks only that rule gets exactly that code.

Models are local config.json files made here (resolution by path), so the
cases do not depend on the bundled index's contents.
"""

import copy
import json

import pytest
import yaml

from service.validate.checks import all_rules
from service.validate.document import validate_text
from tests.service.validate.test_automodel_dialect import COVERED as AUTOMODEL_COVERED
from trainer.contract.dotted import set_dotted

# ~1.5B parameters: small enough that every layout here fits an 80 GB GPU (RA-M002 stays quiet)
DENSE = dict(model_type="llama", hidden_size=2048, num_hidden_layers=32, num_attention_heads=32,
             num_key_value_heads=8, head_dim=64, intermediate_size=5632, vocab_size=32000)
MOE = dict(DENSE, model_type="qwen3_moe", num_experts=64, num_experts_per_tok=8, moe_intermediate_size=768)
BIG = dict(DENSE, hidden_size=8192, num_hidden_layers=80, num_attention_heads=64, head_dim=128,
           intermediate_size=28672)
# ~39B parameters in 16 experts: over an 80 GB GPU at any EP that 8 GPUs hold
BIG_MOE = dict(DENSE, model_type="qwen3_moe", hidden_size=4096, num_hidden_layers=48, num_experts=16,
               num_experts_per_tok=2, moe_intermediate_size=4096)


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    root = tmp_path_factory.mktemp("models")

    def make(name, **cfg):
        folder = root / name
        folder.mkdir()
        (folder / "config.json").write_text(json.dumps(cfg))
        return str(folder)

    return {
        "dense": make("dense", **DENSE),
        "moe": make("moe", **MOE),
        "moe_unbuilt": make("moe_unbuilt", **dict(MOE, model_type="olmoe")),
        "moe60": make("moe60", **dict(MOE, num_experts=60)),
        "big": make("big", **BIG),
        "bigmoe": make("bigmoe", **BIG_MOE),
        "h20kv4": make("h20kv4", **dict(DENSE, num_attention_heads=20, num_key_value_heads=4)),
        "h48kv6": make("h48kv6", **dict(DENSE, num_attention_heads=48, num_key_value_heads=6)),
        "kv2": make("kv2", **dict(DENSE, num_key_value_heads=2)),
        "kv16": make("kv16", **dict(DENSE, num_key_value_heads=16)),
        "l21": make("l21", **dict(DENSE, num_hidden_layers=21)),
        "l30": make("l30", **dict(DENSE, num_hidden_layers=30)),
        "ctx2k": make("ctx2k", **dict(DENSE, max_position_embeddings=2048)),
    }


def base(model_path):
    return {
        "model": {"pretrained_model_name_or_path": model_path},
        "step_scheduler": {"global_batch_size": 64, "local_batch_size": 1, "max_steps": 10},
        "distributed": {"strategy": "megatron", "tp_size": 2, "sequence_parallel": True},
        "dataset": {"seq_length": 4096},
        "optimizer": {"_target_": "torch.optim.AdamW", "lr": 3e-4, "weight_decay": 0.1},
        "hardware": {"gpu_type": "h100", "gpus_per_node": 8, "num_nodes": 1},
        "precision": "bf16",
    }


def codes(config: dict) -> list[str]:
    report = validate_text(yaml.safe_dump(config, sort_keys=False), "case.yaml")
    return sorted(f.code for f in report.findings)


META = {"name": "case", "kind": "library", "mode": "pretrain", "num_gpus": 8}

# (code, model, {dotted key: value}); the bundled trainer's configs name their dataset (RA-E005)
MOCK = {"dataset._target_": "trainer.data.MockDataset"}
CASES = [
    ("RA-L001", "h20kv4", {"distributed.tp_size": 8}),
    ("RA-L002", "h48kv6", {"distributed.tp_size": 4}),
    ("RA-L003", "kv2", {"distributed.tp_size": 4}),
    ("RA-L004", "dense", {"distributed.tp_size": 1}),
    ("RA-L005", "dense", {"distributed.sequence_parallel": False}),
    ("RA-L006", "dense", {"distributed.tp_size": 4, "hardware.gpus_per_node": 6}),
    ("RA-L007", "moe", {"distributed.ep_size": 16}),
    ("RA-L008", "moe60", {"distributed.ep_size": 8, "distributed.etp_size": 1}),
    ("RA-L009", "dense", {"distributed.ep_size": 2}),
    ("RA-L010", "dense", {"distributed.vp_size": 2}),
    ("RA-L011", "l21", {"distributed.pp_size": 4, "distributed.vp_size": 2}),
    ("RA-L012", "moe", {"distributed.ep_size": 4, "distributed.sequence_parallel": False}),
    ("RA-L013", "dense", {"distributed.pp_size": 2}),
    ("RA-L014", "dense", {"distributed.cp_size": 2, "dataset.seq_length": 4098, "distributed.tp_size": 1,
                         "distributed.sequence_parallel": False}),  # TP 2 x CP 2 would not split 4098 (RA-L018)
    ("RA-L015", "kv16", {"distributed.tp_size": 16, "hardware.num_nodes": 2}),
    ("RA-L016", "dense", {"dataset.seq_length": 16384}),
    ("RA-L017", "dense", {"distributed.use_megatron_fsdp": True, "distributed.pp_size": 2,
                          "distributed.vp_size": 2}),
    ("RA-L018", "dense", {"dataset.seq_length": 4095}),
    ("RA-B001", "dense", {"step_scheduler.global_batch_size": 30}),
    ("RA-B002", "dense", {"step_scheduler.local_batch_size": 2, "dataset.packed_sequence": True}),
    ("RA-B003", "dense", {"dataset.enable_in_batch_packing": True}),
    ("RA-P001", "dense", {"hardware.gpu_type": "a100-80gb", "precision": "fp8"}),
    ("RA-P002", "dense", {"precision": "nvfp4"}),
    ("RA-P003", "dense", {"metadata": dict(META, precision_recipe="fp8mx"), "precision": "fp8"}),
    ("RA-P004", "dense", {"metadata": dict(META, precision_recipe="fp8sc"), "precision": "fp8",
                          "hardware.gpu_type": "l40s", "distributed.tp_size": 1,
                          "distributed.sequence_parallel": False}),
    ("RA-E001", "dense", {"distributed.strategy": "ddp", **MOCK, "distributed.tp_size": 2, "distributed.ep_size": 1}),
    ("RA-E002", "moe_unbuilt", {"distributed.strategy": "fsdp2", **MOCK}),
    ("RA-E007", "moe", {"distributed.strategy": "fsdp2", **MOCK}),  # TP 2 does not split the MoE layers
    ("RA-E008", "dense", {"distributed.strategy": "fsdp2", **MOCK, "distributed.pp_size": 2,
                          "distributed.vp_size": 2}),
    # Fewer micro batches (8 / (2 x DP 4) = 1) than the 2 pipeline stages: the pre-flight's refusal.
    ("RA-E009", "dense", {"distributed.strategy": "fsdp2", **MOCK, "distributed.tp_size": 1,
                          "distributed.sequence_parallel": False, "distributed.pp_size": 2, "distributed.vp_size": 2,
                          "step_scheduler.global_batch_size": 8, "step_scheduler.local_batch_size": 2}),
    ("RA-E004", "dense", {"distributed.strategy": "fsdp2", **MOCK,
                          "optimizer": {"_target_": "torch.optim.SGD", "lr": 0.01, "fused": True}}),
    ("RA-E003", "dense", {"distributed.strategy": "fsdp2", **MOCK, "hardware.gpu_type": "b200", "precision": "nvfp4"}),
    ("RA-E005", "dense", {"distributed.strategy": "fsdp2", **MOCK, "model.attn_implementation": "flash_attention_9"}),
    ("RA-E006", "dense", {"hardware.gpu_type": "cpu", "distributed.tp_size": 1,
                          "distributed.sequence_parallel": False}),
    ("RA-M001", "big", {"distributed.tp_size": 1, "distributed.sequence_parallel": False,
                        "hardware.gpus_per_node": 1}),
    ("RA-M002", "big", {"distributed.tp_size": 8}),
    ("RA-C001", "dense", {"step_scheduler.max_stepz": 10}),
    ("RA-C002", "dense", {"step_scheduler.local_batch_size": "two"}),
    ("RA-C004", "dense", {"model.seq_length": 8192}),
    ("RA-C005", "dense", {"metadata": dict(META, megatron_recipe="m_pretrain_8gpu_h100_bf16_config",
                                           precision_recipe="fp8cs")}),
    ("RA-C006", "dense", {"metadata": dict(META, num_gpus=16)}),
    ("RA-C007", "dense", {"metadata": dict(META, mode="sft"), "dataset.preset": "mock"}),
    ("RA-C008", "dense", {"metadata": dict(META, mode="peft")}),
    ("RA-C009", None, {"model.pretrained_model_name_or_path": "no-such-model-xyz"}),
    ("RA-C010", "dense", {"hardware.gpu_type": "tpu-v9"}),
    ("RA-C011", "ctx2k", {}),  # base seq 4096 > 2048 positions
    ("RA-C012", "dense", {"hardware.gpus_per_node": 16}),  # an h100 node has 8
    ("RA-C013", "dense", {"lr_scheduler": {"min_lr": 1.0}}),  # above optimizer.lr 3e-4
    ("RA-D001", "dense", {"distributed.strategy": "fsdp2", "model.load_weights": True,
                          "dataset": {"_target_": "trainer.data.JsonlSFTDataset", "path": "sft.jsonl",
                                      "seq_length": 4096}}),
    ("RA-D002", "dense", {"distributed.strategy": "fsdp2",  # 64 samples: 1 step of 64 per epoch, max_steps 10
                          "dataset": {"_target_": "trainer.data.MockDataset", "seq_length": 4096, "num_samples": 64}}),
    ("RA-D003", "dense", {"distributed.strategy": "fsdp2",  # 32 samples under one global batch of 64
                          "dataset": {"_target_": "trainer.data.MockDataset", "seq_length": 4096, "num_samples": 32}}),
    ("RA-D004", "dense", {"distributed.strategy": "fsdp2",  # 3 samples: under 1 for each of 4 ranks
                          "dataset": {"_target_": "trainer.data.MockDataset", "seq_length": 4096, "num_samples": 640},
                          "validation_dataset": {"_target_": "trainer.data.MockDataset", "seq_length": 4096,
                                                 "num_samples": 3}}),
    ("RA-D005", "dense", {"dataset.sequence_length": 8192}),
    ("RA-G001", "dense", {"model.cuda_graph_impl": "transformer_engine", "model.use_te_rng_tracker": True,
                          "distributed.activation_checkpointing": "full"}),
    ("RA-G002", "dense", {"model.cuda_graph_impl": "transformer_engine"}),
    ("RA-G003", "dense", {"model.cuda_graph_impl": "transformer_engine", "model.use_te_rng_tracker": True,
                          "dataset.packed_sequence": True}),
    ("RA-G004", "dense", {"distributed.use_megatron_fsdp": True, "distributed.tp_size": 4}),
    ("RA-G005", "moe", {"model.overlap_grad_reduce": True}),
    ("RA-G006", "kv2", {"distributed.tp_size": 1, "distributed.sequence_parallel": False, "distributed.cp_size": 4,
                        "model.cp_comm_type": "a2a"}),
    ("RA-S001", "dense", {"loss_fn": {"_target_": "os.system", "command": "rm -rf /"}}),
    ("RA-S002", "dense", {"optimizer.lrr": 1e-3}),
    ("RA-S003", "dense", {"checkpoint.checkpoint_dir": "../../.config/autostart"}),
]


def test_base_config_is_clean(models):
    assert codes(base(models["dense"])) == []
    moe = {"strategy": "megatron", "tp_size": 2, "ep_size": 8, "sequence_parallel": True}
    assert codes(base(models["moe"]) | {"distributed": moe | {"etp_size": 1}}) == []
    # etp_size unset: Megatron Bridge before v0.6.0 reads it as TP (a 16-GPU expert mesh on 8): a warning
    assert codes(base(models["moe"]) | {"distributed": moe}) == ["RA-L007"]
    assert codes(base(models["moe"]) | {"distributed": moe, "metadata": {"bridge_version": "0.6.0"}}) == []


@pytest.mark.parametrize("code, model, changes", CASES, ids=[c[0] for c in CASES])
def test_each_rule_fires_alone(models, code, model, changes, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    config = base(models[model or "dense"])
    for key, value in changes.items():
        set_dotted(config, key, copy.deepcopy(value))
    assert codes(config) == sorted([code, *ALSO_FIRES.get(code, ())])


# KV heads divide the attention heads in every valid config.json (a card with 20 heads and 8 KV heads
# is refused), so a TP that does not divide the heads cannot divide the KV heads either:
# on a valid model RA-L001 comes with RA-L003 (TP 8 over 4 KV heads replicates them).
ALSO_FIRES = {"RA-L001": ("RA-L003",)}


def test_every_registered_rule_has_a_case():
    covered = {c[0] for c in CASES} | {"RA-C003", "RA-C014"}  # raw YAML / the --gpus flag: tests below
    covered |= {"RA-L019"}  # needs a bundled model with a layout table: tests/service/validate/test_pipeline_split.py
    covered |= {"RA-G007"}  # needs a bundled vision-language model: tests/service/validate/test_pitfall_rules.py
    covered |= {"RA-C015"}  # a Megatron Bridge ConfigContainer's peft: tests/service/validate/test_bridge_peft.py
    covered |= AUTOMODEL_COVERED  # AutoModel recipes: tests/service/validate/test_automodel_dialect.py
    registered = {r.code for r in all_rules()}
    assert registered == covered, registered ^ covered


def test_duplicate_key_rule_points_at_the_second_key(models):
    text = yaml.safe_dump(base(models["dense"]), sort_keys=False) + "precision: bf16\n"
    report = validate_text(text, "dup.yaml")
    assert [(f.code, f.line) for f in report.findings] == [("RA-C003", text.count("\n"))]


def test_megatron_split_error_names_the_split(models):
    config = base(models["l30"])
    set_dotted(config, "distributed.pp_size", 4)
    set_dotted(config, "distributed.vp_size", 2)
    findings = validate_text(yaml.safe_dump(config), "w.yaml").findings
    assert [(f.code, f.severity) for f in findings] == [("RA-L011", "error")]
    assert "account_for_embedding_in_pipeline_split=true" in findings[0].fix
    assert findings[0].key == "model.account_for_embedding_in_pipeline_split"  # the key its fix sets


def test_target_outside_allow_list_is_never_imported(models, monkeypatch):
    import sys

    config = base(models["dense"])
    config["loss_fn"] = {"_target_": "antigravity.fly"}
    monkeypatch.delitem(sys.modules, "antigravity", raising=False)
    report = validate_text(yaml.safe_dump(config), "t.yaml")
    assert [f.code for f in report.findings] == ["RA-S001"]
    assert "antigravity" not in sys.modules


def test_unknown_key_gets_did_you_mean_and_line(models):
    text = yaml.safe_dump(base(models["dense"]), sort_keys=False).replace("max_steps", "max_stepz")
    (finding,) = validate_text(text, "k.yaml").findings
    assert finding.code == "RA-C001" and "max_steps" in finding.fix
    assert text.splitlines()[finding.line - 1].strip().startswith("max_stepz")


def test_findings_carry_numbers_and_fix(models):
    config = base(models["dense"])
    set_dotted(config, "step_scheduler.global_batch_size", 30)
    (finding,) = validate_text(yaml.safe_dump(config), "b.yaml").findings
    assert "30" in finding.message and "4" in finding.message
    assert "28" in finding.fix and "32" in finding.fix


def test_check_layout_uses_every_rule_even_when_one_module_was_imported_first():
    import subprocess
    import sys

    code = ("from service.validate.rules import layout\n"
            "from service.facts import Facts, Layout\n"
            "from service.validate.checks import check_layout\n"
            "f = Facts(layout=Layout(tp=2), world_size=2, strategy='ddp')\n"
            "print(sorted(x.code for x in check_layout(f)))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert "RA-E001" in out


def test_memory_fit_counts_the_logits_when_the_chunked_loss_is_off(tmp_path):
    """The bundled trainer's fused loss never holds [tokens, vocab] logits; `loss_fn.chunked: false`
    (or another loss) does, and the memory-fit rule must see it (service/validate/document.py _fused_loss)."""
    folder = tmp_path / "wide-vocab"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(dict(DENSE, vocab_size=256_000)))
    config = base(str(folder))
    for key, value in {"distributed.strategy": "fsdp2", "distributed.tp_size": 1,
                       "distributed.sequence_parallel": False, "distributed.activation_checkpointing": "full",
                       "step_scheduler.local_batch_size": 8, "step_scheduler.global_batch_size": 64}.items():
        set_dotted(config, key, value)
    assert "RA-M002" not in codes(config)
    set_dotted(config, "loss_fn.chunked", False)  # 8 x 4096 tokens x 256k vocab of fp32 logits: ~80 GB
    assert "RA-M002" in codes(config)


@pytest.mark.parametrize("gpu, tp, expected, key", [
    ("h100", 1, [], None),  # torchao float8 on Hopper, data parallel only: runs
    ("h100", 2, ["RA-E003"], "distributed.tp_size"),
    ("a100-80gb", 1, ["RA-E003", "RA-P001"], "precision"),
])
def test_bundled_fp8_follows_the_trainer_capabilities(models, gpu, tp, expected, key):
    config = base(models["dense"])
    config["distributed"] = {"strategy": "fsdp2", "tp_size": tp, "sequence_parallel": tp > 1}
    config["dataset"]["_target_"] = "trainer.data.MockDataset"
    config["hardware"]["gpu_type"] = gpu
    config["precision"] = "fp8"
    report = validate_text(yaml.safe_dump(config, sort_keys=False), "case.yaml")
    assert sorted(f.code for f in report.findings) == expected
    e003 = [f for f in report.findings if f.code == "RA-E003"]
    if e003:
        assert e003[0].key == key and e003[0].fix


def test_seq_length_beyond_context_is_a_warning_naming_both_numbers(models):
    config = base(models["ctx2k"])
    config["dataset"]["seq_length"] = 2048
    assert codes(config) == []  # exactly at the limit is fine
    del config["dataset"]["seq_length"]
    config["model"]["seq_length"] = 3000  # only the model's length set: that is the one judged
    [finding] = validate_text(yaml.safe_dump(config, sort_keys=False), "ctx.yaml").findings
    assert (finding.code, finding.severity, finding.key) == ("RA-C011", "warning", "model.seq_length")
    assert "3000" in finding.message and "2048" in finding.message
    assert "lower model.seq_length" in finding.fix and "RoPE scaling" in finding.fix
    assert finding.line == 3  # points at the key in the file


def test_seq_length_rule_mentions_the_models_rope_scaling(tmp_path):
    folder = tmp_path / "yarn"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(dict(
        DENSE, max_position_embeddings=2048, rope_scaling={"rope_type": "yarn", "factor": 4.0})))
    report = validate_text(yaml.safe_dump(base(str(folder)), sort_keys=False), "yarn.yaml")
    [finding] = [f for f in report.findings if f.code == "RA-C011"]
    assert finding.severity == "warning" and "`yarn`" in finding.message


def test_unknown_model_finding_says_what_went_wrong_once(models, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    config = base(models["dense"])
    config["model"]["pretrained_model_name_or_path"] = "llama3-8x"
    report = validate_text(yaml.safe_dump(config, sort_keys=False), "case.yaml")
    finding = next(f for f in report.findings if f.code == "RA-C009")
    assert ".;" not in finding.message and "Pass a bundled id" not in finding.message  # the fix is separate
    assert "llama3-8b" in finding.message and "Hugging Face" in finding.fix


def findings_of(config: dict):
    return validate_text(yaml.safe_dump(config, sort_keys=False), "case.yaml").findings


def with_changes(model_path: str, changes: dict) -> dict:
    config = base(model_path)
    for key, value in changes.items():
        set_dotted(config, key, copy.deepcopy(value))
    return config


# (megatron_recipe, precision_recipe, precision) -> the RA-C005 key, or None when consistent
@pytest.mark.parametrize("recipe, label, precision, key", [
    # the label agrees with the name, but the config trains in bf16: the label must not hide it
    ("m_sft_8gpu_h100_fp8cs_config", "fp8cs", "bf16", "precision"),
    ("m_pretrain_8gpu_h100_fp8mx_config", "fp8mx", "fp8", None),
    ("m_pretrain_8gpu_h100_bf16_config", "bf16", "bf16", None),
    (None, "fp8cs", "bf16", "metadata.precision_recipe"),  # no name: the label alone is still judged
    ("m_pretrain_8gpu_h100_fp8cs_config", "fp8mx", "fp8", "metadata.precision_recipe"),  # FP8 recipes differ
    ("m_pretrain_8gpu_h100_bf16_config", "fp8cs", "fp8", "precision"),  # Bridge's nemotronh *_bf16 recipes
    ("m_pretrain_8gpu_h100_nvfp4_config", None, "bf16", "precision"),
])
def test_name_precision_is_judged_against_the_precision_that_trains(models, recipe, label, precision, key):
    meta = dict(META, **{k: v for k, v in (("megatron_recipe", recipe), ("precision_recipe", label)) if v})
    found = [f for f in findings_of(with_changes(models["dense"], {"metadata": meta, "precision": precision}))
             if f.code == "RA-C005"]
    assert [f.key for f in found] == ([key] if key else [])
    if found:
        assert precision in found[0].message and found[0].fix and found[0].line is not None


@pytest.mark.parametrize("recipe, variant", [
    ("llama3_8b_pretrain_2gpu_h100_bf16_config", "Bridge's fp8cs variant, llama3_8b_pretrain_2gpu_h100_fp8cs_config"),
    ("m_pretrain_8gpu_h100_bf16_config", "Bridge's *_fp8cs recipes, where Bridge has one for this model"),  # unindexed
])
def test_name_precision_fix_points_at_the_variant_in_the_labels_precision(models, recipe, variant):
    meta = dict(META, megatron_recipe=recipe, precision_recipe="fp8cs")
    [finding] = [f for f in findings_of(with_changes(models["dense"], {"metadata": meta, "precision": "fp8"}))
                 if f.code == "RA-C005"]
    # megatron_recipe is Bridge's function: not renamed, but swapped for its variant in the label's precision,
    # named only where the index holds it
    assert "set precision: bf16" in finding.fix and variant in finding.fix and "rename" not in finding.fix


@pytest.mark.parametrize("gpu, label, precision, expected", [
    ("h100", "fp8mx", "fp8", ["RA-P003"]),
    ("l40s", "fp8mx", "fp8", ["RA-P003"]),  # Ada: FP8, but no MXFP8
    ("l40s", "fp8sc", "fp8", ["RA-P004"]),  # Ada: FP8, but no blockwise FP8
    ("h100", "fp8sc", "fp8", []),
    ("a100-80gb", "fp8sc", "fp8", ["RA-P001"]),
    ("b200", "fp8mx", "fp8", []),
    ("gb200", "fp8mx", "fp8", []),
    ("vr200", "fp8mx", "fp8", []),
    ("h100", "fp8cs", "fp8", []),
    ("a100-80gb", "fp8mx", "fp8", ["RA-P001"]),  # no FP8 at all: one finding, not two
    ("h100", "nvfp4", "fp8", ["RA-C005", "RA-P002"]),  # the label asks for FP4 that the GPU lacks
])
def test_precision_recipe_label_is_checked_against_the_gpu(models, gpu, label, precision, expected):
    config = with_changes(models["dense"], {"metadata": dict(META, precision_recipe=label), "precision": precision,
                                            "hardware.gpu_type": gpu, "distributed.tp_size": 1,
                                            "distributed.sequence_parallel": False})
    if gpu in ("gb200", "vr200"):  # NVL72 racks: 4 GPUs per node
        config["hardware"].update(gpus_per_node=4, num_nodes=2)
    found = findings_of(config)
    assert sorted(f.code for f in found if f.code not in ("RA-C006", "RA-M002")) == expected
    for finding in found:
        if finding.code in ("RA-P003", "RA-P004"):
            assert finding.severity == "error" and finding.key == "metadata.precision_recipe"
            assert "fp8cs" in finding.fix and "b200" in finding.fix and gpu in finding.message
            assert (finding.code == "RA-P004") == ("h200" in finding.fix)  # blockwise FP8 runs on Hopper
        if finding.code == "RA-P001" and label == "fp8mx":
            assert "b200" in finding.fix and "MXFP8" in finding.fix  # not "an H100-class GPU"
        if finding.code == "RA-P002":
            assert finding.key == "metadata.precision_recipe" and "nvfp4" in finding.message


def _fix_of(findings, code):
    return next(f.fix for f in findings if f.code == code)


def test_long_context_fix_on_the_bundled_trainer_names_the_cp_it_runs(models):
    config = with_changes(models["dense"], {"distributed": {"strategy": "fsdp2"}, "dataset.seq_length": 16384})
    fix = _fix_of(findings_of(config), "RA-L016")
    assert "cp_size to 2 or 4 or 8" in fix
    # applying it adds no error: the fix fixes, it does not trade findings
    set_dotted(config, "distributed.cp_size", 2)
    found = findings_of(config)
    assert "RA-L016" not in [f.code for f in found]
    assert [f.code for f in found if f.severity == "error"] == []


def test_long_context_fix_on_megatron_offers_only_the_cp_sizes_the_world_holds(models):
    config = with_changes(models["dense"], {"dataset.seq_length": 16384, "hardware.gpus_per_node": 4})
    fix = _fix_of(findings_of(config), "RA-L016")  # TP 2 on 4 GPUs: CP 2 fits, CP 4 and 8 do not
    assert "cp_size to 2 (" in fix
    set_dotted(config, "distributed.cp_size", 2)
    assert "RA-L016" not in [f.code for f in findings_of(config)]


@pytest.mark.parametrize("model, distributed, present, absent", [
    # bundled fsdp2: pipeline stages, TP, recompute and more GPUs are real options; EP is not
    ("big", {"strategy": "fsdp2"}, ["tp_size to 2", "pp_size to 2", "activation_checkpointing", "more GPUs"],
     ["ep_size"]),
    # EP 8 already spans the 8 GPUs (PP*EP*ETP = world): neither EP nor PP can grow
    ("bigmoe", {"strategy": "megatron", "ep_size": 8}, ["tp_size to 2", "use_megatron_fsdp"], ["ep_size", "pp_size"]),
    # EP 2 of 16 experts on 8 GPUs: EP 4 fits, and so does PP 2
    ("bigmoe", {"strategy": "megatron", "ep_size": 2}, ["ep_size to 4", "pp_size to 2"], []),
])
def test_memory_fix_names_only_sizes_the_engine_runs_and_the_world_holds(models, model, distributed, present,
                                                                          absent):
    config = with_changes(models[model], {"distributed": distributed})
    fix = _fix_of(findings_of(config), "RA-M002")
    for text in present:
        assert text in fix
    for text in absent:
        assert text not in fix


def test_mxfp8_named_only_by_the_bridge_recipe_is_checked_too(models):
    """Without metadata.precision_recipe, the recipe run_recipe.py loads (its name's token) decides."""
    meta = dict(META, megatron_recipe="m_pretrain_8gpu_h100_fp8mx_config")
    found = findings_of(with_changes(models["dense"], {"metadata": meta, "precision": "fp8",
                                                       "distributed.tp_size": 1,
                                                       "distributed.sequence_parallel": False}))
    [finding] = [f for f in found if f.code != "RA-M002"]
    assert (finding.code, finding.key) == ("RA-P003", "metadata.megatron_recipe")
    assert "m_pretrain_8gpu_h100_fp8mx_config" in finding.message


def test_kv_replication_fix_on_the_bundled_trainer_names_no_pipeline_or_context_parallel(models):
    megatron = with_changes(models["kv2"], {"distributed.tp_size": 4})
    assert "add PP/CP" in _fix_of(findings_of(megatron), "RA-L003")
    bundled = with_changes(models["kv2"], {"distributed.tp_size": 4, "distributed.strategy": "fsdp2"})
    fix = _fix_of(findings_of(bundled), "RA-L003")
    assert "PP" not in fix and "CP" not in fix and "FSDP2" in fix


def test_lr_schedule_warmup_past_the_run_and_min_lr_above_lr(models):
    config = base(models["dense"]) | {"lr_scheduler": {"min_lr": 1.0, "warmup_steps": 100}}
    set_dotted(config, "step_scheduler.max_steps", 50)
    report = validate_text(yaml.safe_dump(config, sort_keys=False), "case.yaml")
    found = {(f.code, f.key) for f in report.findings}
    assert found == {("RA-C013", "lr_scheduler.min_lr"), ("RA-C013", "lr_scheduler.warmup_steps")}


@pytest.mark.parametrize("schedule, max_steps", [
    ({"schedule": "constant", "min_lr": 1.0}, 50),  # min_lr is never used
    ({"warmup_steps": 100, "decay_steps": 50}, 1000),  # decay_steps count after the warmup
    ({"warmup_steps": 50}, 50),  # the peak is reached on the last step
])
def test_lr_schedules_that_are_fine_get_no_warning(models, schedule, max_steps):
    config = base(models["dense"]) | {"lr_scheduler": schedule}
    set_dotted(config, "step_scheduler.max_steps", max_steps)
    report = validate_text(yaml.safe_dump(config, sort_keys=False), "case.yaml")
    assert not [f for f in report.findings if f.code == "RA-C013"]


def test_ddp_with_tensor_parallel_is_refused_as_the_trainer_refuses_it(models):
    config = base(models["dense"])
    for key, value in {"distributed.strategy": "ddp", "distributed.tp_size": 2}.items():
        set_dotted(config, key, value)
    report = validate_text(yaml.safe_dump(config, sort_keys=False), "case.yaml")
    [finding] = [f for f in report.findings if f.code == "RA-E001"]
    assert finding.key == "distributed.tp_size" and "fsdp2" in finding.fix


def test_megatron_fsdp_shards_the_weights_so_no_whole_copy_is_kept(models):
    # Found scoring held-out expert layouts (benchmarks/README.md): Llama 3.1 70B at TP1 PP1 with
    # Megatron-FSDP on 64 H100 was refused by RA-M001 as if every GPU kept the whole model, in validate
    # and in the planner, which then never offered the layout the experts run.
    from recipe_index import get_hardware, resolve_model
    from service.plan.planner import make_request, plan

    sharded = {"distributed.tp_size": 1, "distributed.sequence_parallel": False, "hardware.gpus_per_node": 8,
               "distributed.use_megatron_fsdp": True}
    config = base(models["big"])
    for key, value in sharded.items():
        set_dotted(config, key, value)
    assert "RA-M001" not in codes(config)
    set_dotted(config, "distributed.use_megatron_fsdp", False)
    assert "RA-M001" in codes(config)  # the distributed optimizer keeps whole weights per GPU
    req = make_request(resolve_model("llama31-70b"), 64, get_hardware("h100").name, seq_length=8192,
                       global_batch_size=128, precision="fp8", engine="megatron")
    flat = [row for row in plan(req).fitting if (row.layout.tp, row.layout.pp) == (1, 1)]
    assert flat and all(row.sharding == "full" for row in flat)


@pytest.mark.parametrize("gpus, nodes, judged, reading", [
    (8, None, 32, "--gpus 8 (API: gpus) was read as GPUs per node, on the file's 4 nodes"),
    (16, None, 16, "--gpus 16 (API: gpus) was read as the total: 2 nodes of 8"),
    (8, 4, None, None),     # --nodes leaves one reading
    (16, 1, None, None),
])
def test_the_reading_of_gpus_is_said_where_a_file_has_several_nodes(models, gpus, nodes, judged, reading):
    """--gpus 8 judges 32 GPUs on a 4-node file and --gpus 16 judges 16; validate says which."""
    config = base(models["dense"])
    config["hardware"]["num_nodes"] = 4
    findings = validate_text(yaml.safe_dump(config), "case.yaml", gpus=gpus, nodes=nodes).findings
    said = [f for f in findings if f.code == "RA-C014"]
    if judged is None:
        assert said == []
        return
    [finding] = said
    assert finding.severity == "info" and finding.message == f"judged on {judged} GPUs: {reading}"
    assert "--nodes" in finding.fix
    one_node = base(models["dense"])  # --gpus 8 on a one-node file: nothing to tell apart
    assert "RA-C014" not in [f.code for f in validate_text(yaml.safe_dump(one_node), "c.yaml", gpus=8).findings]


@pytest.mark.parametrize("changes, key", [
    ({"distributed.tp_size": 2}, "distributed.tp_size"),
    ({"distributed.tp_size": 1, "distributed.sequence_parallel": False, "distributed.cp_size": 2},
     "distributed.cp_size"),
])
def test_deepseek_v3_latent_attention_is_not_split_by_the_bundled_trainer(changes: dict, key: str) -> None:
    config = with_changes("deepseek-v3", {"distributed.strategy": "fsdp2", **MOCK, **changes})
    [finding] = [f for f in findings_of(config) if f.code == "RA-E007"]
    assert finding.key == key and "multi-head latent attention (MLA)" in finding.message
    assert not [f for f in findings_of(config) if f.code == "RA-E002"], "deepseek_v3 is a family it builds"
