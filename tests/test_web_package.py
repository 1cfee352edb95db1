"""The browser's JavaScript as an npm package (kokoro_ext/web/static: package.json,
index.d.ts, the ES modules): its version is the Python package's, ``npm pack`` packs a
package whose modules import only each other, and ``tsc --noEmit`` (npm TypeScript,
pinned; kokoro_ext.build.web.package) accepts its types and code written against them,
and refuses code that misuses them.

Needs node and npm; elsewhere these tests skip, saying so; under CI they fail instead.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import tarfile

import pytest

import kokoro_ext
from kokoro_ext.build.backend import browser
from kokoro_ext.build.web import package

_missing = [tool for tool in ("node", "npm") if not shutil.which(tool)]
if _missing and not os.environ.get("CI"):
    pytest.skip(f"needs {' and '.join(_missing)} (NodeSource's nodejs)", allow_module_level=True)

#: Code a page writes against the package: it must type-check as it is.
USE = """
import { KokoroTTS, KokoroWorker, SAMPLE_RATE, parseBlend, languageOf, wavBlob, FrameLimitError,
         sentenceEnd, type Chunk, type Generated, type Speaker } from "kokoro-tvm-ext";

async function speak(speaker: Speaker, text: string): Promise<number> {
  let samples = 0;
  for await (const chunk of speaker.stream(text, { voice: "af_heart", speed: 1.1 })) {
    const c: Chunk = chunk;
    samples += c.audio.length;
    for (const w of c.words) console.log(w.text, w.startTime.toFixed(2), w.endTime);
  }
  return samples / SAMPLE_RATE;
}

const tts: KokoroTTS = await KokoroTTS.load(["webgpu/", "wasm/"], { log: console.log });
const names: string[] = await tts.listVoices();
const { audio, chunks } = await tts.generate("Hello world.", { voice: names[0] });
const blob: Blob = wavBlob(audio);
const blend: [string, number][] = parseBlend("af_bella(2)+af_sky(1)");
const language: "en-us" | "en-gb" = languageOf("bf_emma");
const seconds: number = await speak(tts, "Hi.");
const device: "webgpu" | "wasm" = tts.device;
const worker: KokoroWorker = await KokoroTTS.load("wasm/", { worker: true });
async function* reply(): AsyncGenerator<string> { yield "Hello "; yield "world. "; }
const spoken: Generated = await worker.generate(reply(), { voice: "af_heart" });
worker.terminate();
console.log(spoken.chunks.map((c) => c.pause), sentenceEnd("Hi. Th"));
const error = new Error("x");
if (error instanceof FrameLimitError) console.log(error.frames, error.limit);
console.log(blob, blend, language, seconds, device, chunks.length, tts.limits.tokens);
export {};
"""
#: Misuses tsc must refuse, each with the error it names.
MISUSE = {
    "stream(42)": ("for await (const c of tts.stream(42)) console.log(c);", "TS2345"),
    "unknown option": ('await tts.generate("Hi.", { voise: "af_heart" });', "TS2561"),
    "audio is not a string": ('const s: string = (await tts.generate("Hi.")).audio;', "TS2322"),
    "a worker has no build": ('console.log((await KokoroTTS.load("./", { worker: true })).build);', "TS2339"),
}
CONFIG = {
    "compilerOptions": {
        "strict": True, "noEmit": True, "target": "es2022", "module": "esnext",
        "moduleResolution": "bundler", "lib": ["es2022", "dom"], "skipLibCheck": False,
    },
    "include": ["*.ts"],
}  # fmt: skip


def test_version_is_the_python_packages():
    assert package.manifest()["version"] == kokoro_ext.__version__
    assert package.manifest()["name"] == "kokoro-tvm-ext"


def test_builds_copy_the_package_folder():
    """One copy: the folder builds copy beside their stages is the package's."""
    assert browser.STATIC == package.FOLDER
    assert {"tts.js", "kokoro.js", "text.js", "host.js", "index.d.ts", "package.json"} <= {
        p.name for p in package.FOLDER.iterdir()
    }


def test_npm_pack_holds_modules_that_import_each_other(tmp_path):
    tarball = package.pack(tmp_path)
    with tarfile.open(tarball) as tar:
        names = {m.name.removeprefix("package/") for m in tar.getmembers()}
        sources = {n: tar.extractfile(f"package/{n}").read().decode() for n in names if n.endswith(".js")}
    assert tarball.name == f"kokoro-tvm-ext-{kokoro_ext.__version__}.tgz"
    assert {"package.json", "index.d.ts", "tts.js", "kokoro.js", "text.js", "host.js"} <= names
    for name, source in sources.items():
        for imported in re.findall(r'^import .* from "\./([^"]+)";', source, re.M):
            assert imported in names, (name, imported)
    entry = json.loads((package.FOLDER / "package.json").read_text())
    assert entry["exports"]["."] == {"types": "./index.d.ts", "default": "./tts.js"}


def test_declared_names_are_exported(tmp_path):
    """Every name index.d.ts declares is an export of tts.js of that kind."""
    declared = {
        name: kind for kind, name in re.findall(
            r"^export declare (class|function|const) (\w+)",
            (package.FOLDER / "index.d.ts").read_text(), re.M)
    }  # fmt: skip
    script = (f"const m = await import({json.dumps((package.FOLDER / 'tts.js').as_uri())});"
              "process.stdout.write(JSON.stringify(Object.fromEntries(Object.entries(m).map("
              "([k, v]) => [k, typeof v === 'function' ? (/^class /.test(String(v)) ? 'class' "
              ": 'function') : 'const']))));")  # fmt: skip
    out = subprocess.run(["node", "--input-type=module", "-e", script], capture_output=True,
                         text=True, timeout=60, check=True)  # fmt: skip
    exported = json.loads(out.stdout)
    assert {"KokoroTTS", "SAMPLE_RATE", "parseBlend"} <= set(declared)
    for name, kind in declared.items():
        assert exported.get(name) == kind, (name, kind, exported.get(name))


def _check(tmp_path, code: str) -> subprocess.CompletedProcess:
    modules = tmp_path / "node_modules"
    modules.mkdir(exist_ok=True)
    link = modules / "kokoro-tvm-ext"
    if not link.exists():
        link.symlink_to(package.FOLDER, target_is_directory=True)
    (tmp_path / "tsconfig.json").write_text(json.dumps(CONFIG))
    (tmp_path / "use.ts").write_text(code)
    return package.tsc("-p", str(tmp_path), cwd=tmp_path)


def test_types_check(tmp_path):
    out = _check(tmp_path, USE)
    assert out.returncode == 0, out.stdout + out.stderr


@pytest.mark.parametrize("misuse", sorted(MISUSE))
def test_types_refuse_misuse(tmp_path, misuse):
    line, code = MISUSE[misuse]
    prelude = 'import { KokoroTTS } from "kokoro-tvm-ext";\nconst tts = await KokoroTTS.load();\n'
    out = _check(tmp_path, prelude + line + "\nexport {};\n")
    assert out.returncode != 0 and code in out.stdout, out.stdout + out.stderr


def test_file_list_holds_every_file_but_the_manifest(tmp_path):
    (tmp_path / "voices").mkdir()
    (tmp_path / "voices" / "af_x.bin").write_bytes(b"\0" * 8)
    (tmp_path / "tts.js").write_text("export {};\n")
    (tmp_path / "manifest.json").write_text("{}")
    listed = package.write_file_list(tmp_path)
    assert set(listed) == {"voices/af_x.bin", "tts.js"}
    assert listed["tts.js"] == hashlib.sha256(b"export {};\n").hexdigest()
    assert json.loads((tmp_path / "files.json").read_text()) == listed
    assert "files.json" not in package.write_file_list(tmp_path)  # written again: not itself
