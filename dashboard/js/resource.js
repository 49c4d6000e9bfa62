// A list of one API collection: loading, empty and error states, and paging over the API's
// cursors (next_page_uri) with a "Load more" button.
import * as api from "./api.js";
import { h, clear, loading, empty, errorBox, uid } from "./dom.js";

export function listView({ path, key, what, columns, actions, emptyText, onItems }) {
  const titleId = uid("list");
  const body = h("div", { class: "list-body", "aria-live": "polite" });
  const more = h("div", { class: "more" });
  const note = h("div", { class: "list-note" });
  const node = h("section", { class: "list", "aria-labelledby": titleId, dataset: { list: key } },
                 h("h2", { id: titleId, class: "visually-hidden" }, what), note, body, more);
  let items = [];
  let generation = 0;

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
    if (!items.length) {
      clear(body, empty(emptyText || `No ${what} yet.`));
    } else {
      clear(body, table(items));
    }
    clear(more);
    if (nextUri) {
      more.append(h("button", { type: "button", onclick: () => loadMore(nextUri) }, "Load more"));
    }
    if (onItems) onItems(items);
  }

  async function loadMore(uri) {
    const mine = generation;
    clear(more, loading(`more ${what}`));
    try {
      const page = await api.get(uri);
      if (mine !== generation) return;
      items = items.concat(page[key] || []);
      render(page.next_page_uri);
    } catch (err) {
      clear(more, errorBox(err));
    }
  }

  // quiet: keep what is shown until the new page is there (live updates, no flicker).
  async function reload({ quiet = false } = {}) {
    generation += 1;
    const mine = generation;
    if (!quiet) clear(body, loading(what));
    try {
      const page = await api.get(path);
      if (mine !== generation) return;
      items = page[key] || [];
      clear(note);
      render(page.next_page_uri);
    } catch (err) {
      if (mine !== generation) return;
      if (!quiet || !items.length) clear(body, errorBox(err));
      else clear(note, errorBox(err));
    }
  }

  return { node, reload };
}

// Page header: a title and a line that says what the page shows.
export function pageHead(title, intro, ...extra) {
  return h("header", { class: "page-head" }, h("h1", { tabindex: "-1" }, title),
           intro ? h("p", { class: "intro" }, intro) : null, extra);
}
