"""The web console in a real browser (Debian's Chromium, driven by Playwright) against the real
session cluster and its proxies: pages render without errors, the record browser finds
records by seq, time and content, the live tail shows a new record within 2 s, a region taken
down shows as down within 5 s, a read-only token sees no change control and a forged one is
refused.

Screenshots go to GLOBELOG_CONSOLE_SCREENSHOTS when set (docs/img is where docs/console.md
takes them from), else to the test's temporary folder.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import sys
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from playwright.async_api import Browser, Page, async_playwright, expect

from console.access import CHANGE_HEADER
from core.children import Child
from core.security.tokens import Scope, issue, load_signing_key, new_signing_key
from figures.plots import failover_timeline
from localcluster import regions
from localcluster.controller import Cluster
from localcluster.tools import Tools
from region.client import ProxyClient
from tests.support.security import SECURITY, admin_token, client_session
from tests.support.streams import fresh_namespace
from tests.support.topologies import free_ports

CHROMIUM = Path("/usr/bin/chromium")
# headless, and nothing that reaches for the internet (this machine refuses it)
CHROMIUM_ARGS = [
    "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
]  # fmt: skip
CONSOLE_START_TIMEOUT_S = 30.0
TAIL_SHOWN_WITHIN_S = 2.0
REGION_DOWN_SHOWN_WITHIN_S = 5.0

pytestmark = pytest.mark.timeout(240)


@dataclass
class RunningConsole:
    url: str
    audit: Path
    runs: Path


def screenshots(tmp_path: Path) -> Path:
    folder = Path(os.environ.get("GLOBELOG_CONSOLE_SCREENSHOTS") or tmp_path)
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def signed(ops: list[str], namespaces: list[str] | None = None, key: Any = None) -> str:
    scope = Scope.parse({"namespaces": namespaces or ["*"], "streams": ["*"], "ops": ops})
    key = key or load_signing_key(SECURITY.signing_key.read_bytes(), "test key")
    return issue(key, "console-tester", scope, time.time(), 600)[0]


def make_run(folder: Path) -> None:
    """A failover run's report and timeline, as `globelog failover run --out` leaves them."""
    run = folder / "run-1"
    run.mkdir(parents=True)
    acked = [i * 0.05 for i in range(400)]
    failover_timeline(
        run / "timeline.png", "failover run, seed 1", acked, [(t, 12.0) for t in acked],
        [(5.0, 9.0, "kill-write-proxy")],
    )  # fmt: skip
    report = {
        "valid": True,
        "counts": {"lost": 0, "duplicate": 0},
        "operations": {"send": 400},
        "unavailability_s": {"kill-write-proxy": [1.9]},
        "faults": [{"start_s": 5.0, "end_s": 9.0, "kind": "kill-write-proxy"}],
        "anomalies": [],
        "anomalies_total": 0,
    }
    (run / "report.json").write_text(json.dumps(report))


@contextlib.asynccontextmanager
async def console_process(cluster: Cluster, tmp_path: Path) -> AsyncIterator[RunningConsole]:
    (port,) = free_ports(1)
    runs, audit = tmp_path / "runs", tmp_path / "audit.jsonl"
    make_run(runs)
    log = (tmp_path / "console.log").open("wb")
    process = Child(
        (sys.executable, "-m", "cli.main", "serve", "console", "--region", "us-east",
        "--topology", str(cluster.topology_path), "--listen", f"127.0.0.1:{port}",
        "--failover-runs", str(runs), "--audit-log", str(audit), "--hide-payloads", "secret"),
        stdout=log, stderr=log,
    )  # fmt: skip
    url = f"https://127.0.0.1:{port}"
    try:
        async with client_session() as http, asyncio.timeout(CONSOLE_START_TIMEOUT_S):
            while True:
                assert process.returncode is None, (tmp_path / "console.log").read_text()
                with contextlib.suppress(aiohttp.ClientError):
                    async with http.get(url + "/api/overview") as answer:
                        if answer.status == 200 and (await answer.json())["at_ms"]:
                            break
                await asyncio.sleep(0.2)
        yield RunningConsole(url, audit, runs)
    finally:
        process.terminate()
        try:
            await process.wait(15)
        finally:
            process.kill()  # (when it did not end in time)
        log.close()


@contextlib.asynccontextmanager
async def chromium() -> AsyncIterator[Browser]:
    async with async_playwright() as driver:
        browser = await driver.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        try:
            yield browser
        finally:
            await browser.close()


async def signed_in_page(browser: Browser, url: str, token: str, errors: list[str]) -> Page:
    context = await browser.new_context(
        ignore_https_errors=True, viewport={"width": 1400, "height": 900}
    )
    page = await context.new_page()
    page.on(
        "console", lambda m: errors.append(f"{m.type}: {m.text}") if m.type == "error" else None
    )
    page.on("pageerror", lambda e: errors.append(f"page error: {e}"))
    await page.goto(url + "/")
    assert page.url.endswith("/signin")  # nothing shown without a token
    await page.fill("#token", token)
    await page.click("#signin")
    await page.wait_for_url(url + "/")
    return page


async def write_records(
    cluster: Cluster, namespace: str, stream: str, payloads: list[bytes]
) -> list[Any]:
    proxy = cluster.topology.region("us-east").write_proxies[0]
    async with ProxyClient([cluster.topology.proxy_url(proxy)], namespace, deadline_s=60) as client:
        with contextlib.suppress(Exception):
            await client.create(stream)
        return [await client.write(stream, p) for p in payloads]


async def release(cluster: Cluster, namespace: str, stream: str) -> None:
    proxy = cluster.topology.proxy_url(cluster.topology.region("us-east").write_proxies[0])
    async with (
        client_session() as http,
        http.post(f"{proxy}/v1/namespaces/{namespace}/streams/{stream}/release") as answer,
    ):
        assert answer.status == 200, await answer.text()


async def first_row_seq(page: Page, position: str) -> int:
    await page.evaluate("document.querySelector('#status').textContent = ''")
    await page.fill("#from", position)
    await page.click("#go")
    await expect(page.locator("#status")).to_contain_text("record")
    return int(await page.locator("#records-table tbody tr").first.get_attribute("data-seq") or -1)


async def visit_runs_and_audit(browser: Browser, page: Page, url: str, shots: Path) -> None:
    """The failover runs, a run with its timeline, the audit log, and the sign-in page."""
    await page.goto(url + "/runs")
    await page.screenshot(path=str(shots / "console-runs.png"), full_page=True)
    await page.click("text=run-1")
    # the plot loaded and drew (its load is not part of the click's navigation)
    await page.wait_for_function(
        "() => { const img = document.querySelector('#timeline-png');"
        " return img !== null && img.complete && img.naturalWidth > 0; }",
        timeout=15_000,
    )
    await page.screenshot(path=str(shots / "console-run.png"), full_page=True)
    await page.goto(url + "/audit")
    assert await page.locator("#audit").count() == 1
    signin = await (await browser.new_context(ignore_https_errors=True)).new_page()
    await signin.goto(url + "/")
    await signin.screenshot(path=str(shots / "console-signin.png"))


async def test_pages_render_and_the_record_browser_finds_by_seq_time_and_content(
    services: Cluster, tmp_path: Path
) -> None:
    namespace = fresh_namespace()
    before = [f"order {i} widget-{i}".encode() for i in range(10)]
    await write_records(services, namespace, "orders", before)
    await release(services, namespace, "orders")  # the next writes go to a second segment
    await asyncio.sleep(0.3)
    cut_ms = int(time.time() * 1000)
    await asyncio.sleep(0.3)
    after = [f"order {i} gadget-{i}".encode() for i in range(10, 20)]
    acked = await write_records(services, namespace, "orders", after)
    shots = screenshots(tmp_path)
    errors: list[str] = []
    async with console_process(services, tmp_path) as console, chromium() as browser:
        page = await signed_in_page(browser, console.url, admin_token(), errors)
        await page.wait_for_selector("[data-region='eu-west'][data-state='up']")
        await page.screenshot(path=str(shots / "console-overview.png"), full_page=True)

        await page.goto(f"{console.url}/streams?ns={namespace}")
        row = page.locator("#streams tr[data-stream='orders']")
        assert "wp-" in await row.inner_text()
        await page.screenshot(path=str(shots / "console-streams.png"), full_page=True)

        await page.goto(f"{console.url}/streams/{namespace}/orders")
        assert await page.locator("#segments tr[data-segment]").count() == 2
        await expect(page.locator("#audit")).to_contain_text("0 ensemble(s) breaking")
        await expect(page.locator("#timeline rect")).to_have_count(
            await page.locator("#segments tr[data-segment]").count()
        )
        await expect(page.locator("#end")).to_have_text("20")
        assert await first_row_seq(page, "17") == 17
        assert await first_row_seq(page, f"seq:{acked[3].seq}") == acked[3].seq
        assert await first_row_seq(page, f"time:{cut_ms}") == 10
        assert await first_row_seq(page, f"dlsn:{acked[5].dlsn}") == acked[5].seq
        await page.fill("#from", "earliest")
        await page.fill("#contains", "gadget-14")
        await page.click("#search")
        await expect(page.locator("#status")).to_contain_text("match")
        found = page.locator("#records-table tbody tr")
        assert await found.count() == 1
        assert await found.first.get_attribute("data-seq") == "14"
        await page.screenshot(path=str(shots / "console-stream.png"), full_page=True)

        export = await page.context.request.get(
            f"{console.url}/api/streams/{namespace}/orders/export?from=earliest"
        )
        lines = (await export.text()).splitlines()
        assert [json.loads(line)["payload"].encode() for line in lines] == before + after

        await visit_runs_and_audit(browser, page, console.url, shots)
    assert errors == []


async def test_the_live_tail_shows_a_new_record_within_two_seconds(
    services: Cluster, tmp_path: Path
) -> None:
    namespace = fresh_namespace()
    await write_records(services, namespace, "live", [b"first", b"second"])
    errors: list[str] = []
    async with console_process(services, tmp_path) as console, chromium() as browser:
        page = await signed_in_page(browser, console.url, admin_token(), errors)
        await page.goto(f"{console.url}/streams/{namespace}/live")
        await page.click("#tail")
        await expect(page.locator("#status")).to_contain_text("tailing from seq 2")
        (acked,) = await write_records(
            services, namespace, "live", [b"third, written while tailing"]
        )
        written = time.monotonic()
        await page.wait_for_selector(
            f"#records-table tbody tr[data-seq='{acked.seq}']", timeout=TAIL_SHOWN_WITHIN_S * 1000
        )
        shown_s = time.monotonic() - written
        assert shown_s <= TAIL_SHOWN_WITHIN_S
        assert "third, written while tailing" in await page.inner_text("#records-table tbody")

        # delivery lag per region: every region's read proxy tailed while records are written
        await page.click("#tail")  # stops the tail
        await page.click("#lag")
        await asyncio.sleep(2.0)  # the console has found the end and opened the tails
        await write_records(services, namespace, "live", [f"lag {i}".encode() for i in range(5)])
        await expect(page.locator("#status")).to_contain_text(
            "delivery lag measured", timeout=15_000
        )
        for region in ("us-east", "us-west", "eu-west"):
            cells = page.locator(f"#lag-table tr[data-region='{region}'] td")
            assert int(await cells.nth(1).inner_text()) >= 1, region
            assert (await cells.nth(2).inner_text()).endswith(" ms")
    assert errors == []


async def test_a_read_only_token_sees_no_change_control_and_a_forged_one_is_refused(
    services: Cluster, tmp_path: Path
) -> None:
    namespace = fresh_namespace()
    await write_records(services, namespace, "s", [b"payload one"])
    await write_records(services, "secret", "hidden", [b"do not show"])
    reader = signed(["read", "observe"], [namespace, "secret"])
    forged = signed(["read", "observe", "admin"], key=new_signing_key())
    errors: list[str] = []
    async with console_process(services, tmp_path) as console, chromium() as browser:
        page = await signed_in_page(browser, console.url, reader, errors)
        await page.goto(f"{console.url}/streams/{namespace}/s")
        assert await page.locator("#segments").count() == 1
        assert await page.locator("#actions").count() == 0
        assert await page.locator("button[data-action]").count() == 0
        # the API refuses a change from this token, even with the console's header
        answer = await page.context.request.post(
            f"{console.url}/api/streams/{namespace}/s/release", headers={CHANGE_HEADER: "1"}
        )
        assert answer.status == 403
        assert "admin" in (await answer.json())["message"]
        # payloads of a hidden namespace are not shown, and not searchable
        page_json = await page.context.request.get(
            f"{console.url}/api/streams/secret/hidden/records?from=earliest"
        )
        assert "do not show" not in await page_json.text()
        search = await page.context.request.get(
            f"{console.url}/api/streams/secret/hidden/search?contains=show"
        )
        assert search.status == 403
        # another namespace: refused
        other = await page.context.request.get(f"{console.url}/api/streams/other/s/records")
        assert other.status == 403

        # a forged token is refused at sign-in and on the API
        context = await browser.new_context(ignore_https_errors=True)
        forger = await context.new_page()
        await forger.goto(console.url + "/signin")
        await forger.fill("#token", forged)
        await forger.click("#signin")
        assert "refused" in await forger.inner_text("#refused")
        api = await context.request.get(
            console.url + "/api/overview", headers={"Authorization": f"Bearer {forged}"}
        )
        assert api.status == 401

        # an admin's change: asked to confirm, done through the proxies, written to the audit log
        admin = await signed_in_page(browser, console.url, admin_token(), errors)
        await admin.goto(f"{console.url}/streams/{namespace}/s")
        admin.on("dialog", lambda dialog: asyncio.ensure_future(dialog.accept()))
        await admin.click("#act-release")
        # through the proxies: a takeover's worth of time on a loaded machine
        await expect(admin.locator("#action-result")).to_contain_text("released", timeout=15_000)
        entries = [json.loads(line) for line in console.audit.read_text().splitlines()]
        refused = [e for e in entries if e["subject"] == "console-tester"]
        done = [e for e in entries if e["outcome"] == "ok"]
        assert refused and refused[0]["outcome"] == "forbidden"
        assert done and done[0]["target"]["stream"] == "s"
        await admin.goto(console.url + "/audit")
        await admin.screenshot(
            path=str(screenshots(tmp_path) / "console-audit.png"), full_page=True
        )
        assert "POST /api/streams/{ns}/{stream}/release" in await admin.inner_text("#audit")
    assert errors == []


async def test_a_region_taken_down_shows_as_down_within_five_seconds(
    services: Cluster, tools: Tools, tmp_path: Path
) -> None:
    errors: list[str] = []
    async with console_process(services, tmp_path) as console, chromium() as browser:
        page = await signed_in_page(browser, console.url, admin_token(), errors)
        await page.wait_for_selector("[data-region='us-west'][data-state='up']")
        try:
            await regions.region_down(services, "us-west")
            down = time.monotonic()
            await page.wait_for_selector(
                "[data-region='us-west'][data-state='down']",
                timeout=REGION_DOWN_SHOWN_WITHIN_S * 1000,
            )
            assert time.monotonic() - down <= REGION_DOWN_SHOWN_WITHIN_S
            await page.screenshot(
                path=str(screenshots(tmp_path) / "console-region-down.png"), full_page=True
            )
        finally:
            await regions.region_up(services, tools, "us-west")
        await page.wait_for_selector("[data-region='us-west'][data-state='up']", timeout=20_000)
    assert errors == []
