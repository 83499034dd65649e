// The drawn diff: both versions' drawings moving together, and a walk through the changes
// (buttons, and the keys n and p) that shows each change on both sides: the node itself where
// it exists, else the module at the same path (the nearest one that exists on that side).

import { h } from "../dom.js";

function paths(graph) {
  return new Map(graph.modules.map((m, i) => [m.path, i]));
}

// The module of `other` that stands for module m of `graph`: the same path, or its nearest
// ancestor's.
function counterpart(graph, m, others) {
  for (let at = m; at >= 0; at = graph.modules[at].parent) {
    const found = others.get(graph.modules[at].path);
    if (found !== undefined) return found;
  }
  return 0;
}

// Every change as {old, new} node ids (-1 where the side has none), in the new program's order;
// a removed node is placed at its old place scaled to the new program's length, the nearest
// order there is for a node the new program does not have.
function changeList(marks, oldGraph, newGraph) {
  const list = [];
  const scale = newGraph.nodes.name.length / Math.max(1, oldGraph.nodes.name.length);
  for (const [id, mark] of marks.new) list.push({ old: mark === "changed" ? (marks.newToOld.get(id) ?? -1) : -1, new: id, at: id });
  for (const [id, mark] of marks.old) {
    if (mark === "changed" && marks.oldToNew.has(id)) continue;
    list.push({ old: id, new: -1, at: id * scale });
  }
  return list.sort((a, b) => a.at - b.at);
}

export function drawnDiff(left, right, marks, oldGraph, newGraph) {
  left.drawing.link(right.drawing);
  const changes = changeList(marks, oldGraph, newGraph);
  const oldPaths = paths(oldGraph);
  const newPaths = paths(newGraph);
  let at = -1;
  const where = h("span", { class: "where muted", "aria-live": "polite" }, `${changes.length} changes`);
  const show = (side, id, other, otherId, graph, otherPaths) => {
    if (id >= 0) side.outline.reveal(id);
    if (otherId >= 0) {
      other.outline.reveal(otherId);
      return;
    }
    const m = counterpart(graph, graph.nodes.module[id], otherPaths);
    other.outline.revealModule(m);
    other.drawing.center(-(m + 1));
  };
  const go = (step) => {
    if (!changes.length) return;
    at = (at + step + changes.length) % changes.length;
    const change = changes[at];
    if (change.new >= 0) show(right, change.new, left, change.old, newGraph, oldPaths);
    else show(left, change.old, right, -1, oldGraph, newPaths);
    where.textContent = `${at + 1} of ${changes.length}`;
  };
  const nav = h(
    "p",
    { id: "changes-nav", class: "tools" },
    h("button", { type: "button", class: "prev", onclick: () => go(-1), disabled: !changes.length, title: "Previous change (p)" }, "← Previous change"),
    h("button", { type: "button", class: "next", onclick: () => go(1), disabled: !changes.length, title: "Next change (n)" }, "Next change →"),
    where,
  );
  document.addEventListener("keydown", (event) => {
    if (event.altKey || event.ctrlKey || event.metaKey || event.target.closest("input, textarea, select")) return;
    if (event.key === "n") go(1);
    else if (event.key === "p") go(-1);
  });
  const start = () => {
    left.drawing.start();
    right.drawing.start();
  };
  return { nav, start };
}
