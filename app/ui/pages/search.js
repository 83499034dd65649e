// Search across models: the header's box, and the page that answers it.
//
// One text asks several questions of the API at once, each where the text could be one: a model
// name or description (the models list), an alias, a tag (`key` or `key=value`), an operator
// namespace, a program or graph digest (`GET /v1/search`). A question the API refuses for that
// text (400 invalid-search) simply has no answer.

import { allModels, enc, getJSON } from "../api.js";
import { date, h, link, nodesText, section, versionLabel } from "../dom.js";
import { Grid } from "../grid.js";

export function searchBox(form) {
  if (!form) return;
  const box = h("input", { type: "search", name: "q", id: "global-search", placeholder: "Search models, aliases, tags, digests", "aria-label": "Search across models" });
  if (location.pathname.replace(/\/$/, "") === "/ui/search") box.value = new URLSearchParams(location.search).get("q") || "";
  // the page's policy allows no form action: the box navigates itself
  form.addEventListener("submit", (event) => {
    event.preventDefault();
    const q = box.value.trim();
    if (q) location.assign(`/ui/search?q=${enc(q)}`);
  });
  form.append(box);
}

const TAG = /^[A-Za-z0-9][A-Za-z0-9._:/-]{0,127}(=.*)?$/;
const ALIAS = /^[A-Za-z][A-Za-z0-9._-]{0,63}$/;
const NAMESPACE = /^[A-Za-z_][A-Za-z0-9_]*$/;
const DIGEST = /^[0-9a-f]{64}$/;

async function versionsWhere(params) {
  try {
    return (await getJSON(`/v1/search?limit=200&${params}`)).versions;
  } catch {
    return [];
  }
}

export async function searchPage(main, _args, query) {
  const q = (query.get("q") || "").trim();
  document.title = q ? `${q} · search · pt2serde` : "Search · pt2serde";
  main.append(h("h1", null, q ? `Search: ${q}` : "Search"));
  if (!q) {
    main.append(h("p", { class: "muted" }, "Type a model name, an alias, a tag (key or key=value), an operator namespace or a digest in the box above."));
    return;
  }
  const lower = q.toLowerCase();
  const questions = [];
  if (ALIAS.test(q)) questions.push(["alias", `alias=${enc(q)}`]);
  if (TAG.test(q)) questions.push(["tag", `tag=${enc(q)}`]);
  if (NAMESPACE.test(q)) questions.push(["operator namespace", `namespace=${enc(q)}`]);
  if (DIGEST.test(lower)) questions.push(["program digest", `program_digest=${lower}`], ["graph digest", `graph_digest=${lower}`]);
  const [models, ...answers] = await Promise.all([allModels(), ...questions.map(([, params]) => versionsWhere(params))]);
  const named = models.filter((m) => m.name.toLowerCase().includes(lower) || (m.description || "").toLowerCase().includes(lower));
  main.append(
    section(
      `Models (${named.length})`,
      named.length
        ? h(
            "ul",
            { id: "model-hits", class: "hits" },
            named.map((m) => h("li", null, link(`/ui/models/${enc(m.name)}`, m.name), m.latest_version ? ` · latest v${m.latest_version}` : "", m.description ? h("span", { class: "muted" }, ` · ${m.description}`) : null)),
          )
        : h("p", { class: "muted" }, "No model name or description contains it."),
    ),
  );
  // one row per version, with every question it answered
  const hits = new Map();
  questions.forEach(([why], i) => {
    for (const v of answers[i]) {
      const key = `${v.model}\u0000${v.version}`;
      if (!hits.has(key)) hits.set(key, { ...v, why: [] });
      hits.get(key).why.push(why);
    }
  });
  const rows = [...hits.values()];
  const columns = [
    { key: "model", label: "model", cell: (v) => link(`/ui/models/${enc(v.model)}`, v.model) },
    { key: "version", label: "version", numeric: true, cell: (v) => link(`/ui/models/${enc(v.model)}/versions/${v.version}`, versionLabel(v.version)) },
    { key: "why", label: "matched as", value: (v) => v.why.join(", "), cell: (v) => v.why.join(", ") },
    { key: "aliases", label: "aliases", value: (v) => v.aliases.join(" "), cell: (v) => v.aliases.map((a) => h("span", { class: "alias" }, a)) },
    { key: "tags", label: "tags", value: (v) => Object.keys(v.tags).join(" "), cell: (v) => Object.entries(v.tags).map(([k, t]) => h("span", { class: "tag" }, `${k}=${t}`)) },
    { key: "nodes", label: "size", numeric: true, value: (v) => v.summary.nodes, cell: (v) => nodesText(v.summary.nodes) },
    { key: "created_at", label: "created", cell: (v) => date(v.created_at) },
  ];
  main.append(
    section(
      `Versions (${rows.length})`,
      rows.length
        ? new Grid(columns, rows, { label: "matching versions", id: "version-hits" }).el
        : h("p", { class: "muted" }, `No version has it as ${questions.map(([why]) => why).join(", ") || "an alias, tag, namespace or digest"}.`),
    ),
  );
}
