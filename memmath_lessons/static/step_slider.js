// memmath_lessons.step_slider: a slider whose steps Python replaces in place.
//
// The model holds `steps` (whole numbers, increasing), `chosen` (the learner's last choice) and
// `label`. The thumb sits on the largest step at most `chosen` (the first if none is), as
// StepSlider.shown computes it in Python. New steps from Python only move the thumb; a learner's
// move sets `chosen` to the step moved to and saves it, which re-runs the cells that read the
// slider. The look is marimo's slider (its label, track, thumb and value, measured in Chromium).
// `disabled` (the static site) freezes it as the site freezes marimo's controls: inert, disabled, faded.

const STYLE = `
.memmath-step-slider { display: inline-flex; align-items: center; gap: 6px; height: 28px; padding-right: 8px;
  font-family: "PT Sans", sans-serif; color: rgb(15, 23, 42); }
.memmath-step-slider label { font-size: 16px; line-height: 28px; }
.memmath-step-slider .track { display: flex; align-items: center; gap: 8px; }
.memmath-step-slider input { -webkit-appearance: none; appearance: none; width: 144px; height: 8px; margin: 0;
  border-radius: 9999px; cursor: pointer; outline: none;
  background: linear-gradient(to right, oklch(0.623 0.214 259.815) var(--fill, 0%),
                              oklch(0.929 0.013 255.508) var(--fill, 0%)); }
.memmath-step-slider input::-webkit-slider-thumb { -webkit-appearance: none; appearance: none; width: 16px;
  height: 16px; border-radius: 9999px; background: white; border: 1px solid oklch(0.623 0.214 259.815);
  box-shadow: rgba(128, 128, 128, 0.4) 1px 1px 0 0, rgba(128, 128, 128, 0.2) 0 0 2px 0; transition: background 0.15s; }
.memmath-step-slider input:hover::-webkit-slider-thumb,
.memmath-step-slider input:focus::-webkit-slider-thumb { background: rgb(147, 197, 253); }
.memmath-step-slider input:focus-visible { box-shadow: 0 0 0 2px white, 0 0 0 4px oklch(0.623 0.214 259.815); }
.memmath-step-slider input::-moz-range-thumb { width: 16px; height: 16px; border-radius: 9999px; background: white;
  border: 1px solid oklch(0.623 0.214 259.815); }
.memmath-step-slider .value { font-size: 12px; color: rgb(100, 116, 139); min-width: 16px; }
.memmath-step-slider.frozen { opacity: .45; filter: grayscale(1); cursor: not-allowed; }
.memmath-step-slider.frozen input { cursor: not-allowed; }
.memmath-step-slider.frozen input::-webkit-slider-thumb { opacity: .5; }  /* as marimo's disabled thumb */
`;

// The index of the largest step at most `chosen`, or 0 (as StepSlider.shown).
function shownIndex(steps, chosen) {
  let index = 0;
  steps.forEach((step, k) => { if (step <= chosen) index = k; });
  return index;
}

// The model's steps (Python refuses an empty list; one step, 1, should one ever arrive).
function stepsOf(model) {
  const steps = model.get("steps");
  return Array.isArray(steps) && steps.length ? steps : [1];
}

function render({ model, el }) {
  const style = document.createElement("style");
  style.textContent = STYLE;
  const box = document.createElement("div");
  box.className = "memmath-step-slider";
  const label = document.createElement("label");
  const track = document.createElement("div");
  track.className = "track";
  const input = document.createElement("input");
  input.type = "range";
  input.min = "0";
  input.step = "1";
  input.setAttribute("role", "slider");
  const value = document.createElement("div");
  value.className = "value";
  track.append(input, value);
  box.append(label, track);
  el.append(style, box);
  const id = "memmath-step-slider-" + Math.random().toString(36).slice(2);
  input.id = id;
  label.htmlFor = id;

  // Put the thumb on step `index` of `steps` and say so (the value beside it, the ARIA attributes).
  const show = (steps, index) => {
    const last = Math.max(steps.length - 1, 0);
    input.max = String(last);
    input.value = String(index);
    input.style.setProperty("--fill", last ? `${(100 * index) / last}%` : "0%");
    input.setAttribute("aria-valuemin", String(steps[0]));
    input.setAttribute("aria-valuemax", String(steps[last]));
    input.setAttribute("aria-valuenow", String(steps[index]));
    value.textContent = steps[index].toLocaleString("en-US");
  };
  const draw = () => {
    const steps = stepsOf(model);
    const frozen = Boolean(model.get("disabled"));
    input.disabled = frozen;
    box.inert = frozen;
    box.classList.toggle("frozen", frozen);
    if (frozen) input.setAttribute("aria-disabled", "true");
    else input.removeAttribute("aria-disabled");
    label.textContent = model.get("label") || "";
    input.setAttribute("aria-label", label.textContent);
    show(steps, shownIndex(steps, model.get("chosen")));
  };
  const moved = () => {
    const steps = stepsOf(model);
    const index = Number(input.value);
    show(steps, index);
    if (steps[index] !== model.get("chosen")) {
      model.set("chosen", steps[index]);
      model.save_changes();
    }
  };
  draw();
  input.addEventListener("input", moved);
  model.on("change:steps", draw);
  model.on("change:chosen", draw);
  model.on("change:label", draw);
  model.on("change:disabled", draw);
  return () => {
    input.removeEventListener("input", moved);
    model.off("change:steps", draw);
    model.off("change:chosen", draw);
    model.off("change:label", draw);
    model.off("change:disabled", draw);
  };
}

export default { render };
