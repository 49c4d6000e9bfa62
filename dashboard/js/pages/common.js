// Cells and small pieces several pages share.
import { h, code } from "../dom.js";

export const ID = { label: "ID", cell: (item) => code(item.id) };
export const DESCRIPTION = { label: "Description", cell: (item) => item.description || h("span", { class: "muted" }, "—") };

export function ref(value) {
  return value && value.id ? code(value.id) : h("span", { class: "muted" }, "—");
}

export function section(title, ...children) {
  return h("section", { class: "block" }, h("h2", {}, title), children);
}

// Live updates: `tick` now and every `seconds` while the page is shown and the tab visible.
export function poll(tick, seconds) {
  const timer = window.setInterval(() => {
    if (document.visibilityState === "visible") tick();
  }, seconds * 1000);
  return () => window.clearInterval(timer);
}
