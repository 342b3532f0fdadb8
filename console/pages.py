"""The console's pages, rendered on the server as plain HTML (every value escaped); the one
script (static/console.js) refreshes the overview, browses records and runs the live tail.
Nothing is fetched from anywhere but the console itself."""

from __future__ import annotations

import datetime
from html import escape
from typing import Any
from urllib.parse import quote

from core.security.tokens import Token

STATE_CLASS = {"up": "ok", "down": "bad", "degraded": "warn"}


def _e(value: Any) -> str:
    return escape("" if value is None else str(value))


def _when(ms: int | None) -> str:
    if not ms:
        return "-"
    at = datetime.datetime.fromtimestamp(ms / 1000, datetime.UTC)
    return at.strftime("%Y-%m-%d %H:%M:%S.%f")[:-3] + "Z"


def _bytes(count: int | None) -> str:
    if count is None:
        return "-"
    for unit in ("B", "KiB", "MiB", "GiB"):
        if count < 1024 or unit == "GiB":
            return f"{count:.0f} {unit}" if unit == "B" else f"{count:.1f} {unit}"
        count = count / 1024  # type: ignore[assignment]
    return str(count)


def layout(title: str, body: str, token: Token | None, page: str = "") -> str:
    who = ""
    if token is not None and token.token_id != "-":
        ops = ", ".join(token.scope.claim()["ops"])
        who = (
            f'<span class="who">{_e(token.subject)} ({_e(ops)})</span>'
            '<form method="post" action="/signout" class="inline">'
            '<button type="submit" id="signout">sign out</button></form>'
        )
    nav = "".join(
        f'<a href="{href}" class="{"here" if page == name else ""}">{name}</a>'
        for name, href in (("overview", "/"), ("streams", "/streams"), ("runs", "/runs"),
                           ("audit", "/audit"))
    )  # fmt: skip
    return (
        "<!doctype html><html lang=en><head><meta charset=utf-8>"
        f"<title>{_e(title)} · globelog</title>"
        '<link rel="icon" href="data:,">'
        '<link rel="stylesheet" href="/static/console.css"></head>'
        f'<body data-page="{_e(page)}"><header><b>globelog</b><nav>{nav}</nav>{who}</header>'
        f"<main><h1>{_e(title)}</h1>{body}</main>"
        '<script src="/static/console.js"></script></body></html>'
    )


def signin(message: str = "") -> str:
    note = f'<p class="bad" id="refused">{_e(message)}</p>' if message else ""
    body = (
        f"{note}<p>Sign in with a globelog access token (<code>globelog token issue</code>). "
        "The console shows and allows only what its scope allows.</p>"
        '<form method="post" action="/signin"><textarea name="token" id="token" rows="4" '
        'cols="80" required></textarea><br><button type="submit" id="signin">sign in</button>'
        "</form>"
    )
    return layout("Sign in", body, None, "signin")


def overview(
    snapshot: dict[str, Any], token: Token, bookies: list[tuple[str, str]] | None = None
) -> str:
    body = (
        f'<p class="age">as of <span id="as-of">{_e(_when(snapshot.get("at_ms")))}</span></p>'
        f'<div id="overview">{overview_body(snapshot)}</div>'
    )
    if bookies and token.scope.allows("admin"):
        options = "".join(
            f'<option value="{_e(name)}">{_e(name)} ({_e(region)})</option>'
            for name, region in bookies
        )
        body += (
            '<section id="actions"><h2>Decommission a bookie (admin)</h2><p>Its copies are '
            "re-made elsewhere by the rebuilders and no new copy goes to it; "
            "<code>globelog bookie list</code> says when it holds nothing.</p>"
            f'<select id="bookie">{options}</select> '
            '<button type="button" data-action="decommission" data-url="/api/bookies/{bookie}'
            '/decommission" data-method="POST" class="danger">decommission</button> '
            '<button type="button" data-action="take back the decommission of" '
            'data-url="/api/bookies/{bookie}/decommission?undo=1" data-method="POST">undo</button>'
            ' <span id="action-result"></span></section>'
        )
    return layout("Overview", body, token, "overview")


def overview_body(snapshot: dict[str, Any]) -> str:
    """The part of the overview its script redraws from /api/overview."""
    parts = ['<section class="regions">']
    for region in snapshot.get("regions", []):
        state = region["state"]
        rows = "".join(
            f'<tr class="{STATE_CLASS.get(n["state"], "")}" data-node="{_e(n["name"])}">'
            f"<td>{_e(n['kind'])}</td><td>{_e(n['name'])}</td><td>{_e(n['address'])}</td>"
            f'<td class="state">{_e(n["state"])}</td><td>{_e(n["detail"])}</td></tr>'
            for n in region["nodes"]
        )
        parts.append(
            f'<div class="region {STATE_CLASS.get(state, "")}" data-region="{_e(region["name"])}"'
            f' data-state="{_e(state)}"><h2>{_e(region["name"])} '
            f'<span class="badge">{_e(state)}</span></h2>'
            f"<table><tr><th>kind</th><th>name</th><th>address</th><th>state</th>"
            f"<th>detail</th></tr>{rows}</table></div>"
        )
    parts.append("</section>")
    wan = snapshot.get("wan", [])
    if wan:
        cells = "".join(
            f"<tr><td>{_e(w['from'])} → {_e(w['to'])}</td><td>"
            f"{'-' if w['rtt_ms'] is None else _e(w['rtt_ms']) + ' ms'}</td>"
            f"<td>{_e(w['bookies_answering'])}/{_e(w['bookies'])}</td></tr>"
            for w in wan
        )
        parts.append(
            "<h2>WAN</h2><p>Round trips of the bookie protocol from this console's region to "
            "each region's nearest bookie (median of three pings).</p>"
            f"<table id=wan><tr><th>link</th><th>round trip</th><th>bookies answering</th></tr>"
            f"{cells}</table>"
        )
    under = snapshot.get("under_replicated") or {}
    count = under.get("ledgers")
    parts.append(
        f'<h2>Under-replicated</h2><p id="under" class="{"bad" if count else "ok"}">'
        f"{'unknown' if count is None else _e(count)} ledger(s) marked under-replicated"
        f"{': ' + _e(under.get('sample')) if count else ''}</p>"
    )
    changes = snapshot.get("owner_changes", [])
    rows = "".join(
        f"<tr><td>{_e(_when(c['at_ms']))}</td><td>{_e(c['namespace'])}/{_e(c['stream'])}</td>"
        f"<td>{_e(c['from'] or '(none)')}</td><td>{_e(c['to'] or '(none)')}</td></tr>"
        for c in changes[:30]
    )
    parts.append(
        "<h2>Recent owner changes</h2><p>Seen by this console since it started.</p>"
        f"<table id=owners><tr><th>seen at</th><th>stream</th><th>from</th><th>to</th></tr>"
        f"{rows or '<tr><td colspan=4>none seen</td></tr>'}</table>"
    )
    return "".join(parts)


def streams(namespaces: list[str], listing: dict[str, Any] | None, token: Token) -> str:
    options = "".join(
        f"<option {'selected' if listing and listing['namespace'] == n else ''}>{_e(n)}</option>"
        for n in namespaces
    )
    form = (
        '<form method="get" action="/streams" id="stream-filter">namespace '
        f'<select name="ns" id="ns">{options}</select> name contains '
        f'<input name="filter" id="filter" value="{_e(listing["filter"] if listing else "")}">'
        '<button type="submit">show</button></form>'
    )
    if listing is None:
        return layout("Streams", form + "<p>No namespace to show.</p>", token, "streams")
    ns = listing["namespace"]
    rows = []
    for s in listing["streams"]:
        link = f"/streams/{quote(ns, safe='')}/{quote(s['stream'], safe='')}"
        if "error" in s:
            rows.append(f"<tr><td>{_e(s['stream'])}</td><td colspan=6>{_e(s['error'])}</td></tr>")
            continue
        rate = "-" if s["writes_per_s"] is None else f"{s['writes_per_s']}/s"
        rows.append(
            f'<tr data-stream="{_e(s["stream"])}"><td><a href="{link}">{_e(s["stream"])}</a></td>'
            f"<td>{_e(s['records_completed'])}{'+' if s['in_progress'] else ''}</td>"
            f"<td>{_e(_bytes(s['bytes_completed']))}</td>"
            f"<td>{_e(s['segments'])}</td><td>{_e(s['owner'] or '(none)')}</td>"
            f"<td>{_e(rate)}</td></tr>"
        )
    note = (
        f"<p>{listing['shown']} of {listing['matching']} matching streams shown"
        " (write rates appear from the second look).</p>"
    )
    table = (
        '<table id="streams"><tr><th>stream</th><th>records (completed segments; + '
        "one being written)</th><th>bytes (completed segments)</th><th>segments</th><th>owner</th><th>writes</th></tr>"
        f"{''.join(rows)}</table>"
    )
    return layout(f"Streams of {ns}", form + note + table, token, "streams")


def _ensembles(ledger: dict[str, Any] | None, regions: list[str]) -> str:
    if ledger is None:
        return "<td colspan=3>ledger deleted (archived or truncated)</td>"
    cells = []
    for ensemble in ledger["ensembles"]:
        by_region = []
        for region in regions:
            chips = "".join(
                f'<span class="chip" title="{_e(b["bookie"])}">{_e(b["name"] or b["bookie"])}'
                f"<small>{_e(b['rack'])}</small></span>"
                for b in ensemble["bookies"]
                if b["region"] == region
            )
            by_region.append(f'<span class="rg">{_e(region)}: {chips or "-"}</span>')
        unknown = [b for b in ensemble["bookies"] if b["region"] is None]
        if unknown:
            by_region.append(
                f"<span class=bad>unknown: {_e([b['bookie'] for b in unknown])}</span>"
            )
        cells.append(
            f'<div class="ens {_e(ensemble["adherence"])}" title="{_e(ensemble["audit"])}">'
            f"from entry {_e(ensemble['first_entry_id'])}: {' '.join(by_region)} "
            f'<span class="badge">{_e(ensemble["adherence"])}</span></div>'
        )
    return (
        f"<td>ledger {_e(ledger['ledger_id'])}, {_e(ledger['state'])}<br><small>"
        f"E/W/A {_e(ledger['quorum'])}, min regions {_e(ledger['min_regions_for_durability'])}"
        f"</small></td><td>{_e(_bytes(ledger['length']))}</td><td>{''.join(cells)}</td>"
    )


def stream(
    view: dict[str, Any], token: Token, hidden: bool, segments_from: int,
    segments_shown: int,
) -> str:  # fmt: skip
    ns, name = view["namespace"], view["stream"]
    can_admin = token.scope.allows("admin", ns, name)
    total = view["segments_total"]
    shown = view["rows"]
    rows = "".join(
        f'<tr data-segment="{s["sequence"]}"><td>{s["sequence"]}</td><td>{_e(s["state"])}</td>'
        f"<td>{_e(s['first_seq'])}…{'' if s['record_count'] is None else s['first_seq'] + s['record_count'] - 1}"
        f"</td><td>{_e(s['writer_region'])}</td>{_ensembles(s['ledger'], view['regions'])}</tr>"
        for s in shown
    )
    more = ""
    if segments_from + segments_shown < total:
        more = (
            f'<p><a href="?segments_from={segments_from + segments_shown}">older segments</a></p>'
        )
    actions = ""
    base = f"/api/streams/{quote(ns, safe='')}/{quote(name, safe='')}"
    if can_admin:
        regions = "".join(f"<option>{_e(r)}</option>" for r in view["regions"])
        actions = (
            '<section id="actions"><h2>Changes (admin)</h2>'
            f'<button type="button" data-action="release" data-url="{_e(base)}/release" '
            'data-method="POST" id="act-release">release ownership</button> '
            '<input id="truncate-to" placeholder="DLSN, e.g. 3.0.0" size=12>'
            f'<button type="button" data-action="truncate" data-url="{_e(base)}/truncate'
            '?to={truncate-to}" data-method="POST" id="act-truncate">truncate before</button> '
            f'<select id="drain-region">{regions}</select>'
            f'<button type="button" data-action="drain" data-url="{_e(base)}/drain'
            '?region={drain-region}" data-method="POST" id="act-drain">drain in region</button>'
            f'<button type="button" data-action="undrain" data-url="{_e(base)}/drain'
            '?region={drain-region}&amp;undo=1" data-method="POST" id="act-undrain">undo</button> '
            f'<button type="button" data-action="delete" data-url="{_e(base)}" '
            'data-method="DELETE" id="act-delete" class="danger">delete stream</button> '
            '<span id="action-result"></span></section>'
        )
    search = (
        "<p>Payload contents are hidden in this namespace; search is off.</p>"
        if hidden
        else '<input id="contains" placeholder="text to find"><button type="button" id="search">search</button>'
    )
    body = (
        f'<div id="stream" data-api="{_e(base)}" data-hidden="{int(hidden)}">'
        f"<p>owner <b id=owner>{_e(view['owner'] or '(none)')}</b>, "
        f"<span id=records>{_e(view['records_completed'])}</span> records in completed "
        "segments (<span id=end>…</span> in all), "
        f"{total} segments, "
        "<span id=audit>checking every ensemble against the durability rule…</span></p>"
        "<h2>Segments</h2>"
        '<div id="timeline-box"><p id="timeline-note">drawing every segment…</p></div>'
        '<table id="segments"><tr><th>#</th><th>state</th><th>seqs</th><th>written from</th>'
        f"<th>ledger</th><th>bytes</th><th>ensembles by region (rack)</th></tr>{rows}</table>"
        f"{more}{actions}"
        '<h2>Records</h2><form id="browse">from '
        '<input id="from" value="earliest" size=24 '
        'title="42, seq:42, txid:T, dlsn:S.E.T, time:MS or earliest"> '
        '<select id="view"><option>text</option><option>hex</option><option>json</option>'
        '</select> <button type="button" id="go">show</button> '
        f'{search} <a id="export" href="{_e(base)}/export?from=earliest">export (JSON Lines)</a> '
        '<button type="button" id="tail">live tail</button> '
        '<button type="button" id="lag">delivery lag per region (5 s)</button></form>'
        '<table id="lag-table"></table>'
        '<p id="status"></p><table id="records-table"><thead><tr><th>seq</th><th>dlsn</th>'
        "<th>txid</th><th>written</th><th>region</th><th>payload</th></tr></thead>"
        "<tbody></tbody></table></div>"
    )
    return layout(f"{ns}/{name}", body, token, "stream")


def runs(listing: list[dict[str, Any]], token: Token, configured: bool) -> str:
    if not configured:
        return layout("Failover runs", "<p>No runs folder (--failover-runs).</p>", token, "runs")
    rows = "".join(
        f'<tr><td><a href="/runs/{quote(r["name"])}">{_e(r["name"])}</a></td>'
        f"<td>{_e(_when(r['finished_ms']))}</td>"
        f'<td class="{"ok" if r["valid"] else "bad"}">{_e(r["valid"])}</td>'
        f"<td>{_e(r['operations'])}</td><td>{_e(r['faults'])}</td><td>{_e(r['anomalies'])}</td></tr>"
        for r in listing
    )
    table = (
        '<table id="runs"><tr><th>run</th><th>finished</th><th>valid</th><th>operations</th>'
        f"<th>faults</th><th>anomalies</th></tr>{rows or '<tr><td colspan=6>none</td></tr>'}"
        "</table>"
    )
    return layout("Failover runs", table, token, "runs")


def run(report: dict[str, Any], token: Token) -> str:
    name = report["name"]
    counts = "".join(
        f"<tr><td>{_e(k)}</td><td>{_e(v)}</td></tr>" for k, v in report.get("counts", {}).items()
    )
    windows = "".join(
        f"<tr><td>{_e(k)}</td><td>{_e(v)}</td></tr>"
        for k, v in report.get("unavailability_s", {}).items()
    )
    faults = "".join(
        f"<tr><td>{_e(f['kind'])}</td><td>{_e(f['start_s'])} s</td><td>{_e(f['end_s'])} s</td></tr>"
        for f in report.get("faults", [])
    )
    anomalies = "".join(f"<li>{_e(a)}</li>" for a in report.get("anomalies", []))
    body = (
        f'<p>valid: <b class="{"ok" if report.get("valid") else "bad"}">{_e(report.get("valid"))}'
        f"</b></p>"
        f'<img id="timeline-png" src="/runs/{quote(name)}/timeline.png" alt="timeline of run '
        f'{_e(name)}: acknowledged sends and latency, faults shaded" width="100%">'
        f"<h2>Faults</h2><table id=faults><tr><th>kind</th><th>from</th><th>to</th></tr>{faults}"
        "</table><h2>Anomalies by kind</h2><table>"
        f"{counts}</table><h2>Anomalies</h2><ul id=anomalies>{anomalies or '<li>none</li>'}</ul>"
        "<h2>Longest time without an acknowledged send, per fault (s)</h2>"
        f"<table>{windows}</table>"
    )
    return layout(f"Failover run {name}", body, token, "runs")


def _target(target: Any) -> str:
    """An audit entry's target as a path: `ns/stream`, or the bookie."""
    if isinstance(target, dict):
        return "/".join(str(v) for v in target.values())
    return "" if target is None else str(target)


def audit(entries: list[dict[str, Any]], token: Token) -> str:
    rows = "".join(
        f"<tr><td>{_e(_when(e.get('at_ms')))}</td><td>{_e(e.get('subject'))}</td>"
        f"<td>{_e(e.get('action'))}</td><td>{_e(_target(e.get('target')))}</td>"
        f"<td>{_e(e.get('outcome'))}</td><td>{_e(e.get('detail', ''))}</td></tr>"
        for e in entries
    )
    table = (
        '<table id="audit"><tr><th>at</th><th>who</th><th>action</th><th>target</th>'
        f"<th>outcome</th><th>detail</th></tr>{rows or '<tr><td colspan=6>none</td></tr>'}"
        "</table>"
    )
    return layout("Audit log", table, token, "audit")


def error(status: int, code: str, message: str, token: Token | None) -> str:
    body = f'<p class="bad" id="error">{_e(status)} {_e(code)}: {_e(message)}</p>'
    return layout("Refused" if status in (401, 403) else "Error", body, token, "error")
