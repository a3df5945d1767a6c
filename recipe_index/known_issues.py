"""Errors that shipped Megatron Bridge recipes carry, kept as shipped in the index.

The index mirrors Bridge (a recipe is not silently "fixed": that would change its
contract), so these recipes keep their values; ``metadata.known_issues`` lists the
codes, and ``validate`` reports them as warnings marked "known upstream issue".
Reviewed by hand; tests/recipe_index/test_reference_table.py fails when an entry goes stale.
"""

WHY = {
    "RA-L007": "GPU count in the name is below / not a multiple of PP*EP*ETP (reference consistency_flags)",
    "RA-B001": "global batch inherited from a recipe sized for another GPU count",
    "RA-P002": "an NVFP4 recipe placed under h100, which has no FP4 tensor cores",
    "RA-P003": "an MXFP8 recipe placed under h100; Transformer Engine runs MXFP8 from Blackwell on",
    "RA-M001": "single-GPU PEFT of a model whose bf16 weights exceed one GPU",
}

KNOWN_ISSUES: dict[str, tuple[str, ...]] = {
    "deepseek_v3_pretrain_128gpu_vr200_bf16": ('RA-L007',),
    "deepseek_v3_pretrain_128gpu_vr200_fp8cs": ('RA-L007',),
    "deepseek_v3_pretrain_128gpu_vr200_fp8mx": ('RA-L007',),
    "deepseek_v3_pretrain_128gpu_vr200_nvfp4": ('RA-L007',),
    "deepseek_v4_flash_pretrain_32gpu_h100_fp8mx": ('RA-P003',),
    "gpt_oss_20b_peft_1gpu_h100_fp8mx": ('RA-P003',),
    "gpt_oss_20b_pretrain_16gpu_h100_fp8mx": ('RA-P003',),
    "gpt_oss_20b_sft_8gpu_h100_fp8mx": ('RA-P003',),
    "llama3_8b_pretrain_2gpu_h100_fp8mx": ('RA-P003',),
    "llama3_8b_pretrain_2gpu_h100_nvfp4": ('RA-P002',),
    "nemotronh_56b_pretrain_256gpu_gb300_bf16": ('RA-B001',),
    "qwen25_vl_72b_peft_1gpu_h100_bf16": ('RA-M001',),
    "qwen35_vl_397b_a17b_peft_32gpu_h100_bf16": ('RA-B001',),
    "qwen35_vl_397b_a17b_sft_128gpu_h100_bf16": ('RA-B001',),
    "qwen3_235b_a22b_pretrain_64gpu_gb200_fp8cs": ('RA-L007',),
    "qwen3_235b_a22b_pretrain_64gpu_gb200_fp8mx": ('RA-L007',),
    "qwen3_235b_a22b_pretrain_64gpu_gb200_nvfp4": ('RA-L007',),
    "qwen3_235b_a22b_pretrain_64gpu_gb300_bf16": ('RA-L007',),
    "qwen3_235b_a22b_pretrain_64gpu_gb300_fp8cs": ('RA-L007',),
    "qwen3_235b_a22b_pretrain_64gpu_gb300_fp8mx": ('RA-L007',),
    "qwen3_235b_a22b_pretrain_64gpu_gb300_nvfp4": ('RA-L007',),
    "qwen3_next_80b_a3b_peft_1gpu_h100_bf16": ('RA-M001',),
}
