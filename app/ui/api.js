// The public API, and nothing else: every figure a page shows can be had with curl. Every
// request goes through `tracked`, so that one still running after 300 ms shows the busy
// indicator (dom.js).

import { busyEnd, busyProgress, busyStart } from "./dom.js";

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

// `fetch(path, options)`'s answer read by `read` (the response itself by default), under the
// busy indicator.
async function tracked(path, options, read = (response) => response) {
  busyStart();
  try {
    const response = await fetch(path, options);
    if (!response.ok) throw await failure(response);
    return await read(response);
  } finally {
    busyEnd();
  }
}

const ACCEPT = { headers: { Accept: "application/json" } };

export async function getJSON(path) {
  return tracked(path, ACCEPT, (r) => r.json());
}

// The body as text, so that a page can time its transfer and its parse apart.
export async function getText(path) {
  return tracked(path, ACCEPT, (r) => r.text());
}

// A graph answer (GET .../graph, POST /v1/graph) holds each operator, dtype and shape once, in
// the tables `targets`, `dtypes` and `shapes`, and an index per node (-1: none); the pages read
// a node's values, looked up here once per answer.
export function graphOf(answer) {
  const nodes = answer.nodes;
  for (const column of ["target", "dtype", "shape"]) {
    const table = nodes[`${column}s`];
    nodes[column] = nodes[column].map((i) => (i < 0 ? null : table[i]));
  }
  return answer;
}

function form(files) {
  const data = new FormData();
  for (const [name, file] of Object.entries(files)) data.append(name, file, file.name || name);
  return data;
}

export async function postJSONFiles(path, files) {
  return tracked(path, { method: "POST", body: form(files) }, (r) => r.json());
}

// A POST naming a held upload (`hold`) instead of sending it again.
function held(path, upload) {
  return `${path}${path.includes("?") ? "&" : "?"}upload=${enc(upload)}`;
}

export async function postHeld(path, upload) {
  return tracked(held(path, upload), { method: "POST" });
}

export async function postHeldJSON(path, upload) {
  return tracked(held(path, upload), { method: "POST" }, (r) => r.json());
}

// Send `file` once to be held for the requests after it (POST /v1/uploads): its sha256 name.
// XMLHttpRequest, not fetch: only it reports how much of a body was sent.
export function hold(file) {
  busyStart();
  return new Promise((resolve, reject) => {
    const request = new XMLHttpRequest();
    request.open("POST", "/v1/uploads");
    request.responseType = "json";
    request.upload.addEventListener("progress", (event) => busyProgress(event.loaded, event.total || file.size));
    request.addEventListener("load", () => {
      if (request.status === 201) resolve(request.response.upload);
      else {
        const problem = request.response && typeof request.response === "object" ? request.response : { status: request.status, title: request.statusText, detail: "" };
        reject(new ApiError(problem));
      }
    });
    request.addEventListener("error", () => reject(new Error("the upload did not reach the server")));
    request.send(form({ file }));
  }).finally(busyEnd);
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
