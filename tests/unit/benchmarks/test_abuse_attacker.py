"""The abuse benchmark stands an attacker on a host of its own in for a process that runs only
on cores nothing else wants, and tells which of the canary's read-backs opened a connection."""

from __future__ import annotations

import multiprocessing
import os
from typing import Any

import aiohttp
from aiohttp import web
from aiohttp.test_utils import TestServer

from benchmarks.proxies.abuse import ConnectTimes, lower_priority


def _lowered(pipe: Any) -> None:
    lower_priority(19, idle=True)
    pipe.send((os.sched_getscheduler(0), os.getpriority(os.PRIO_PROCESS, 0), os.getsid(0)))


def test_the_attacker_runs_niced_in_a_session_of_its_own_and_only_on_idle_cores() -> None:
    spawn = multiprocessing.get_context("spawn")
    received, sent = spawn.Pipe(duplex=False)
    child = spawn.Process(target=_lowered, args=(sent,))
    child.start()
    try:
        assert received.poll(60), "the child said nothing within 60 s"
        policy, nice, session = received.recv()
    finally:
        child.join(10)
        if child.is_alive():
            child.kill()
    assert policy == os.SCHED_IDLE
    assert nice == 19
    assert session == child.pid, "a session (and so an autogroup) of its own"


async def test_a_request_on_a_pooled_connection_opened_none() -> None:
    async def ok(_: web.Request) -> web.Response:
        return web.Response(text="ok")

    app = web.Application()
    app.router.add_get("/", ok)
    connects = ConnectTimes()
    async with (
        TestServer(app) as server,
        aiohttp.ClientSession(trace_configs=[connects.config]) as http,
    ):
        traced: list[dict[str, float]] = [{}, {}]
        for context in traced:
            async with http.get(server.make_url("/"), trace_request_ctx=context) as answer:
                assert await answer.text() == "ok"
        async with http.get(server.make_url("/")) as answer:  # untraced: nothing noted
            assert answer.status == 200
    first, second = traced
    assert 0 < first["connect_s"] < 5
    assert "connect_s" not in second, "the second went on the first's connection"
