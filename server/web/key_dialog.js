// The API key dialog: the key is kept in this tab (session storage) and sent as a bearer token.

import { forgetCaches, KEY_STORE } from "./api.js";
import { redraw } from "./nav.js";

export function openKeyDialog() {
  const dlg = document.getElementById("key-dialog");
  document.getElementById("key-input").value = sessionStorage.getItem(KEY_STORE) || "";
  dlg.showModal();
}

document.getElementById("key-button").addEventListener("click", openKeyDialog);
document.getElementById("key-dialog").addEventListener("close", (e) => {
  const dlg = e.target;
  if (dlg.returnValue === "save") sessionStorage.setItem(KEY_STORE, document.getElementById("key-input").value.trim());
  if (dlg.returnValue === "clear") sessionStorage.removeItem(KEY_STORE);
  if (dlg.returnValue === "save" || dlg.returnValue === "clear") {
    forgetCaches();
    redraw();
  }
});
