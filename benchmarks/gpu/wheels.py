"""The wheels a GPU benchmark call carries to the lent machine, and which of them to install there.

The lent machine (one H200) has Python 3.12 with torch 2.11 (CUDA 13), triton 3.6 and a few of the
trainer's dependencies, reaches no package registry, and a call carries at most 64 MiB (the work
tree and the carried paths together). So the wheels of what the trainer imports and the machine
lacks are downloaded here beforehand, for Python 3.12 / manylinux x86-64, into an ignored folder
that the call names in `carry`; run.sh installs from it, offline, only what the machine lacks.

    python benchmarks/gpu/wheels.py fetch [--dest DIR] [--python-version 3.12] [--dry-run]
    python benchmarks/gpu/wheels.py select DIR     # the wheels of DIR this interpreter lacks (run.sh)
    python benchmarks/gpu/wheels.py plan           # what is carried and why, without network

Standard library only: `select` runs on the lent machine before anything is installed.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Callable, Iterable, Optional

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
DEFAULT_DEST = HERE / "wheels"
MIB = 2**20
# What one device call carries at most (work tree and carried paths together), and the share of it
# the wheels and the work tree may take: the rest is margin for files a later change adds.
CARRY_LIMIT_BYTES = 64 * MIB
CARRY_BUDGET_BYTES = 32 * MIB

# Distributions the trainer, the recipe index and the planner import at run time (eagerly or
# lazily), besides torch itself; tests/trainer/fused/test_gpu_benchmark_parts.py checks this against their imports.
TRAINER_NEEDS = ("pydantic", "pydantic-core", "annotated-types", "typing-inspection", "typing-extensions",
                 "pyyaml", "numpy", "safetensors", "tokenizers", "tqdm", "huggingface-hub",
                 "liger-kernel", "torchao",
                 *("torchtitan", "spmd-types", "torch-checkpointing", "tyro", "docstring-parser", "typeguard",
                   "einops"))
# The last line is the peer run's (peer_torchtitan.py): torchtitan's model and parallelize functions and what they
# import. Its Trainer also needs datasets, tensorboard and wandb, which with their own dependencies outgrow the
# carry, so the peer runs under a minimal loop and none of those travel.
# What the lent machine's Python already has (its torch environment, as the device notes list it).
LENT_MACHINE_HAS = ("torch", "triton", "transformers", "safetensors", "pyyaml", "tqdm", "huggingface-hub",
                    "tokenizers", "numpy", "jinja2", "typing-extensions", "psutil")
# Packages the machine has in a version that cannot be read from here, which a carried wheel needs at
# a minimum: carried too, and installed only where the machine's copy is older (pydantic 2.14 and
# pydantic-core 2.50 need typing-extensions >= 4.16.0; a newer typing-extensions is backward compatible).
CARRIED_IN_CASE = ("typing-extensions",)
# Pinned versions of everything carried. pydantic is the version the product is tested with; torchao
# 0.18 loads its C++ extensions on torch >= 2.11 (torchao/__init__.py); liger-kernel needs torch
# >= 2.1.2 and triton >= 2.3.1 (the machine has 2.11 and 3.6).
PINS = {
    "pydantic": "2.14.4",
    "pydantic-core": "2.50.5",
    "annotated-types": "0.8.0",
    "typing-inspection": "0.4.5",
    "typing-extensions": "4.16.0",
    "liger-kernel": "0.8.5",
    "torchao": "0.18.0",
    "torchtitan": "0.3.0",
    "spmd-types": "0.2.3",  # torchtitan 0.3.0 pins it
    "torch-checkpointing": "0.1.1",  # needs torch >= 2.11: the machine's
    "tyro": "1.0.17",
    "docstring-parser": "0.18.0",
    "typeguard": "4.6.1",
    "einops": "0.8.2",
}
PYTHON_VERSION = "3.12"
# manylinux tags the machine's glibc takes (pydantic-core is manylinux_2_17, torchao manylinux_2_24/2_28).
PLATFORMS = ("manylinux_2_28_x86_64", "manylinux_2_27_x86_64", "manylinux_2_24_x86_64", "manylinux_2_17_x86_64",
             "manylinux2014_x86_64", "manylinux1_x86_64")
RUN_COMMAND = "bash benchmarks/gpu/run.sh"


def normalise(name: str) -> str:
    """A distribution name as PEP 503 compares them: pydantic_core, Pydantic-Core -> pydantic-core."""
    return re.sub(r"[-_.]+", "-", name).lower()


def missing_on_machine(needed: Iterable[str] = TRAINER_NEEDS, machine_has: Iterable[str] = LENT_MACHINE_HAS,
                       carried_in_case: Iterable[str] = CARRIED_IN_CASE) -> list[str]:
    """The distributions to carry: what is needed and the machine lacks, plus those carried in case."""
    has = {normalise(name) for name in machine_has}
    in_case = {normalise(name) for name in carried_in_case}
    return [normalise(name) for name in needed if normalise(name) not in has or normalise(name) in in_case]


def pinned_specs(distributions: Iterable[str], pins: dict[str, str] = PINS) -> list[str]:
    """``name==version`` for each distribution; a distribution without a pin is an error here, not on the GPU."""
    unpinned = [name for name in distributions if name not in pins]
    if unpinned:
        raise ValueError(f"no pinned version for {', '.join(unpinned)}: add it to PINS in {Path(__file__).name}")
    return [f"{name}=={pins[name]}" for name in distributions]


def download_argv(spec: str, dest: Path, python_version: str = PYTHON_VERSION,
                  python: str = sys.executable) -> list[str]:
    """pip download of one pinned wheel for the lent machine's Python and platform, without its
    dependencies (each is listed itself, and those the machine has must not come along)."""
    argv = [python, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "--python-version", python_version,
            "--implementation", "cp"]
    for platform in PLATFORMS:
        argv += ["--platform", platform]
    return argv + ["--dest", str(dest), spec]


def parse_wheel_name(filename: str) -> tuple[str, str]:
    """(distribution, version) of a wheel file name: pydantic_core-2.50.5-cp312-...whl -> (pydantic-core, 2.50.5)."""
    parts = Path(filename).name.split("-")
    if len(parts) < 5 or not filename.endswith(".whl"):
        raise ValueError(f"not a wheel file name: {filename}")
    return normalise(parts[0]), parts[1]


def version_key(version: str) -> tuple[int, ...]:
    """The release numbers of a version (2.50.5 -> (2, 50, 5); 0.18.0+cu130 -> (0, 18, 0)): enough to order
    the pinned releases carried here without the packaging library, which the machine may not have."""
    numbers = []
    for part in re.split(r"[.+]", version):
        match = re.match(r"\d+", part)
        if not match:
            break
        numbers.append(int(match.group()))
    return tuple(numbers)


def installed_version(distribution: str) -> Optional[str]:
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return None


def wheels_to_install(wheels: Iterable[Path],
                      installed: Callable[[str], Optional[str]] = installed_version) -> list[Path]:
    """The wheels whose distribution this interpreter lacks or has in an older version than the wheel's."""
    chosen = []
    for wheel in sorted(wheels):
        name, version = parse_wheel_name(wheel.name)
        have = installed(name)
        if have is None or version_key(have) < version_key(version):
            chosen.append(wheel)
    return chosen


def expected_files(dest: Path, specs: Iterable[str]) -> tuple[list[Path], list[str]]:
    """(the wheels of dest that match specs, the specs with no wheel there)."""
    found, absent = [], []
    wheels = {parse_wheel_name(p.name): p for p in dest.glob("*.whl")}
    for spec in specs:
        name, version = spec.split("==")
        path = wheels.get((normalise(name), version))
        if path is None:
            absent.append(spec)
        else:
            found.append(path)
    return found, absent


def work_tree_bytes(repo: Path = REPO) -> int:
    """Bytes of what a device call sends besides the carried paths: tracked files and untracked ones git
    does not ignore (0 where git cannot say)."""
    try:
        out = subprocess.run(["git", "-C", str(repo), "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                             capture_output=True, check=True, timeout=60).stdout
    except (OSError, subprocess.SubprocessError):
        return 0
    total = 0
    for name in out.decode(errors="replace").split("\0"):
        path = repo / name
        if name and path.is_file():
            total += path.stat().st_size
    return total


def size_problem(wheel_bytes: int, tree_bytes: int, budget: int = CARRY_BUDGET_BYTES,
                 limit: int = CARRY_LIMIT_BYTES) -> Optional[str]:
    """Why the wheels and the work tree would not travel with room to spare, or None."""
    total = wheel_bytes + tree_bytes
    if total <= budget:
        return None
    return (f"the wheels ({wheel_bytes / MIB:.1f} MiB) and the work tree ({tree_bytes / MIB:.1f} MiB) come to "
            f"{total / MIB:.1f} MiB, over the {budget / MIB:.0f} MiB kept for them of the {limit / MIB:.0f} MiB a call "
            "carries: drop a wheel the trainer can run without, or one the machine has")


def carry_path(dest: Path, repo: Path = REPO) -> str:
    """dest as the device tool's carry names it: relative to the repository root."""
    try:
        return str(dest.resolve().relative_to(repo))
    except ValueError:
        return str(dest)


def fetch(dest: Path, python_version: str, dry_run: bool) -> int:
    specs = pinned_specs(missing_on_machine())
    wanted = {(normalise(s.split("==")[0]), s.split("==")[1]) for s in specs}
    if dry_run:
        for spec in specs:
            print("+ " + " ".join(download_argv(spec, dest, python_version)))
        return 0
    dest.mkdir(parents=True, exist_ok=True)
    for stale in dest.glob("*.whl"):  # an older pin would travel and be installed too
        if parse_wheel_name(stale.name) not in wanted:
            print(f"removing {stale.name} (not pinned any more)")
            stale.unlink()
    for spec in specs:
        print(f"fetching {spec}", flush=True)
        done = subprocess.run(download_argv(spec, dest, python_version), capture_output=True, text=True)
        if done.returncode != 0:
            print(done.stdout[-2000:] + done.stderr[-2000:], file=sys.stderr)
            print(f"error: pip could not download {spec} for Python {python_version} on manylinux x86-64",
                  file=sys.stderr)
            return 1
    found, absent = expected_files(dest, specs)
    if absent:
        print(f"error: no wheel in {dest} for {', '.join(absent)}", file=sys.stderr)
        return 1
    wheel_bytes = sum(p.stat().st_size for p in found)
    tree_bytes = work_tree_bytes()
    for path in found:
        print(f"  {path.stat().st_size / MIB:6.2f} MiB  {path.name}")
    print(f"wheels: {len(found)} files, {wheel_bytes / MIB:.1f} MiB; with the work tree ({tree_bytes / MIB:.1f} MiB): "
          f"{(wheel_bytes + tree_bytes) / MIB:.1f} MiB of the {CARRY_LIMIT_BYTES / MIB:.0f} MiB a call carries")
    problem = size_problem(wheel_bytes, tree_bytes)
    if problem:
        print(f"error: {problem}", file=sys.stderr)
        return 1
    print(f'carry: ["{carry_path(dest)}"]')
    print(f"command: {RUN_COMMAND}")
    return 0


def main(argv: Optional[list[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--smoke", action="store_true", help="the `plan` action, which reads only this machine "
                        "(the suite runs it)")
    sub = parser.add_subparsers(dest="action")
    fetch_parser = sub.add_parser("fetch", help="download the carried wheels (needs PyPI)")
    fetch_parser.add_argument("--dest", type=Path, default=Path(os.environ.get("WHEELS", DEFAULT_DEST)))
    fetch_parser.add_argument("--python-version", default=PYTHON_VERSION,
                              help="the lent machine's Python (another one only for a rehearsal elsewhere)")
    fetch_parser.add_argument("--dry-run", action="store_true", help="print the downloads, fetch nothing")
    select_parser = sub.add_parser("select", help="print the wheels of DIR this interpreter lacks, one a line")
    select_parser.add_argument("dir", type=Path)
    sub.add_parser("plan", help="print what is carried and why")
    args = parser.parse_args(argv)
    if args.action is None and not args.smoke:
        parser.error("choose an action: fetch, select or plan")
    if args.action == "fetch":
        return fetch(args.dest, args.python_version, args.dry_run)
    if args.action == "select":
        for wheel in wheels_to_install(args.dir.glob("*.whl")):
            print(wheel)
        return 0
    missing = missing_on_machine()
    print("carried (the machine lacks them, or may have them too old): " + ", ".join(pinned_specs(missing)))
    print("taken from the machine: " + ", ".join(n for n in map(normalise, TRAINER_NEEDS) if n not in missing))
    return 0


if __name__ == "__main__":
    sys.exit(main())
