// cairn analytics page: reads the server's history (columns of per-second or per-minute points)
// and status once, then polls both every second and redraws. No libraries: canvas drawing only,
// so the page works offline and ships inside the binary.
//
// Key scheme of the history (see analytics/history.rs): ds:DATASET:OP.ops|bytes|errors,
// lat:DATASET:OP, zil:DATASET:commits|batches|blocks|bytes, zlat:DATASET,
// dev:POOL:DEVICE:read|write.ops|calls|bytes, dlat:POOL:DEVICE:read|write,
// pool:POOL:alloc|size|dirty|txgs|synced_bytes|delays|delay_ms, arc:FIELD, l2:POOL:FIELD,
// nfs:PROGRAM.PROCEDURE.ops, nfs:read|write.bytes, nlat:all|read|write|commit.
"use strict";

const KEEP = { second: 600, minute: 1440 };
const state = {
  res: "second",
  t: [],
  series: {},
  heat: {},
  status: null,
  // Read by tests: how many heatmap cells were drawn last time, updates applied, and when;
  // the rows of the snapshot space table (dataset, used, usedbysnapshots in bytes) and of the
  // NFS clients table (address, calls, bytes read, bytes written).
  page: { heatCells: 0, updates: 0, lastUpdateMs: 0, errors: 0, snapshotRows: [], nfsRows: [] },
};
window.cairnPage = state.page;

const $ = (id) => document.getElementById(id);

function fmtBytes(v) {
  const units = ["B", "K", "M", "G", "T", "P"];
  let i = 0;
  while (Math.abs(v) >= 1024 && i < units.length - 1) { v /= 1024; i++; }
  return (i === 0 ? v.toFixed(0) : v.toFixed(v < 10 ? 1 : 0)) + units[i];
}
function fmtNum(v) {
  if (Math.abs(v) >= 1e6) return (v / 1e6).toFixed(1) + "M";
  if (Math.abs(v) >= 1e3) return (v / 1e3).toFixed(1) + "k";
  return v.toFixed(v < 10 && v !== 0 ? 1 : 0);
}
function fmtUs(us) {
  if (us >= 1e6) return (us / 1e6).toFixed(us >= 1e7 ? 0 : 1) + "s";
  if (us >= 1e3) return (us / 1e3).toFixed(us >= 1e4 ? 0 : 1) + "ms";
  return us.toFixed(0) + "µs";
}

// ---- history ----

async function fetchJson(url) {
  const response = await fetch(url, { cache: "no-store" });
  if (!response.ok) throw new Error(url + ": HTTP " + response.status);
  return response.json();
}

function appendHistory(chunk, replace) {
  if (replace) { state.t = []; state.series = {}; state.heat = {}; }
  const before = state.t.length;
  const added = chunk.t.length;
  state.t.push(...chunk.t);
  const extend = (target, source) => {
    for (const key of Object.keys(source)) {
      if (!target[key]) target[key] = new Array(before).fill(null);
    }
    for (const key of Object.keys(target)) {
      const column = target[key];
      while (column.length < before) column.push(null);
      const add = source[key] || new Array(added).fill(null);
      column.push(...add);
    }
  };
  extend(state.series, chunk.series);
  extend(state.heat, chunk.heat);
  const excess = state.t.length - KEEP[state.res];
  if (excess > 0) {
    state.t.splice(0, excess);
    for (const column of Object.values(state.series)) column.splice(0, excess);
    for (const column of Object.values(state.heat)) column.splice(0, excess);
  }
}

function column(key) {
  return state.series[key] || new Array(state.t.length).fill(null);
}
function ratio(a, b) {
  const x = column(a), y = column(b);
  return x.map((v, i) => (v === null || !y[i] ? null : v / y[i]));
}
function sum(keys) {
  const columns = keys.map(column);
  return state.t.map((_, i) => {
    let total = null;
    for (const c of columns) if (c[i] !== null && c[i] !== undefined) total = (total || 0) + c[i];
    return total;
  });
}

// ---- drawing ----

// Draws at the canvas's displayed size (its height attribute is the displayed height), so text
// is not scaled with the panel's width.
function prepare(canvas) {
  if (!canvas.dataset.height) canvas.dataset.height = canvas.height;
  const ratio = window.devicePixelRatio || 1;
  const width = Math.max(100, Math.round(canvas.clientWidth || canvas.width));
  const height = Number(canvas.dataset.height);
  canvas.style.height = height + "px";
  if (canvas.width !== width * ratio || canvas.height !== height * ratio) {
    canvas.width = width * ratio;
    canvas.height = height * ratio;
  }
  const ctx = canvas.getContext("2d");
  ctx.setTransform(ratio, 0, 0, ratio, 0, 0);
  ctx.clearRect(0, 0, width, height);
  ctx.font = "11px system-ui, sans-serif";
  return ctx;
}

const PALETTE = ["#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b"];

// Lines of one chart sharing a y scale; `lines` = [{label, values, color}].
function lineChart(canvas, lines, format) {
  const ctx = prepare(canvas);
  const w = canvas.width / (window.devicePixelRatio || 1), h = Number(canvas.dataset.height), left = 44, top = 14, bottom = h - 4;
  const n = window_points();
  let max = 0;
  for (const line of lines) for (const v of line.values) if (v !== null && v > max) max = v;
  if (max === 0) max = 1;
  ctx.strokeStyle = "#e3e7eb";
  ctx.beginPath(); ctx.moveTo(left, top); ctx.lineTo(w, top); ctx.moveTo(left, bottom); ctx.lineTo(w, bottom); ctx.stroke();
  ctx.fillStyle = "#4a5866";
  ctx.fillText(format(max), 2, top + 4);
  ctx.fillText(format(0), 2, bottom);
  const x = (i, count) => left + (w - left) * (n - count + i) / n;
  let legendX = left + 6;
  lines.forEach((line, index) => {
    const color = line.color || PALETTE[index % PALETTE.length];
    ctx.strokeStyle = color;
    ctx.lineWidth = 1.5;
    ctx.beginPath();
    let pen = false;
    line.values.forEach((v, i) => {
      if (v === null || v === undefined) { pen = false; return; }
      const y = bottom - (bottom - top) * v / max;
      if (pen) ctx.lineTo(x(i, line.values.length), y); else ctx.moveTo(x(i, line.values.length), y);
      pen = true;
    });
    ctx.stroke();
    const last = line.values.filter((v) => v !== null && v !== undefined).pop();
    ctx.fillStyle = color;
    const label = line.label + (last !== undefined ? " " + format(last) : "");
    ctx.fillText(label, legendX, 10);
    legendX += ctx.measureText(label).width + 14;
  });
}

// A latency heatmap: columns = points, rows = latency buckets, colour = operations.
function heatmap(canvas, columns, bounds) {
  const ctx = prepare(canvas);
  const w = canvas.width / (window.devicePixelRatio || 1), h = Number(canvas.dataset.height), left = 44;
  const n = window_points();
  let lo = bounds.length, hi = -1, max = 0;
  for (const col of columns) {
    if (!col) continue;
    col.forEach((c, k) => { if (c > 0) { lo = Math.min(lo, k); hi = Math.max(hi, k); max = Math.max(max, c); } });
  }
  if (hi < 0) {
    ctx.fillStyle = "#7d8a97";
    ctx.fillText("no operations in this range", left + 8, h / 2);
    return 0;
  }
  lo = Math.max(0, lo - 1); hi = Math.min(bounds.length - 1, hi + 1);
  while (hi - lo < 7) { if (lo > 0) lo--; if (hi - lo < 7 && hi < bounds.length - 1) hi++; if (lo === 0 && hi === bounds.length - 1) break; }
  const rows = hi - lo + 1, rowH = h / rows, colW = (w - left) / n;
  const offset = n - columns.length;
  let cells = 0;
  columns.forEach((col, i) => {
    if (!col) return;
    for (let k = lo; k <= hi; k++) {
      const c = col[k];
      if (!c) continue;
      const shade = Math.log(1 + c) / Math.log(1 + max);
      const light = Math.round(92 - 62 * shade);
      ctx.fillStyle = "hsl(" + Math.round(48 - 40 * shade) + ",90%," + light + "%)";
      ctx.fillRect(left + (offset + i) * colW, h - (k - lo + 1) * rowH, Math.max(colW, 1), Math.max(rowH - 0.5, 1));
      cells++;
    }
  });
  ctx.fillStyle = "#4a5866";
  for (let k = lo; k <= hi; k += Math.max(1, Math.round(rows / 5))) {
    ctx.fillText("≤" + fmtUs(bounds[k]), 2, h - (k - lo) * rowH - 2);
  }
  return cells;
}

function heatColumns(key) {
  return state.heat[key] || [];
}

// ---- panels ----

const BOUNDS = Array.from({ length: 27 }, (_, k) => 2 ** k);

function selected(id) { return $(id).value; }

// Points across a chart: the whole ring once full; until then at least two minutes' (or two
// hours') worth, so a fresh server's first seconds are not a sliver at the right edge.
function window_points() {
  return Math.min(KEEP[state.res], Math.max(120, state.t.length));
}

function setOptions(select, values) {
  const current = select.value;
  const wanted = values.map((v) => v.value).join("\n");
  if (select.dataset.options === wanted) return;
  select.dataset.options = wanted;
  select.innerHTML = "";
  for (const v of values) {
    const option = document.createElement("option");
    option.value = v.value; option.textContent = v.label;
    select.appendChild(option);
  }
  if (values.some((v) => v.value === current)) select.value = current;
}

function currentPool() {
  if (!state.status) return null;
  return state.status.pools.find((p) => p.name === selected("pool")) || state.status.pools[0] || null;
}

function updateSelectors() {
  const pools = state.status ? state.status.pools : [];
  setOptions($("pool"), pools.map((p) => ({ value: p.name, label: p.name + " (" + p.health + ")" })));
  const pool = currentPool();
  const datasets = pool ? pool.datasets.map((d) => ({ value: d.name, label: d.name + " [" + d.protocol + "]" })) : [];
  for (const log of pool ? pool.intent_logs : []) {
    if (!datasets.some((d) => d.value === log)) datasets.push({ value: log, label: log });
  }
  setOptions($("dataset"), datasets);
  setOptions($("device"), pool ? pool.devices.map((d) => ({ value: d.name, label: d.name + " (" + d.role + ")" })) : []);
}

function drawLatency() {
  const d = selected("dataset");
  $("latency-title").textContent = d || "(no dataset served)";
  let cells = 0;
  cells += heatmap($("heat-read"), heatColumns("lat:" + d + ":read"), BOUNDS);
  cells += heatmap($("heat-write"), heatColumns("lat:" + d + ":write"), BOUNDS);
  cells += heatmap($("heat-commit"), heatColumns("zlat:" + d), BOUNDS);
  const pool = currentPool(), dev = selected("device");
  if (pool && dev) {
    const reads = heatColumns("dlat:" + pool.name + ":" + dev + ":read");
    const writes = heatColumns("dlat:" + pool.name + ":" + dev + ":write");
    const both = state.t.map((_, i) => {
      const r = reads[i], w = writes[i];
      if (!r && !w) return null;
      return BOUNDS.map((_, k) => (r ? r[k] : 0) + (w ? w[k] : 0));
    });
    cells += heatmap($("heat-device"), both, BOUNDS);
  }
  state.page.heatCells = cells;
}

function drawOps() {
  const d = selected("dataset");
  $("ops-title").textContent = d || "";
  const ops = ["read", "write", "flush", "trim", "meta"];
  lineChart($("ops"), ops.map((op) => ({ label: op + "/s", values: column("ds:" + d + ":" + op + ".ops") }))
    .filter((line) => line.values.some((v) => v)), fmtNum);
  lineChart($("bandwidth"), [
    { label: "read B/s", values: column("ds:" + d + ":read.bytes") },
    { label: "write B/s", values: column("ds:" + d + ":write.bytes") },
  ], fmtBytes);
}

function drawDevice() {
  const pool = currentPool(), dev = selected("device");
  $("device-title").textContent = dev ? dev : "";
  if (!pool || !dev) return;
  const p = "dev:" + pool.name + ":" + dev + ":";
  drawSizes(pool, dev);
  lineChart($("device-size"), [
    { label: "write request", values: ratio(p + "write.bytes", p + "write.ops") },
    { label: "write device call", values: ratio(p + "write.bytes", p + "write.calls") },
    { label: "read request", values: ratio(p + "read.bytes", p + "read.ops") },
    { label: "read device call", values: ratio(p + "read.bytes", p + "read.calls") },
  ], fmtBytes);
}

const SIZE_LABELS = ["512", "1K", "2K", "4K", "8K", "16K", "32K", "64K", "128K", "256K", "512K", "1M", "2M", "4M", "8M", "16M+"];

// The device's I/O size distribution over the chart's window: requests as submitted against
// device calls that merged several (how many 8K writes became 1M calls), writes and reads.
function drawSizes(pool, dev) {
  const canvas = $("size-dist");
  const ctx = prepare(canvas);
  const w = canvas.width / (window.devicePixelRatio || 1), h = Number(canvas.dataset.height);
  const p = "dsz:" + pool.name + ":" + dev + ":";
  const series = [
    { label: "write requests", key: p + "write.ind", color: "#1f77b4" },
    { label: "write calls merging several", key: p + "write.agg", color: "#d62728" },
    { label: "read requests", key: p + "read.ind", color: "#2ca02c" },
    { label: "read calls merging several", key: p + "read.agg", color: "#ff7f0e" },
  ].map((s) => {
    const totals = SIZE_LABELS.map(() => 0);
    for (const col of heatColumns(s.key)) if (col) SIZE_LABELS.forEach((_, i) => { totals[i] += col[i] || 0; });
    return Object.assign(s, { totals });
  }).filter((s) => s.totals.some((c) => c > 0));
  let max = 0;
  for (const s of series) for (const c of s.totals) max = Math.max(max, c);
  if (max === 0) { ctx.fillStyle = "#7d8a97"; ctx.fillText("no device I/O in this range", 50, h / 2); return; }
  const left = 44, top = 14, bottom = h - 14;
  const groupW = (w - left) / SIZE_LABELS.length, barW = Math.max(1, (groupW - 4) / Math.max(1, series.length));
  const scale = (c) => (c <= 0 ? 0 : (bottom - top) * Math.log(1 + c) / Math.log(1 + max));
  series.forEach((s, j) => {
    ctx.fillStyle = s.color;
    s.totals.forEach((c, i) => {
      const bh = scale(c);
      ctx.fillRect(left + i * groupW + 2 + j * barW, bottom - bh, barW - 0.5, bh);
    });
  });
  ctx.fillStyle = "#4a5866";
  SIZE_LABELS.forEach((label, i) => ctx.fillText(label, left + i * groupW + 2, h - 2));
  ctx.fillText(fmtNum(max), 2, top + 4);
  let x = left + 6;
  for (const s of series) {
    ctx.fillStyle = s.color;
    ctx.fillText(s.label, x, 10);
    x += ctx.measureText(s.label).width + 14;
  }
}

function drawTxgs() {
  const pool = currentPool();
  const canvas = $("txgs");
  const ctx = prepare(canvas);
  if (!pool || pool.txgs.length === 0) { ctx.fillText("no txgs yet", 50, 80); return; }
  const txgs = pool.txgs.slice(-60);
  const w = canvas.width / (window.devicePixelRatio || 1), h = Number(canvas.dataset.height), left = 44, top = 14;
  let maxUs = 1, maxDirty = 1;
  for (const t of txgs) { maxUs = Math.max(maxUs, t.open_us + t.quiesce_us + t.sync_us); maxDirty = Math.max(maxDirty, t.dirty_bytes); }
  const barW = (w - left) / 60;
  txgs.forEach((t, i) => {
    const x = left + (60 - txgs.length + i) * barW;
    let y = h;
    for (const [value, color] of [[t.open_us, "#9ecae1"], [t.quiesce_us, "#fdae6b"], [t.sync_us, "#e6550d"]]) {
      const bh = (h - top) * value / maxUs;
      ctx.fillStyle = color; ctx.fillRect(x, y - bh, Math.max(barW - 1, 1), bh); y -= bh;
    }
    ctx.fillStyle = "#1c2733";
    ctx.fillRect(x + barW / 2 - 1, h - (h - top) * t.dirty_bytes / maxDirty, 3, 3);
  });
  ctx.fillStyle = "#4a5866";
  ctx.fillText(fmtUs(maxUs), 2, top + 4);
  ctx.fillText("open", left + 6, 10); ctx.fillStyle = "#fdae6b"; ctx.fillText("quiesce", left + 46, 10);
  ctx.fillStyle = "#e6550d"; ctx.fillText("sync", left + 100, 10); ctx.fillStyle = "#1c2733"; ctx.fillText("• dirty (max " + fmtBytes(maxDirty) + ")", left + 136, 10);
  const last = txgs[txgs.length - 1];
  $("txg-legend").textContent = "txg " + last.txg + " (" + last.trigger + "): open " + fmtUs(last.open_us) + ", quiesce " + fmtUs(last.quiesce_us) +
    ", sync " + fmtUs(last.sync_us) + ", dirty " + fmtBytes(last.dirty_bytes) + ", throttle " + last.writer_delays + " writers / " + fmtUs(last.writer_delay_us) +
    "; dirty now " + fmtBytes(pool.dirty_bytes);
}

function drawZil() {
  const d = selected("dataset");
  $("zil-title").textContent = d || "";
  const z = "zil:" + d + ":";
  const perBatch = ratio(z + "blocks", z + "batches");
  // The log devices' write latency (all of the pool's log devices together).
  const pool = currentPool();
  const logs = pool ? pool.devices.filter((dev) => dev.role === "log") : [];
  $("logdev-title").textContent = logs.length
    ? "log device writes: " + logs.map((dev) => dev.name).join(", ")
    : "no separate log device: log blocks go to the pool's disks (their writes are in the device panel)";
  const columns = logs.map((dev) => heatColumns("dlat:" + pool.name + ":" + dev.name + ":write"));
  const merged = state.t.map((_, i) => {
    const present = columns.map((c) => c[i]).filter((c) => c);
    if (present.length === 0) return null;
    return BOUNDS.map((_, k) => present.reduce((total, c) => total + c[k], 0));
  });
  state.page.heatCells += heatmap($("heat-logdev"), merged, BOUNDS);
  lineChart($("zil"), [
    { label: "commits/s", values: column(z + "commits") },
    { label: "batches/s", values: column(z + "batches") },
    { label: "log blocks/batch", values: perBatch },
  ], fmtNum);
}

function drawArc() {
  const pool = currentPool();
  const l2 = pool ? "l2:" + pool.name + ":" : "l2:-:";
  lineChart($("arc-size"), [
    { label: "ARC size", values: column("arc:size") },
    { label: "target", values: column("arc:c") },
    { label: "L2 alloc", values: column(l2 + "alloc_bytes") },
  ], fmtBytes);
  lineChart($("arc-evict"), [
    { label: "evicted, on L2", values: column("arc:evict_l2_cached") },
    { label: "eligible, not on L2", values: column("arc:evict_l2_eligible") },
    { label: "ineligible", values: column("arc:evict_l2_ineligible") },
    { label: "L2 feed", values: column(l2 + "feed_bytes") },
  ].map((line) => ({ label: line.label + " B/s", values: line.values })), fmtBytes);
  const percent = (hitKey, missKey) => {
    const hits = column(hitKey), misses = column(missKey);
    return hits.map((v, i) => (v === null || misses[i] === null || v + misses[i] === 0 ? null : 100 * v / (v + misses[i])));
  };
  lineChart($("arc-hits"), [
    { label: "ARC hit %", values: percent("arc:hits", "arc:misses") },
    { label: "L2 hit % (of ARC misses)", values: percent(l2 + "hits", l2 + "misses") },
  ], (v) => v.toFixed(0));
}

function cell(text, className) {
  const td = document.createElement("td");
  td.textContent = text;
  if (className) td.className = className;
  return td;
}

function drawHealth() {
  const host = $("health");
  const pool = currentPool();
  host.innerHTML = "";
  if (!pool) { host.textContent = "no pools served"; return; }
  const summary = document.createElement("p");
  summary.innerHTML = "";
  const health = document.createElement("span");
  health.className = pool.suspended ? "SUSPENDED" : pool.health;
  health.textContent = pool.suspended ? "SUSPENDED: " + pool.suspended : pool.health;
  summary.append(pool.name + " ", health, " — " + fmtBytes(pool.allocated_bytes) + " of " + fmtBytes(pool.size_bytes) +
    " allocated, fragmentation " + pool.fragmentation_percent + "%, txg " + pool.txg);
  host.appendChild(summary);
  const table = document.createElement("table");
  const head = document.createElement("tr");
  for (const h of ["device", "state", "read", "write", "cksum", ""]) { const th = document.createElement("th"); th.textContent = h; head.appendChild(th); }
  table.appendChild(head);
  const row = (name, stateName, r, w, c, note) => {
    const tr = document.createElement("tr");
    tr.append(cell(name), cell(stateName, stateName), cell(r, "num"), cell(w, "num"), cell(c, "num"), cell(note || ""));
    table.appendChild(tr);
  };
  for (const top of pool.tops) {
    if (top.mirror || top.log) row((top.log ? "log " : "") + top.name, top.health, "", "", "", "");
    for (const leaf of top.leaves) {
      row((top.mirror || top.log ? "  " : "") + leaf.name, leaf.health, leaf.read_errors, leaf.write_errors, leaf.checksum_errors, leaf.resilvering ? "resilvering" : "");
    }
  }
  for (const c of pool.cache) row("cache " + c.name, c.health, c.read_errors, c.write_errors, c.checksum_errors, "");
  host.appendChild(table);
  const notes = document.createElement("p");
  notes.className = "legend";
  const parts = [];
  if (pool.resilver) {
    const r = pool.resilver;
    const pct = r.total_bytes ? (100 * r.copied_bytes / r.total_bytes).toFixed(1) + "%" : "scanning";
    parts.push("resilver of " + r.leaf + ": " + (r.finished_ms ? "done" : pct + " at " + fmtBytes(r.rate_bytes_per_s) + "/s") + (r.error ? " (" + r.error + ")" : ""));
  }
  if (pool.scrub_running) {
    const s = pool.scrub_running;
    const pct = s.total_bytes ? (100 * s.scanned_bytes / s.total_bytes).toFixed(1) + "%" : "starting";
    parts.push("scrub in progress: " + pct + " (" + fmtBytes(s.scanned_bytes) + " of " + fmtBytes(s.total_bytes) +
      "), " + fmtBytes(s.repaired_bytes) + " repaired, " + s.unrecoverable_blocks + " unrecoverable");
  }
  if (pool.scrub) {
    const s = pool.scrub;
    parts.push("last scrub " + (s.canceled ? "canceled" : "finished") + " " + new Date(s.finished_ms).toLocaleString() + ": " + fmtBytes(s.bytes_scanned) +
      " scanned, " + fmtBytes(s.repaired_bytes) + " repaired, " + s.unrecoverable_blocks + " unrecoverable");
  } else {
    parts.push("no scrub yet");
  }
  notes.textContent = parts.join("; ");
  host.appendChild(notes);
  const events = (state.status.events || []).slice(-8).reverse();
  if (events.length) {
    const list = document.createElement("ul");
    list.className = "legend";
    for (const e of events) {
      const item = document.createElement("li");
      item.textContent = new Date(e.unix_ms).toLocaleTimeString() + " [" + e.source + "] " + e.message;
      list.appendChild(item);
    }
    const title = document.createElement("p");
    title.className = "legend";
    title.textContent = "recent events:";
    host.append(title, list);
  }
}

// Each dataset of the selected pool: used, referenced and what only its snapshots hold, with
// a bar of used split into the snapshots' share and the rest (bars on the pool's largest used).
function drawSnapshots() {
  const host = $("snapshots");
  const pool = currentPool();
  host.innerHTML = "";
  state.page.snapshotRows = [];
  if (!pool) { host.textContent = "no pools served"; return; }
  const s = pool.snapshots;
  $("snap-title").textContent = s.snapshots + " snapshots, deadlists hold " + fmtBytes(s.deadlist_bytes) +
    (s.freeing_bytes ? ", freeing " + fmtBytes(s.freeing_bytes) : "");
  const table = document.createElement("table");
  table.className = "snapspace";
  const head = document.createElement("tr");
  for (const h of ["dataset", "used", "refer", "snapshots", ""]) { const th = document.createElement("th"); th.textContent = h; head.appendChild(th); }
  table.appendChild(head);
  const max = Math.max(1, ...pool.dataset_space.map((d) => d.used_bytes));
  for (const d of pool.dataset_space) {
    const tr = document.createElement("tr");
    const bar = document.createElement("td");
    bar.className = "bar";
    const rest = document.createElement("span");
    rest.className = "used";
    rest.style.width = (100 * Math.max(0, d.used_bytes - d.snapshots_bytes) / max).toFixed(1) + "%";
    const snaps = document.createElement("span");
    snaps.className = "snaps";
    snaps.style.width = (100 * d.snapshots_bytes / max).toFixed(1) + "%";
    bar.append(rest, snaps);
    tr.append(cell(d.name), cell(fmtBytes(d.used_bytes), "num"), cell(fmtBytes(d.referenced_bytes), "num"),
      cell(fmtBytes(d.snapshots_bytes), "num"), bar);
    tr.title = d.name + ": snapshots hold " + d.snapshots_bytes + " of " + d.used_bytes + " bytes used";
    table.appendChild(tr);
    state.page.snapshotRows.push([d.name, d.used_bytes, d.snapshots_bytes]);
  }
  host.appendChild(table);
  const legend = document.createElement("p");
  legend.className = "legend";
  legend.innerHTML = '<span class="swatch used"></span> used by the dataset and its children <span class="swatch snaps"></span> held only by its snapshots (usedbysnapshots)';
  host.appendChild(legend);
}

// The NFS server (serve --nfs): calls per second of the busiest procedures, the latency of
// every call, and a row per client address (from /api/status, as `cairn stat nfs` shows them).
function drawNfs() {
  const host = $("nfs-clients");
  host.innerHTML = "";
  state.page.nfsRows = [];
  const nfs = state.status ? state.status.nfs : null;
  if (!nfs) {
    $("nfs-title").textContent = "not served (cairn serve --nfs ADDR:PORT)";
    return;
  }
  const plural = (n, word) => n + " " + word + (n === 1 ? "" : "s");
  $("nfs-title").textContent = plural(nfs.connections_open, "connection") + ", " + plural(nfs.clients.length, "client") + "; " +
    plural(nfs.commits.count, "COMMIT") + " carrying " + fmtBytes(nfs.commits.carried_bytes);
  const busiest = nfs.procedures.filter((p) => p.calls > 0).sort((a, b) => b.calls - a.calls).slice(0, 5);
  lineChart($("nfs-ops"), busiest.map((p) => ({
    label: (p.program === "mount" ? "MOUNT " : "") + p.procedure + "/s", values: column("nfs:" + p.program + "." + p.procedure + ".ops"),
  })), fmtNum);
  state.page.heatCells += heatmap($("heat-nfs"), heatColumns("nlat:all"), BOUNDS);
  const table = document.createElement("table");
  const head = document.createElement("tr");
  for (const h of ["client", "conns", "calls", "errors", "read", "written", "commits", "p99"]) {
    const th = document.createElement("th"); th.textContent = h; head.appendChild(th);
  }
  table.appendChild(head);
  for (const c of nfs.clients) {
    const tr = document.createElement("tr");
    tr.append(cell(c.address), cell(String(c.connections_open), "num"), cell(fmtNum(c.calls), "num"),
      cell(String(c.errors), "num"), cell(fmtBytes(c.read_bytes), "num"), cell(fmtBytes(c.written_bytes), "num"),
      cell(String(c.commits), "num"), cell(fmtUs(c.latency_p99_us), "num"));
    table.appendChild(tr);
    state.page.nfsRows.push([c.address, c.calls, c.read_bytes, c.written_bytes]);
  }
  host.appendChild(table);
  if (nfs.clients_dropped > 0) {
    const note = document.createElement("p");
    note.className = "legend";
    note.textContent = nfs.clients_dropped + " clients dropped (at most " + nfs.clients_max + " kept, the least recently active go first)";
    host.appendChild(note);
  }
}

function drawAll() {
  updateSelectors();
  drawLatency();
  drawOps();
  drawDevice();
  drawTxgs();
  drawZil();
  drawArc();
  drawSnapshots();
  drawNfs();
  drawHealth();
}

async function refresh(full) {
  try {
    const since = full || state.t.length === 0 ? 0 : state.t[state.t.length - 1];
    const [history, status] = await Promise.all([
      fetchJson("/api/history?res=" + state.res + "&since=" + since),
      fetchJson("/api/status"),
    ]);
    appendHistory(history, full);
    state.status = status;
    drawAll();
    state.page.updates++;
    state.page.lastUpdateMs = Date.now();
    $("clock").textContent = "updated " + new Date(status.t).toLocaleTimeString() + ", up " + fmtUs(status.uptime_s * 1e6);
  } catch (error) {
    state.page.errors++;
    $("clock").textContent = "cannot reach the server (" + error.message + "); retrying";
  }
}

for (const id of ["pool", "dataset", "device"]) $(id).addEventListener("change", drawAll);
$("range").addEventListener("change", () => { state.res = selected("range"); refresh(true); });
refresh(true);
setInterval(() => refresh(false), 1000);
