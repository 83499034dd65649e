// The public API, and nothing else: every figure a page shows can be had with curl.

export class ApiError extends Error {
  constructor(problem) {
    super(`${problem.status} ${problem.title}: ${problem.detail || ""}`);
    this.problem = problem;
  }
}

async function failure(response) {
  let problem;
  try {
    problem = await response.json();
  } catch {
    problem = { status: response.status, title: response.statusText, detail: "" };
  }
  if (!problem || typeof problem !== "object") problem = { status: response.status, title: "" };
  return new ApiError(problem);
}

export async function getJSON(path) {
  const response = await fetch(path, { headers: { Accept: "application/json" } });
  if (!response.ok) throw await failure(response);
  return response.json();
}

// The body as text, so that a page can time its transfer and its parse apart.
export async function getText(path) {
  const response = await fetch(path, { headers: { Accept: "application/json" } });
  if (!response.ok) throw await failure(response);
  return response.text();
}

export async function postFiles(path, files) {
  const form = new FormData();
  for (const [name, file] of Object.entries(files)) form.append(name, file, file.name || name);
  const response = await fetch(path, { method: "POST", body: form });
  if (!response.ok) throw await failure(response);
  return response;
}

export async function postJSONFiles(path, files) {
  return (await postFiles(path, files)).json();
}

export function enc(text) {
  return encodeURIComponent(text);
}

export function versionPath(name, ref) {
  return `/v1/models/${enc(name)}/versions/${enc(ref)}`;
}

export async function allModels() {
  const models = [];
  let after = null;
  for (;;) {
    const page = await getJSON(`/v1/models?limit=1000${after ? `&after=${enc(after)}` : ""}`);
    models.push(...page.models);
    if (!page.next) return models;
    after = page.next;
  }
}

export async function allVersions(name) {
  const versions = [];
  let after = null;
  for (;;) {
    const page = await getJSON(
      `/v1/models/${enc(name)}/versions?limit=1000&include_deleted=true${after ? `&after=${after}` : ""}`,
    );
    versions.push(...page.versions);
    if (page.next === null || page.next === undefined) return versions;
    after = page.next;
  }
}

// A change (PUT or DELETE): the answer's JSON, or null for 204; a refusal throws its problem.
export async function sendJSON(method, path, body = undefined) {
  const init = { method, headers: { Accept: "application/json" } };
  if (body !== undefined) {
    init.headers["Content-Type"] = "application/json";
    init.body = JSON.stringify(body);
  }
  const response = await fetch(path, init);
  if (!response.ok) throw await failure(response);
  return response.status === 204 ? null : response.json();
}

// The caller's level on a model ("none", "read", "write" or "manage"): what the UI offers.
export async function accessLevel(name) {
  try {
    return (await getJSON(`/v1/models/${enc(name)}/access`)).level;
  } catch {
    return "read";
  }
}

export function mayWrite(level) {
  return level === "write" || level === "manage";
}
