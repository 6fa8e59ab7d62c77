// Sluice web UI: progressive enhancement only. Every page works without
// this file; it adds copy buttons, keyboard shortcuts (listed on /help)
// and the diff view toggle key.
(function () {
  "use strict";

  function copyText(text, button) {
    var done = function () {
      var old = button.textContent;
      button.textContent = "Copied";
      setTimeout(function () { button.textContent = old; }, 1500);
    };
    if (navigator.clipboard && navigator.clipboard.writeText) {
      navigator.clipboard.writeText(text).then(done, function () {});
    }
  }

  document.addEventListener("click", function (e) {
    var b = e.target.closest("button.copy");
    if (!b) return;
    var text = b.getAttribute("data-copy-text");
    var id = b.getAttribute("data-copy");
    if (id) {
      var input = document.getElementById(id);
      if (!input) return;
      input.select();
      text = input.value;
    }
    if (text) copyText(text, b);
  });

  function typing(el) {
    if (!el) return false;
    var tag = el.tagName;
    return tag === "INPUT" || tag === "TEXTAREA" || tag === "SELECT" || el.isContentEditable;
  }

  function follow(sel) {
    var a = document.querySelector(sel);
    if (a && a.href) { window.location.href = a.href; return true; }
    return false;
  }

  function moveFile(step) {
    var files = Array.prototype.slice.call(document.querySelectorAll(".difffile"));
    if (!files.length) return;
    var y = window.scrollY + 10, i;
    var current = -1;
    for (i = 0; i < files.length; i++) {
      if (files[i].offsetTop <= y) current = i;
    }
    var next = Math.min(files.length - 1, Math.max(0, current + step));
    files[next].scrollIntoView();
    var h = files[next].querySelector("h3");
    if (h) { h.setAttribute("tabindex", "-1"); h.focus({ preventScroll: true }); }
  }

  var pendingG = false;
  document.addEventListener("keydown", function (e) {
    if (e.ctrlKey || e.metaKey || e.altKey || typing(e.target)) return;
    var k = e.key;
    if (pendingG) {
      pendingG = false;
      var tab = { h: "/", p: "/projects" }[k];
      if (tab) { window.location.href = tab; e.preventDefault(); return; }
      if (k === "s" && follow(".tabs a[href*='/browse']")) { e.preventDefault(); return; }
      if (k === "c" && follow(".tabs a[href*='/commits']")) { e.preventDefault(); return; }
      return;
    }
    switch (k) {
      case "g": pendingG = true; setTimeout(function () { pendingG = false; }, 1500); break;
      case "/": var s = document.getElementById("top-search"); if (s) { s.focus(); e.preventDefault(); } break;
      case "?": window.location.href = "/help"; break;
      case "n": follow("a[rel=next]"); break;
      case "p": follow("a[rel=prev]"); break;
      case "j": moveFile(1); break;
      case "k": moveFile(-1); break;
      case "v": follow("#diff-toggle"); break;
      case "y": var c = document.querySelector("button.copy[data-copy=clone-http]"); if (c) c.click(); break;
    }
  });
})();
