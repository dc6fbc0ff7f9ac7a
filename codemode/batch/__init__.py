"""Batch jobs: one program over many items, concurrent and resumable, with no duplicate side effects.

``codemode batch`` and :meth:`codemode.CodeMode.batch` both run :func:`run_batch`, the one
driver: it prepares the job (:func:`prepare_job`: check the programs, register the items, refuse
duplicates before anything runs), picks the workers (an engine's sessions, or Ray actors), and
streams each item's result (:func:`run_job`, :func:`run_on_workers`), retrying a failed item
only when another attempt could end otherwise. Names load on first use (see ``codemode._lazy``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from codemode._lazy import lazy_exports

_EXPORTS = {
    "BadLine": "codemode.batch._inputs",
    "BatchError": "codemode.batch._runner",
    "BatchJob": "codemode.batch._runner",
    "BatchOptions": "codemode.batch._runner",
    "BatchRun": "codemode.batch._driver",
    "CompensationTally": "codemode.batch._compensation",
    "compensation_tally": "codemode.batch._compensation",
    "EngineWorker": "codemode.batch._local",
    "FailureGroup": "codemode.batch._reasons",
    "Item": "codemode.batch._inputs",
    "ItemResult": "codemode.batch._runner",
    "ItemWorker": "codemode.batch._runner",
    "Items": "codemode.batch._driver",
    "JobStore": "codemode.batch._jobs",
    "RemoteWorker": "codemode.batch._worker",
    "Runnable": "codemode.batch._jobs",
    "SqliteJobStore": "codemode.batch._jobs",
    "StoredItem": "codemode.batch._jobs",
    "UsageTally": "codemode.batch._usage",
    "WorkerLost": "codemode.batch._runner",
    "WorkerRefused": "codemode.batch._worker",
    "WorkerSpec": "codemode.batch._worker",
    "Workers": "codemode.batch._driver",
    "group_failures": "codemode.batch._reasons",
    "is_bad": "codemode.batch._jobs",
    "open_job_store": "codemode.batch._jobs",
    "prepare_job": "codemode.batch._runner",
    "read_items": "codemode.batch._inputs",
    "run_batch": "codemode.batch._driver",
    "run_job": "codemode.batch._local",
    "run_on_workers": "codemode.batch._dispatch",
    "sized_for": "codemode.batch._driver",
}

__all__, __getattr__ = lazy_exports(__name__, _EXPORTS)

if TYPE_CHECKING:
    from codemode.batch._compensation import CompensationTally as CompensationTally
    from codemode.batch._compensation import compensation_tally as compensation_tally
    from codemode.batch._dispatch import run_on_workers as run_on_workers
    from codemode.batch._driver import BatchRun as BatchRun
    from codemode.batch._driver import Items as Items
    from codemode.batch._driver import Workers as Workers
    from codemode.batch._driver import run_batch as run_batch
    from codemode.batch._driver import sized_for as sized_for
    from codemode.batch._inputs import BadLine as BadLine
    from codemode.batch._inputs import Item as Item
    from codemode.batch._inputs import read_items as read_items
    from codemode.batch._jobs import JobStore as JobStore
    from codemode.batch._jobs import Runnable as Runnable
    from codemode.batch._jobs import SqliteJobStore as SqliteJobStore
    from codemode.batch._jobs import StoredItem as StoredItem
    from codemode.batch._jobs import is_bad as is_bad
    from codemode.batch._jobs import open_job_store as open_job_store
    from codemode.batch._local import EngineWorker as EngineWorker
    from codemode.batch._local import run_job as run_job
    from codemode.batch._reasons import FailureGroup as FailureGroup
    from codemode.batch._reasons import group_failures as group_failures
    from codemode.batch._runner import BatchError as BatchError
    from codemode.batch._runner import BatchJob as BatchJob
    from codemode.batch._runner import BatchOptions as BatchOptions
    from codemode.batch._runner import ItemResult as ItemResult
    from codemode.batch._runner import ItemWorker as ItemWorker
    from codemode.batch._runner import WorkerLost as WorkerLost
    from codemode.batch._runner import prepare_job as prepare_job
    from codemode.batch._usage import UsageTally as UsageTally
    from codemode.batch._worker import RemoteWorker as RemoteWorker
    from codemode.batch._worker import WorkerRefused as WorkerRefused
    from codemode.batch._worker import WorkerSpec as WorkerSpec
