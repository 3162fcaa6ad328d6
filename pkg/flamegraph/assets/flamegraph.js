// The flame graph of profsym's pkg/flamegraph: draws the call tree held in #profile-data as
// rows of absolutely positioned divs, the root on top. Clicking a frame makes it the full width
// (its ancestors stay, dimmed, above it); clicking the root resets. The search box marks
// matching frames and sums their share of the total.
(function () {
  "use strict";
  var data = JSON.parse(document.getElementById("profile-data").textContent);
  var S = data.strings;
  var graph = document.getElementById("graph");
  var details = document.getElementById("details");
  var search = document.getElementById("search");
  var matched = document.getElementById("matched");
  var ROW = 18;

  // Flatten: every node gets its parent, depth and start (in units of value from the root's
  // left edge), so zooming is arithmetic.
  var nodes = [];
  function walk(n, parent, depth, start) {
    n.parent = parent; n.depth = depth; n.start = start; n.id = nodes.length;
    nodes.push(n);
    var x = start;
    (n.c || []).forEach(function (c) { walk(c, n, depth + 1, x); x += c.v; });
  }
  walk(data.root, null, 0, 0);
  var maxDepth = 0;
  nodes.forEach(function (n) { if (n.depth > maxDepth) maxDepth = n.depth; });

  function name(n) { return n.parent ? S[n.n] : "all"; }
  function file(n) { return S[n.f || 0]; }
  function kind(n) { return S[n.k || 0]; }
  function base(p) { var i = p.lastIndexOf("/"); return i < 0 ? p : p.slice(i + 1); }
  function loc(n, short) {
    var f = file(n);
    if (!f) return "";
    f = short ? base(f) : f;
    if (!n.l || !n.l.length) return f;
    return f + ":" + n.l[0][0];
  }
  function pct(v) { return data.total ? (100 * v / data.total).toFixed(2) + "%" : "0%"; }
  function fmt(v) { return v.toLocaleString("en-US"); }

  var hues = { native: [20, 50], kernel: [195, 225], go: [160, 185], rust: [5, 20], "": [35, 55] };
  function hash(s) { var h = 0; for (var i = 0; i < s.length; i++) h = (h * 31 + s.charCodeAt(i)) | 0; return Math.abs(h); }
  function color(n) {
    if (!n.parent) return "hsl(0,0%,82%)";
    if (n.u) return "hsl(0,0%," + (70 + hash(name(n)) % 12) + "%)";
    var r = hues[kind(n)] || [270, 300];
    var h = hash(name(n));
    var hue = r[0] + h % (r[1] - r[0] + 1);
    var light = n.i ? 82 : 62 + (h >> 5) % 12;
    return "hsl(" + hue + ",80%," + light + "%)";
  }

  document.getElementById("summary").textContent = fmt(data.total) + " " + data.unit + " in " + fmt(nodes.length - 1) + " frames";
  var legend = document.getElementById("legend");
  data.kinds.forEach(function (k) {
    var s = document.createElement("span");
    s.textContent = k.kind || "unknown kind";
    var r = hues[k.kind] || [270, 300];
    s.style.setProperty("--swatch", "hsl(" + r[0] + ",80%,65%)");
    legend.appendChild(s);
  });
  var inl = document.createElement("span");
  inl.className = "inl"; inl.textContent = "inlined (dashed, italic)";
  legend.appendChild(inl);

  function describe(n) {
    var parts = [name(n) + (n.i ? "  [inlined]" : "") + (n.u ? "  [unsymbolized]" : "")];
    var f = file(n);
    if (f) {
      var lines = (n.l || []).map(function (l) { return ":" + l[0] + " (" + pct(l[1]) + ")"; }).join(" ");
      parts.push(f + (lines ? " " + lines : "") + (n.lc ? " ... " + n.lc + " lines" : ""));
    }
    if (n.parent && kind(n)) parts.push(kind(n));
    parts.push(fmt(n.v) + " " + data.unit + ", " + pct(n.v));
    return parts.join("  |  ");
  }

  var zoomed = data.root;
  var matchRe = null;
  var els = [];

  function isAncestor(a, n) { for (var p = n; p; p = p.parent) if (p === a) return true; return false; }

  function render() {
    var width = graph.clientWidth;
    graph.textContent = "";
    els = [];
    graph.style.height = (maxDepth + 1) * ROW + "px";
    var frag = document.createDocumentFragment();
    var scale = width / zoomed.v;
    var matchedValue = 0;
    nodes.forEach(function (n) {
      var left, w, anc = false;
      if (n.depth < zoomed.depth || n === zoomed) {
        if (!isAncestor(n, zoomed)) return;
        left = 0; w = width; anc = n !== zoomed;
      } else {
        if (!isAncestor(zoomed, n)) return;
        left = (n.start - zoomed.start) * scale;
        w = n.v * scale;
      }
      if (w < 0.5) return;
      var d = document.createElement("div");
      d.className = "frame" + (n.i ? " inlined" : "") + (n.u ? " unsym" : "") + (anc ? " ancestor" : "");
      d.style.left = left + "px";
      d.style.width = w + "px";
      d.style.top = n.depth * ROW + "px";
      d.style.background = color(n);
      d.dataset.id = n.id;
      d.dataset.name = name(n);
      d.title = describe(n);
      if (w > 24) {
        d.textContent = name(n);
        var l = loc(n, true);
        if (l && w > 120) {
          var s = document.createElement("span");
          s.className = "loc"; s.textContent = l;
          d.appendChild(s);
        }
      }
      if (matchRe && n.parent && (matchRe.test(name(n)) || matchRe.test(file(n)))) {
        d.classList.add("match");
      }
      frag.appendChild(d);
      els.push(d);
    });
    graph.appendChild(frag);
    if (matchRe) {
      // The share of matching frames counts each stack once: a match below a match adds nothing.
      var sum = function (n, inside) {
        var hit = n.parent && (matchRe.test(name(n)) || matchRe.test(file(n)));
        if (hit && !inside) matchedValue += n.v;
        (n.c || []).forEach(function (c) { sum(c, inside || hit); });
      };
      sum(data.root, false);
      matched.textContent = "matched: " + pct(matchedValue);
    } else {
      matched.textContent = "";
    }
  }

  graph.addEventListener("click", function (e) {
    var t = e.target.closest(".frame");
    if (!t) return;
    var n = nodes[+t.dataset.id];
    zoomed = n.parent ? n : data.root;
    render();
  });
  graph.addEventListener("mouseover", function (e) {
    var t = e.target.closest(".frame");
    if (t) details.textContent = describe(nodes[+t.dataset.id]);
  });
  search.addEventListener("input", function () {
    var q = search.value.trim();
    matchRe = null;
    if (q) {
      try { matchRe = new RegExp(q, "i"); } catch (err) {
        matchRe = new RegExp(q.replace(/[.*+?^${}()|[\]\\]/g, "\\$&"), "i");
      }
    }
    render();
  });
  var pending = 0;
  window.addEventListener("resize", function () {
    cancelAnimationFrame(pending);
    pending = requestAnimationFrame(render);
  });
  render();
})();
