// The models list, and one model's versions.

import { accessLevel, allModels, allVersions, enc, getJSON, versionPath } from "../api.js";
import { count, date, h, link, nodesText, section, table, whole } from "../dom.js";
import { descriptionEditor } from "../edit.js";

function tagList(tags) {
  return Object.entries(tags || {}).map(([k, v]) => h("span", { class: "tag" }, `${k}=${v}`));
}

function aliasList(aliases) {
  return aliases.map((a) => h("span", { class: "alias" }, a));
}

export async function modelsPage(main) {
  document.title = "Models · pt2serde";
  main.append(h("h1", null, "Models"));
  const models = await allModels();
  // Tags belong to versions: the list shows the latest version's.
  const latest = await Promise.all(
    models.map((m) => (m.latest_version ? getJSON(versionPath(m.name, String(m.latest_version))) : null)),
  );
  const filter = h("input", {
    type: "search",
    id: "filter",
    placeholder: "Filter by name, alias or tag",
    "aria-label": "Filter models",
  });
  const rows = models.map((m, i) => {
    const info = latest[i];
    const aliases = Object.entries(m.aliases).map(([a, v]) => `${a}→v${v}`);
    const tr = h(
      "tr",
      { dataset: { model: m.name } },
      h("td", null, link(`/ui/models/${enc(m.name)}`, m.name), m.description ? h("div", { class: "muted described" }, m.description) : null),
      h("td", null, m.latest_version ? link(`/ui/models/${enc(m.name)}/versions/${m.latest_version}`, `v${m.latest_version}`) : "none"),
      h("td", null, String(m.version_count)),
      h("td", null, aliasList(aliases)),
      h("td", null, info ? tagList(info.tags) : null),
      h("td", null, info ? nodesText(info.summary.nodes) : ""),
      h("td", null, date(m.created_at)),
    );
    tr.dataset.search = [m.name, m.description || "", ...aliases, ...Object.entries(info ? info.tags : {}).map(([k, v]) => `${k}=${v}`)]
      .join(" ")
      .toLowerCase();
    return tr;
  });
  filter.addEventListener("input", () => {
    const q = filter.value.trim().toLowerCase();
    for (const tr of rows) tr.hidden = q !== "" && !tr.dataset.search.includes(q);
  });
  main.append(
    filter,
    models.length
      ? table(["model", "latest", "versions", "aliases", "tags (latest)", "size", "created"], rows, { id: "models" })
      : h("p", { class: "muted" }, "No models yet: push one with `pt2serde push NAME model.pt2`."),
  );
}

export async function modelPage(main, [name]) {
  document.title = `${name} · pt2serde`;
  const [model, versions, level] = await Promise.all([getJSON(`/v1/models/${enc(name)}`), allVersions(name), accessLevel(name)]);
  main.append(
    h("p", { class: "crumbs" }, link("/ui/", "Models"), " / ", name),
    h("h1", null, name),
    descriptionEditor(name, model, level),
    h("p", null, `${model.version_count} live versions; latest v${model.latest_version ?? "-"}`),
  );
  const rows = versions.map((v) =>
    h(
      "tr",
      { class: v.deleted_at ? "deleted" : "" },
      h("td", null, link(`/ui/models/${enc(name)}/versions/${v.version}`, `v${v.version}`)),
      h("td", null, date(v.created_at)),
      h("td", null, whole(v.summary.nodes)),
      h("td", null, count(v.summary.parameter_count)),
      h("td", null, v.schema_version),
      h("td", null, aliasList(v.aliases)),
      h("td", null, tagList(v.tags)),
      h("td", null, v.deleted_at ? `deleted: ${v.deleted_reason || ""}` : link(`/ui/models/${enc(name)}/versions/${v.version}/graph`, "graph")),
    ),
  );
  main.append(
    section(
      "Versions",
      table(["version", "created", "nodes", "parameters", "schema", "aliases", "tags", ""], rows, { id: "versions" }),
    ),
  );
  const live = versions.filter((v) => !v.deleted_at);
  if (live.length >= 2) {
    const pick = (id, chosen) =>
      h("select", { id, name: id }, live.map((v) => h("option", { value: String(v.version), selected: v.version === chosen }, `v${v.version}`)));
    const from = pick("from", live[live.length - 2].version);
    const to = pick("to", live[live.length - 1].version);
    const go = h("a", { class: "button", id: "compare" }, "Compare");
    const update = () => go.setAttribute("href", `/ui/models/${enc(name)}/diff?from=${enc(from.value)}&to=${enc(to.value)}`);
    from.addEventListener("change", update);
    to.addEventListener("change", update);
    update();
    main.append(section("Compare two versions", h("p", null, "from ", from, " to ", to, " ", go)));
  }
}
