// Schema history: the known versions, and the change table between any two.

import { enc, getJSON } from "../api.js";
import { append, clear, errorBox, h, section, table } from "../dom.js";

const MODES = ["", "BACKWARD", "BACKWARD_TRANSITIVE", "FORWARD", "FORWARD_TRANSITIVE", "FULL", "FULL_TRANSITIVE"];

function changeTable(changes) {
  return table(
    ["rule", "path", "old", "new", "breaks old readers", "breaks new readers", "bump"],
    changes.map((c) =>
      h(
        "tr",
        { class: c.breaks_forward || c.breaks_backward ? "breaking" : "" },
        [c.rule, h("code", null, c.path), c.old_text, c.new_text, c.breaks_forward ? "yes" : "", c.breaks_backward ? "yes" : "", c.bump].map((x) => h("td", null, x)),
      ),
    ),
    { id: "changes" },
  );
}

export async function schemaPage(main, _args, query) {
  document.title = "Schema history · pt2serde";
  const [current, versions] = await Promise.all([getJSON("/v1/schema"), getJSON("/v1/schema/versions")]);
  main.append(
    h("h1", null, "Schema history"),
    h("p", null, `This service reads and writes schema ${current.version} (torch ${current.torch_releases.join(", ")}; installed ${current.torch_installed}).`),
    section(
      "Versions",
      table(
        ["version", "torch releases", "describable"],
        versions.map((v) => [v.version, v.torch_releases.join(", "), v.describable ? "yes" : ""]),
        { id: "versions" },
      ),
    ),
  );
  const known = versions.filter((v) => v.describable).map((v) => v.version);
  if (known.length < 2) return;
  const pick = (id, chosen) => h("select", { id, name: id }, known.map((v) => h("option", { value: v, selected: v === chosen }, v)));
  const from = pick("from", query.get("from") || known[known.length - 2]);
  const to = pick("to", query.get("to") || known[known.length - 1]);
  const mode = h("select", { id: "mode", name: "mode" }, MODES.map((m) => h("option", { value: m, selected: m === (query.get("mode") || "") }, m || "(no mode)")));
  const out = h("div", { id: "schema-diff" });
  const show = async () => {
    const params = `from=${enc(from.value)}&to=${enc(to.value)}${mode.value ? `&mode=${enc(mode.value)}` : ""}`;
    history.replaceState(null, "", `/ui/schema?${params}`);
    clear(out).append(h("p", { class: "muted" }, "Comparing…"));
    try {
      const diff = await getJSON(`/v1/schema/diff?${params}`);
      const verdict = diff.verdict;
      append(clear(out), [
        h("p", null, `${diff.old_version} → ${diff.new_version}: ${diff.changes.length} changes; required bump: ${diff.required_bump}`),
        verdict
          ? h(
              "div",
              { class: `verdict ${verdict.ok ? "verdict-compatible" : "verdict-breaking"}`, id: "mode-verdict" },
              h("strong", null, `${verdict.mode} ${verdict.ok ? "holds" : "fails"}`),
              ` (${verdict.violations.length} violations; actual bump ${verdict.actual_bump}${verdict.numbers_follow_rules ? "" : "; torch's version numbers did not follow the rules"})`,
              verdict.message ? h("p", null, verdict.message) : null,
            )
          : null,
        diff.changes.length ? changeTable(diff.changes) : h("p", null, "No changes."),
      ]);
    } catch (err) {
      clear(out).append(errorBox(err));
    }
    document.body.dataset.done = "1";
  };
  for (const el of [from, to, mode]) el.addEventListener("change", show);
  main.append(section("Changes between two versions", h("p", null, "from ", from, " to ", to, " mode ", mode), out));
  await show();
}
