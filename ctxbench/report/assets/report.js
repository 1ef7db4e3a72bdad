// ctxbench report --html: draws the JSON block #ctxbench-data. Vanilla JS, no network. Every text that
// comes from a results file goes in through textContent (never innerHTML), so a label such as
// "<script>" shows as text and runs nothing.
"use strict";
(function () {
  const D = JSON.parse(document.getElementById("ctxbench-data").textContent);
  const $ = (tag, attrs, ...kids) => {
    const e = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (v === null || v === undefined || v === false) continue;
      if (k === "class") e.className = v;
      else if (k === "text") e.textContent = v;
      else if (k.startsWith("on")) e.addEventListener(k.slice(2), v);
      else e.setAttribute(k, v === true ? "" : String(v));
    }
    for (const kid of kids.flat()) if (kid !== null && kid !== undefined) e.append(kid instanceof Node ? kid : document.createTextNode(String(kid)));
    return e;
  };
  const lenLabel = (n) => (n % 1024 === 0 ? n / 1024 + "k" : String(n));
  const num = (x, digits) => (x === null || x === undefined ? "—" : Number(x).toPrecision(digits || 4).replace(/\.?0+$/, "").replace(/\.?0+e/, "e"));
  // The value as people read it: a fraction as a whole percent (the markdown report's rounding), else 4 significant digits.
  const show = (x, fraction) => (x === null || x === undefined ? "—" : fraction ? Math.round(100 * x) + "%" : num(x, 4));
  const pivots = D.report.filter((p) => p.kind === undefined);
  const suites = D.report.filter((p) => p.kind === "ruler_suite");

  // ---------------------------------------------------------------- header and tabs
  const top = document.getElementById("top");
  top.append($("h1", { text: D.title }),
    $("div", { class: "meta", text: "ctxbench " + D.ctxbench_version + " · " + D.files.join(" · ") + " · prompts are not stored: each trial shows what rebuilds it" }));
  const tabs = document.getElementById("tabs");
  const sections = { overview: "Overview", comparison: "Comparison", provenance: "Provenance" };
  const showTab = (name) => {
    for (const id of Object.keys(sections)) {
      document.getElementById(id).hidden = id !== name || (id === "comparison" && !D.compare);
      const b = document.getElementById("tab-" + id);
      if (b) b.classList.toggle("on", id === name);
    }
    document.getElementById("detail").hidden = name !== "overview" || !document.getElementById("detail").dataset.key;
  };
  for (const [id, text] of Object.entries(sections)) {
    if (id === "comparison" && !D.compare) continue;
    tabs.append($("button", { id: "tab-" + id, text, onclick: () => showTab(id) }));
  }

  // ---------------------------------------------------------------- overview: heatmaps
  const colour = (v, p, lo, hi) => {
    if (v === null || v === undefined) return "#f3f3f3";
    let t;
    if (p.higher_is_better) t = hi > lo ? (v - lo) / (hi - lo) : 1; // fractions: lo=0, hi=1
    else t = hi > lo ? 1 - (Math.log(v) - Math.log(lo)) / (Math.log(hi) - Math.log(lo)) : 1;
    t = Math.max(0, Math.min(1, t));
    return "hsl(" + Math.round(4 + 116 * t) + ", 62%, " + Math.round(80 - 6 * t) + "%)";
  };
  const overview = document.getElementById("overview");
  overview.append($("h2", { text: "Scores: method × length, per task and factor" }),
    $("div", { class: "legend", text: "Colour shows the score (red worst, green best; perplexity on a log scale within a table). Each cell shows its 95% interval; a framed cell is the method's effective length. Click a cell for its paired verdict and its trials." + (D.baseline ? " Paired verdicts against '" + D.baseline + "': " + D.baseline_why + "." : "") }));
  for (const n of D.notes || []) overview.append($("div", { class: "note", text: n }));
  const grid = $("div", { class: "grid" });
  overview.append(grid);
  pivots.forEach((p, i) => {
    const meta = D.pivots_meta[i] || {};
    const frac = !!meta.fraction;
    const values = p.rows.flatMap((r) => Object.values(r.cells).map((c) => c.value)).filter((v) => v !== null);
    const lo = frac ? 0 : Math.min(...values), hi = frac ? 1 : Math.max(...values);
    const table = $("table", { class: "heatmap", "data-pivot": i });
    table.append($("tr", {}, $("th", { text: "method" }), p.lengths.map((n) => $("th", { text: lenLabel(n) + (meta.trained_len === n ? " (L)" : "") })), $("th", { text: "effective length" })));
    for (const row of p.rows) {
      const tr = $("tr", {}, $("th", { class: "label", text: row.method }));
      for (const n of p.lengths) {
        const c = row.cells[String(n)];
        if (!c) { tr.append($("td", { class: "cell missing", text: "—" })); continue; }
        const key = i + "|" + row.method + "|" + n;
        const td = $("td", {
          class: "cell" + (row.effective_length === n ? " effective" : ""), "data-pivot": i, "data-label": row.method, "data-length": n,
          "data-value": c.value === null ? "" : String(c.value), "data-key": key, title: "n = " + (c.n ?? "—"),
          onclick: () => openCell(i, row.method, n, td),
        }, $("div", { class: "v", text: show(c.value, frac) }), $("div", { class: "ci", text: c.lo === null || c.lo === undefined ? "" : "[" + show(c.lo, frac) + "–" + show(c.hi, frac) + "]" }));
        td.style.background = colour(c.value, p, lo, hi);
        tr.append(td);
      }
      const eff = row.effective_length ? (row.effective_all_pass ? "≥" : "") + lenLabel(row.effective_length) : "—";
      // the interval, as the tables print it: left out where it is the length itself or unknown at both ends
      const iv = row.effective_interval;
      const ci = iv && (iv[0] || iv[1]) && !(iv[0] === row.effective_length && iv[1] === row.effective_length) ? " [" + iv.map((x) => (x ? lenLabel(x) : "—")).join("–") + "]" : "";
      tr.append($("td", { class: "eff", text: eff + ci }));
      table.append(tr);
    }
    grid.append($("div", { class: "card pivot" }, $("h3", { text: p.title }), table));
  });
  if (!pivots.length) overview.append($("div", { class: "note", text: "no aggregate rows to show" }));
  for (const s of suites) {
    const t = $("table", { class: "suite" });
    t.append($("tr", {}, $("th", { text: "method" }), s.lengths.map((n) => $("th", { text: lenLabel(n) })), $("th", { text: "wAvg inc" }), $("th", { text: "wAvg dec" }), $("th", { text: "effective (85.6)" })));
    for (const r of s.rows) {
      t.append($("tr", {}, $("th", { text: r.method }),
        s.lengths.map((n) => { const c = r.cells[String(n)]; return $("td", { text: c ? num(c.ruler_avg, 3) + " [" + num(c.lo, 3) + "–" + num(c.hi, 3) + "]" : "—" }); }),
        $("td", { text: num(r.wavg_inc, 3) }), $("td", { text: num(r.wavg_dec, 3) }),
        $("td", { text: r.effective_length ? lenLabel(r.effective_length) : "—" })));
    }
    overview.append($("div", { class: "card suite-card" }, $("h3", { text: s.title }), t, (s.notes || []).map((n) => $("div", { class: "note", text: n }))));
  }

  // ---------------------------------------------------------------- a cell: verdict and trials
  const detail = document.getElementById("detail");
  function verdictText(v, p) {
    if (!v) return "no paired verdict for this cell" + (D.baseline ? " (no paired units against '" + D.baseline + "')" : " (no baseline)");
    if (v.is_baseline) return "this is the baseline ('" + v.baseline + "') the other methods are paired against";
    if (v.p_holm === null || v.p_holm === undefined) return "no paired test against '" + v.baseline + "'";
    const good = p.higher_is_better ? v.delta > 0 : v.delta < 0;
    const sep = v.p_holm < 0.05;
    const word = sep ? (good ? "better than" : "worse than") : "not separated from";
    const unit = p.metric === "ppl" ? " nats/token" : "";
    return word + " '" + v.baseline + "': Δ = " + num(v.delta, 3) + unit + " [" + num(v.lo, 3) + ", " + num(v.hi, 3) + "], p = " + num(v.p, 3) + ", Holm-adjusted p = " + num(v.p_holm, 3) + " (" + (v.n ?? "?") + " paired units)";
  }
  function openCell(i, label, n, td) {
    document.querySelectorAll("td.cell.sel").forEach((e) => e.classList.remove("sel"));
    td.classList.add("sel");
    const p = pivots[i], meta = D.pivots_meta[i] || {};
    const key = i + "|" + label + "|" + n;
    const c = p.rows.find((r) => r.method === label).cells[String(n)];
    const v = D.verdicts[key];
    const s = D.samples[key] || { trials: [] };
    detail.textContent = "";
    detail.dataset.key = key;
    detail.hidden = false;
    const cls = v && !v.is_baseline && v.p_holm !== null && v.p_holm < 0.05 ? ((p.higher_is_better ? v.delta > 0 : v.delta < 0) ? "better" : "worse") : "same";
    detail.append($("h2", { text: p.title + " · " + label + " · " + lenLabel(n) }),
      $("div", { class: "cellvalue", text: "value " + show(c.value, meta.fraction) + (c.lo !== null && c.lo !== undefined ? " [" + show(c.lo, meta.fraction) + "–" + show(c.hi, meta.fraction) + "]" : "") + ", n = " + (c.n ?? "—") }),
      $("div", { class: "verdict " + cls, id: "verdict", text: verdictText(v, p) }));
    if (s.trials.length) drawTrials(s.trials, detail);
    if (s.docs) {
      const t = $("table", { class: "docs" }, $("tr", {}, ["document", "metric", "value", "tokens"].map((h) => $("th", { text: h }))));
      for (const d of s.docs) t.append($("tr", {}, $("td", { text: d.doc }), $("td", { text: d.metric }), $("td", { text: num(d.value, 5) }), $("td", { text: d.tokens ?? "" })));
      detail.append($("h3", { text: "Per document" }), t);
    }
    if (s.curve) detail.append($("h3", { text: "NLL by position" }), curve(s.curve));
    detail.scrollIntoView({ block: "start" });
  }
  function drawTrials(trials, into) {
    const depths = [...new Set(trials.map((t) => (t.depth === null || t.depth === undefined ? "" : String(t.depth))))].sort();
    const wrongOnly = $("input", { type: "checkbox", id: "wrong-only" });
    const depthSel = $("select", { id: "depth-filter" }, $("option", { value: "*", text: "all depths" }), depths.filter((d) => d !== "").map((d) => $("option", { value: d, text: "depth " + d })));
    const count = $("span", { id: "trial-count" });
    const table = $("table", { id: "trials" });
    const head = $("tr", {}, ["trial", "depth / needle at", "expected (found?)", "model's answer", "score", "row id", ""].map((h) => $("th", { text: h })));
    const redraw = () => {
      table.textContent = "";
      table.append(head);
      let shown = 0;
      for (const t of trials) {
        const wrong = t.score === null || t.score < 1;
        if (wrongOnly.checked && !wrong) continue;
        if (depthSel.value !== "*" && String(t.depth) !== depthSel.value) continue;
        shown++;
        const expected = $("td", { class: "expected" }, t.expected.map((e, k) => $("div", { class: t.found ? (t.found[k] ? "found" : "notfound") : "", text: e + (t.found ? (t.found[k] ? " ✓" : " ✗") : "") })));
        const where = [t.depth === null || t.depth === undefined ? "" : "depth " + t.depth, t.needle_pos ? "token " + [].concat(t.needle_pos).join(", ") : ""].filter((x) => x).join(" · ");
        const regen = $("div", { class: "regen mono", hidden: true },
          "task " + t.task + (t.variant ? " · variant " + t.variant : "") + " · length " + t.length + (t.depth !== null && t.depth !== undefined ? " · depth " + t.depth : "") + " · seed " + t.seed + " · trial " + t.trial + " · data " + t.data_digest + " (" + t.dataset + ")",
          t.rebuild && t.id ? $("code", { class: "cmd", text: "ctxbench show-prompt " + t.id }) : $("div", { text: "this task does not rebuild prompts (no show-prompt)" }));
        const btn = $("button", { class: "show-prompt", text: "show prompt", onclick: () => { regen.hidden = !regen.hidden; } });
        table.append($("tr", { class: "trial " + (wrong ? "wrong" : "right"), "data-trial": t.trial },
          $("td", { text: t.trial }), $("td", { text: where }), expected,
          $("td", { class: "answer", text: t.answer }),
          $("td", { class: "score", text: num(t.score, 3) + (t.scorer ? " (" + t.scorer + ")" : "") }),
          $("td", { class: "mono row-id", text: t.id || "" }), $("td", {}, btn, regen)));
      }
      count.textContent = shown + " of " + trials.length + " trials";
    };
    wrongOnly.addEventListener("change", redraw);
    depthSel.addEventListener("change", redraw);
    into.append($("h3", { text: "Trials" }), $("div", { class: "filters" }, $("label", {}, wrongOnly, " wrong only"), depthSel, count), table);
    redraw();
  }
  function curve(points) {
    const W = 520, H = 180, pad = 30;
    const xs = points.map((p) => (p[0] + p[1]) / 2), ys = points.map((p) => p[2]).filter((y) => y !== null);
    const x0 = Math.min(...xs), x1 = Math.max(...xs), y0 = Math.min(...ys), y1 = Math.max(...ys);
    const X = (x) => pad + (x1 > x0 ? ((x - x0) / (x1 - x0)) * (W - 2 * pad) : 0);
    const Y = (y) => H - pad - (y1 > y0 ? ((y - y0) / (y1 - y0)) * (H - 2 * pad) : 0);
    const NS = "http://www.w3.org/2000/svg";
    const svg = document.createElementNS(NS, "svg");
    svg.setAttribute("class", "curve"); svg.setAttribute("width", W); svg.setAttribute("height", H);
    const line = document.createElementNS(NS, "polyline");
    line.setAttribute("fill", "none"); line.setAttribute("stroke", "#0b57d0"); line.setAttribute("stroke-width", "1.5");
    line.setAttribute("points", points.filter((p) => p[2] !== null).map((p) => X((p[0] + p[1]) / 2) + "," + Y(p[2])).join(" "));
    svg.append(line);
    const label = (x, y, text) => { const t = document.createElementNS(NS, "text"); t.setAttribute("x", x); t.setAttribute("y", y); t.setAttribute("font-size", "10"); t.textContent = text; svg.append(t); };
    label(2, pad - 6, "NLL " + num(y1, 3)); label(2, H - pad + 12, num(y0, 3)); label(W - pad - 40, H - 6, "position " + Math.round(x1));
    return svg;
  }

  // ---------------------------------------------------------------- comparison of two files
  if (D.compare) {
    const C = D.compare, sec = document.getElementById("comparison");
    const gate = $("div", { id: "gate" });
    gate.append($("h2", { text: "compare " + C.base + " → " + C.new }), $("div", { class: "legend", text: "The regression gate's verdict per cell (ctxbench compare), the cells that changed first." + (C.parity ? " The files ran on different backends, so their cells do not pair here: see the parity above." : "") }));
    const t = $("table", { id: "changes" }, $("tr", {}, ["task", "method", "factor", "length", "depth", "metric", "base", "new", "change", "status", "why"].map((h) => $("th", { text: h }))));
    for (const c of C.changes) {
      const k = c.key;
      t.append($("tr", { class: "change" }, $("td", { text: k.task + (k.variant ? " " + k.variant : "") }), $("td", { text: k.label }), $("td", { text: k.factor || "any" }),
        $("td", { text: k.length }), $("td", { text: k.depth || "—" }), $("td", { text: k.metric }), $("td", { text: c.base_text }), $("td", { text: c.new_text }),
        $("td", { text: c.change }), $("td", { class: "status-" + c.status, text: c.status }), $("td", { text: c.reason })));
    }
    gate.append(t);
    for (const n of C.notes || []) gate.append($("div", { class: "note", text: n }));
    if (!C.parity) sec.append(gate);
    if (C.parity) {
      sec.append($("h2", { text: "Parity across backends (compare --across-backends)" }), $("div", { class: "legend", text: C.parity.summary }));
      const pt = $("table", { id: "parity" }, $("tr", {}, ["task", "method", "factor", "length", "depth", "metric", "base", "new", "verdict", "detail"].map((h) => $("th", { text: h }))));
      for (const p of C.parity.pairs) {
        pt.append($("tr", {}, $("td", { text: p.task }), $("td", { text: p.label }), $("td", { text: p.factor || "-" }), $("td", { text: p.length }), $("td", { text: p.depth || "-" }),
          $("td", { text: p.metric }), $("td", { text: num(p.base, 4) }), $("td", { text: num(p.new, 4) }), $("td", { class: "status-" + p.status, text: p.status }), $("td", { text: p.detail })));
      }
      sec.append(pt);
      for (const n of C.parity.notes || []) sec.append($("div", { class: "note", text: n }));
      sec.append($("details", {}, $("summary", { text: "ctxbench compare (without --across-backends): " + C.changes.length + " cells" }), gate));
    }
    const differ = $("input", { type: "checkbox", id: "differ-only", checked: true });
    const st = $("table", { id: "side-by-side" });
    const redraw = () => {
      st.textContent = "";
      st.append($("tr", {}, ["task", "method", "length", "depth", "trial", "answer in " + C.base, "score", "answer in " + C.new, "score"].map((h) => $("th", { text: h }))));
      for (const r of C.trials) {
        if (differ.checked && !r.differ) continue;
        st.append($("tr", { class: "pair" + (r.differ ? " differ" : "") }, $("td", { text: r.task + (r.variant ? " " + r.variant : "") }), $("td", { text: r.label + (r.factor ? " ×" + r.factor : "") }),
          $("td", { text: r.length }), $("td", { text: r.depth || "—" }), $("td", { text: r.trial }), $("td", { class: "answer base-answer", text: r.base_answer }),
          $("td", { text: num(r.base_score, 3) }), $("td", { class: "answer new-answer", text: r.new_answer }), $("td", { text: num(r.new_score, 3) })));
      }
    };
    differ.addEventListener("change", redraw);
    sec.append($("h2", { text: "Trials side by side" }), $("div", { class: "filters" }, $("label", {}, differ, " answers that differ only (" + C.trials.filter((r) => r.differ).length + " of " + C.trials.length + ")")), st);
    redraw();
  }

  // ---------------------------------------------------------------- provenance
  const prov = document.getElementById("provenance");
  prov.append($("h2", { text: "Provenance: what ran, on what, and how to run it again" }));
  const fields = [["model", "model"], ["model digest", "model_digest"], ["dataset", "dataset"], ["data digest", "data_digest"], ["ctxbench", "ctxbench_version"],
    ["torch", "torch_version"], ["transformers", "transformers_version"], ["backend (engine)", "backend"], ["dtype", "dtype"], ["device", "device"],
    ["attention kernel", "attention_kernel"], ["method parameters", "method_params"], ["options", "options"], ["seed", "seed"], ["time", "time"], ["rows", "rows"]];
  const list = $("div", { id: "provenance-table", class: "grid" });
  for (const r of D.provenance) {
    const t = $("table", { class: "fields" });
    for (const [name, k] of fields) {
      const v = Array.isArray(r[k]) ? r[k].filter((x) => x !== "").join(k === "time" ? " → " : ", ") : r[k];
      if (v !== "" && v !== null && v !== undefined) t.append($("tr", {}, $("th", { text: name }), $("td", { class: "mono", text: v })));
    }
    list.append($("div", { class: "card run" }, $("h3", { text: r.task + " · " + r.label + " · run " + r.run_id }), $("div", { class: "legend mono", text: r.file }), t,
      $("div", { class: "legend", text: "command that reruns it:" }), r.command ? $("code", { class: "cmd", text: r.command }) : $("div", { text: "— (the task is not installed)" })));
  }
  prov.append(list);
  showTab(D.compare ? "comparison" : "overview");
})();
