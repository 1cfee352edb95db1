/*!
 * \file sgemm.cc
 * \brief scipy_cblas_sgemm for targets without OpenBLAS (WebAssembly SIMD128): panels of
 *  op(A) (kRows rows) and op(B) (kCols columns) packed per cache block, a kRows x kCols
 *  block of sums held in registers, as BLAS kernels do.  Compiled with the other kernels
 *  by kokoro_ext.build.web.kernels; native builds link OpenBLAS instead.
 */
#include <cblas.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

namespace {

// 4 x 8 sums: 8 of WebAssembly's 128-bit vectors, with two of op(B) and a broadcast of
// op(A), inside the 16 registers engines map them to on x86-64.
constexpr int kRows = 4, kCols = 8;
constexpr int kDepthBlock = 256, kRowBlock = 64, kColBlock = 512;

typedef float Vec4 __attribute__((vector_size(16)));

inline Vec4 Load(const float* p) {
  Vec4 v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}

inline void Store(float* p, Vec4 v) { std::memcpy(p, &v, sizeof(v)); }

/*! \brief a[r][k] of op(A), row-major with leading dimension lda. */
inline float At(const float* A, int lda, bool trans, int r, int k) {
  return trans ? A[static_cast<int64_t>(k) * lda + r] : A[static_cast<int64_t>(r) * lda + k];
}

/*!
 * \brief Rows [first, first + count) of op(M) (row-major, leading dimension ld, transposed
 *  when trans), columns [k0, k0 + depth), as a panel [depth][lanes]: rows past count zero.
 *  op(A)'s rows are the A panel's lanes; op(B)'s columns, the rows of op(B) transposed,
 *  are the B panel's.
 */
void PackPanel(const float* M, int ld, bool trans, int first, int count, int k0, int depth,
               int lanes, float* panel) {
  for (int k = 0; k < depth; ++k) {
    float* dst = panel + k * lanes;
    for (int x = 0; x < count; ++x) dst[x] = At(M, ld, trans, first + x, k0 + k);
    for (int x = count; x < lanes; ++x) dst[x] = 0.f;
  }
}

/*! \brief C[rows x cols] (at most kRows x kCols) += alpha * the panels' product. */
void Kernel(int depth, const float* a, const float* b, float alpha, float* C, int ldc, int rows,
            int cols) {
  Vec4 s[kRows][2] = {};
  for (int k = 0; k < depth; ++k) {
    const Vec4 b0 = Load(b + k * kCols), b1 = Load(b + k * kCols + 4);
    for (int r = 0; r < kRows; ++r) {
      const float x = a[k * kRows + r];
      const Vec4 av = {x, x, x, x};
      s[r][0] += av * b0;
      s[r][1] += av * b1;
    }
  }
  const Vec4 al = {alpha, alpha, alpha, alpha};
  if (rows == kRows && cols == kCols) {
    for (int r = 0; r < kRows; ++r) {
      float* c = C + static_cast<int64_t>(r) * ldc;
      Store(c, Load(c) + al * s[r][0]);
      Store(c + 4, Load(c + 4) + al * s[r][1]);
    }
    return;
  }
  float block[kRows][kCols];
  for (int r = 0; r < kRows; ++r) {
    Store(block[r], s[r][0]);
    Store(block[r] + 4, s[r][1]);
  }
  for (int r = 0; r < rows; ++r) {
    for (int j = 0; j < cols; ++j) C[static_cast<int64_t>(r) * ldc + j] += alpha * block[r][j];
  }
}

}  // namespace

extern "C" void scipy_cblas_sgemm(CBLAS_ORDER order, CBLAS_TRANSPOSE trans_a,
                                  CBLAS_TRANSPOSE trans_b, int M, int N, int K, float alpha,
                                  const float* A, int lda, const float* B, int ldb, float beta,
                                  float* C, int ldc) {
  if (order != CblasRowMajor || M <= 0 || N <= 0) return;
  for (int i = 0; i < M; ++i) {
    float* c = C + static_cast<int64_t>(i) * ldc;
    if (beta == 0.f) {
      std::fill(c, c + N, 0.f);
    } else if (beta != 1.f) {
      for (int j = 0; j < N; ++j) c[j] *= beta;
    }
  }
  if (K <= 0 || alpha == 0.f) return;
  const bool ta = trans_a == CblasTrans, tb = trans_b == CblasTrans;
  std::vector<float> pa(static_cast<size_t>(kRowBlock) * kDepthBlock);
  std::vector<float> pb(static_cast<size_t>(kColBlock) * kDepthBlock);
  for (int j0 = 0; j0 < N; j0 += kColBlock) {
    const int nc = std::min(kColBlock, N - j0);
    for (int k0 = 0; k0 < K; k0 += kDepthBlock) {
      const int kc = std::min(kDepthBlock, K - k0);
      // op(B)[k0:k0+kc, j0:j0+nc] as panels [nc / kCols][kc][kCols], zero past N
      for (int jp = 0; jp < nc; jp += kCols) {
        PackPanel(B, ldb, !tb, j0 + jp, std::min(kCols, nc - jp), k0, kc, kCols,
                  pb.data() + static_cast<size_t>(jp) * kc);
      }
      for (int i0 = 0; i0 < M; i0 += kRowBlock) {
        const int mc = std::min(kRowBlock, M - i0);
        // op(A)[i0:i0+mc, k0:k0+kc] as panels [mc / kRows][kc][kRows], zero past M
        for (int ip = 0; ip < mc; ip += kRows) {
          PackPanel(A, lda, ta, i0 + ip, std::min(kRows, mc - ip), k0, kc, kRows,
                    pa.data() + static_cast<size_t>(ip) * kc);
        }
        for (int ip = 0; ip < mc; ip += kRows) {
          for (int jp = 0; jp < nc; jp += kCols) {
            Kernel(kc, pa.data() + static_cast<size_t>(ip) * kc,
                   pb.data() + static_cast<size_t>(jp) * kc, alpha,
                   C + static_cast<int64_t>(i0 + ip) * ldc + j0 + jp, ldc,
                   std::min(kRows, mc - ip), std::min(kCols, nc - jp));
          }
        }
      }
    }
  }
}

extern "C" void scipy_openblas_set_num_threads(int) {}
