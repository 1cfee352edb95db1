/*!
 * \file gemm.cc
 * \brief SGEMM kernels for C = A B^T + bias (see kokoro_ext/gemm.h).
 */
#include <kokoro_ext/gemm.h>
#include <kokoro_ext/simd.h>

#include <algorithm>
#include <memory>

namespace kokoro_ext {
namespace {

using simd::f32x16;
using simd::kLanes;
using simd::Load;

// Outer-product kernel: B is packed into panels of kPanel columns laid out
// [K][kPanel], and a kRows x kPanel block of C lives in 2 * kRows vector registers;
// each k does two vector loads of B, kRows broadcasts of A and 2 * kRows FMAs.
constexpr int64_t kRows = 6;
constexpr int64_t kPanel = 2 * kLanes;

/*! \brief Pack B [N, K] into ceil(N / kPanel) panels of [K][kPanel], zero-padded. */
void PackPanels(const float* B, int64_t ldb, int64_t N, int64_t K, float* packed) {
#pragma omp parallel for schedule(static)
  for (int64_t n0 = 0; n0 < N; n0 += kPanel) {
    float* panel = packed + n0 * K;
    const int64_t cols = std::min(kPanel, N - n0);
    for (int64_t k = 0; k < K; ++k) {  // write the panel contiguously
      for (int64_t j = 0; j < cols; ++j) panel[k * kPanel + j] = B[(n0 + j) * ldb + k];
      for (int64_t j = cols; j < kPanel; ++j) panel[k * kPanel + j] = 0.f;
    }
  }
}

/*! \brief C[rows, cols] = A[rows, K] . panel + bias, for rows <= kRows, cols <= kPanel. */
void PanelBlock(int64_t K, const float* A, int64_t lda, int64_t rows, const float* panel,
                const float* bias, int64_t cols, float* C, int64_t ldc) {
  float b_init[kPanel] = {};
  if (bias) std::copy(bias, bias + cols, b_init);
  f32x16 acc[kRows][2];
  for (int i = 0; i < kRows; ++i) {
    acc[i][0] = Load(b_init);
    acc[i][1] = Load(b_init + kLanes);
  }
  const float* a_row[kRows];
  for (int i = 0; i < kRows; ++i) a_row[i] = A + std::min<int64_t>(i, rows - 1) * lda;
  for (int64_t k = 0; k < K; ++k) {
    const f32x16 b0 = Load(panel + k * kPanel), b1 = Load(panel + k * kPanel + kLanes);
    for (int i = 0; i < kRows; ++i) {
      const f32x16 a = simd::Broadcast(a_row[i][k]);
      acc[i][0] += a * b0;
      acc[i][1] += a * b1;
    }
  }
  for (int64_t i = 0; i < rows; ++i) {
    if (cols == kPanel) {
      simd::Store(C + i * ldc, acc[i][0]);
      simd::Store(C + i * ldc + kLanes, acc[i][1]);
    } else {
      float out[kPanel];
      simd::Store(out, acc[i][0]);
      simd::Store(out + kLanes, acc[i][1]);
      std::copy(out, out + cols, C + i * ldc);
    }
  }
}

// Dot-product kernel: a kMR x kNR block of C is kMR * kNR dot products along K that
// share their loads, reading A and B in place (no packing).  Partial blocks repeat the
// last row/column and store only the valid part, so every element of C is computed by
// the same code whatever its position.
constexpr int64_t kMR = 4;
constexpr int64_t kNR = 4;

float ReduceSum(f32x16 v) {
  float s = 0.f;
  for (int i = 0; i < kLanes; ++i) s += v[i];
  return s;
}

void DotBlock(int64_t K, const float* A, int64_t lda, int64_t rows, const float* B, int64_t ldb,
              int64_t cols, const float* bias, float* C, int64_t ldc) {
  const float* a_row[kMR];
  const float* b_row[kNR];
  for (int i = 0; i < kMR; ++i) a_row[i] = A + std::min<int64_t>(i, rows - 1) * lda;
  for (int j = 0; j < kNR; ++j) b_row[j] = B + std::min<int64_t>(j, cols - 1) * ldb;
  f32x16 acc[kMR][kNR] = {};
  int64_t k = 0;
  for (; k + kLanes <= K; k += kLanes) {
    f32x16 a[kMR], b[kNR];
    for (int i = 0; i < kMR; ++i) a[i] = Load(a_row[i] + k);
    for (int j = 0; j < kNR; ++j) b[j] = Load(b_row[j] + k);
    for (int i = 0; i < kMR; ++i)
      for (int j = 0; j < kNR; ++j) acc[i][j] += a[i] * b[j];
  }
  for (int64_t i = 0; i < rows; ++i) {
    for (int64_t j = 0; j < cols; ++j) {
      float s = ReduceSum(acc[i][j]);
      for (int64_t kk = k; kk < K; ++kk) s += a_row[i][kk] * b_row[j][kk];
      C[i * ldc + j] = s + (bias ? bias[j] : 0.f);
    }
  }
}

}  // namespace

void GemmABtInPlace(int64_t M, int64_t N, int64_t K, const float* A, int64_t lda, const float* B,
                    int64_t ldb, const float* bias, float* C, int64_t ldc) {
  // A tile of kMc rows stays in L2 while the blocks of B stream past it.
  constexpr int64_t kMc = 64, kNc = 256;
  const int64_t m_tiles = (M + kMc - 1) / kMc, n_tiles = (N + kNc - 1) / kNc;
#pragma omp parallel for collapse(2) schedule(static) if (M * N * K > (1 << 16))
  for (int64_t mt = 0; mt < m_tiles; ++mt) {
    for (int64_t nt = 0; nt < n_tiles; ++nt) {
      const int64_t m_end = std::min(M, (mt + 1) * kMc), n_end = std::min(N, (nt + 1) * kNc);
      for (int64_t n0 = nt * kNc; n0 < n_end; n0 += kNR) {
        for (int64_t m0 = mt * kMc; m0 < m_end; m0 += kMR) {
          DotBlock(K, A + m0 * lda, lda, std::min(kMR, m_end - m0), B + n0 * ldb, ldb,
                   std::min(kNR, n_end - n0), bias ? bias + n0 : nullptr, C + m0 * ldc + n0, ldc);
        }
      }
    }
  }
}

void GemmABtPacked(int64_t M, int64_t N, int64_t K, const float* A, int64_t lda, const float* B,
             int64_t ldb, const float* bias, float* C, int64_t ldc) {
  const int64_t panels = (N + kPanel - 1) / kPanel;
  std::unique_ptr<float[]> packed(new float[panels * kPanel * K]);  // no zero-fill
  PackPanels(B, ldb, N, K, packed.get());
  // A tile of kMc rows stays in L2 while the panels stream past it.
  constexpr int64_t kMc = 96;
  const int64_t m_tiles = (M + kMc - 1) / kMc;
#pragma omp parallel for collapse(2) schedule(static)
  for (int64_t mt = 0; mt < m_tiles; ++mt) {
    for (int64_t p = 0; p < panels; ++p) {
      const int64_t n0 = p * kPanel, cols = std::min(kPanel, N - n0);
      const int64_t m_end = std::min(M, (mt + 1) * kMc);
      for (int64_t m0 = mt * kMc; m0 < m_end; m0 += kRows) {
        PanelBlock(K, A + m0 * lda, lda, std::min(kRows, m_end - m0), packed.get() + n0 * K,
                   bias ? bias + n0 : nullptr, cols, C + m0 * ldc + n0, ldc);
      }
    }
  }
}

}  // namespace kokoro_ext
