// A list of one API collection: loading, empty and error states, and paging over the API's
// cursors (next_page_uri) with a "Load more" button. A quiet reload (live updates) draws the
// rows again only when the API's page changed, and keeps the keyboard focus on the same
// control of the same row; once a person loaded more pages, quiet reloads leave the list as
// it is (rows they scrolled to do not vanish under them).
import * as api from "./api.js";
import { h, clear, loading, empty, errorBox, uid } from "./dom.js";

// What has the focus inside `root`: its row's id and the control's name (data-action, else
// its text), to find it again once the rows are drawn anew.
function focusedControl(root) {
  const active = document.activeElement;
  if (!active || active === root || !root.contains(active)) return null;
  const row = active.closest("tr[data-id]");
  return { row: row ? row.dataset.id : null, name: active.dataset.action || active.textContent };
}

function refocus(root, control) {
  if (!control) return;
  for (const node of root.querySelectorAll("button, a[href], input, select, textarea")) {
    const row = node.closest("tr[data-id]");
    if ((row ? row.dataset.id : null) === control.row
        && (node.dataset.action || node.textContent) === control.name) {
      node.focus({ preventScroll: true });
      return;
    }
  }
}

export function listView({ path, key, what, columns, actions, emptyText, onItems }) {
  const titleId = uid("list");
  const body = h("div", { class: "list-body", "aria-live": "polite" });
  const more = h("div", { class: "more" });
  const note = h("div", { class: "list-note" });
  const node = h("section", { class: "list", "aria-labelledby": titleId, dataset: { list: key } },
                 h("h2", { id: titleId, class: "visually-hidden" }, what), note, body, more);
  let items = [];
  let generation = 0;
  let pages = 0; // pages shown (1 after a reload; more after "Load more")
  let shown = null; // the first page as drawn (JSON): a quiet reload redraws when it changed
  let next = null;
  let reading = 0; // reads of the first page on their way

  function table(rows) {
    const heads = columns.map((column) => h("th", { scope: "col" }, column.label));
    if (actions) heads.push(h("th", { scope: "col" }, h("span", { class: "visually-hidden" }, "Actions")));
    return h("div", { class: "table-wrap", tabindex: "0", role: "region", "aria-label": what },
             h("table", {}, h("thead", {}, h("tr", {}, heads)),
               h("tbody", {}, rows.map((item) => h("tr", { dataset: { id: item.id || "" } },
                 columns.map((column) => h("td", { "data-label": column.label }, column.cell(item))),
                 actions ? h("td", { class: "row-actions" }, actions(item, reload)) : null)))));
  }

  function render(nextUri) {
    next = nextUri;
    const focus = focusedControl(node);
    if (!items.length) {
      clear(body, empty(emptyText || `No ${what} yet.`));
    } else {
      clear(body, table(items));
    }
    clear(more);
    if (nextUri) {
      more.append(h("button", { type: "button", onclick: () => loadMore(nextUri) }, "Load more"));
    }
    refocus(node, focus);
    if (onItems) onItems(items);
  }

  async function loadMore(uri) {
    const mine = generation;
    clear(more, loading(`more ${what}`));
    try {
      const page = await api.get(uri);
      if (mine !== generation) return;
      items = items.concat(page[key] || []);
      pages += 1;
      render(page.next_page_uri);
    } catch (err) {
      clear(more, errorBox(err));
    }
  }

  // quiet: keep what is shown until the new page is there (live updates, no flicker). A
  // quiet reload while a read is still on its way is skipped: it would supersede that read,
  // and with an API slower than the poll every answer would be dropped and the list never
  // leave its loading state.
  async function reload({ quiet = false } = {}) {
    if (quiet && (pages > 1 || reading)) return;
    generation += 1;
    const mine = generation;
    if (!quiet) clear(body, loading(what));
    reading += 1;
    try {
      const page = await api.get(path);
      if (mine !== generation) return;
      clear(note);
      const seen = JSON.stringify([page[key] || [], page.next_page_uri || null]);
      if (quiet && seen === shown) return;
      shown = seen;
      items = page[key] || [];
      pages = 1;
      render(page.next_page_uri);
    } catch (err) {
      if (mine !== generation) return;
      if (!quiet || !items.length) clear(body, errorBox(err));
      else clear(note, errorBox(err));
    } finally {
      reading -= 1;
    }
  }

  // Draw the rows again from what was read (a row's own state changed, not the API's page).
  function redraw() {
    if (pages) render(next);
  }

  return { node, reload, redraw };
}

// Page header: a title and a line that says what the page shows.
export function pageHead(title, intro, ...extra) {
  return h("header", { class: "page-head" }, h("h1", { tabindex: "-1" }, title),
           intro ? h("p", { class: "intro" }, intro) : null, extra);
}
