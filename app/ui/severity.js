// How much a diff matters, in words, from the diff answer's own figures.
//
// The API's verdict says whether old calls still work (`compatible`), but a removed transformer
// layer and a retrained bias are not the same news: the severity tells them apart.
//   breaking     an old call may fail (the verdict's breaking interface changes)
//   structural   the graph or the module tree changed: the program computes something else
//   weights      the same graph with other weights (values, dtypes or shapes of tensors)
//   identical    nothing differs
// Program fields alone (a torch version) or operator set versions keep the lower severity
// the rest earns, and are named in the details.

import { h, plural } from "./dom.js";

export const SEVERITY_WORDS = {
  breaking: "Breaking change",
  structural: "Structural change",
  weights: "Weights only",
  identical: "Identical",
};

export const VERDICT_WORDS = {
  identical: "identical",
  "same-graph-new-weights": "same graph, new weights",
  compatible: "compatible with old callers",
  breaking: "may break old callers",
};

export function severity(diff) {
  const c = diff.summary.counts;
  if (diff.summary.verdict === "breaking" || c.breaking_changes) return "breaking";
  const structure = c.nodes_added + c.nodes_removed + c.nodes_changed + c.modules_changed + c.interface_changes + c.range_constraints_changed;
  if (structure) return "structural";
  const weights = c.weights_added + c.weights_removed + c.weights_changed + c.weights_new_values;
  if (weights || diff.summary.verdict === "same-graph-new-weights") return "weights";
  return "identical";
}

// The changes behind the severity, most telling first: whole modules before their nodes.
export function reasons(diff) {
  const c = diff.summary.counts;
  const modules = diff.modules || [];
  const named = (change) => modules.filter((m) => m.change === change && !modules.some((o) => o !== m && o.change === change && m.path.startsWith(`${o.path}.`)));
  const list = (items) => items.slice(0, 4).map((m) => m.path || "<root>").join(", ") + (items.length > 4 ? ", …" : "");
  const out = [];
  if (c.breaking_changes) out.push(plural(c.breaking_changes, "breaking interface change"));
  const added = named("added");
  const removed = named("removed");
  if (added.length) out.push(`${plural(added.length, "module")} added (${list(added)})`);
  if (removed.length) out.push(`${plural(removed.length, "module")} removed (${list(removed)})`);
  const moved = modules.filter((m) => m.change === "moved");
  if (moved.length) out.push(`${plural(moved.length, "module")} moved (${moved.slice(0, 3).map((m) => `${m.old_path} → ${m.path}`).join(", ")}${moved.length > 3 ? ", …" : ""})`);
  const retyped = modules.filter((m) => m.change === "type").length;
  if (retyped) out.push(`${plural(retyped, "module")} of another class`);
  const nodes = [
    c.nodes_added ? `${c.nodes_added} added` : "",
    c.nodes_removed ? `${c.nodes_removed} removed` : "",
    c.nodes_changed ? `${c.nodes_changed} changed` : "",
  ].filter(Boolean);
  if (nodes.length) out.push(`nodes: ${nodes.join(", ")}`);
  const other = c.interface_changes - c.breaking_changes;
  if (other) out.push(plural(other, "compatible interface change"));
  if (c.range_constraints_changed) out.push(plural(c.range_constraints_changed, "dynamic range") + " changed");
  const tensors = c.weights_added + c.weights_removed + c.weights_changed;
  if (tensors) out.push(`${plural(tensors, "tensor")} added, removed or changed`);
  if (c.opsets_changed) out.push(plural(c.opsets_changed, "operator set") + " changed");
  return out;
}

export function verdictBox(diff) {
  const level = severity(diff);
  const why = reasons(diff);
  return h(
    "div",
    { class: `verdict severity-${level}`, id: "verdict", role: "status", dataset: { severity: level, verdict: diff.summary.verdict } },
    h("strong", null, SEVERITY_WORDS[level]),
    h("span", { class: "verdict-words" }, ` · ${VERDICT_WORDS[diff.summary.verdict] || diff.summary.verdict}`),
    why.length ? h("span", { class: "reasons" }, `: ${why.join("; ")}.`) : null,
  );
}
