// A table of many rows (a 2,000-tensor weights list, a model's stages), a page at a time, sorted
// by any column, and worked with the keyboard as a WAI-ARIA grid.
//
// Only one page of rows is ever in the DOM, so 2,000 or 50,000 rows cost the same to draw. The
// keyboard follows the grid pattern with a roving tabindex: one cell is the grid's tab stop;
// arrows move between cells, Home/End to the row's ends (with Ctrl: the first and last row),
// PageUp/PageDown turn the page, and Enter or Space on a column header sorts by it.

import { h, clear, whole } from "./dom.js";

const PAGE = 100;

// `columns`: [{ key, label, value(row) for sorting, cell(row) for drawing (text or a node),
// numeric }]; `rows`: any objects; `rowClass(row)`: a class for a row's <tr>; `onActivate(row)`:
// what a click on a row, or Enter or Space on one of its cells, does (a diff's change rows show
// the change in the graphs).
export class Grid {
  constructor(columns, rows, { label, id = null, page = PAGE, sort = null, rowClass = null, onActivate = null } = {}) {
    this.columns = columns;
    this.rowClass = rowClass;
    this.onActivate = onActivate;
    this.all = rows;
    this.rows = rows;
    this.page = page;
    this.at = 0;
    this.sortKey = null;
    this.descending = false;
    // the active cell: row -1 is the header row
    this.row = -1;
    this.col = 0;
    this.table = h("table", { class: "grid", role: "grid", "aria-label": label, "aria-rowcount": String(rows.length + 1), id });
    this.head = h("thead");
    this.body = h("tbody");
    this.table.append(this.head, this.body);
    this.status = h("span", { class: "muted pager-status", "aria-live": "polite" });
    this.prev = h("button", { type: "button", class: "pager-prev", onclick: () => this.turn(-1) }, "‹ previous");
    this.next = h("button", { type: "button", class: "pager-next", onclick: () => this.turn(1) }, "next ›");
    this.el = h("div", { class: "grid-box" }, h("div", { class: "scroller" }, this.table), h("p", { class: "pager" }, this.prev, this.next, this.status));
    this.table.addEventListener("keydown", (event) => this.key(event));
    this.table.addEventListener("click", (event) => this.click(event));
    // a cell focused otherwise (a script, assistive technology) is the active one for the keys
    this.table.addEventListener("focusin", (event) => {
      const el = event.target.closest("[data-col]");
      if (!el) return;
      this.row = Number(el.dataset.row);
      this.col = Number(el.dataset.col);
    });
    if (sort) this.sortBy(sort.key, sort.descending);
    else this.draw();
  }

  // Keeps only the rows `keep` accepts (a filter box), from the first page.
  filter(keep) {
    this.rows = keep ? this.all.filter(keep) : this.all;
    if (this.sortKey) this.sortBy(this.sortKey, this.descending, false);
    this.at = 0;
    this.row = Math.min(this.row, this.rows.length - 1);
    this.table.setAttribute("aria-rowcount", String(this.rows.length + 1));
    this.draw();
  }

  sortBy(key, descending, redraw = true) {
    const column = this.columns.find((c) => c.key === key);
    const value = column.value || ((row) => row[key]);
    // missing values last, whichever the direction
    const keyed = this.rows.map((row) => [value(row), row]);
    keyed.sort((a, b) => {
      const [x, y] = [a[0], b[0]];
      const xm = x === null || x === undefined || Number.isNaN(x);
      const ym = y === null || y === undefined || Number.isNaN(y);
      if (xm || ym) return xm - ym;
      const order = typeof x === "number" && typeof y === "number" ? x - y : String(x).localeCompare(String(y));
      return descending ? -order : order;
    });
    this.rows = keyed.map((pair) => pair[1]);
    this.sortKey = key;
    this.descending = descending;
    this.at = 0;
    if (redraw) this.draw();
  }

  turn(step) {
    const pages = Math.max(1, Math.ceil(this.rows.length / this.page));
    const to = Math.min(Math.max(this.at + step, 0), pages - 1);
    if (to === this.at) return false;
    this.at = to;
    if (this.row >= 0) this.row = Math.min(this.at * this.page, this.rows.length - 1);
    this.draw();
    return true;
  }

  draw() {
    const start = this.at * this.page;
    const shown = this.rows.slice(start, start + this.page);
    const sortable = (c) => c.sortable !== false;
    clear(this.head).append(
      h(
        "tr",
        { role: "row", "aria-rowindex": "1" },
        this.columns.map((c, i) =>
          h(
            "th",
            {
              role: "columnheader",
              class: `${c.numeric ? "numeric" : ""}${sortable(c) ? " sortable" : ""}`,
              "aria-sort": this.sortKey === c.key ? (this.descending ? "descending" : "ascending") : sortable(c) ? "none" : null,
              dataset: { col: String(i), row: "-1" },
              tabindex: "-1",
              title: sortable(c) ? "sort (Enter)" : null,
            },
            c.label,
            this.sortKey === c.key ? (this.descending ? " ▼" : " ▲") : "",
          ),
        ),
      ),
    );
    clear(this.body).append(
      ...shown.map((row, k) =>
        h(
          "tr",
          { role: "row", class: this.rowClass ? this.rowClass(row) : null, "aria-rowindex": String(start + k + 2), dataset: { row: String(start + k) } },
          this.columns.map((c, i) =>
            h("td", { role: "gridcell", class: c.numeric ? "numeric" : null, tabindex: "-1", dataset: { col: String(i), row: String(start + k) } }, c.cell ? c.cell(row) : String(row[c.key] ?? "")),
          ),
        ),
      ),
    );
    const pages = Math.max(1, Math.ceil(this.rows.length / this.page));
    this.prev.disabled = this.at === 0;
    this.next.disabled = this.at >= pages - 1;
    this.status.textContent = this.rows.length
      ? `rows ${start + 1}–${start + shown.length} of ${whole(this.rows.length)}${pages > 1 ? ` · page ${this.at + 1} of ${pages}` : ""}`
      : "no rows";
    this.focusCell(false);
  }

  cell(row, col) {
    return this.table.querySelector(`[data-row="${row}"][data-col="${col}"]`);
  }

  // Makes the active cell the grid's one tab stop; with `focus`, moves focus there too.
  focusCell(focus) {
    for (const el of this.table.querySelectorAll('[tabindex="0"]')) el.setAttribute("tabindex", "-1");
    const el = this.cell(this.row, this.col) || this.cell(-1, this.col);
    if (!el) return;
    el.setAttribute("tabindex", "0");
    if (focus) el.focus();
  }

  click(event) {
    const el = event.target.closest("[data-col]");
    if (!el) return;
    this.row = Number(el.dataset.row);
    this.col = Number(el.dataset.col);
    if (this.row === -1 && this.columns[this.col].sortable !== false) {
      const key = this.columns[this.col].key;
      this.sortBy(key, this.sortKey === key ? !this.descending : Boolean(this.columns[this.col].numeric));
      this.focusCell(true);
      return;
    }
    this.focusCell(false);
    if (this.row >= 0 && this.onActivate) this.onActivate(this.rows[this.row]);
  }

  key(event) {
    if (event.altKey || event.metaKey) return;
    if (event.target.closest("button, a, input") && !event.target.matches("[data-col]")) return;
    const last = this.rows.length - 1;
    const first = this.at * this.page;
    const end = Math.min(first + this.page - 1, last);
    let { row, col } = this;
    switch (event.key) {
      case "ArrowDown":
        if (row < end) row += 1;
        else if (row === end && this.turn(1)) row = this.at * this.page;
        break;
      case "ArrowUp":
        if (row > first) row -= 1;
        else if (row === first && this.at > 0 && this.turn(-1)) row = Math.min(this.at * this.page + this.page - 1, last);
        else row = -1;
        break;
      case "ArrowRight":
        col = Math.min(col + 1, this.columns.length - 1);
        break;
      case "ArrowLeft":
        col = Math.max(col - 1, 0);
        break;
      case "Home":
        if (event.ctrlKey) {
          this.at = 0;
          row = 0;
          this.draw();
        }
        col = 0;
        break;
      case "End":
        if (event.ctrlKey) {
          this.at = Math.max(0, Math.ceil(this.rows.length / this.page) - 1);
          row = last;
          this.draw();
        }
        col = this.columns.length - 1;
        break;
      case "PageDown":
        if (this.turn(1)) row = this.at * this.page;
        break;
      case "PageUp":
        if (this.turn(-1)) row = this.at * this.page;
        break;
      case "Enter":
      case " ":
        if (row === -1) {
          this.click({ target: this.cell(-1, col) });
          event.preventDefault();
          return;
        }
        if (this.onActivate) {
          this.onActivate(this.rows[row]);
          event.preventDefault();
        }
        return;
      default:
        return;
    }
    event.preventDefault();
    this.row = row;
    this.col = col;
    this.focusCell(true);
  }
}
