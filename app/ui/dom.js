// Building the page without innerHTML: every string from a document becomes a text node or an
// attribute value set through the DOM, so it is never parsed as markup.

export function h(tag, props, ...children) {
  const el = document.createElement(tag);
  if (props) {
    for (const [key, value] of Object.entries(props)) {
      if (value === null || value === undefined || value === false) continue;
      if (key === "class") el.className = value;
      else if (key.startsWith("on")) el.addEventListener(key.slice(2), value);
      else if (key === "dataset") Object.assign(el.dataset, value);
      else el.setAttribute(key, value === true ? "" : String(value));
    }
  }
  append(el, children);
  return el;
}

export function append(el, children) {
  for (const child of children) {
    if (child === null || child === undefined || child === false) continue;
    if (Array.isArray(child)) append(el, child);
    else el.append(child instanceof Node ? child : String(child));
  }
  return el;
}

export function clear(el) {
  while (el.firstChild) el.removeChild(el.firstChild);
  return el;
}

export function table(headers, rows, props = {}) {
  return h(
    "table",
    props,
    h("thead", null, h("tr", null, headers.map((x) => h("th", null, x)))),
    h("tbody", null, rows.map((row) => (row instanceof Node ? row : h("tr", null, row.map((c) => h("td", null, c)))))),
  );
}

export function section(title, ...children) {
  return h("section", null, h("h2", null, title), ...children);
}

export function link(href, text) {
  return h("a", { href }, text);
}

export function errorBox(err) {
  const problem = err && err.problem;
  return h(
    "div",
    { class: "error", role: "alert" },
    h("strong", null, problem ? `${problem.status} ${problem.title}` : "Error"),
    " ",
    problem ? problem.detail || "" : String(err && err.message ? err.message : err),
    problem && problem.errors && problem.errors.length
      ? h("ul", null, problem.errors.slice(0, 20).map((e) => h("li", null, `${e.path || "/"}: ${e.message}`)))
      : null,
  );
}

export function bytes(n) {
  if (n === null || n === undefined) return "?";
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let i = 0;
  let v = n;
  while (v >= 1024 && i < units.length - 1) {
    v /= 1024;
    i += 1;
  }
  return i === 0 ? `${v} B` : `${v.toFixed(v < 10 ? 2 : 1)} ${units[i]}`;
}

export function count(n) {
  if (n === null || n === undefined) return "?";
  if (n < 1000) return String(n);
  if (n < 1e6) return `${(n / 1e3).toFixed(n < 1e4 ? 2 : 1)}k`;
  if (n < 1e9) return `${(n / 1e6).toFixed(n < 1e7 ? 2 : 1)}M`;
  return `${(n / 1e9).toFixed(2)}G`;
}

// A count in full (50,007), where a rounded one would not match the same count elsewhere.
// Not toLocaleString: its first call loads the locale data, 40 ms of the first page's time.
export function whole(n) {
  if (n === null || n === undefined) return "?";
  const [int, frac] = String(n).split(".");
  const grouped = int.replace(/\B(?=(\d{3})+$)/g, ",");
  return frac === undefined ? grouped : `${grouped}.${frac}`;
}

// A measured number to six significant digits (0.30000001192092896 reads 0.3), the exact value
// in its title.
export function num(x) {
  if (typeof x !== "number") return x ?? "-";
  const short = String(Number(x.toPrecision(6)));
  return h("span", { class: "num", title: short === String(x) ? null : String(x) }, short);
}

// A version as the API names it: a number as v3, an alias or `latest` as it is, with the number
// it resolved to when known.
export function versionLabel(ref, number = null) {
  if (/^\d+$/.test(String(ref))) return `v${ref}`;
  return number === null || number === undefined ? ref : `${ref} (v${number})`;
}

// Every page counts a program's nodes as its version's summary does (`summary.nodes`: the
// nodes of the program's own graph); nodes of subgraphs, where a page knows them, come apart.
export function nodesText(nodes, every = nodes) {
  const rest = every > nodes ? ` (+${whole(every - nodes)} in subgraphs)` : "";
  return `${whole(nodes)} ${nodes === 1 ? "node" : "nodes"}${rest}`;
}

export function plural(n, word, many = `${word}s`) {
  return `${count(n)} ${n === 1 ? word : many}`;
}

export function shortOp(target) {
  return target.startsWith("torch.ops.") ? target.slice(10) : target;
}

export function shortType(type) {
  if (!type) return "";
  const dot = type.lastIndexOf(".");
  return dot >= 0 ? type.slice(dot + 1) : type;
}

export function date(text) {
  return text ? text.replace("T", " ").replace(/\.\d+/, "").replace("+00:00", " UTC") : "";
}

// A digest shortened to its first 12 hex digits (what people compare at a glance), the whole
// one in its title and a button that copies it.
export function digest(text) {
  if (!text) return h("span", { class: "muted" }, "-");
  const hex = text.includes(":") ? text.slice(text.indexOf(":") + 1) : text;
  const shown = hex.length > 16 ? `${text.slice(0, text.length - hex.length)}${hex.slice(0, 12)}…` : text;
  return h("span", { class: "digest-box" }, h("code", { class: "digest", title: text }, shown), copyButton(text, "digest"));
}

export function copyButton(text, what = "text") {
  const button = h("button", { type: "button", class: "copy", "aria-label": `copy ${what} ${text}`, title: `copy ${text}` }, "copy");
  button.addEventListener("click", async () => {
    try {
      await navigator.clipboard.writeText(text);
    } catch {
      // no clipboard permission (an http page off loopback): copy the selection the old way
      const area = h("textarea", { class: "offscreen", readonly: true });
      area.value = text;
      document.body.append(area);
      area.select();
      document.execCommand("copy");
      area.remove();
    }
    button.textContent = "copied";
    setTimeout(() => {
      button.textContent = "copy";
    }, 1500);
  });
  return button;
}

// torch's dtype names by the schema's ScalarType names (schema.dtypes.DTYPE_NAMES; a test in
// tests/ui keeps the two equal): the registry's summaries name dtypes as the schema does.
export const DTYPE_NAMES = {
  BYTE: "uint8",
  CHAR: "int8",
  SHORT: "int16",
  INT: "int32",
  LONG: "int64",
  HALF: "float16",
  FLOAT: "float32",
  DOUBLE: "float64",
  COMPLEXHALF: "complex32",
  COMPLEXFLOAT: "complex64",
  COMPLEXDOUBLE: "complex128",
  BOOL: "bool",
  BFLOAT16: "bfloat16",
  UINT16: "uint16",
  FLOAT8E4M3FN: "float8_e4m3fn",
  FLOAT8E5M2: "float8_e5m2",
  FLOAT8E4M3FNUZ: "float8_e4m3fnuz",
  FLOAT8E5M2FNUZ: "float8_e5m2fnuz",
  FLOAT8E8M0FNU: "float8_e8m0fnu",
  UINT32: "uint32",
  UINT64: "uint64",
};

export function dtypeName(name) {
  return DTYPE_NAMES[name] || (name ? name.toLowerCase() : "?");
}

export function shape(value) {
  if (!value.shape) return value.kind;
  return `${dtypeName(value.dtype)}[${value.shape.join(", ")}]`;
}

// The busy indicator: shown once a request has been in flight for 300 ms (a quicker answer
// never flashes it), until no request is; the page's main region is aria-busy meanwhile. An
// upload fills its bar with the share sent (a determinate progressbar); otherwise the bar runs.
const BUSY_AFTER_MS = 300;
let inFlight = 0;
let busyTimer = null;
let busyBox = null;

function busyElement() {
  if (!busyBox) {
    const bar = h("div", { class: "busy-bar", role: "progressbar", "aria-label": "Waiting for the server" }, h("span", null));
    busyBox = h("div", { id: "busy", class: "busy", role: "status", "aria-live": "polite", hidden: true }, bar, h("span", { class: "busy-text" }, "Loading…"));
    document.body.append(busyBox);
  }
  return busyBox;
}

function showBusy() {
  busyTimer = null;
  busyElement().hidden = false;
  document.getElementById("main")?.setAttribute("aria-busy", "true");
}

// A request starts: the indicator shows if it (or one after it) is still running in 300 ms.
export function busyStart() {
  inFlight += 1;
  if (inFlight === 1) busyTimer = setTimeout(showBusy, BUSY_AFTER_MS);
}

export function busyEnd() {
  inFlight = Math.max(0, inFlight - 1);
  if (inFlight) return;
  clearTimeout(busyTimer);
  busyTimer = null;
  document.getElementById("main")?.removeAttribute("aria-busy");
  if (!busyBox) return;
  busyProgress(null);
  busyBox.hidden = true;
}

// How far an upload got (`sent` of `total` bytes), or null for a wait of unknown length.
export function busyProgress(sent, total = 0) {
  const box = busyElement();
  const bar = box.querySelector(".busy-bar");
  const text = box.querySelector(".busy-text");
  if (sent === null || !total) {
    for (const name of ["aria-valuenow", "aria-valuemin", "aria-valuemax", "aria-valuetext"]) bar.removeAttribute(name);
    bar.classList.remove("determinate");
    bar.firstChild.style.width = "";
    text.textContent = "Loading…";
    return;
  }
  const percent = Math.round((100 * sent) / total);
  bar.classList.add("determinate");
  bar.setAttribute("aria-valuemin", "0");
  bar.setAttribute("aria-valuemax", "100");
  bar.setAttribute("aria-valuenow", String(percent));
  const said = sent < total ? `Uploading: ${bytes(sent)} of ${bytes(total)}` : "Uploaded; waiting for the server";
  bar.setAttribute("aria-valuetext", said);
  bar.firstChild.style.width = `${percent}%`;
  text.textContent = said;
}
