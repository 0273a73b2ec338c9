// The metrics page: choosing another window shows it at once. Without this script the
// form's button does the same.
"use strict";

for (const form of document.querySelectorAll("form[data-autosubmit]")) {
  const button = form.querySelector("button[type=submit]");
  if (button) button.hidden = true;
  for (const select of form.querySelectorAll("select")) {
    select.addEventListener("change", () => form.submit());
  }
}
