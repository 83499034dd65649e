// A program's graph as an outline of its module hierarchy, drawn a screenful at a time.
//
// A layered drawing of 50,000 nodes is what makes graph viewers freeze; here a module is one
// row that expands into its own nodes and child modules in execution order, edges are followed
// from a node's inputs and users (the detail panel), and only the rows in view exist in the
// DOM (fixed row height, a spacer gives the scroll height). Expanding a module rebuilds the list
// of visible rows (plain integer arrays), never the DOM of the rows out of view.
//
// The keyboard follows the WAI-ARIA tree pattern with a roving tabindex: one row, the active
// one, is the tree's tab stop. The active row is kept as its item (a node id, or a module as
// -(m + 1)), not as a DOM element, because its element exists only while it is in view; each
// drawing gives focus back to it, or to the tree itself while it is scrolled out of view.

import { h, clear, count, bytes, plural, shortOp, shortType } from "./dom.js";

const ROW = 22;
const OVERSCAN = 8;

export class Outline {
  constructor(graph, { marks = null, onSelect = null, onExpand = null, name = "graph" } = {}) {
    this.g = graph;
    this.marks = marks || new Map();
    this.onSelect = onSelect;
    this.onExpand = null;
    this.selected = -1;
    this.active = -1;
    this.activeRow = 0;
    this.expanded = new Uint8Array(graph.modules.length);
    this.expanded[0] = 1;
    this.index();
    this.el = h("div", { class: "outline", tabindex: "0", role: "tree", "aria-label": name });
    this.spacer = h("div", { class: "spacer" });
    this.layer = h("div", { class: "rows" });
    this.el.append(this.spacer, this.layer);
    this.el.addEventListener("scroll", () => this.schedule());
    this.el.addEventListener("click", (event) => this.click(event));
    this.el.addEventListener("keydown", (event) => this.key(event));
    // Tabbing into the tree while its active row is out of view brings the row back; focus that
    // a drawing parks on the tree (the row scrolled away) or a click on its scrollbar gives it
    // stays where the user scrolled.
    this.parking = false;
    this.el.addEventListener("pointerdown", () => {
      this.parking = true;
      setTimeout(() => {
        this.parking = false;
      });
    });
    this.el.addEventListener("focus", () => {
      if (!this.parking) this.focusRow(this.rowOf(this.active));
    });
    this.pending = false;
    this.flatten();
    // Told of the changes the user makes, not of the first drawing.
    this.onExpand = onExpand;
  }

  get size() {
    return this.g.nodes.name.length;
  }

  // Children of every module, own nodes and child modules merged in execution order; a child
  // module sorts at its first node, a subgraph's module right after the node that runs it.
  index() {
    const g = this.g;
    const modules = g.modules.length;
    const nodes = g.nodes;
    const own = Array.from({ length: modules }, () => []);
    for (let i = 0; i < nodes.module.length; i += 1) own[nodes.module[i]].push(i);
    const key = new Float64Array(modules).fill(Infinity);
    const subgraphs = new Map();
    for (let k = 0; k < g.graphs.length; k += 1) {
      const graph = g.graphs[k];
      if (graph.node < 0) continue;
      if (!subgraphs.has(graph.node)) subgraphs.set(graph.node, []);
      subgraphs.get(graph.node).push(k);
      key[graph.module] = graph.node + 0.5;
    }
    this.subgraphs = subgraphs;
    const pinned = new Uint8Array(modules);
    for (const graph of g.graphs) if (graph.node >= 0) pinned[graph.module] = 1;
    // Modules are listed parent first, so a reverse pass sees children before parents.
    for (let m = modules - 1; m >= 0; m -= 1) {
      if (!pinned[m] && own[m].length) key[m] = Math.min(key[m], own[m][0]);
      const parent = g.modules[m].parent;
      if (parent >= 0) key[parent] = Math.min(key[parent], key[m]);
    }
    const kids = Array.from({ length: modules }, () => []);
    for (let m = 1; m < modules; m += 1) kids[g.modules[m].parent].push(m);
    this.items = new Array(modules);
    for (let m = 0; m < modules; m += 1) {
      const mods = kids[m].sort((a, b) => key[a] - key[b] || a - b);
      const mine = own[m];
      const out = new Array(mine.length + mods.length);
      let i = 0;
      let j = 0;
      let n = 0;
      while (i < mine.length || j < mods.length) {
        if (j >= mods.length || (i < mine.length && mine[i] < key[mods[j]])) out[n++] = mine[i++];
        else out[n++] = -(mods[j++] + 1);
      }
      this.items[m] = out;
    }
    // How many marked nodes each module holds, to flag the collapsed ones that changed.
    this.marked = new Int32Array(modules);
    for (const id of this.marks.keys()) {
      for (let m = nodes.module[id]; m >= 0; m = g.modules[m].parent) this.marked[m] += 1;
    }
  }

  flatten() {
    const rows = [];
    const depths = [];
    const stack = [[0, -1, 0]];
    while (stack.length) {
      const top = stack[stack.length - 1];
      const [m, at, depth] = top;
      if (at < 0) {
        rows.push(-(m + 1));
        depths.push(depth);
        top[1] = 0;
        if (!this.expanded[m]) stack.pop();
        continue;
      }
      const items = this.items[m];
      if (at >= items.length) {
        stack.pop();
        continue;
      }
      top[1] = at + 1;
      const item = items[at];
      if (item >= 0) {
        rows.push(item);
        depths.push(depth + 1);
      } else {
        stack.push([-item - 1, -1, depth + 1]);
      }
    }
    this.rows = rows;
    this.depths = depths;
    // A collapse can hide the active row: its nearest shown ancestor takes its place.
    let m = this.active >= 0 ? this.g.nodes.module[this.active] : -this.active - 1;
    if (this.active >= 0 && this.rowOf(this.active) < 0) this.active = -(m + 1);
    while (this.rowOf(this.active) < 0) {
      m = this.g.modules[m].parent;
      this.active = -(m + 1);
    }
    this.spacer.style.height = `${rows.length * ROW}px`;
    // A short outline is as tall as its rows; a long one fills most of the window.
    const full = rows.length * ROW + 2;
    this.el.style.height = full < window.innerHeight * 0.6 ? `${Math.max(full, 5 * ROW)}px` : "";
    this.render();
    if (this.onExpand) this.onExpand();
  }

  // The row showing `item`, or -1 while it is hidden in a collapsed module.
  rowOf(item) {
    if (this.rows[this.activeRow] !== item) this.activeRow = this.rows.indexOf(item);
    return this.activeRow;
  }

  schedule() {
    if (this.pending) return;
    this.pending = true;
    requestAnimationFrame(() => {
      this.pending = false;
      this.render();
    });
  }

  render() {
    const top = this.el.scrollTop;
    const height = this.el.clientHeight || 600;
    const first = Math.max(0, Math.floor(top / ROW) - OVERSCAN);
    const last = Math.min(this.rows.length, Math.ceil((top + height) / ROW) + OVERSCAN);
    const focused = this.el.contains(document.activeElement);
    const at = this.rowOf(this.active);
    const fragment = document.createDocumentFragment();
    for (let r = first; r < last; r += 1) fragment.append(this.row(r, r === at));
    clear(this.layer).append(fragment);
    const drawn = at >= first && at < last;
    this.el.tabIndex = drawn ? -1 : 0;
    if (!focused) return;
    if (drawn) {
      this.layer.querySelector(`[data-row="${at}"]`).focus({ preventScroll: true });
    } else {
      this.parking = true;
      this.el.focus({ preventScroll: true });
      this.parking = false;
    }
  }

  row(r, active) {
    const item = this.rows[r];
    const indent = h("span", { class: "indent" });
    indent.style.width = `${this.depths[r] * 16}px`;
    let el;
    if (item < 0) el = this.moduleRow(-item - 1, indent);
    else el = this.nodeRow(item, indent);
    el.dataset.row = String(r);
    el.style.top = `${r * ROW}px`;
    el.tabIndex = active ? 0 : -1;
    el.setAttribute("aria-level", String(this.depths[r] + 1));
    return el;
  }

  moduleRow(m, indent) {
    const info = this.g.modules[m];
    const open = this.expanded[m] === 1;
    const name = m === 0 ? "<root>" : info.path.slice(info.path.lastIndexOf(".") + 1);
    const marked = this.marked[m];
    return h(
      "div",
      {
        class: `row module${info.kind === "subgraph" ? " subgraph" : ""}${marked ? " has-marks" : ""}`,
        role: "treeitem",
        "aria-expanded": open ? "true" : "false",
        title: info.path || "<root>",
        dataset: { module: String(m), path: info.path },
      },
      indent,
      h("span", { class: "toggle" }, open ? "▾" : "▸"),
      h("span", { class: "mname" }, name),
      h("span", { class: "mtype" }, info.kind === "subgraph" ? "subgraph" : shortType(info.type)),
      h("span", { class: "mcount" }, plural(info.total_nodes, "node")),
      info.parameters ? h("span", { class: "mparams" }, `${count(info.parameters)} params · ${bytes(info.parameter_bytes)}`) : null,
      marked ? h("span", { class: "mmarks" }, plural(marked, "change")) : null,
    );
  }

  nodeRow(id, indent) {
    const n = this.g.nodes;
    const mark = this.marks.get(id);
    const subs = this.subgraphs.get(id) || [];
    return h(
      "div",
      {
        class: `row node${mark ? ` mark-${mark}` : ""}${id === this.selected ? " selected" : ""}`,
        role: "treeitem",
        "aria-selected": id === this.selected ? "true" : "false",
        dataset: { node: String(id), name: n.name[id] },
      },
      indent,
      h("span", { class: "op" }, shortOp(n.target[id])),
      h("span", { class: "nname" }, n.name[id]),
      h("span", { class: "meta" }, n.dtype[id] ? `${n.dtype[id]}${n.shape[id]}` : ""),
      // Not tab stops of their own: Right on the node enters its first subgraph.
      subs.map((k) => h("button", { class: "sublink", type: "button", tabindex: "-1", dataset: { graph: String(k) } }, `→ ${this.g.graphs[k].name}`)),
      mark ? h("span", { class: "badge" }, mark) : null,
    );
  }

  click(event) {
    const sub = event.target.closest("button.sublink");
    if (sub) {
      this.revealModule(this.g.graphs[Number(sub.dataset.graph)].module, true);
      return;
    }
    const row = event.target.closest(".row");
    if (!row) return;
    this.activate(Number(row.dataset.row));
  }

  // What a click, Enter or Space does to a row: a module opens or closes, a node is selected.
  activate(r) {
    const item = this.rows[r];
    this.active = item;
    this.activeRow = r;
    if (item < 0) this.toggle(-item - 1);
    else this.select(item);
  }

  key(event) {
    if (event.altKey || event.ctrlKey || event.metaKey) return;
    const r = this.rowOf(this.active);
    const item = this.rows[r];
    const last = this.rows.length - 1;
    let to = null;
    if (event.key === "ArrowDown") to = Math.min(r + 1, last);
    else if (event.key === "ArrowUp") to = Math.max(r - 1, 0);
    else if (event.key === "Home") to = 0;
    else if (event.key === "End") to = last;
    else if (event.key === "Enter" || event.key === " ") this.activate(r);
    else if (event.key === "ArrowRight") {
      if (item < 0 && !this.expanded[-item - 1]) this.toggle(-item - 1);
      else if (item < 0 && r < last && this.depths[r + 1] > this.depths[r]) to = r + 1;
      else if (item >= 0 && this.subgraphs.has(item)) {
        const m = this.g.graphs[this.subgraphs.get(item)[0]].module;
        this.revealModule(m, true);
        to = this.rowOf(-(m + 1));
      }
    } else if (event.key === "ArrowLeft") {
      if (item < 0 && this.expanded[-item - 1]) this.toggle(-item - 1);
      else {
        to = r;
        while (to > 0 && this.depths[to] >= this.depths[r]) to -= 1;
      }
    } else return;
    event.preventDefault();
    if (to !== null) this.focusRow(to);
  }

  // Makes row r the active one, scrolled just into view, and gives it focus.
  focusRow(r) {
    this.active = this.rows[r];
    this.activeRow = r;
    const height = this.el.clientHeight || 600;
    const y = r * ROW;
    if (y < this.el.scrollTop) this.el.scrollTop = y;
    else if (y + ROW > this.el.scrollTop + height) this.el.scrollTop = y + ROW - height;
    this.render();
  }

  toggle(m) {
    this.expanded[m] ^= 1;
    this.flatten();
  }

  collapseAll() {
    this.expanded.fill(0);
    this.expanded[0] = 1;
    this.flatten();
  }

  // Paths of the open modules, the root's being "".
  openPaths() {
    const paths = [];
    for (let m = 0; m < this.expanded.length; m += 1) if (this.expanded[m]) paths.push(this.g.modules[m].path);
    return paths;
  }

  setOpen(paths) {
    const wanted = new Set(paths);
    for (let m = 0; m < this.expanded.length; m += 1) this.expanded[m] = wanted.has(this.g.modules[m].path) ? 1 : 0;
    this.flatten();
  }

  // A node's name, which a subgraph's node carries after its subgraph's (names are unique in a
  // graph, not across a program's graphs), and back.
  nodeKey(id) {
    const graph = this.g.graphs[this.g.nodes.graph[id]].name;
    return graph ? `${graph}/${this.g.nodes.name[id]}` : this.g.nodes.name[id];
  }

  nodeByKey(key) {
    if (!this.keys) this.keys = new Map(this.g.nodes.name.map((_, id) => [this.nodeKey(id), id]));
    return this.keys.get(key) ?? -1;
  }

  expandAncestors(m) {
    for (let at = m; at >= 0; at = this.g.modules[at].parent) this.expanded[at] = 1;
  }

  revealModule(m, open = false) {
    this.expandAncestors(this.g.modules[m].parent);
    if (open) this.expanded[m] = 1;
    this.flatten();
    this.scrollTo(this.rows.indexOf(-(m + 1)));
  }

  reveal(id) {
    this.expandAncestors(this.g.nodes.module[id]);
    this.flatten();
    this.select(id);
    this.scrollTo(this.rows.indexOf(id));
  }

  // Expands exactly the modules holding marked nodes (a diff's changes).
  revealMarks() {
    for (const id of this.marks.keys()) this.expandAncestors(this.g.nodes.module[id]);
    this.flatten();
  }

  scrollTo(r) {
    if (r < 0) return;
    const height = this.el.clientHeight || 600;
    const y = r * ROW;
    if (y < this.el.scrollTop || y > this.el.scrollTop + height - ROW) {
      this.el.scrollTop = Math.max(0, y - height / 2);
    }
    this.render();
  }

  select(id) {
    this.selected = id;
    this.active = id;
    this.render();
    if (this.onSelect) this.onSelect(id);
  }

  unselect() {
    this.selected = -1;
    this.render();
  }

  // Nodes whose name or operator contains the text (case-insensitive), in node order.
  search(text, limit = 200) {
    const q = text.trim().toLowerCase();
    if (!q) return [];
    if (!this.lower) {
      const n = this.g.nodes;
      this.lower = n.name.map((name, i) => `${name}\u0000${n.target[i]}`.toLowerCase());
    }
    const found = [];
    for (let i = 0; i < this.lower.length && found.length < limit; i += 1) {
      if (this.lower[i].includes(q)) found.push(i);
    }
    return found;
  }

  // Producer and users of values, one map per graph (value names are unique in a graph, not
  // across a program's graphs), each built on first use: the drawn graph needs producers at
  // once, the users only a node's details do.
  producer(id, value) {
    if (!this.defs) {
      const n = this.g.nodes;
      this.defs = this.g.graphs.map(() => new Map());
      for (let i = 0; i < n.name.length; i += 1) for (const value of n.outputs[i]) this.defs[n.graph[i]].set(value, i);
    }
    return this.defs[this.g.nodes.graph[id]].get(value);
  }

  users(id) {
    if (!this.uses) {
      const n = this.g.nodes;
      this.uses = this.g.graphs.map(() => new Map());
      for (let i = 0; i < n.name.length; i += 1) {
        const uses = this.uses[n.graph[i]];
        for (const value of n.inputs[i]) {
          if (!uses.has(value)) uses.set(value, []);
          uses.get(value).push(i);
        }
      }
    }
    const uses = this.uses[this.g.nodes.graph[id]];
    const out = new Set();
    for (const value of this.g.nodes.outputs[id]) for (const user of uses.get(value) || []) out.add(user);
    return [...out];
  }

  // A node's details, its inputs and users as links that reveal them.
  details(id) {
    const n = this.g.nodes;
    const module = this.g.modules[n.module[id]];
    const graph = this.g.graphs[n.graph[id]];
    const jump = (other) =>
      h("button", { class: "jump", type: "button", onclick: () => this.reveal(other) }, n.name[other]);
    return h(
      "div",
      { class: "details" },
      h("h3", null, n.name[id]),
      h(
        "dl",
        null,
        h("dt", null, "operator"),
        h("dd", null, h("code", null, n.target[id])),
        h("dt", null, "output"),
        h("dd", null, n.dtype[id] ? `${n.dtype[id]} ${n.shape[id]}` : "(no tensor)"),
        h("dt", null, "module"),
        h("dd", null, module.path || "<root>"),
        h("dt", null, "graph"),
        h("dd", null, graph.name || "(program)", ` · position ${n.position[id]}`),
        h("dt", null, "inputs"),
        h(
          "dd",
          null,
          n.inputs[id].length
            ? n.inputs[id].map((value) => {
                const from = this.producer(id, value);
                return from === undefined ? h("span", { class: "value" }, value) : jump(from);
              })
            : "none",
        ),
        h("dt", null, "used by"),
        h("dd", null, this.users(id).map(jump)),
      ),
    );
  }
}
