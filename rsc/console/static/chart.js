// A small SVG line chart for the console: time on x, whole numbers (or seconds) on y.
// RscChart.draw(svg, series, {now, windowMs, unit}) redraws `svg` from scratch;
// series: [{name, cls, points: [[timeMs, value or null], ...]}]; a null value breaks the line.
// unit "s": the values are durations in seconds, labelled 45 s, 2 min 30 s, 1 h 30 min.
// Labels are set with textContent only.
"use strict";

(function () {
  const NS = "http://www.w3.org/2000/svg";
  const figure = new Intl.NumberFormat("en-US", {maximumFractionDigits: 0});

  function node(tag, attributes, text) {
    const element = document.createElementNS(NS, tag);
    for (const [name, value] of Object.entries(attributes || {})) {
      element.setAttribute(name, String(value));
    }
    if (text !== undefined) {
      element.textContent = text;
    }
    return element;
  }

  // Tick values for 0..max: 1, 2 or 5 times a power of ten, about `count` of them, whole numbers.
  function ticks(max, count) {
    if (max <= 0) {
      return {top: 1, step: 1};
    }
    const rough = max / count;
    const power = Math.pow(10, Math.floor(Math.log10(rough)));
    let step = [1, 2, 5, 10].map((m) => m * power).find((s) => s >= rough);
    step = Math.max(1, Math.round(step));
    return {top: Math.ceil(max / step) * step, step: step};
  }

  // The same for seconds: steps a clock reads (10 s, 30 s, 5 min, 1 h), hours past a day.
  const CLOCK_STEPS = [1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 21600,
    43200, 86400];
  function secondTicks(max, count) {
    const rough = max / count;
    if (max <= 0 || rough > CLOCK_STEPS[CLOCK_STEPS.length - 1]) {
      return max <= 0 ? {top: 1, step: 1} : ticks(max, count);
    }
    const step = CLOCK_STEPS.find((s) => s >= rough);
    return {top: Math.ceil(max / step) * step, step: step};
  }

  // 45 s, 2 min, 2 min 30 s, 1 h 5 min: whole seconds, the two largest units
  function duration(seconds) {
    const s = Math.round(seconds);
    if (s < 120) {
      return `${figure.format(s)} s`;
    }
    if (s < 3600) {
      return s % 60 ? `${Math.floor(s / 60)} min ${s % 60} s` : `${s / 60} min`;
    }
    const minutes = Math.round(s / 60) % 60;
    const hours = figure.format(Math.floor(Math.round(s / 60) / 60));
    return minutes ? `${hours} h ${minutes} min` : `${hours} h`;
  }

  function draw(svg, series, options) {
    const width = svg.clientWidth || 800;
    const height = svg.clientHeight || 220;
    const pad = {left: 70, right: 16, top: 28, bottom: 28};
    const now = options.now;
    const windowMs = options.windowMs;
    const start = now - windowMs;
    while (svg.firstChild) {
      svg.removeChild(svg.firstChild);
    }
    svg.setAttribute("viewBox", `0 0 ${width} ${height}`);
    let max = 0;
    for (const line of series) {
      for (const [t, v] of line.points) {
        if (t >= start && v !== null && v > max) {
          max = v;
        }
      }
    }
    const seconds = options.unit === "s";
    const format = seconds ? duration : (v) => figure.format(v);
    const scale = seconds ? secondTicks(max, 4) : ticks(max, 4);
    const plotW = width - pad.left - pad.right;
    const plotH = height - pad.top - pad.bottom;
    const x = (t) => pad.left + ((t - start) / windowMs) * plotW;
    const y = (v) => pad.top + plotH - (v / scale.top) * plotH;

    const axes = node("g", {class: "axes"});
    for (let v = 0; v <= scale.top; v += scale.step) {
      axes.appendChild(node("line", {x1: pad.left, x2: pad.left + plotW, y1: y(v), y2: y(v),
        class: v === 0 ? "baseline" : "gridline"}));
      axes.appendChild(node("text", {x: pad.left - 6, y: y(v) + 4, "text-anchor": "end"},
        format(v)));
    }
    const windowS = Math.round(windowMs / 1000);
    const stepS = windowS > 1800 ? 600 : windowS > 900 ? 300 : windowS > 300 ? 120 :
      windowS > 120 ? 60 : windowS > 60 ? 20 : 10;
    for (let s = 0; s <= windowS; s += stepS) {
      axes.appendChild(node("text", {x: x(now - s * 1000), y: height - 8, "text-anchor": "middle"},
        s === 0 ? "now" : s % 60 === 0 && s >= 120 ? `-${s / 60} min` : `-${s} s`));
    }
    svg.appendChild(axes);

    let legendX = pad.left;
    for (const line of series) {
      const parts = [];
      let current = [];
      for (const [t, v] of line.points) {
        if (t < start - 60000) {
          continue;
        }
        if (v === null) {
          if (current.length) {
            parts.push(current);
          }
          current = [];
          continue;
        }
        current.push(`${x(Math.max(t, start)).toFixed(1)},${y(v).toFixed(1)}`);
      }
      if (current.length) {
        parts.push(current);
      }
      for (const part of parts) {
        if (part.length === 1) {
          part.push(part[0]);
        }
        svg.appendChild(node("polyline", {points: part.join(" "), class: `series ${line.cls}`}));
      }
      const last = line.points.length ? line.points[line.points.length - 1][1] : null;
      svg.appendChild(node("rect", {x: legendX, y: 8, width: 12, height: 4, class: `swatch ${line.cls}`}));
      const label = node("text", {x: legendX + 16, y: 14, class: "legend"},
        `${line.name} ${last === null ? "unknown" : format(last)}`);
      svg.appendChild(label);
      legendX += 16 + 8 * (line.name.length + 12);
    }
  }

  window.RscChart = {draw: draw, ticks: ticks, duration: duration};
})();
