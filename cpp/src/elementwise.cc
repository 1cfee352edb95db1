/*!
 * \file elementwise.cc
 * \brief kokoro_ext.add: the smallest destination-passing kernel.
 *
 * It exists to prove the plumbing end to end (CMake against the wheel's tvm-ffi,
 * global registration, call_dps_packed from compiled Relax) with a result that is
 * easy to check.
 */
#include <kokoro_ext/tensor_args.h>
#include <tvm/ffi/function.h>
#include <tvm/ffi/reflection/registry.h>

namespace kokoro_ext {

/*! \brief out = a + b, elementwise, for float32 vectors of one length. */
void Add(tvm::ffi::TensorView a, tvm::ffi::TensorView b, tvm::ffi::TensorView out) {
  CheckFloat32Cpu("kokoro_ext.add", "a", a, 1);
  CheckFloat32Cpu("kokoro_ext.add", "b", b, 1);
  CheckFloat32Cpu("kokoro_ext.add", "out", out, 1);
  const int64_t n = a.shape()[0];
  CheckShape("kokoro_ext.add", "b", b, {n});
  CheckShape("kokoro_ext.add", "out", out, {n});
  const float* pa = DataPtr<const float>(a);
  const float* pb = DataPtr<const float>(b);
  float* po = DataPtr<float>(out);
  for (int64_t i = 0; i < n; ++i) po[i] = pa[i] + pb[i];
}

TVM_FFI_STATIC_INIT_BLOCK() {
  namespace refl = tvm::ffi::reflection;
  refl::GlobalDef().def("kokoro_ext.add", Add);
}

}  // namespace kokoro_ext
