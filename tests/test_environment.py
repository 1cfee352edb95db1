"""kokoro_ext.environment reports the TVM pin and the patch series state."""

from kokoro_ext import environment


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
