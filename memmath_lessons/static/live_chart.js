// memmath_lessons.live_chart: a Vega-Lite chart kept alive in the page, fed new rows in place.
//
// The model holds `spec` (a Vega-Lite spec whose datasets are named, without their rows), `rows`
// (dataset name -> rows) and `runtime` (URLs of vega, vega-lite and vega-embed, for pages whose
// module does not carry them). A change of `rows` alone goes into the living view
// (view.change(name, changeset().remove(all).insert(rows)), then runAsync): no parse, no compile,
// no new canvas. A change of `spec` (another unit on an axis, another number of bars) embeds the
// chart anew. `signals` (top-level param name -> value) go into the living view as signals: what a
// slider moves beside the data (a title's number, an axis window) is a param of the chart.

const RUNTIME = "__memmathVegaRuntime";

function loadScript(url) {
  return new Promise((resolve, reject) => {
    const script = document.createElement("script");
    script.src = new URL(url, document.baseURI).href;
    script.onload = resolve;
    script.onerror = () => reject(new Error(`memmath live chart: could not load ${url}`));
    document.head.appendChild(script);
  });
}

function runtime(urls) {
  if (globalThis.vegaEmbed && globalThis.vega) return Promise.resolve();
  if (!globalThis[RUNTIME]) {
    globalThis[RUNTIME] = (async () => {
      // The UMD builds register with an AMD loader when the page has one; we want the globals.
      const amd = globalThis.define;
      globalThis.define = undefined;
      try {
        for (const url of urls || []) await loadScript(url);
      } finally {
        globalThis.define = amd;
      }
      if (!globalThis.vegaEmbed) throw new Error("memmath live chart: the vega runtime did not load");
    })();
  }
  return globalThis[RUNTIME];
}

const countRows = (rows) => Object.values(rows).reduce((n, values) => n + values.length, 0);

function render({ model, el }) {
  const box = document.createElement("div");
  box.className = "memmath-live-chart";
  el.appendChild(box);
  let view = null;
  let drawn = null; // the spec (as JSON) the view was built from
  let running = false;
  let again = false;
  let closed = false;

  async function sync() {
    await runtime(model.get("runtime"));
    const spec = model.get("spec") || {};
    const rows = model.get("rows") || {};
    const signals = model.get("signals") || {};
    if (closed || !Object.keys(spec).length) return;
    const key = JSON.stringify(spec);
    if (view && key === drawn) {
      for (const [name, values] of Object.entries(rows)) {
        view.change(name, globalThis.vega.changeset().remove(() => true).insert(values));
      }
      for (const [name, value] of Object.entries(signals)) view.signal(name, value);
      // New rows can widen the axis labels: lay the chart out again (autosize "pad"), as a new chart would be.
      await view.resize().runAsync();
      box.dataset.rows = String(countRows(rows));
      // Also the one DOM change an update makes (a canvas redraw is none): what the speed benchmark sees.
      box.dataset.updates = String(Number(box.dataset.updates || 0) + 1);
      return;
    }
    if (view) view.finalize();
    const usermeta = spec.usermeta || {};
    const options = {
      mode: "vega-lite",
      renderer: "canvas",
      actions: { source: false, compiled: false },
      ...(usermeta.embedOptions || {}),
    };
    const result = await globalThis.vegaEmbed(box, { ...spec, datasets: { ...(spec.datasets || {}), ...rows } }, options);
    view = result.view;
    drawn = key;
    box.dataset.rows = String(countRows(rows));
    // The spec carries the param values of its own update; later updates may have moved them.
    let moved = false;
    for (const [name, value] of Object.entries(model.get("signals") || {})) {
      if (view.signal(name) !== value) { view.signal(name, value); moved = true; }
    }
    if (moved) await view.resize().runAsync();
    box.dataset.embeds = String(Number(box.dataset.embeds || 0) + 1);
  }

  // One sync at a time; changes that arrive meanwhile are taken together by one more.
  async function schedule() {
    if (running) {
      again = true;
      return;
    }
    running = true;
    try {
      do {
        again = false;
        await sync();
      } while (again && !closed);
    } catch (error) {
      console.error("memmath live chart:", error);
    } finally {
      running = false;
    }
  }

  // One message can change rows, signals and spec together: one sync for all of them.
  let requested = false;
  function request() {
    if (requested) return;
    requested = true;
    queueMicrotask(() => {
      requested = false;
      schedule();
    });
  }

  model.on("change:spec", request);
  model.on("change:rows", request);
  model.on("change:signals", request);
  schedule();
  return () => {
    closed = true;
    model.off("change:spec", request);
    model.off("change:rows", request);
    model.off("change:signals", request);
    if (view) view.finalize();
  };
}

export default { render };
