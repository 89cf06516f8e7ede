// squall's web UI: polls /api/metrics every second and draws the topology, its tables and
// its errors. Plain JavaScript, no library, no build step (docs/design/web-ui.md).
//
// Every text that comes from the topology or the run (component ids, stream names, error
// messages) goes into the page as a text node or an attribute value, never as markup: nothing
// here parses HTML.
"use strict";

(() => {
  const POLL_MS = 1000;
  const MAX_RETRY_MS = 5000;
  const SVG_NS = "http://www.w3.org/2000/svg";
  const TOKEN = new URLSearchParams(window.location.search).get("token") || "";
  const CHAR_PX = 11 * 0.6;
  const ZOOM = 1.25; // the picture's size on the page (it shrinks to fit a narrow window) // a monospace character at the labels' size (as the layout counts)

  const state = {
    topologyVersion: null,
    topology: null,
    selected: null,
    metrics: null, // the last /api/metrics answer
    failures: 0,
    lastAnswer: null, // when the server last answered (Date)
  };

  // ---- DOM helpers ---------------------------------------------------------------------------

  function $(id) {
    return document.getElementById(id);
  }

  // An HTML element; children are nodes or strings (text nodes).
  function h(tag, attrs, ...children) {
    const node = document.createElement(tag);
    for (const [key, value] of Object.entries(attrs || {})) {
      if (value !== null && value !== undefined && value !== false) node.setAttribute(key, value);
    }
    for (const child of children) {
      if (child === null || child === undefined) continue;
      node.append(typeof child === "string" ? document.createTextNode(child) : child);
    }
    return node;
  }

  function s(tag, attrs, text) {
    const node = document.createElementNS(SVG_NS, tag);
    for (const [key, value] of Object.entries(attrs || {})) {
      if (value !== null && value !== undefined) node.setAttribute(key, String(value));
    }
    if (text !== undefined) node.textContent = text;
    return node;
  }

  function replace(container, ...children) {
    container.replaceChildren(...children.filter((c) => c !== null && c !== undefined));
  }

  // ---- formatting ----------------------------------------------------------------------------

  const NO_DATA = "–";

  function isNumber(v) {
    return typeof v === "number" && Number.isFinite(v);
  }

  function fmtInt(v) {
    return isNumber(v) ? Math.round(v).toLocaleString("en-US") : NO_DATA;
  }

  function fmtRate(v) {
    if (!isNumber(v)) return NO_DATA;
    if (v >= 1e6) return (v / 1e6).toFixed(1) + "M";
    if (v >= 1e4) return (v / 1e3).toFixed(0) + "k";
    if (v >= 1e3) return (v / 1e3).toFixed(1) + "k";
    if (v >= 10) return v.toFixed(0);
    return v.toFixed(1);
  }

  function fmtMs(v) {
    if (!isNumber(v)) return NO_DATA;
    return v >= 100 ? v.toFixed(0) : v >= 1 ? v.toFixed(1) : v.toFixed(3);
  }

  function fmtLatency(lat) {
    return lat && isNumber(lat.mean_ms) ? `${fmtMs(lat.mean_ms)} / ${fmtMs(lat.p99_ms)}` : NO_DATA;
  }

  function fmtSeconds(ms) {
    if (!isNumber(ms)) return NO_DATA;
    const s = ms / 1000;
    if (s < 60) return `${s.toFixed(1)} s`;
    const m = Math.floor(s / 60);
    if (m < 60) return `${m} min ${Math.floor(s % 60)} s`;
    return `${Math.floor(m / 60)} h ${m % 60} min`;
  }

  function isLatency(v) {
    return v !== null && typeof v === "object" && "p99_ms" in v;
  }

  function title(key) {
    const text = key.replace(/_/g, " ");
    return text.charAt(0).toUpperCase() + text.slice(1);
  }

  // ---- tables --------------------------------------------------------------------------------

  // A column: [key, header, how to get the cell's value from a row, how to show it, options].
  // `optional` columns are shown only when some row has a value other than 0 or no data.
  function col(key, header, get, show, options) {
    return { key, header, get: get || ((row) => row[key]), show: show || fmtInt, ...options };
  }

  const LATENCY_HEADER = "ms mean / p99";
  const rateCol = (counter, header) => col(`${counter}_rate`, header,
    (c, r) => rate(r, c.component, counter), fmtRate);
  const latencyCol = (key, header) => col(key, [header, LATENCY_HEADER], null, fmtLatency);
  const FIRST = [
    col("component", "Id", null, String, { cls: "id text" }),
    col("tasks", "Tasks"),
  ];
  // Storm UI's two tables: what a spout does and what a bolt does.
  const SPOUT_COLUMNS = FIRST.concat([
    col("emitted", "Emitted"),
    rateCol("emitted", "Emitted/s"),
    col("transferred", "Transferred"),
    col("acked", "Acked"),
    rateCol("acked", "Acked/s"),
    col("failed", "Failed"),
    col("timed_out", "Timed out", null, null, { optional: true }),
    col("pending", "Pending"),
    col("dead_lettered", "Dead-lettered", null, null, { optional: true }),
    col("malformed", "Malformed", null, null, { optional: true }),
    col("errors", "Errors", null, null, { hot: (v) => v > 0 }),
    latencyCol("complete_latency", "Complete latency"),
  ]);
  const BOLT_COLUMNS = FIRST.concat([
    col("emitted", "Emitted"),
    col("transferred", "Transferred"),
    col("executed", "Executed"),
    rateCol("executed", "Executed/s"),
    col("acked", "Acked"),
    col("failed", "Failed"),
    col("late", "Late", null, null, { optional: true }),
    col("errors", "Errors", null, null, { hot: (v) => v > 0 }),
    col("capacity", "Capacity", null, (v) => (isNumber(v) ? v.toFixed(3) : NO_DATA), {
      hot: (v) => v >= 0.8,
    }),
    latencyCol("execute_latency", "Execute latency"),
    latencyCol("process_latency", "Process latency"),
  ]);
  // Figures this page knows (shown for the kind they belong to) or does not show as columns.
  const NOT_COLUMNS = new Set(["kind", "streams", "per_task"].concat(
    SPOUT_COLUMNS.map((c) => c.key), BOLT_COLUMNS.map((c) => c.key)));

  function rate(rates, owner, counter, group) {
    const byOwner = rates && rates[group || "components"];
    const figures = byOwner && byOwner[owner];
    return figures ? figures[counter] : null;
  }

  // The known columns, then a generic one for each figure the server added that this page
  // does not know yet (a number, or a latency summary).
  function columnsFor(rows, known) {
    const names = new Set(known.map((c) => c.key));
    const extra = [];
    for (const row of rows) {
      for (const [key, value] of Object.entries(row)) {
        if (names.has(key) || NOT_COLUMNS.has(key)) continue;
        if (isNumber(value)) extra.push(col(key, title(key)));
        else if (isLatency(value)) extra.push(col(key, `${title(key)} (mean / p99)`, null, fmtLatency));
        else continue;
        names.add(key);
      }
    }
    const all = known.concat(extra);
    return all.filter((c) => !c.optional || rows.some((row) => {
      const v = c.get(row, state.metrics && state.metrics.rates);
      return v !== 0 && v !== null && v !== undefined;
    }));
  }

  function table(columns, rows, rates, rowKey, options) {
    const head = h("tr", null, ...columns.map((c) => {
      const lines = Array.isArray(c.header) ? c.header : [c.header];
      const parts = lines.flatMap((line, i) => (i ? [h("br"), line] : [line]));
      return h("th", { class: c.cls || null }, ...parts);
    }));
    const body = rows.map((row) => {
      const key = rowKey(row);
      const cells = columns.map((c) => {
        const value = c.get(row, rates);
        const classes = [c.cls, c.hot && isNumber(value) && c.hot(value) ? "hot" : null];
        return h("td", {
          class: classes.filter(Boolean).join(" ") || null,
          "data-metric": `${key}.${c.key}`,
          "data-value": isNumber(value) ? String(value) : null,
        }, value === null || value === undefined ? NO_DATA : String(c.show(value)));
      });
      const tr = h("tr", { "data-key": key }, ...cells);
      if (options && options.onSelect) {
        tr.classList.add("selectable");
        if (options.selected === key) tr.classList.add("selected");
        tr.addEventListener("click", () => options.onSelect(key));
      }
      return tr;
    });
    return h("table", null, h("thead", null, head), h("tbody", null, ...body));
  }

  function empty(text) {
    return h("p", { class: "empty" }, text);
  }

  // ---- the topology picture ------------------------------------------------------------------

  function drawGraph(topology) {
    const lay = topology.layout;
    const pad = 12; // room for the badges above the boxes
    const svg = s("svg", {
      width: lay.width * ZOOM,
      height: (lay.height + pad) * ZOOM,
      viewBox: `0 ${-pad} ${lay.width} ${lay.height + pad}`,
      role: "img",
      "aria-label": "the topology",
    });
    const defs = s("defs");
    const marker = s("marker", {
      id: "arrow", viewBox: "0 0 10 10", refX: 9, refY: 5, markerWidth: 8, markerHeight: 8,
      orient: "auto",
    });
    marker.append(s("path", { d: "M 0 1 L 9 5 L 0 9 z" }));
    defs.append(marker);
    svg.append(defs);

    for (const e of lay.edges) {
      const g = s("g", {
        class: "edge" + (e.framework ? " framework" : "") + (e.back ? " back" : ""),
        "data-source": e.source, "data-stream": e.stream, "data-target": e.target,
      });
      g.append(s("title", null, `${e.source} → ${e.target}: stream ${e.stream}, ${e.label}`));
      g.append(s("path", { d: e.d, "marker-end": "url(#arrow)" }));
      const [x, y] = e.label_at;
      const width = e.label.length * CHAR_PX + 6;
      g.append(s("rect", { x: x - width / 2, y: y - 11, width, height: 15.4, rx: 3 }));
      g.append(s("text", { x, y, "text-anchor": "middle" }, e.label));
      const rateBox = s("rect", {
        x: x - 20, y: y + 3, width: 40, height: 14, rx: 3, class: "rate", visibility: "hidden",
      });
      const rateText = s("text", { x, y: y + 14, "text-anchor": "middle", class: "rate" }, "");
      g.append(rateBox, rateText);
      svg.append(g);
    }
    for (const b of lay.nodes) {
      const g = s("g", { class: `node ${b.kind}`, "data-id": b.id });
      const node = topology.nodes.find((n) => n.id === b.id);
      g.append(s("title", null, node ? node.summary : b.id));
      const radius = b.kind === "spout" ? Math.min(b.height / 2, 22) : 4;
      g.append(s("rect", {
        class: "box", x: b.x, y: b.y, width: b.width, height: b.height, rx: radius,
      }));
      const cx = b.x + b.width / 2;
      const cy = b.y + b.height / 2;
      g.append(s("text", { class: "id", x: cx, y: cy - 3, "text-anchor": "middle" }, b.lines[0]));
      g.append(s("text", { class: "caption", x: cx, y: cy + 13, "text-anchor": "middle" },
        b.lines[1]));
      const badge = s("g", { class: "badge", visibility: "hidden" });
      badge.append(s("rect", { x: b.x + b.width - 46, y: b.y - 9, width: 52, height: 16, rx: 8 }));
      badge.append(s("text", { x: b.x + b.width - 20, y: b.y + 3, "text-anchor": "middle" }, ""));
      const errors = s("g", { class: "errors", visibility: "hidden" });
      errors.append(s("rect", { x: b.x - 6, y: b.y - 9, width: 30, height: 16, rx: 8 }));
      errors.append(s("text", { x: b.x + 9, y: b.y + 3, "text-anchor": "middle" }, ""));
      g.append(badge, errors);
      g.addEventListener("click", () => select(b.id));
      svg.append(g);
    }
    replace($("graph"), svg);
  }

  function setBadge(group, text) {
    group.setAttribute("visibility", text ? "visible" : "hidden");
    const label = group.querySelector("text");
    label.textContent = text || "";
    const rect = group.querySelector("rect");
    const width = Math.max(24, text.length * 6.2 + 12);
    const right = Number(rect.getAttribute("x")) + Number(rect.getAttribute("width"));
    if (group.classList.contains("badge")) {
      rect.setAttribute("x", right - width);
      label.setAttribute("x", right - width / 2);
    }
    rect.setAttribute("width", width);
    if (!group.classList.contains("badge")) {
      label.setAttribute("x", Number(rect.getAttribute("x")) + width / 2);
    }
  }

  function updateGraph(answer) {
    const svg = $("graph").querySelector("svg");
    if (!svg) return;
    const comps = (answer.metrics && answer.metrics.components) || {};
    const rates = answer.rates;
    for (const g of svg.querySelectorAll("g.edge")) {
      const r = rate(rates, g.dataset.source, g.dataset.stream, "streams");
      const text = isNumber(r) ? `${fmtRate(r)}/s` : "";
      const label = g.querySelector("text.rate");
      const box = g.querySelector("rect.rate");
      label.textContent = text;
      const width = text.length * CHAR_PX + 6;
      box.setAttribute("x", Number(label.getAttribute("x")) - width / 2);
      box.setAttribute("width", width);
      box.setAttribute("visibility", text ? "visible" : "hidden");
      g.dataset.rate = isNumber(r) ? String(r) : "";
    }
    for (const g of svg.querySelectorAll("g.node")) {
      const id = g.dataset.id;
      const c = comps[id];
      const counter = g.classList.contains("spout") ? "emitted" : "executed";
      const r = rate(rates, id, counter);
      setBadge(g.querySelector("g.badge"), isNumber(r) ? `${fmtRate(r)}/s` : "");
      // The errors counter, or the error records' count where that is higher (both are kept).
      const reported = ((answer.metrics && answer.metrics.errors) || [])
        .filter((e) => e.component === id).reduce((sum, e) => sum + (e.count || 0), 0);
      const count = Math.max(c && isNumber(c.errors) ? c.errors : 0, reported);
      const errors = count ? fmtRate(count) : "";
      setBadge(g.querySelector("g.errors"), errors ? `!${errors}` : "");
      g.classList.toggle("hot", Boolean(c && isNumber(c.capacity) && c.capacity >= 0.8));
      g.classList.toggle("selected", id === state.selected);
    }
  }

  // ---- the tables ----------------------------------------------------------------------------

  function select(id) {
    state.selected = id;
    if (state.metrics) render(state.metrics);
  }

  // The components in the order data flows (the picture's), then any the topology lacks.
  function components(answer) {
    const comps = (answer.metrics && answer.metrics.components) || {};
    const order = state.topology ? state.topology.nodes.map((n) => n.id) : [];
    const ids = order.filter((id) => id in comps)
      .concat(Object.keys(comps).filter((id) => !order.includes(id)));
    return ids.map((id) => comps[id]);
  }

  function renderComponents(answer) {
    const comps = components(answer);
    for (const [kind, known] of [["spout", SPOUT_COLUMNS], ["bolt", BOLT_COLUMNS]]) {
      const rows = comps.filter((c) => c.kind === kind);
      const box = $(`${kind}s`);
      if (!rows.length) {
        replace(box, empty(comps.length ? `No ${kind}s.` : "No figures yet."));
        continue;
      }
      replace(box, table(columnsFor(rows, known), rows, answer.rates, (c) => c.component, {
        onSelect: select, selected: state.selected,
      }));
    }
  }

  function renderTasks(answer) {
    const comps = (answer.metrics && answer.metrics.components) || {};
    const id = state.selected;
    const c = id !== null ? comps[id] : null;
    $("tasks-title").textContent = c ? `Tasks of ${id}` : "Tasks";
    if (!c) {
      replace($("tasks"), empty("Click a component for its tasks."));
      return;
    }
    const tasks = Object.entries(c.per_task || {})
      .sort((a, b) => Number(a[0]) - Number(b[0]))
      .map(([task, figures]) => ({ ...figures, task: Number(task) }));
    if (!tasks.length) {
      replace($("tasks"), empty("This runner reports no figures per task."));
      return;
    }
    const known = [col("task", "Task")].concat((c.kind === "spout" ? SPOUT_COLUMNS : BOLT_COLUMNS)
      .filter((k) => !["component", "tasks"].includes(k.key))
      .map((k) => (k.key.endsWith("_rate")
        ? { ...k, get: (t, r) => rate(r, String(t.task), k.key.slice(0, -5), "tasks") }
        : k)));
    replace($("tasks"), table(columnsFor(tasks, known), tasks, answer.rates,
      (t) => String(t.task)));
  }

  function renderErrors(answer) {
    const errors = (answer.metrics && answer.metrics.errors) || [];
    if (!errors.length) {
      replace($("errors"), empty("No errors reported."));
      return;
    }
    const head = h("tr", null, h("th", null, "Component"), h("th", { class: "text" }, "Kind"),
      h("th", null, "Count"), h("th", { class: "text" }, "Last message"));
    const rows = errors.map((e) => h("tr", null,
      h("td", { class: "id text" }, String(e.component)),
      h("td", { class: "text" }, String(e.kind)),
      h("td", { "data-value": String(e.count) }, fmtInt(e.count)),
      h("td", { class: "message" }, String(e.last))));
    replace($("errors"), h("table", null, h("thead", null, head), h("tbody", null, ...rows)));
  }

  const BATCH_COLUMNS = [
    col("batch_id", "Batch", null, String),
    col("timestamp", "Started", null, String, { cls: "text" }),
    col("duration_ms", "Duration ms"),
    col("input_rows", "Input rows"),
    col("planning_ms", "Planning ms"),
    col("processing_ms", "Processing ms"),
  ];

  function renderBatches(answer) {
    const batches = ((answer.metrics && answer.metrics.batches) || []).slice().reverse();
    $("batches-section").hidden = !batches.length;
    if (!batches.length) return;
    const rows = batches.slice(0, 12);
    replace($("batches"), table(columnsFor(rows, BATCH_COLUMNS), rows, null,
      (b) => String(b.batch_id)));
  }

  function renderUserMetrics(answer) {
    const user = (answer.metrics && answer.metrics.user_metrics) || {};
    const rows = [];
    for (const [owner, metrics] of Object.entries(user)) {
      for (const [name, value] of Object.entries(metrics || {})) {
        rows.push(h("tr", null, h("td", { class: "id text" }, owner),
          h("td", { class: "text" }, name),
          h("td", { class: "message" }, JSON.stringify(value))));
      }
    }
    $("user-section").hidden = !rows.length;
    if (!rows.length) return;
    const head = h("tr", null, h("th", null, "Component"), h("th", { class: "text" }, "Metric"),
      h("th", { class: "text" }, "Value"));
    replace($("user-metrics"), h("table", null, h("thead", null, head), h("tbody", null, ...rows)));
  }

  function renderHeader(answer) {
    $("name").textContent = answer.name || "";
    document.title = `squall: ${answer.name || ""}`;
    const status = $("status");
    status.textContent = answer.status;
    status.className = `status ${answer.status}`;
    $("runner").textContent = `${answer.runner} runner`;
    const m = answer.metrics;
    $("elapsed").textContent = m ? `elapsed ${fmtSeconds(m.elapsed_ms)}` : "";
    $("updated").textContent = `updated ${new Date().toLocaleTimeString("en-GB")}`;
    const link = $("spark-ui");
    const url = answer.spark_ui;
    if (typeof url === "string" && /^https?:\/\//.test(url)) {
      link.href = url;
      link.hidden = false;
    } else {
      link.hidden = true;
    }
  }

  function notice(text, kind) {
    const box = $("notice");
    box.hidden = !text;
    box.className = kind || "";
    box.textContent = text || "";
  }

  function render(answer) {
    if (state.selected === null && answer.metrics) {
      const first = components(answer)[0];
      state.selected = first === undefined ? null : first.component;
    }
    renderHeader(answer);
    updateGraph(answer);
    renderComponents(answer);
    renderTasks(answer);
    renderErrors(answer);
    renderBatches(answer);
    renderUserMetrics(answer);
    if (answer.status === "finished") {
      notice("The run has finished: these are its final figures.", "info");
    } else if (answer.status === "starting") {
      notice("The topology is starting.", "info");
    } else {
      notice(null);
    }
  }

  // ---- polling -------------------------------------------------------------------------------

  class HttpError extends Error {
    constructor(status, message) {
      super(message);
      this.status = status;
    }
  }

  async function getJSON(path) {
    const response = await fetch(path, { headers: { "X-Squall-Token": TOKEN }, cache: "no-store" });
    const body = await response.json().catch(() => ({}));
    if (!response.ok) throw new HttpError(response.status, body.error || response.statusText);
    return body;
  }

  function lostServer(error) {
    const status = $("status");
    if (error instanceof HttpError && error.status === 403) {
      status.textContent = "no access";
      status.className = "status forbidden";
      notice(error.message);
      return;
    }
    status.textContent = "disconnected";
    status.className = "status disconnected";
    const finished = state.metrics && state.metrics.status === "finished";
    const since = state.lastAnswer ? ` since ${state.lastAnswer.toLocaleTimeString("en-GB")}` : "";
    notice(finished
      ? "The run has finished and squall has exited: these are its final figures."
      : `No answer from squall${since}: the run has ended or was stopped, or the network is ` +
        "down. The figures are the last received; still trying.");
    document.body.dataset.connection = "lost";
  }

  async function poll() {
    try {
      const answer = await getJSON("/api/metrics");
      if (answer.topology_version !== state.topologyVersion) {
        const topology = await getJSON("/api/topology");
        state.topology = topology;
        state.topologyVersion = answer.topology_version;
        drawGraph(topology);
      }
      state.metrics = answer;
      state.failures = 0;
      state.lastAnswer = new Date();
      document.body.dataset.connection = "up";
      document.body.dataset.status = answer.status;
      render(answer);
    } catch (error) {
      state.failures += 1;
      lostServer(error);
    }
    const delay = state.failures ? Math.min(MAX_RETRY_MS, POLL_MS * 2 ** state.failures) : POLL_MS;
    window.setTimeout(poll, delay);
  }

  poll();
})();
