"""RA-C009 tells "no such model" from "a config.json that cannot describe a model" by the
resolver's exception type, never by the wording of its message."""

import pytest

from recipe_index.errors import ModelConfigError, UnknownModelError
from service.configs.yamlio import load_yaml
from service.validate.document import build_view, validate_text

CONFIG = ("model: {pretrained_model_name_or_path: some-model}\n"
          "dataset: {_target_: trainer.data.MockDataset, seq_length: 128}\noptimizer: {_target_: torch.optim.AdamW}\n"
          "distributed: {strategy: fsdp2}\nhardware: {gpu_type: cpu, gpus_per_node: 2}\n")


def _raising(exc: Exception):
    def resolve(name: str):
        raise exc
    return resolve


def _model_findings(resolver) -> list[tuple[str, str]]:
    report = validate_text(CONFIG, "case.yaml", resolve_model=resolver)
    return [(f.code, f.severity) for f in report.findings]


def test_a_model_that_resolves_to_nothing_is_a_warning():
    unknown = UnknownModelError("some-model", ["llama3-8b"], reason="not a bundled id")
    assert _model_findings(_raising(unknown)) == [("RA-C009", "warning")]
    view = build_view(load_yaml(CONFIG, "case.yaml"), resolve_model=_raising(unknown))
    assert view.model_unknown and view.model_error.endswith("closest bundled ids: llama3-8b")


@pytest.mark.parametrize("exc", [
    ModelConfigError("m/config.json", "hidden_size: must be a positive integer"),
    # worded like UnknownModelError's problem, yet another type: a model was found and is unusable
    ValueError("unknown model 'some-model' in m/config.json: hidden_size is missing"),
])
def test_a_found_but_unusable_model_is_an_error_whatever_its_wording(exc):
    assert _model_findings(_raising(exc)) == [("RA-C009", "error")]
    view = build_view(load_yaml(CONFIG, "case.yaml"), resolve_model=_raising(exc))
    assert not view.model_unknown and view.model_error == str(exc).rstrip(".")
