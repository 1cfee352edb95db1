/*!
 * \file kokoro_ext/gemm.h
 * \brief Single-precision GEMM in the layout of PyTorch weights.
 */
#ifndef KOKORO_EXT_GEMM_H_
#define KOKORO_EXT_GEMM_H_

#include <cstdint>

namespace kokoro_ext {

/*!
 * \brief C[m, n] = sum_k A[m, k] * B[n, k] + bias[n]   (C = A B^T + bias)
 *
 * B is in the [out_features, in_features] layout of nn.Linear / nn.LSTM weights, so
 * both operands are read along contiguous rows and no transpose is needed.  Rows are
 * strided (lda, ldb, ldc elements).  bias may be null.  Parallel over output blocks.
 */
void GemmABt(int64_t M, int64_t N, int64_t K, const float* A, int64_t lda, const float* B,
             int64_t ldb, const float* bias, float* C, int64_t ldc);

/*! \brief Dot product of two contiguous float vectors of length n. */
float Dot(const float* a, const float* b, int64_t n);

}  // namespace kokoro_ext

#endif  // KOKORO_EXT_GEMM_H_
