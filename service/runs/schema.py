"""A run as the store keeps it: where it came from, what it answers, its layout, what it measured, how it ended.

The pydantic models are the contract of every way in (``recipe-advisor train``, ``runs add``, log readers,
``POST /v1/runs``, ``tune``) and of every way out (``runs list|show|export``, ``GET /v1/runs``). A record is
checked here for what its own fields can tell (a finite, positive step time; p10 <= median <= p90; a layout of
positive sizes); whether its model is known is the ways in's to check (``service.runs.checks``).
"""

from __future__ import annotations

import hashlib
import json
import math
from datetime import datetime, timezone
from functools import lru_cache
from typing import Any, Literal, Optional, get_args

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

OUTCOMES = ("completed", "stopped", "out_of_memory", "timed_out", "crashed", "refused")
Outcome = Literal["completed", "stopped", "out_of_memory", "timed_out", "crashed", "refused"]
ENGINES = ("bundled", "megatron", "automodel")
Engine = Literal["bundled", "megatron", "automodel"]
SOURCES = ("yours", "published")
Source = Literal["yours", "published"]
MAX_CONFIG_CHARS = 512 * 1024  # a config is a few KiB; a larger one is not a config
MAX_LOSS_POINTS = 2000  # the loss curve kept for the Runs view, evenly thinned beyond this
MAX_TEXT = 4096  # a label, version, command or detail


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")

    @model_validator(mode="before")
    @classmethod
    def _numbers_are_numbers(cls, data: Any) -> Any:
        """A number field takes a number: "1.5" or true is refused, not read as 1.5 or 1 (pydantic's lax mode
        would), so a job's epilogue that writes a figure as text learns it instead of storing a guess."""
        if isinstance(data, dict):
            for name in _number_fields(cls):
                if _not_a_number(data.get(name)):
                    raise ValueError(f"{name} must be a number, got {data[name]!r}")
            for name in _time_fields(cls):
                if isinstance(data.get(name), (int, float)):  # pydantic would read a number as Unix seconds
                    raise ValueError(f"{name} must be an ISO 8601 date-time string, got {data[name]!r}")
        return data


@lru_cache(maxsize=None)
def _number_fields(model: type[BaseModel]) -> tuple[str, ...]:
    """The fields holding numbers, or lists of numbers or of tuples of numbers."""
    def numeric(annotation: Any) -> bool:
        if annotation in (int, float):
            return True
        args = [a for a in get_args(annotation) if a is not type(None) and a is not Ellipsis]
        return bool(args) and all(numeric(a) for a in args)
    return tuple(name for name, field in model.model_fields.items() if numeric(field.annotation))


@lru_cache(maxsize=None)
def _time_fields(model: type[BaseModel]) -> tuple[str, ...]:
    return tuple(name for name, field in model.model_fields.items()
                 if field.annotation is datetime or datetime in get_args(field.annotation))


def _not_a_number(value: Any) -> bool:
    if isinstance(value, (list, tuple)):
        return any(_not_a_number(v) for v in value)
    return isinstance(value, (str, bool))


def _finite_non_negative(value: Optional[float], name: str) -> Optional[float]:
    if value is None:
        return None
    if not math.isfinite(value):
        raise ValueError(f"{name} must be a finite number, got {value}")
    if value < 0:
        raise ValueError(f"{name} must not be negative, got {value}")
    return value


class Provenance(_Strict):
    """Where the run came from: the engine and its software, the container or release, the hosts, who ran it."""

    engine: Engine = Field("bundled", description="The engine that ran it: bundled, megatron or automodel.",
                           examples=["megatron"])
    software: dict[str, str] = Field(default_factory=dict, description="package -> version (torch, megatron-core...)",
                                     examples=[{"torch": "2.8.0", "megatron-core": "0.14.0"}])
    release: Optional[str] = Field(None, max_length=MAX_TEXT,
                                   description="container or release tag (nemo:25.09, Bridge 26.02); calibration "
                                               "groups by it", examples=["nemo:25.09"])
    hosts: int = Field(1, ge=1, description="Hosts (nodes) the run used.", examples=[2])
    cluster: Optional[str] = Field(None, max_length=MAX_TEXT, description="a cluster label the user sets",
                                   examples=["eos"])
    team: Optional[str] = Field(None, max_length=MAX_TEXT, description="A team label the user sets; null when unset.",
                                examples=["pretraining"])
    source: Source = Field("yours", description="yours: measured on your stack; published: NVIDIA's tables",
                           examples=["yours"])


class RunRequest(_Strict):
    """The request the run answers, in plan's terms."""

    model: str = Field(..., min_length=1, max_length=256, description="Model id, as plan names it.",
                       examples=["llama3-8b"])
    gpu_type: str = Field(..., min_length=1, max_length=256, description="GPU type, as plan names it.",
                          examples=["h100"])
    gpus_per_node: int = Field(..., ge=1, description="GPUs used on each node.", examples=[8])
    nodes: int = Field(1, ge=1, description="Nodes used.", examples=[1])
    goal: Literal["pretrain", "sft", "peft"] = Field("pretrain", description="Training goal: pretrain, sft or peft.",
                                                     examples=["pretrain"])
    seq_length: int = Field(..., ge=1, description="Sequence length, tokens.", examples=[8192])
    global_batch_size: int = Field(..., ge=1, description="Sequences per optimizer step.", examples=[128])
    precision: str = Field("bf16", max_length=64, description="Training precision (bf16, fp8cs, fp8mx...).",
                           examples=["bf16"])

    @property
    def world_size(self) -> int:
        return self.gpus_per_node * self.nodes


class RunLayout(_Strict):
    """The layout measured; ``dp`` is what the world left, as the trainer derived it."""

    tp: int = Field(1, ge=1, description="Tensor parallel size.", examples=[2])
    pp: int = Field(1, ge=1, description="Pipeline parallel size.", examples=[1])
    vp: Optional[int] = Field(None, ge=1, description="Virtual pipeline stages per rank (null: off).", examples=[None])
    cp: int = Field(1, ge=1, description="Context parallel size.", examples=[1])
    ep: int = Field(1, ge=1, description="Expert parallel size.", examples=[1])
    etp: Optional[int] = Field(None, ge=1, description="Expert tensor parallel size (null: not set).",
                               examples=[None])
    dp: int = Field(1, ge=1, description="Data parallel size: world / (TP x PP x CP).", examples=[4])
    micro_batch_size: int = Field(1, ge=1, description="Sequences per micro batch.", examples=[1])
    recompute: str = Field("none", max_length=64, description="none | selective | full", examples=["selective"])
    sharding: str = Field("none", max_length=64, description="none | optimizer | full (FSDP2 / Megatron-FSDP)",
                          examples=["optimizer"])
    fast_paths: dict[str, object] = Field(default_factory=dict, description="config key -> value (model.kernels...)",
                                          examples=[{"compile.enabled": True}])

    @property
    def key(self) -> tuple:
        """The layout as plan's rows name it: (tp, pp, vp or 1, cp, ep, etp, micro batch)."""
        return (self.tp, self.pp, self.vp or 1, self.cp, self.ep, self.etp, self.micro_batch_size)


class Measurement(_Strict):
    """What the run measured after its warm-up, and what the planner estimated for the layout at the time."""

    timed_steps: int = Field(0, ge=0, description="steps timed after warm-up", examples=[28])
    step_time_s: Optional[float] = Field(None, description="median step time, seconds", examples=[1.84])
    step_time_p10_s: Optional[float] = Field(None, description="10th percentile step time, seconds", examples=[1.81])
    step_time_p90_s: Optional[float] = Field(None, description="90th percentile step time, seconds", examples=[1.9])
    tokens_per_s_per_gpu: Optional[float] = Field(None, description="Measured training tokens per second per GPU.",
                                                  examples=[7120.0])
    mfu: Optional[float] = Field(None, description="Model FLOPs utilisation, 0-1.", examples=[0.41])
    peak_mem_gib: Optional[float] = Field(None, description="Peak GPU memory allocated on one GPU, GiB.",
                                          examples=[61.3])
    loss_first: Optional[float] = Field(None, description="Loss at the first logged step; null when not finite.",
                                        examples=[10.9])
    loss_last: Optional[float] = Field(None, description="Loss at the last logged step; null when not finite.",
                                       examples=[7.2])
    loss_curve: list[tuple[int, float]] = Field(default_factory=list, max_length=MAX_LOSS_POINTS,
                                                description="(step, loss) pairs, for the Runs view")
    estimate_step_time_s: Optional[float] = Field(None, description="The planner's estimated step time for this "
                                                  "layout when the run was added, seconds.", examples=[1.95])
    estimate_tokens_per_s_per_gpu: Optional[float] = Field(
        None, description="The planner's estimated tokens/s per GPU for this layout when the run was added.",
        examples=[6720.0])

    @field_validator("step_time_s", "step_time_p10_s", "step_time_p90_s", "tokens_per_s_per_gpu", "mfu",
                     "peak_mem_gib", "estimate_step_time_s", "estimate_tokens_per_s_per_gpu")
    @classmethod
    def _non_negative(cls, value: Optional[float], info) -> Optional[float]:
        value = _finite_non_negative(value, info.field_name)
        if value == 0 and info.field_name in ("step_time_s", "estimate_step_time_s"):
            raise ValueError(f"{info.field_name} must be positive, got 0")
        return value

    @field_validator("loss_first", "loss_last")
    @classmethod
    def _finite_loss(cls, value: Optional[float], info) -> Optional[float]:
        # A diverged run's loss is data (NaN would break the JSON export): it is stored as None with the outcome.
        return value if value is None or math.isfinite(value) else None

    @model_validator(mode="after")
    def _ordered_percentiles(self) -> "Measurement":
        lo, mid, hi = self.step_time_p10_s, self.step_time_s, self.step_time_p90_s
        below = lo is not None and mid is not None and lo > mid * (1 + 1e-9)
        above = hi is not None and mid is not None and hi < mid * (1 - 1e-9)
        if below or above:
            raise ValueError(f"step time percentiles out of order: p10 {lo}, median {mid}, p90 {hi}")
        return self


class Reproduce(_Strict):
    """What it takes to run it again at the same speed."""

    driver: Optional[str] = Field(None, max_length=MAX_TEXT, description="NVIDIA driver version on the hosts.",
                                  examples=["570.124.06"])
    env: dict[str, str] = Field(default_factory=dict, description="variables that change speed (NCCL_*, "
                                                                  "CUDA_DEVICE_MAX_CONNECTIONS, ...)",
                                examples=[{"CUDA_DEVICE_MAX_CONNECTIONS": "1"}])
    command: Optional[str] = Field(None, max_length=MAX_TEXT, description="The command line that ran it.",
                                   examples=["recipe-advisor train llama3-8b.yaml"])
    log_path: Optional[str] = Field(None, max_length=MAX_TEXT, description="Where its log lay, when read from one.",
                                    examples=["/logs/llama3-8b/log.txt"])


class RunRecord(_Strict):
    """One run. ``id`` and ``recorded_at`` are the store's; everything else is the run's own."""

    id: Optional[int] = Field(None, description="The store's id; null before it is stored.", examples=[12])
    recorded_at: Optional[datetime] = Field(None, description="When the store recorded it (set by the store).",
                                            examples=["2026-05-01T10:00:00+00:00"])
    started_at: Optional[datetime] = Field(None, description="when the run began, when known",
                                           examples=["2026-05-01T09:40:00+00:00"])
    provenance: Provenance = Field(default_factory=Provenance, description="Where the run came from.")
    request: RunRequest = Field(..., description="The request the run answers.")
    layout: RunLayout = Field(default_factory=RunLayout, description="The layout it measured.")
    config_text: Optional[str] = Field(None, max_length=MAX_CONFIG_CHARS, description="The run's config file, "
                                       "as text; left out of reads without the token where one is required.",
                                       examples=["model:\n  name: llama3-8b\n"])
    config_hash: Optional[str] = Field(
        None, max_length=128, description="sha256 of config_text, line endings normalised (set from it when left out).",
        examples=["11d2ad919b3c422311044c1e224342f4c1f0cb183c858b7e2d8a99be248e14a6"])
    measurement: Measurement = Field(default_factory=Measurement, description="What it measured.")
    outcome: Outcome = Field("completed", description="How it ended: completed, stopped, out_of_memory, timed_out, "
                             "crashed or refused.", examples=["completed"])
    outcome_detail: Optional[str] = Field(None, max_length=MAX_TEXT, description="Why it ended so, for an outcome "
                                          "other than completed.", examples=["CUDA out of memory at step 3"])
    reproduce: Reproduce = Field(default_factory=Reproduce, description="What it takes to run it again.")

    @model_validator(mode="after")
    def _hash_config(self) -> "RunRecord":
        if self.config_text is not None and self.config_hash is None:
            self.config_hash = config_hash(self.config_text)
        return self

    @model_validator(mode="after")
    def _completed_has_time(self) -> "RunRecord":
        if self.outcome == "completed" and self.measurement.step_time_s is None:
            raise ValueError("a completed run needs measurement.step_time_s (the median step time after warm-up)")
        return self

    @property
    def measured_tokens_per_s_per_gpu(self) -> Optional[float]:
        """Tokens/s/GPU as measured, or from the step time and the request when the run gave only that."""
        m = self.measurement
        if m.tokens_per_s_per_gpu is not None:
            return m.tokens_per_s_per_gpu
        if m.step_time_s:
            r = self.request
            return r.global_batch_size * r.seq_length / m.step_time_s / r.world_size
        return None

    def content_key(self) -> str:
        """The run's identity: the same run added twice (by `train` and again by `runs add`, or a log read
        twice) has the same key. The store's fields, the team and where the log lay are not part of it."""
        data = self.model_dump(mode="json", exclude={"id": True, "recorded_at": True, "config_text": True,
                                                     "provenance": {"team"}, "reproduce": {"log_path"}})
        return hashlib.sha256(json.dumps(data, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def config_hash(text: str) -> str:
    """sha256 of the config text with line endings and trailing space normalised (a copy that crossed Windows
    is the same config)."""
    lines = [line.rstrip() for line in text.replace("\r\n", "\n").split("\n")]
    return hashlib.sha256("\n".join(lines).strip().encode()).hexdigest()


def utcnow() -> datetime:
    return datetime.now(timezone.utc)
