// The graph page, and the viewer (outline + search + node details) other pages reuse.

import { enc, getText, versionPath } from "../api.js";
import { clear, count, h, link, plural } from "../dom.js";
import { Outline } from "../outline.js";

export function graphViewer(graph, { marks = null, name = "graph", search = true, onSelect = null } = {}) {
  const details = h("aside", { class: "panel", "aria-live": "polite" }, h("p", { class: "muted" }, "Click a node for its inputs and users."));
  const outline = new Outline(graph, {
    marks,
    name,
    onSelect: (id) => {
      clear(details).append(outline.details(id));
      if (onSelect) onSelect(id);
    },
  });
  const results = h("ol", { class: "results" });
  const status = h("span", { class: "muted status" });
  let found = [];
  let at = -1;
  const box = h("input", { type: "search", class: "search", placeholder: "Find a node or operator (Enter: next)", "aria-label": `Search ${name}` });
  const run = () => {
    found = outline.search(box.value);
    at = -1;
    status.textContent = box.value.trim() ? `${found.length === 200 ? "200+ matches" : plural(found.length, "match", "matches")}` : "";
    clear(results).append(
      ...found.slice(0, 50).map((id) =>
        h("li", null, h("button", { type: "button", class: "jump", onclick: () => outline.reveal(id) }, `${graph.nodes.name[id]} · ${graph.nodes.target[id].replace("torch.ops.", "")}`)),
      ),
    );
  };
  box.addEventListener("input", run);
  box.addEventListener("keydown", (event) => {
    if (event.key !== "Enter" || !found.length) return;
    at = (at + 1) % found.length;
    outline.reveal(found[at]);
  });
  const collapse = h("button", { type: "button", onclick: () => outline.collapseAll() }, "Collapse all");
  const tools = search ? h("div", { class: "tools" }, box, " ", status, " ", collapse) : null;
  const el = h("div", { class: "viewer" }, tools, h("div", { class: "split" }, outline.el, h("div", { class: "side" }, details, search ? results : null)));
  return { el, outline };
}

export function graphFacts(graph) {
  const subgraphs = graph.graphs.length - 1;
  return `${count(graph.nodes.name.length)} nodes in ${count(graph.modules.length)} modules` + (subgraphs ? `, ${subgraphs} subgraphs` : "");
}

export async function graphPage(main, [name, ref]) {
  document.title = `${name} ${ref} graph · pt2serde`;
  const ui = `/ui/models/${enc(name)}`;
  main.append(
    h("p", { class: "crumbs" }, link("/ui/", "Models"), " / ", link(ui, name), " / ", link(`${ui}/versions/${enc(ref)}`, ref), " / graph"),
    h("h1", null, `${name} ${/^\d+$/.test(ref) ? `v${ref}` : ref}: graph`),
  );
  // Marks split the first view into transfer (start to received), parse and drawing.
  performance.mark("graph-start");
  const text = await getText(`${versionPath(name, ref)}/graph`);
  performance.mark("graph-received");
  const graph = JSON.parse(text);
  performance.mark("graph-data");
  const { el, outline } = graphViewer(graph, { name: `${name} ${ref}` });
  main.append(h("p", { class: "muted", id: "facts" }, graphFacts(graph)), el);
  outline.render();
  // The first view is drawn once the rows are laid out in the page.
  await new Promise((resolve) => requestAnimationFrame(() => resolve()));
  performance.mark("graph-first-view");
}
