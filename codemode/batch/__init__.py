"""Batch jobs: one program over many items, concurrent and resumable, with no duplicate side effects.

``codemode batch`` and :meth:`codemode.CodeMode.batch` are thin layers over :func:`prepare_job`
(check the programs, register the items, refuse duplicates before anything runs) and
:func:`run_job` (run them, a bounded number at a time, and yield each item's result).
"""

from codemode.batch._inputs import BadLine, Item, read_items
from codemode.batch._jobs import JobStore, SqliteJobStore, StoredItem
from codemode.batch._runner import (
    BatchError,
    BatchJob,
    BatchOptions,
    EngineWorker,
    ItemResult,
    ItemWorker,
    WorkerLost,
    is_bad,
    open_job_store,
    prepare_job,
    run_job,
    run_on_workers,
)
from codemode.batch._worker import RemoteWorker, WorkerRefused, WorkerSpec

__all__ = [
    "BadLine",
    "BatchError",
    "BatchJob",
    "BatchOptions",
    "EngineWorker",
    "Item",
    "ItemResult",
    "ItemWorker",
    "JobStore",
    "RemoteWorker",
    "SqliteJobStore",
    "StoredItem",
    "WorkerLost",
    "WorkerRefused",
    "WorkerSpec",
    "is_bad",
    "open_job_store",
    "prepare_job",
    "read_items",
    "run_job",
    "run_on_workers",
]
