/* daydream report: draws the timelines (canvas per track) and the memory charts (SVG) from the
   JSON in #daydream-data. Every trace-derived string reaches the page through textContent or an
   attribute set from script, never as HTML. */
(function () {
  "use strict";

  var data = JSON.parse(document.getElementById("daydream-data").textContent);
  var SVG = "http://www.w3.org/2000/svg";  /* the SVG namespace name, not a resource */
  var PHASE_COLORS = {forward: "#4c78a8", backward: "#f58518", optimizer: "#54a24b", other: "#9a9a9a", none: "#cfcfcf"};
  var CATEGORY_COLORS = {
    "weights": "#4c72b0", "activations": "#dd8452", "gradients": "#55a868", "optimizer state": "#c44e52",
    "workspace": "#da8bc3", "temporaries": "#8172b3", "before the trace": "#937860", "other": "#bbbbbb"
  };
  var tooltip = document.getElementById("tooltip");

  function element(tag, className, text) {
    var node = document.createElement(tag);
    if (className) { node.className = className; }
    if (text !== undefined) { node.textContent = text; }
    return node;
  }

  function formatNs(ns) {
    var value = Math.abs(ns);
    var units = [["s", 1e9], ["ms", 1e6], ["µs", 1e3]];
    for (var i = 0; i < units.length; i++) {
      if (value >= units[i][1]) {
        var scaled = ns / units[i][1];
        return (Math.abs(scaled) < 100 ? scaled.toPrecision(3) : scaled.toFixed(0)) + " " + units[i][0];
      }
    }
    return ns.toFixed(0) + " ns";
  }

  function formatBytes(bytes) {
    var units = ["B", "KiB", "MiB", "GiB", "TiB"];
    var value = bytes;
    var unit = 0;
    while (Math.abs(value) >= 1024 && unit < units.length - 1) { value /= 1024; unit += 1; }
    return (unit === 0 ? value.toFixed(0) : value.toFixed(1)) + " " + units[unit];
  }

  /* A round tick step (1, 2 or 5 times a power of ten) giving about `count` ticks over `span`. */
  function tickStep(span, count) {
    var raw = span / Math.max(count, 1);
    var power = Math.pow(10, Math.floor(Math.log10(raw)));
    var steps = [1, 2, 5, 10];
    for (var i = 0; i < steps.length; i++) {
      if (steps[i] * power >= raw) { return steps[i] * power; }
    }
    return 10 * power;
  }

  function showTip(event, name, meta) {
    tooltip.textContent = "";
    tooltip.appendChild(element("div", "tip-name", name));
    meta.forEach(function (line) { tooltip.appendChild(element("div", "tip-meta", line)); });
    tooltip.hidden = false;
    var x = event.clientX + 14;
    var y = event.clientY + 16;
    var box = tooltip.getBoundingClientRect();
    if (x + box.width > window.innerWidth - 8) { x = Math.max(8, event.clientX - box.width - 14); }
    if (y + box.height > window.innerHeight - 8) { y = Math.max(8, event.clientY - box.height - 12); }
    tooltip.style.left = x + "px";
    tooltip.style.top = y + "px";
  }

  function hideTip() { tooltip.hidden = true; }

  /* Size a canvas's backing store to its CSS box (sharp on high-DPI screens); returns its 2D context. */
  function prepare(canvas) {
    var ratio = window.devicePixelRatio || 1;
    var width = canvas.clientWidth;
    var height = canvas.clientHeight;
    if (canvas.width !== Math.round(width * ratio) || canvas.height !== Math.round(height * ratio)) {
      canvas.width = Math.round(width * ratio);
      canvas.height = Math.round(height * ratio);
    }
    var context = canvas.getContext("2d");
    context.setTransform(ratio, 0, 0, ratio, 0, 0);
    context.clearRect(0, 0, width, height);
    return context;
  }

  /* ------------------------------------------------------------------ timeline */

  function Timeline(root, timeline) {
    this.root = root;
    this.timeline = timeline;
    this.width = timeline.fields.length;
    /* where each field of a box sits in the flat list (data.py BOX_FIELDS), by name */
    this.field = {};
    for (var f = 0; f < timeline.fields.length; f++) { this.field[timeline.fields[f]] = f; }
    this.start = 0;
    this.end = timeline.axis_ns;
    this.tracks = [];
    this.axes = [];
    this.build();
  }

  Timeline.prototype.build = function () {
    var self = this;
    var timeline = this.timeline;
    timeline.views.forEach(function (view, index) {
      var section = element("section", "tl-view");
      section.setAttribute("data-view", index === 0 ? "measured" : "predicted");
      var title = element("div", "tl-title", view.title);
      title.appendChild(element("span", "small", "iteration " + formatNs(view.duration_ns)));
      section.appendChild(title);
      var axis = element("div", "tl-row tl-axis");
      axis.appendChild(element("div", "track-label", ""));
      var axisCanvas = element("canvas");
      axis.appendChild(axisCanvas);
      section.appendChild(axis);
      self.axes.push({canvas: axisCanvas, view: view});
      timeline.tracks.forEach(function (track, position) {
        var row = element("div", "tl-row track");
        row.setAttribute("data-track", track.label);
        row.setAttribute("data-kind", track.kind);
        var label = element("div", "track-label " + track.kind, track.label);
        label.title = track.label;
        row.appendChild(label);
        var canvas = element("canvas");
        row.appendChild(canvas);
        section.appendChild(row);
        var entry = {canvas: canvas, boxes: view.boxes[position], view: view, track: track};
        self.tracks.push(entry);
        self.listen(entry);
      });
      self.root.appendChild(section);
    });
    document.querySelectorAll("[data-zoom]").forEach(function (button) {
      button.addEventListener("click", function () {
        var middle = (self.start + self.end) / 2;
        var action = button.getAttribute("data-zoom");
        if (action === "reset") { self.setRange(0, self.timeline.axis_ns); } else { self.zoom(action === "in" ? 0.5 : 2, middle); }
      });
    });
    var pending = false;
    window.addEventListener("resize", function () {
      if (pending) { return; }
      pending = true;
      window.requestAnimationFrame(function () { pending = false; self.render(); });
    });
  };

  Timeline.prototype.timeAt = function (canvas, clientX) {
    var rect = canvas.getBoundingClientRect();
    return this.start + (clientX - rect.left) / rect.width * (this.end - this.start);
  };

  Timeline.prototype.setRange = function (start, end) {
    var axis = this.timeline.axis_ns;
    var span = Math.min(Math.max(end - start, 1000), axis);
    start = Math.min(Math.max(start, 0), axis - span);
    this.start = start;
    this.end = start + span;
    this.render();
  };

  Timeline.prototype.zoom = function (factor, center) {
    var span = (this.end - this.start) * factor;
    var start = center - (center - this.start) * factor;
    this.setRange(start, start + span);
  };

  Timeline.prototype.listen = function (entry) {
    var self = this;
    var canvas = entry.canvas;
    var drag = null;
    canvas.addEventListener("mousemove", function (event) {
      if (drag) { return; }
      self.hover(entry, event);
    });
    canvas.addEventListener("mouseleave", hideTip);
    canvas.addEventListener("mousedown", function (event) {
      drag = {x: event.clientX, start: self.start, end: self.end};
      canvas.classList.add("dragging");
      hideTip();
      event.preventDefault();
    });
    window.addEventListener("mousemove", function (event) {
      if (!drag) { return; }
      var shift = (event.clientX - drag.x) / canvas.clientWidth * (drag.end - drag.start);
      self.setRange(drag.start - shift, drag.end - shift);
    });
    window.addEventListener("mouseup", function () {
      drag = null;
      canvas.classList.remove("dragging");
    });
    canvas.addEventListener("dblclick", function (event) {
      self.zoom(event.shiftKey ? 2 : 0.5, self.timeAt(canvas, event.clientX));
    });
    canvas.addEventListener("wheel", function (event) {
      if (event.ctrlKey || event.metaKey || event.altKey) {
        event.preventDefault();
        self.zoom(Math.exp(event.deltaY * 0.0015), self.timeAt(canvas, event.clientX));
      } else if (event.shiftKey || Math.abs(event.deltaX) > Math.abs(event.deltaY)) {
        event.preventDefault();
        var delta = (event.deltaX || event.deltaY) / canvas.clientWidth * (self.end - self.start);
        self.setRange(self.start + delta, self.end + delta);
      }
    }, {passive: false});
  };

  /* The index of the last box starting at or before `time` (-1 when none does). */
  Timeline.prototype.lastStartingBy = function (boxes, time) {
    var low = 0;
    var high = boxes.length / this.width;
    var start = this.field.start_ns;
    while (low < high) {
      var middle = (low + high) >> 1;
      if (boxes[middle * this.width + start] <= time) { low = middle + 1; } else { high = middle; }
    }
    return low - 1;
  };

  Timeline.prototype.hover = function (entry, event) {
    var boxes = entry.boxes;
    var width = this.width;
    var F = this.field;
    var time = this.timeAt(entry.canvas, event.clientX);
    var tolerance = 3 / entry.canvas.clientWidth * (this.end - this.start);
    var found = -1;
    var best = Infinity;
    var last = this.lastStartingBy(boxes, time + tolerance);
    for (var i = Math.max(last - 2, 0); i <= last; i++) {
      var start = boxes[i * width + F.start_ns];
      var end = start + boxes[i * width + F.duration_ns];
      var distance = time < start ? start - time : time > end ? time - end : 0;
      if (distance <= tolerance && distance <= best) { best = distance; found = i; }
    }
    if (found < 0) { hideTip(); return; }
    var at = found * width;
    var timeline = this.timeline;
    var meta = [
      timeline.kinds[boxes[at + F.kind]] + " · " + timeline.phases[boxes[at + F.phase]] + " · " + entry.track.label,
      "starts at +" + formatNs(boxes[at + F.start_ns]) + " · lasts " + formatNs(boxes[at + F.duration_ns])
    ];
    if (boxes[at + F.count] > 1) { meta.push(boxes[at + F.count] + " short tasks drawn as one box; the longest is named"); }
    showTip(event, timeline.names[boxes[at + F.name]], meta);
  };

  Timeline.prototype.render = function () {
    var self = this;
    this.tracks.forEach(function (entry) { self.drawTrack(entry); });
    this.axes.forEach(function (axis) { self.drawAxis(axis); });
    var range = document.getElementById("tl-range");
    if (range) {
      range.textContent = "showing +" + formatNs(this.start) + " to +" + formatNs(this.end) + " of " + formatNs(this.timeline.axis_ns);
    }
  };

  Timeline.prototype.drawTrack = function (entry) {
    var canvas = entry.canvas;
    var context = prepare(canvas);
    var width = canvas.clientWidth;
    var height = canvas.clientHeight;
    var scale = width / (this.end - this.start);
    var ended = (entry.view.duration_ns - this.start) * scale;
    if (ended < width) {  /* after this run's iteration ended */
      context.fillStyle = "#eceff3";
      context.fillRect(Math.max(ended, 0), 0, width - Math.max(ended, 0), height);
    }
    var boxes = entry.boxes;
    var fields = this.width;
    var F = this.field;
    var phases = this.timeline.phases;
    var count = boxes.length / fields;
    var top = entry.track.kind === "gpu" ? 2 : 5;
    var lastPixel = -1;
    var lastColor = "";
    for (var i = Math.max(this.lastStartingBy(boxes, this.start), 0); i < count; i++) {
      var at = i * fields;
      var start = boxes[at + F.start_ns];
      if (start > this.end) { break; }
      var left = (start - this.start) * scale;
      var right = left + boxes[at + F.duration_ns] * scale;
      if (right < 0) { continue; }
      var color = PHASE_COLORS[phases[boxes[at + F.phase]]] || PHASE_COLORS.none;
      context.globalAlpha = boxes[at + F.count] > 1 ? 0.7 : 1;
      context.fillStyle = color;
      if (right - left < 1) {  /* sub-pixel: one pixel column per colour is enough */
        var pixel = Math.floor(left);
        if (pixel === lastPixel && color === lastColor) { continue; }
        lastPixel = pixel;
        lastColor = color;
        context.fillRect(pixel, top, 1, height - 2 * top);
      } else {
        context.fillRect(left, top, right - left > 4 ? right - left - 1 : right - left, height - 2 * top);
      }
    }
    context.globalAlpha = 1;
  };

  Timeline.prototype.drawAxis = function (axis) {
    var canvas = axis.canvas;
    var context = prepare(canvas);
    var width = canvas.clientWidth;
    var height = canvas.clientHeight;
    var span = this.end - this.start;
    var step = tickStep(span, Math.max(width / 110, 2));
    context.font = "11px sans-serif";
    context.textBaseline = "top";
    var ended = Math.round((axis.view.duration_ns - this.start) / span * width);
    var marker = "iteration ends";
    var markerWidth = context.measureText(marker).width;
    var showEnd = ended >= 0 && ended <= width;
    /* The marker's label sits left of the line, or right of it when the line is near the left edge. */
    var markerLeft = ended - markerWidth - 4 < 0 ? ended + 4 : ended - markerWidth - 4;
    context.fillStyle = "#656d76";
    context.strokeStyle = "#c4cbd3";
    for (var time = Math.ceil(this.start / step) * step; time <= this.end; time += step) {
      var x = Math.round((time - this.start) / span * width) + 0.5;
      context.beginPath();
      context.moveTo(x, height - 7);
      context.lineTo(x, height);
      context.stroke();
      var label = formatNs(time);
      var labelRight = x + 3 + context.measureText(label).width;
      var hidden = showEnd && labelRight > markerLeft - 4 && x + 3 < markerLeft + markerWidth + 4;
      if (labelRight < width && !hidden) { context.fillText(label, x + 3, 3); }
    }
    if (showEnd) {
      context.fillStyle = "#cf222e";
      context.fillRect(ended - 1, 0, 2, height);
      context.fillText(marker, markerLeft, 3);
    }
  };

  /* ------------------------------------------------------------------ memory */

  function svgNode(tag, attributes) {
    var node = document.createElementNS(SVG, tag);
    Object.keys(attributes).forEach(function (key) { node.setAttribute(key, attributes[key]); });
    return node;
  }

  function drawMemory(container, series, band) {
    container.textContent = "";
    var width = Math.max(container.clientWidth, 320);
    var height = 260;
    var margin = {left: 70, right: 14, top: 12, bottom: 24};
    var svg = svgNode("svg", {viewBox: "0 0 " + width + " " + height, role: "img"});
    svg.setAttribute("aria-label", "allocated memory of " + series.device + " over time");
    var times = series.times_ns;
    var count = times.length;
    var stacked = [];
    var running = new Array(count).fill(0);
    series.bytes.forEach(function (values) {
      running = running.map(function (sum, i) { return sum + values[i]; });
      stacked.push(running);
    });
    var total = stacked.length ? stacked[stacked.length - 1] : running;
    var first = Math.min(times[0], band[0]);
    var last = Math.max(times[count - 1], band[1], first + 1);
    var highest = Math.max(Math.max.apply(null, total), series.peak_allocated_bytes, 1) * 1.08;
    var plotWidth = width - margin.left - margin.right;
    var plotHeight = height - margin.top - margin.bottom;
    function x(time) { return margin.left + (time - first) / (last - first) * plotWidth; }
    function y(bytes) { return margin.top + plotHeight - bytes / highest * plotHeight; }

    svg.appendChild(svgNode("rect", {x: x(band[0]), y: margin.top, width: Math.max(x(band[1]) - x(band[0]), 1), height: plotHeight,
                                     fill: "rgba(9, 105, 218, 0.08)"}));
    var byteStep = Math.pow(2, Math.ceil(Math.log2(highest / 5)));
    for (var tick = 0; tick <= highest; tick += byteStep) {
      svg.appendChild(svgNode("line", {x1: margin.left, x2: width - margin.right, y1: y(tick), y2: y(tick), stroke: "#eef1f4"}));
      var label = svgNode("text", {x: margin.left - 6, y: y(tick) + 4, "text-anchor": "end"});
      label.textContent = formatBytes(tick);
      svg.appendChild(label);
    }
    var timeStep = tickStep(last - first, plotWidth / 110);
    for (var time = Math.ceil(first / timeStep) * timeStep; time <= last; time += timeStep) {
      var timeLabel = svgNode("text", {x: x(time), y: height - 6, "text-anchor": "middle"});
      timeLabel.textContent = formatNs(time);
      svg.appendChild(timeLabel);
    }
    /* Stacked step areas, last category first so that lower ones are drawn over nothing. */
    for (var k = stacked.length - 1; k >= 0; k--) {
      var upper = stacked[k];
      var lower = k > 0 ? stacked[k - 1] : null;
      var points = [];
      for (var i = 0; i < count; i++) {
        var next = i + 1 < count ? times[i + 1] : times[i];
        points.push(x(times[i]).toFixed(1) + "," + y(upper[i]).toFixed(1), x(next).toFixed(1) + "," + y(upper[i]).toFixed(1));
      }
      for (var j = count - 1; j >= 0; j--) {
        var after = j + 1 < count ? times[j + 1] : times[j];
        var base = lower ? lower[j] : 0;
        points.push(x(after).toFixed(1) + "," + y(base).toFixed(1), x(times[j]).toFixed(1) + "," + y(base).toFixed(1));
      }
      svg.appendChild(svgNode("path", {d: "M" + points.join("L") + "Z", fill: CATEGORY_COLORS[series.categories[k]] || "#bbbbbb"}));
    }
    var peakX = x(series.peak_time_ns);
    svg.appendChild(svgNode("line", {x1: peakX, x2: peakX, y1: margin.top, y2: margin.top + plotHeight, stroke: "#1f2328",
                                     "stroke-dasharray": "4 3"}));
    var peakLabel = svgNode("text", {x: peakX + (peakX > width - 160 ? -6 : 6), y: margin.top + 12,
                                     "text-anchor": peakX > width - 160 ? "end" : "start"});
    peakLabel.textContent = "peak " + formatBytes(series.peak_allocated_bytes);
    peakLabel.setAttribute("style", "fill: #1f2328; font-weight: 600");
    svg.appendChild(peakLabel);
    svg.appendChild(svgNode("line", {x1: margin.left, x2: width - margin.right, y1: y(0), y2: y(0), stroke: "#8c959f"}));
    var cursor = svgNode("line", {x1: 0, x2: 0, y1: margin.top, y2: margin.top + plotHeight, stroke: "#57606a", visibility: "hidden"});
    svg.appendChild(cursor);
    var overlay = svgNode("rect", {x: margin.left, y: margin.top, width: plotWidth, height: plotHeight, fill: "transparent"});
    overlay.addEventListener("mousemove", function (event) {
      var rect = svg.getBoundingClientRect();
      var time = first + ((event.clientX - rect.left) / rect.width * width - margin.left) / plotWidth * (last - first);
      var index = 0;
      while (index + 1 < count && times[index + 1] <= time) { index += 1; }
      cursor.setAttribute("x1", x(times[index]));
      cursor.setAttribute("x2", x(times[index]));
      cursor.setAttribute("visibility", "visible");
      var lines = series.categories.map(function (name, k) { return name + ": " + formatBytes(series.bytes[k][index]); });
      showTip(event, formatBytes(total[index]) + " allocated at " + formatNs(times[index]), lines);
    });
    overlay.addEventListener("mouseleave", function () { cursor.setAttribute("visibility", "hidden"); hideTip(); });
    svg.appendChild(overlay);
    container.appendChild(svg);
    var legend = element("div", "memory-legend");
    series.categories.forEach(function (name) {
      var swatch = element("span", "swatch");
      swatch.style.background = CATEGORY_COLORS[name] || "#bbbbbb";
      legend.appendChild(swatch);
      legend.appendChild(document.createTextNode(name));
    });
    legend.appendChild(document.createTextNode(" — " + series.points.toLocaleString() + " memory events; time since the trace began"));
    container.appendChild(legend);
  }

  function drawMemoryCharts() {
    document.querySelectorAll(".memory-chart[data-series]").forEach(function (container) {
      var series = data.memory.series[Number(container.getAttribute("data-series"))];
      drawMemory(container, series, data.memory.iteration_ns);
    });
  }

  var root = document.getElementById("timeline");
  if (root && data.timeline) {
    new Timeline(root, data.timeline).render();
  }
  drawMemoryCharts();
  var resized = false;
  window.addEventListener("resize", function () {
    if (resized) { return; }
    resized = true;
    window.setTimeout(function () { resized = false; drawMemoryCharts(); }, 150);
  });
  /* When drawing finished, in ms since the page began to load (for people and tests measuring it). */
  document.documentElement.setAttribute("data-rendered-ms", String(Math.round(window.performance.now())));
})();
