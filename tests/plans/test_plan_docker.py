"""Plan, approve, run under the plan - end to end in the Docker sandbox (the runtime in the image
returns placeholders for planned calls and passes them back as references)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from codemode import CodeMode
from codemode.config import Config
from codemode.ledger import open_ledger
from tests.plans.conftest import CountWrites
from tests.plans.test_dry_run import CREATE_THEN_LINK

pytestmark = [pytest.mark.docker, pytest.mark.anyio]


async def test_plan_approve_and_run_with_the_plan_in_docker(
    plan_config: Config, docker_image: str, count_writes: CountWrites
) -> None:
    async with CodeMode(plan_config, backend="docker") as engine:
        assert engine.backend == "docker"
        plan = await engine.plan(CREATE_THEN_LINK)
        assert plan.result is not None and plan.result.status == "ok", plan.result
        assert [c.label for c in plan.calls] == ["crm/add_note", "crm/record_payment"]
        assert plan.calls[1].references == (0,)
        assert count_writes() == 0
        with open_ledger(plan_config.ledger_location(), recover=False) as ledger:
            until = datetime.now(UTC) + timedelta(minutes=10)
            ledger.approve_plan(plan.plan_id, digest=plan.digest, approver="test", expires_at=until)
        result = await engine.run(CREATE_THEN_LINK, plan_id=plan.plan_id)
    assert result.status == "ok", result.error
    assert (result.calls, result.denials, result.flags) == (3, 0, ())
    assert count_writes() == 2
