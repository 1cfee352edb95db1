"""kokoro_ext.build.environment reports the TVM pin and the patch series state."""

from kokoro_ext.build import environment


def test_pin_is_read_from_upstream():
    assert environment.read_pin("TVM_WHEEL_VERSION") == "0.27.0.post1"
    assert environment.read_pin("TVM_SOURCE_TAG") == "v0.27.0"


def test_patch_states_distinguish_pristine_and_patched_wheels(pristine_wheel, patched_wheel):
    pristine = {p.patch: p.state for p in environment.patch_states(pristine_wheel[1])}
    patched = {p.patch: p.state for p in environment.patch_states(patched_wheel[1])}
    forward = [name for name, state in patched.items() if state == "already applied"]
    assert forward, patched
    assert all(pristine[name] == "not applied" for name in forward)
    assert all(state.startswith("fixed upstream") for name, state in patched.items()
               if name not in forward)


def test_test_environment_is_fully_set_up():
    # The suite runs in the environment ./bootstrap.sh makes: pinned wheel, patched, kernels.
    env = environment.describe()
    assert env.tvm_version == env.pinned_tvm_version
    assert env.patches_complete, [(p.patch, p.state) for p in env.patches]
    assert env.native_library, env.native_error


def test_tvm_ffi_is_the_pinned_version_and_serializes_ir(tmp_path):
    # With apache-tvm-ffi 0.1.15.x the 0.27 wheel segfaults in ToJSONGraph (tvm.ir.save_json,
    # used by MetaSchedule's database); run it in a child so a crash fails only this test.
    import importlib.metadata
    import subprocess
    import sys

    assert importlib.metadata.version("apache-tvm-ffi") == environment.read_pin("TVM_FFI_VERSION")
    script = (
        "import tvm\n"
        "from tvm.script import tirx as T\n"
        "@T.prim_func\n"
        "def f(a: T.Buffer((4,), 'float32')):\n"
        "    for i in range(4):\n"
        "        a[i] = 1.0\n"
        "g = tvm.ir.load_json(tvm.ir.save_json(f))\n"
        "tvm.ir.assert_structural_equal(f, g)\n"
    )
    path = tmp_path / "save_json.py"  # TVMScript reads the function's source from a file
    path.write_text(script)
    result = subprocess.run([sys.executable, str(path)], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr[-2000:]
