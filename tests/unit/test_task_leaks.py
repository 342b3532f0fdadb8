"""The suite's task-leak check (tests/support/task_leaks.py) catches what it is meant to: a task
left pending and a task whose exception nobody retrieved, each named, in async and sync tests."""

from __future__ import annotations

import asyncio
import gc
import os
import textwrap
from pathlib import Path

import pytest

from tests.support.task_leaks import (
    PENDING_AT_CLOSE,
    PENDING_AT_RUN_END,
    LeakRecorder,
    WatchedEventLoop,
)

REPO = Path(__file__).resolve().parents[2]


async def _forever() -> None:
    await asyncio.Event().wait()


async def _fails() -> None:
    raise ValueError("nobody looked")


def _watched_loop(recorder: LeakRecorder) -> WatchedEventLoop:
    loop = WatchedEventLoop(recorder)
    loop.set_exception_handler(lambda _loop, _context: None)  # keep the suite's log clean
    return loop


def test_a_task_pending_when_the_loop_closes_is_named_and_cancelled() -> None:
    recorder = LeakRecorder()
    loop = _watched_loop(recorder)
    leaked = loop.create_task(_forever(), name="follower")
    loop.run_until_complete(asyncio.sleep(0))
    loop.close()
    [leak] = recorder.take()
    assert leak.what == PENDING_AT_CLOSE
    assert "task 'follower' running _forever()" in leak.task
    assert "tests/unit/test_task_leaks.py" in leak.task and "_watched_loop" not in leak.task
    assert "in test_a_task_pending_when_the_loop_closes" in leak.task  # where it was made
    assert leaked.cancelled()


def test_an_exception_nobody_retrieved_is_named_with_the_exception() -> None:
    recorder = LeakRecorder()
    loop = _watched_loop(recorder)
    task = loop.create_task(_fails(), name="sender")
    loop.run_until_complete(asyncio.sleep(0))
    loop.close()
    assert task.done() and recorder.take() == []  # not lost yet: someone may still look
    del task
    gc.collect()
    [leak] = recorder.take()
    assert leak.what == "Task exception was never retrieved"
    assert "task 'sender' running _fails()" in leak.task
    assert leak.exception == "ValueError('nobody looked')"


def test_tasks_that_were_awaited_or_retrieved_are_not_reported() -> None:
    recorder = LeakRecorder()
    loop = _watched_loop(recorder)

    async def tidy() -> None:
        await asyncio.create_task(asyncio.sleep(0))
        failing = asyncio.create_task(_fails())
        await asyncio.wait([failing])
        assert isinstance(failing.exception(), ValueError)

    loop.run_until_complete(tidy())
    loop.close()
    gc.collect()
    assert recorder.tasks_made == 3
    assert recorder.take() == []


def test_the_suite_fixture_fails_each_leaking_test_and_names_the_task(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]))
    pytester.makeconftest('pytest_plugins = ["tests.support.task_leaks"]')
    pytester.makepyfile(
        test_leaks=textwrap.dedent(
            """
            import asyncio

            async def follow():
                await asyncio.Event().wait()

            async def fail():
                raise ValueError("lost")

            async def test_leaves_a_task_pending():
                asyncio.create_task(follow(), name="follower")

            async def test_drops_a_failed_task():
                asyncio.create_task(fail(), name="sender")
                await asyncio.sleep(0)

            def test_drops_a_failed_task_in_asyncio_run():
                async def main():
                    asyncio.create_task(fail(), name="runner-child")
                    await asyncio.sleep(0)

                asyncio.run(main())

            async def test_awaits_its_tasks():
                await asyncio.create_task(asyncio.sleep(0))
            """
        )
    )
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-o", "asyncio_mode=auto")
    result.assert_outcomes(passed=4, errors=3)
    result.stdout.fnmatch_lines_random(
        [
            "*ERROR at teardown of test_leaves_a_task_pending*",
            f"*{PENDING_AT_CLOSE}: task 'follower' running follow()*"
            "created at */test_leaks.py:10 in test_leaves_a_task_pending*",
            "*Task exception was never retrieved: task 'sender' running fail()*",
            "*Task exception was never retrieved: task 'runner-child' running fail()*",
            "*exception: ValueError('lost')*",
        ]
    )


def _suite_plugin(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]))
    pytester.makeconftest('pytest_plugins = ["tests.support.task_leaks"]')


def test_a_task_asyncio_run_would_cancel_in_silence_fails_its_test(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    _suite_plugin(pytester, monkeypatch)
    pytester.makepyfile(
        test_runs=textwrap.dedent(
            """
            import asyncio

            async def follow():
                await asyncio.Event().wait()

            def test_leaves_a_task_behind_in_asyncio_run():
                async def main():
                    asyncio.create_task(follow(), name="left-behind")
                    await asyncio.sleep(0)

                asyncio.run(main())

            def test_leaves_one_in_a_runner_of_another_loop():
                async def main():
                    asyncio.create_task(follow(), name="runner-left")

                with asyncio.Runner(loop_factory=asyncio.SelectorEventLoop) as runner:
                    runner.run(main())

            def test_awaits_its_tasks_in_asyncio_run():
                async def main():
                    await asyncio.create_task(asyncio.sleep(0))

                asyncio.run(main())
            """
        )
    )
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider")
    result.assert_outcomes(passed=3, errors=2)
    result.stdout.fnmatch_lines_random(
        [
            "*ERROR at teardown of test_leaves_a_task_behind_in_asyncio_run*",
            f"*{PENDING_AT_RUN_END}: task 'left-behind' running follow()*"
            "created at */test_runs.py:8 in main*",
            f"*{PENDING_AT_RUN_END}: task 'runner-left' running follow()*",
        ]
    )


def test_a_task_lost_after_the_last_test_fails_the_session(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    _suite_plugin(pytester, monkeypatch)
    pytester.makepyfile(
        test_session=textwrap.dedent(
            """
            import asyncio

            import pytest

            async def follow():
                await asyncio.Event().wait()

            @pytest.fixture(scope="session")
            def loop_of_the_session():
                loop = asyncio.new_event_loop()
                yield loop
                loop.create_task(follow(), name="teardown-follower")
                loop.run_until_complete(asyncio.sleep(0))
                loop.close()

            def test_uses_it(loop_of_the_session):
                assert not loop_of_the_session.is_closed()
            """
        )
    )
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider")
    result.assert_outcomes(passed=1)
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines(
        [
            "*asyncio tasks lost after the last test*",
            "1 asyncio task(s) lost by the session after its last test:",
            f"*{PENDING_AT_CLOSE}: task 'teardown-follower' running follow()*",
        ]
    )
