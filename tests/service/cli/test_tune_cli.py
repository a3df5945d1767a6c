"""`recipe-advisor tune` end to end in one process, its trials answered by a faked trainer: the fastest measured
written with -o, and a repeated tune answered from the store, running nothing and writing nothing."""

from unittest import mock

import yaml

from service.cli.app import main
from service.tune.search import Tuner
from tests.service.tune.conftest import FakeTrainer

TUNE = ["tune", "--model", "tiny-llama", "--gpus", "2", "--gpu-type", "cpu", "--goal", "pretrain", "--engine",
        "bundled", "--trials", "4", "--steps", "4", "--warmup", "1"]


def test_a_repeated_tune_answers_from_the_store_and_writes_only_when_asked(tmp_path, capsys):
    trainer = FakeTrainer(lambda layout: 1000.0 * layout[0] + layout[2])  # TP 2 fastest
    db, best = str(tmp_path / "runs.sqlite"), tmp_path / "best.yaml"
    args = [*TUNE, "--db", db, "--workdir", str(tmp_path / "trials")]
    with mock.patch.dict(Tuner.__init__.__kwdefaults__, {"runner": trainer}):
        assert main([*args, "-o", str(best)]) == 0
        first = capsys.readouterr().out
        assert main(args) == 0
        again = capsys.readouterr().out
    assert len(trainer.calls) == 4 and "4 trial(s), 0 from the store" in first
    assert best.read_text().startswith("# Measured by `recipe-advisor tune`")
    assert yaml.safe_load(best.read_text())["distributed"]["tp_size"] == 2
    assert "4 trial(s), 4 from the store" in again and "wrote the fastest" not in again
    assert again.count("(from the store)") == 4
