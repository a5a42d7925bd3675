// memmath_lessons.live_html: a piece of a lesson (a table, a paragraph of numbers) kept in the page,
// its contents replaced in place.
//
// The model holds `html`: what viz.plain_table or mo.md wrote, plain HTML without marimo's own
// elements. A change of it replaces this element's contents: a parse of a few kB, where marimo
// re-rendering a cell's output rebuilds that output's React tree. Every update is counted in
// `data-updates`, as the live chart counts its own, for the browser tests.

function render({ model, el }) {
  const box = document.createElement("div");
  box.className = "memmath-live-html";
  el.appendChild(box);
  box.innerHTML = model.get("html") || "";
  box.dataset.updates = "0";
  const show = () => {
    box.innerHTML = model.get("html") || "";
    box.dataset.updates = String(Number(box.dataset.updates) + 1);
  };
  model.on("change:html", show);
  return () => model.off("change:html", show);
}

export default { render };
