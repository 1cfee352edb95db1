/*!
 * \file kokoro_ext/tensor_args.h
 * \brief Checks and typed data access for the tensors native kernels receive.
 *
 * Kernels are called from compiled Relax code through call_dps_packed, where a shape
 * or dtype mismatch would otherwise read out of bounds.  Every check raises a
 * ValueError naming the kernel, the argument and what was expected.
 */
#ifndef KOKORO_EXT_TENSOR_ARGS_H_
#define KOKORO_EXT_TENSOR_ARGS_H_

#include <tvm/ffi/container/shape.h>
#include <tvm/ffi/container/tensor.h>
#include <tvm/ffi/error.h>

#include <cstddef>
#include <cstdint>
#include <array>
#include <initializer_list>
#include <sstream>
#include <string>
#include <vector>

namespace kokoro_ext {

/*! \brief Render a shape as "[a, b, c]" for error messages. */
inline std::string ShapeString(tvm::ffi::ShapeView shape) {
  std::ostringstream os;
  os << '[';
  for (size_t i = 0; i < shape.size(); ++i) os << (i ? ", " : "") << shape[i];
  os << ']';
  return os.str();
}

/*! \brief Require a contiguous CPU tensor of dtype ``code``/``bits`` and the given rank. */
inline void CheckCpuTensor(const char* kernel, const char* name, const tvm::ffi::TensorView& t,
                           int ndim, DLDataTypeCode code, int bits, const char* dtype_name) {
  if (t.device().device_type != kDLCPU) {
    TVM_FFI_THROW(ValueError) << kernel << ": " << name << " must be on the CPU";
  }
  DLDataType dt = t.dtype();
  if (dt.code != code || dt.bits != bits || dt.lanes != 1) {
    TVM_FFI_THROW(ValueError) << kernel << ": " << name << " must be " << dtype_name;
  }
  if (t.ndim() != ndim) {
    TVM_FFI_THROW(ValueError) << kernel << ": " << name << " must have " << ndim
                              << " dimensions, got shape " << ShapeString(t.shape());
  }
  if (!t.IsContiguous()) {
    TVM_FFI_THROW(ValueError) << kernel << ": " << name << " must be contiguous";
  }
}

/*! \brief Require a contiguous float32 CPU tensor of the given rank. */
inline void CheckFloat32Cpu(const char* kernel, const char* name, const tvm::ffi::TensorView& t,
                            int ndim) {
  CheckCpuTensor(kernel, name, t, ndim, kDLFloat, 32, "float32");
}

/*! \brief Require a contiguous int8 CPU tensor of the given rank (a quantized weight). */
inline void CheckInt8Cpu(const char* kernel, const char* name, const tvm::ffi::TensorView& t,
                         int ndim) {
  CheckCpuTensor(kernel, name, t, ndim, kDLInt, 8, "int8");
}

/*! \brief Require t to have exactly the shape ``expected`` (a sequence of int64_t). */
template <typename Dims>
void CheckShapeDims(const char* kernel, const char* name, const tvm::ffi::TensorView& t,
                    const Dims& expected) {
  bool same = t.ndim() == static_cast<int>(expected.size());
  int i = 0;
  for (int64_t e : expected) same = same && t.shape()[i++] == e;
  if (!same) {
    std::ostringstream want;
    want << '[';
    i = 0;
    for (int64_t e : expected) want << (i++ ? ", " : "") << e;
    want << ']';
    TVM_FFI_THROW(ValueError) << kernel << ": " << name << " must have shape " << want.str()
                              << ", got " << ShapeString(t.shape());
  }
}

/*! \brief Require t to have exactly the given shape. */
inline void CheckShape(const char* kernel, const char* name, const tvm::ffi::TensorView& t,
                       std::initializer_list<int64_t> expected) {
  CheckShapeDims(kernel, name, t, expected);
}

/*! \brief Require t to have exactly the given shape (a packed layout's shape function's). */
inline void CheckShape(const char* kernel, const char* name, const tvm::ffi::TensorView& t,
                       const std::vector<int64_t>& expected) {
  CheckShapeDims(kernel, name, t, expected);
}

/*!
 * \brief The checks every convolution kernel starts with: ``options`` has the length of
 *  ``options_meaning``'s tuple, and x, the filter (``filter_ndim`` dimensions), bias and
 *  out are float32 CPU tensors of the right ranks.  Shapes are checked by the caller,
 *  which knows the layout.
 */
inline void CheckConvArgs(const char* kernel, const char* options_meaning, size_t option_count,
                          const tvm::ffi::Shape& options, const tvm::ffi::TensorView& x,
                          const char* filter_name, const tvm::ffi::TensorView& filter,
                          int filter_ndim, const tvm::ffi::TensorView& bias,
                          const tvm::ffi::TensorView& out) {
  if (options.size() != option_count) {
    TVM_FFI_THROW(ValueError) << kernel << ": options must be " << options_meaning;
  }
  CheckFloat32Cpu(kernel, "x", x, 3);
  CheckFloat32Cpu(kernel, filter_name, filter, filter_ndim);
  CheckFloat32Cpu(kernel, "bias", bias, 1);
  CheckFloat32Cpu(kernel, "out", out, 3);
}

/*!
 * \brief The checks every filter transform (a weight packed or transformed once, at build
 *  time) starts with: w is a float32 CPU filter [C_out, C_in, K], and ``out`` a float32
 *  CPU tensor of the shape ``layout(C_out, C_in, K)`` gives.  Returns {C_out, C_in, K}.
 */
template <typename Layout>
std::array<int64_t, 3> CheckFilterTransformArgs(const char* kernel, const tvm::ffi::TensorView& w,
                                                const char* out_name,
                                                const tvm::ffi::TensorView& out, Layout layout) {
  CheckFloat32Cpu(kernel, "w", w, 3);
  const int64_t C_out = w.shape()[0], C_in = w.shape()[1], K = w.shape()[2];
  const std::vector<int64_t> expected = layout(C_out, C_in, K);
  CheckFloat32Cpu(kernel, out_name, out, static_cast<int>(expected.size()));
  CheckShape(kernel, out_name, out, expected);
  return {C_out, C_in, K};
}

/*! \brief Typed pointer to the first element, honouring the DLPack byte offset. */
template <typename T>
T* DataPtr(const tvm::ffi::TensorView& t) {
  return reinterpret_cast<T*>(static_cast<char*>(t.data_ptr()) + t.byte_offset());
}

}  // namespace kokoro_ext

#endif  // KOKORO_EXT_TENSOR_ARGS_H_
