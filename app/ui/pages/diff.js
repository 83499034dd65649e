// What changed between two versions (or two uploaded files): verdict, interface, weights, and
// both graphs with added, removed and changed nodes marked, expanded only where they changed.

import { allVersions, enc, getJSON, graphOf, postJSONFiles, versionPath } from "../api.js";
import { clear, errorBox, h, link, num, section, shortOp, table, versionLabel } from "../dom.js";
import { nextTask, prestartLayout } from "../drawing.js";
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
function weightGrid(diff, id) {
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
  return rows.length ? new Grid(columns, rows, { label: "weight changes", id }).el : null;
}

// Every added, removed and changed node, a page at a time; a row (a click, or Enter) shows its
// node in the graphs: `onNode(side, position)`, the node's place in the program's graph.
function nodeGrid(graphDiff, id, onNode) {
  const rows = [
    ...graphDiff.added.map((r) => ({ change: "added", side: "new", position: r.position, target: r.target, outputs: r.outputs, what: "" })),
    ...graphDiff.removed.map((r) => ({ change: "removed", side: "old", position: r.position, target: r.target, outputs: r.outputs, what: "" })),
    ...graphDiff.changed.map((c) => ({
      change: "changed",
      side: "new",
      position: c.new.position,
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
  const onActivate = (r) => onNode(r.side, r.position);
  return rows.length ? new Grid(columns, rows, { label: "node changes (Enter: show in the graphs)", id, rowClass: (r) => `mark-${r.change} linked`, onActivate }).el : null;
}

const MODULE_WORDS = { added: "added", removed: "removed", type: "of another class", moved: "moved" };

// The module changes; a row shows its module in the graphs (`onModule(path)`).
function moduleGrid(modules, id, onModule) {
  const columns = [
    { key: "path", label: "path", cell: (m) => m.path || "<root>" },
    { key: "change", label: "change", cell: (m) => (m.old_path ? `moved from ${m.old_path}` : MODULE_WORDS[m.change] || m.change) },
    { key: "old_type", label: "old", cell: (m) => m.old_type || "-" },
    { key: "new_type", label: "new", cell: (m) => m.new_type || "-" },
  ];
  return new Grid(columns, modules, { label: "module changes (Enter: show in the graphs)", id, rowClass: () => "linked", onActivate: (m) => onModule(m.path) }).el;
}

// What one diff says, as the page's sections; `suffix` keeps the ids of a second step apart.
function changeSections(diff, suffix, onNode, onModule) {
  const s = diff.summary;
  const c = s.counts;
  const out = [
    verdictBox(diff),
    h("p", null, `nodes: ${diff.graph.old_nodes} → ${diff.graph.new_nodes} (${c.nodes_added} added, ${c.nodes_removed} removed, ${c.nodes_changed} changed, ${c.nodes_unchanged} unchanged)`),
  ];
  if (diff.interface.length) {
    out.push(
      section(
        "Interface changes",
        table(
          ["side", "change", "name", "old", "new", "breaking", "detail"],
          diff.interface.map((i) => h("tr", { class: i.breaking ? "breaking" : "" }, [i.side, i.change, i.name, i.old ?? "-", i.new ?? "-", i.breaking ? "yes" : "", i.detail].map((x) => h("td", null, x)))),
          { id: `interface${suffix}` },
        ),
      ),
    );
  }
  out.push(
    section(
      "Weight changes",
      weightGrid(diff, `weight-changes${suffix}`) ||
        h("p", { class: "muted" }, s.weights_compared ? "No weight changed." : "No weight changed in name, dtype or shape (values not compared)."),
    ),
  );
  const more = [];
  if (diff.modules.length) more.push(h("h3", null, "Modules"), moduleGrid(diff.modules, `module-changes${suffix}`, onModule));
  if (diff.range_constraints.length) more.push(h("h3", null, "Dynamic ranges"), table(["symbol", "change", "old", "new"], diff.range_constraints.map((r) => [r.symbol, r.change, r.old ?? "-", r.new ?? "-"])));
  if (diff.fields.length) more.push(h("h3", null, "Program fields"), table(["field", "old", "new"], diff.fields.map((f) => [f.field, f.old, f.new])));
  if (diff.opsets.length) more.push(h("h3", null, "Operator sets"), table(["namespace", "old", "new"], diff.opsets.map((o) => [o.namespace, o.old ?? "-", o.new ?? "-"])));
  if (diff.notes.length) more.push(h("h3", null, "Notes"), h("ul", null, diff.notes.map((n) => h("li", null, n))));
  if (more.length) out.push(section("Other changes", ...more));
  const nodes = nodeGrid(diff.graph, `node-changes${suffix}`, onNode);
  if (nodes) out.push(section("Node changes", nodes));
  return out;
}

const PANE_IDS = ["old-graph", "new-graph", "then-graph"];
// Which mark a node shows when both steps beside its pane mark it: what the next version
// removes outranks what this one added, which outranks a change.
const MARK_RANK = { changed: 0, added: 1, removed: 2 };

// Pane `i`'s marks: its nodes as the newer side of the step on its left and as the older side of
// the step on its right (the middle of three has both, so what the third version removes is
// coloured where it still is).
function paneMarks(steps, i) {
  const marks = new Map(i > 0 ? steps[i - 1].marks.new : []);
  if (i < steps.length) {
    for (const [id, mark] of steps[i].marks.old) {
      const had = marks.get(id);
      if (had === undefined || MARK_RANK[mark] > MARK_RANK[had]) marks.set(id, mark);
    }
  }
  return marks;
}

// `diffs[s]`: the diff of graphs[s] -> graphs[s + 1] (one diff and two graphs, or two and three);
// `labels`: the versions' names, in the same order.
export async function renderDiff(main, diffs, graphs, labels) {
  const steps = diffs.map((diff, s) => {
    const [oldGraph, newGraph] = [graphs[s], graphs[s + 1]];
    const marks = { old: new Map(), new: new Map(), oldToNew: new Map(), newToOld: new Map(), oldStart: starts(oldGraph), newStart: starts(newGraph) };
    collectMarks(diff.graph, oldGraph, newGraph, 0, 0, marks);
    return { diff, marks, oldGraph, newGraph };
  });
  // Set once the drawn diff exists; a change row clicked before does nothing.
  let drawn = null;
  const onNode = (s) => (side, position) => drawn?.showNode(s, side, steps[s].marks[`${side}Start`][0] + position);
  const onModule = (s) => (path) => drawn?.openModule(s, path);
  if (steps.length === 1) main.append(...changeSections(diffs[0], "", onNode(0), onModule(0)));
  else
    steps.forEach((step, s) =>
      main.append(h("section", { class: "step", id: `step-${s + 1}` }, h("h2", null, `${labels[s]} → ${labels[s + 1]}`), ...changeSections(step.diff, `-${s + 1}`, onNode(s), onModule(s)))),
    );
  // A changed node selected in one pane shows its counterpart in the panes beside it.
  const panes = [];
  const follow = (i) => (id) => {
    const twins = [];
    if (i > 0) twins.push([steps[i - 1].marks.newToOld, i - 1]);
    if (i < steps.length) twins.push([steps[i].marks.oldToNew, i + 1]);
    for (const [pairs, j] of twins) {
      const twin = pairs.get(id);
      if (twin !== undefined && panes[j].outline.selected !== twin) panes[j].outline.reveal(twin);
    }
  };
  // Each pane is built, and later opened where it changed, in a task of its own: all in one,
  // two 50k-node versions held the page for 380-430 ms.
  for (const [i, graph] of graphs.entries()) {
    await nextTask();
    panes.push(graphViewer(graph, { marks: paneMarks(steps, i), name: labels[i], search: false, onSelect: follow(i) }));
  }
  drawn = drawnDiff(panes, steps);
  main.append(
    section(
      "Graphs",
      h(
        "p",
        { class: "legend" },
        h("span", { class: "mark-added" }, "added"),
        h("span", { class: "mark-removed" }, "removed"),
        h("span", { class: "mark-changed" }, "changed"),
        graphs.length > 2 ? " in each version against those beside it;" : "",
        " modules open where something changed",
      ),
      drawn.nav,
      h(
        "div",
        { class: graphs.length > 2 ? "sides three" : "sides" },
        panes.map((pane, i) => h("div", { id: PANE_IDS[i] }, h("h3", null, labels[i]), pane.el)),
      ),
    ),
  );
  for (const pane of panes) {
    await nextTask();
    pane.outline.revealMarks();
  }
  drawn.start();
}

// A third version picked here is compared with `to` and drawn beside it (`then=` in the URL).
function thirdPicker(name, from, to, then, versions) {
  const pick = h(
    "select",
    { id: "then", "aria-label": "third version" },
    h("option", { value: "" }, "none"),
    versions.filter((v) => !v.deleted_at).map((v) => h("option", { value: String(v.version), selected: String(v.version) === then }, `v${v.version}`)),
  );
  if (then && ![...pick.options].some((o) => o.selected && o.value)) pick.append(h("option", { value: then, selected: true }, versionLabel(then)));
  pick.addEventListener("change", () => {
    const query = new URLSearchParams({ from, to });
    if (pick.value) query.set("then", pick.value);
    location.assign(`/ui/models/${enc(name)}/diff?${query}`);
  });
  return h("p", { class: "tools", id: "third" }, h("label", null, `then (a third version, compared with ${versionLabel(to)}) `, pick));
}

export async function diffPage(main, [name], query) {
  const from = query.get("from");
  const to = query.get("to");
  const then = query.get("then");
  const ui = `/ui/models/${enc(name)}`;
  const title = h("h1", null, `${name}: changes`);
  main.append(h("p", { class: "crumbs" }, link("/ui/", "Models"), " / ", link(ui, name), " / changes"), title);
  if (!from || !to) {
    document.title = `${name} changes · pt2serde`;
    main.append(h("p", null, "Name two versions: ?from=1&to=2 (numbers, aliases or latest), and a third to see both steps: &then=3."));
    return;
  }
  const refs = then ? [from, to, then] : [from, to];
  const named = (labels) => `${name}: ${labels.join(" → ")}`;
  title.textContent = named(refs.map((r) => versionLabel(r)));
  document.title = `${title.textContent} · pt2serde`;
  prestartLayout();
  const [versions, diffs, graphs, infos] = await Promise.all([
    allVersions(name),
    Promise.all(refs.slice(1).map((ref, s) => getJSON(`${versionPath(name, ref)}/diff?against=${enc(refs[s])}`))),
    Promise.all(refs.map((ref) => getJSON(`${versionPath(name, ref)}/graph`).then(graphOf))),
    Promise.all(refs.map((ref) => getJSON(versionPath(name, ref)))),
  ]);
  const labels = refs.map((ref, i) => versionLabel(ref, infos[i].version));
  title.textContent = named(labels);
  document.title = `${title.textContent} · pt2serde`;
  main.append(thirdPicker(name, from, to, then, versions));
  await renderDiff(main, diffs, graphs, labels);
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
        postJSONFiles("/v1/graph", { file: a }).then(graphOf),
        postJSONFiles("/v1/graph", { file: b }).then(graphOf),
      ]);
      clear(out);
      await renderDiff(out, [diff], [oldGraph, newGraph], [a.name, b.name]);
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
