/* slurmtower reports (/ui/reports): shows the form's fields of the report chosen (the others
   are disabled, so the address carries only the report's own parameters), leaves empty fields
   out of the address, and draws each usage chart with uPlot: per period, the groups stacked,
   the largest at the bottom. The chart's figures come from the page (data-chart), the same
   report as its table. No build. */
(function () {
  "use strict";
  const form = document.getElementById("reports-form");
  const kind = document.getElementById("reports-kind");

  function applies(el, k) { return (el.dataset.kinds || "").split(" ").indexOf(k) >= 0; }

  function showFields() {
    const k = kind.value;
    form.querySelectorAll(".jobs-field[data-kinds]").forEach((box) => {
      const on = applies(box, k);
      box.style.display = on ? "" : "none";
      box.querySelectorAll("input, select").forEach((input) => { input.disabled = !on; });
    });
    form.querySelectorAll("select option[data-kinds]").forEach((opt) => {
      opt.disabled = !applies(opt, k);
      opt.hidden = opt.disabled;
    });
    form.querySelectorAll("select").forEach((sel) => {
      const chosen = sel.options[sel.selectedIndex];
      if (chosen && chosen.disabled) {
        const first = [...sel.options].find((o) => !o.disabled && o.value === "account") ||
                      [...sel.options].find((o) => !o.disabled);
        if (first) { sel.value = first.value; }
      }
    });
  }
  if (form && kind) {
    kind.addEventListener("change", showFields);
    showFields();
    form.addEventListener("submit", () => {
      form.querySelectorAll("input, select").forEach((input) => {
        if (!input.disabled && input.value.trim() === "") { input.disabled = true; }
      });
      /* the page may come back from the history cache: fields enabled again there */
      setTimeout(showFields, 0);
    });
  }

  /* --- usage charts: stacked bars per period --- */
  const COLOURS = ["#2563eb", "#16a34a", "#ea580c", "#9333ea", "#0891b2", "#dc2626", "#ca8a04", "#db2777", "#64748b"];
  function hours(v) {
    if (v === null || v === undefined) { return ""; }
    return v >= 100 ? v.toFixed(0) : v.toFixed(2);
  }
  function drawChart(el) {
    let spec;
    try { spec = JSON.parse(el.dataset.chart); } catch (e) { return; }
    const n = spec.labels.length;
    const xs = spec.labels.map((_, i) => i);
    let acc = xs.map(() => 0);
    const stacked = spec.series.map((s) => { acc = acc.map((a, i) => a + (s.hours[i] || 0)); return acc.slice(); });
    /* uPlot draws the series in order: the tallest stack first, each lower one in front of it;
       the legend so reads from the top of the bars down */
    const order = spec.series.map((_, k) => k).reverse();
    const width = Math.max(320, el.clientWidth || 640);
    const step = Math.max(1, Math.ceil(n / Math.max(1, Math.floor(width / 110))));
    const top = stacked.length ? Math.max(...stacked[stacked.length - 1]) : 0;
    const opts = {
      width: width, height: 260,
      scales: {x: {time: false, range: () => [-0.5, n - 0.5]}, y: {range: () => [0, top > 0 ? top * 1.05 : 1]}},
      axes: [
        {splits: () => xs.filter((i) => i % step === 0), values: (u, splits) => splits.map((i) => spec.labels[i] || "")},
        {label: spec.unit, size: 60, values: (u, splits) => splits.map(hours)},
      ],
      series: [{label: "period", value: (u, v) => (v === null || v === undefined ? "" : spec.labels[v] || "")}].concat(
        order.map((k) => ({
          label: spec.series[k].name, fill: COLOURS[k % COLOURS.length], stroke: COLOURS[k % COLOURS.length], width: 0,
          points: {show: false}, paths: uPlot.paths.bars({size: [0.8, 120]}),
          value: (u, v, si, idx) => (idx === null || idx === undefined ? "" : hours(spec.series[k].hours[idx])),
        }))),
    };
    el.innerHTML = "";
    const chart = new uPlot(opts, [xs].concat(order.map((k) => stacked[k])), el);
    el.dataset.drawn = String(chart.series.length - 1);
  }
  if (window.uPlot) { document.querySelectorAll(".report-chart[data-chart]").forEach(drawChart); }
}());
