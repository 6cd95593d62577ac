// PAVE Dock admin dashboard: polls /v1/admin/overview, the jobs list, the review queue and the
// charts, and calls the dock's own API for every action. It holds no key: the browser's session
// cookie (httpOnly, set by the sign-in page) authenticates each request, and every action sends
// the session's CSRF token (the page's <meta name="csrf-token">) as X-CSRF-Token. When the
// session ends, the page goes to the sign-in form, which comes back here. All data is written
// with textContent.
"use strict";

const SIGN_IN = "/signin?next=%2Fadmin";
const SAFE_METHODS = new Set(["GET", "HEAD"]);
const POLL_MS = 4000;
const CHART_POLL_MS = 15000;
const JOB_STATES = ["queued", "running", "failed", "succeeded", "cancelled"];
const SVG_NS = "http://www.w3.org/2000/svg";

const state = {
  signedIn: true,
  jobState: "",
  offset: 0,
  limit: 20,
  openLogs: new Set(),
  rejecting: new Set(),
  minutes: 60,
  overview: null,
  reviewItems: [],
  timers: [],
};

const $ = (id) => document.getElementById(id);

class ApiError extends Error {
  constructor(status, message) {
    super(message);
    this.status = status;
  }
}

function csrfToken() {
  const meta = document.querySelector('meta[name="csrf-token"]');
  return meta ? meta.content : "";
}

async function api(path, options = {}) {
  const method = options.method || "GET";
  const headers = { Accept: "application/json" };
  if (!SAFE_METHODS.has(method)) headers["X-CSRF-Token"] = csrfToken();
  if (options.body !== undefined) headers["Content-Type"] = "application/json";
  const response = await fetch(path, {
    method,
    headers,
    body: options.body === undefined ? undefined : JSON.stringify(options.body),
    cache: "no-store",
    credentials: "same-origin",
  });
  const isJson = (response.headers.get("content-type") || "").includes("application/json");
  const body = isJson ? await response.json() : null;
  if (!response.ok) {
    const message = body && body.error ? body.error.message : response.statusText;
    if (response.status === 401) sessionEnded();
    throw new ApiError(response.status, message);
  }
  return body;
}

// ---- small DOM helpers --------------------------------------------------------------------

function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [name, value] of Object.entries(attrs)) {
    if (value === undefined || value === null || value === false) continue;
    if (name === "class") node.className = value;
    else if (name === "text") node.textContent = value;
    else if (name.startsWith("on")) node.addEventListener(name.slice(2), value);
    else node.setAttribute(name, value === true ? "" : String(value));
  }
  for (const child of children.flat()) {
    if (child === null || child === undefined || child === false) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

function svgEl(tag, attrs = {}, text) {
  const node = document.createElementNS(SVG_NS, tag);
  for (const [name, value] of Object.entries(attrs)) node.setAttribute(name, String(value));
  if (text !== undefined) node.textContent = text;
  return node;
}

function fillBody(table, rows, emptyText, columns) {
  const body = table.tBodies[0];
  body.replaceChildren(...(rows.length ? rows : [el("tr", {}, el("td", { class: "empty", colspan: columns, text: emptyText }))]));
}

function badge(value) {
  return el("span", { class: `badge ${value}`, text: value });
}

function progressBar(progress, jobState) {
  const pct = Math.round(Math.max(0, Math.min(1, progress)) * 100);
  const fill = el("span");
  fill.style.width = `${pct}%`;
  return el(
    "div",
    { class: "progress" },
    el("div", { class: `bar ${jobState || ""}`, role: "progressbar", "aria-valuemin": 0, "aria-valuemax": 100, "aria-valuenow": pct }, fill),
    el("span", { class: "pct", text: `${pct}%` }),
  );
}

function ago(iso) {
  if (!iso) return "";
  const seconds = Math.max(0, (Date.now() - Date.parse(iso)) / 1000);
  if (seconds < 60) return `${Math.round(seconds)} s ago`;
  if (seconds < 3600) return `${Math.round(seconds / 60)} min ago`;
  if (seconds < 86400) return `${(seconds / 3600).toFixed(1)} h ago`;
  return `${Math.round(seconds / 86400)} d ago`;
}

function duration(seconds) {
  if (seconds === null || seconds === undefined) return "—";
  if (seconds < 60) return `${Math.round(seconds)} s`;
  if (seconds < 3600) return `${Math.round(seconds / 60)} min`;
  return `${(seconds / 3600).toFixed(1)} h`;
}

function timeCell(iso) {
  return el("td", { class: "num", title: iso || "", text: ago(iso) });
}

function notice(text, ok = true) {
  const node = $("notice");
  node.textContent = text;
  node.className = ok ? "ok" : "bad";
}

// ---- the session ends ---------------------------------------------------------------------

// Signed out elsewhere, expired, or its key revoked: to the sign-in form, which returns here.
function sessionEnded() {
  if (!state.signedIn) return;
  state.signedIn = false;
  stopPolling();
  window.location.assign(SIGN_IN);
}

// ---- polling ------------------------------------------------------------------------------

function stopPolling() {
  for (const timer of state.timers) clearTimeout(timer);
  state.timers = [];
}

function every(ms, fn) {
  const tick = async () => {
    if (!state.signedIn) return;
    if (!document.hidden) {
      try {
        await fn();
      } catch (error) {
        if (error.status !== 401) notice(`Could not refresh: ${error.message}`, false);
      }
    }
    if (state.signedIn) state.timers.push(setTimeout(tick, ms));
  };
  tick();
}

function startPolling() {
  stopPolling();
  every(POLL_MS, refresh);
  every(CHART_POLL_MS, refreshCharts);
}

async function refresh() {
  const params = new URLSearchParams({ offset: state.offset, limit: state.limit });
  if (state.jobState) params.set("state", state.jobState);
  const [overview, jobs, review] = await Promise.all([
    api("/v1/admin/overview"),
    api(`/v1/admin/jobs?${params}`),
    api("/v1/learnwares?status=awaiting_review&limit=50"),
  ]);
  state.overview = overview;
  renderCards(overview);
  renderQueues(overview);
  renderWorkers(overview.workers);
  renderTabs(overview.job_counts);
  renderJobs(jobs);
  state.reviewItems = review.items;
  for (const id of state.rejecting) if (!review.items.some((lw) => lw.id === id)) state.rejecting.delete(id);
  // While a rejection reason is being typed the review table is left alone (a re-render would
  // replace the input under the admin's cursor).
  if (!state.rejecting.size) renderReview();
  renderIndexes(overview.indexes);
  const flower = $("flower-link");
  flower.hidden = !overview.flower_url;
  if (overview.flower_url) flower.href = overview.flower_url;
  $("updated").textContent = `Updated ${new Date(overview.generated_at).toLocaleTimeString()}`;
}

// ---- sections -----------------------------------------------------------------------------

function renderCards(overview) {
  const counts = overview.job_counts;
  const online = overview.workers.workers.filter((w) => w.status !== "stale").length;
  const indexed = overview.indexes.reduce((sum, i) => sum + (i.indexed || 0), 0);
  const cards = [
    ["Queued", counts.queued, "queued"],
    ["Running", counts.running, "running"],
    ["Failed", counts.failed, "failed"],
    ["Succeeded", counts.succeeded, "succeeded"],
    ["Workers online", online, ""],
    ["Awaiting review", overview.awaiting_review, ""],
    ["Indexed learnwares", indexed, ""],
  ];
  $("cards").replaceChildren(
    ...cards.map(([label, value, kind]) =>
      el("div", { class: `stat ${kind}`, "data-stat": label }, el("div", { class: "label", text: label }), el("div", { class: "value", text: value })),
    ),
  );
}

function renderQueues(overview) {
  const error = $("broker-error");
  error.hidden = !overview.broker_error;
  error.textContent = overview.broker_error ? `Broker unreachable: ${overview.broker_error}` : "";
  const rows = overview.queues.map((q) =>
    el(
      "tr",
      { "data-queue": q.name },
      el("td", {}, el("strong", { text: q.name })),
      el("td", { class: "num", text: q.broker_messages === null ? "?" : q.broker_messages }),
      el("td", { class: "num", text: q.queued_jobs }),
      el("td", { class: "num", text: q.running_jobs }),
      el("td", { class: "num", text: duration(q.oldest_queued_s) }),
    ),
  );
  fillBody($("queues"), rows, "No queues", 5);
}

function renderWorkers(report) {
  $("workers-asked").textContent = report.asked_at ? `asked ${ago(report.asked_at)}` : "asking the workers…";
  const error = $("workers-error");
  error.hidden = !report.error;
  error.textContent = report.error ? `Workers could not be asked: ${report.error}` : "";
  const rows = report.workers.map((w) =>
    el(
      "tr",
      { "data-worker": w.name },
      el("td", { class: "mono", text: w.name }),
      el("td", {}, badge(w.status)),
      el(
        "td",
        {},
        w.jobs.length
          ? w.jobs.map((j) =>
              el(
                "div",
                { class: "worker-job", title: j.message },
                el("span", { class: "mono", text: `#${j.id}` }),
                el("span", { class: "sub", text: j.stage }),
                progressBar(j.progress, j.stale ? "failed" : ""),
              ),
            )
          : el("span", { class: "sub", text: "idle" }),
      ),
      timeCell(w.last_seen),
    ),
  );
  fillBody($("workers"), rows, "No worker answered and none is running a job", 4);
}

function renderTabs(counts) {
  const total = Object.values(counts).reduce((a, b) => a + b, 0);
  const tabs = [["", "All", total], ...JOB_STATES.map((s) => [s, s, counts[s]])];
  $("job-tabs").replaceChildren(
    ...tabs.map(([value, label, count]) =>
      el(
        "button",
        {
          type: "button",
          role: "tab",
          "aria-selected": state.jobState === value ? "true" : "false",
          "data-state": value || "all",
          onclick: () => {
            state.jobState = value;
            state.offset = 0;
            refresh();
          },
        },
        label,
        el("span", { class: "count", text: count }),
      ),
    ),
  );
}

function jobActions(job) {
  const buttons = [
    el("button", {
      type: "button",
      class: "ghost small",
      "data-action": "log",
      text: state.openLogs.has(job.id) ? "Hide log" : "Log",
      onclick: () => {
        if (state.openLogs.has(job.id)) state.openLogs.delete(job.id);
        else state.openLogs.add(job.id);
        refresh();
      },
    }),
  ];
  if (job.state === "failed" || job.state === "cancelled") {
    buttons.push(
      el("button", { type: "button", class: "small", "data-action": "retry", text: "Retry", onclick: (e) => act(e.target, `/v1/admin/jobs/${job.id}/retry`, `Job ${job.id} queued again`) }),
    );
  }
  if (job.state === "queued" || job.state === "running") {
    buttons.push(
      el("button", { type: "button", class: "danger small", "data-action": "cancel", text: "Cancel", onclick: (e) => act(e.target, `/v1/jobs/${job.id}/cancel`, `Job ${job.id} cancelled`) }),
    );
  }
  return el("td", { class: "actions" }, buttons);
}

function renderJobs(page) {
  const rows = [];
  for (const job of page.items) {
    const when = job.finished_at || job.started_at || job.created_at;
    rows.push(
      el(
        "tr",
        { "data-job": job.id, "data-state": job.state },
        el("td", { class: "mono", text: `#${job.id}` }),
        el("td", {}, el("div", { text: job.kind }), el("div", { class: "sub", text: `${job.stage} · ${job.queue}` })),
        el("td", {}, badge(job.state)),
        el("td", {}, progressBar(job.progress, job.state)),
        el("td", { class: "mono", text: job.worker || "—" }),
        el(
          "td",
          { class: "message" },
          job.error ? el("div", { class: "reason", "data-role": "reason", text: job.error }) : el("div", { text: job.message }),
        ),
        el("td", { class: "num", text: `${job.attempts}/${job.max_attempts}` }),
        timeCell(when),
        jobActions(job),
      ),
    );
    if (state.openLogs.has(job.id)) {
      rows.push(el("tr", { class: "log-row", "data-log": job.id }, el("td", { colspan: 9 }, el("pre", { class: "log", text: job.log.join("\n") || "(empty log)" }))));
    }
  }
  fillBody($("jobs"), rows, state.jobState ? `No ${state.jobState} jobs` : "No jobs yet", 9);
  const last = Math.min(page.total_count, state.offset + page.items.length);
  $("jobs-range").textContent = page.total_count ? `${state.offset + 1}–${last} of ${page.total_count}` : "";
  $("jobs-prev").disabled = state.offset === 0;
  $("jobs-next").disabled = last >= page.total_count;
}

function renderReview() {
  $("review-note").textContent = state.overview.review_required ? "" : "(review is off: PAVEDOCK_REVIEW_REQUIRED=false)";
  const rows = state.reviewItems
    .slice()
    .reverse()
    .map((lw) => {
      const rejecting = state.rejecting.has(lw.id);
      const reason = el("input", { type: "text", placeholder: "reason (optional)", maxlength: 2000, "aria-label": `reason to reject learnware ${lw.id}` });
      const actions = rejecting
        ? [
            reason,
            el("button", {
              type: "button",
              class: "danger small",
              "data-action": "confirm-reject",
              text: "Reject",
              onclick: (e) => {
                state.rejecting.delete(lw.id);
                act(e.target, `/v1/admin/learnwares/${lw.id}/reject`, `Learnware ${lw.id} rejected`, { reason: reason.value || null });
              },
            }),
            el("button", { type: "button", class: "ghost small", "data-action": "keep", text: "Keep", onclick: () => { state.rejecting.delete(lw.id); renderReview(); } }),
          ]
        : [
            el("button", { type: "button", class: "approve small", "data-action": "approve", text: "Approve", onclick: (e) => act(e.target, `/v1/admin/learnwares/${lw.id}/approve`, `Learnware ${lw.id} approved and indexed`) }),
            el("button", {
              type: "button",
              class: "danger small",
              "data-action": "reject",
              text: "Reject…",
              onclick: () => {
                state.rejecting.add(lw.id);
                renderReview();
                document.querySelector(`#review tr[data-learnware="${lw.id}"] input`).focus();
              },
            }),
          ];
      const spec = lw.spec_recomputed === null ? "—" : lw.spec_recomputed ? "fitted by the dock" : "developer's, checked";
      return el(
        "tr",
        { "data-learnware": lw.id },
        el("td", {}, el("div", {}, el("span", { class: "mono", text: `#${lw.id} ` }), el("strong", { text: lw.name })), el("div", { class: "sub", text: lw.description.slice(0, 120) })),
        el("td", {}, el("div", { text: lw.model_format }), el("div", { class: "sub", text: lw.label_names.join(", ").slice(0, 80) })),
        el("td", { class: "sub", text: spec }),
        timeCell(lw.created_at),
        el("td", { class: "actions" }, actions),
      );
    });
  fillBody($("review"), rows, "Nothing awaits review", 5);
}

function renderIndexes(indexes) {
  const rows = indexes.map((i) =>
    el(
      "tr",
      { "data-space": i.space_id },
      el("td", { class: "mono", title: i.space_id, text: i.space_id.length > 18 ? `${i.space_id.slice(0, 18)}…` : i.space_id }),
      el("td", { class: "sub nowrap", text: i.base || "—" }),
      el("td", { class: "num", text: i.dim.toLocaleString() }),
      el("td", { class: "num", title: i.error || "", "data-role": "indexed", text: i.indexed === null ? "?" : i.indexed }),
      el("td", { class: "num", text: i.ready_learnwares }),
      el("td", { class: "num", text: i.awaiting_review }),
      el("td", { class: "num", text: i.index_version }),
      el(
        "td",
        { class: "actions" },
        el("button", { type: "button", class: "ghost small", "data-action": "rebuild", text: "Rebuild", onclick: (e) => act(e.target, `/v1/admin/spec-spaces/${encodeURIComponent(i.space_id)}/rebuild`, "Index rebuild queued") }),
      ),
    ),
  );
  fillBody($("indexes"), rows, "No spec space registered", 8);
}

async function act(button, path, done, body) {
  button.disabled = true;
  try {
    await api(path, { method: "POST", body });
    notice(done, true);
  } catch (error) {
    notice(error.message, false);
  } finally {
    button.disabled = false;
    await refresh();
  }
}

// ---- charts (inline SVG) ------------------------------------------------------------------

const CHART = { width: 560, height: 190, left: 44, right: 10, top: 22, bottom: 24 };

function niceMax(value) {
  if (!(value > 0)) return 1;
  const power = 10 ** Math.floor(Math.log10(value));
  // Four grid lines: these maxima give quarters that read well (0.25, 0.5, 1, 1.5, 2, 2.5).
  for (const step of [1, 2, 4, 6, 8, 10]) if (step * power >= value) return step * power;
  return 10 * power;
}

function formatTick(value) {
  if (value >= 1000) return `${(value / 1000).toFixed(value >= 10000 ? 0 : 1)}k`;
  if (Number.isInteger(value)) return String(value);
  return value >= 10 ? value.toFixed(0) : String(Number(value.toFixed(2)));
}

function timeLabel(ms) {
  const withSeconds = state.minutes <= 15;
  return new Date(ms).toLocaleTimeString([], { hour: "2-digit", minute: "2-digit", second: withSeconds ? "2-digit" : undefined });
}

function frame(svg, t0, t1, yMax, legend) {
  svg.replaceChildren();
  const { width, height, left, right, top, bottom } = CHART;
  const plotH = height - top - bottom;
  for (let i = 0; i <= 4; i += 1) {
    const y = top + plotH - (plotH * i) / 4;
    svg.append(svgEl("line", { class: "grid-line", x1: left, x2: width - right, y1: y, y2: y }));
    svg.append(svgEl("text", { class: "axis-label", x: left - 6, y: y + 3, "text-anchor": "end" }, formatTick((yMax * i) / 4)));
  }
  for (let i = 0; i <= 3; i += 1) {
    const t = t0 + ((t1 - t0) * i) / 3;
    const x = left + ((width - left - right) * i) / 3;
    svg.append(svgEl("text", { class: "axis-label", x, y: height - 6, "text-anchor": i === 0 ? "start" : i === 3 ? "end" : "middle" }, timeLabel(t)));
  }
  let x = left;
  for (const [name, color] of legend) {
    svg.append(svgEl("rect", { x, y: 6, width: 10, height: 10, rx: 2, fill: color }));
    svg.append(svgEl("text", { class: "legend", x: x + 14, y: 15 }, name));
    x += 24 + name.length * 6.2;
  }
}

function noData(svg, text) {
  svg.append(svgEl("text", { class: "no-data", x: CHART.width / 2, y: CHART.height / 2 + 4, "text-anchor": "middle" }, text));
}

function scaleX(t, t0, t1) {
  const { width, left, right } = CHART;
  return left + ((t - t0) / Math.max(1, t1 - t0)) * (width - left - right);
}

function scaleY(v, yMax) {
  const { height, top, bottom } = CHART;
  return top + (height - top - bottom) * (1 - v / yMax);
}

function barChart(svg, buckets, bucketS, stacks) {
  const t0 = buckets.length ? Date.parse(buckets[0].start) : Date.now();
  const t1 = t0 + buckets.length * bucketS * 1000;
  const totals = buckets.map((b) => stacks.reduce((sum, [key]) => sum + b[key], 0));
  const yMax = niceMax(Math.max(0, ...totals));
  frame(svg, t0, t1, yMax, stacks.map(([key, color]) => [key, color]));
  if (!totals.some((t) => t > 0)) return noData(svg, "No job ended in this window");
  const slot = (CHART.width - CHART.left - CHART.right) / Math.max(1, buckets.length);
  buckets.forEach((b, i) => {
    let base = 0;
    for (const [key, color] of stacks) {
      if (!b[key]) continue;
      const y0 = scaleY(base, yMax);
      const y1 = scaleY(base + b[key], yMax);
      const rect = svgEl("rect", { x: CHART.left + i * slot + slot * 0.15, y: y1, width: Math.max(1, slot * 0.7), height: Math.max(1, y0 - y1), fill: color, rx: 1 });
      rect.append(svgEl("title", {}, `${timeLabel(Date.parse(b.start))}: ${b[key]} ${key}`));
      svg.append(rect);
      base += b[key];
    }
  });
}

function lineChart(svg, series, t0, t1, emptyText) {
  const values = series.flatMap((s) => s.points.map((p) => p[1]));
  const yMax = niceMax(Math.max(0, ...values));
  frame(svg, t0, t1, yMax, series.map((s) => [s.name, s.color]));
  if (!values.length) return noData(svg, emptyText);
  for (const s of series) {
    if (!s.points.length) continue;
    const d = s.points.map(([t, v], i) => `${i ? "L" : "M"}${scaleX(t, t0, t1).toFixed(1)},${scaleY(v, yMax).toFixed(1)}`).join(" ");
    svg.append(svgEl("path", { d, fill: "none", stroke: s.color, "stroke-width": 2, "stroke-linejoin": "round" }));
    for (const [t, v] of s.points.length <= 40 ? s.points : []) {
      const dot = svgEl("circle", { cx: scaleX(t, t0, t1), cy: scaleY(v, yMax), r: 2.5, fill: s.color });
      dot.append(svgEl("title", {}, `${timeLabel(t)}: ${formatTick(v)}`));
      svg.append(dot);
    }
  }
}

async function refreshCharts() {
  const charts = await api(`/v1/admin/charts?minutes=${state.minutes}`);
  for (const node of document.querySelectorAll(".bucket")) node.textContent = duration(charts.bucket_s);
  // One time axis for the four charts: the job buckets' span, which ends with the current one.
  const t0 = charts.jobs.length ? Date.parse(charts.jobs[0].start) : Date.now() - charts.minutes * 60 * 1000;
  const t1 = t0 + charts.jobs.length * charts.bucket_s * 1000;
  barChart($("chart-jobs"), charts.jobs, charts.bucket_s, [
    ["succeeded", "#32d583"],
    ["failed", "#f97066"],
    ["cancelled", "#98a2b3"],
  ]);
  const mid = (b) => Date.parse(b.start) + (charts.bucket_s * 1000) / 2;
  lineChart(
    $("chart-durations"),
    [
      { name: "mean", color: "#4338ca", points: charts.jobs.filter((b) => b.mean_s !== null).map((b) => [mid(b), b.mean_s]) },
      { name: "p95", color: "#f79009", points: charts.jobs.filter((b) => b.p95_s !== null).map((b) => [mid(b), b.p95_s]) },
    ],
    t0,
    t1,
    "No job ran in this window",
  );
  const points = charts.requests.map((p) => ({ ...p, t: Date.parse(p.at) }));
  lineChart($("chart-rps"), [{ name: "requests/s", color: "#2e90fa", points: points.map((p) => [p.t, p.requests_per_s]) }], t0, t1, "No samples yet");
  lineChart(
    $("chart-latency"),
    [
      { name: "p50", color: "#12b76a", points: points.filter((p) => p.p50_ms !== null).map((p) => [p.t, p.p50_ms]) },
      { name: "p95", color: "#f04438", points: points.filter((p) => p.p95_ms !== null).map((p) => [p.t, p.p95_ms]) },
    ],
    t0,
    t1,
    "No API request in this window",
  );
}

// ---- wiring -------------------------------------------------------------------------------

document.addEventListener("DOMContentLoaded", () => {
  $("jobs-prev").addEventListener("click", () => {
    state.offset = Math.max(0, state.offset - state.limit);
    refresh();
  });
  $("jobs-next").addEventListener("click", () => {
    state.offset += state.limit;
    refresh();
  });
  $("chart-window").addEventListener("change", (event) => {
    state.minutes = Number(event.target.value);
    refreshCharts();
  });
  startPolling();
});
