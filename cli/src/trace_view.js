// agentloop trace view: draws the timeline from the JSON in #trace-data. Text from the trace
// only ever goes through textContent, title and setAttribute, never through HTML parsing.
"use strict";
(function () {
  const data = JSON.parse(document.getElementById("trace-data").textContent);
  const root = document.getElementById("timeline");
  const end = Math.max(data.meta.end, 1);
  const labelWidth = 200;
  const avail = Math.max(600, (document.documentElement.clientWidth || 1200) - labelWidth - 48);
  const scale = Math.max(avail / end, 4);
  const width = Math.ceil(end * scale);
  const x = (i) => i * scale;
  const records = new Map();
  for (const r of data.records) records.set(r.index, r);

  function el(tag, cls, attrs) {
    const e = document.createElement(tag);
    if (cls) e.className = cls;
    for (const k of Object.keys(attrs || {})) e.setAttribute(k, String(attrs[k]));
    return e;
  }
  function hue(s) {
    let h = 7;
    for (const c of s) h = (h * 31 + c.codePointAt(0)) % 360;
    return h;
  }

  // A distinct colour per state name, in order of first appearance over the lanes.
  const palette = ["#b2df8a", "#fdbf6f", "#a6cee3", "#fb9a99", "#cab2d6", "#ffed6f", "#8dd3c7",
    "#bebada", "#80b1d3", "#fccde5", "#ccebc5", "#d9d9d9", "#e5c494", "#b3b3ff",
    "#f4a582", "#92c5de", "#dfc27d", "#c2a5cf", "#a1d99b", "#fdae6b"];
  const colours = new Map();
  for (const lane of data.lanes) {
    for (const b of lane.bars) {
      if (!colours.has(b.state)) {
        const n = colours.size;
        colours.set(b.state, n < palette.length ? palette[n] : "hsl(" + hue(b.state) + ", 60%, 78%)");
      }
    }
  }

  const detailTitle = document.getElementById("detail-title");
  const detailJson = document.getElementById("detail-json");
  let selected = null;
  function show(title, rec, node) {
    if (selected) selected.classList.remove("selected");
    selected = node || null;
    if (selected) selected.classList.add("selected");
    const r = rec === null || rec === undefined ? undefined : records.get(rec);
    detailTitle.textContent = r && !title.startsWith("#" + rec + " ") ? "#" + rec + " · " + title : title;
    detailJson.textContent = r
      ? JSON.stringify(r, null, 2)
      : "(no record: the state was entered without a recorded transition)";
    detailJson.setAttribute("data-record", r ? String(rec) : "");
  }

  const meta = data.meta;
  document.getElementById("meta").textContent =
    "trace v" + meta.version + " · agentloop " + meta.agentloop + " · session " + meta.session +
    " · model " + meta.model + " · " + data.records.length + " records · " + meta.summary;

  function row(id, label, cls, attrs) {
    const lane = el("div", "lane " + cls, Object.assign({ "data-lane": id }, attrs || {}));
    const name = el("div", "label");
    name.textContent = label;
    name.title = label;
    const track = el("div", "track");
    track.style.width = width + "px";
    lane.append(name, track);
    root.append(lane);
    return track;
  }
  function item(track, cls, from, to, text, rec, attrs) {
    const e = el("div", cls, attrs);
    e.style.left = x(from) + "px";
    e.style.width = Math.max(x(to) - x(from), 3) + "px";
    e.title = text;
    if (rec !== null && rec !== undefined) e.setAttribute("data-rec", String(rec));
    e.addEventListener("click", () => show(text, rec, e));
    track.append(e);
    return e;
  }

  // The axis: a tick every 1, 2, 5, 10, 20, 50, ... records, at least 60 px apart.
  const axis = row("axis", "record index", "axis");
  let step = 1;
  for (const m of [1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000]) {
    step = m;
    if (m * scale >= 60) break;
  }
  for (let i = 0; i <= end; i += step) {
    const t = el("div", "tick");
    t.style.left = x(i) + "px";
    t.textContent = String(i);
    axis.append(t);
  }

  let bars = 0;
  for (const lane of data.lanes) {
    const label =
      lane.machine === "tool_call"
        ? "↳ " + (lane.tool || "?") + " " + lane.call
        : lane.machine;
    const attrs = { "data-machine": lane.machine };
    if (lane.call !== undefined) attrs["data-call"] = lane.call;
    if (lane.tool !== undefined) attrs["data-tool"] = lane.tool;
    const track = row(lane.id, label, lane.machine === "tool_call" ? "machine sub" : "machine", attrs);
    if (lane.machine === "tool_call" && lane.bars.length > 0) {
      const first = lane.bars[0].from;
      const last = lane.bars[lane.bars.length - 1].to;
      item(track, "span", first, last, label + ": #" + first + " to #" + last, lane.bars[0].rec, {
        "data-span": lane.id,
      });
    }
    for (const b of lane.bars) {
      const text = lane.machine + " " + b.state + " (#" + b.from + "–#" + b.to +
        (b.event ? ", entered on " + b.event : "") + ")";
      const e = item(track, "bar", b.from, b.to, text, b.rec, {
        "data-bar": lane.id + ":" + b.state,
        "data-state": b.state,
      });
      e.style.background = colours.get(b.state);
      if (x(b.to) - x(b.from) > 8 * b.state.length) e.textContent = b.state;
      bars += 1;
    }
  }

  // The states' colours, per machine, in order of first appearance.
  const legend = el("div", "legend", { "data-legend": "states" });
  for (const machine of ["react", "process", "tool_call"]) {
    const seen = [];
    for (const lane of data.lanes.filter((l) => l.machine === machine)) {
      for (const b of lane.bars) if (!seen.includes(b.state)) seen.push(b.state);
    }
    if (seen.length === 0) continue;
    const group = el("span", "group");
    group.textContent = machine + ":";
    for (const state of seen) {
      const sw = el("span", "swatch", { "data-legend-state": machine + ":" + state });
      sw.style.background = colours.get(state);
      sw.textContent = state;
      group.append(sw);
    }
    legend.append(group);
  }
  root.before(legend);

  // Timers: one row per kind, parallel ones packed into extra rows.
  const kinds = ["backoff", "first_chunk", "stall", "request", "tool", "run_deadline"];
  let timers = 0;
  for (const kind of kinds) {
    const rows = [];
    for (const t of data.timers.filter((t) => t.kind === kind)) {
      let r = rows.findIndex((ends) => ends <= t.from);
      if (r < 0) {
        rows.push(0);
        r = rows.length - 1;
      }
      rows[r] = Math.max(t.to, t.from + 1);
      t.row = r;
    }
    const tracks = rows.map((_, r) =>
      row("timer:" + kind + (r ? "#" + (r + 1) : ""), "timer " + kind + (r ? " #" + (r + 1) : ""), "timers", {
        "data-timer-kind": kind,
      }));
    for (const t of data.timers.filter((t) => t.kind === kind)) {
      const text = kind + " timer " + t.id + ", " + t.delay_ms + " ms, " + t.end +
        " (#" + t.from + "–#" + t.to + ")";
      const e = item(tracks[t.row], "timer " + t.end, t.from, t.to, text, t.from, {
        "data-timer": kind,
        "data-end": t.end,
      });
      if (kind === "backoff") e.textContent = "backoff " + t.delay_ms + " ms";
      timers += 1;
    }
  }

  const markLanes = [["inputs", "inputs"], ["events", "events (emit)"], ["effects", "effects"]];
  let marks = 0;
  for (const [lane, label] of markLanes) {
    const track = row(lane, label, "marks");
    for (const m of data.marks.filter((m) => m.lane === lane)) {
      const e = item(track, "mark", m.at, m.at, "#" + m.at + " " + m.label, m.at, {
        "data-kind": m.kind,
      });
      e.style.background = "hsl(" + hue(m.kind) + ", 55%, 45%)";
      marks += 1;
    }
  }

  root.setAttribute("data-rendered", "true");
  root.setAttribute("data-lanes", String(data.lanes.length));
  root.setAttribute("data-bars", String(bars));
  root.setAttribute("data-timers", String(timers));
  root.setAttribute("data-marks", String(marks));

  // `page.html#r60` opens with record 60 selected.
  const m = /^#r(\d+)$/.exec(location.hash);
  if (m) {
    // The record's own mark (marks come last), else whatever it entered.
    const all = document.querySelectorAll('[data-rec="' + m[1] + '"]');
    const node = all.length > 0 ? all[all.length - 1] : null;
    show(node ? node.title : "record " + m[1], Number(m[1]), node);
  } else {
    detailTitle.textContent = "Header";
    detailJson.textContent = JSON.stringify(data.header, null, 2);
  }
})();
