// Editing a version's aliases and tags and a model's description, for callers who may write to
// the model (`GET /v1/models/{name}/access`); others see the labels without controls. A refusal
// is shown as the API's problem (its status, title and detail) beside the control.

import { enc, getJSON, mayWrite, sendJSON, versionPath } from "./api.js";
import { clear, errorBox, h } from "./dom.js";

function problemSlot() {
  return h("div", { class: "edit-problem", "aria-live": "assertive" });
}

// Runs a change; on success calls `done` with its answer, on failure shows its problem.
async function attempt(slot, change, done) {
  clear(slot);
  try {
    done(await change());
  } catch (err) {
    slot.append(errorBox(err));
  }
}

// The version's aliases and tags, with remove buttons and add forms when `level` may write.
export function labelsEditor(name, info, level) {
  const box = h("div", { class: "labels", id: "labels" });
  const draw = (current) => {
    clear(box);
    const writable = mayWrite(level) && !current.deleted_at;
    const slot = problemSlot();
    const remove = (label, what, path) =>
      writable
        ? h("button", { type: "button", class: "remove", "aria-label": `remove ${what} ${label}`, title: `remove ${what}`, onclick: () => attempt(slot, () => sendJSON("DELETE", path), () => reload()) }, "×")
        : null;
    const reload = async () => {
      draw(await getJSON(versionPath(name, String(current.version))));
    };
    box.append(
      h(
        "p",
        null,
        current.aliases.map((a) => h("span", { class: "alias", dataset: { alias: a } }, a, remove(a, "alias", `/v1/models/${enc(name)}/aliases/${enc(a)}`))),
        Object.entries(current.tags).map(([k, t]) =>
          h("span", { class: "tag", dataset: { tag: k } }, `${k}=${t}`, remove(k, "tag", `${versionPath(name, String(current.version))}/tags/${enc(k)}`)),
        ),
        current.aliases.length || Object.keys(current.tags).length ? null : h("span", { class: "muted" }, "no aliases or tags"),
      ),
    );
    if (!writable) {
      if (!mayWrite(level)) box.append(h("p", { class: "muted", id: "read-only" }, "You may read this model, not label it."));
      return;
    }
    const alias = h("input", { type: "text", id: "new-alias", placeholder: "alias (e.g. champion)", "aria-label": "new alias", size: "16" });
    const key = h("input", { type: "text", id: "new-tag-key", placeholder: "tag key", "aria-label": "new tag key", size: "12" });
    const value = h("input", { type: "text", id: "new-tag-value", placeholder: "value", "aria-label": "new tag value", size: "16" });
    const addAlias = h("button", { type: "button", id: "add-alias" }, "Set alias");
    const addTag = h("button", { type: "button", id: "add-tag" }, "Set tag");
    addAlias.addEventListener("click", () =>
      attempt(slot, () => sendJSON("PUT", `/v1/models/${enc(name)}/aliases/${enc(alias.value.trim())}`, { version: current.version }), () => reload()),
    );
    addTag.addEventListener("click", () =>
      attempt(slot, () => sendJSON("PUT", `${versionPath(name, String(current.version))}/tags/${enc(key.value.trim())}`, { value: value.value }), (fresh) => draw(fresh)),
    );
    box.append(h("p", { class: "edit" }, alias, addAlias, " ", key, value, addTag), slot);
  };
  draw(info);
  return box;
}

// The model's description, with an editor when `level` may write.
export function descriptionEditor(name, model, level) {
  const box = h("div", { class: "description", id: "description" });
  const draw = (text) => {
    clear(box);
    box.append(text ? h("p", { id: "description-text" }, text) : h("p", { class: "muted", id: "description-text" }, "No description."));
    if (!mayWrite(level)) return;
    const slot = problemSlot();
    const area = h("textarea", { id: "description-input", rows: "3", "aria-label": "description", maxlength: "4096" });
    area.value = text || "";
    const save = h("button", { type: "button", id: "save-description" }, "Save description");
    save.addEventListener("click", () =>
      attempt(slot, () => sendJSON("PUT", `/v1/models/${enc(name)}/description`, { description: area.value.trim() ? area.value : null }), (fresh) => draw(fresh.description)),
    );
    box.append(h("details", null, h("summary", null, "Edit description"), area, h("p", null, save)), slot);
  };
  draw(model.description);
  return box;
}
