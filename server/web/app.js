// Refindery's web page: refind search, a page and its similar pages, and an A/B comparison of two
// embedders. Plain ES modules, no build step: dom.js and api.js below everything; router.js draws the
// view a URL names (views/search.js, views/page.js, views/compare.js), which navigate through nav.js;
// keyboard.js and key_dialog.js listen on the document.

import "./keyboard.js";
import "./key_dialog.js";
import { render, start } from "./router.js";

start();
render();
