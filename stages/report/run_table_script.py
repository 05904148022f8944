"""The script and style of the runs page (`stages.report.run_table_render`): plain
JavaScript, no library, nothing fetched but /runs.json (and that only when served).

It draws the table from the JSON in <script id="runs-data">, sorts it by a clicked
header (numbers as numbers, missing values last either way), filters it (words, or
key=value / key>value over columns and config keys), overlays the selected runs' curves
as inline SVG, and lists the config keys on which the selected runs differ. Served, it
polls /runs.json and redraws in place, keeping the sort, the filter and the selection.
Every run's text goes in through textContent, never innerHTML.
"""

STYLE = """
body { max-width: 96vw; }  /* a sweep's table is wide: use the window */
.controls { display: flex; gap: 0.6em; align-items: center; margin: 0.6em 0; flex-wrap: wrap; }
.table-wrap { overflow-x: auto; max-width: 100%; }
table.runs th.sortable { cursor: pointer; user-select: none; white-space: nowrap; }
table.runs th.asc::after { content: " \\25B2"; } table.runs th.desc::after { content: " \\25BC"; }
table.runs th.g-config { background: #eef3fb; } table.runs th.g-finetune { background: #eef8f0; }
table.runs th.g-evaluate { background: #f6f0fa; } table.runs th.g-pretrain { background: #fbf5ea; }
table.runs td { white-space: nowrap; }
table.runs td.pick, table.runs th.pick { text-align: center; }
td.state-done { color: #1b7f3b; } td.state-running { color: #1f5fbf; font-weight: bold; }
td.state-failed { color: #b00020; font-weight: bold; } td.state-incomplete { color: #a66300; }
.error { color: #b00020; }
figure.panel { border: 1px solid #eee; padding: 0.4em; }
figure.panel figcaption { font-weight: bold; font-size: 0.9em; }
svg.curve text { font-size: 10px; fill: #555; } svg.curve line.axis { stroke: #999; }
svg.curve line.grid { stroke: #eee; }
.legend { font-size: 0.85em; max-width: 460px; } .legend span { margin-right: 0.8em; white-space: nowrap; }
.legend i { display: inline-block; width: 0.9em; height: 0.9em; margin-right: 0.3em; vertical-align: -0.1em; }
"""

SCRIPT = r"""
(() => {
  "use strict";
  const PALETTE = ["#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd",
                   "#8c564b", "#e377c2", "#17becf", "#bcbd22", "#7f7f7f"];
  const SVG_NS = "http://www.w3.org/2000/svg";
  const FILTER_TERM = /^([^<>=!]+)(>=|<=|!=|=|>|<)(.*)$/;
  const $ = id => document.getElementById(id);
  const settings = JSON.parse($("dashboard-settings").textContent);
  const view = {
    data: JSON.parse($("runs-data").textContent),
    sortKey: null, sortDir: 1,
    selected: new Map(),  // run_dir -> palette index, kept while the run stays selected
    updated: new Date(),
  };

  function el(tag, attrs, ...children) {
    const node = document.createElement(tag);
    setAttributes(node, attrs);
    for (const child of children) node.append(child instanceof Node ? child : String(child));
    return node;
  }

  function svg(tag, attrs) {
    const node = document.createElementNS(SVG_NS, tag);
    setAttributes(node, attrs);
    return node;
  }

  function setAttributes(node, attrs) {
    for (const [key, value] of Object.entries(attrs || {})) {
      if (value !== null && value !== undefined) node.setAttribute(key, value);
    }
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

  function cellText(column, row) {
    const value = row.values[column.key];
    if (column.key === "wall_seconds" && typeof value === "number") {
      return formatDuration(value) + (row.values.state === "running" ? " so far" : "");
    }
    return formatValue(value);
  }

  function sortValue(column, row) {
    const value = row.values[column.key];
    if (value === null || value === undefined) return null;
    if (column.numeric) return typeof value === "number" && isFinite(value) ? value : null;
    return cellText(column, row);
  }

  function sortedRows(rows) {
    const column = view.data.columns.find(c => c.key === view.sortKey);
    const indexed = rows.map((row, index) => [row, index]);
    if (!column) return rows;
    indexed.sort(([a, ia], [b, ib]) => {
      const va = sortValue(column, a), vb = sortValue(column, b);
      if (va === null || vb === null) return va === vb ? ia - ib : (va === null ? 1 : -1);
      const order = column.numeric ? va - vb
        : String(va).localeCompare(String(vb), undefined, {numeric: true});
      return order * view.sortDir || ia - ib;
    });
    return indexed.map(([row]) => row);
  }

  function lookup(row, name) {
    const wanted = name.trim().toLowerCase();
    const column = view.data.columns.find(
      c => c.name.toLowerCase() === wanted || c.title.toLowerCase() === wanted);
    if (column) return {found: true, value: row.values[column.key]};
    const key = Object.keys(row.config).find(k => k.toLowerCase() === wanted);
    return key === undefined ? {found: false} : {found: true, value: row.config[key]};
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
    const terms = $("filter").value.trim().split(/\s+/).filter(Boolean);
    return sortedRows(view.data.rows.filter(row => matches(row, terms)));
  }

  function colour(runDir) {
    return PALETTE[view.selected.get(runDir) % PALETTE.length];
  }

  function setSelected(rows, on) {
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
    render();
  }

  function sortBy(key) {
    view.sortDir = view.sortKey === key ? -view.sortDir : 1;
    view.sortKey = key;
    renderTable();
  }

  function headerTip(column) {
    const parts = [column.group === "config" ? `config key ${column.title}` : column.name];
    if (column.lower_is_better === true) parts.push("lower is better");
    if (column.lower_is_better === false) parts.push("higher is better");
    if (column.baseline !== null && column.baseline !== undefined) {
      parts.push(`baseline ${formatNumber(column.baseline)}`);
    }
    return parts.join("; ");
  }

  function renderTable() {
    const table = $("runs");
    const columns = view.data.columns;
    const all = el("input", {type: "checkbox", id: "select-all", title: "select every shown run"});
    const head = el("tr", {}, el("th", {class: "pick"}, all));
    for (const column of columns) {
      const th = el("th", {"data-key": column.key, title: headerTip(column),
                           class: `sortable g-${column.group}${column.numeric ? " num" : ""}`},
                    column.title);
      if (view.sortKey === column.key) {
        th.classList.add(view.sortDir > 0 ? "asc" : "desc");
        th.setAttribute("aria-sort", view.sortDir > 0 ? "ascending" : "descending");
      }
      th.addEventListener("click", () => sortBy(column.key));
      head.append(th);
    }
    table.tHead.replaceChildren(head);
    const shown = visibleRows();
    all.checked = shown.length > 0 && shown.every(row => view.selected.has(row.run_dir));
    all.addEventListener("change", () => setSelected(shown, all.checked));
    table.tBodies[0].replaceChildren(...shown.map(row => renderRow(row, columns)));
    $("shown").textContent =
      `${shown.length} of ${view.data.rows.length} runs shown, ${view.selected.size} selected`;
  }

  function renderRow(row, columns) {
    const box = el("input", {type: "checkbox", "aria-label": `select ${row.values.run}`});
    box.checked = view.selected.has(row.run_dir);
    box.addEventListener("change", () => setSelected([row], box.checked));
    const tr = el("tr", {"data-run": row.run_dir}, el("td", {class: "pick"}, box));
    for (const column of columns) {
      const td = el("td", {"data-key": column.key, class: column.numeric ? "num" : null},
                    cellText(column, row));
      const context = row.contexts[column.key];
      if (column.key === "state") {
        td.classList.add(`state-${row.values.state}`);
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

  function niceTicks(low, high, count) {
    const raw = (high - low) / count;
    const magnitude = Math.pow(10, Math.floor(Math.log10(raw)));
    const step = [1, 2, 5, 10].map(f => f * magnitude).find(s => raw <= s);
    const ticks = [];
    for (let t = Math.ceil(low / step) * step; t <= high + step * 1e-9; t += step) {
      ticks.push(Number(t.toPrecision(12)));
    }
    return ticks;
  }

  function extent(values) {
    let low = Math.min(...values), high = Math.max(...values);
    if (low === high) { low -= Math.abs(low) * 0.05 || 1; high += Math.abs(high) * 0.05 || 1; }
    return [low, high];
  }

  function panel(title, runs) {
    const width = 460, height = 250, left = 52, right = 12, top = 10, bottom = 30;
    const points = runs.flatMap(row => row.curves[title]);
    const [x0, x1] = extent(points.map(p => p[0]));
    let [y0, y1] = extent(points.map(p => p[1]));
    const margin = (y1 - y0) * 0.05;
    y0 -= margin; y1 += margin;
    const sx = x => left + (x - x0) / (x1 - x0) * (width - left - right);
    const sy = y => top + (y1 - y) / (y1 - y0) * (height - top - bottom);
    const plot = svg("svg", {class: "curve", width, height, viewBox: `0 0 ${width} ${height}`,
                             role: "img", "aria-label": title});
    for (const tick of niceTicks(y0, y1, 4)) {
      plot.append(svg("line", {class: "grid", x1: left, x2: width - right, y1: sy(tick), y2: sy(tick)}));
      const label = svg("text", {x: left - 4, y: sy(tick) + 3, "text-anchor": "end"});
      label.textContent = formatNumber(tick);
      plot.append(label);
    }
    for (const tick of niceTicks(x0, x1, 5)) {
      const label = svg("text", {x: sx(tick), y: height - bottom + 13, "text-anchor": "middle"});
      label.textContent = formatNumber(tick);
      plot.append(label);
    }
    const axisLabel = svg("text", {x: width - right, y: height - 3, "text-anchor": "end"});
    axisLabel.textContent = "step";
    plot.append(axisLabel,
                svg("line", {class: "axis", x1: left, x2: left, y1: top, y2: height - bottom}),
                svg("line", {class: "axis", x1: left, x2: width - right, y1: height - bottom, y2: height - bottom}));
    for (const row of runs) {
      const d = row.curves[title].map(
        ([x, y], i) => `${i ? "L" : "M"}${sx(x).toFixed(1)} ${sy(y).toFixed(1)}`).join(" ");
      const path = svg("path", {class: "line", d, fill: "none", stroke: colour(row.run_dir),
                                "stroke-width": 1.8, "stroke-linecap": "round",
                                "stroke-linejoin": "round", "data-run": row.run_dir});
      const tip = svg("title", {});
      tip.textContent = row.values.run;
      path.append(tip);
      plot.append(path);
    }
    const legend = el("div", {class: "legend"}, ...runs.map(
      row => el("span", {}, el("i", {style: `background:${colour(row.run_dir)}`}), row.values.run)));
    return el("figure", {class: "panel", "data-panel": title}, el("figcaption", {}, title), plot, legend);
  }

  function panelOrder(title) {
    return title.startsWith("Pretraining: training") ? 0 : title.startsWith("Pretraining") ? 1 : 2;
  }

  function selectedRows() {
    return view.data.rows.filter(row => view.selected.has(row.run_dir));
  }

  function renderCurves() {
    const picked = selectedRows();
    const titles = [...new Set(picked.flatMap(row => Object.keys(row.curves)))];
    titles.sort((a, b) => panelOrder(a) - panelOrder(b) || a.localeCompare(b));
    const box = $("curves");
    if (!picked.length) {
      box.replaceChildren(el("p", {class: "muted"}, "Tick runs in the table to overlay their curves."));
    } else if (!titles.length) {
      box.replaceChildren(el("p", {class: "muted"}, "The selected runs have logged no training metrics yet."));
    } else {
      box.replaceChildren(...titles.map(
        title => panel(title, picked.filter(row => (row.curves[title] || []).length))));
    }
  }

  function renderConfigDiff() {
    const picked = selectedRows();
    const box = $("config-diff");
    if (picked.length < 2) {
      box.replaceChildren(el("p", {class: "muted"}, "Select two runs or more to see how their configs differ."));
      return;
    }
    const ignored = new Set(view.data.ignored_config_keys);
    const keys = [...new Set(picked.flatMap(row => Object.keys(row.config)))].sort();
    const differing = keys.filter(key => !ignored.has(key) && new Set(
      picked.map(row => JSON.stringify(row.config[key] === undefined ? null : row.config[key]))).size > 1);
    if (!differing.length) {
      box.replaceChildren(el("p", {}, "The selected runs' configs are identical (apart from name, workdir and store)."));
      return;
    }
    const head = el("tr", {}, el("th", {}, "key"), ...picked.map(row => el("th", {}, row.values.run)));
    const body = differing.map(key => el("tr", {}, el("td", {}, key),
      ...picked.map(row => el("td", {}, formatValue(row.config[key])))));
    box.replaceChildren(el("table", {class: "config-diff"}, el("thead", {}, head), el("tbody", {}, ...body)));
  }

  function renderProblems() {
    const problems = view.data.problems || [];
    $("problems").replaceChildren(...problems.map(
      p => el("p", {class: "error"}, `could not read ${p.run_dir}: ${p.error}`)));
  }

  function render() {
    renderProblems();
    renderTable();
    renderCurves();
    renderConfigDiff();
  }

  function apply(data) {
    if (data.scaling_html !== undefined && data.scaling_html !== view.data.scaling_html) {
      $("scaling").innerHTML = data.scaling_html;  // built and escaped by the server
    }
    view.data = data;
    const present = new Set(data.rows.map(row => row.run_dir));
    for (const runDir of [...view.selected.keys()]) {
      if (!present.has(runDir)) view.selected.delete(runDir);
    }
    if (!data.columns.some(c => c.key === view.sortKey)) view.sortKey = null;
    view.updated = new Date();
    render();
  }

  function setStatus(text, failed) {
    const status = $("status");
    status.textContent = text;
    status.className = failed ? "error" : "muted";
  }

  async function poll() {
    try {
      const response = await fetch(settings.data_url, {cache: "no-store"});
      const body = await response.text();
      if (!response.ok) throw new Error(body.trim() || `HTTP ${response.status}`);
      apply(JSON.parse(body));
      setStatus(`live: updated ${view.updated.toLocaleTimeString()}, every ${settings.poll_seconds} s`);
    } catch (error) {
      setStatus(`update failed at ${new Date().toLocaleTimeString()}: ${error.message}; ` +
                `showing the runs as of ${view.updated.toLocaleTimeString()}`, true);
    } finally {
      setTimeout(poll, settings.poll_seconds * 1000);
    }
  }

  $("filter").addEventListener("input", renderTable);
  $("select-shown").addEventListener("click", () => setSelected(visibleRows(), true));
  $("select-none").addEventListener("click", () => { view.selected.clear(); render(); });
  render();
  if (settings.poll_seconds) setTimeout(poll, settings.poll_seconds * 1000);
})();
"""
