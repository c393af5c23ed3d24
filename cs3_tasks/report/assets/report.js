// The item views of the CS3-Bench report. Data: window.CS3_ITEMS (items.js), loaded after the first paint so
// the leaderboard shows at once. Every value goes in as text (never as HTML): responses are untrusted. Any
// string is a valid Qid or model name ("constructor", "__proto__", ...): what data names is looked up in Maps
// (Q, A, indexes), never as a property of a plain object.
"use strict";
(function () {
  var PAGE = 50, D = null, Q = null, A = null, N = null;
  // a cell shows at most SHOWN characters of a text and WORDS marked words; the rest is a click away (a 10 MB
  // response took 43 s to draw)
  var SHOWN = 2000, WORDS = 200;
  var MARK = new Map([[true, ["✓", "ok"]], [false, ["✗", "bad"]]]);

  function el(tag, attrs) {
    var node = document.createElement(tag);
    Object.keys(attrs || {}).forEach(function (k) { node.setAttribute(k, attrs[k]); });
    for (var i = 2; i < arguments.length; i++) {
      var c = arguments[i];
      if (c === null || c === undefined || c === "") continue;
      node.appendChild(typeof c === "object" ? c : document.createTextNode(String(c)));
    }
    return node;
  }
  function $(id) { return document.getElementById(id); }
  function mark(v) { var m = MARK.get(v); return m ? el("span", { class: m[1] }, m[0]) : el("span", { class: "none" }, "–"); }
  // a player that says so when its file does not load (it is fetched on play: preload none)
  function player(url) {
    if (!url) return null;
    var audio = el("audio", { controls: "", preload: "none", src: url });
    audio.addEventListener("error", function () {
      audio.replaceWith(el("div", { class: "problem" }, "audio missing: " + decodeURI(url) + " could not be played"));
    });
    return audio;
  }
  // a response's player, or why there is none
  function responsePlayer(it) {
    if (it.audio_url) return player(it.audio_url);
    if (it.audio_label) return el("div", { class: "problem" }, "audio missing: " + it.audio_label + " is not on this machine");
    if (!it.transcript) return el("div", { class: "problem" }, "audio missing" + (it.problem ? ": " + short(it.problem) : " (no spoken response)"));
    return null;
  }
  // at most SHOWN characters of a text, and a link to the whole of it as a plain-text page (drawn in a table
  // cell, a 10 MB text takes the browser minutes; its own tab shows it at once)
  function bounded(text) {
    text = text === undefined || text === null ? "" : String(text);
    if (text.length <= SHOWN) return document.createTextNode(text);
    return el("span", { class: "bounded" }, text.slice(0, SHOWN) + "… ", fullText(text, "full text (" + text.length + " characters)"));
  }
  function fullText(text, label) {
    var link = el("a", { class: "more", href: "#", target: "_blank", rel: "noopener" }, label);
    link.addEventListener("click", function () {  // the page is made on the first click only
      if (link.getAttribute("href") === "#") link.href = URL.createObjectURL(new Blob([text], { type: "text/plain;charset=utf-8" }));
    });
    return link;
  }
  function short(text) { text = text || ""; return text.length <= SHOWN ? text : text.slice(0, SHOWN) + "…"; }
  function toMap(object, value) {
    var map = new Map();
    Object.keys(object || {}).forEach(function (k) { map.set(k, value ? value(object[k]) : object[k]); });
    return map;
  }
  function options(select, values, keep) {
    if (!keep) select.textContent = "";
    values.forEach(function (v) { select.appendChild(el("option", { value: v }, v)); });
  }
  function question(set, qid) { return (Q.get(set) || new Map()).get(qid) || {}; }
  function rowsOf(model, set) { return (A.get(model) || new Map()).get(set) || []; }
  function answers(q) { return Object.keys(q.answers || {}).map(function (k) { return q.answers[k]; }).join(" / "); }
  function raw(label, text) { return text ? el("details", { class: "raw" }, el("summary", {}, label), el("pre", {}, bounded(text))) : null; }

  function verdictCell(it, ch, set) {
    var td = el("td", {}, mark(it[ch + "_correct"]), " ", el("span", { class: "small" }, it[ch + "_status"] || ""));
    if (set === "open_ended") {
      ["relevance", "semantic"].forEach(function (a) {
        if (it[ch + "_" + a] !== undefined) td.appendChild(el("div", { class: "small" }, a + " " + it[ch + "_" + a]));
        td.appendChild(raw(a + " explanation", it[ch + "_" + a + "_raw"]) || document.createTextNode(""));
      });
      return td;
    }
    td.appendChild(el("div", { class: "small" }, "keyword ", mark(it[ch + "_keyword_hit"]), " judge ", mark(it[ch + "_judge"])));
    var explanation = raw("judge explanation", it[ch + "_judge_raw"]);
    if (explanation) td.appendChild(explanation);
    if (it[ch + "_judge_error"]) td.appendChild(el("div", { class: "problem" }, it[ch + "_judge_error"]));
    return td;
  }
  function psrCell(it) {
    var td = el("td", {}), words = it.psr_words || [];
    words.slice(0, WORDS).forEach(function (w) {
      td.appendChild(el("span", { class: w[1] ? "w-heard" : "w-missed", title: w[1] ? "heard" : "missed" }, w[0]));
    });
    if (words.length > WORDS) {
      var total = it.psr_words_total || words.length, list = words.map(function (w) { return w[0] + (w[1] ? "  heard" : "  missed"); });
      if (total > words.length) list.push("… and " + (total - words.length) + " more words, not kept in the report");
      td.appendChild(el("div", {}, fullText(list.join("\n"), "the first " + words.length + " of " + total + " words")));
    }
    if (it.psr_total) td.appendChild(el("div", { class: "small" }, it.psr_recognised + "/" + it.psr_total + " heard"));
    return td;
  }
  function lsaCell(it) {
    var td = el("td", {});
    D.channels.forEach(function (ch) {
      if (it[ch + "_language"] !== undefined || it[ch + "_lsa"] !== undefined)
        td.appendChild(el("span", { class: "tag" }, ch + " " + (it[ch + "_language"] || "?") + " ", mark(it[ch + "_lsa"])));
    });
    return td;
  }
  function problems(it) {
    var list = [it.problem, it.asr_error, it.asr_note, it.text_judge_error, it.speech_judge_error];
    return list.filter(Boolean);
  }
  function judgeError(it) {
    return Object.keys(it).some(function (k) { return /_error$/.test(k) && k !== "asr_error" && it[k]; }) ||
      it.text_status === "judge_error" || it.speech_status === "judge_error";
  }
  var FILTERS = {
    all: function () { return true; },
    wrong_any: function (it) { return it.text_correct === false || it.speech_correct === false; },
    text_right_speech_wrong: function (it) { return it.text_correct === true && it.speech_correct === false; },
    judge_errors: judgeError,
    problems: function (it) { return problems(it).length > 0; },
  };
  function haystack(set, it) {
    var q = question(set, it.qid);
    return [it.qid, q.question, answers(q), it.text, it.transcript].join("\n").toLowerCase();
  }

  // a paginated table: columns [{title, key (sort value) or null, cell(row) -> td}]
  function Table(prefix, columns) {
    this.prefix = prefix; this.columns = columns; this.rows = []; this.page = 0; this.sort = null;
    var head = el("tr", {}), self = this;
    columns.forEach(function (c, i) {
      var th = el("th", c.key ? { class: "sortable" } : {}, c.title);
      if (c.key) th.addEventListener("click", function () { self.sortBy(i, th); });
      head.appendChild(th);
    });
    var thead = $(prefix + "-table").tHead; thead.textContent = ""; thead.appendChild(head);
  }
  Table.prototype.sortBy = function (i, th) {
    var dir = this.sort && this.sort.i === i && this.sort.dir === 1 ? -1 : 1, key = this.columns[i].key;
    this.sort = { i: i, dir: dir };
    Array.prototype.forEach.call(th.parentNode.children, function (h) { h.classList.remove("sorted-asc", "sorted-desc"); });
    th.classList.add(dir === 1 ? "sorted-asc" : "sorted-desc");
    this.rows.sort(function (a, b) { var x = key(a), y = key(b); return (x < y ? -1 : x > y ? 1 : 0) * dir; });
    this.page = 0; this.draw();
  };
  Table.prototype.show = function (rows, total) {
    this.rows = rows; this.total = total; this.page = 0;
    if (this.sort) { var i = this.sort.i; this.sort.dir = -this.sort.dir; this.sortBy(i, $(this.prefix + "-table").tHead.rows[0].cells[i]); }
    else this.draw();
  };
  Table.prototype.draw = function () {
    var body = $(this.prefix + "-table").tBodies[0], self = this, pages = Math.max(1, Math.ceil(this.rows.length / PAGE));
    body.textContent = "";
    this.rows.slice(this.page * PAGE, (this.page + 1) * PAGE).forEach(function (row) {
      var tr = el("tr", { "data-qid": row.qid });
      self.columns.forEach(function (c) { var td = c.cell(row); tr.appendChild(td.tagName === "TD" ? td : el("td", {}, td)); });
      body.appendChild(tr);
    });
    $(this.prefix + "-count").textContent = this.rows.length + " of " + this.total + " shown" + (pages > 1 ? "; page " + (this.page + 1) + " of " + pages : "");
    var pager = $(this.prefix + "-pager"); pager.textContent = "";
    if (pages > 1) {
      [["« first", 0], ["‹ previous", this.page - 1], ["next ›", this.page + 1], ["last »", pages - 1]].forEach(function (b) {
        var button = el("button", {}, b[0]);
        button.disabled = b[1] < 0 || b[1] >= pages || b[1] === self.page;
        button.addEventListener("click", function () { self.page = b[1]; self.draw(); });
        pager.appendChild(button);
      });
    }
  };

  function itemColumns(set) {
    var qcell = function (it) { var q = question(set, it.qid); return el("td", {}, q.question || "", player(q.audio_url)); };
    return [
      { title: "Qid", key: function (it) { return it.qid; }, cell: function (it) { return el("td", {}, it.qid); } },
      { title: "category", key: function (it) { return it.category || ""; }, cell: function (it) { return el("td", {}, it.category || ""); } },
      { title: "question", key: null, cell: qcell },
      { title: "expected", key: null, cell: function (it) { return el("td", {}, answers(question(set, it.qid))); } },
      { title: "text response", key: null, cell: function (it) { return el("td", {}, bounded(it.text)); } },
      { title: "spoken response / transcript", key: null, cell: function (it) {
        return el("td", {}, responsePlayer(it), el("div", {}, bounded(it.transcript))); } },
      { title: "text verdict", key: function (it) { return it.text_status || ""; }, cell: function (it) { return verdictCell(it, "text", set); } },
      { title: "speech verdict", key: function (it) { return it.speech_status || ""; }, cell: function (it) { return verdictCell(it, "speech", set); } },
      { title: "PSR (English words heard / missed)", key: function (it) { return it.psr_total ? it.psr_recognised / it.psr_total : -1; }, cell: psrCell },
      { title: "LSA", key: null, cell: lsaCell },
      { title: "problems", key: function (it) { return problems(it).length; }, cell: function (it) {
        return el("td", {}, problems(it).map(function (p) { return el("div", { class: "problem" }, bounded(p)); }).reduce(function (f, n) { f.appendChild(n); return f; }, document.createDocumentFragment())); } },
    ];
  }

  var views = {};
  function itemsView() {
    var model = $("items-model").value, set = $("items-set").value;
    var all = rowsOf(model, set), note = N.get(set) || "";
    $("items-note").textContent = note; $("items-note").hidden = !note;  // why the questions are missing, and how to show them
    if (!views.items || views.items.set !== set) { views.items = new Table("items", itemColumns(set)); views.items.set = set; }
    var f = FILTERS[$("items-filter").value], cat = $("items-category").value, st = $("items-status").value;
    var needle = $("items-search").value.trim().toLowerCase();
    views.items.show(all.filter(function (it) {
      return f(it) && (!cat || it.category === cat) && (!st || it.text_status === st || it.speech_status === st) &&
        (!needle || haystack(set, it).indexOf(needle) >= 0);
    }), all.length);
  }
  function side(set, it) {
    var q = question(set, (it || {}).qid);
    if (!it) return el("td", { class: "none" }, "not scored");
    return el("td", {}, el("div", {}, q.question || ""), player(q.audio_url), el("div", { class: "small" }, "text ", mark(it.text_correct), " speech ", mark(it.speech_correct)),
      el("div", {}, bounded(it.text)), responsePlayer(it), el("div", { class: "small" }, bounded(it.transcript)));
  }
  function pairsView() {
    var model = $("pairs-model").value, index = new Map(), rows = [];
    ["knowledge", "knowledge_en"].forEach(function (set, k) {
      rowsOf(model, set).forEach(function (it) {
        if (!index.has(it.qid)) { index.set(it.qid, { qid: it.qid, category: it.category }); rows.push(index.get(it.qid)); }
        index.get(it.qid)[k ? "en" : "cs"] = it;
      });
    });
    if (!views.pairs) views.pairs = new Table("pairs", [
      { title: "Qid", key: function (r) { return r.qid; }, cell: function (r) { return el("td", {}, r.qid, el("div", { class: "small" }, r.category || "")); } },
      { title: "knowledge (code-switched)", key: null, cell: function (r) { return side("knowledge", r.cs); } },
      { title: "knowledge_en (English)", key: null, cell: function (r) { return side("knowledge_en", r.en); } },
    ]);
    var differ = $("pairs-filter").value === "differ", needle = $("pairs-search").value.trim().toLowerCase();
    views.pairs.show(rows.filter(function (r) {
      var d = !r.cs || !r.en || r.cs.text_correct !== r.en.text_correct || r.cs.speech_correct !== r.en.speech_correct;
      return (!differ || d) && (!needle || [r.cs && haystack("knowledge", r.cs), r.en && haystack("knowledge_en", r.en)].join("\n").indexOf(needle) >= 0);
    }), rows.length);
  }
  function modelsView() {
    var set = $("models-set").value, index = new Map(), rows = [];
    D.models.forEach(function (m) {
      rowsOf(m, set).forEach(function (it) {
        if (!index.has(it.qid)) { index.set(it.qid, { qid: it.qid, by: new Map() }); rows.push(index.get(it.qid)); }
        index.get(it.qid).by.set(m, it);
      });
    });
    var columns = [{ title: "Qid", key: function (r) { return r.qid; }, cell: function (r) { return el("td", {}, r.qid); } },
      { title: "question", key: null, cell: function (r) { return el("td", {}, question(set, r.qid).question || ""); } }];
    D.models.forEach(function (m) {
      columns.push({ title: m, key: function (r) { var it = r.by.get(m) || {}; return (it.text_correct ? 2 : 0) + (it.speech_correct ? 1 : 0); }, cell: function (r) {
        var it = r.by.get(m); if (!it) return el("td", { class: "none" }, "–");
        return el("td", { title: short(it.text) + "\n— heard: " + short(it.transcript) }, "text ", mark(it.text_correct), " speech ", mark(it.speech_correct)); } });
    });
    views.models = new Table("models", columns);
    var disagree = $("models-filter").value === "disagree", needle = $("models-search").value.trim().toLowerCase();
    views.models.show(rows.filter(function (r) {
      var seen = new Set(); D.models.forEach(function (m) { var it = r.by.get(m) || {}; seen.add(it.text_correct + "/" + it.speech_correct); });
      return (!disagree || seen.size > 1) && (!needle || (r.qid + "\n" + (question(set, r.qid).question || "")).toLowerCase().indexOf(needle) >= 0);
    }), rows.length);
  }

  function showView() {
    var id = (location.hash || "#leaderboard-view").slice(1);
    if (!$(id) || !$(id).classList.contains("view")) id = "leaderboard-view";
    Array.prototype.forEach.call(document.querySelectorAll("section.view"), function (s) { s.hidden = s.id !== id; });
    Array.prototype.forEach.call(document.querySelectorAll("nav a"), function (a) { a.classList.toggle("active", a.dataset.view === id); });
  }
  function wire(ids, draw) { ids.forEach(function (id) { $(id).addEventListener(id.indexOf("search") > 0 ? "input" : "change", draw); }); draw(); }
  function init() {
    D = window.CS3_ITEMS;
    Q = toMap(D.questions, function (bySet) { return toMap(bySet); });
    N = toMap(D.question_notes);
    A = toMap(D.answers, function (bySet) { return toMap(bySet); });
    // open-ended items have no right/wrong: "understood" (relevance > 3) stands for it in marks and filters
    D.models.forEach(function (m) {
      rowsOf(m, "open_ended").forEach(function (it) {
        D.channels.forEach(function (ch) { if (it[ch + "_correct"] === undefined) it[ch + "_correct"] = it[ch + "_understood"]; });
      });
    });
    options($("items-model"), D.models); options($("pairs-model"), D.models);
    options($("items-set"), D.sets); options($("models-set"), D.sets);
    options($("items-category"), D.categories, true); options($("items-status"), D.statuses, true);
    wire(["items-model", "items-set", "items-filter", "items-category", "items-status", "items-search"], itemsView);
    wire(["pairs-model", "pairs-filter", "pairs-search"], pairsView);
    wire(["models-set", "models-filter", "models-search"], modelsView);
    $("loading").hidden = true;
    document.body.dataset.ready = "1";
  }
  window.addEventListener("hashchange", showView);
  showView();
  // the second animation frame comes after the first paint: the leaderboard is on screen before the
  // (large) item data is parsed
  requestAnimationFrame(function () { requestAnimationFrame(function () {
    setTimeout(function () {
      var s = document.createElement("script");
      s.src = window.CS3_ITEMS_FILE; s.onload = init;
      s.onerror = function () { $("loading").textContent = "could not load " + window.CS3_ITEMS_FILE + " (keep it next to index.html)"; };
      document.body.appendChild(s);
    }, 0);
  }); });
})();
