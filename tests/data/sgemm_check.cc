// cpp/blas/sgemm.cc against a float64 product: every transpose combination, leading
// dimensions past the matrix, sizes off the 4 x 8 block and past the cache blocks.
// Prints the largest error; exits 1 if a column past N changed.
#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <random>
#include <vector>

int main() {
  const int shapes[][3] = {{1, 1, 1}, {5, 9, 3}, {64, 512, 256}, {67, 530, 300}, {13, 17, 700}, {128, 7, 5}};
  std::mt19937 gen(0);
  std::uniform_real_distribution<float> u(-0.5f, 0.5f);
  double worst = 0;
  for (const auto& s : shapes) {
    for (int ta = 0; ta < 2; ++ta) {
      for (int tb = 0; tb < 2; ++tb) {
        const int M = s[0], N = s[1], K = s[2];
        const int lda = ta ? M + 3 : K + 2, ldb = tb ? K + 1 : N + 5, ldc = N + 4;
        std::vector<float> A((ta ? K : M) * lda), B((tb ? N : K) * ldb), C(M * ldc);
        for (auto* v : {&A, &B, &C}) for (auto& x : *v) x = u(gen);
        const std::vector<float> C0 = C;
        scipy_cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans,
                          M, N, K, 1.5f, A.data(), lda, B.data(), ldb, 0.5f, C.data(), ldc);
        for (int i = 0; i < M; ++i) {
          for (int j = 0; j < N; ++j) {
            double acc = 0;
            for (int k = 0; k < K; ++k) {
              acc += double(ta ? A[k * lda + i] : A[i * lda + k]) * (tb ? B[j * ldb + k] : B[k * ldb + j]);
            }
            worst = std::max(worst, std::fabs(1.5 * acc + 0.5 * C0[i * ldc + j] - C[i * ldc + j]));
          }
          for (int j = N; j < ldc; ++j) {
            if (C[i * ldc + j] != C0[i * ldc + j]) return 1;
          }
        }
      }
    }
  }
  std::printf("%g\n", worst);
  return 0;
}
