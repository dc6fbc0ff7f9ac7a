"""The ``CodeMode`` that ``codemode`` exports: the engine, plus the features built on it.

The engine (:mod:`codemode.engine`) knows nothing of the features above it, so a method that
runs one of them lives here, in a subclass: ``from_file`` and ``async with`` give back this
class. Code inside codemode (serve, batch, bench, testing) uses the engine itself.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator

from codemode import engine
from codemode.batch import BatchOptions, ItemResult, Items, Workers, run_batch


class CodeMode(engine.CodeMode):
    """The engine (see :class:`codemode.engine.CodeMode`), plus :meth:`batch`."""

    async def batch(
        self,
        program: str,
        items: Items,
        options: BatchOptions | None = None,
        *,
        workers: Workers | None = None,
        ray_address: str | None = None,
    ) -> AsyncGenerator[ItemResult]:
        """Run ``program`` once per item (bound to ``INPUT``); yield each item's result.

        ``items`` is a ``.jsonl``/``.csv`` path or an iterable of mappings. The job's state lives
        beside the ledger, so a job started again with the same ``options.job_id`` resumes. It
        runs through the same driver as ``codemode batch`` (:func:`codemode.batch.run_batch`), on
        this engine's sessions, or on Ray with ``workers="ray"`` (default: ``[batch] engine``).
        This engine is not resized for the job: a concurrency above its ``[serve]
        max_sessions`` is refused before anything runs (``run_batch(config, ...)`` starts an
        engine sized for the job instead).
        """
        async with run_batch(self, program, items, options, workers=workers, ray_address=ray_address) as run:
            async for result in run.results():
                yield result
