// sapo-edge projector page: polls /class.json and draws the class. Every text from members
// goes in with textContent, never parsed as HTML: names are whatever a member chose to send.
"use strict";

const TOKEN = new URLSearchParams(location.search).get("token") || "";
const QUERY = TOKEN ? "?token=" + encodeURIComponent(TOKEN) : "";
const SVG = "http://www.w3.org/2000/svg";
const COLOURS = ["#1a5fb4", "#c01c28", "#26a269", "#e66100", "#813d9c", "#986a44",
                 "#0b7285", "#a51d2d", "#5e5c64", "#b5835a", "#2ec27e", "#d4a017"];
let shownCode = null;
let qrTries = 0;

function el(tag, text, cls) {
  const e = document.createElement(tag);
  if (text !== undefined && text !== null) e.textContent = String(text);
  if (cls) e.className = cls;
  return e;
}

function svg(tag, attrs) {
  const e = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, String(v));
  return e;
}

function cut(text, n) {  // keeps a name's distinguishing end: "swift-badger-6aea" -> "swift…6aea"
  if (text.length <= n) return text;
  const at = Math.max(text.lastIndexOf("-"), text.lastIndexOf("#"));
  const tail = at > 0 ? text.slice(at + 1) : "";
  if (tail && tail.length <= Math.min(6, n - 2)) {  // an id's end, not a long word
    return text.slice(0, n - tail.length - 1) + "…" + tail;
  }
  return text.slice(0, n - 1) + "…";
}

function fixed(x) { return x === null || x === undefined ? "-" : Number(x).toFixed(2); }

function spark(values) {
  const s = svg("svg", { width: 90, height: 20, viewBox: "0 0 90 20" });
  const v = values.slice(-12);
  if (v.length > 1) {
    const top = Math.max(1, ...v);
    const pts = v.map((y, i) => `${(i * 88) / (v.length - 1) + 1},${19 - (y / top) * 18}`);
    s.appendChild(svg("polyline", { points: pts.join(" "), fill: "none", stroke: "#1a5fb4",
                                    "stroke-width": 2 }));
  }
  return s;
}

function renderJoin(code) {  // null: not this browser's to see; "": no code admits anyone
  const box = document.getElementById("join");
  document.getElementById("join-hidden").hidden = code !== null;
  document.getElementById("join-none").hidden = code !== "";
  box.hidden = !code;
  if (!code) shownCode = null;
  if (code && code !== shownCode) {
    document.getElementById("code").textContent = code;
    const qr = document.getElementById("qr");
    qr.hidden = false;
    qrTries += 1;  // a new URL each try: a refused or broken fetch is not cached
    qr.src = "/qr.svg" + QUERY + (QUERY ? "&" : "?") + "c=" + encodeURIComponent(code) +
      "&n=" + qrTries;
    shownCode = code;
  }
}

// A QR image the page could not fetch (the host busy, a connection refused) is fetched again
// on the next poll, rather than left broken while the code is still good.
document.getElementById("qr").addEventListener("error", () => { shownCode = null; });

function ago(s) {
  s = Math.max(0, Math.floor(s));
  return s < 90 ? s + "s" : s < 5400 ? Math.floor(s / 60) + "m" : Math.floor(s / 3600) + "h";
}

function doing(m, now) {  // its last word; a run's end stands, else marked after a minute
  const state = m.state || "";
  const final = m.final === true; // its last word ends its run (done, left): shown however old
  if (!state || final || now - m.last_seen <= 60) return state;
  return "asleep? not heard for " + ago(now - m.last_seen) + " (was: " + state + ")";
}

function marks(m) {  // "(host)" and "(solo baseline)" come from the row's class (class.css)
  return m.hinted ? " (hint)" : "";
}

function renderMembers(members, now) {
  const rows = members.map((m) => {
    const tr = el("tr");
    if (m.is_host) tr.className = "host";
    tr.addEventListener("click", () => showTaught(m));
    if (m.role === "baseline") tr.className = "baseline";
    tr.append(el("td", m.name + marks(m)), el("td", doing(m, now)), el("td", m.backend),
              el("td", m.model.split("/").pop()),
              el("td", m.rounds, "num"), el("td", fixed(m.recent_reward), "num"));
    const t = el("td");
    t.appendChild(spark(m.rewards));
    tr.append(t, el("td", m.tagged === null ? "-" : Math.round(m.tagged * 100) + "%", "num"),
              el("td", fixed(m.strict), "num"), el("td", m.shared, "num"), el("td", m.used_by_others, "num"),
              el("td", m.aha, "num"),
              el("td", m.received_here === null ? "-" : m.received_here, "num"));
    return tr;
  });
  if (!rows.length) {
    const tr = el("tr");
    const td = el("td", "nobody yet: students run sapo-edge join CODE");
    td.colSpan = 13;
    tr.appendChild(td);
    rows.push(tr);
  }
  document.querySelector("#members tbody").replaceChildren(...rows);
}

function renderChart(data) {
  const series = data.members.map((m, i) => ({ name: m.name, pts: data.curves[m.node_id] || [],
    colour: COLOURS[i % COLOURS.length], width: 1.5, dash: m.role === "baseline" ? "4 3" : "" }));
  if (data.swarm_mean.length) series.push({ name: "class mean", pts: data.swarm_mean,
    colour: "#000", width: 3.5, dash: "" });
  if (data.baseline.length) series.push({ name: "solo baseline", pts: data.baseline,
    colour: "#777", width: 3, dash: "8 4" });
  drawChart(document.getElementById("chart"), document.getElementById("legend"), series,
            (v) => v.toFixed(2));
}

// The lesson's live curve: the share of answers inside the tags per round, as the class's
// means (members without the hint, with it, the solo baselines: the host's `tags`, drawn from
// the rows it vouches for); the hint's names its member when one alone has it.
function renderTags(data) {
  const tags = data.tags || {};
  const hinted = data.members.filter((m) => m.hinted && m.vouched && m.role !== "baseline");
  const hint = hinted.length === 1 ? cut(hinted[0].name, 24) + " (hint)" : "with the hint";
  const series = [
    { key: "class", name: "class", colour: "#000", width: 3.5, dash: "" },
    { key: "hint", name: hint, colour: "#e66100", width: 3.5, dash: "" },
    { key: "baseline", name: "solo baseline", colour: "#777", width: 3, dash: "8 4" },
  ].filter((s) => (tags[s.key] || []).length)
    .map((s) => ({ ...s, pts: tags[s.key].map((p) => [p[0], 100 * p[1]]) }));
  document.getElementById("tags-box").hidden = !series.length;
  if (series.length) {
    drawChart(document.getElementById("tags-chart"), document.getElementById("tags-legend"),
              series, (v) => v.toFixed(0) + "%", 100);
  }
}

function drawChart(chart, legend, series, label, top) {
  const W = chart.viewBox.baseVal.width || 640, H = 300, L = 40, R = 10, T = 10, B = 30;
  const all = series.flatMap((s) => s.pts);
  const maxX = Math.max(2, ...all.map((p) => p[0]));
  const maxY = top || Math.max(1, ...all.map((p) => p[1]));
  const x = (r) => L + ((r - 1) / (maxX - 1)) * (W - L - R);
  const y = (v) => H - B - (v / maxY) * (H - T - B);
  const parts = [];
  for (let i = 0; i <= 4; i++) {
    const v = (maxY * i) / 4;
    parts.push(svg("line", { x1: L, x2: W - R, y1: y(v), y2: y(v), class: "grid" }));
    const t = svg("text", { x: 4, y: y(v) + 4 });
    t.textContent = label(v);
    parts.push(t);
  }
  const step = Math.max(1, Math.ceil(maxX / 10));
  for (let r = 1; r <= maxX; r += step) {
    const t = svg("text", { x: x(r) - 4, y: H - B + 16 });
    t.textContent = String(r);
    parts.push(t);
  }
  const roundLabel = svg("text", { x: W / 2 - 15, y: H - 2 });
  roundLabel.textContent = "round";
  parts.push(roundLabel, svg("line", { x1: L, x2: L, y1: T, y2: H - B, class: "axis" }),
             svg("line", { x1: L, x2: W - R, y1: H - B, y2: H - B, class: "axis" }));
  for (const s of series) {
    if (!s.pts.length) continue;
    const pts = s.pts.map((p) => `${x(p[0]).toFixed(1)},${y(p[1]).toFixed(1)}`).join(" ");
    const line = svg("polyline", { points: pts, fill: "none", stroke: s.colour,
                                   "stroke-width": s.width });
    if (s.dash) line.setAttribute("stroke-dasharray", s.dash);
    parts.push(line);
    if (s.pts.length <= 30) {  // a marker on every point while there are few (one round: a dot)
      for (const p of s.pts) {
        parts.push(svg("circle", { cx: x(p[0]).toFixed(1), cy: y(p[1]).toFixed(1),
                                   r: s.width > 2 ? 5 : 3.5, fill: s.colour }));
      }
    }
  }
  chart.replaceChildren(...parts);
  legend.replaceChildren(...series.map((s) => {
    const span = el("span");
    const swatch = el("i");
    swatch.style.background = s.colour;
    span.append(swatch, document.createTextNode(s.name));
    return span;
  }));
}

function renderMatrix(data) {
  // the board's most active members (a bounded table); joined, no round yet: nothing to show
  const inMatrix = new Set(data.matrix_ids || []);
  const shown = data.members.filter((m) => m.rounds > 0 && inMatrix.has(m.node_id));
  const names = shown.map((m) => m.name);
  const ids = shown.map((m) => m.node_id);
  const byId = Object.fromEntries(data.members.map((m) => [m.node_id, m]));
  const head = el("tr");
  head.appendChild(el("th", "from \\ to"));
  for (const n of names) head.appendChild(el("th", cut(n, 14), "learner"));
  const rows = [head];
  ids.forEach((a, i) => {
    const tr = el("tr");
    tr.appendChild(el("th", cut(names[i], 20)));
    ids.forEach((b) => {
      const cell = a === b ? null : ((data.matrix[a] || {})[b] || [0, 0]);
      const first = cell !== null && byId[b].taught_by === a;
      const td = el("td", cell === null ? "·" : cell[1] + (first ? "*" : ""), "num");
      if (first) td.classList.add("first");
      if (cell !== null && cell[1] === 0) td.classList.add("zero");
      tr.appendChild(td);
    });
    rows.push(tr);
  });
  document.getElementById("matrix").replaceChildren(...rows);
  document.getElementById("first-tagged").replaceChildren(
    ...(data.first_tagged || []).map((line) => el("li", line)));
}

async function showTaught(m) {  // what a member teaches: plain text only (textContent)
  const box = document.getElementById("taught");
  document.getElementById("taught-title").textContent = "What " + m.name + " teaches";
  const list = document.getElementById("taught-groups");
  list.replaceChildren(el("p", "loading…", "note"));
  box.hidden = false;
  try {
    const r = await fetch("/taught.json?id=" + encodeURIComponent(m.node_id) +
                          QUERY.replace("?", "&"), { cache: "no-store" });
    if (!r.ok) throw new Error(String(r.status));
    const got = await r.json();
    const items = got.groups.map((g) => {
      const div = el("div", null, "group");
      div.append(el("p", "round " + (g.round + 1) + " · " + g.question, "question"));
      for (const [text, reward] of g.answers) {
        div.append(el("p", fixed(reward) + "  " + text, reward > 0 ? "answer rewarded" : "answer"));
      }
      return div;
    });
    list.replaceChildren(...(items.length ? items : [el("p",
      "none yet: the teacher's laptop has trained on no group of theirs", "note")]));
  } catch (e) {
    list.replaceChildren(el("p", "could not load it (" + e.message + ")", "note"));
  }
}

let linkedOpen = false;  // /#taught=NODE_ID opens that member's (a link the teacher can share)

function render(data) {
  document.getElementById("task").textContent = data.task || "";
  document.getElementById("lesson").textContent = data.lesson || "";
  const n = data.members.length;
  document.getElementById("status").textContent =
    `${n} member${n === 1 ? "" : "s"} · updated ${new Date(data.now * 1000).toLocaleTimeString()}`;
  renderJoin(data.code);
  renderMembers(data.members, data.now);
  renderChart(data);
  renderTags(data);
  renderMatrix(data);
  if (!linkedOpen && location.hash.startsWith("#taught=")) {
    linkedOpen = true;
    const m = data.members.find((x) => x.node_id === location.hash.slice(8));
    if (m) showTaught(m);
  }
}

async function tick() {
  try {
    const r = await fetch("/class.json" + QUERY, { cache: "no-store" });
    if (!r.ok) throw new Error(String(r.status));
    render(await r.json());
  } catch (e) {
    document.getElementById("status").textContent = "waiting for the host… (" + e.message + ")";
  }
  setTimeout(tick, 2000);
}

document.getElementById("taught-close").addEventListener("click", () => {
  document.getElementById("taught").hidden = true;
});
tick();
