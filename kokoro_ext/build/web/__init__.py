"""What a build for the browser needs beyond compiling: TVM's web runtime, compiled with
emscripten, and the link of a stage with it (kokoro_ext.build.web.runtime)."""
