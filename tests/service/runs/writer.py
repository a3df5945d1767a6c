"""A writer process for the store's concurrency tests: ``python -m tests.service.runs.writer URL MODE ARGS``.

add URL FIRST LAST [STEP]: add runs range(FIRST, LAST, STEP) (tiny_run(i)) and print how many it created.
hold URL: insert a run inside a transaction, print "inserted", then wait to be killed mid-transaction.
"""

from __future__ import annotations

import sys
import time

from service.runs.schema import RunRecord, utcnow
from service.runs.store import RunsStore, _row_values, runs_table


def tiny_run(i: int, **request) -> RunRecord:
    """A distinct small completed run per ``i``."""
    return RunRecord(
        request={"model": "tiny-llama", "gpu_type": "cpu", "gpus_per_node": 2, "seq_length": 128,
                 "global_batch_size": 8, **request},
        layout={"dp": 2, "micro_batch_size": 1 + i % 4},
        measurement={"timed_steps": 5, "step_time_s": 0.1 + i / 1000, "tokens_per_s_per_gpu": 1000.0 + i},
        provenance={"team": "a" if i % 2 else "b"},
    )


def _add(url: str, first: int, last: int, step: int = 1) -> None:
    store = RunsStore(url)
    created = sum(store.add(tiny_run(i))[1] for i in range(first, last, step))
    print(created, flush=True)


def _hold(url: str) -> None:
    store = RunsStore(url)
    record = tiny_run(10_000)
    stamped = record.model_copy(update={"recorded_at": utcnow()})
    with store.engine.connect().execution_options(writes=True) as conn, conn.begin():
        conn.execute(runs_table.insert().values(**_row_values(stamped, record.content_key())))
        print("inserted", flush=True)
        time.sleep(600)


if __name__ == "__main__":
    mode, url, *rest = sys.argv[1:]
    if mode == "add":
        _add(url, *map(int, rest))
    else:
        _hold(url)
