// Try a file: validate, hash and inspect a .pt2 or a document without pushing it.

import { graphOf, hold, postHeld, postHeldJSON } from "../api.js";
import { clear, digest, errorBox, h, section, table } from "../dom.js";
import { graphFacts, graphViewer } from "./graph.js";
import { findingsTable, operatorsTable, weightsTable } from "./version.js";

export async function tryPage(main) {
  document.title = "Try a file · pt2serde";
  const input = h("input", { type: "file", id: "file", accept: ".pt2,.json,application/zip,application/json" });
  const level = h(
    "select",
    { id: "level" },
    ["semantic", "schema", "torch"].map((l) => h("option", { value: l }, l)),
  );
  const drop = h("div", { class: "drop", id: "drop" }, "Drop a .pt2 or a JSON document here, or ", input, " · validation level ", level);
  const out = h("div", { id: "result" });
  const run = async (file) => {
    clear(out).append(h("p", { class: "muted" }, `Reading ${file.name}…`));
    performance.mark("try-start");
    try {
      const zip = file.name.endsWith(".pt2") || file.type === "application/zip";
      // sent once, then named by each request (POST /v1/uploads)
      const upload = await hold(file);
      const [report, canonical, graph, operators, weights] = await Promise.all([
        postHeldJSON(`/v1/validate?level=${level.value}`, upload),
        postHeld("/v1/canonicalize", upload),
        postHeldJSON("/v1/graph", upload).then(graphOf),
        postHeldJSON("/v1/inspect?view=operators", upload),
        zip ? postHeldJSON("/v1/inspect?view=weights", upload) : null,
      ]);
      performance.mark("graph-data");
      const headers = canonical.headers;
      clear(out).append(
        h("h2", null, file.name),
        section(
          "Digests",
          table(
            ["", ""],
            [
              ["program", digest(headers.get("x-program-digest"))],
              ["graph", digest(headers.get("x-graph-digest"))],
              ["weights", digest(headers.get("x-weights-digest"))],
            ],
            { id: "digests", class: "kv" },
          ),
        ),
        section(
          "Validation",
          h("p", { id: "valid" }, `Level ${report.level}: ${report.valid ? "valid" : "invalid"}; schema ${report.min_schema_version} or newer; loaded as it is by torch ${report.readable_by.join(", ") || "none we know"}`),
          findingsTable(report.findings),
        ),
      );
      const viewer = graphViewer(graph, { name: file.name });
      out.append(section("Graph", h("p", { class: "muted", id: "facts" }, graphFacts(graph, operators.graph.nodes)), viewer.el));
      viewer.outline.render();
      viewer.drawing.start();
      await new Promise((resolve) => requestAnimationFrame(() => resolve()));
      performance.mark("graph-first-view");
      out.append(section("Operators", operatorsTable(operators)));
      if (weights) out.append(section("Weights", weightsTable(weights)));
    } catch (err) {
      clear(out).append(errorBox(err));
    }
    document.body.dataset.done = "1";
  };
  input.addEventListener("change", () => input.files[0] && run(input.files[0]));
  drop.addEventListener("dragover", (event) => {
    event.preventDefault();
    drop.classList.add("over");
  });
  drop.addEventListener("dragleave", () => drop.classList.remove("over"));
  drop.addEventListener("drop", (event) => {
    event.preventDefault();
    drop.classList.remove("over");
    const file = event.dataTransfer.files[0];
    if (file) run(file);
  });
  main.append(h("h1", null, "Try a file"), h("p", null, "Validate, hash and inspect a program without pushing it: nothing is stored."), drop, out);
}
