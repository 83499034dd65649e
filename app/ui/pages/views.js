// A version's other views, each a tab of the version page with an address of its own: weights
// with their value statistics, pipeline stages, partitions for a set of supported operators, and
// the module graph at a depth. Each reads the API's inspect views (and tensors/stats) only.

import { enc, getJSON, versionPath } from "../api.js";
import { bytes, count, h, link, num, plural, section, shortOp, whole } from "../dom.js";
import { Grid } from "../grid.js";

export const TABS = [
  ["", "Overview"],
  ["graph", "Graph"],
  ["weights", "Weights"],
  ["stages", "Stages"],
  ["partitions", "Partitions"],
  ["modules", "Module graph"],
];

// The version's tabs, the current one marked; `number` is the version the reference named.
export function tabs(name, number, current) {
  const base = `/ui/models/${enc(name)}/versions/${number}`;
  return h(
    "nav",
    { class: "tabs", "aria-label": "views of this version" },
    TABS.map(([slug, label]) =>
      h("a", { href: slug ? `${base}/${slug}` : base, "aria-current": slug === current ? "page" : null, dataset: { tab: slug || "overview" } }, label),
    ),
  );
}

function head(main, name, info, current, title) {
  const v = info.version;
  document.title = `${name} v${v} ${title} · pt2serde`;
  main.append(
    h("p", { class: "crumbs" }, link("/ui/", "Models"), " / ", link(`/ui/models/${enc(name)}`, name), " / ", link(`/ui/models/${enc(name)}/versions/${v}`, `v${v}`), " / ", title.toLowerCase()),
    h("h1", null, `${name} v${v}: ${title.toLowerCase()}`),
    tabs(name, v, current),
  );
}

const shapeText = (shape) => (shape ? `[${shape.join(", ")}]` : "?");

export function weightsGrid(tensors, stats) {
  const byName = new Map(stats.map((s) => [s.name, s]));
  const rows = tensors.map((w) => ({ ...w, values: byName.get(w.name) || null }));
  const stat = (key) => (row) => (row.values ? row.values[key] : null);
  const numeric = (key, label) => ({ key, label, numeric: true, value: stat(key), cell: (row) => (row.values && row.values[key] !== null ? num(row.values[key]) : "-") });
  const counted = (key, label) => ({ key, label, numeric: true, value: stat(key), cell: (row) => (row.values ? whole(row.values[key]) : "-") });
  const columns = [
    { key: "name", label: "name", cell: (row) => h("code", null, row.name) },
    { key: "kind", label: "kind", cell: (row) => row.kind + (row.persistent ? "" : " (non-persistent)") + (row.tied_to ? ` (tied to ${row.tied_to})` : "") },
    { key: "dtype", label: "dtype", cell: (row) => row.dtype || "?" },
    { key: "shape", label: "shape", value: (row) => (row.shape ? row.shape.reduce((a, b) => a * b, 1) : null), cell: (row) => shapeText(row.shape) },
    { key: "nbytes", label: "bytes", numeric: true, cell: (row) => (row.nbytes === null ? "?" : bytes(row.nbytes)) },
    numeric("min", "min"),
    numeric("max", "max"),
    numeric("mean", "mean"),
    numeric("std", "std"),
    counted("zeros", "zeros"),
    { key: "nans", label: "NaN", numeric: true, value: stat("nans"), cell: (row) => (row.values ? h("span", { class: row.values.nans ? "warn" : null }, whole(row.values.nans)) : "-") },
    { key: "infs", label: "inf", numeric: true, value: stat("infs"), cell: (row) => (row.values ? h("span", { class: row.values.infs ? "warn" : null }, whole(row.values.infs)) : "-") },
    { key: "note", label: "note", sortable: false, cell: (row) => (row.values && row.values.note) || "" },
  ];
  return new Grid(columns, rows, { label: "weights", id: "weights-grid" });
}

export async function weightsPage(main, [name, ref]) {
  const base = versionPath(name, ref);
  const [info, weights, stats] = await Promise.all([getJSON(base), getJSON(`${base}/inspect?view=weights`), getJSON(`${base}/tensors/stats`)]);
  head(main, name, info, "weights", "Weights");
  const grid = weightsGrid(weights.tensors, stats);
  const flagged = stats.filter((s) => s.nans || s.infs).length;
  const filter = h("input", { type: "search", id: "weights-filter", placeholder: "Filter by name", "aria-label": "Filter weights by name" });
  filter.addEventListener("input", () => {
    const q = filter.value.trim().toLowerCase();
    grid.filter(q ? (row) => row.name.toLowerCase().includes(q) : null);
  });
  main.append(
    h("p", { id: "weights-total" }, `${whole(weights.total.count)} tensors, ${count(weights.total.numel)} elements, ${bytes(weights.total.nbytes)}`, flagged ? h("span", { class: "warn" }, ` · ${flagged} with NaN or infinite values`) : null),
    h("p", { class: "muted" }, "Statistics over each tensor's finite elements; std with Bessel's correction, as torch.std. Click a header (or Enter on it) to sort."),
    filter,
    grid.el,
  );
}

export async function stagesPage(main, [name, ref], query) {
  const base = versionPath(name, ref);
  const stages = Math.max(1, Number(query.get("stages")) || 2);
  const by = query.get("by") === "nodes" ? "nodes" : "param_bytes";
  const [info, view] = await Promise.all([getJSON(base), getJSON(`${base}/inspect?view=stages&stages=${stages}&by=${by}`)]);
  head(main, name, info, "stages", "Stages");
  const count_ = h("input", { type: "number", id: "stage-count", min: "1", max: "64", value: String(stages), "aria-label": "number of stages" });
  const balance = h("select", { id: "stage-by", "aria-label": "balance by" }, h("option", { value: "param_bytes", selected: by === "param_bytes" }, "parameter bytes"), h("option", { value: "nodes", selected: by === "nodes" }, "nodes"));
  const go = () => location.assign(`${location.pathname}?stages=${enc(count_.value)}&by=${enc(balance.value)}`);
  count_.addEventListener("change", go);
  balance.addEventListener("change", go);
  const columns = [
    { key: "index", label: "stage", numeric: true },
    { key: "modules", label: "modules", value: (s) => s.modules.length, cell: (s) => s.modules.map((m) => m || "<root ops>").join(", ") },
    { key: "nodes", label: "nodes", numeric: true, cell: (s) => whole(s.nodes) },
    { key: "param_bytes", label: "parameters", numeric: true, cell: (s) => bytes(s.param_bytes) },
    { key: "inputs", label: "inputs", value: (s) => s.inputs.length, cell: (s) => s.inputs.join(", ") },
    { key: "outputs", label: "outputs", value: (s) => s.outputs.length, cell: (s) => s.outputs.join(", ") },
  ];
  main.append(
    h("p", { class: "tools" }, h("label", null, "stages ", count_), " ", h("label", null, "balanced by ", balance)),
    view.stages.length ? new Grid(columns, view.stages, { label: "stages", id: "stages-grid" }).el : h("p", { class: "muted" }, "No module calls to split."),
  );
}

export async function partitionsPage(main, [name, ref], query) {
  const base = versionPath(name, ref);
  const supported = query.getAll("supported");
  const [info, operators] = await Promise.all([getJSON(base), getJSON(`${base}/inspect?view=operators`)]);
  head(main, name, info, "partitions", "Partitions");
  const targets = Object.entries(operators.total.by_target).sort((a, b) => b[1] - a[1]);
  const wanted = new Set(supported);
  const boxes = targets.map(([target, n]) =>
    h("label", { class: "choice" }, h("input", { type: "checkbox", value: target, checked: wanted.has(target) }), ` ${shortOp(target)} `, h("span", { class: "muted" }, `(${whole(n)})`)),
  );
  const go = h("button", { type: "button", id: "partition" }, "Partition");
  go.addEventListener("click", () => {
    const chosen = boxes.map((b) => b.querySelector("input")).filter((i) => i.checked).map((i) => `supported=${enc(i.value)}`);
    location.assign(`${location.pathname}${chosen.length ? `?${chosen.join("&")}` : ""}`);
  });
  main.append(section("Supported operators", h("p", { class: "muted" }, "What a backend runs: the partitioner groups supported nodes into units torch's CapabilityBasedPartitioner would propose."), h("div", { class: "choices" }, boxes), h("p", null, go)));
  if (!supported.length) {
    main.append(h("p", { class: "muted", id: "partitions-none" }, "Choose the operators a backend supports, then Partition."));
    return;
  }
  const view = await getJSON(`${base}/inspect?view=partitions&${supported.map((s) => `supported=${enc(s)}`).join("&")}`);
  const columns = [
    { key: "index", label: "#", numeric: true },
    { key: "size", label: "nodes", numeric: true, cell: (p) => whole(p.size) },
    { key: "first", label: "first nodes", sortable: false, cell: (p) => p.nodes.slice(0, 6).join(", ") + (p.nodes.length > 6 ? ", …" : "") },
    { key: "inputs", label: "inputs", value: (p) => p.inputs.length, cell: (p) => whole(p.inputs.length) },
    { key: "outputs", label: "outputs", value: (p) => p.outputs.length, cell: (p) => whole(p.outputs.length) },
  ];
  const rows = view.partitions.map((p, index) => ({ ...p, index, size: p.nodes.length }));
  main.append(
    section(
      plural(rows.length, "partition"),
      rows.length ? new Grid(columns, rows, { label: "partitions", id: "partitions-grid", sort: { key: "size", descending: true } }).el : h("p", { class: "muted" }, "No node is supported."),
    ),
  );
}

export async function moduleGraphPage(main, [name, ref], query) {
  const base = versionPath(name, ref);
  const depth = Math.max(0, Number(query.get("depth") ?? 1) || 0);
  const [info, view] = await Promise.all([getJSON(base), getJSON(`${base}/inspect?view=module-graph&depth=${depth}`)]);
  head(main, name, info, "modules", "Module graph");
  const pick = h("input", { type: "number", id: "depth", min: "0", max: "32", value: String(depth), "aria-label": "depth" });
  pick.addEventListener("change", () => location.assign(`${location.pathname}?depth=${enc(pick.value)}`));
  const into = new Map();
  const from = new Map();
  for (const e of view.edges) {
    if (!into.has(e.target)) into.set(e.target, []);
    into.get(e.target).push(e.source);
    if (!from.has(e.source)) from.set(e.source, []);
    from.get(e.source).push(e.target);
  }
  const rows = view.vertices.map((v, order) => ({ ...v, order, sources: into.get(v.id) || [], targets: from.get(v.id) || [] }));
  const columns = [
    { key: "order", label: "#", numeric: true },
    { key: "id", label: "vertex", cell: (v) => h("code", null, v.id) },
    { key: "kind", label: "kind" },
    { key: "type", label: "type", cell: (v) => v.type || "" },
    { key: "nodes", label: "nodes", numeric: true, cell: (v) => whole(v.nodes) },
    { key: "param_bytes", label: "parameters", numeric: true, cell: (v) => bytes(v.param_bytes) },
    { key: "sources", label: "reads from", value: (v) => v.sources.length, cell: (v) => v.sources.join(", ") },
    { key: "targets", label: "feeds", value: (v) => v.targets.length, cell: (v) => v.targets.join(", ") },
  ];
  main.append(
    h("p", { class: "tools" }, h("label", null, "depth ", pick), " ", h("span", { id: "chain" }, view.is_chain ? "a chain: each call feeds the next only" : "not a chain: some values skip calls or fan out")),
    h("p", null, `${whole(view.vertices.length)} vertices, ${whole(view.edges.length)} edges`),
    new Grid(columns, rows, { label: "module graph", id: "module-graph-grid" }).el,
  );
}
