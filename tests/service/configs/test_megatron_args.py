"""Megatron-LM's arguments read from a launch script and from a log's start-up arguments block alike."""

from __future__ import annotations

from service.configs.megatron_args import arguments_block, command_line_args, has_arguments_block, parse_megatron_args

SCRIPT = r"""#!/bin/bash
TP=4
PP=${PP:-2}
GPT_MODEL_ARGS=(
    --num-layers 32   # the model's layers
    --hidden-size 4096
)
torchrun --nproc_per_node 8 --nnodes 2 pretrain_gpt.py \
    ${GPT_MODEL_ARGS[@]} \
    --tensor-model-parallel-size $TP \
    --pipeline-model-parallel-size ${PP} \
    --bf16 --lr 3e-4 --hierarchical-context-parallel-sizes 2 4 \
    --data-path "/data/my corpus" --seq-length=4096 2>&1 | tee log
"""

LOG = """2026-07-01 10:00:00 INFO using world size: 16
[rank0]: ------------------------ arguments ------------------------
[rank0]:   adam_beta1 ...................................... 0.9
[rank0]:   hierarchical_context_parallel_sizes ............. [2, 4]
[rank0]:   lr .............................................. 0.0003
[rank0]:   params_dtype .................................... torch.bfloat16
[rank0]:   pipeline_model_parallel_layout .................. None
[rank0]:   sequence_parallel ............................... True
[rank0]:   tensor_model_parallel_size ...................... 4
[rank0]:   an_argument_name_of_fifty_characters_printed_no_d  7
[rank0]: -------------------- end of arguments ---------------------
[rank0]:   not_an_argument ................................. 1
"""


def test_a_launch_script_gives_each_argument_its_value_and_line():
    args = command_line_args(SCRIPT)
    assert args["num_layers"] == (32, 5) and args["hidden_size"] == (4096, 6)
    assert args["nproc_per_node"] == (8, 8) and args["nnodes"] == (2, 8)  # the script name is no value
    assert args["tensor_model_parallel_size"] == (4, 10)  # $TP from the assignment above
    assert args["pipeline_model_parallel_size"] == (2, 11)  # ${PP:-2}: the default
    assert args["bf16"] == (True, 12) and args["lr"] == (3e-4, 12)
    assert args["hierarchical_context_parallel_sizes"] == ([2, 4], 12)
    assert args["data_path"] == ("/data/my corpus", 13) and args["seq_length"] == (4096, 13)
    assert "tee" not in args and "log" not in args


def test_the_last_occurrence_wins_as_with_argparse():
    assert command_line_args("pretrain_gpt.py --tp 2\n--tp 4\n")["tp"] == (4, 2)


def test_the_arguments_block_is_read_whatever_the_log_prefix():
    assert has_arguments_block(LOG) and not has_arguments_block(SCRIPT)
    args = arguments_block(LOG)
    assert args["tensor_model_parallel_size"] == (4, 9) and args["sequence_parallel"] == (True, 8)
    assert args["hierarchical_context_parallel_sizes"] == ([2, 4], 4) and args["lr"] == (0.0003, 5)
    assert args["pipeline_model_parallel_layout"] == (None, 7) and args["params_dtype"] == ("torch.bfloat16", 6)
    assert args["an_argument_name_of_fifty_characters_printed_no_d"] == (7, 10)
    assert "not_an_argument" not in args and "using" not in args


def test_parse_takes_the_block_when_there_is_one_else_the_command_line():
    assert parse_megatron_args(LOG)["lr"] == (0.0003, 5)
    assert parse_megatron_args(SCRIPT)["lr"] == (3e-4, 12)
    assert arguments_block(SCRIPT) is None


def test_an_unclosed_quote_does_not_stop_the_line_being_read():
    assert command_line_args('pretrain_gpt.py --tp 2 --name "half\n')["tp"] == (2, 1)
