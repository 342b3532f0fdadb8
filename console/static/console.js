// globelog console: refreshes the overview and browses a stream's records. Every value from
// the server is put into the page as text (textContent), never as markup, except the
// overview's fragment, which the server renders escaped.
"use strict";

const page = document.body.dataset.page;

function when(ms) {
  return ms ? new Date(ms).toISOString().replace("T", " ") : "-";
}

function payloadText(record, view) {
  if (record.payload === undefined && record.payload_b64 === undefined) return "";
  let bytes;
  if (record.payload_b64 !== undefined) {
    bytes = Uint8Array.from(atob(record.payload_b64), (c) => c.charCodeAt(0));
  } else {
    bytes = new TextEncoder().encode(record.payload);
  }
  if (view === "hex") {
    return Array.from(bytes.slice(0, 4096), (b) => b.toString(16).padStart(2, "0")).join(" ");
  }
  const text = record.payload !== undefined ? record.payload : "(binary, " + bytes.length + " bytes: use hex)";
  if (view === "json") {
    try {
      return JSON.stringify(JSON.parse(text), null, 2);
    } catch (err) {
      return "(not JSON) " + text;
    }
  }
  return text;
}

function refreshOverview() {
  const box = document.getElementById("overview");
  const age = document.getElementById("as-of");
  fetch("/api/overview", { credentials: "same-origin" })
    .then((answer) => (answer.ok ? answer.json() : Promise.reject(answer.status)))
    .then((snapshot) => {
      box.innerHTML = snapshot.html;
      age.textContent = when(snapshot.at_ms);
    })
    .catch((status) => {
      age.textContent = "(refresh failed: " + status + ")";
    });
}

function streamPage() {
  const root = document.getElementById("stream");
  const api = root.dataset.api;
  const body = document.querySelector("#records-table tbody");
  const status = document.getElementById("status");
  const view = document.getElementById("view");
  let tailing = null;

  function row(record, first) {
    const tr = document.createElement("tr");
    tr.dataset.seq = record.seq;
    const cells = [record.seq, record.dlsn, record.txid, when(record.write_time_ms), record.region];
    for (const value of cells) {
      const td = document.createElement("td");
      td.textContent = value;
      tr.appendChild(td);
    }
    const td = document.createElement("td");
    const pre = document.createElement("pre");
    pre.textContent = payloadText(record, view.value);
    td.appendChild(pre);
    tr.appendChild(td);
    if (first) body.prepend(tr);
    else body.appendChild(tr);
  }

  function show(records, note) {
    body.textContent = "";
    records.forEach((r) => row(r, false));
    status.textContent = note;
  }

  async function getJson(url) {
    const answer = await fetch(url, { credentials: "same-origin" });
    const found = await answer.json();
    if (!answer.ok) throw new Error(found.code + ": " + found.message);
    return found;
  }

  function from() {
    return encodeURIComponent(document.getElementById("from").value.trim() || "earliest");
  }

  getJson(api + "/timeline")
    .then((found) => drawTimeline(found.segments, found.now_ms))
    .catch((err) => {
      document.getElementById("timeline-note").textContent = "timeline failed: " + err;
    });
  getJson(api + "/audit")
    .then((audit) => {
      const box = document.getElementById("audit");
      const failing = audit.ensembles_failing_rule;
      box.textContent = failing + " ensemble(s) breaking the durability rule (of " + audit.ensembles +
        " in " + audit.ledgers + " ledgers)" +
        (failing ? ": segments " + audit.failing_segments.map((f) => f.segment).join(", ") : "");
      box.className = failing ? "bad" : "ok";
    })
    .catch((err) => {
      document.getElementById("audit").textContent = "audit failed: " + err;
    });
  getJson(api + "/end")
    .then((end) => {
      document.getElementById("end").textContent = end.next_seq + (end.complete ? "" : "+");
    })
    .catch((err) => {
      document.getElementById("end").textContent = "? (" + err + ")";
    });
  document.getElementById("go").addEventListener("click", async () => {
    try {
      const found = await getJson(api + "/records?max=100&from=" + from());
      show(found.records, found.records.length + " record(s); next seq " + found.next_seq);
    } catch (err) {
      status.textContent = String(err);
    }
  });
  const search = document.getElementById("search");
  if (search) {
    search.addEventListener("click", async () => {
      const text = encodeURIComponent(document.getElementById("contains").value);
      status.textContent = "searching…";
      try {
        const found = await getJson(api + "/search?from=" + from() + "&contains=" + text);
        show(found.matches, found.matches.length + " match(es) in " + found.scanned + " record(s) scanned" +
          (found.complete ? "" : " (stopped early: narrow the range)"));
      } catch (err) {
        status.textContent = String(err);
      }
    });
  }
  document.getElementById("from").addEventListener("change", () => {
    document.getElementById("export").href = api + "/export?from=" + from();
  });
  document.getElementById("tail").addEventListener("click", async (event) => {
    if (tailing) {
      tailing.abort();
      tailing = null;
      event.target.textContent = "live tail";
      return;
    }
    tailing = new AbortController();
    event.target.textContent = "stop tail";
    body.textContent = "";
    status.textContent = "finding the stream's end…";
    try {
      const end = await getJson(api + "/end");
      const fromSeq = String(end.next_seq);
      document.getElementById("end").textContent = fromSeq;
      status.textContent = "tailing from seq " + fromSeq + "…";
      const answer = await fetch(api + "/tail?from_seq=" + encodeURIComponent(fromSeq), {
        credentials: "same-origin", signal: tailing.signal,
      });
      if (!answer.ok) {
        const found = await answer.json();
        throw new Error(found.code + ": " + found.message);
      }
      const reader = answer.body.getReader();
      const decoder = new TextDecoder();
      let buffered = "";
      for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        buffered += decoder.decode(value, { stream: true });
        const lines = buffered.split("\n");
        buffered = lines.pop();
        for (const line of lines) {
          if (!line.trim()) continue;
          const record = JSON.parse(line);
          if (record.seq !== undefined) row(record, true);
        }
        status.textContent = "tailing: " + body.children.length + " new record(s)";
      }
      status.textContent = "tail ended";
    } catch (err) {
      if (err.name !== "AbortError") status.textContent = String(err);
    }
  });
  document.getElementById("lag").addEventListener("click", async () => {
    const table = document.getElementById("lag-table");
    status.textContent = "tailing the stream in every region for 5 s…";
    try {
      const found = await getJson(api + "/lag?seconds=5");
      table.textContent = "";
      const head = table.insertRow();
      for (const title of ["region", "records seen", "delivery lag p50", "max"]) {
        const th = document.createElement("th");
        th.textContent = title;
        head.appendChild(th);
      }
      for (const [region, lag] of Object.entries(found.regions)) {
        const tr = table.insertRow();
        tr.dataset.region = region;
        const cells = lag.error
          ? [region, lag.error, "", ""]
          : [region, lag.records, lag.p50_ms === undefined ? "-" : lag.p50_ms + " ms",
             lag.max_ms === undefined ? "-" : lag.max_ms + " ms"];
        for (const value of cells) tr.insertCell().textContent = value;
      }
      status.textContent = "delivery lag measured from seq " + found.from_seq;
    } catch (err) {
      status.textContent = String(err);
    }
  });
}

// The segments on one time axis, four lanes so that short ones stay visible; each bar's
// tooltip names its segment, ledger, writer region and records.
function drawTimeline(segments, nowMs) {
  const box = document.getElementById("timeline-box");
  const note = document.getElementById("timeline-note");
  if (!segments.length) {
    note.textContent = "no segments";
    return;
  }
  const svgNs = "http://www.w3.org/2000/svg";
  const width = 1000;
  const start = Math.min(...segments.map((s) => s.created_ms));
  const end = Math.max(start + 1, ...segments.map((s) => s.completed_ms || nowMs));
  const scale = width / (end - start);
  const svg = document.createElementNS(svgNs, "svg");
  svg.id = "timeline";
  svg.setAttribute("viewBox", "0 0 " + width + " 36");
  svg.setAttribute("preserveAspectRatio", "none");
  svg.setAttribute("width", "100%");
  svg.setAttribute("height", "60");
  segments.forEach((s, i) => {
    const rect = document.createElementNS(svgNs, "rect");
    rect.setAttribute("x", ((s.created_ms - start) * scale).toFixed(1));
    rect.setAttribute("y", String((i % 4) * 9));
    rect.setAttribute("width", Math.max(2, ((s.completed_ms || nowMs) - s.created_ms) * scale).toFixed(1));
    rect.setAttribute("height", "8");
    rect.setAttribute("class", "seg " + s.state);
    rect.dataset.segment = s.sequence;
    const title = document.createElementNS(svgNs, "title");
    title.textContent = "segment " + s.sequence + " (" + s.state + "), ledger " + s.ledger_id +
      ", written from " + s.writer_region + ", " + (s.records === null ? "being written" : s.records + " records");
    rect.appendChild(title);
    svg.appendChild(rect);
  });
  box.replaceChildren(svg);
  const axis = document.createElement("p");
  axis.className = "axis";
  axis.textContent = segments.length + " segments, " + when(start) + " … " + when(end);
  box.appendChild(axis);
}

// Change buttons: data-url may name inputs as {id}; each asks for confirmation and sends the
// console's header, which another site's form cannot.
function actionButtons() {
  for (const button of document.querySelectorAll("#actions button[data-action]")) {
    button.addEventListener("click", async () => {
      const url = button.dataset.url.replace(/\{([a-z-]+)\}/g, (_, id) =>
        encodeURIComponent(document.getElementById(id).value.trim()));
      const what = button.dataset.action + " " + decodeURIComponent(url.split("?")[0]);
      if (!window.confirm("Really " + what + "?")) return;
      const result = document.getElementById("action-result");
      const answer = await fetch(url, {
        method: button.dataset.method,
        credentials: "same-origin",
        headers: { "X-Globelog-Console": "1" },
      });
      const found = await answer.json();
      result.textContent = answer.ok ? JSON.stringify(found) : found.code + ": " + found.message;
    });
  }
}

actionButtons();
if (page === "overview") {
  setInterval(refreshOverview, 1000);
} else if (page === "stream") {
  streamPage();
}
