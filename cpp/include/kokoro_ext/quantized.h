/*!
 * \file kokoro_ext/quantized.h
 * \brief Weight-only int8: weights stored as int8 with a float scale per output channel,
 *  dequantized where the products read them.
 *
 * Kokoro-82M's published weights are int8 (kokoro-v1.0.int8.onnx: ConvInteger weights
 * with a per-tensor scale and zero point, MatMulInteger weights with a scale per output
 * column); the float32 weights a build computes with are exactly float(q - zp) * scale.
 * Stored as n = q - zp (it fits int8 for every Kokoro weight) and the scale, a weight is a
 * quarter of the bytes, and float(n) * scale, computed where a kernel reads it, is the
 * same float32 value: the products, their order and so the outputs are the float32
 * build's.
 *
 * A build quantizes its float weights (QuantizeRows): where the values of a row lie on a
 * grid n * s with |n| <= 127 (an int8 checkpoint's weights, up to the few ulps a folded
 * weight norm adds), that grid is found and kept; elsewhere (a float32 checkpoint) the
 * row is quantized symmetrically, s = max |w| / 127, which is lossy.
 */
#ifndef KOKORO_EXT_QUANTIZED_H_
#define KOKORO_EXT_QUANTIZED_H_

#include <kokoro_ext/products.h>
#include <kokoro_ext/tensor_args.h>
#include <kokoro_ext/threading.h>

#if defined(__AVX2__) || defined(__AVX512F__)
#include <immintrin.h>
#elif defined(__ARM_NEON)
#include <arm_neon.h>
#elif defined(__wasm_simd128__)
#include <wasm_simd128.h>
#endif

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

namespace kokoro_ext {

/*! \brief The smallest nonzero |w| of ``rows`` rows of ``n`` values; 0 if all are 0. */
inline float SmallestMagnitude(const float* w, int64_t rows, int64_t n, int64_t row_stride,
                               int64_t stride) {
  float smallest = 0.f;
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t i = 0; i < n; ++i) {
      const float a = std::abs(w[r * row_stride + i * stride]);
      if (a > 0.f && (smallest == 0.f || a < smallest)) smallest = a;
    }
  }
  return smallest;
}

/*!
 * \brief A step near ``s`` with which float(round(w_i / s)) * step is every w_i of a row
 *  exactly, tried among w_i / n_i and their neighbouring floats (v / n rounds); 0 if none.
 */
inline float ExactStep(const float* w, int64_t n, int64_t stride, float s) {
  auto exact = [&](float step) {
    for (int64_t i = 0; i < n; ++i) {
      const float v = w[i * stride];
      if (std::nearbyint(v / s) * step != v) return false;
    }
    return true;
  };
  if (exact(s)) return s;
  int tries = 0;
  for (int64_t i = 0; i < n && tries < 16; ++i) {
    const float v = std::abs(w[i * stride]);
    if (v == 0.f) continue;
    ++tries;
    float step = v / std::nearbyint(v / s);
    for (int ulp = 0; ulp < 2; ++ulp) step = std::nextafter(step, 0.f);
    for (int ulp = 0; ulp < 5; ++ulp, step = std::nextafter(step, 2 * step)) {
      if (exact(step)) return step;
    }
  }
  return 0.f;
}

/*!
 * \brief The grid step of values that are integer multiples n s of one step, -128 <= n <=
 *  127, up to a relative 1e-3 of s; 0 if they are not.  Tried: ``hint`` (the step of the
 *  whole tensor, for per-tensor scales), then the smallest nonzero |w| divided by 1 to 127
 *  (a row of an int8 grid nearly always holds some n = +-1, and then the step is exactly
 *  that value).  A step with which float(n) * s gives back every w bit for bit
 *  (ExactStep) is preferred to one that only fits.
 */
inline float GridStep(const float* w, int64_t n, int64_t stride, float hint) {
  auto fits = [&](float s) {
    if (!(s > 0.f)) return false;
    for (int64_t i = 0; i < n; ++i) {
      const double v = static_cast<double>(w[i * stride]) / s;
      const double r = std::nearbyint(v);
      if (r < -128.0 || r > 127.0 || std::abs(v - r) > 1e-3) return false;
    }
    return true;
  };
  float fitting = 0.f;
  if (fits(hint)) {
    const float exact = ExactStep(w, n, stride, hint);
    if (exact > 0.f) return exact;
    fitting = hint;
  }
  const float smallest = SmallestMagnitude(w, 1, n, 0, stride);
  // The smallest |n| of a row is at most 127; off a grid, fits() fails at once.
  for (int k = 1; k <= 127 && smallest > 0.f; ++k) {
    if (!fits(smallest / k)) continue;
    const float exact = ExactStep(w, n, stride, smallest / k);
    if (exact > 0.f) return exact;
    if (fitting == 0.f) fitting = smallest / k;
  }
  return fitting;
}

/*!
 * \brief q[r][i] = round(w[r][i] / scale[r]) for ``rows`` rows of ``n`` values (row r at
 *  w + r row_stride, value i at i stride), scale[r] the row's grid step (GridStep, tried
 *  first with the step of the whole tensor) or, off any grid, max |w| / 127.  Returns
 *  the number of rows quantized off a grid (lossy).
 */
inline int64_t QuantizeRows(const float* w, int64_t rows, int64_t n, int64_t row_stride,
                            int64_t stride, int8_t* q, int64_t q_row_stride,
                            int64_t q_stride, float* scale) {
  // The smallest value of the whole tensor is the step of a per-tensor scale
  // (ConvInteger), which a row whose own smallest is 2 or 3 steps must use too.
  const float tensor_step = SmallestMagnitude(w, rows, n, row_stride, stride);
  int64_t lossy = 0;
  for (int64_t r = 0; r < rows; ++r) {
    const float* wr = w + r * row_stride;
    float s = GridStep(wr, n, stride, tensor_step);
    if (s == 0.f) {
      float largest = 0.f;
      for (int64_t i = 0; i < n; ++i) largest = std::max(largest, std::abs(wr[i * stride]));
      s = largest / 127.f;
      lossy += largest > 0.f;
    }
    scale[r] = s;
    for (int64_t i = 0; i < n; ++i) {
      const float v = s > 0.f ? std::nearbyint(wr[i * stride] / s) : 0.f;
      q[r * q_row_stride + i * q_stride] = static_cast<int8_t>(std::clamp(v, -128.f, 127.f));
    }
  }
  return lossy;
}

/*! \brief The kVectorLanes int8 at p as floats (GCC's generic vector conversion from int8
 *  goes one lane at a time, so x86 and NEON get their sign extension and conversion). */
// GCC 12 warns of the undefined upper lanes its own _mm512_cvtepi8_epi32 starts from.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
inline RegisterVector LoadInt8(const int8_t* p) {
  RegisterVector r;
#if defined(__AVX512F__)
  const __m512 v = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))));
  std::memcpy(&r, &v, sizeof(r));
#elif defined(__AVX2__)
  const __m256 v = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p))));
  std::memcpy(&r, &v, sizeof(r));
#elif defined(__ARM_NEON)
  static_assert(kVectorLanes == 8, "NEON converts 8 int8 lanes as two float registers");
  const int16x8_t h = vmovl_s8(vld1_s8(p));
  const float32x4_t lo = vcvtq_f32_s32(vmovl_s16(vget_low_s16(h)));
  const float32x4_t hi = vcvtq_f32_s32(vmovl_high_s16(h));
  std::memcpy(&r, &lo, sizeof(lo));
  std::memcpy(reinterpret_cast<char*>(&r) + sizeof(lo), &hi, sizeof(hi));
#elif defined(__wasm_simd128__)
  static_assert(kVectorLanes == 8, "wasm converts 8 int8 lanes as two float vectors");
  const v128_t h = wasm_i16x8_load8x8(p);
  v128_t lo = wasm_i32x4_extend_low_i16x8(h), hi = wasm_i32x4_extend_high_i16x8(h);
  // clang 14 folds the widening into a conversion from int16 lanes, which wasm lacks and
  // it then does one lane at a time: the empty asm keeps the two int32 vectors
  __asm__("" : "+r"(lo), "+r"(hi));
  typedef float Floats4 __attribute__((vector_size(16)));
  const Floats4 flo = (Floats4)wasm_f32x4_convert_i32x4(lo);
  const Floats4 fhi = (Floats4)wasm_f32x4_convert_i32x4(hi);
  r = __builtin_shufflevector(flo, fhi, 0, 1, 2, 3, 4, 5, 6, 7);
#else
  for (int i = 0; i < kVectorLanes; ++i) r[i] = static_cast<float>(p[i]);
#endif
  return r;
}
#pragma GCC diagnostic pop

/*!
 * \brief dst[i] = float(q[i]) * scale[i % kPack] for i < count (a multiple of kPack): int8
 *  blocks packed [...][kPack] with a scale per lane, i.e. per output channel.
 */
inline void DequantizePacked(const int8_t* q, const float* scale, int64_t count, float* dst) {
  static_assert(kVectorLanes % kPack == 0, "a register holds whole packed rows");
  RegisterVector s;
  for (int i = 0; i < kVectorLanes; ++i) s[i] = scale[i % kPack];
  int64_t i = 0;
  for (; i + kVectorLanes <= count; i += kVectorLanes) {
    StoreRegister(dst + i, LoadInt8(q + i) * s);
  }
  for (; i < count; ++i) dst[i] = static_cast<float>(q[i]) * scale[i % kPack];
}

/*!
 * \brief dst[k][j] = float(q[k][n0 + j]) * scale[n0 + j] for k < rows, j < cols: a tile of
 *  columns of a [rows, N] int8 matrix with a scale per column.
 */
inline void DequantizeColumns(const int8_t* q, const float* scale, int64_t rows, int64_t N,
                              int64_t n0, int64_t cols, float* dst) {
  for (int64_t k = 0; k < rows; ++k) {
    const int8_t* qk = q + k * N + n0;
    float* dk = dst + k * cols;
    int64_t j = 0;
    for (; j + kVectorLanes <= cols; j += kVectorLanes) {
      StoreRegister(dk + j, LoadInt8(qk + j) * LoadRegister(scale + n0 + j));
    }
    for (; j < cols; ++j) dk[j] = static_cast<float>(qk[j]) * scale[n0 + j];
  }
}

/*!
 * \brief A filter packed in blocks of kPack output channels ([blocks][depth][kPack]), as
 *  float32 or as int8 with a scale per output channel.
 */
struct PackedFilter {
  const float* f32 = nullptr;
  const int8_t* q8 = nullptr;
  const float* scale = nullptr;  // [blocks * kPack] with q8

  /*!
   * \brief Blocks [ob0, ob0 + count) as float32: the filter itself, or dequantized into
   *  the calling thread's scratch (slot 4), valid until its next call.
   */
  const float* Blocks(int64_t ob0, int64_t count, int64_t depth) const {
    if (f32 != nullptr) return f32 + ob0 * depth * kPack;
    float* dst = Workspace<4>(count * depth * kPack);
    for (int64_t b = 0; b < count; ++b) {
      DequantizePacked(q8 + (ob0 + b) * depth * kPack, scale + (ob0 + b) * kPack, depth * kPack,
                       dst + b * depth * kPack);
    }
    return dst;
  }
};

/*!
 * \brief PackedProduct on blocks [ob0, ob0 + o_blocks) of ``filter``.  An int8 filter is
 *  dequantized a block at a time where it is the larger operand (each block then serves
 *  every column from the calling thread's cache), else whole before the products.  The
 *  sums are the float32 filter's, in the same order.
 */
inline void PackedProduct(const PackedFilter& filter, int64_t ob0, int64_t depth,
                          int64_t o_blocks, int64_t chunks, int64_t C_in, const float* U,
                          int64_t u_stride, int64_t shift, int64_t cols16, float* M,
                          int64_t m_stride) {
  if (filter.f32 != nullptr || o_blocks * depth * kPack <= C_in * cols16) {
    PackedProduct(filter.Blocks(ob0, o_blocks, depth), depth, o_blocks, chunks, C_in, U,
                  u_stride, shift, cols16, M, m_stride);
    return;
  }
  for (int64_t ob = 0; ob < o_blocks; ++ob) {
    PackedProduct(filter.Blocks(ob0 + ob, 1, depth), depth, 1, chunks, C_in, U, u_stride, shift,
                  cols16, M + ob * kPack * m_stride, m_stride);
  }
}

/*! \brief The sizes of a stride-1 convolution call. */
struct ConvShape {
  int64_t B, C_in, T_in, C_out, K, pad, dilation, T_out;
};

/*!
 * \brief The shape of an int8 filter packed for the int8 products (low_precision.h):
 *  [ceil(C_out / 8), K, ceil(C_in / 4), 8, 4], input channels in quads.
 */
inline std::vector<int64_t> TapsQuadsShape(int64_t C_out, int64_t C_in, int64_t K) {
  return {PackedBlocks(C_out), K, (C_in + 3) / 4, kPack, 4};
}

/*!
 * \brief The checks of a convolution on an int8 filter: options (padding, dilation), x
 *  [B, C_in, T_in] float32, scale [ceil(C_out / 8) 8] float32, bias [C_out], out [B, C_out,
 *  T_out], and the filter packed as taps [ceil(C_out / 8), K, C_in, 8] int8, or, with
 *  ``sums``, in quads (TapsQuadsShape) with its output channels' sums [ceil(C_out / 8) 8]
 *  int32.
 */
inline ConvShape CheckQuantizedConvArgs(const char* kernel, const tvm::ffi::Shape& options,
                                        const tvm::ffi::TensorView& x,
                                        const tvm::ffi::TensorView& taps,
                                        const tvm::ffi::TensorView& scale,
                                        const tvm::ffi::TensorView& bias,
                                        const tvm::ffi::TensorView& out,
                                        const tvm::ffi::TensorView* sums = nullptr) {
  if (options.size() != 2) {
    TVM_FFI_THROW(ValueError) << kernel << ": options must be (padding, dilation)";
  }
  const char* filter = sums == nullptr ? "taps" : "quads";
  CheckFloat32Cpu(kernel, "x", x, 3);
  CheckInt8Cpu(kernel, filter, taps, sums == nullptr ? 4 : 5);
  CheckFloat32Cpu(kernel, "scale", scale, 1);
  CheckFloat32Cpu(kernel, "bias", bias, 1);
  CheckFloat32Cpu(kernel, "out", out, 3);
  ConvShape s{x.shape()[0], x.shape()[1], x.shape()[2], bias.shape()[0], taps.shape()[1],
              options[0], options[1], 0};
  if (s.dilation < 1 || s.pad < 0 || s.K < 1) {
    TVM_FFI_THROW(ValueError) << kernel << ": options (padding, dilation) = (" << s.pad << ", "
                              << s.dilation << ") are out of range";
  }
  s.T_out = s.T_in + 2 * s.pad - s.dilation * (s.K - 1);
  if (sums == nullptr) {
    CheckShape(kernel, filter, taps, PackedTapsShape(s.C_out, s.C_in, s.K));
  } else {
    CheckShape(kernel, filter, taps, TapsQuadsShape(s.C_out, s.C_in, s.K));
    CheckCpuTensor(kernel, "sums", *sums, 1, kDLInt, 32, "int32");
    CheckShape(kernel, "sums", *sums, {PackedBlocks(s.C_out) * kPack});
  }
  CheckShape(kernel, "scale", scale, {PackedBlocks(s.C_out) * kPack});
  CheckShape(kernel, "out", out, {s.B, s.C_out, s.T_out});
  return s;
}

}  // namespace kokoro_ext

#endif  // KOKORO_EXT_QUANTIZED_H_
