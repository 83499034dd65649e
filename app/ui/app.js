// The router: every /ui/ URL loads this shell, and the path names the page to draw.

import { clear, errorBox, h } from "./dom.js";
import { modelsPage, modelPage } from "./pages/models.js";
import { versionPage } from "./pages/version.js";
import { graphPage } from "./pages/graph.js";
import { diffPage, filesDiffPage } from "./pages/diff.js";
import { schemaPage } from "./pages/schema.js";
import { tryPage } from "./pages/try.js";
import { moduleGraphPage, partitionsPage, stagesPage, weightsPage } from "./pages/views.js";
import { searchPage, searchBox } from "./pages/search.js";

const ROUTES = [
  [/^\/ui\/?$/, modelsPage, "models"],
  [/^\/ui\/models\/([^/]+)\/?$/, modelPage, "model"],
  [/^\/ui\/models\/([^/]+)\/versions\/([^/]+)\/?$/, versionPage, "version"],
  [/^\/ui\/models\/([^/]+)\/versions\/([^/]+)\/graph\/?$/, graphPage, "graph"],
  [/^\/ui\/models\/([^/]+)\/versions\/([^/]+)\/weights\/?$/, weightsPage, "weights"],
  [/^\/ui\/models\/([^/]+)\/versions\/([^/]+)\/stages\/?$/, stagesPage, "stages"],
  [/^\/ui\/models\/([^/]+)\/versions\/([^/]+)\/partitions\/?$/, partitionsPage, "partitions"],
  [/^\/ui\/models\/([^/]+)\/versions\/([^/]+)\/modules\/?$/, moduleGraphPage, "module-graph"],
  [/^\/ui\/models\/([^/]+)\/diff\/?$/, diffPage, "diff"],
  [/^\/ui\/search\/?$/, searchPage, "search"],
  [/^\/ui\/schema\/?$/, schemaPage, "schema"],
  [/^\/ui\/try\/?$/, tryPage, "try"],
  [/^\/ui\/diff\/?$/, filesDiffPage, "files-diff"],
];

async function start() {
  const main = document.getElementById("main");
  searchBox(document.getElementById("search"));
  const query = new URLSearchParams(location.search);
  for (const [pattern, page, name] of ROUTES) {
    const match = location.pathname.match(pattern);
    if (!match) continue;
    document.body.dataset.page = name;
    const args = match.slice(1).map(decodeURIComponent);
    try {
      await page(clear(main), args, query);
    } catch (err) {
      main.append(errorBox(err));
    }
    // the bench times each page from navigation to this mark (bench/ui.py)
    performance.mark("ready");
    document.body.dataset.ready = "1";
    return;
  }
  clear(main).append(h("h1", null, "Not found"), h("p", null, "No page at this address."));
  document.body.dataset.ready = "1";
}

start();
