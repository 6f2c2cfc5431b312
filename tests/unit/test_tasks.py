"""`OwnedTasks` (gateway/tasks.py): a component's background tasks are held until they end,
a failure reaches the owner, and closing cancels and awaits them all."""

from __future__ import annotations

import asyncio

from gateway.tasks import OwnedTasks


async def test_a_failed_task_reaches_its_owner_and_a_finished_one_is_let_go():
    failures: list[tuple[str, BaseException]] = []
    tasks = OwnedTasks(lambda task, error: failures.append((task.get_name(), error)), prefix="x-")

    async def fail() -> None:
        raise ValueError("broken")

    async def finish() -> None:
        return None

    tasks.spawn(fail(), "fail")
    tasks.spawn(finish(), "finish")
    assert len(tasks) == 2
    for _ in range(3):
        await asyncio.sleep(0)
    assert len(tasks) == 0
    [(name, error)] = failures
    assert name == "x-fail"
    assert isinstance(error, ValueError)


async def test_cancel_all_cancels_and_awaits_every_task_and_the_ones_kept_apart():
    failures: list[BaseException] = []
    tasks = OwnedTasks(lambda task, error: failures.append(error))
    started = asyncio.Event()

    async def forever() -> None:
        started.set()
        await asyncio.Event().wait()

    tasks.spawn(forever(), "forever")
    apart = asyncio.ensure_future(asyncio.Event().wait())
    await started.wait()
    await tasks.cancel_all(also=[apart])  # type: ignore[list-item]
    assert len(tasks) == 0
    assert apart.cancelled()
    assert failures == []  # a cancelled task is not a failure
