"""Datasets, tokenizers, the interleaved data-parallel sampler and its exact resume position."""

from __future__ import annotations

import json

import pytest
import torch

from tests.trainer.harness import run_trainer, write_config
from trainer.contract.overrides import ConfigError, FieldError
from trainer.data import (
    IGNORE_INDEX,
    ByteTokenizer,
    JsonlPretrainDataset,
    JsonlSFTDataset,
    MockDataset,
    ResumableDataLoader,
    load_tokenizer,
)


def _jsonl(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


def test_mock_dataset_is_deterministic_shifted_and_learnable():
    ds = MockDataset(seq_length=16, vocab_size=64, num_samples=8, seed=3)
    again = MockDataset(seq_length=16, vocab_size=64, num_samples=8, seed=3)
    a, b = ds[5], again[5]
    assert torch.equal(a["input_ids"], b["input_ids"])
    assert torch.equal(a["input_ids"][1:], a["labels"][:-1]), "labels are the next tokens"
    # One bigram rule: the same token is always followed by the same token, across samples and seeds.
    other = MockDataset(seq_length=16, vocab_size=64, num_samples=8, seed=4)
    follows = {}
    for sample in [ds[i] for i in range(8)] + [other[i] for i in range(8)]:
        for x, y in zip(sample["input_ids"].tolist(), sample["labels"].tolist()):
            assert follows.setdefault(x, y) == y
    assert not torch.equal(ds[0]["input_ids"], other[0]["input_ids"])
    noise = MockDataset(seq_length=16, vocab_size=64, num_samples=2, learnable=False)
    assert int(noise[0]["input_ids"].max()) < 64


def test_mock_dataset_needs_a_vocab():
    with pytest.raises(FieldError, match="vocab_size"):
        MockDataset(seq_length=8)


def test_byte_tokenizer_round_trip():
    tok = ByteTokenizer()
    ids = tok.encode("héllo")
    assert max(ids) < 256 and tok.decode(ids) == "héllo"
    assert {tok.bos_id, tok.eos_id, tok.pad_id} == {256, 257, 258} and tok.vocab_size == 259


def test_tokenizer_json_with_special_tokens(tmp_path):
    from tokenizers import Tokenizer, models, pre_tokenizers

    vocab = {"<s>": 0, "</s>": 1, "<pad>": 2, "hello": 3, "world": 4, "[UNK]": 5}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.save(str(tmp_path / "tokenizer.json"))
    loaded = load_tokenizer(str(tmp_path))  # a folder holding tokenizer.json
    assert loaded.encode("hello world") == [3, 4]
    assert (loaded.bos_id, loaded.eos_id, loaded.pad_id) == (0, 1, 2)
    assert loaded.vocab_size == 6
    with pytest.raises(FieldError, match="tokenizer: file"):
        load_tokenizer(str(tmp_path / "absent.json"))


def test_pretrain_dataset_packs_documents(tmp_path):
    path = _jsonl(tmp_path / "p.jsonl", [{"text": "abcdefghij"}, {"text": "klmnopqrst"}])
    ds = JsonlPretrainDataset(path, seq_length=8)
    stream = [256] + list(b"abcdefghij") + [257, 256] + list(b"klmnopqrst") + [257]
    assert len(ds) == (len(stream) - 1) // 8
    for i in range(len(ds)):
        assert ds[i]["input_ids"].tolist() == stream[i * 8: i * 8 + 8]
        assert ds[i]["labels"].tolist() == stream[i * 8 + 1: i * 8 + 9]


def test_sft_dataset_masks_the_prompt(tmp_path):
    path = _jsonl(tmp_path / "s.jsonl", [{"prompt": "Q?", "answer": "ok"}])
    sample = JsonlSFTDataset(path, seq_length=8)[0]
    # full sequence: BOS Q ? o k EOS, then padding
    assert sample["input_ids"].tolist() == [256, ord("Q"), ord("?"), ord("o"), ord("k"), 258, 258, 258]
    assert sample["labels"].tolist() == [IGNORE_INDEX, IGNORE_INDEX, ord("o"), ord("k"), 257,
                                         IGNORE_INDEX, IGNORE_INDEX, IGNORE_INDEX]


@pytest.mark.parametrize("content,needle", [
    ('{"prompt": "a"}\n', "s.jsonl:1: missing text field"),
    ('{"prompt": "a", "answer": "b"}\nnot json\n', "s.jsonl:2: not valid JSON"),
    ("", "has no records"),
])
def test_sft_dataset_bad_files_name_the_line(tmp_path, content, needle):
    (tmp_path / "s.jsonl").write_text(content)
    with pytest.raises(FieldError, match=needle):
        JsonlSFTDataset(str(tmp_path / "s.jsonl"), seq_length=8)


def test_sft_answers_cut_off_entirely_is_an_error(tmp_path):
    path = _jsonl(tmp_path / "s.jsonl", [{"prompt": "a long prompt here", "answer": "x"}])
    with pytest.raises(FieldError, match="seq_length"):
        JsonlSFTDataset(path, seq_length=4)


def _ids(batches):
    return [int(i) for b in batches for i in b["input_ids"][:, 0]]


class _IndexDataset(torch.utils.data.Dataset):
    def __len__(self):
        return 24

    def __getitem__(self, i):
        return {"input_ids": torch.tensor([i]), "labels": torch.tensor([i])}


def test_global_batches_are_the_same_for_any_dp_size():
    """Step k of a run with global batch G uses permutation positions [kG, (k+1)G) whatever DP is."""
    ds, global_batch = _IndexDataset(), 8
    one = ResumableDataLoader(ds, batch_size=2, dp_size=1, dp_rank=0, shuffle=True, seed=7)
    single = _ids(one)
    for dp in (2, 4):
        per_rank = [_ids(ResumableDataLoader(ds, batch_size=2, dp_size=dp, dp_rank=r, shuffle=True, seed=7))
                    for r in range(dp)]
        per_step = global_batch // dp
        for step in range(len(ds) // global_batch):
            got = sorted(i for r in range(dp) for i in per_rank[r][step * per_step:(step + 1) * per_step])
            assert got == sorted(single[step * global_batch:(step + 1) * global_batch])


def test_loader_position_restores_exactly_even_on_another_dp_size():
    ds = _IndexDataset()
    run = ResumableDataLoader(ds, batch_size=2, dp_size=2, dp_rank=0, shuffle=True, seed=1)
    run.set_epoch(1)
    it = iter(run)
    seen = [next(it), next(it)]
    state = run.state_dict()
    assert state == {"epoch": 1, "global_samples": 8}
    rest = list(it)
    resumed = ResumableDataLoader(ds, batch_size=2, dp_size=2, dp_rank=0, shuffle=True, seed=1)
    resumed.load_state_dict(state)
    resumed.set_epoch(1)
    assert _ids(resumed) == _ids(rest)
    assert len(seen) == 2
    # The same position on DP=4 x batch 1: both rank 0's continue at permutation position 8.
    other = ResumableDataLoader(ds, batch_size=1, dp_size=4, dp_rank=0, shuffle=True, seed=1)
    other.load_state_dict(state)
    assert other.batches_yielded == 2
    with pytest.raises(ValueError, match="batch boundary"):
        ResumableDataLoader(ds, batch_size=3, dp_size=2, dp_rank=0, shuffle=True, seed=1).load_state_dict(state)


def test_new_epoch_reshuffles_and_starts_over():
    ds = _IndexDataset()
    run = ResumableDataLoader(ds, batch_size=4, dp_size=1, dp_rank=0, shuffle=True, seed=1)
    first = _ids(run)
    run.set_epoch(1)
    second = _ids(run)
    assert sorted(first) == sorted(second) == list(range(24))
    assert first != second
    run.rewind()
    assert _ids(run) == second


def test_iterating_the_data_leaves_the_global_rng_alone():
    loader = ResumableDataLoader(MockDataset(seq_length=8, vocab_size=64, num_samples=16), batch_size=2,
                                 dp_size=1, dp_rank=0, shuffle=True, seed=3)
    torch.manual_seed(0)
    before = torch.get_rng_state()
    next(iter(loader))
    loader.rewind()
    next(iter(loader))
    assert torch.equal(before, torch.get_rng_state())


def test_too_little_data_states_the_configured_samples_and_why_they_are_unusable():
    from trainer.contract.step_scheduler import StepScheduler
    from trainer.data import MockDataset, ResumableDataLoader

    loader = ResumableDataLoader(MockDataset(seq_length=8, vocab_size=64, num_samples=10), batch_size=8, dp_size=2,
                                 dp_rank=0, shuffle=False, seed=0)
    with pytest.raises(ConfigError) as err:
        StepScheduler(loader, global_batch_size=16, local_batch_size=8, dp_size=2)
    assert str(err.value) == (
        "dataset: 10 samples, of which 0 usable (each of the 2 data-parallel ranks gets 5 and uses only whole "
        "local batches of 8), are fewer than one global batch of 16; add samples (at least 16) or lower "
        "step_scheduler.global_batch_size")
    whole = ResumableDataLoader(MockDataset(seq_length=8, vocab_size=64, num_samples=8), batch_size=4, dp_size=2,
                                dp_rank=0, shuffle=False, seed=0)
    with pytest.raises(ConfigError, match=r"^dataset: 8 samples are fewer than one global batch of 16; add"):
        StepScheduler(whole, global_batch_size=16, local_batch_size=4, dp_size=2)


def test_packed_samples_say_what_a_sample_is(tmp_path):
    from trainer.contract.step_scheduler import StepScheduler
    from trainer.data import JsonlPretrainDataset, ResumableDataLoader

    path = tmp_path / "t.jsonl"
    path.write_text("\n".join(json.dumps({"text": "x" * 30}) for _ in range(3)) + "\n")
    loader = ResumableDataLoader(JsonlPretrainDataset(str(path), seq_length=16), batch_size=4, dp_size=1, dp_rank=0,
                                 shuffle=False, seed=0)
    with pytest.raises(ConfigError, match=r"^dataset: 5 samples \(sequences of 16 tokens packed from t\.jsonl\), "
                                          r"of which 4 usable \(training uses only whole local batches of 4\)"):
        StepScheduler(loader, global_batch_size=8, local_batch_size=4, dp_size=1)


def test_a_real_run_warns_that_its_data_ends_it_before_max_steps(tmp_path):
    config = write_config(tmp_path, {"dataset": {"num_samples": 32},
                                     "step_scheduler": {"max_steps": 50, "checkpoint_interval": None},
                                     "lr_scheduler": {"warmup_steps": 20, "decay_steps": None},
                                     "checkpoint": {"enabled": False, "checkpoint_dir": "ckpt"}})
    result = run_trainer(config)
    assert result.returncode == 0, result.stderr[-2000:]
    assert "warning: the data ends the run after 4 steps (1 epoch(s) of 4), before step_scheduler.max_steps 50" \
        in result.stderr
    assert "warning: lr_scheduler.warmup_steps 20 is longer than the run (4 steps)" in result.stderr
