// Copy buttons: <button data-copy-target="ID"> copies the value of the element #ID (the new API key's secret).
// A static file because the Content-Security-Policy forbids inline scripts.
(function () {
  "use strict";
  function report(button, text) {
    var status = button.parentElement && button.parentElement.querySelector("[data-copy-status]");
    if (status) status.textContent = text;
  }
  document.addEventListener("click", function (event) {
    var button = event.target.closest("[data-copy-target]");
    if (!button) return;
    var field = document.getElementById(button.getAttribute("data-copy-target"));
    if (!field) return;
    var value = field.value !== undefined ? field.value : field.textContent;
    if (navigator.clipboard && window.isSecureContext) {
      navigator.clipboard.writeText(value).then(
        function () { report(button, "Copied."); },
        function () { field.select(); report(button, "Press Ctrl+C to copy."); }
      );
    } else {
      // Plain http (a local `make run`): the Clipboard API is unavailable; the selection command still works.
      field.select();
      report(button, document.execCommand("copy") ? "Copied." : "Press Ctrl+C to copy.");
    }
  });
})();
