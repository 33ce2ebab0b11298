// Gryvia dashboard behaviour. A static file, not an inline script: the site's Content-Security-Policy allows
// scripts from this origin only. Every page works without it (plain forms and links).
"use strict";
document.addEventListener("DOMContentLoaded", () => {
  // The header's tenant switcher submits as soon as a tenant is chosen; its button stays for keyboards and no-JS.
  for (const form of document.querySelectorAll("form[data-autosubmit]")) {
    const select = form.querySelector("select");
    if (select) select.addEventListener("change", () => form.requestSubmit());
  }
});
