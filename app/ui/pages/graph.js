// The graph page, and the viewer (outline + search + node details) other pages reuse.

import { enc, getJSON, getText, graphOf, versionPath } from "../api.js";
import { clear, h, link, nodesText, plural, versionLabel, whole } from "../dom.js";
import { Drawing, nextTask, prestartLayout } from "../drawing.js";
import { nodeInfo } from "../nodeinfo.js";
import { Outline } from "../outline.js";

// The view's state in the page's URL (`open` for each open module's path, `node`, `q`), so that
// back, forward, a reload and a shared link show the same view: typing and opening modules
// replace the history entry, selecting a node adds one.
function urlState(outline, box, run, showDetails) {
  let restoring = false;
  const write = (push) => {
    if (restoring) return;
    const query = new URLSearchParams(location.search);
    for (const key of ["open", "node", "q"]) query.delete(key);
    const open = outline.openPaths();
    if (open.length !== 1 || open[0] !== "") for (const path of open) query.append("open", path);
    if (outline.selected >= 0) query.set("node", outline.nodeKey(outline.selected));
    if (box.value) query.set("q", box.value);
    const search = query.toString();
    const url = `${location.pathname}${search ? `?${search}` : ""}`;
    if (push) history.pushState(null, "", url);
    else history.replaceState(null, "", url);
  };
  const read = () => {
    const query = new URLSearchParams(location.search);
    restoring = true;
    box.value = query.get("q") || "";
    run();
    outline.setOpen(query.has("open") ? query.getAll("open") : [""]);
    const id = outline.nodeByKey(query.get("node"));
    if (id >= 0) outline.reveal(id);
    else {
      outline.unselect();
      showDetails(-1);
    }
    restoring = false;
  };
  window.addEventListener("popstate", read);
  return { write, read };
}

// `more(id)`: what a page adds below a selected node's details (a stored version's full node).
export function graphViewer(graph, { marks = null, name = "graph", search = true, url = false, onSelect = null, more = null } = {}) {
  const details = h("aside", { class: "panel", "aria-live": "polite" });
  const showDetails = (id) =>
    clear(details).append(id >= 0 ? outline.details(id) : h("p", { class: "muted" }, "Click a node for its inputs and users."), id >= 0 && more ? more(id) : null);
  let state = null;
  let drawing = null;
  const outline = new Outline(graph, {
    marks,
    name,
    onSelect: (id) => {
      showDetails(id);
      drawing.select(id);
      if (state) state.write(true);
      if (onSelect) onSelect(id);
    },
    onExpand: () => {
      drawing.expanded();
      if (state) state.write(false);
    },
  });
  // The drawn graph beside the outline, following its open modules and selection; it starts
  // laying out once the page has placed it (`drawing.start()`).
  drawing = new Drawing(outline, { name });
  showDetails(-1);
  const results = h("ol", { class: "results" });
  const status = h("span", { class: "muted status" });
  let found = [];
  let at = -1;
  const box = h("input", { type: "search", class: "search", placeholder: "Find a node or operator (Enter: next)", "aria-label": `Search ${name}` });
  const run = () => {
    found = outline.search(box.value);
    at = -1;
    status.textContent = box.value.trim() ? `${found.length === 200 ? "200+ matches" : plural(found.length, "match", "matches")}` : "";
    // The numbers are Enter's order through the matches, written out so none is clipped.
    clear(results).append(
      ...found.slice(0, 50).map((id, k) =>
        h(
          "li",
          null,
          h("span", { class: "n" }, `${k + 1}.`),
          h("button", { type: "button", class: "jump", onclick: () => outline.reveal(id) }, `${graph.nodes.name[id]} · ${graph.nodes.target[id].replace("torch.ops.", "")}`),
        ),
      ),
    );
  };
  box.addEventListener("input", () => {
    run();
    if (state) state.write(false);
  });
  box.addEventListener("keydown", (event) => {
    if (event.key !== "Enter" || !found.length) return;
    at = (at + 1) % found.length;
    outline.reveal(found[at]);
  });
  if (url) state = urlState(outline, box, run, showDetails);
  const collapse = h("button", { type: "button", onclick: () => outline.collapseAll() }, "Collapse all");
  const tools = search ? h("div", { class: "tools" }, box, " ", status, " ", collapse) : null;
  const panes = h("div", { class: "panes" }, outline.el, drawing.el);
  const el = h("div", { class: "viewer" }, tools, h("div", { class: "split" }, panes, h("div", { class: "side" }, details, search ? results : null)));
  // Drawn from the URL once the viewer is in the page (its size decides what is in view).
  const restore = () => state && state.read();
  return { el, outline, restore, drawing };
}

// `nodes` is the program graph's node count from the API (a version's `summary.nodes`, an
// upload's operators view `graph.nodes`); the subgraphs' nodes are the rest of the answer's.
export function graphFacts(graph, nodes) {
  const subgraphs = graph.graphs.length - 1;
  return `${nodesText(nodes, graph.nodes.name.length)} in ${whole(graph.modules.length)} modules` + (subgraphs ? `, ${subgraphs} subgraphs` : "");
}

export async function graphPage(main, [name, ref]) {
  document.title = `${name} ${versionLabel(ref)} graph · pt2serde`;
  const ui = `/ui/models/${enc(name)}`;
  const crumb = link(`${ui}/versions/${enc(ref)}`, versionLabel(ref));
  const title = h("h1", null, `${name} ${versionLabel(ref)}: graph`);
  main.append(h("p", { class: "crumbs" }, link("/ui/", "Models"), " / ", link(ui, name), " / ", crumb, " / graph"), title);
  // Marks split the first view into transfer (start to received), parse and drawing.
  performance.mark("graph-start");
  prestartLayout();
  const [graph, info] = await Promise.all([
    getText(`${versionPath(name, ref)}/graph`).then(async (text) => {
      performance.mark("graph-received");
      const parsed = JSON.parse(text);
      // the tables' lookup in a task of its own: the parse alone is the page's longest task
      await nextTask();
      graphOf(parsed);
      performance.mark("graph-data");
      return parsed;
    }),
    getJSON(versionPath(name, ref)),
  ]);
  crumb.textContent = versionLabel(ref, info.version);
  title.textContent = `${name} ${versionLabel(ref, info.version)}: graph`;
  // A large program's parse, outline and drawing each take a task of their own.
  await nextTask();
  const base = versionPath(name, String(info.version));
  const more = (id) => nodeInfo(base, graph.nodes.graph[id], graph.nodes.position[id]);
  const { el, outline, restore, drawing } = graphViewer(graph, { name: `${name} ${versionLabel(ref)}`, url: true, more });
  main.append(h("p", { class: "muted", id: "facts" }, graphFacts(graph, info.summary.nodes)), el);
  await nextTask();
  restore();
  outline.render();
  drawing.start();
  // The first view is drawn once the rows are laid out in the page; the drawn graph follows
  // when its layout is back from the worker (its element's data-state turns "ready").
  await new Promise((resolve) => requestAnimationFrame(() => resolve()));
  performance.mark("graph-first-view");
  drawing.ready.then(() => performance.mark("graph-drawn"));
}
