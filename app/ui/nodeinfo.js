// A stored version's node in full, below the outline's details: every argument with its
// tensors' dtype and shape, literals as written, outputs, the module calls it ran in and the
// Python stack trace the exporter recorded (`GET .../nodes/{graph}/{position}`).

import { getJSON } from "./api.js";
import { errorBox, h } from "./dom.js";

// The element, filled in when the answer arrives; `base` is the version's API path.
export function nodeInfo(base, graph, position) {
  const box = h("div", { class: "node-info", id: "node-info" }, h("p", { class: "muted" }, "Loading the node's arguments…"));
  getJSON(`${base}/nodes/${graph}/${position}`).then(
    (node) => box.replaceChildren(...drawn(node)),
    (err) => box.replaceChildren(errorBox(err)),
  );
  return box;
}

function valueText(v) {
  return v.dtype ? `${v.name}: ${v.dtype}${v.shape}` : v.name;
}

function drawn(node) {
  return [
    h("h4", null, "Arguments"),
    h(
      "dl",
      { class: "node-args" },
      node.arguments.map((a) => [
        h("dt", null, a.name),
        h("dd", null, a.values.length ? a.values.map((v) => h("code", { class: "arg-value" }, valueText(v))) : h("code", { class: "arg-literal" }, a.text)),
      ]),
    ),
    h("h4", null, "Outputs"),
    h("p", null, node.outputs.length ? node.outputs.map((v) => h("code", { class: "arg-value" }, valueText(v))) : "none"),
    h("h4", null, "Source"),
    node.module_stack.length
      ? h("ol", { class: "module-stack" }, node.module_stack.map((m) => h("li", null, h("code", null, m.path), m.type ? ` (${m.type.slice(m.type.lastIndexOf(".") + 1)})` : "")))
      : h("p", { class: "muted" }, "Not inside a module call."),
    node.source_fn ? h("p", null, "from ", h("code", null, node.source_fn)) : null,
    node.stack_trace
      ? h("details", { class: "stack-trace" }, h("summary", null, "Python stack trace"), h("pre", null, node.stack_trace))
      : h("p", { class: "muted" }, "The program carries no stack trace for this node."),
  ];
}
