// The runs page (`pretrain dashboard ROOT`, sweep.html): a table of runs with a column
// picker, a filter, curves of the selected runs and a metric-vs-hyperparameter plot, drawn
// with uPlot (vendor/uPlot.iife.min.js, loaded before this file). Served, it polls
// POST runs.json for what changed: the table when it did, and per selected run only the
// curve points logged after the cursor it holds. Written as sweep.html, the rows carry
// their series and nothing is polled. What the user picked (columns, panels, axes, the
// selection, the filter, the sort) lives in the URL's #fragment, so a link or a reload
// shows the same view. Every run's text goes in through textContent, never innerHTML.
(() => {
  "use strict";
  const PALETTE = ["#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd",
                   "#8c564b", "#e377c2", "#17becf", "#bcbd22", "#7f7f7f"];
  const FILTER_TERM = /^([^<>=!]+)(>=|<=|!=|=|>|<)(.*)$/;
  const MARKERS_BELOW = 60;      // a series with fewer points shows each one
  const CELL_CHARS = 40;         // longer config values are cut in the cell (full text on hover)
  const DEFAULT_CONFIG_COLUMNS = 6;
  const DEFAULT_SCORE_COLUMNS = 8;
  const DEFAULT_SELECTED = 5;
  const DEFAULT_PANELS = ["loss", "val_loss"];
  const X_AXES = {step: "step", tokens: "tokens", time: "wall time"};
  const $ = id => document.getElementById(id);
  const settings = JSON.parse($("dashboard-settings").textContent);
  const view = {
    data: null, etag: null, serverTime: null,
    sortKey: null, sortDir: 1,
    selected: new Map(),   // run_dir -> palette index, kept while the run stays selected
    columns: null,         // column keys shown; null: the defaults
    panels: null,          // metric names drawn; null: the defaults
    x: "step", log: false, smooth: 0,
    scatterX: null, scatterY: null,
    store: new Map(),      // run_dir -> {epoch, cursor, names, tokens_per_step, metrics}
    charts: new Map(),     // panel name -> {plot, signature, zoomed}
    updated: new Date(), polling: false, pollAgain: false,
  };
  window.runsPage = view;  // for the browser tests' probes

  // ---- small helpers -------------------------------------------------------------
  function el(tag, attrs, ...children) {
    const node = document.createElement(tag);
    for (const [key, value] of Object.entries(attrs || {})) {
      if (value !== null && value !== undefined && value !== false) node.setAttribute(key, value);
    }
    for (const child of children) node.append(child instanceof Node ? child : String(child));
    return node;
  }

  // Python's "{:.4g}", as the Markdown twin writes numbers.
  function formatNumber(value) {
    if (Number.isInteger(value)) return String(value);
    const size = Math.abs(value);
    const exponent = size === 0 ? 0 : Math.floor(Math.log10(size));
    const text = exponent < -4 || exponent >= 4 ? value.toExponential(3) : value.toPrecision(4);
    let [mantissa, power] = text.split("e");
    if (mantissa.includes(".")) mantissa = mantissa.replace(/\.?0+$/, "");
    if (power === undefined) return mantissa;
    const digits = power.replace(/^[+-]/, "").padStart(2, "0");
    return `${mantissa}e${power.startsWith("-") ? "-" : "+"}${digits}`;
  }

  function formatDuration(seconds) {
    const s = Math.round(seconds);
    if (s < 60) return `${s}s`;
    const pad = n => String(n).padStart(2, "0");
    if (s < 3600) return `${Math.floor(s / 60)}m ${pad(s % 60)}s`;
    return `${Math.floor(s / 3600)}h ${pad(Math.floor(s % 3600 / 60))}m`;
  }

  function formatValue(value) {
    if (value === null || value === undefined) return "-";
    if (typeof value === "number") return formatNumber(value);
    if (typeof value === "object") return JSON.stringify(value);
    return String(value);
  }

  function editDistance(a, b) {
    const row = Array.from({length: b.length + 1}, (_, j) => j);
    for (let i = 1; i <= a.length; i += 1) {
      let diagonal = row[0];
      row[0] = i;
      for (let j = 1; j <= b.length; j += 1) {
        const above = row[j];
        row[j] = Math.min(row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] === b[j - 1] ? 0 : 1));
        diagonal = above;
      }
    }
    return row[b.length];
  }

  // ---- the URL's fragment holds what the user picked ------------------------------
  function readUrl() {
    const params = new URLSearchParams(location.hash.slice(1));
    const list = name => params.has(name) ? params.get(name).split(",").filter(Boolean) : null;
    view.columns = list("cols");
    view.panels = list("panels");
    view.x = X_AXES[params.get("x")] ? params.get("x") : "step";
    view.log = params.get("log") === "1";
    view.smooth = Math.min(0.99, Math.max(0, Number(params.get("smooth")) || 0));
    view.scatterX = params.get("sx");
    view.scatterY = params.get("sy");
    view.wantedSelection = list("sel");
    if (params.has("sort")) {
      const sort = params.get("sort");
      view.sortDir = sort.startsWith("-") ? -1 : 1;
      view.sortKey = sort.replace(/^-/, "");
    }
    if (params.has("filter")) $("filter").value = params.get("filter");
  }

  function writeUrl() {
    const params = new URLSearchParams();
    if (view.columns) params.set("cols", view.columns.join(","));
    if (view.panels) params.set("panels", view.panels.join(","));
    if (view.x !== "step") params.set("x", view.x);
    if (view.log) params.set("log", "1");
    if (view.smooth) params.set("smooth", String(view.smooth));
    if (view.scatterX) params.set("sx", view.scatterX);
    if (view.scatterY) params.set("sy", view.scatterY);
    params.set("sel", selectedRows().map(row => row.values.directory || row.run_dir).join(","));
    if (view.sortKey) params.set("sort", (view.sortDir < 0 ? "-" : "") + view.sortKey);
    const filter = $("filter").value.trim();
    if (filter) params.set("filter", filter);
    history.replaceState(null, "", "#" + params.toString());
  }

  // ---- the table ------------------------------------------------------------------
  const GROUP_ORDER = {run: 0, pretrain: 1, finetune: 2, evaluate: 3, config: 4};

  // Run columns, then metrics, then config keys: swept ones first.
  function orderedColumns() {
    const swept = view.data.swept_keys || [];
    const rank = column => {
      if (column.group !== "config") return [GROUP_ORDER[column.group] ?? 3, 0];
      const index = swept.indexOf(column.name);
      return [index >= 0 ? 4 : 5, index >= 0 ? index : 0];
    };
    return view.data.columns.map((column, index) => [column, rank(column), index])
      .sort(([, a, ia], [, b, ib]) => a[0] - b[0] || a[1] - b[1] || ia - ib)
      .map(([column]) => column);
  }

  function defaultColumns(columns) {
    const swept = new Set(view.data.swept_keys || []);
    const config = columns.filter(c => c.group === "config");
    const shownConfig = swept.size ? config.filter(c => swept.has(c.name))
      : config.slice(0, DEFAULT_CONFIG_COLUMNS);
    const scores = columns.filter(c => c.group === "finetune" || c.group === "evaluate")
      .slice(0, DEFAULT_SCORE_COLUMNS);
    const keep = new Set([...shownConfig, ...scores].map(c => c.key));
    return columns.filter(c => (c.group === "run" && c.key !== "directory") || c.group === "pretrain"
                               || keep.has(c.key)).map(c => c.key);
  }

  function shownColumns() {
    const columns = orderedColumns();
    const wanted = new Set(view.columns || defaultColumns(columns));
    wanted.add("run");  // the sticky name column is always there
    return columns.filter(c => wanted.has(c.key));
  }

  function wallSeconds(row) {
    const wall = row.values.wall_seconds;
    if (typeof wall !== "number") return wall;
    if (row.values.state !== "running" || view.serverTime === null) return wall;
    return wall + Math.max(0, view.serverTime - view.data.generated);  // the poll's clock
  }

  function cellText(column, row) {
    if (column.key === "wall_seconds") {
      const wall = wallSeconds(row);
      if (typeof wall !== "number") return "-";
      return formatDuration(wall) + (row.values.state === "running" ? " so far" : "");
    }
    return formatValue(row.values[column.key]);
  }

  function sortValue(column, row) {
    const value = column.key === "wall_seconds" ? wallSeconds(row) : row.values[column.key];
    if (value === null || value === undefined) return null;
    if (column.numeric) return typeof value === "number" && isFinite(value) ? value : null;
    return cellText(column, row);
  }

  function sortedRows(rows) {
    const column = view.data.columns.find(c => c.key === view.sortKey);
    if (!column) return rows;
    const indexed = rows.map((row, index) => [row, index]);
    indexed.sort(([a, ia], [b, ib]) => {
      const va = sortValue(column, a), vb = sortValue(column, b);
      if (va === null || vb === null) return va === vb ? ia - ib : (va === null ? 1 : -1);
      const order = column.numeric ? va - vb
        : String(va).localeCompare(String(vb), undefined, {numeric: true});
      return order * view.sortDir || ia - ib;
    });
    return indexed.map(([row]) => row);
  }

  function findColumn(name) {
    const wanted = name.trim().toLowerCase();
    return view.data.columns.find(c => c.name.toLowerCase() === wanted || c.title.toLowerCase() === wanted);
  }

  function configKeys() {
    const keys = new Set(Object.keys(view.data.config_common || {}));
    for (const row of view.data.rows) for (const key of Object.keys(row.config)) keys.add(key);
    return keys;
  }

  function lookup(row, name) {
    const column = findColumn(name);
    if (column) return {found: true, value: row.values[column.key]};
    const wanted = name.trim().toLowerCase();
    const key = Object.keys(row.fullConfig).find(k => k.toLowerCase() === wanted);
    return key === undefined ? {found: false} : {found: true, value: row.fullConfig[key]};
  }

  // "no key hidden_size; did you mean pretrain.model.hidden_size?"
  function unknownKeyMessage(name) {
    const wanted = name.trim().toLowerCase();
    if (findColumn(name)) return null;
    const keys = [...configKeys(), ...view.data.columns.map(c => c.name)];
    if (keys.some(k => k.toLowerCase() === wanted)) return null;
    let guesses = keys.filter(k => k.toLowerCase().endsWith("." + wanted) || k.toLowerCase().endsWith("/" + wanted));
    if (!guesses.length) {
      const scored = keys.map(k => [k, Math.min(editDistance(wanted, k.toLowerCase()),
                                                editDistance(wanted, k.toLowerCase().split(/[./]/).pop()))]);
      const best = Math.min(...scored.map(([, d]) => d));
      if (best <= Math.max(2, Math.floor(wanted.length / 3))) {
        guesses = scored.filter(([, d]) => d === best).map(([k]) => k);
      }
    }
    guesses = [...new Set(guesses)].slice(0, 3);
    return `no key ${name.trim()}` + (guesses.length ? `; did you mean ${guesses.join(" or ")}?` : "");
  }

  function compare(value, op, wanted) {
    const number = Number(wanted);
    let order;
    if (typeof value === "number" && wanted.trim() !== "" && !Number.isNaN(number)) {
      order = value - number;
    } else {
      const text = formatValue(value).toLowerCase(), want = wanted.trim().toLowerCase();
      if (op === "=" || op === "!=") return (text === want) === (op === "=");
      order = text.localeCompare(want, undefined, {numeric: true});
    }
    return {"=": order === 0, "!=": order !== 0, ">": order > 0, "<": order < 0,
            ">=": order >= 0, "<=": order <= 0}[op];
  }

  function rowText(row) {
    const cells = view.data.columns.map(c => cellText(c, row));
    return [...cells, row.run_dir, row.experiment].join(" ").toLowerCase();
  }

  function filterTerms() {
    return $("filter").value.trim().split(/\s+/).filter(Boolean);
  }

  function matches(row, terms) {
    return terms.every(term => {
      const parts = FILTER_TERM.exec(term);
      if (!parts) return rowText(row).includes(term.toLowerCase());
      const [, name, op, wanted] = parts;
      const {found, value} = lookup(row, name);
      return found && compare(value, op, wanted);
    });
  }

  function visibleRows() {
    const terms = filterTerms();
    return sortedRows(view.data.rows.filter(row => matches(row, terms)));
  }

  function filterProblems() {
    return filterTerms().map(term => FILTER_TERM.exec(term)).filter(Boolean)
      .map(([, name]) => unknownKeyMessage(name)).filter(Boolean);
  }

  function colour(runDir) {
    return PALETTE[view.selected.get(runDir) % PALETTE.length];
  }

  function select(rows, on) {
    for (const row of rows) {
      if (on && !view.selected.has(row.run_dir)) {
        const used = new Set(view.selected.values());
        let index = 0;
        while (used.has(index)) index += 1;
        view.selected.set(row.run_dir, index);
      } else if (!on) {
        view.selected.delete(row.run_dir);
      }
    }
  }

  function setSelected(rows, on) {
    select(rows, on);
    render();
    requestSeries();
  }

  function sortBy(key) {
    view.sortDir = view.sortKey === key ? -view.sortDir : 1;
    view.sortKey = key;
    renderTable();
  }

  function headerTip(column) {
    const parts = [column.group === "config" ? `config key ${column.title}` : column.name];
    if ((view.data.swept_keys || []).includes(column.name)) parts.push("swept");
    if (column.lower_is_better === true) parts.push("lower is better");
    if (column.lower_is_better === false) parts.push("higher is better");
    if (column.baseline !== null && column.baseline !== undefined) {
      parts.push(`baseline ${formatNumber(column.baseline)}`);
    }
    return parts.join("; ");
  }

  function renderTable() {
    const table = $("runs");
    const columns = shownColumns();
    const all = el("input", {type: "checkbox", id: "select-all", title: "select every shown run"});
    const head = el("tr", {}, el("th", {class: "pick"}, all));
    for (const column of columns) {
      const swept = (view.data.swept_keys || []).includes(column.name) && column.group === "config";
      const th = el("th", {"data-key": column.key, title: headerTip(column),
                           class: `sortable g-${column.group}${column.numeric ? " num" : ""}` +
                                  `${column.key === "run" ? " name" : ""}${swept ? " swept" : ""}`},
                    column.title);
      if (view.sortKey === column.key) {
        th.classList.add(view.sortDir > 0 ? "asc" : "desc");
        th.setAttribute("aria-sort", view.sortDir > 0 ? "ascending" : "descending");
      }
      th.addEventListener("click", () => { sortBy(column.key); writeUrl(); });
      head.append(th);
    }
    table.tHead.replaceChildren(head);
    const shown = visibleRows();
    all.checked = shown.length > 0 && shown.every(row => view.selected.has(row.run_dir));
    all.addEventListener("change", () => setSelected(shown, all.checked));
    table.tBodies[0].replaceChildren(...shown.map(row => renderRow(row, columns)));
    const problems = filterProblems();
    $("filter-problem").textContent = problems.join("; ");
    $("shown").textContent = `${shown.length} of ${view.data.rows.length} runs shown, ` +
      `${view.selected.size} selected; ${columns.length} of ${view.data.columns.length} columns`;
  }

  function renderRow(row, columns) {
    const box = el("input", {type: "checkbox", "aria-label": `select ${row.values.run}`});
    box.checked = view.selected.has(row.run_dir);
    box.addEventListener("change", () => setSelected([row], box.checked));
    const tr = el("tr", {"data-run": row.run_dir}, el("td", {class: "pick"}, box));
    for (const column of columns) {
      const text = cellText(column, row);
      const cut = column.group === "config" && text.length > CELL_CHARS;
      const td = el("td", {"data-key": column.key,
                           class: [column.numeric ? "num" : "", column.key === "run" ? "name" : ""]
                             .filter(Boolean).join(" ") || null},
                    cut ? text.slice(0, CELL_CHARS - 1) + "\u2026" : text);
      if (cut) td.title = text;
      const context = row.contexts[column.key];
      if (column.key === "state") {
        td.classList.add(`state-${String(row.values.state).replace(/\s+/g, "-")}`);
        td.title = (row.error ? `${row.error}\n` : "") +
          Object.entries(row.stages).map(([stage, state]) => `${stage}: ${state}`).join("\n");
      } else if (context) {
        td.title = `baseline ${formatNumber(context.baseline)}` + (context.label ? ` (${context.label})` : "");
        if (context.verdict && context.verdict !== "above") {
          td.append(" ", el("span", {class: `badge badge-${context.verdict}`}, context.label));
        }
      }
      tr.append(td);
    }
    return tr;
  }

  function renderColumnPicker() {
    const columns = orderedColumns();
    const shown = new Set(shownColumns().map(c => c.key));
    const groups = new Map();
    for (const column of columns) {
      if (column.key === "run") continue;
      if (!groups.has(column.group)) groups.set(column.group, []);
      groups.get(column.group).push(column);
    }
    const boxes = [];
    for (const [group, members] of groups) {
      const items = members.map(column => {
        const box = el("input", {type: "checkbox", "data-key": column.key});
        box.checked = shown.has(column.key);
        box.addEventListener("change", () => {
          const keys = new Set(shownColumns().map(c => c.key));
          if (box.checked) keys.add(column.key); else keys.delete(column.key);
          view.columns = orderedColumns().map(c => c.key).filter(key => keys.has(key));
          writeUrl();
          renderTable();
        });
        return el("label", {title: headerTip(column)}, box, column.title);
      });
      boxes.push(el("fieldset", {}, el("legend", {}, group), ...items));
    }
    const reset = el("button", {type: "button"}, "default columns");
    reset.addEventListener("click", () => { view.columns = null; writeUrl(); render(); });
    $("column-picker").replaceChildren(...boxes, reset);
  }

  // ---- curves ---------------------------------------------------------------------
  function selectedRows() {
    return view.data.rows.filter(row => view.selected.has(row.run_dir));
  }

  function loggedNames() {
    const names = new Set();
    for (const row of selectedRows()) {
      for (const name of (view.store.get(row.run_dir) || {names: []}).names) names.add(name);
    }
    return [...names].sort((a, b) => panelRank(a) - panelRank(b) || a.localeCompare(b));
  }

  function panelRank(name) {
    if (name.startsWith("finetune/")) return 3;
    if (name === "loss") return 0;
    if (name.startsWith("val_")) return 1;
    return 2;
  }

  function panelNames() {
    if (view.panels) return view.panels;
    const logged = loggedNames();
    const losses = logged.filter(name => name === "loss" || name === "val_loss" || /^finetune\/[^/]+\/loss$/.test(name));
    return losses.length ? losses : DEFAULT_PANELS;
  }

  function renderPanelPicker() {
    const picked = new Set(panelNames());
    const names = [...new Set([...loggedNames(), ...picked])];
    const boxes = names.map(name => {
      const box = el("input", {type: "checkbox", "data-metric": name});
      box.checked = picked.has(name);
      box.addEventListener("change", () => {
        const now = new Set(panelNames());
        if (box.checked) now.add(name); else now.delete(name);
        view.panels = names.filter(n => now.has(n));
        writeUrl();
        renderCurves();
        requestSeries();
      });
      return el("label", {}, box, name);
    });
    $("panel-picker").replaceChildren(...(boxes.length ? boxes
      : [el("span", {class: "muted"}, "the selected runs' metrics appear here")]));
  }

  // TensorBoard's smoothing: an exponential moving average, debiased at the start.
  function smoothed(values) {
    const weight = view.smooth;
    if (!weight) return values;
    let last = 0, count = 0;
    return values.map(value => {
      if (value === null) return null;
      count += 1;
      last = last * weight + (1 - weight) * value;
      return last / (1 - Math.pow(weight, count));
    });
  }

  function xValues(run, points) {
    if (view.x === "time") return points.time;
    if (view.x === "tokens") return run.tokens_per_step ? points.step.map(s => s * run.tokens_per_step) : null;
    return points.step;
  }

  function panelData(name) {
    const lines = [], missing = [];
    for (const row of selectedRows()) {
      const run = view.store.get(row.run_dir);
      const points = run && run.metrics[name];
      if (!points || !points.step.length) continue;
      const xs = xValues(run, points);
      if (!xs) { missing.push(row.values.run); continue; }
      let values = smoothed(points.value);
      if (view.log) values = values.map(v => v > 0 ? v : null);
      // uPlot wants each x once, ascending: wall time can repeat across a resume.
      const order = xs.map((x, i) => i).sort((a, b) => xs[a] - xs[b]);
      const uniqueX = [], uniqueY = [];
      for (const i of order) {
        if (uniqueX.length && uniqueX[uniqueX.length - 1] === xs[i]) uniqueY[uniqueY.length - 1] = values[i];
        else { uniqueX.push(xs[i]); uniqueY.push(values[i]); }
      }
      lines.push({row, xs: uniqueX, ys: uniqueY, count: points.step.length});
    }
    return {lines, missing};
  }

  function chartOptions(name, lines, width) {
    const xLabel = X_AXES[view.x];
    const formatX = view.x === "time" ? v => formatDuration(v) : v => formatNumber(v);
    const series = [{label: xLabel, value: (u, v) => v === null || v === undefined ? "-" : formatX(v)}];
    for (const line of lines) {
      series.push({
        label: line.row.values.run, stroke: colour(line.row.run_dir), width: 1.6, spanGaps: true,
        points: {show: line.count < MARKERS_BELOW, size: 7, fill: colour(line.row.run_dir)},
        value: (u, v) => v === null || v === undefined ? "-" : formatNumber(v),
      });
    }
    return {
      width, height: 260, series,
      scales: {x: {time: false}, y: view.log ? {distr: 3} : {}},
      axes: [{label: xLabel, values: tickText(formatX)}, {values: tickText(formatNumber), size: 60}],
      cursor: {drag: {x: true, y: false}},
      legend: {live: true},
    };
  }

  function drawPanel(name, box) {
    const {lines, missing} = panelData(name);
    const signature = JSON.stringify([lines.map(l => [l.row.run_dir, colour(l.row.run_dir), l.count < MARKERS_BELOW]),
                                      view.x, view.log, view.smooth]);
    let chart = view.charts.get(name);
    const data = lines.length ? uPlot.join(lines.map(l => [l.xs, l.ys])) : null;
    if (chart && chart.signature === signature && chart.figure.isConnected && data) {
      chart.plot.setData(data, !chart.zoomed);
      chart.note.textContent = missingNote(missing);
      return chart.figure;
    }
    if (chart) chart.plot.destroy();
    const note = el("p", {class: "muted note"}, missingNote(missing));
    const figure = el("figure", {class: "panel", "data-panel": name}, el("figcaption", {}, name), note);
    box.append(figure);
    if (!lines.length) {
      note.textContent = missing.length ? missingNote(missing) : "no selected run logged this metric yet";
      view.charts.delete(name);
      return figure;
    }
    const plot = new uPlot(chartOptions(name, lines, Math.max(320, Math.min(560, box.clientWidth - 24))),
                           data, figure);
    chart = {plot, signature, zoomed: false, figure, note, lines: lines.map(l => l.row.run_dir)};
    plot.over.addEventListener("mouseup", () => { chart.zoomed = plot.select.width > 0 || chart.zoomed; });
    plot.over.addEventListener("dblclick", () => { chart.zoomed = false; });
    view.charts.set(name, chart);
    return figure;
  }

  // A log axis leaves some ticks unlabelled: uPlot hands those over as null.
  function tickText(format) {
    return (u, ticks) => ticks.map(v => v === null || v === undefined ? "" : format(v));
  }

  function missingNote(missing) {
    return missing.length ? `tokens per step unknown for ${missing.join(", ")}` : "";
  }

  function renderCurves() {
    renderPanelPicker();
    const box = $("curves");
    const picked = selectedRows();
    if (!picked.length) {
      for (const chart of view.charts.values()) chart.plot.destroy();
      view.charts.clear();
      box.replaceChildren(el("p", {class: "muted"}, "Tick runs in the table to overlay their curves."));
      return;
    }
    const names = panelNames();
    for (const [name, chart] of [...view.charts]) {
      if (!names.includes(name)) { chart.plot.destroy(); view.charts.delete(name); }
    }
    for (const child of [...box.children]) if (!child.dataset.panel) child.remove();
    const figures = names.map(name => drawPanel(name, box));
    box.replaceChildren(...figures);
  }

  // ---- metric vs hyperparameter ---------------------------------------------------
  function scatterCandidates() {
    const swept = view.data.swept_keys || [];
    const config = view.data.columns.filter(c => c.group === "config" && c.numeric);
    const xs = [...config.filter(c => swept.includes(c.name)), ...config.filter(c => !swept.includes(c.name))];
    const ys = view.data.columns.filter(c => c.group !== "config" && c.group !== "run" && c.numeric);
    return {xs, ys};
  }

  function renderScatter() {
    const box = $("scatter");
    if (view.scatter) { view.scatter.destroy(); view.scatter = null; }
    const {xs, ys} = scatterCandidates();
    if (!xs.length || !ys.length || view.data.rows.length < 2) {
      box.replaceChildren(el("p", {class: "muted"},
        "Runs that differ in a numeric config key (a sweep) are plotted here against a final metric."));
      return;
    }
    const xColumn = xs.find(c => c.key === view.scatterX) || xs[0];
    const yColumn = ys.find(c => c.key === view.scatterY)
      || ys.find(c => c.name === "pretrain/val_loss") || ys.find(c => c.name === "pretrain/final_loss") || ys[0];
    const chooser = (id, columns, chosen, key) => {
      const menu = el("select", {id}, ...columns.map(c => {
        const option = el("option", {value: c.key}, c.title);
        option.selected = c.key === chosen.key;
        return option;
      }));
      menu.addEventListener("change", () => { view[key] = menu.value; writeUrl(); renderScatter(); });
      return menu;
    };
    const points = visibleRows()
      .map(row => [row.values[xColumn.key], row.values[yColumn.key], row.values.run])
      .filter(([x, y]) => typeof x === "number" && typeof y === "number")
      .sort((a, b) => a[0] - b[0]);
    const controls = el("p", {}, "y ", chooser("scatter-y", ys, yColumn, "scatterY"),
                        " against x ", chooser("scatter-x", xs, xColumn, "scatterX"),
                        ` (${points.length} of the shown runs have both)`);
    const figure = el("figure", {class: "panel", "data-panel": "scatter"});
    box.replaceChildren(controls, figure);
    if (!points.length) return;
    const positive = points.every(([x]) => x > 0);
    const wide = positive && points[points.length - 1][0] / points[0][0] >= 10;
    const names = points.map(p => p[2]);
    view.scatter = new uPlot({
      width: 520, height: 280,
      scales: {x: wide ? {time: false, distr: 3} : {time: false}},
      series: [{label: xColumn.title, value: (u, v, s, i) => i === null ? "-" : `${formatNumber(v)} (${names[i]})`},
               {label: yColumn.title, stroke: PALETTE[0], paths: () => null,
                points: {show: true, size: 9, fill: PALETTE[0]},
                value: (u, v) => v === null || v === undefined ? "-" : formatNumber(v)}],
      axes: [{label: xColumn.title, values: tickText(formatNumber)},
             {label: yColumn.title, values: tickText(formatNumber), size: 60}],
    }, [points.map(p => p[0]), points.map(p => p[1])], figure);
  }

  // ---- config differences ---------------------------------------------------------
  function renderConfigDiff() {
    const picked = selectedRows();
    const box = $("config-diff");
    if (picked.length < 2) {
      box.replaceChildren(el("p", {class: "muted"}, "Select two runs or more to see how their configs differ."));
      return;
    }
    const ignored = new Set(view.data.ignored_config_keys);
    const keys = [...new Set(picked.flatMap(row => Object.keys(row.fullConfig)))].sort();
    const differing = keys.filter(key => !ignored.has(key) && new Set(
      picked.map(row => JSON.stringify(row.fullConfig[key] === undefined ? null : row.fullConfig[key]))).size > 1);
    if (!differing.length) {
      box.replaceChildren(el("p", {}, "The selected runs' configs are identical (apart from name, workdir and store)."));
      return;
    }
    const head = el("tr", {}, el("th", {}, "key"), ...picked.map(row => el("th", {}, row.values.run)));
    const body = differing.map(key => el("tr", {}, el("td", {}, key),
      ...picked.map(row => el("td", {}, formatValue(row.fullConfig[key])))));
    box.replaceChildren(el("table", {class: "config-diff"}, el("thead", {}, head), el("tbody", {}, ...body)));
  }

  function renderProblems() {
    const problems = view.data.problems || [];
    const notes = view.data.note ? [el("p", {class: "muted", id: "note"}, view.data.note)] : [];
    $("problems").replaceChildren(...notes, ...problems.map(
      p => el("p", {class: "error"}, `could not read ${p.run_dir}: ${p.error}`)));
  }

  function render() {
    renderProblems();
    renderColumnPicker();
    renderTable();
    renderCurves();
    renderScatter();
    renderConfigDiff();
    writeUrl();
  }

  // ---- data in --------------------------------------------------------------------
  function takeTable(data) {
    if (data.scaling_html !== undefined && view.data && data.scaling_html !== view.data.scaling_html) {
      $("scaling").innerHTML = data.scaling_html;  // built and escaped by the server
    }
    for (const row of data.rows) row.fullConfig = Object.assign({}, data.config_common || {}, row.config);
    const first = view.data === null;
    view.data = data;
    view.etag = data.etag || null;
    const present = new Set(data.rows.map(row => row.run_dir));
    for (const runDir of [...view.selected.keys()]) if (!present.has(runDir)) view.selected.delete(runDir);
    for (const runDir of [...view.store.keys()]) if (!present.has(runDir)) view.store.delete(runDir);
    for (const row of data.rows) {
      if (row.series) view.store.set(row.run_dir, {...row.series, held: new Set(row.series.names)});
    }
    if (first) {
      const wanted = view.wantedSelection;
      const rows = wanted ? data.rows.filter(row => wanted.includes(row.values.directory || row.run_dir))
        : visibleRows().slice(0, DEFAULT_SELECTED);
      select(rows, true);
    }
    if (!data.columns.some(c => c.key === view.sortKey)) view.sortKey = null;
  }

  // Points after the cursor are appended; an answer that starts at or before our last
  // step (the latest point sent last time was not a kept one) replaces our tail.
  function mergeSeries(runDir, answer) {
    let run = view.store.get(runDir);
    if (!run || answer.reset) {
      run = {metrics: {}, held: new Set()};
      view.store.set(runDir, run);
    }
    Object.assign(run, {epoch: answer.epoch, cursor: answer.cursor, names: answer.names,
                        tokens_per_step: answer.tokens_per_step});
    for (const [name, points] of Object.entries(answer.metrics)) {
      run.held.add(name);
      const have = run.metrics[name];
      if (!have || !have.step.length) { run.metrics[name] = points; continue; }
      if (!points.step.length) continue;
      let keep = have.step.length;
      while (keep > 0 && have.step[keep - 1] >= points.step[0]) keep -= 1;
      for (const key of ["step", "value", "time"]) have[key] = have[key].slice(0, keep).concat(points[key]);
    }
  }

  function seriesWanted() {
    const names = panelNames();
    const wants = {};
    for (const row of selectedRows()) {
      const run = view.store.get(row.run_dir);
      if (!run || run.epoch === undefined) {
        wants[row.run_dir] = {epoch: null, after: 0, metrics: names, full: []};
      } else {
        wants[row.run_dir] = {epoch: run.epoch, after: run.cursor, metrics: names.filter(n => run.held.has(n)),
                              full: names.filter(n => !run.held.has(n))};
      }
    }
    return wants;
  }

  function setStatus(text, failed) {
    const status = $("status");
    status.textContent = text;
    status.className = failed ? "error" : "muted";
  }

  async function poll() {
    if (view.polling) { view.pollAgain = true; return; }
    view.polling = true;
    try {
      const response = await fetch(settings.data_url, {
        method: "POST", cache: "no-store", headers: {"Content-Type": "application/json"},
        body: JSON.stringify({table: view.etag, series: seriesWanted()})});
      const body = await response.text();
      if (!response.ok) throw new Error(body.trim() || `HTTP ${response.status}`);
      const answer = JSON.parse(body);
      if (answer.table) takeTable(answer.table);
      view.serverTime = answer.generated;
      for (const [runDir, series] of Object.entries(answer.series || {})) mergeSeries(runDir, series);
      if (settings.poll_seconds && seriesMissing()) view.pollAgain = true;  // panels of metrics just named
      view.updated = new Date();
      if (answer.table) render(); else { renderTable(); renderCurves(); }
      setStatus(`live: updated ${view.updated.toLocaleTimeString()}, every ${settings.poll_seconds} s`);
    } catch (error) {
      setStatus(`update failed at ${new Date().toLocaleTimeString()}: ${error.message}; ` +
                `showing the runs as of ${view.updated.toLocaleTimeString()}`, true);
    } finally {
      view.polling = false;
      if (view.pollAgain) { view.pollAgain = false; poll(); }
    }
  }

  function loop() {
    poll().finally(() => setTimeout(loop, settings.poll_seconds * 1000));
  }

  function seriesMissing() {
    return selectedRows().some(row => {
      const run = view.store.get(row.run_dir);
      return !run || panelNames().some(name => !run.held.has(name));
    });
  }

  function requestSeries() {
    if (settings.poll_seconds && seriesMissing()) poll();  // sweep.html: the series came with the page
  }

  function controls() {
    const xMenu = $("x-axis");
    xMenu.value = view.x;
    xMenu.addEventListener("change", () => { view.x = xMenu.value; writeUrl(); renderCurves(); });
    const log = $("log-y");
    log.checked = view.log;
    log.addEventListener("change", () => { view.log = log.checked; writeUrl(); renderCurves(); });
    const smooth = $("smooth");
    smooth.value = String(view.smooth);
    $("smooth-value").textContent = view.smooth.toFixed(2);
    smooth.addEventListener("input", () => {
      view.smooth = Number(smooth.value);
      $("smooth-value").textContent = view.smooth.toFixed(2);
      writeUrl();
      renderCurves();
    });
    $("filter").addEventListener("input", () => { renderTable(); renderScatter(); writeUrl(); });
    $("select-shown").addEventListener("click", () => setSelected(visibleRows(), true));
    $("select-none").addEventListener("click", () => { view.selected.clear(); render(); });
  }

  readUrl();
  takeTable(JSON.parse($("runs-data").textContent));
  controls();
  render();
  if (settings.poll_seconds) loop();
})();
