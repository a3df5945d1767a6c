"""What reading a checkpoint as data costs: DCP metadata through the restricted unpickler vs plain ``pickle``.

torch.distributed.checkpoint reads ``.metadata`` with ``pickle.load`` (C); the trainer reads it through
``trainer.components.checkpoint_trust.MetadataUnpickler``, whose ``find_class`` is Python. Both are timed in
this process on the same bytes, so the ratio means something on any machine. The metadata is that of an
optimizer state saved by DCP (``dcp.save``, one process): per parameter, two moment tensors and a step, plus
the param groups' byte entries; ``--params`` sets how many parameters (a Llama-3-8B has 291, a 70B 723, a
DeepSeek-V3 with per-expert tensors ~45,000). Also timed: ``verify_checkpoint`` of that folder (metadata,
byte entries weights-only, tensor bounds), against the trusted ``dcp.load`` of the whole state.

    .venv/bin/python benchmarks/checkpoint_metadata.py [--params 300 3000 30000] [--repeat 5] [--smoke]
"""

from __future__ import annotations

import argparse
import io
import pickle
import sys
import tempfile
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402
import torch.distributed.checkpoint as dcp  # noqa: E402
from plan_speed import timed  # noqa: E402  (this folder: best-of-N wall and CPU time)

from trainer.components.checkpoint_trust import MetadataUnpickler, load_dcp, verify_checkpoint  # noqa: E402


def optimizer_like_state(params: int) -> dict:
    """What get_optimizer_state_dict returns for ``params`` small parameters (the metadata grows with the
    entry count, not with the tensor sizes)."""
    state = {f"layers.{i}.weight": {"exp_avg": torch.zeros(4), "exp_avg_sq": torch.zeros(4),
                                    "step": torch.tensor(1.0)} for i in range(params)}
    groups = [{"lr": 3e-4, "betas": (0.9, 0.95), "eps": 1e-8, "weight_decay": 0.1, "amsgrad": False,
               "foreach": None, "maximize": False, "capturable": False, "differentiable": False, "fused": None,
               "params": [f"layers.{i}.weight" for i in range(params)]}]
    return {"optimizer": {"state": state, "param_groups": groups}}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--params", type=int, nargs="+", default=[300, 3000, 30000])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--smoke", action="store_true", help="one small size, one repeat (the test runs this)")
    args = parser.parse_args(argv)
    sizes, repeat = ([50], 2) if args.smoke else (args.params, args.repeat)
    warnings.filterwarnings("ignore", message="torch.distributed is disabled")
    import torch.distributed as dist

    if not dist.is_initialized():  # dcp.load of one process: a process group of one
        dist.init_process_group("gloo", init_method=f"file://{tempfile.mkdtemp()}/pg", rank=0, world_size=1)
    print("| params | metadata KB | pickle.load | restricted | ratio | verify_checkpoint | trusted dcp.load |")
    print("|---|---|---|---|---|---|---|")
    for params in sizes:
        with tempfile.TemporaryDirectory() as folder:
            state = optimizer_like_state(params)
            dcp.save(state, checkpoint_id=folder, no_dist=True)
            data = (Path(folder) / ".metadata").read_bytes()
            plain = timed(lambda: pickle.loads(data), repeat)[0]
            ours, _, metadata = timed(lambda: MetadataUnpickler(io.BytesIO(data)).load(), repeat)
            assert metadata == pickle.loads(data)
            verify = timed(lambda: verify_checkpoint(Path(folder)), repeat)[0]
            loaded = timed(lambda: load_dcp(state, Path(folder)), repeat)[0]
        print(f"| {params:,} | {len(data) // 1024:,} | {plain * 1e3:.1f} ms | {ours * 1e3:.1f} ms | "
              f"{ours / plain:.1f}x | {verify * 1e3:.0f} ms | {loaded * 1e3:.0f} ms |")
    return 0

if __name__ == "__main__":
    raise SystemExit(main())
