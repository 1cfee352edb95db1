/*!
 * \file cblas.h
 * \brief The part of OpenBLAS's CBLAS (scipy_openblas32's names) the kernels call, for
 *  targets without OpenBLAS: WebAssembly (kokoro_ext.build.web.kernels), where sgemm.cc
 *  implements it.  Row-major only, as the kernels call it.
 */
#ifndef KOKORO_EXT_BLAS_CBLAS_H_
#define KOKORO_EXT_BLAS_CBLAS_H_

enum CBLAS_ORDER { CblasRowMajor = 101, CblasColMajor = 102 };
enum CBLAS_TRANSPOSE { CblasNoTrans = 111, CblasTrans = 112 };

extern "C" {
/*! \brief C = alpha op(A) op(B) + beta C, row-major (CblasColMajor is not supported). */
void scipy_cblas_sgemm(CBLAS_ORDER order, CBLAS_TRANSPOSE trans_a, CBLAS_TRANSPOSE trans_b,
                       int M, int N, int K, float alpha, const float* A, int lda,
                       const float* B, int ldb, float beta, float* C, int ldc);
/*! \brief Single-threaded here: the kernels parallelize around their calls. */
void scipy_openblas_set_num_threads(int threads);
}

#endif  // KOKORO_EXT_BLAS_CBLAS_H_
