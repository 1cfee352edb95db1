/*!
 * \file gemm.cc
 * \brief Register-blocked dot-product GEMM (see kokoro_ext/gemm.h).
 *
 * A 4x4 block of C is 16 dot products that share their loads: each step over k loads
 * four rows of A and four rows of B once and does 16 vector FMAs.
 */
#include <kokoro_ext/gemm.h>
#include <kokoro_ext/simd.h>

namespace kokoro_ext {
namespace {

using simd::f32x16;
using simd::kLanes;
using simd::Load;
using simd::ReduceSum;

constexpr int kMR = 4;
constexpr int kNR = 4;

// C[0:kMR, 0:kNR] for full blocks.
inline void Block(int64_t K, const float* A, int64_t lda, const float* B, int64_t ldb,
                  const float* bias, float* C, int64_t ldc) {
  f32x16 acc[kMR][kNR] = {};
  int64_t k = 0;
  for (; k + kLanes <= K; k += kLanes) {
    f32x16 a[kMR], b[kNR];
    for (int i = 0; i < kMR; ++i) a[i] = Load(A + i * lda + k);
    for (int j = 0; j < kNR; ++j) b[j] = Load(B + j * ldb + k);
    for (int i = 0; i < kMR; ++i)
      for (int j = 0; j < kNR; ++j) acc[i][j] += a[i] * b[j];
  }
  for (int i = 0; i < kMR; ++i) {
    for (int j = 0; j < kNR; ++j) {
      float s = ReduceSum(acc[i][j]);
      for (int64_t kk = k; kk < K; ++kk) s += A[i * lda + kk] * B[j * ldb + kk];
      C[i * ldc + j] = s + (bias ? bias[j] : 0.f);
    }
  }
}

}  // namespace

float Dot(const float* a, const float* b, int64_t n) {
  f32x16 acc = {};
  int64_t k = 0;
  for (; k + kLanes <= n; k += kLanes) acc += Load(a + k) * Load(b + k);
  float s = ReduceSum(acc);
  for (; k < n; ++k) s += a[k] * b[k];
  return s;
}

void GemmABt(int64_t M, int64_t N, int64_t K, const float* A, int64_t lda, const float* B,
             int64_t ldb, const float* bias, float* C, int64_t ldc) {
  const int64_t m_blocks = (M + kMR - 1) / kMR;
  const int64_t n_blocks = (N + kNR - 1) / kNR;
#pragma omp parallel for collapse(2) schedule(static) if (M * N * K > (1 << 16))
  for (int64_t nb = 0; nb < n_blocks; ++nb) {
    for (int64_t mb = 0; mb < m_blocks; ++mb) {
      const int64_t m0 = mb * kMR, n0 = nb * kNR;
      const float* a = A + m0 * lda;
      const float* b = B + n0 * ldb;
      const float* bi = bias ? bias + n0 : nullptr;
      float* c = C + m0 * ldc + n0;
      if (m0 + kMR <= M && n0 + kNR <= N) {
        Block(K, a, lda, b, ldb, bi, c, ldc);
        continue;
      }
      for (int64_t i = 0; i < kMR && m0 + i < M; ++i)
        for (int64_t j = 0; j < kNR && n0 + j < N; ++j)
          c[i * ldc + j] = Dot(a + i * lda, b + j * ldb, K) + (bi ? bi[j] : 0.f);
    }
  }
}

}  // namespace kokoro_ext
