"""The device mesh of a layout with context or pipeline parallel: ("pp", "dp", "cp", "tp").

Rank order (torchtitan's): TP innermost (the fastest links), then CP, DP, and PP outermost. Data
parallel shards the batch over "dp" only (the ranks of a CP group read the same sequences); FSDP2
shards parameters and reduces gradients over "dp" x "cp", flattened as "dp_cp", because every rank
of a CP group computes gradients of the same parameters from its own tokens.
"""

from __future__ import annotations

from typing import Optional

import torch.distributed as dist
from torch.distributed.device_mesh import DeviceMesh, init_device_mesh

MESH_DIMS = ("pp", "dp", "cp", "tp")
GRAD_DIM = "dp_cp"


def build_layout_mesh(world_size: int, *, tp_size: int = 1, cp_size: int = 1, pp_size: int = 1,
                      device_type: str = "cpu") -> Optional[DeviceMesh]:
    """The 4-D mesh (None for one process without a process group)."""
    model_parallel = tp_size * cp_size * pp_size
    if world_size % model_parallel:
        raise ValueError(f"tp_size x cp_size x pp_size ({tp_size} x {cp_size} x {pp_size}) must divide the number "
                         f"of processes ({world_size})")
    if not dist.is_initialized():
        if world_size == 1:
            return None
        raise ValueError(f"world size {world_size} needs torch.distributed to be initialised first")
    shape = (pp_size, world_size // model_parallel, cp_size, tp_size)
    mesh = init_device_mesh(device_type, shape, mesh_dim_names=MESH_DIMS)
    # Kept on the mesh object: slicing a flattened dimension from the root mesh is deprecated in torch.
    mesh.gradient_mesh = mesh["dp", "cp"]._flatten(GRAD_DIM)
    return mesh


def gradient_mesh(mesh: DeviceMesh) -> DeviceMesh:
    """The ranks that hold the same parameters and average their gradients: "dp" x "cp" (or "dp")."""
    flattened = getattr(mesh, "gradient_mesh", None)
    if flattened is not None and mesh["cp"].size() > 1:
        return flattened
    return data_mesh(mesh)


def data_mesh(mesh: DeviceMesh) -> DeviceMesh:
    """The ranks that read different batches: "dp", or with expert parallel the "dp" flattened from edp x ep,
    which build_mesh keeps on the mesh (slicing a flattened dimension from the root mesh is deprecated in torch
    and warns on every slice)."""
    flattened = getattr(mesh, "data_mesh", None)
    return flattened if flattened is not None else mesh["dp"]


def dim_size(mesh: Optional[DeviceMesh], name: str) -> int:
    if mesh is None or name not in (mesh.mesh_dim_names or ()):
        return 1
    return mesh[name].size()
