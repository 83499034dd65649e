// A program's graph drawn as boxes and edges, beside the outline and sharing its state.
//
// The outline (outline.js) owns what is open and what is selected; this drawing follows it, so
// a module opened, a node selected or a search made in one shows in the other. Each open module
// is laid out on its own, in a web worker (worker/layout.js, ELK's layered algorithm): its
// direct items (own nodes, child modules as one box when closed or as the size of their own
// layout when open) and the edges between them. An edge belongs to the layout of the lowest
// module holding both its ends, lifted to the items of that module, so opening a module costs
// the layouts of it and of its ancestors, never the whole program: a 50,000-node program's first
// drawing is the root's few top-level modules. Only what is in view (and half a view around it)
// is in the SVG; panning within that band moves one transform.

import { clear, h, plural, shortType } from "./dom.js";

const SVG = "http://www.w3.org/2000/svg";
const WORKER = "/ui/static/build/layout-worker.js";
const NODE_H = 26;
const BOX_H = 44;
const CHAR = 7;
// Above this many items in view, nodes are drawn without their text (a text element each is
// most of a drawing's cost, and unreadable at the scale that shows that many).
const TEXT_ITEMS = 2500;
const MINI_W = 200;
const MINI_H = 140;

// Gives the browser its turn (input, painting) between slices of work on a large program, so that
// no task runs long: the issue's bound is 200 ms, a slice here is about 30.
export function nextTask() {
  return new Promise((resolve) => setTimeout(resolve, 0));
}

function layoutWorker() {
  const worker = new Worker(WORKER);
  worker.failure = new Promise((resolve) =>
    worker.addEventListener("error", (event) => {
      event.preventDefault();
      resolve();
    }),
  );
  return worker;
}

let spare = null;

// Loading the worker's script and starting ELK take most of a second: a page that will draw a
// graph starts its worker while the graph is still being fetched.
export function prestartLayout() {
  if (!spare) spare = layoutWorker();
}

function el(tag, attrs, text) {
  const node = document.createElementNS(SVG, tag);
  for (const [key, value] of Object.entries(attrs)) node.setAttribute(key, String(value));
  if (text !== undefined) node.textContent = text;
  return node;
}

// An operator as a box shows it: `aten.linear.default` reads `linear`.
export function opLabel(target) {
  const short = target.startsWith("torch.ops.") ? target.slice(10) : target;
  const parts = short.split(".");
  if (parts.length === 3 && parts[0] === "aten") return parts[2] === "default" ? parts[1] : `${parts[1]}.${parts[2]}`;
  return short;
}

export class Drawing {
  constructor(outline, { name = "graph" } = {}) {
    this.o = outline;
    this.g = outline.g;
    this.layouts = new Map();
    this.settled = new Map();
    this.jobs = new Map();
    this.job = 0;
    this.generation = 0;
    this.known = outline.expanded.slice();
    this.view = { x: 0, y: 0, k: 1 };
    this.peers = [];
    this.scene = null;
    this.window = null;
    this.wanted = null;
    this.clicked = -1;
    this.status = h("p", { class: "drawing-status muted", role: "status" }, "Laying out…");
    this.svg = el("svg", { class: "canvas", role: "img", "aria-label": `${name}: drawn graph` });
    this.layer = el("g", { class: "scene" });
    this.svg.append(this.layer);
    this.mini = h("canvas", { class: "minimap", width: MINI_W, height: MINI_H, "aria-label": "minimap: click to move there" });
    this.el = h(
      "div",
      {
        class: "drawing",
        tabindex: "0",
        role: "region",
        "aria-label": `${name}: drawn graph. Arrows pan, + and - zoom, 0 fits, drag to pan, wheel to zoom.`,
        dataset: { state: "layout" },
      },
      this.svg,
      this.mini,
      this.status,
    );
    this.ready = new Promise((resolve) => {
      this.drawn = resolve;
    });
    this.pointer();
    this.el.addEventListener("keydown", (event) => this.key(event));
    this.mini.addEventListener("pointerdown", (event) => this.miniMove(event));
    this.mini.addEventListener("pointermove", (event) => event.buttons && this.miniMove(event));
  }

  // Starts the worker and the first layout, once the drawing is in the page.
  async start() {
    this.worker = spare || layoutWorker();
    spare = null;
    this.worker.onmessage = (event) => this.answer(event.data);
    this.worker.failure.then(() =>
      this.fail(
        `The layout worker (${WORKER}) did not load: the service runs without its built UI bundle. ` +
          "`make run` builds it (npm ci && npm run build in app/ui).",
      ),
    );
    await this.index();
    this.indexed = true;
    this.layoutAll();
    // A pane that changes size (the window, a scrollbar coming or going) keeps its middle.
    let size = null;
    new ResizeObserver(() => {
      const now = [this.svg.clientWidth, this.svg.clientHeight];
      if (size && this.scene && (now[0] !== size[0] || now[1] !== size[1])) {
        const { x, y, k } = this.view;
        this.view = { k, x: x + (now[0] - size[0]) / 2, y: y + (now[1] - size[1]) / 2 };
        this.render(true);
      }
      size = now;
    }).observe(this.svg);
  }

  // The drawing stops for good: a worker that did not load never answers.
  fail(text) {
    this.failed = true;
    this.el.dataset.state = "error";
    this.status.textContent = text;
    this.status.classList.add("error");
  }

  // Each edge (a value from its producer to a user) under the lowest module holding both ends,
  // in slices of the nodes with the browser's turn between them.
  async index() {
    await nextTask();
    const g = this.g;
    const n = g.nodes;
    const modules = g.modules.length;
    this.depth = new Int32Array(modules);
    for (let m = 1; m < modules; m += 1) this.depth[m] = this.depth[g.modules[m].parent] + 1;
    this.edges = Array.from({ length: modules }, () => []);
    let slice = performance.now();
    for (let i = 0; i < n.name.length; i += 1) {
      for (const value of n.inputs[i]) {
        const from = this.o.producer(i, value);
        if (from !== undefined) this.addEdge(from, i);
      }
      if ((i & 1023) === 0 && performance.now() - slice > 30) {
        await nextTask();
        slice = performance.now();
      }
    }
    // A higher-order operator's node runs its subgraphs: drawn as an edge into their modules.
    for (const graph of g.graphs) if (graph.node >= 0) this.addEdge(graph.node, -(graph.module + 1));
    // Marked nodes per module, by kind, to colour a closed module wholly added or removed.
    this.kinds = { added: new Int32Array(modules), removed: new Int32Array(modules) };
    for (const [id, mark] of this.o.marks) {
      const counts = this.kinds[mark];
      if (counts) for (let m = n.module[id]; m >= 0; m = g.modules[m].parent) counts[m] += 1;
    }
  }

  // The module an item sits in: a node's own module, a module's parent.
  home(item) {
    return item >= 0 ? this.g.nodes.module[item] : this.g.modules[-item - 1].parent;
  }

  addEdge(a, b) {
    let x = this.home(a);
    let y = this.home(b);
    const parent = (m) => this.g.modules[m].parent;
    while (this.depth[x] > this.depth[y]) x = parent(x);
    while (this.depth[y] > this.depth[x]) y = parent(y);
    while (x !== y) {
      x = parent(x);
      y = parent(y);
    }
    if (x >= 0) this.edges[x].push(a, b);
  }

  // The item of module m that holds `item` (itself, or the child module it is inside).
  lift(item, m) {
    if (item >= 0 && this.g.nodes.module[item] === m) return item;
    let at = item >= 0 ? this.g.nodes.module[item] : -item - 1;
    while (this.g.modules[at].parent !== m) at = this.g.modules[at].parent;
    return -(at + 1);
  }

  // Called by the viewer when the outline opened or closed modules: every module above one
  // that changed has a new size and is laid out again.
  expanded() {
    const now = this.o.expanded;
    let changed = false;
    for (let m = 0; m < now.length; m += 1) {
      if (now[m] === this.known[m]) continue;
      changed = true;
      for (let up = this.g.modules[m].parent; up >= 0; up = this.g.modules[up].parent) {
        this.layouts.delete(up);
        this.settled.delete(up);
      }
    }
    this.known = now.slice();
    if (changed && this.indexed) this.layoutAll();
  }

  async layoutAll() {
    if (this.failed) return;
    const generation = (this.generation += 1);
    this.el.dataset.state = "layout";
    // Shown only when a layout takes long enough to notice.
    const notice = setTimeout(() => this.el.dataset.state === "layout" && this.status.classList.add("shown"), 300);
    try {
      if (this.o.expanded[0]) await this.layout(0);
    } catch (err) {
      this.fail(`Layout failed: ${err.message}`);
      return;
    } finally {
      clearTimeout(notice);
    }
    if (generation !== this.generation || this.failed) return;
    this.status.classList.remove("shown");
    this.scene = this.compose();
    if (!this.shown) {
      this.shown = true;
      this.initialView();
    }
    this.el.dataset.state = "ready";
    if (this.wanted !== null) this.center(this.wanted);
    this.render(true);
    this.drawn();
  }

  // Module m's layout, after its open child modules' (their sizes are its items' sizes).
  layout(m) {
    let pending = this.layouts.get(m);
    if (pending) return pending;
    pending = (async () => {
      const items = this.o.items[m];
      const open = items.filter((item) => item < 0 && this.o.expanded[-item - 1]);
      const inner = await Promise.all(open.map((item) => this.layout(-item - 1)));
      const sizes = new Float32Array(2 * items.length);
      const at = new Map();
      items.forEach((item, k) => {
        at.set(item, k);
        const [w, hgt] = this.size(item, inner[open.indexOf(item)]);
        sizes[2 * k] = w;
        sizes[2 * k + 1] = hgt;
      });
      const pairs = [];
      const seen = new Set();
      const mine = this.edges[m];
      for (let e = 0; e < mine.length; e += 2) {
        const a = at.get(this.lift(mine[e], m));
        const b = at.get(this.lift(mine[e + 1], m));
        if (a === b || seen.has(a * items.length + b)) continue;
        seen.add(a * items.length + b);
        pairs.push(a, b);
      }
      const edges = Int32Array.from(pairs);
      const done = await this.post({ sizes, edges });
      // A frame is at least as wide as its title.
      done.width = Math.max(done.width, this.frameTitle(m).length * CHAR + 24);
      // A layout asked for before a change it did not see is dropped, not kept.
      if (this.layouts.get(m) === pending) this.settled.set(m, done);
      return done;
    })();
    this.layouts.set(m, pending);
    return pending;
  }

  size(item, inner) {
    if (inner) return [inner.width, inner.height];
    if (item >= 0) return [Math.min(240, Math.max(64, opLabel(this.g.nodes.target[item]).length * CHAR + 20)), NODE_H];
    const [name, sub] = this.boxText(-item - 1);
    return [Math.min(280, Math.max(110, Math.max(name.length, sub.length) * CHAR + 24)), BOX_H];
  }

  boxText(m) {
    const info = this.g.modules[m];
    const name = info.path.slice(info.path.lastIndexOf(".") + 1) || "<root>";
    const kind = info.kind === "subgraph" ? "subgraph" : shortType(info.type);
    return [name, `${kind}${kind ? " · " : ""}${plural(info.total_nodes, "node")}`];
  }

  frameTitle(m) {
    const [name, sub] = this.boxText(m);
    return `▾ ${name} · ${sub}`;
  }

  // How a module's marks colour it: wholly added or removed, or holding some change.
  markClass(m) {
    const marked = this.o.marked[m];
    const total = this.g.modules[m].total_nodes;
    if (!marked) return "";
    if (this.kinds.added[m] === total) return " mark-added";
    if (this.kinds.removed[m] === total) return " mark-removed";
    return " has-marks";
  }

  post(job) {
    const id = (this.job += 1);
    return new Promise((resolve, reject) => {
      this.jobs.set(id, { resolve, reject });
      this.worker.postMessage({ job: id, ...job }, [job.sizes.buffer, job.edges.buffer]);
    });
  }

  answer(data) {
    const job = this.jobs.get(data.job);
    this.jobs.delete(data.job);
    if (data.error) job.reject(new Error(data.error));
    else job.resolve(data);
  }

  // Absolute places of everything open, from the per-module layouts (all settled by now).
  compose() {
    const scene = { frames: [], boxes: [], nodes: [], lines: [], where: new Map() };
    const walk = (m, ox, oy) => {
      const layout = this.settled.get(m);
      const frame = { item: -(m + 1), x: ox, y: oy, w: layout.width, h: layout.height, depth: this.depth[m] };
      scene.frames.push(frame);
      scene.where.set(frame.item, frame);
      const items = this.o.items[m];
      for (let k = 0; k < items.length; k += 1) {
        const item = items[k];
        const x = ox + layout.xy[2 * k];
        const y = oy + layout.xy[2 * k + 1];
        if (item < 0 && this.o.expanded[-item - 1]) {
          walk(-item - 1, x, y);
          continue;
        }
        const [w, hgt] = this.size(item);
        const shape = { item, x, y, w, h: hgt };
        scene.where.set(item, shape);
        (item >= 0 ? scene.nodes : scene.boxes).push(shape);
      }
      for (let e = 0; e + 1 < layout.offsets.length; e += 1) {
        const points = [];
        let [x0, y0, x1, y1] = [Infinity, Infinity, -Infinity, -Infinity];
        for (let p = layout.offsets[e]; p < layout.offsets[e + 1]; p += 1) {
          const x = ox + layout.points[2 * p];
          const y = oy + layout.points[2 * p + 1];
          points.push(x, y);
          [x0, y0, x1, y1] = [Math.min(x0, x), Math.min(y0, y), Math.max(x1, x), Math.max(y1, y)];
        }
        scene.lines.push({ points, x: x0, y: y0, w: x1 - x0, h: y1 - y0 });
      }
    };
    if (this.o.expanded[0]) walk(0, 0, 0);
    else {
      const [w, hgt] = this.size(-1);
      const root = { item: -1, x: 0, y: 0, w, h: hgt };
      scene.boxes.push(root);
      scene.where.set(-1, root);
    }
    const top = scene.frames[0] || scene.boxes[0];
    scene.width = top.w;
    scene.height = top.h;
    this.paintMini(scene);
    return scene;
  }

  // ---- the view: screen = world * k + (x, y)

  viewport() {
    const w = this.svg.clientWidth || 800;
    const hgt = this.svg.clientHeight || 600;
    const { x, y, k } = this.view;
    return { x: -x / k, y: -y / k, w: w / k, h: hgt / k, sw: w, sh: hgt };
  }

  initialView() {
    const { sw, sh } = this.viewport();
    const { width, height } = this.scene;
    let k = Math.min(1, (sw - 20) / width, (sh - 20) / height);
    // A tall drawing (a stack of many blocks) opens at a readable scale, at its top.
    if (k < 0.4) k = Math.min(1, (sw - 20) / width);
    this.view = { k, x: Math.max(10, (sw - width * k) / 2), y: 10 };
  }

  fit() {
    const { sw, sh } = this.viewport();
    const { width, height } = this.scene;
    const k = Math.min(2, (sw - 20) / width, (sh - 20) / height);
    this.setView({ k, x: (sw - width * k) / 2, y: (sh - height * k) / 2 }, true);
  }

  setView(view, user) {
    const before = this.view;
    this.view = view;
    this.render(false);
    if (!user) return;
    // The change as a map of the screen onto itself (scale f, then shift), which the peers apply.
    const f = view.k / before.k;
    const shift = { f, x: view.x - before.x * f, y: view.y - before.y * f };
    for (const peer of this.peers) peer.follow(shift);
  }

  pan(dx, dy) {
    const { x, y, k } = this.view;
    this.setView({ x: x + dx, y: y + dy, k }, true);
  }

  zoom(factor, cx, cy) {
    const { x, y, k } = this.view;
    const to = Math.min(4, Math.max(0.02, k * factor));
    const f = to / k;
    this.setView({ k: to, x: cx - (cx - x) * f, y: cy - (cy - y) * f }, true);
  }

  // Two drawings of a diff move together: a peer's pan or zoom moves this one as much.
  link(other) {
    this.peers.push(other);
    other.peers.push(this);
  }

  follow({ f, x, y }) {
    if (!this.scene) return;
    const view = this.view;
    this.setView({ k: view.k * f, x: view.x * f + x, y: view.y * f + y }, false);
  }

  // Brings an item (a node, or a module's box or frame) to the middle; a node at a readable
  // scale. Waits for the layout under way, if any.
  center(item) {
    // Centred once the layout under way is drawn; a module's item -1 is the root's, so "none"
    // is null.
    this.wanted = item;
    if (this.el.dataset.state !== "ready") return;
    const shape = this.scene.where.get(item);
    this.wanted = null;
    if (!shape) return;
    const { sw, sh } = this.viewport();
    let { k } = this.view;
    if (item >= 0 && k < 0.6) k = 1;
    // A module larger than the pane shows its top left corner (its title), else its middle.
    const x = shape.w * k > sw - 40 ? 20 - shape.x * k : sw / 2 - (shape.x + shape.w / 2) * k;
    const y = shape.h * k > sh - 40 ? 20 - shape.y * k : sh / 2 - (shape.y + shape.h / 2) * k;
    // Not passed on to peers: each side of a diff centres on its own counterpart.
    this.setView({ k, x, y }, false);
  }

  visible(item) {
    const shape = this.scene && this.scene.where.get(item);
    if (!shape) return false;
    const v = this.viewport();
    return shape.x >= v.x && shape.y >= v.y && shape.x + shape.w <= v.x + v.w && shape.y + shape.h <= v.y + v.h;
  }

  // The selected node, drawn as such, and brought to the middle: a search, a link in the
  // details or a diff's next change moves there; a click in the drawing itself moves nothing.
  select(id) {
    this.selected = id;
    const clicked = this.clicked === id;
    this.clicked = -1;
    if (!clicked || !this.visible(id)) this.center(id);
    if (this.el.dataset.state === "ready") this.render(true);
  }

  // ---- drawing what is in view

  render(force) {
    if (!this.scene) return;
    const v = this.viewport();
    const { x, y, k } = this.view;
    this.layer.setAttribute("transform", `translate(${x} ${y}) scale(${k})`);
    this.el.dataset.view = `${x.toFixed(1)},${y.toFixed(1)},${k.toFixed(4)}`;
    this.paintView();
    const band = this.window;
    const inside = band && v.x >= band.x && v.y >= band.y && v.x + v.w <= band.x + band.w && v.y + v.h <= band.y + band.h;
    if (!force && inside && k >= band.k / 2 && k <= band.k * 2) return;
    this.window = { x: v.x - v.w / 2, y: v.y - v.h / 2, w: v.w * 2, h: v.h * 2, k };
    this.draw(this.window);
  }

  draw(band) {
    const scene = this.scene;
    const meets = (s) => s.x < band.x + band.w && s.x + s.w > band.x && s.y < band.y + band.h && s.y + s.h > band.y;
    const frames = scene.frames.filter(meets);
    const boxes = scene.boxes.filter(meets);
    const nodes = scene.nodes.filter(meets);
    const text = boxes.length + nodes.length <= TEXT_ITEMS && band.k >= 0.25;
    const out = document.createDocumentFragment();
    for (const frame of frames) out.append(this.frameEl(frame, text));
    let d = "";
    for (const line of scene.lines) {
      if (!meets(line)) continue;
      const p = line.points;
      d += `M${p[0]} ${p[1]}`;
      for (let i = 2; i < p.length; i += 2) d += `L${p[i]} ${p[i + 1]}`;
    }
    out.append(el("path", { class: "edges", d }));
    for (const box of boxes) out.append(this.boxEl(box, text));
    for (const node of nodes) out.append(this.nodeEl(node, text));
    clear(this.layer).append(out);
    this.el.dataset.drawn = String(nodes.length + boxes.length);
  }

  frameEl(frame, text) {
    const m = -frame.item - 1;
    const info = this.g.modules[m];
    const group = el("g", {
      class: `gframe depth-${frame.depth % 2}${info.kind === "subgraph" ? " subgraph" : ""}${this.markClass(m)}`,
      "data-module": m,
      "data-path": info.path,
      transform: `translate(${frame.x} ${frame.y})`,
    });
    group.append(el("rect", { width: frame.w, height: frame.h, rx: 4 }));
    group.append(el("title", {}, info.path || "<root>"));
    if (text) group.append(el("text", { class: "title", x: 10, y: 19 }, this.frameTitle(m)));
    return group;
  }

  boxEl(box, text) {
    const m = -box.item - 1;
    const info = this.g.modules[m];
    const marked = this.o.marked[m];
    const group = el("g", {
      class: `gmodule${info.kind === "subgraph" ? " subgraph" : ""}${this.markClass(m)}`,
      "data-module": m,
      "data-path": info.path,
      transform: `translate(${box.x} ${box.y})`,
    });
    group.append(el("rect", { width: box.w, height: box.h, rx: 4 }), el("title", {}, info.path || "<root>"));
    if (text) {
      const [name, sub] = this.boxText(m);
      group.append(el("text", { x: 10, y: 18 }, `▸ ${name}`), el("text", { class: "sub", x: 10, y: 35 }, marked ? `${sub} · ${plural(marked, "change")}` : sub));
    }
    return group;
  }

  nodeEl(node, text) {
    const id = node.item;
    const mark = this.o.marks.get(id);
    const group = el("g", {
      class: `gnode${mark ? ` mark-${mark}` : ""}${id === this.selected ? " selected" : ""}`,
      "data-node": id,
      "data-name": this.g.nodes.name[id],
      transform: `translate(${node.x} ${node.y})`,
    });
    group.append(el("rect", { width: node.w, height: node.h, rx: 3 }));
    if (text) group.append(el("text", { x: 8, y: 17 }, opLabel(this.g.nodes.target[id])));
    return group;
  }

  // ---- the minimap: everything laid out, and the part in view

  paintMini(scene) {
    const base = document.createElement("canvas");
    const s = Math.min(MINI_W / scene.width, MINI_H / scene.height);
    // As large as the drawing's shape needs, so that it hides no more of the drawing than that.
    base.width = this.mini.width = Math.max(40, Math.ceil(scene.width * s));
    base.height = this.mini.height = Math.max(30, Math.ceil(scene.height * s));
    const ctx = base.getContext("2d");
    this.miniScale = s;
    const styles = getComputedStyle(this.el);
    const colour = (name, fallback) => styles.getPropertyValue(name).trim() || fallback;
    ctx.fillStyle = colour("--soft", "#f6f7f9");
    ctx.fillRect(0, 0, scene.width * s, scene.height * s);
    ctx.strokeStyle = colour("--line", "#e3e6ec");
    for (const f of scene.frames) ctx.strokeRect(f.x * s, f.y * s, f.w * s, f.h * s);
    const fills = { added: colour("--added-fg", "#1a7f37"), removed: colour("--removed-fg", "#b42318"), changed: colour("--changed-fg", "#9a6700") };
    ctx.fillStyle = "#98a2b3";
    for (const b of scene.boxes) ctx.fillRect(b.x * s, b.y * s, Math.max(1, b.w * s), Math.max(1, b.h * s));
    for (const n of scene.nodes) {
      const mark = this.o.marks.get(n.item);
      ctx.fillStyle = mark ? fills[mark] : "#98a2b3";
      // A change stays visible on the minimap however small its node is there.
      const least = mark ? 3 : 1;
      ctx.fillRect(n.x * s, n.y * s, Math.max(least, n.w * s), Math.max(least, n.h * s));
    }
    this.miniBase = base;
  }

  paintView() {
    if (!this.miniBase) return;
    const ctx = this.mini.getContext("2d");
    ctx.clearRect(0, 0, this.mini.width, this.mini.height);
    ctx.drawImage(this.miniBase, 0, 0);
    const v = this.viewport();
    const s = this.miniScale;
    ctx.strokeStyle = "#2f5bd3";
    ctx.lineWidth = 2;
    ctx.strokeRect(v.x * s, v.y * s, v.w * s, v.h * s);
  }

  miniMove(event) {
    if (!this.scene) return;
    event.preventDefault();
    const r = this.mini.getBoundingClientRect();
    const s = (this.miniScale * r.width) / this.mini.width;
    const wx = (event.clientX - r.left) / s;
    const wy = (event.clientY - r.top) / s;
    const { sw, sh } = this.viewport();
    const { k } = this.view;
    this.setView({ k, x: sw / 2 - wx * k, y: sh / 2 - wy * k }, true);
  }

  // ---- input: drag pans, the wheel zooms, a click opens a module or selects a node

  pointer() {
    let start = null;
    this.svg.addEventListener("pointerdown", (event) => {
      if (event.button !== 0) return;
      start = { x: event.clientX, y: event.clientY, moved: false, id: event.pointerId };
    });
    this.svg.addEventListener("pointermove", (event) => {
      if (!start || !event.buttons) return;
      const dx = event.clientX - start.x;
      const dy = event.clientY - start.y;
      if (!start.moved && Math.abs(dx) + Math.abs(dy) < 4) return;
      if (!start.moved) this.svg.setPointerCapture(start.id);
      start.moved = true;
      start.x = event.clientX;
      start.y = event.clientY;
      this.pan(dx, dy);
    });
    this.svg.addEventListener("pointerup", (event) => {
      const click = start && !start.moved;
      start = null;
      if (click) this.click(event);
    });
    this.svg.addEventListener(
      "wheel",
      (event) => {
        event.preventDefault();
        const r = this.svg.getBoundingClientRect();
        this.zoom(Math.exp(-event.deltaY * 0.0015), event.clientX - r.left, event.clientY - r.top);
      },
      { passive: false },
    );
  }

  click(event) {
    const target = event.target.closest("[data-node], [data-module]");
    if (!target) return;
    if (target.dataset.node !== undefined) {
      this.clicked = Number(target.dataset.node);
      this.o.reveal(this.clicked);
      return;
    }
    const m = Number(target.dataset.module);
    // A frame closes from its title bar only: a click inside it, between its items, does nothing.
    if (target.classList.contains("gframe")) {
      const r = target.getBoundingClientRect();
      if (event.clientY - r.top > 30 * this.view.k) return;
    }
    this.toggle(m);
  }

  toggle(m) {
    this.wanted = -(m + 1);
    this.o.toggle(m);
  }

  key(event) {
    if (event.altKey || event.ctrlKey || event.metaKey) return;
    const step = event.shiftKey ? 240 : 60;
    const { sw, sh } = this.viewport();
    if (event.key === "ArrowLeft") this.pan(step, 0);
    else if (event.key === "ArrowRight") this.pan(-step, 0);
    else if (event.key === "ArrowUp") this.pan(0, step);
    else if (event.key === "ArrowDown") this.pan(0, -step);
    else if (event.key === "+" || event.key === "=") this.zoom(1.25, sw / 2, sh / 2);
    else if (event.key === "-" || event.key === "_") this.zoom(0.8, sw / 2, sh / 2);
    else if (event.key === "0") this.fit();
    else return;
    event.preventDefault();
  }
}
