// One version: summary, interface, weights, operators, validation findings, downloads.

import { accessLevel, enc, getJSON, versionPath } from "../api.js";
import { append, bytes, count, date, digest, h, link, nodesText, section, shape, shortOp, table } from "../dom.js";
import { labelsEditor } from "../edit.js";
import { Grid } from "../grid.js";
import { tabs } from "./views.js";

export function findingsTable(findings) {
  if (!findings.length) return h("p", { class: "ok" }, "No findings.");
  const columns = [
    { key: "severity", label: "severity" },
    { key: "code", label: "code" },
    { key: "path", label: "path", cell: (f) => h("code", null, f.path || "/") },
    { key: "message", label: "message" },
  ];
  return new Grid(columns, findings, { label: "findings", id: "findings", rowClass: (f) => `sev-${f.severity}` }).el;
}

export function interfaceTables(summary, ranges) {
  const rows = (values) => values.map((v) => [v.name, v.kind, shape(v)]);
  return [
    h("h3", null, "Inputs"),
    table(["name", "kind", "dtype and shape"], rows(summary.inputs), { id: "inputs" }),
    h("h3", null, "Outputs"),
    table(["name", "kind", "dtype and shape"], rows(summary.outputs), { id: "outputs" }),
    h("h3", null, "Dynamic dimensions"),
    ranges.length
      ? table(["symbol", "min", "max"], ranges.map((r) => [r.symbol, r.min ?? "-∞", r.max ?? "∞"]), { id: "ranges" })
      : h("p", { class: "muted" }, "All shapes are static."),
  ];
}

// A program's weights a page of rows at a time (a model may hold 2,000 tensors); `digests` (a
// stored version's tensor digests, by name) adds their column, an upload has none. A version's
// Weights tab adds value statistics.
export function weightsTable(weights, digests = null) {
  const quant = quantization(weights);
  const columns = [
    { key: "name", label: "name" },
    { key: "kind", label: "kind", cell: (w) => w.kind + (w.persistent ? "" : " (non-persistent)") },
    { key: "dtype", label: "dtype", cell: (w) => w.dtype || "?" },
    { key: "shape", label: "shape", value: (w) => (w.shape ? w.shape.reduce((a, b) => a * b, 1) : null), cell: (w) => (w.shape ? `[${w.shape.join(", ")}]` : "?") },
    { key: "nbytes", label: "bytes", numeric: true, cell: (w) => (w.nbytes === null ? "?" : bytes(w.nbytes)) },
    ...(digests ? [{ key: "digest", label: "digest", value: (w) => digests.get(w.name), cell: (w) => (digests.has(w.name) ? digest(digests.get(w.name)) : "") }] : []),
    { key: "quantization", label: "quantization", value: (w) => quant.get(w.name), cell: (w) => quant.get(w.name) || "" },
  ];
  return [
    h("p", null, `${weights.total.count} tensors, ${count(weights.total.numel)} elements, ${bytes(weights.total.nbytes)}`),
    new Grid(columns, weights.tensors, { label: "weights", id: "weights" }).el,
  ];
}

function quantization(weights) {
  const quant = new Map();
  for (const q of weights.quantized) {
    const w = q.input.weight;
    if (w) quant.set(w, `${q.op} ${q.scheme}${q.dtype ? ` ${q.dtype}` : ""}`);
    for (const ref of Object.values(q.tensors)) if (ref.weight) quant.set(ref.weight, `${q.scheme} ${q.op} parameter`);
  }
  return quant;
}

export function operatorsTable(ops) {
  const entries = Object.entries(ops.total.by_target).sort((a, b) => b[1] - a[1]);
  return [
    h("p", null, `${nodesText(ops.graph.nodes, ops.total.nodes)}, ${entries.length} operators` + (ops.custom_namespaces.length ? `; custom namespaces: ${ops.custom_namespaces.join(", ")}` : "")),
    new Grid(
      [
        { key: "target", label: "operator", cell: (row) => h("code", null, shortOp(row.target)) },
        { key: "nodes", label: "nodes", numeric: true },
      ],
      entries.map(([target, nodes]) => ({ target, nodes })),
      { label: "operators", id: "operators" },
    ).el,
  ];
}

export async function versionPage(main, [name, ref]) {
  document.title = `${name} ${ref} · pt2serde`;
  const base = versionPath(name, ref);
  const [info, level] = await Promise.all([getJSON(base), accessLevel(name)]);
  const live = !info.deleted_at;
  const [ranges, modules, weights, tensors, operators, report] = live
    ? await Promise.all([
        getJSON(`${base}/ranges`),
        getJSON(`${base}/inspect?view=modules`),
        getJSON(`${base}/inspect?view=weights`),
        getJSON(`${base}/tensors`),
        getJSON(`${base}/inspect?view=operators`),
        getJSON(`${base}/validate?level=semantic`),
      ])
    : [[], null, null, null, null, null];
  const v = info.version;
  const unverified = info.verification.state === "unverified" ? info.verification.namespaces : null;
  const ui = `/ui/models/${enc(name)}`;
  append(main, [
    h("p", { class: "crumbs" }, link("/ui/", "Models"), " / ", link(ui, name), " / ", `v${v}`),
    h("h1", null, `${name} v${v}`),
    live ? tabs(name, v, "") : null,
    labelsEditor(name, info, level),
    h(
      "p",
      null,
      unverified ? h("span", { class: "tag unverified", id: "unverified", title: "checked short of torch: the torch workers do not import these operator namespaces" }, `unverified: ${unverified.join(", ")}`) : null,
      ` created ${date(info.created_at)}`,
    ),
    info.deleted_at ? h("div", { class: "error" }, `Deleted ${date(info.deleted_at)}: ${info.deleted_reason || ""}`) : null,
    live
      ? h(
          "p",
          { class: "actions" },
          h("a", { class: "button", href: `${ui}/versions/${v}/graph`, id: "open-graph" }, "Graph"),
          v > 1 ? h("a", { class: "button", href: `${ui}/diff?from=${v - 1}&to=${v}` }, `Changes since v${v - 1}`) : null,
          h("a", { class: "button", href: `${base}/archive`, download: `${name}-v${v}.pt2` }, "Download .pt2"),
          h("a", { class: "button", href: `${base}/document` }, "Document (JSON)"),
          h("a", { class: "button", href: `${base}/canonical` }, "Canonical form"),
        )
      : null,
  ]);
  const root = modules ? modules.modules[0] : null;
  main.append(
    section(
      "Summary",
      table(
        ["", ""],
        [
          ["nodes", nodesText(info.summary.nodes, operators ? operators.total.nodes : undefined)],
          ["parameters", `${count(info.summary.parameter_count)} (${info.summary.parameters} tensors${info.summary.tied_parameters ? `, ${info.summary.tied_parameters} tied, counted once` : ""}${root ? `, ${bytes(root.total_parameters.nbytes)}` : ""})`],
          ["buffers / constants", `${info.summary.buffers} / ${info.summary.constants}`],
          ["schema version", `${info.schema_version} (needs ${info.min_schema_version} or newer)`],
          ["readable by torch", info.readable_by.join(", ")],
          ["verified", unverified ? `no: torch's check needs the namespaces ${unverified.join(", ")}` : `by torch ${info.verification.torch || "(release not recorded)"}`],
          ["archive", `${bytes(info.archive_size)} (model "${info.archive_model}")`],
          ["program digest", digest(info.digests.program)],
          ["graph digest", digest(info.digests.graph)],
          ["weights digest", digest(info.digests.weights)],
          ["archive digest", digest(info.digests.archive)],
        ],
        { id: "summary", class: "kv" },
      ),
    ),
    section("Interface", interfaceTables(info.summary, ranges)),
  );
  if (!live) return;
  main.append(
    section("Validation", h("p", null, `Level ${report.level}: ${report.valid ? "valid" : "invalid"}; pushed at level ${unverified ? "semantic (unverified)" : "torch"}.`), findingsTable(report.findings)),
    section("Weights", weightsTable(weights, new Map(tensors.map((t) => [t.name, t.digest]))), h("p", null, link(`${ui}/versions/${v}/weights`, "Value statistics of every tensor →"))),
    section("Operators", operatorsTable(operators)),
  );
}
