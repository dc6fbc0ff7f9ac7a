"""One job runs in one process at a time: a second one is refused with the holder's pid, and the
lock goes with its holder however that ends (closed, or killed), so a resume is never blocked."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from codemode.batch import BatchError, BatchOptions, SqliteJobStore, prepare_job

ITEMS = [{"id": "a"}, {"id": "b"}]


def test_a_second_store_cannot_start_a_job_another_one_is_running(tmp_path: Path) -> None:
    first, second = SqliteJobStore(tmp_path / "jobs.db"), SqliteJobStore(tmp_path / "jobs.db")
    try:
        prepare_job(first, "INPUT", ITEMS, BatchOptions(job_id="j", key="id"))
        with pytest.raises(BatchError, match=rf"job 'j' is running in another process \(pid {os.getpid()}\)"):
            prepare_job(second, "INPUT", ITEMS, BatchOptions(job_id="j", key="id"))
        prepare_job(second, "INPUT", ITEMS, BatchOptions(job_id="other", key="id"))  # other jobs run
    finally:
        first.close()
    resumed = prepare_job(second, "INPUT", ITEMS, BatchOptions(job_id="j", key="id", resume=True))
    assert resumed.resumed
    second.close()


@pytest.mark.integration
def test_a_killed_holder_leaves_no_lock_behind(tmp_path: Path) -> None:
    holder = (
        "import sys, time\n"
        "from pathlib import Path\n"
        "from codemode.batch import SqliteJobStore\n"
        "SqliteJobStore(Path(sys.argv[1])).claim('j')\n"
        "print('held', flush=True)\n"
        "time.sleep(60)\n"
    )
    process = subprocess.Popen(
        [sys.executable, "-c", holder, str(tmp_path / "jobs.db")], stdout=subprocess.PIPE, text=True
    )
    try:
        assert process.stdout is not None and process.stdout.readline().strip() == "held"
        store = SqliteJobStore(tmp_path / "jobs.db")
        with pytest.raises(BatchError, match=rf"pid {process.pid}"):
            prepare_job(store, "INPUT", ITEMS, BatchOptions(job_id="j", key="id"))
    finally:
        process.send_signal(signal.SIGKILL)
        process.wait()
    prepare_job(store, "INPUT", ITEMS, BatchOptions(job_id="j", key="id"))
    store.close()
