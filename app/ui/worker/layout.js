// The layout worker: ELK's layered algorithm on one module at a time, off the main thread.
//
// A job is one expanded module: the boxes of its direct items (its own nodes and its child
// modules, drawn collapsed or as the size of their own layout) and the edges between them. Each
// module is laid out apart, so opening a module costs the layout of that module and of its
// ancestors (their boxes grew), never of the whole program. Arrays in and out are typed arrays
// whose buffers are transferred, not copied.
//
// `npm run build` bundles this file with elkjs into build/layout-worker.js (esbuild).

import ELK from "elkjs/lib/elk.bundled.js";

const elk = new ELK();
// ELK's first layout is its slowest (its code is compiled as it first runs): one of two boxes
// while the page is still fetching the graph makes the page's first layout fast.
elk.layout({ id: "warm", children: [{ id: "a", width: 9, height: 9 }, { id: "b", width: 9, height: 9 }], edges: [{ id: "e", sources: ["a"], targets: ["b"] }] });

// Room at the top of a module's frame for its title, and around its items.
const PADDING = "[top=30,left=12,bottom=12,right=12]";

function options(items) {
  return {
    "elk.algorithm": "layered",
    "elk.direction": "DOWN",
    "elk.padding": PADDING,
    "elk.spacing.nodeNode": "14",
    "elk.layered.spacing.nodeNodeBetweenLayers": "26",
    "elk.spacing.componentComponent": "24",
    "elk.edgeRouting": "ORTHOGONAL",
    // Items keep the program's execution order where the layering allows: what runs first is
    // drawn first, left to right, and the drawing stays put between two versions of a program.
    "elk.layered.considerModelOrder.strategy": "NODES_AND_EDGES",
    // Crossing minimisation is most of ELK's cost: a module of many items gets fewer sweeps.
    "elk.layered.thoroughness": items > 60 ? "1" : "4",
  };
}

// Above this many items ELK takes over a second here (0.4-1.3 s for 500 to 1,000), so such a
// module (a stack of a thousand blocks) is laid out by `ranks` instead.
const ELK_ITEMS = 300;
const WRAP = 24;

// A linear-time layering for very large modules: each item in the row after its latest input,
// items of a row in execution order, edges straight from the bottom of one to the top of the
// other. Less tidy than ELK (no crossing minimisation), but the same top-down reading.
function ranks(sizes, edges) {
  const n = sizes.length / 2;
  const rank = new Int32Array(n);
  // Items come in execution order, so an edge's source is almost always before its target;
  // the rare edge that is not (a subgraph module sorted before its inputs) is left out.
  for (let k = 0; k < edges.length; k += 2) {
    const [a, b] = [edges[k], edges[k + 1]];
    if (a < b) rank[b] = Math.max(rank[b], rank[a] + 1);
  }
  const rows = [];
  for (let i = 0; i < n; i += 1) (rows[rank[i]] ||= []).push(i);
  const xy = new Float32Array(2 * n);
  let y = 30;
  let width = 0;
  for (const row of rows) {
    if (!row) continue;
    let x = 12;
    let tallest = 0;
    for (const [at, i] of row.entries()) {
      // A wide row (hundreds of independent blocks) wraps, so the drawing stays near square.
      if (at > 0 && at % WRAP === 0) {
        y += tallest + 26;
        x = 12;
        tallest = 0;
      }
      xy[2 * i] = x;
      xy[2 * i + 1] = y;
      x += sizes[2 * i] + 14;
      tallest = Math.max(tallest, sizes[2 * i + 1]);
    }
    width = Math.max(width, x - 14 + 12);
    y += tallest + 26;
  }
  const e = edges.length / 2;
  const offsets = new Int32Array(e + 1);
  const points = new Float32Array(4 * e);
  for (let k = 0; k < e; k += 1) {
    const [a, b] = [edges[2 * k], edges[2 * k + 1]];
    points.set([xy[2 * a] + sizes[2 * a] / 2, xy[2 * a + 1] + sizes[2 * a + 1], xy[2 * b] + sizes[2 * b] / 2, xy[2 * b + 1]], 4 * k);
    offsets[k + 1] = 2 * (k + 1);
  }
  return { width, height: y - 26 + 12, xy, points, offsets };
}

async function layout({ sizes, edges }) {
  const n = sizes.length / 2;
  if (n > ELK_ITEMS) return ranks(sizes, edges);
  const children = new Array(n);
  for (let i = 0; i < n; i += 1) children[i] = { id: `n${i}`, width: sizes[2 * i], height: sizes[2 * i + 1] };
  const e = edges.length / 2;
  const links = new Array(e);
  for (let k = 0; k < e; k += 1) links[k] = { id: `e${k}`, sources: [`n${edges[2 * k]}`], targets: [`n${edges[2 * k + 1]}`] };
  const done = await elk.layout({ id: "root", layoutOptions: options(n), children, edges: links });
  const xy = new Float32Array(2 * n);
  for (let i = 0; i < n; i += 1) {
    xy[2 * i] = done.children[i].x;
    xy[2 * i + 1] = done.children[i].y;
  }
  // Each edge as a polyline: start, bends, end, its points from offsets[k] to offsets[k + 1].
  const offsets = new Int32Array(e + 1);
  const points = [];
  for (let k = 0; k < e; k += 1) {
    for (const section of done.edges[k].sections || []) {
      points.push(section.startPoint.x, section.startPoint.y);
      for (const bend of section.bendPoints || []) points.push(bend.x, bend.y);
      points.push(section.endPoint.x, section.endPoint.y);
    }
    offsets[k + 1] = points.length / 2;
  }
  return { width: done.width, height: done.height, xy, points: Float32Array.from(points), offsets };
}

// elkjs, loaded in a worker, installs its own message handler on `self`; this one replaces it.
self.onmessage = async (event) => {
  const { job } = event.data;
  try {
    const out = await layout(event.data);
    self.postMessage({ job, ...out }, [out.xy.buffer, out.points.buffer, out.offsets.buffer]);
  } catch (err) {
    self.postMessage({ job, error: String(err && err.message ? err.message : err) });
  }
};
