"""The AutoModel schema generator reads source with ast, and the bundled schema it wrote stays small."""

from __future__ import annotations

import json

from recipe_index.generate import INDEX_DIR
from recipe_index.generate.automodel_schema import Version, spans
from recipe_index.generate.automodel_source import module_defs, recipe_sections

CONFIG = '''
from dataclasses import dataclass, field
from typing import ClassVar
from nemo_automodel.components.base import Base

@dataclass
class PipelineConfig:
    pp_schedule: str = "1f1b"
    registry: ClassVar[dict] = {}
    derived: int = field(default=0, init=False)
    pp_microbatch_size: int = 1

@dataclass
class Child(PipelineConfig):
    extra: bool = False

def build(model, *, seed=0, **kwargs):
    pass

class Loss(Base):
    def __init__(self, ignore_index=-100, reduction="sum"):
        pass

    @classmethod
    def from_pretrained(cls, path, revision=None):
        pass

class Wrapper(torch.nn.Module):
    pass

def _private():
    pass

_STRATEGY_MAP = {"fsdp2": PipelineConfig}
'''


def test_module_defs_reads_dataclass_fields_signatures_and_classmethods():
    defs = module_defs(CONFIG, "nemo_automodel/components/x.py")
    assert defs.classes["PipelineConfig"].fields == ["pp_schedule", "pp_microbatch_size"]  # ClassVar, init=False out
    assert defs.functions["build"] is None  # **kwargs: any keyword
    assert defs.classes["Loss"].init == ["ignore_index", "reduction"]
    assert defs.classes["Loss"].methods == {"from_pretrained": ["path", "revision"]}
    assert "_private" not in defs.functions  # AutoModel's loader refuses private names
    assert defs.strategy_map == {"fsdp2": "nemo_automodel.components.x.PipelineConfig"}


def test_version_resolves_inherited_dataclass_fields_and_leaves_outside_bases_open():
    version = Version({"nemo_automodel.components.x": module_defs(CONFIG, "nemo_automodel/components/x.py")})
    entries = version.entries()["nemo_automodel.components.x"]
    assert entries["Child"] == "pp_schedule,pp_microbatch_size,extra"
    assert entries["Wrapper"] is None and "Wrapper.*" in entries  # built on torch: not judged
    assert entries["Loss"] == "ignore_index,reduction" and entries["Loss.from_pretrained"] == "path,revision"
    assert "Loss.*" in entries  # its base is not among the modules read: it may add more classmethods


def test_recipe_sections_reads_the_root_configs_gets_attributes_and_prefix_blocks():
    source = '''
class Recipe:
    def setup(self):
        self.cfg.get("distributed.pipeline.pp_microbatch_size", 1)
        if "peft" in self.cfg and hasattr(self.cfg, "wandb"):
            model = self.cfg.model.instantiate()
        for name in filter(lambda k: k.startswith("validation_dataset"), self.cfg.to_dict()):
            pass
'''
    assert recipe_sections(source, frozenset({"to_dict"})) == {
        "distributed", "peft", "wandb", "model", "validation_dataset*"}


def test_spans_encode_version_masks_as_ranges():
    assert spans(0b1011100111) == "0-2,5-7,9"


def test_bundled_schema_is_small_and_lists_the_releases():
    path = INDEX_DIR / "data" / "automodel_schema.json"
    assert path.stat().st_size < 500_000
    data = json.loads(path.read_text())
    releases = [v["name"] for v in data["versions"] if v["kind"] == "release"]
    assert releases[:1] == ["0.1.0"] and "0.5.0" in releases
    assert data["renamed"]["autopipeline"][0] == "distributed.pipeline"

