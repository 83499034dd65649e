// The drawn diff: the versions' drawings (two, or three side by side) moving together, and a
// walk through the changes (buttons, the keys n and p, and the rows of the change tables) that
// shows each change on both sides of its step: the node itself where it exists, else the module
// at the same path (the nearest one that exists on that side). The change shown is in the URL
// (`change=` its place in the walk, or `module=` a module row's path with `step=` its step), so
// back, forward, a reload and a shared link show it again.

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

// Every change of one step as {old, new} node ids (-1 where the side has none), in the new
// program's order; a removed node is placed at its old place scaled to the new program's length,
// the nearest order there is for a node the new program does not have.
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

const within = (path, module) => path === module || module === "" || path.startsWith(`${module}.`);

// `panes`: the viewers, oldest version first; `steps[s]`: { marks, oldGraph, newGraph }, the
// diff between panes s and s + 1. The walk goes through the first step's changes, then the next's.
export function drawnDiff(panes, steps) {
  for (let i = 0; i < panes.length; i += 1) for (let j = i + 1; j < panes.length; j += 1) panes[i].drawing.link(panes[j].drawing);
  const changes = steps.flatMap((step, s) => changeList(step.marks, step.oldGraph, step.newGraph).map((c) => ({ ...c, step: s })));
  // A change row finds its place in the walk by its step and its node on either side.
  const place = new Map();
  changes.forEach((c, i) => {
    if (c.new >= 0) place.set(`${c.step}:new:${c.new}`, i);
    if (c.old >= 0) place.set(`${c.step}:old:${c.old}`, i);
  });
  const modulePaths = steps.map((step) => [paths(step.oldGraph), paths(step.newGraph)]);
  let at = -1;
  const where = h("span", { class: "where muted", "aria-live": "polite" }, `${changes.length} changes`);
  const position = () => {
    where.textContent = at >= 0 ? `${at + 1} of ${changes.length}` : `${changes.length} changes`;
  };
  const showModule = (pane, m) => {
    pane.outline.revealModule(m);
    pane.drawing.center(-(m + 1));
  };
  // On `pane`, the module standing for module m of `graph` (the side the change is not on).
  const showModuleOf = (pane, graph, m, paneModules) => showModule(pane, counterpart(graph, m, paneModules));
  const show = (change) => {
    const step = steps[change.step];
    const [oldPane, newPane] = [panes[change.step], panes[change.step + 1]];
    const [oldPaths, newPaths] = modulePaths[change.step];
    if (change.new >= 0) newPane.outline.reveal(change.new);
    if (change.old >= 0) oldPane.outline.reveal(change.old);
    if (change.old < 0) showModuleOf(oldPane, step.newGraph, step.newGraph.nodes.module[change.new], oldPaths);
    else if (change.new < 0) showModuleOf(newPane, step.oldGraph, step.oldGraph.nodes.module[change.old], newPaths);
  };
  const write = (query, push) => {
    const url = new URLSearchParams(location.search);
    for (const key of ["change", "module", "step"]) url.delete(key);
    for (const [key, value] of Object.entries(query)) url.set(key, value);
    const next = `${location.pathname}?${url}`;
    if (next === `${location.pathname}${location.search}`) return;
    if (push) history.pushState(null, "", next);
    else history.replaceState(null, "", next);
  };
  const goTo = (i, push = true) => {
    at = i;
    show(changes[at]);
    position();
    write({ change: String(at + 1) }, push);
  };
  const go = (step) => {
    if (changes.length) goTo((at + step + changes.length) % changes.length);
  };
  // A node change row of step s: { side: "old" | "new", id }.
  const showNode = (s, side, id) => {
    const i = place.get(`${s}:${side}:${id}`);
    if (i !== undefined) goTo(i);
  };
  // A module change row of step s: the module (or where it would be) on both sides, and the walk
  // moved to the first change inside it.
  const openModule = (s, path, push = true) => {
    const step = steps[s];
    const [oldPaths, newPaths] = modulePaths[s];
    const [oldPane, newPane] = [panes[s], panes[s + 1]];
    const onNew = newPaths.get(path);
    const onOld = oldPaths.get(path);
    if (onNew !== undefined) showModule(newPane, onNew);
    else if (onOld !== undefined) showModuleOf(newPane, step.oldGraph, onOld, newPaths);
    if (onOld !== undefined) showModule(oldPane, onOld);
    else if (onNew !== undefined) showModuleOf(oldPane, step.newGraph, onNew, oldPaths);
    const moduleOf = (graph, id) => graph.modules[graph.nodes.module[id]].path;
    const first = changes.findIndex(
      (c) => c.step === s && (c.new >= 0 ? within(moduleOf(step.newGraph, c.new), path) : within(moduleOf(step.oldGraph, c.old), path)),
    );
    if (first >= 0) at = first;
    position();
    write(s ? { module: path, step: String(s + 1) } : { module: path }, push);
  };
  // The change the URL names, if any (a deep link, back or forward).
  const read = () => {
    const query = new URLSearchParams(location.search);
    const change = Number(query.get("change"));
    if (Number.isInteger(change) && change >= 1 && change <= changes.length) goTo(change - 1, false);
    else if (query.has("module")) {
      const s = Number(query.get("step") || "1") - 1;
      if (s >= 0 && s < steps.length) openModule(s, query.get("module"), false);
    } else {
      at = -1;
      position();
    }
  };
  window.addEventListener("popstate", read);
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
    for (const pane of panes) pane.drawing.start();
    read();
  };
  return { nav, start, showNode, openModule };
}
