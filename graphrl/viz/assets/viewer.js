/* graphrl trajectory viewer: reads the JSON in #graphrl-data (built by graphrl/viz/payload.py) and
   draws the group table, the graph overlay, the waterfall, the token strip and the per-node table.
   Self-contained: no network, no external code. Token strips are built only for the sample on view. */
(function () {
  "use strict";
  var D = JSON.parse(document.getElementById("graphrl-data").textContent);
  var RENDER_CAP = 20000;
  var PALETTE = 12;
  var byId = function (id) { return document.getElementById(id); };

  function el(tag, attrs, kids) {
    var e = document.createElement(tag);
    if (attrs) for (var k in attrs) {
      if (k === "text") e.textContent = attrs[k];
      else if (k === "cls") e.className = attrs[k];
      else e.setAttribute(k, attrs[k]);
    }
    (kids || []).forEach(function (c) { if (c != null) e.appendChild(typeof c === "string" ? document.createTextNode(c) : c); });
    return e;
  }
  function b64(s) {
    var bin = atob(s), out = new Uint8Array(bin.length);
    for (var i = 0; i < bin.length; i++) out[i] = bin.charCodeAt(i);
    return out;
  }
  function clip(t, n) { return t.length > n ? t.slice(0, n - 1) + "\u2026" : t; }
  function num(v, d) { return v == null ? "" : (typeof v === "number" ? v.toFixed(d == null ? 3 : d) : String(v)); }
  function int(v) { return v == null ? "" : Number(v).toLocaleString("en-US"); }
  function sec(v) { return v == null ? "" : (v < 1 ? (v * 1000).toFixed(0) + " ms" : v.toFixed(2) + " s"); }

  // ------------------------------------------------------------------ vocabulary and token texts
  var V = D.vocab;
  var vocabIds = new Uint32Array(b64(V.ids).buffer);
  var raw = {};
  Object.keys(V.raw).forEach(function (k) {
    var h = V.raw[k], b = [];
    for (var i = 0; i < h.length; i += 2) b.push(parseInt(h.substr(i, 2), 16));
    raw[k] = b;
  });
  var special = {};
  V.special.forEach(function (k) { special[k] = true; });

  function tokensOf(s) {
    if (!s.tok) return null;
    if (!s._tok) {
      var b = b64(s.tok);
      s._tok = V.wide ? new Uint32Array(b.buffer) : new Uint16Array(b.buffer);
      s._lp = s.lp ? new Uint16Array(b64(s.lp).buffer) : null;
    }
    return s._tok;
  }
  function tryDecode(bytes) {
    try { return new TextDecoder("utf-8", { fatal: true }).decode(new Uint8Array(bytes)); } catch (e) { return null; }
  }
  // per-position texts of tok[a:b]; tokens holding part of a character show it on the one completing it
  function texts(tok, a, b) {
    var out = new Array(b - a), pend = [], start = -1;
    for (var p = a; p < b; p++) {
      var k = tok[p], t = V.text[k];
      if (t !== null) {
        if (pend.length) { out[start - a] = "\uFFFD"; pend = []; }
        out[p - a] = t;
        continue;
      }
      if (!pend.length) start = p;
      pend = pend.concat(raw[k] || []);
      var s = tryDecode(pend);
      if (s === null && pend.length < 8) { out[p - a] = ""; continue; }
      out[p - a] = s === null ? "\uFFFD" : s;
      pend = [];
    }
    if (pend.length) out[start - a] = "\uFFFD";
    return out;
  }
  function shown(t) {
    if (t === "") return "\u00b7";
    return t.replace(/\n/g, "\u21b5\n").replace(/\t/g, "\u21e5\t");
  }

  // ------------------------------------------------------------------ state
  var groups = [];
  D.rollouts.forEach(function (r) { if (groups.indexOf(r.g) < 0) groups.push(r.g); });
  groups.sort(function (a, b) { return a - b; });
  var st = { group: null, rollout: null, sample: null, full: false };

  function rolloutsOf(g) {
    var out = [];
    D.rollouts.forEach(function (r, i) { if (g === null || r.g === g) out.push(i); });
    return out;
  }
  function callObj(row) {
    var o = {};
    D.call_fields.forEach(function (f, i) { o[f] = row[i]; });
    return o;
  }
  // node path with repeats folded: a b a b a b c -> (a → b)×3 → c; capped at 200 characters
  function pathText(r) {
    var seq = r.path.map(function (p) { return p[0]; }), out = [], i = 0;
    while (i < seq.length) {
      var best = 1, reps = 1;
      for (var L = 1; L <= 6 && i + 2 * L <= seq.length; L++) {
        var k = 1;
        while (i + (k + 1) * L <= seq.length && seq.slice(i + k * L, i + (k + 1) * L).join() === seq.slice(i, i + L).join()) k++;
        if (k > 1 && k * L > best * reps) { best = L; reps = k; }
      }
      var unit = seq.slice(i, i + best).map(function (n) { return D.nodes[n]; }).join(" \u2192 ");
      out.push(reps > 1 ? (best > 1 ? "(" + unit + ")" : unit) + "\u00d7" + reps : unit);
      i += best * reps;
    }
    var text = out.join(" \u2192 ");
    return text.length > 200 ? text.slice(0, 199) + "\u2026" : text;
  }

  // ------------------------------------------------------------------ header and navigation
  function header() {
    var m = D.meta, nS = D.samples.length;
    byId("title").textContent = "graphrl trajectory \u00b7 " + (m.graph || "unknown graph");
    byId("sub").textContent = m.source + " \u00b7 " + groups.length + " prompt group(s), " + D.rollouts.length +
      " rollout(s), " + nS + " training sample(s) \u00b7 tokens: " + m.tokenizer;
    var box = byId("notices");
    m.notices.forEach(function (n) { box.appendChild(el("div", { cls: "notice", text: n })); });
    var sel = byId("group");
    groups.forEach(function (g) {
      var n = rolloutsOf(g).length;
      sel.appendChild(el("option", { value: String(g), text: "group " + g + " (" + n + ")" }));
    });
    sel.addEventListener("change", function () { pickGroup(Number(sel.value)); });
  }

  function pickGroup(g, n) {
    st.group = g;
    byId("group").value = String(g);
    var rs = rolloutsOf(g), first = rs[0];
    if (n != null) rs.forEach(function (ri) { if (D.rollouts[ri].n === n) first = ri; });
    groupTable();
    nodeTable();
    pickRollout(first);
  }
  function pickRollout(ri) {
    st.rollout = ri;
    document.querySelectorAll("#group-table tbody tr").forEach(function (tr) {
      tr.classList.toggle("sel", Number(tr.dataset.r) === ri);
    });
    var r = D.rollouts[ri];
    byId("rollout-name").textContent = "group " + r.g + ", sample " + r.n + " (rollout " + r.id + ")";
    waterfall(r);
    overlay();
    tabs(r);
    pickSample(r.samples.length ? r.samples[0] : null);
  }

  // ------------------------------------------------------------------ group table
  function groupTable() {
    var tb = byId("group-table").querySelector("tbody");
    tb.textContent = "";
    rolloutsOf(st.group).forEach(function (ri) {
      var r = D.rollouts[ri], rl = 0, tr = 0;
      r.samples.forEach(function (si) { rl += D.samples[si].rl; tr += D.samples[si].trained; });
      var row = el("tr", { "data-r": String(ri) }, [
        el("td", { cls: "num", text: String(r.n) }),
        el("td", { cls: "num", text: String(r.id) }),
        el("td", { cls: "num", text: num(r.rs), title: JSON.stringify(r.reward) }),
        el("td", { cls: "st-" + r.status, text: r.status + (r.error ? " !" : ""), title: r.error || "" }),
        el("td", { cls: "num", text: String(r.samples.length) }),
        el("td", { cls: "num", text: int(rl) }),
        el("td", { cls: "num", text: int(tr) }),
        el("td", { cls: "wrap", text: pathText(r) }),
        el("td", { cls: "wrap", text: clip(r.answer || "", 120), title: r.answer || "" })
      ]);
      row.addEventListener("click", function () { pickRollout(ri); });
      tb.appendChild(row);
    });
  }

  // ------------------------------------------------------------------ graph overlay
  function overlay() {
    var svg = document.querySelector("#graph-box svg");
    if (!svg) return;
    var scope = byId("graph-scope").value === "group" ? rolloutsOf(st.group) : [st.rollout];
    var visits = {}, taken = {};
    scope.forEach(function (ri) {
      var r = D.rollouts[ri], prev = "__start__";
      r.path.forEach(function (p) {
        var name = D.nodes[p[0]];
        visits[name] = (visits[name] || 0) + 1;
        taken[prev + "\u0000" + name] = (taken[prev + "\u0000" + name] || 0) + 1;
        prev = name;
      });
      if (r.path.length && r.status !== "failed") {
        var term = r.status === "aborted" ? "abort" : "end";
        visits[term] = (visits[term] || 0) + 1;
        var hop = hasEdge(svg, prev, term) ? null : limitHop(svg, prev, term);
        if (hop) {  // the next node's max_visits/token_budget was hit: prev -> hop, then hop's on_limit
          taken[prev + "\u0000" + hop] = (taken[prev + "\u0000" + hop] || 0) + 1;
          prev = hop;
        }
        taken[prev + "\u0000" + term] = (taken[prev + "\u0000" + term] || 0) + 1;
      }
    });
    svg.querySelectorAll(".g-node").forEach(function (g) {
      var n = g.getAttribute("data-node"), c = visits[n] || 0;
      g.classList.toggle("g-dim", c === 0 && n !== "__start__");
      var badge = g.querySelector(".g-visits");
      if (badge) badge.textContent = c && n !== "__start__" ? "\u00d7" + c : "";
    });
    svg.querySelectorAll(".g-edge").forEach(function (g) {
      var c = taken[g.getAttribute("data-src") + "\u0000" + g.getAttribute("data-dst")] || 0;
      g.classList.toggle("g-taken", c > 0);
      var p = g.querySelector("path");
      if (!p.hasAttribute("data-marker")) p.setAttribute("data-marker", p.getAttribute("marker-end"));
      p.setAttribute("marker-end", c > 0 ? "url(#g-arrow-taken)" : p.getAttribute("data-marker"));
    });
  }

  function hasEdge(svg, a, b) {
    return Array.prototype.some.call(svg.querySelectorAll(".g-edge"), function (g) {
      return g.getAttribute("data-src") === a && g.getAttribute("data-dst") === b;
    });
  }
  function limitHop(svg, prev, term) {
    var hop = null;
    svg.querySelectorAll(".g-edge").forEach(function (g) {
      var x = g.getAttribute("data-dst");
      if (!hop && g.getAttribute("data-src") === prev) {
        svg.querySelectorAll(".g-edge.g-style-limit").forEach(function (l) {
          if (l.getAttribute("data-src") === x && l.getAttribute("data-dst") === term) hop = x;
        });
      }
    });
    return hop;
  }

  // ------------------------------------------------------------------ waterfall
  function waterfall(r) {
    var calls = r.calls.map(callObj), used = calls.map(function () { return false; }), rows = [];
    r.path.forEach(function (p) {
      var mine = [];
      calls.forEach(function (c, k) { if (!used[k] && c.node === p[0] && c.visit === p[1]) { used[k] = true; mine.push(c); } });
      rows.push({ node: p[0], visit: p[1], calls: mine });
    });
    calls.forEach(function (c, k) { if (!used[k]) rows.push({ node: c.node, visit: c.visit, calls: [c], off: true }); });
    var t = 0, items = [];
    rows.forEach(function (row) {
      if (!row.calls.length) { items.push({ row: row, c: null, start: t, dur: 0 }); return; }
      row.calls.forEach(function (c) {
        var start = c.start_s != null ? c.start_s : t, dur = c.latency_s || 0;
        items.push({ row: row, c: c, start: start, dur: dur });
        t = Math.max(t, start + dur);
      });
    });
    var total = Math.max(r.elapsed || 0, t) || 1;
    var tb = byId("waterfall").querySelector("tbody");
    tb.textContent = "";
    items.forEach(function (it, k) {
      var c = it.c || {}, ni = it.row.node;
      var bar = el("div", { cls: "bar" }, [el("i", {
        cls: "c" + (ni % PALETTE),
        style: "left:" + (100 * it.start / total).toFixed(3) + "%;width:" + (100 * it.dur / total).toFixed(3) + "%;background:var(--c)"
      })]);
      tb.appendChild(el("tr", null, [
        el("td", { cls: "num", text: String(k + 1) }),
        el("td", { text: D.nodes[ni] + " #" + it.row.visit + (it.row.off ? " (not on path)" : "") }),
        el("td", { text: it.c ? (c.endpoint || "") : "no call" , cls: it.c ? "" : "muted" }),
        el("td", null, [bar]),
        el("td", { cls: "num", text: it.c ? sec(c.latency_s) : "" }),
        el("td", { cls: "num", text: it.c ? int(c.prompt_tokens) : "" }),
        el("td", { cls: "num", text: it.c ? int(c.completion_tokens) : "" }),
        el("td", { cls: "num", text: it.c ? int(c.cached_tokens) : "" }),
        el("td", { text: it.c ? (c.finish_reason || "") : "" }),
        el("td", { cls: "wrap", text: it.c ? (c.error || (c.cost ? "cost " + num(c.cost, 6) : "")) : "" })
      ]));
    });
    byId("waterfall-sum").textContent = "rollout " + sec(r.elapsed) + ", engines " + sec(r.engine) + ", " +
      r.path.length + " node visits, " + calls.length + " calls" + (r.error ? " \u00b7 error: " + r.error : "");
  }

  // ------------------------------------------------------------------ token strip
  function tabs(r) {
    var box = byId("sample-tabs");
    box.textContent = "";
    if (!r.samples.length) box.appendChild(el("span", { cls: "muted", text: "this rollout produced no training sample" }));
    r.samples.forEach(function (si) {
      var s = D.samples[si];
      var b = el("button", { "data-s": String(si), text: "sample " + s.i + " \u00b7 " + int(s.rl) + " tok" });
      b.addEventListener("click", function () { pickSample(si); });
      box.appendChild(b);
    });
  }
  function pickSample(si) {
    st.sample = si;
    st.full = false;
    document.querySelectorAll("#sample-tabs button").forEach(function (b) {
      b.classList.toggle("on", Number(b.dataset.s) === si);
    });
    strip();
  }
  function strip() {
    var box = byId("strip"), sum = byId("strip-summary");
    box.textContent = "";
    byId("legend").textContent = "";
    if (st.sample == null) { sum.textContent = ""; return; }
    var s = D.samples[st.sample];
    sum.textContent = "sample " + s.i + ": " + s.status + ", reward " + num(s.rs) + "; prompt " + int(s.pl) +
      " tokens, response " + int(s.rl) + " tokens: trained " + int(s.trained) + ", masked " + int(s.masked) +
      "; " + s.spans.length + " spans";
    sum.setAttribute("data-trained", s.trained);
    sum.setAttribute("data-masked", s.masked);
    sum.setAttribute("data-spans", s.spans.length);
    var seen = {};
    s.spans.forEach(function (sp) { seen[sp[0]] = true; });
    Object.keys(seen).forEach(function (ni) {
      var role = D.roles[D.nodes[ni]];
      byId("legend").appendChild(el("span", null, [el("i", { cls: "chip c" + (ni % PALETTE), style: "background:var(--c)" }),
        D.nodes[ni] + (role ? " (" + role + ")" : "")]));
    });
    var tok = tokensOf(s);
    if (!tok) {
      box.appendChild(el("div", { cls: "muted", text: "token strip omitted: this file keeps at most " +
        int(D.meta.max_tokens) + " tokens (--max-tokens); rerun with --group " + D.rollouts[s.r].g + " --sample " +
        D.rollouts[s.r].n + " to see it. Spans: " + s.spans.map(function (sp) {
          return D.nodes[sp[0]] + "#" + sp[1] + " [" + sp[2] + "," + sp[3] + ") mask " + sp[4];
        }).join(", ") }));
      return;
    }
    var frag = document.createDocumentFragment();
    if (byId("show-prompt").checked && s.pl) {
      var pbox = el("span", { cls: "prompt", title: "prompt (not in loss)" });
      var pt = texts(tok, 0, s.pl);
      for (var i = 0; i < s.pl; i++) {
        var e = document.createElement("span");
        e.className = "tk pr" + (special[tok[i]] ? " sp" : "");
        e.textContent = shown(pt[i]);
        e._i = i;
        pbox.appendChild(e);
      }
      frag.appendChild(pbox);
    }
    var rt = texts(tok, s.pl, s.pl + s.rl), limit = st.full ? Infinity : RENDER_CAP, done = 0, lp = s._lp;
    for (var k = 0; k < s.spans.length && done < limit; k++) {
      var sp = s.spans[k], c = " c" + (sp[0] % PALETTE) + " m" + sp[4];
      var sbox = el("span", { cls: "span", "data-node": D.nodes[sp[0]], "data-visit": String(sp[1]),
        "data-mask": String(sp[4]), "data-kind": D.kinds[sp[5]] });
      for (var j = sp[2]; j < sp[3] && done < limit; j++, done++) {
        var t = document.createElement("span"), p = s.pl + j;
        var heat = sp[4] && lp ? " h" + Math.min(9, Math.floor(10 * Math.exp(-lp[j] / 1000))) : "";
        t.className = "tk" + c + heat + (special[tok[p]] ? " sp" : "");
        t.textContent = shown(rt[j]);
        t._i = p;
        t._s = k;
        sbox.appendChild(t);
      }
      frag.appendChild(sbox);
    }
    box.appendChild(frag);
    if (done < s.rl) {
      var more = el("button", { cls: "more", text: "render all " + int(s.rl) + " tokens (" + int(s.rl - done) + " more)" });
      more.addEventListener("click", function () { st.full = true; strip(); });
      box.appendChild(more);
    }
  }
  function tipText(e) {
    var s = D.samples[st.sample], tok = tokensOf(s), i = e._i, k = tok[i];
    var lines = ["token " + i + (i < s.pl ? " (prompt)" : " (response " + (i - s.pl) + ")") + " \u00b7 id " + vocabIds[k],
      "text " + JSON.stringify(V.text[k] !== null ? V.text[k] : "") + (V.text[k] === null ? " bytes " + (V.raw[k] || "") : "")];
    if (e._s != null) {
      var sp = s.spans[e._s];
      lines.push("node " + D.nodes[sp[0]] + " #" + sp[1] + " \u00b7 " + (D.kinds[sp[5]] || "?") + " \u00b7 " +
        (sp[4] ? "trained (loss mask 1)" : "masked (loss mask 0)"));
      if (sp[4] && s._lp) {
        var v = -s._lp[i - s.pl] / 1000;
        lines.push("log-prob " + v.toFixed(3) + " (p " + Math.exp(v).toFixed(3) + ")");
      }
    }
    return lines.join("\n");
  }
  function tooltips() {
    var box = byId("strip"), tip = byId("tip");
    box.addEventListener("mouseover", function (ev) {
      var t = ev.target;
      if (!t.classList || !t.classList.contains("tk")) { tip.style.display = "none"; return; }
      tip.textContent = tipText(t);
      tip.style.display = "block";
    });
    box.addEventListener("mousemove", function (ev) {
      tip.style.left = Math.min(ev.clientX + 14, window.innerWidth - 470) + "px";
      tip.style.top = (ev.clientY + 16) + "px";
    });
    box.addEventListener("mouseleave", function () { tip.style.display = "none"; });
  }

  // ------------------------------------------------------------------ per-node table
  function nodeTable() {
    var scope = byId("node-scope").value === "all" ? rolloutsOf(null) : rolloutsOf(st.group);
    var rows = {};
    function row(ni) {
      return rows[ni] || (rows[ni] = { visits: 0, calls: 0, gen: 0, pin: 0, cached: 0, trained: 0, masked: 0, time: 0, errors: 0 });
    }
    scope.forEach(function (ri) {
      var r = D.rollouts[ri];
      r.path.forEach(function (p) { row(p[0]).visits++; });
      r.calls.forEach(function (cr) {
        var c = callObj(cr), x = row(c.node);
        x.calls++; x.gen += c.completion_tokens || 0; x.pin += c.prompt_tokens || 0;
        x.cached += c.cached_tokens || 0; x.time += c.latency_s || 0; x.errors += c.error ? 1 : 0;
      });
      r.samples.forEach(function (si) {
        D.samples[si].spans.forEach(function (sp) { row(sp[0])[sp[4] ? "trained" : "masked"] += sp[3] - sp[2]; });
      });
    });
    var tb = byId("node-table").querySelector("tbody");
    tb.textContent = "";
    Object.keys(rows).map(Number).sort(function (a, b) { return a - b; }).forEach(function (ni) {
      var x = rows[ni];
      tb.appendChild(el("tr", { "data-node": D.nodes[ni] }, [
        el("td", null, [el("i", { cls: "chip c" + (ni % PALETTE), style: "background:var(--c)" }), " " + D.nodes[ni]]),
        el("td", { text: D.roles[D.nodes[ni]] || "" }),
        el("td", { cls: "num", text: int(x.visits) }), el("td", { cls: "num", text: int(x.calls) }),
        el("td", { cls: "num", text: int(x.gen) }), el("td", { cls: "num", text: int(x.trained) }),
        el("td", { cls: "num", text: int(x.masked) }), el("td", { cls: "num", text: int(x.pin) }),
        el("td", { cls: "num", text: int(x.cached) }), el("td", { cls: "num", text: sec(x.time) }),
        el("td", { cls: "num", text: x.errors ? int(x.errors) : "" })
      ]));
    });
  }

  // ------------------------------------------------------------------ start
  header();
  tooltips();
  byId("heat").addEventListener("change", function () { byId("strip").classList.toggle("heat", byId("heat").checked); });
  byId("show-prompt").addEventListener("change", strip);
  byId("graph-scope").addEventListener("change", overlay);
  byId("graph-box").addEventListener("click", function () { byId("graph-box").classList.toggle("full"); });
  byId("node-scope").addEventListener("change", nodeTable);
  if (groups.length) {
    var g0 = D.meta.group != null && groups.indexOf(D.meta.group) >= 0 ? D.meta.group : groups[0];
    pickGroup(g0, D.meta.sample);
  } else {
    byId("strip-summary").textContent = "the trajectory file holds no rollouts";
  }
  document.body.setAttribute("data-ready", "1");
})();
