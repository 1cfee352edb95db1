// The build's files in Cache Storage, so that a second visit downloads nothing and the
// page works offline: a service worker over the build's folder (its scope), registered
// by the page (index.html) before it loads the build.
//
// A file the manifest lists with its SHA-256 (the stages, their weights, config.json,
// voice.npy) is served from the cache while its cached copy has that SHA-256; fetched
// otherwise, and kept only if its bytes have it (a file whose bytes differ is refused:
// HTTP 502).  files.json, where the build has it, lists the others' SHA-256 the same
// way; a file listed nowhere (the page's scripts, the lexicons, voices) is served from
// the copy cached under the same manifest.  manifest.json itself is fetched at each
// visit (a few KB: whether the build changed) and served from the cache when the
// network is down.

const CACHE = "kokoro-tvm-ext";
const SHA = "x-kokoro-sha256"; // a cached copy's SHA-256
const BUILD = "x-kokoro-manifest"; // the SHA-256 of the manifest it was cached under
// What the page needs before it has read the manifest.
const SHELL = ["index.html", "tvmjs.js", "tts.js", "kokoro.js", "text.js", "host.js",
  "chunking.js", "worker.js", "manifest.json"];

const scope = () => self.registration.scope;
const hex = (digest) => Array.from(new Uint8Array(digest), (b) => b.toString(16).padStart(2, "0")).join("");
const sha256 = async (bytes) => hex(await crypto.subtle.digest("SHA-256", bytes));

self.addEventListener("install", (event) => {
  event.waitUntil((async () => {
    const cache = await caches.open(CACHE);
    const build = await current(cache, true);
    await Promise.all(SHELL.filter((f) => f !== "manifest.json")
      .map((file) => respond(cache, build, file).catch(() => undefined)));
    await self.skipWaiting();
  })());
});

self.addEventListener("activate", (event) => event.waitUntil(self.clients.claim()));

self.addEventListener("fetch", (event) => {
  const url = new URL(event.request.url);
  url.search = "";
  url.hash = "";
  if (event.request.method !== "GET" || !url.href.startsWith(scope())) return;
  const file = url.href.slice(scope().length) || "index.html";
  event.respondWith((async () => {
    const cache = await caches.open(CACHE);
    // a page's load (or a fetch of the manifest) asks the network whether the build changed
    const build = await current(cache, event.request.mode === "navigate" || file === "manifest.json");
    if (file === "manifest.json") return build.response.clone();
    return respond(cache, build, file);
  })());
});

let known = null; // {digest, expected: file -> SHA-256, response} of the manifest in use

/** The build's manifest: from the network when `fresh` (and it answers), else as last
 * seen; with what it says of each file's SHA-256. */
async function current(cache, fresh) {
  if (known && !fresh) return known;
  const key = new URL("manifest.json", scope()).href;
  let response = null;
  try {
    response = await fetch(key, { cache: "no-store" });
    if (!response.ok) response = null;
  } catch {
    response = null; // offline
  }
  if (response === null) {
    if (known) return known;
    response = await cache.match(key);
    if (!response) throw new Error("manifest.json: the network is down and nothing is cached");
  } else {
    await cache.put(key, response.clone());
  }
  const bytes = await response.clone().arrayBuffer();
  const digest = await sha256(bytes);
  if (known?.digest === digest) return (known = { ...known, response });
  const manifest = JSON.parse(new TextDecoder().decode(bytes));
  const expected = { "config.json": manifest.config_sha256, "voice.npy": manifest.voice_sha256 };
  for (const entry of Object.values(manifest.stages ?? {})) {
    expected[entry.file] = entry.sha256;
    expected[entry.weights.file] = entry.weights.sha256;
  }
  // the manifest's SHA-256 win over files.json's (the same files, where both list them)
  Object.assign(expected, { ...(await listed(cache, digest)), ...expected });
  known = { digest, expected, response };
  return known;
}

/** files.json's SHA-256 of the other files, if the build has it ({} if not), asked of
 * the network once per manifest (its absence is kept too). */
async function listed(cache, digest) {
  const key = new URL("files.json", scope()).href;
  const cached = await cache.match(key);
  if (cached && cached.headers.get(BUILD) === digest) return cached.json();
  try {
    const response = await fetch(key, { cache: "no-store" });
    const files = response.ok ? await response.json() : {};
    await cache.put(key, new Response(JSON.stringify(files),
      { headers: { "Content-Type": "application/json", [BUILD]: digest } }));
    return files;
  } catch {
    return cached ? cached.json() : {}; // offline
  }
}

/** `file` of the build: the cached copy if it is this build's, else the network's. */
async function respond(cache, build, file) {
  const key = new URL(file, scope()).href;
  const want = build.expected[file];
  const cached = await cache.match(key);
  if (cached && (want ? cached.headers.get(SHA) === want : cached.headers.get(BUILD) === build.digest)) {
    return cached;
  }
  let response;
  try {
    response = await fetch(key, { cache: "no-store" });
  } catch (error) {
    if (cached) return cached; // offline: the copy of an older build is better than none
    throw error;
  }
  if (!response.ok) return response;
  const bytes = await response.arrayBuffer();
  const digest = await sha256(bytes);
  if (want && digest !== want) {
    return new Response(`${file} has SHA-256 ${digest}, the manifest says ${want}`,
      { status: 502, headers: { "Content-Type": "text/plain" } });
  }
  const headers = new Headers(response.headers);
  // the body is fetch()'s decoded bytes: the network's encoding and length are not its
  headers.delete("Content-Encoding");
  headers.delete("Content-Length");
  headers.set(SHA, digest);
  headers.set(BUILD, build.digest);
  const copy = new Response(bytes, { status: response.status, statusText: response.statusText, headers });
  await cache.put(key, copy.clone());
  return copy;
}
