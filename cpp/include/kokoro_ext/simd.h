/*!
 * \file kokoro_ext/simd.h
 * \brief Portable 16-lane float vectors (GCC vector extensions) and vector math.
 *
 * The compiler maps f32x16 onto the host's registers (one AVX-512 register, two AVX2
 * registers, four NEON registers), so kernels written with it stay portable.
 */
#ifndef KOKORO_EXT_SIMD_H_
#define KOKORO_EXT_SIMD_H_

#include <cstdint>
#include <cstring>

namespace kokoro_ext {
namespace simd {

constexpr int kLanes = 16;
typedef float f32x16 __attribute__((vector_size(kLanes * sizeof(float))));
typedef int32_t i32x16 __attribute__((vector_size(kLanes * sizeof(int32_t))));

// f32x16 at any float's alignment, aliasing floats: loads through it, not memcpy (clang for
// wasm32 copies a memcpy of a vector through the stack; see products.h)
typedef float f32x16_unaligned
    __attribute__((vector_size(kLanes * sizeof(float)), aligned(4), may_alias));

inline f32x16 Load(const float* p) { return *reinterpret_cast<const f32x16_unaligned*>(p); }

inline void Store(float* p, f32x16 v) { *reinterpret_cast<f32x16_unaligned*>(p) = v; }

inline f32x16 Broadcast(float x) {
  return f32x16{x, x, x, x, x, x, x, x, x, x, x, x, x, x, x, x};
}

/*! \brief exp(x), relative error below 2e-7 for |x| <= 88 (clamped outside). */
inline f32x16 Exp(f32x16 x) {
  x = x > 88.f ? Broadcast(88.f) : x;
  x = x < -88.f ? Broadcast(-88.f) : x;
  // x = n ln2 + r with |r| <= ln2/2; ln2 split in two so n*ln2 is exact enough.
  f32x16 t = x * 1.44269504088896341f;
  i32x16 n = __builtin_convertvector(t + (t >= 0.f ? Broadcast(0.5f) : Broadcast(-0.5f)), i32x16);
  f32x16 nf = __builtin_convertvector(n, f32x16);
  f32x16 r = x - nf * 0.693359375f - nf * -2.12194440e-4f;
  // Taylor series to r^7: truncation error < 1e-8 on |r| <= 0.347.
  f32x16 p = Broadcast(1.f / 5040.f);
  p = p * r + 1.f / 720.f;
  p = p * r + 1.f / 120.f;
  p = p * r + 1.f / 24.f;
  p = p * r + 1.f / 6.f;
  p = p * r + 0.5f;
  p = p * r + 1.f;
  p = p * r + 1.f;
  i32x16 bits = (n + 127) << 23;
  f32x16 scale;
  std::memcpy(&scale, &bits, sizeof(scale));
  return p * scale;
}

inline f32x16 Sigmoid(f32x16 x) { return 1.f / (1.f + Exp(-x)); }

/*! \brief tanh(x) = 2 sigmoid(2x) - 1; absolute error around 1e-7. */
inline f32x16 Tanh(f32x16 x) { return 2.f / (1.f + Exp(-2.f * x)) - 1.f; }

}  // namespace simd
}  // namespace kokoro_ext

#endif  // KOKORO_EXT_SIMD_H_
