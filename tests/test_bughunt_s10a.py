"""Bug hunt s10a (notes/bughunt_s10a.md): validate, diff and the security of reading user configs."""

from __future__ import annotations

from pathlib import Path

import pytest

from service.validate import validate_text

REPO = Path(__file__).resolve().parents[1]
INDEX = REPO / "recipe_index" / "recipes"

FOREIGN_TARGET = """metadata:
  name: {name}
  known_issues: [{codes}]
model:
  pretrained_model_name_or_path: tiny-llama
dataset:
  _target_: trainer.data.MockDataset
  seq_length: 64
optimizer:
  _target_: evilmod.f
  lr: 0.1
"""


def severities(text: str, code: str) -> list[str]:
    return [f.severity for f in validate_text(text, "c.yaml").findings if f.code == code]


# ---------------------------------------------------------------- #1: a file cannot waive its own findings


def test_known_issues_cannot_waive_the_allow_list():
    text = FOREIGN_TARGET.format(name="evil", codes="RA-S001, RA-S002, RA-C001")
    assert severities(text, "RA-S001") == ["error"]


def test_a_reviewed_recipe_name_waives_only_its_reviewed_codes():
    text = FOREIGN_TARGET.format(name="deepseek_v3_pretrain_128gpu_vr200_bf16", codes="RA-L007, RA-S001")
    assert severities(text, "RA-S001") == ["error"]


def test_the_index_recipes_keep_their_upstream_issues_visible_as_warnings():
    path = INDEX / "megatron" / "deepseek" / "deepseek_v3_pretrain_128gpu_vr200_bf16.yaml"
    findings = [f for f in validate_text(path.read_text(), str(path)).findings if f.code == "RA-L007"]
    assert [f.severity for f in findings] == ["warning"]
    assert findings[0].message.startswith("known upstream issue, kept as shipped")


# ---------------------------------------------------------------- #4: output amplification


def test_diff_shows_a_huge_aliased_value_by_its_start_and_length(capsys, tmp_path):
    from fastapi.testclient import TestClient

    from service.app import create_app
    from service.cli import main

    big = "x" * 100_000
    new = "metadata:\n  name: &a " + big + "\n  description: *a\nmodel:\n" + "".join(f"  k{i}: *a\n" for i in range(50))
    response = TestClient(create_app()).post("/v1/diff", json={"base": "metadata:\n  name: y\n", "new": new})
    assert response.status_code == 200 and len(response.content) < 100_000  # it was 5 MB
    shown = {c["key"]: c["new"] for c in response.json()["changes"]}
    assert "metadata.name" not in shown  # index metadata is not training (bug hunt s12 H12)
    assert shown["model.k0"].endswith("(100,002 characters)")
    (tmp_path / "a.yaml").write_text("metadata:\n  name: y\n")
    (tmp_path / "b.yaml").write_text(new)
    assert main(["diff", str(tmp_path / "a.yaml"), str(tmp_path / "b.yaml")]) == 0
    assert len(capsys.readouterr().out) < 100_000


def test_findings_of_one_code_are_capped_and_the_last_says_how_many_more():
    from service.validate import MAX_FINDINGS_PER_CODE

    text = "\n".join(f"z{i}: 1" for i in range(MAX_FINDINGS_PER_CODE + 250))
    unknown = [f for f in validate_text(text, "c.yaml").findings if f.code == "RA-C001"]
    assert len(unknown) == MAX_FINDINGS_PER_CODE
    assert unknown[-1].message.endswith("(and 250 more RA-C001 error(s) in this file, not listed)")
    assert not any("more RA-C001" in f.message for f in unknown[:-1])
    from service.validate import FileReport

    report = FileReport(path="c.yaml", findings=validate_text(text, "c.yaml").findings)
    assert report.errors == MAX_FINDINGS_PER_CODE + 250  # the summary still counts every one


# ---------------------------------------------------------------- #5: control characters in text output


def test_text_output_escapes_control_characters_of_keys_and_paths(capsys, tmp_path):
    from service.cli import main

    config = tmp_path / "we\nird.yaml"
    config.write_text('model:\n  pretrained_model_name_or_path: tiny-llama\n'
                      '"x\\n::notice file=README.md,line=1::all checks passed": 1\n"e\\e[31m": 2\n')
    assert main(["validate", str(config)]) == 1
    out = capsys.readouterr().out
    assert not any(line.startswith("::") for line in out.splitlines())
    assert "\x1b" not in out and "x\\n::notice" in out and "e\\x1b[31m" in out and "we\\nird.yaml" in out


# ---------------------------------------------------------------- #6: a target path the OS cannot hold


def test_a_target_path_too_long_or_private_is_refused_by_validate_and_the_trainer():


    from trainer.builders import check_target
    from trainer.overrides import ConfigError

    long_target = "trainer." + "a." * 3000 + "b"
    for target in (long_target, "trainer.data._check_seq_length"):
        text = f"optimizer:\n  _target_: {target}\n"
        assert severities(text, "RA-S001") == ["error"]
        with pytest.raises(ConfigError, match="not a dotted Python path"):
            check_target(target, "optimizer")
    assert severities("optimizer:\n  _target_: torch.optim.AdamW\n", "RA-S001") == []


# ---------------------------------------------------------------- #7: a dotted YAML key


def test_a_dotted_yaml_key_is_named_as_one_key_with_the_nesting_fix():
    findings = [f for f in validate_text("optimizer.lr: 0.1\ndistributed:\n  tp.size: 2\n", "c.yaml").findings
                if f.code == "RA-C001"]
    by_key = {f.key: f for f in findings}
    assert "unknown key `optimizer.lr`: a YAML key is one name" in by_key["optimizer.lr"].message
    assert by_key["optimizer.lr"].fix == "nest it: `optimizer:` on one line and `  lr: ...` under it"
    assert by_key["distributed.tp.size"].fix == "did you mean `tp_size`?"


# ---------------------------------------------------------------- #2: RA-L011 and RA-L019 agree


MEGATRON = """model:
  pretrained_model_name_or_path: {model}
{model_keys}distributed:
  strategy: megatron
  pp_size: {pp}
  vp_size: {vp}
  ep_size: {ep}
hardware:
  gpu_type: h100
  gpus_per_node: 8
  num_nodes: {nodes}
dataset:
  seq_length: 4096
"""


def split_findings(model, pp, vp, ep=1, nodes=8, model_keys=""):
    text = MEGATRON.format(model=model, pp=pp, vp=vp, ep=ep, nodes=nodes, model_keys=model_keys)
    return [f for f in validate_text(text, "c.yaml").findings if f.code in ("RA-L011", "RA-L019")]


@pytest.mark.parametrize("model", ["kimi-k2", "deepseek-v3", "moonlight-16b"])
def test_every_pair_ra_l019_offers_passes_ra_l011(model):
    from service.rules.layout import PIPELINE_LAYOUT_TABLES

    for pp, vp in sorted(PIPELINE_LAYOUT_TABLES[model]):
        if pp > 1:
            assert split_findings(model, pp, vp, ep=8, nodes=64) == [], (model, pp, vp)


def test_a_pair_outside_the_table_gets_both_ways_out_in_the_fix():
    (l011,) = [f for f in split_findings("kimi-k2", 4, 3, ep=8, nodes=64) if f.code == "RA-L011"]
    assert l011.severity == "error" and "(4, 2)" in l011.fix and "model.pipeline_model_parallel_layout" in l011.fix


def test_megatrons_split_settings_under_model_clear_the_warning_when_they_add_up():
    (warning,) = split_findings("llama3-8b", 5, 1, nodes=5)
    assert warning.severity == "warning" and "under `model:`" in warning.fix
    right = "  num_layers_in_first_pipeline_stage: 5\n  num_layers_in_last_pipeline_stage: 6\n"
    assert split_findings("llama3-8b", 5, 1, nodes=5, model_keys=right) == []
    wrong = "  num_layers_in_first_pipeline_stage: 4\n  num_layers_in_last_pipeline_stage: 6\n"
    (error,) = split_findings("llama3-8b", 5, 1, nodes=5, model_keys=wrong)
    assert error.severity == "error" and "22 layers left for 3 stage(s)" in error.message
    accounted = "  account_for_embedding_in_pipeline_split: true\n  account_for_loss_in_pipeline_split: true\n"
    assert split_findings("llama3-8b", 2, 1, nodes=2, model_keys=accounted) == []  # 34 over 2


@pytest.mark.parametrize("model, pp, vp, ep, nodes, keys, said", [
    ("llama3-8b", 5, 1, 1, 5, {"num_layers_in_first_pipeline_stage": 4, "num_layers_in_last_pipeline_stage": 5,
                               "account_for_embedding_in_pipeline_split": "true"}, "cannot be set together"),
    ("llama3-8b", 2, 2, 1, 2, {"num_layers_in_first_pipeline_stage": 15, "num_layers_in_last_pipeline_stage": 17},
     "does not divide by VP=2"),
    ("llama3-8b", 4, 1, 1, 4, {"num_layers_in_first_pipeline_stage": 0}, "a whole number above 0"),
    ("llama3-8b", 4, 1, 1, 4, {"account_for_embedding_in_pipeline_split": "true"}, "33 layers left for 4"),
    ("kimi-k2", 4, 2, 8, 64, {"num_layers_in_first_pipeline_stage": 3}, "Megatron refuses"),
])
def test_split_settings_megatron_refuses_are_errors(model, pp, vp, ep, nodes, keys, said):
    """Review s10 #3: Megatron-Core's TransformerConfig refuses each of these."""
    written = "".join(f"  {k}: {v}\n" for k, v in keys.items())
    (error,) = [f for f in split_findings(model, pp, vp, ep=ep, nodes=nodes, model_keys=written)
                if f.code == "RA-L011"]
    assert error.severity == "error" and said in error.message


def test_a_split_that_only_adds_up_with_the_accounting_passes_and_vp_counts_per_rank():
    both = "  account_for_embedding_in_pipeline_split: true\n  account_for_loss_in_pipeline_split: true\n"
    assert split_findings("gemma2-9b", 4, 1, nodes=4, model_keys=both) == []  # 42 + 2 = 44: 11 a stage
    (error,) = split_findings("gemma2-9b", 4, 1, nodes=4, model_keys=both.splitlines()[0] + "\n")
    assert "43 layers left for 4 stage(s)" in error.message  # one flag is not enough
    edges = "  num_layers_in_first_pipeline_stage: 6\n  num_layers_in_last_pipeline_stage: 6\n"
    assert split_findings("llama3-8b", 4, 2, nodes=4, model_keys=edges) == []  # 6 / 10 x 2 / 6, each by VP 2


def test_the_layout_string_ra_l019_names_clears_ra_l011_and_the_pairs_fit_the_world():
    layout = '  pipeline_model_parallel_layout: "Et*15|t*15|t*15|t*16L"\n'
    assert [f.code for f in split_findings("kimi-k2", 4, 3, ep=8, nodes=8, model_keys=layout)] == ["RA-L019"]
    (l011,) = [f for f in split_findings("kimi-k2", 4, 3, ep=8, nodes=8) if f.code == "RA-L011"]
    assert "(8, 2)" in l011.fix and "(16, 1)" not in l011.fix  # PP 16 x EP 8 is more than 64 GPUs


# ---------------------------------------------------------------- #3: validate reports what the trainer refuses


BUNDLED = (INDEX / "bundled" / "tiny_llama_pretrain.yaml").read_text()


def e005(text: str) -> list[tuple[str, str]]:
    return [(f.severity, f.key) for f in validate_text(text, "c.yaml").findings if f.code == "RA-E005"]


def test_a_bundled_recipe_has_no_section_problem():
    assert e005(BUNDLED) == []


@pytest.mark.parametrize("edit, expected", [
    (lambda t: t.replace("model:\n", "model:\n  foo_bar: 1\n", 1), [("error", "model")]),
    (lambda t: t.replace("model:\n", "model:\n  attn_implementation: flash_attention_9\n", 1),
     [("error", "model.attn_implementation")]),
    (lambda t: "\n".join(line for line in t.splitlines() if "_target_: trainer.data" not in line),
     [("warning", "dataset._target_"), ("warning", "validation_dataset._target_")]),
    (lambda t: "rng: {seed: 1}\n", [("warning", "model.pretrained_model_name_or_path")]),
])
def test_validate_reports_the_sections_the_trainer_refuses(edit, expected):
    assert e005(edit(BUNDLED)) == expected


def test_lora_with_tensor_parallel_is_refused_by_validate_and_the_dry_run(tmp_path, capsys):
    from service.cli import main

    config = tmp_path / "c.yaml"
    assert main(["recommend", "--model", "tiny-llama", "--gpus", "2", "--gpu-type", "cpu", "--engine", "bundled",
                 "--goal", "peft", "-o", str(config)]) == 0
    capsys.readouterr()
    text = config.read_text().replace("tp_size: 1", "tp_size: 2").replace("strategy: ddp", "strategy: fsdp2")
    assert ("error", "distributed.tp_size") in e005(text)
    config.write_text(text)
    assert main(["train", str(config), "--dry-run", "--ignore-validation-errors"]) == 2
    assert "distributed.tp_size: LoRA runs with data parallel only here" in capsys.readouterr().err


# ---------------------------------------------------------------- #9: diff's false convergence changes


def test_an_optimizers_own_defaults_written_out_are_no_change():
    from service.changes import diff
    from trainer.overrides import load_yaml_file

    base = load_yaml_file(INDEX / "bundled" / "tiny_llama_pretrain.yaml")
    written = {**base, "optimizer": {**base["optimizer"], "amsgrad": False, "maximize": False, "eps": 1e-8}}
    assert diff(base, written) == []
    other = {**base, "optimizer": {**base["optimizer"], "eps": 1e-6, "amsgrad": True}}
    assert [(c.key, c.layer) for c in diff(base, other)] == [("optimizer.amsgrad", "convergence"),
                                                             ("optimizer.eps", "convergence")]


def test_bridges_micro_batch_spelling_is_execution_while_the_global_batch_stays():
    from service.changes import diff

    one = {"train": {"micro_batch_size": 1, "global_batch_size": 512}}
    four = {"train": {"micro_batch_size": 4, "global_batch_size": 512}}
    bigger = {"train": {"micro_batch_size": 4, "global_batch_size": 1024}}
    assert [(c.key, c.layer) for c in diff(one, four)] == [("train.micro_batch_size", "execution")]
    assert ("train.micro_batch_size", "convergence") in [(c.key, c.layer) for c in diff(one, bigger)]


# ---------------------------------------------------------------- #10: fixes that open another error


def test_ra_l008_offers_only_expert_sizes_the_world_holds():
    text = ("model:\n  pretrained_model_name_or_path: deepseek-v2-lite\ndistributed:\n  strategy: megatron\n"
            "  ep_size: 3\nhardware:\n  gpu_type: h100\n  gpus_per_node: 6\ndataset:\n  seq_length: 4096\n")
    (finding,) = [f for f in validate_text(text, "c.yaml").findings if f.code == "RA-L008"]
    assert finding.fix.endswith("fits in the 6 GPUs: [1, 2]")


@pytest.mark.parametrize("gpu, offers_fp8", [("a100-80gb", False), ("h100", True)])
def test_ra_c005_offers_the_names_precision_only_where_the_gpu_runs_it(gpu, offers_fp8):
    text = ("metadata:\n  name: m_pretrain_8gpu_a100_fp8cs\nmodel:\n  pretrained_model_name_or_path: llama3-8b\n"
            f"distributed:\n  strategy: megatron\nhardware:\n  gpu_type: {gpu}\n  gpus_per_node: 8\nprecision: bf16\n"
            "dataset:\n  seq_length: 4096\n")
    (finding,) = [f for f in validate_text(text, "c.yaml").findings if f.code == "RA-C005"]
    assert ("set precision: fp8" in finding.fix) == offers_fp8 and "rename the recipe to say bf16" in finding.fix


# ---------------------------------------------------------------- #11, #12, #14: SARIF, file errors, the rule list


def test_sarif_uris_are_encoded_and_every_reported_code_is_a_listed_rule(tmp_path, capsys):
    import json

    from service.cli import main

    folder = tmp_path / "we ird"
    folder.mkdir()
    (folder / "a,b%25.yaml").write_text("a: 1\n---\nb: 2\n")
    assert main(["validate", str(folder / "a,b%25.yaml"), "--format", "sarif"]) == 2
    run = json.loads(capsys.readouterr().out)["runs"][0]
    (result,) = run["results"]
    assert result["ruleId"] == "RA-F001" and "RA-F001" in {r["id"] for r in run["tool"]["driver"]["rules"]}
    assert result["locations"][0]["physicalLocation"]["artifactLocation"]["uri"].endswith("/we%20ird/a%2Cb%2525.yaml")


def test_the_rule_list_has_a_json_form_with_the_file_rule(capsys):
    import json

    from service.cli import main

    assert main(["validate", "--list-rules", "--format", "json"]) == 0
    rules = json.loads(capsys.readouterr().out)
    codes = [r["code"] for r in rules]
    assert "RA-F001" in codes and "RA-E005" in codes and codes == sorted(codes)


@pytest.mark.parametrize("raw, said", [
    (b"a: 1\n---\n", "a config is one YAML document: remove the `---`"),
    (b"model:\n\tpretrained_model_name_or_path: x\n", "indent with spaces"),
    ("a: 1\n".encode("utf-16"), "file is UTF-16 text, not UTF-8"),
])
def test_file_errors_name_their_cause(tmp_path, capsys, raw, said):
    from service.cli import main

    path = tmp_path / "c.yaml"
    path.write_bytes(raw)
    assert main(["validate", str(path)]) == 2
    assert said in capsys.readouterr().out


# ---------------------------------------------------------------- #8: megatron <-> fsdp2 with unwritten keys


def test_leaving_megatron_lists_the_bridge_valued_keys_neither_side_writes():
    from service.bridge_keys import BRIDGE_RECIPE_VALUE, UNRECORDED
    from service.changes import diff, verdict

    megatron = {"model": {"pretrained_model_name_or_path": "llama3-8b"}, "distributed": {"strategy": "megatron"}}
    fsdp2 = {**megatron, "distributed": {"strategy": "fsdp2"}}
    changes = {c.key: c for c in diff(megatron, fsdp2)}
    assert UNRECORDED <= set(changes) and changes["distributed.strategy"].layer == "execution"
    assert all(changes[k].layer == "convergence" and changes[k].old == BRIDGE_RECIPE_VALUE for k in UNRECORDED)
    assert changes["rng.seed"].new == 1234 and verdict(list(changes.values())).startswith("new convergence")
    assert [c.key for c in diff(megatron, {**megatron, "distributed": {"strategy": "megatron", "tp_size": 2}})] \
        == ["distributed.tp_size"]  # on Megatron both sides run the recipe's values


def test_an_unknown_precision_recipe_spelling_is_refused_and_upper_case_suffixes_are_walked(tmp_path):
    from service.validate import expand_paths

    text = "metadata:\n  name: x\n  precision_recipe: mxfp8\nmodel:\n  pretrained_model_name_or_path: llama3-8b\n"
    (finding,) = [f for f in validate_text(text, "c.yaml").findings if f.code == "RA-C002"]
    assert finding.key == "metadata.precision_recipe" and "'fp8mx'" in finding.fix
    (tmp_path / "A.YAML").write_text("a: 1\n")
    (tmp_path / "b.Yml").write_text("a: 1\n")
    (tmp_path / "c.txt").write_text("a: 1\n")
    assert sorted(Path(p).name for p in expand_paths([str(tmp_path)])[0]) == ["A.YAML", "b.Yml"]


def test_messages_name_the_engine_and_hardware_they_are_about():
    bundled = BUNDLED.replace("tp_size: 1", "tp_size: 2").replace("sequence_parallel: false", "sequence_parallel: true")
    assert not [f for f in validate_text(bundled, "c.yaml").findings if f.code == "RA-L015"]  # CPU ranks: no NVLink
    sp_alone = BUNDLED.replace("sequence_parallel: false", "sequence_parallel: true")
    (l004,) = [f for f in validate_text(sp_alone, "c.yaml").findings if f.code == "RA-L004"]
    assert "the bundled trainer ignores it" in l004.message
    evil = BUNDLED + "loss_fn:\n  _target_: builtins.eval\n"
    (e004,) = [f for f in validate_text(evil, "c.yaml").findings if f.code == "RA-E004"]
    assert "builtins.eval is not a trainer loss" in e004.message


# ---------------------------------------------------------------- review s10 of the fixes above


def test_an_explicit_null_target_is_an_error_and_a_fragment_still_reports_what_is_written_wrong():
    null = BUNDLED.replace("_target_: torch.optim.AdamW", "_target_: null")
    assert ("error", "optimizer._target_") in e005(null)
    fragment = "peft: {rank: 4, target_modules: [bogus_proj]}\n"
    assert e005(fragment) == [("warning", "model.pretrained_model_name_or_path"), ("error", "peft.target_modules")]


def test_the_pre_flight_refuses_a_foreign_target_first_and_messages_keep_their_fix():
    from trainer.launch import preflight
    from trainer.config import parse_config
    from trainer.overrides import ConfigError, load_yaml_file

    raw = load_yaml_file(INDEX / "bundled" / "tiny_llama_pretrain.yaml")
    both = {**raw, "optimizer": {"_target_": None}, "loss_fn": {"_target_": "os.system"}}
    with pytest.raises(ConfigError, match="loss_fn._target_: 'os.system' is outside the allowed module prefixes"):
        preflight(parse_config(both), 2, compare_resume=False)
    attn = {**raw, "model": {**raw["model"], "attn_implementation": "flash_attention_9"}}
    with pytest.raises(ConfigError) as err:
        preflight(parse_config(attn), 2, compare_resume=False)
    assert str(err.value).endswith("; use one of them, or remove the key for sdpa")


def test_long_keys_and_aliased_targets_stay_bounded_in_every_output(tmp_path, capsys):
    from fastapi.testclient import TestClient

    from service.app import create_app
    from service.cli import main

    big = "k" * 50_000
    new = "metadata:\n  name: x\n  description: &a " + big + "\n" + "".join(f"m{i}:\n  *a : 1\n" for i in range(40))
    client = TestClient(create_app())
    assert len(client.post("/v1/diff", json={"base": "metadata:\n  name: y\n", "new": new}).content) < 100_000
    (tmp_path / "a.yaml").write_text("metadata:\n  name: y\n")
    (tmp_path / "b.yaml").write_text(new + "".join(f"z{i}: {i}\n" for i in range(200)))
    assert main(["diff", str(tmp_path / "a.yaml"), str(tmp_path / "b.yaml")]) == 0
    assert len(capsys.readouterr().out) < 200_000  # no line is padded to the 50,000-character key
    aliased = ("optimizer:\n  _target_: torch.optim.AdamW\n  x: &a os." + "a" * 50_000 + "\n  groups:\n"
               + "    - {_target_: *a}\n" * 50)
    assert len(client.post("/v1/validate", json={"yaml": aliased}).content) < 100_000


def test_train_escapes_control_characters_of_keys_in_its_errors(tmp_path, capsys):
    from service.cli import main

    config = tmp_path / "c.yaml"
    config.write_text(BUNDLED.replace("model:\n", 'model:\n  "x\\n::error file=a::forged": 1\n', 1))
    assert main(["train", str(config), "--dry-run"]) == 2
    err = capsys.readouterr().err
    assert "x\\n::error" in err and not any(line.startswith("::") for line in err.splitlines())


@pytest.mark.parametrize("text, fix", [('"distributed.": 1\n', "did you mean `distributed`?"),
                                       ('rng:\n  "seed.x": 1\n', "did you mean `seed`?")])
def test_the_nesting_fix_is_offered_only_where_a_section_can_hold_the_rest(text, fix):
    """Review s10 #10."""
    (finding,) = [f for f in validate_text(text, "c.yaml").findings if f.code == "RA-C001"]
    assert finding.fix == fix


def test_a_count_given_differently_in_the_body_and_the_query_is_refused():
    from fastapi.testclient import TestClient

    from service.app import create_app

    client = TestClient(create_app())
    clash = client.post("/v1/validate?gpus=16", json={"yaml": BUNDLED, "gpus": 8})
    assert clash.status_code == 400 and clash.json()["field"] == "gpus"
    assert client.post("/v1/validate?gpus=8", json={"yaml": BUNDLED, "gpus": 8}).status_code == 200
