// What changed between two versions (or two uploaded files): verdict, interface, weights, and
// both graphs with added, removed and changed nodes marked, expanded only where they changed.

import { enc, getJSON, postFiles, postJSONFiles, versionPath } from "../api.js";
import { clear, errorBox, h, link, num, section, shortOp, table, versionLabel } from "../dom.js";
import { prestartLayout } from "../drawing.js";
import { Grid } from "../grid.js";
import { verdictBox } from "../severity.js";
import { drawnDiff } from "./changes.js";
import { graphViewer } from "./graph.js";

function starts(graph) {
  const start = new Int32Array(graph.graphs.length).fill(-1);
  const g = graph.nodes.graph;
  for (let i = g.length - 1; i >= 0; i -= 1) start[g[i]] = i;
  return start;
}

function subgraphOf(graph, node, name) {
  for (let k = 0; k < graph.graphs.length; k += 1) {
    if (graph.graphs[k].node === node && graph.graphs[k].name === name) return k;
  }
  return -1;
}

// Node ids to mark on each side, from a GraphDiff and the graph ids it is about.
function collectMarks(diff, oldGraph, newGraph, oldId, newId, marks) {
  const at = (graph, start, k, position) => (k >= 0 && start[k] >= 0 ? start[k] + position : -1);
  for (const ref of diff.added) {
    const id = at(newGraph, marks.newStart, newId, ref.position);
    if (id >= 0) marks.new.set(id, "added");
  }
  for (const ref of diff.removed) {
    const id = at(oldGraph, marks.oldStart, oldId, ref.position);
    if (id >= 0) marks.old.set(id, "removed");
  }
  for (const change of diff.changed) {
    const o = at(oldGraph, marks.oldStart, oldId, change.old.position);
    const n = at(newGraph, marks.newStart, newId, change.new.position);
    if (o >= 0) marks.old.set(o, "changed");
    if (n >= 0) marks.new.set(n, "changed");
    if (o >= 0 && n >= 0) {
      marks.oldToNew.set(o, n);
      marks.newToOld.set(n, o);
    }
    for (const sub of change.subgraphs) {
      collectMarks(sub, oldGraph, newGraph, subgraphOf(oldGraph, o, sub.name), subgraphOf(newGraph, n, sub.name), marks);
    }
  }
}

const metaText = (dtype, shape) => (dtype || shape ? `${dtype || ""}${shape ? `[${shape.join(", ")}]` : ""}` : "-");

// The weight changes, a page at a time (a fine-tune changes every tensor of a large model).
function weightGrid(diff) {
  const rows = [...diff.parameters, ...diff.buffers, ...diff.constants];
  const columns = [
    { key: "name", label: "name" },
    { key: "kind", label: "kind" },
    { key: "changes", label: "changes", value: (w) => w.changes.join(", "), cell: (w) => w.changes.join(", ") + (w.renamed_from ? ` (from ${w.renamed_from})` : "") },
    { key: "old", label: "old", value: (w) => metaText(w.old_dtype, w.old_shape), cell: (w) => metaText(w.old_dtype, w.old_shape) },
    { key: "new", label: "new", value: (w) => metaText(w.new_dtype, w.new_shape), cell: (w) => metaText(w.new_dtype, w.new_shape) },
    {
      key: "values",
      label: "values",
      numeric: true,
      value: (w) => (w.stats ? w.stats.max_abs_diff : null),
      cell: (w) => (w.stats ? h("span", null, `${w.stats.differing} of ${w.stats.numel} differ, max |Δ| `, num(w.stats.max_abs_diff)) : w.note || ""),
    },
  ];
  return rows.length ? new Grid(columns, rows, { label: "weight changes", id: "weight-changes" }).el : null;
}

// Every added, removed and changed node, a page at a time.
function nodeGrid(graphDiff) {
  const rows = [
    ...graphDiff.added.map((r) => ({ change: "added", target: r.target, outputs: r.outputs, what: "" })),
    ...graphDiff.removed.map((r) => ({ change: "removed", target: r.target, outputs: r.outputs, what: "" })),
    ...graphDiff.changed.map((c) => ({
      change: "changed",
      target: c.new.target,
      outputs: c.new.outputs,
      what: [
        c.target_changed ? `operator ${shortOp(c.old.target)} → ${shortOp(c.new.target)}` : "",
        ...c.arguments.map((a) => `${a.name}: ${a.old ?? "-"} → ${a.new ?? "-"}`),
        ...c.outputs.map((o) => `output ${o.position}: ${o.old ?? "-"} → ${o.new ?? "-"}`),
        c.subgraphs.length ? `subgraphs ${c.subgraphs.map((s) => s.name).join(", ")}` : "",
      ]
        .filter(Boolean)
        .join("; "),
    })),
  ];
  const columns = [
    { key: "change", label: "" },
    { key: "target", label: "operator", cell: (r) => shortOp(r.target) },
    { key: "outputs", label: "values", value: (r) => r.outputs.join(", "), cell: (r) => r.outputs.join(", ") },
    { key: "what", label: "what" },
  ];
  return rows.length ? new Grid(columns, rows, { label: "node changes", id: "node-changes", rowClass: (r) => `mark-${r.change}` }).el : null;
}

const MODULE_WORDS = { added: "added", removed: "removed", type: "of another class", moved: "moved" };

export function renderDiff(main, diff, oldGraph, newGraph, labels) {
  const s = diff.summary;
  const c = s.counts;
  main.append(
    verdictBox(diff),
    h("p", null, `nodes: ${diff.graph.old_nodes} → ${diff.graph.new_nodes} (${c.nodes_added} added, ${c.nodes_removed} removed, ${c.nodes_changed} changed, ${c.nodes_unchanged} unchanged)`),
  );
  if (diff.interface.length) {
    main.append(
      section(
        "Interface changes",
        table(
          ["side", "change", "name", "old", "new", "breaking", "detail"],
          diff.interface.map((i) => h("tr", { class: i.breaking ? "breaking" : "" }, [i.side, i.change, i.name, i.old ?? "-", i.new ?? "-", i.breaking ? "yes" : "", i.detail].map((x) => h("td", null, x)))),
          { id: "interface" },
        ),
      ),
    );
  }
  main.append(
    section(
      "Weight changes",
      weightGrid(diff) || h("p", { class: "muted" }, s.weights_compared ? "No weight changed." : "No weight changed in name, dtype or shape (values not compared)."),
    ),
  );
  const more = [];
  if (diff.modules.length)
    more.push(
      h("h3", null, "Modules"),
      table(
        ["path", "change", "old", "new"],
        diff.modules.map((m) => [m.path || "<root>", m.old_path ? `moved from ${m.old_path}` : MODULE_WORDS[m.change] || m.change, m.old_type || "-", m.new_type || "-"]),
        { id: "module-changes" },
      ),
    );
  if (diff.range_constraints.length) more.push(h("h3", null, "Dynamic ranges"), table(["symbol", "change", "old", "new"], diff.range_constraints.map((r) => [r.symbol, r.change, r.old ?? "-", r.new ?? "-"])));
  if (diff.fields.length) more.push(h("h3", null, "Program fields"), table(["field", "old", "new"], diff.fields.map((f) => [f.field, f.old, f.new])));
  if (diff.opsets.length) more.push(h("h3", null, "Operator sets"), table(["namespace", "old", "new"], diff.opsets.map((o) => [o.namespace, o.old ?? "-", o.new ?? "-"])));
  if (diff.notes.length) more.push(h("h3", null, "Notes"), h("ul", null, diff.notes.map((n) => h("li", null, n))));
  if (more.length) main.append(section("Other changes", ...more));
  const nodes = nodeGrid(diff.graph);
  if (nodes) main.append(section("Node changes", nodes));

  const marks = {
    old: new Map(),
    new: new Map(),
    oldToNew: new Map(),
    newToOld: new Map(),
    oldStart: starts(oldGraph),
    newStart: starts(newGraph),
  };
  collectMarks(diff.graph, oldGraph, newGraph, 0, 0, marks);
  // A changed node selected on one side shows its counterpart on the other.
  const follow = (pairs, other) => (id) => {
    const twin = pairs.get(id);
    if (twin !== undefined && other().outline.selected !== twin) other().outline.reveal(twin);
  };
  const left = graphViewer(oldGraph, { marks: marks.old, name: labels[0], search: false, onSelect: follow(marks.oldToNew, () => right) });
  const right = graphViewer(newGraph, { marks: marks.new, name: labels[1], search: false, onSelect: follow(marks.newToOld, () => left) });
  const drawn = drawnDiff(left, right, marks, oldGraph, newGraph);
  main.append(
    section(
      "Graphs",
      h("p", { class: "legend" }, h("span", { class: "mark-added" }, "added"), h("span", { class: "mark-removed" }, "removed"), h("span", { class: "mark-changed" }, "changed"), " modules open where something changed"),
      drawn.nav,
      h("div", { class: "sides" }, h("div", { id: "old-graph" }, h("h3", null, labels[0]), left.el), h("div", { id: "new-graph" }, h("h3", null, labels[1]), right.el)),
    ),
  );
  left.outline.revealMarks();
  right.outline.revealMarks();
  drawn.start();
}

export async function diffPage(main, [name], query) {
  const from = query.get("from");
  const to = query.get("to");
  const ui = `/ui/models/${enc(name)}`;
  const title = h("h1", null, `${name}: changes`);
  main.append(h("p", { class: "crumbs" }, link("/ui/", "Models"), " / ", link(ui, name), " / changes"), title);
  if (!from || !to) {
    document.title = `${name} changes · pt2serde`;
    main.append(h("p", null, "Name two versions: ?from=1&to=2 (numbers, aliases or latest)."));
    return;
  }
  const named = (labels) => `${name}: ${labels[0]} → ${labels[1]}`;
  title.textContent = named([versionLabel(from), versionLabel(to)]);
  document.title = `${title.textContent} · pt2serde`;
  prestartLayout();
  const [diff, oldGraph, newGraph, oldInfo, newInfo] = await Promise.all([
    getJSON(`${versionPath(name, to)}/diff?against=${enc(from)}`),
    getJSON(`${versionPath(name, from)}/graph`),
    getJSON(`${versionPath(name, to)}/graph`),
    getJSON(versionPath(name, from)),
    getJSON(versionPath(name, to)),
  ]);
  const labels = [versionLabel(from, oldInfo.version), versionLabel(to, newInfo.version)];
  title.textContent = named(labels);
  document.title = `${title.textContent} · pt2serde`;
  renderDiff(main, diff, oldGraph, newGraph, labels);
}

export async function filesDiffPage(main) {
  document.title = "Compare two files · pt2serde";
  const oldFile = h("input", { type: "file", id: "old-file", accept: ".pt2,.json,application/zip,application/json" });
  const newFile = h("input", { type: "file", id: "new-file", accept: ".pt2,.json,application/zip,application/json" });
  const out = h("div", { id: "result" });
  const go = async () => {
    clear(out);
    const [a, b] = [oldFile.files[0], newFile.files[0]];
    if (!a || !b) return;
    out.append(h("p", { class: "muted" }, "Comparing…"));
    try {
      const [diff, oldGraph, newGraph] = await Promise.all([
        postJSONFiles("/v1/diff", { old: a, new: b }),
        postFiles("/v1/graph", { file: a }).then((r) => r.json()),
        postFiles("/v1/graph", { file: b }).then((r) => r.json()),
      ]);
      clear(out);
      renderDiff(out, diff, oldGraph, newGraph, [a.name, b.name]);
    } catch (err) {
      clear(out).append(errorBox(err));
    }
    document.body.dataset.done = "1";
  };
  oldFile.addEventListener("change", go);
  newFile.addEventListener("change", go);
  main.append(
    h("h1", null, "Compare two files"),
    h("p", null, "Two .pt2 archives or JSON documents; nothing is stored."),
    h("p", null, h("label", null, "old ", oldFile), " ", h("label", null, "new ", newFile)),
    out,
  );
}
