/*!
 * \file bf16.cc
 * \brief The bf16 products of kokoro_ext/low_precision.h: AVX512_BF16 kernels compiled for that
 *  feature whatever the library's -march, called only where the host has it.
 */
#include <kokoro_ext/low_precision.h>
#include <tvm/ffi/error.h>

#include <algorithm>
#include <cmath>

#if defined(__x86_64__)
// GCC 12 warns inside its own intrinsics (their _mm512_undefined_* operands) when they are
// inlined into functions with a target attribute (GCC bug 105593).
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#include <immintrin.h>
#define KOKORO_EXT_HAS_X86_KERNELS 1
#define KOKORO_EXT_BF16_TARGET __attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16")))
#define KOKORO_EXT_VNNI_TARGET __attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni")))
#endif

namespace kokoro_ext {

bool HostHasBf16() {
#ifdef KOKORO_EXT_HAS_X86_KERNELS
  static const bool has = __builtin_cpu_supports("avx512f") &&
                          __builtin_cpu_supports("avx512bw") &&
                          __builtin_cpu_supports("avx512vl") &&
                          __builtin_cpu_supports("avx512bf16");
  return has;
#else
  return false;
#endif
}

bool HostHasVnni() {
#ifdef KOKORO_EXT_HAS_X86_KERNELS
  static const bool has = __builtin_cpu_supports("avx512f") &&
                          __builtin_cpu_supports("avx512bw") &&
                          __builtin_cpu_supports("avx512vl") &&
                          __builtin_cpu_supports("avx512vnni");
  return has;
#else
  return false;
#endif
}

void RequireVnni(const char* kernel) {
  if (!HostHasVnni()) {
    TVM_FFI_THROW(RuntimeError)
        << kernel << ": this build computes with int8 products (AVX512_VNNI), which this CPU "
        << "lacks (avx512vnni); rebuild the artifacts with --precision fp32";
  }
}

void RequireBf16(const char* kernel) {
  if (!HostHasBf16()) {
    TVM_FFI_THROW(RuntimeError)
        << kernel << ": this build computes with bf16 products (AVX512_BF16), which this CPU "
        << "lacks (avx512bf16); rebuild the artifacts with --precision fp32";
  }
}

/*! \brief A row's scale and zero point (QuantizeRowsInt8) from its range [lo, hi]. */
inline void RowStep(float lo, float hi, float* scale, int32_t* zero) {
  lo = std::min(lo, 0.f);
  hi = std::max(hi, 0.f);
  const float s = hi > lo ? (hi - lo) / 255.f : 1.f;
  *scale = s;
  *zero = static_cast<int32_t>(std::clamp(std::nearbyint(-lo / s), 0.f, 255.f));
}

#ifdef KOKORO_EXT_HAS_X86_KERNELS
namespace {

/*!
 * \brief m[r][q] (+)= sum_{p < pairs} sum_j w[p][r][j] u[p][q][j] for r < kRows,
 *  q < 16 kVectors: 16 columns of a pair of rows per register, the pair of weights of
 *  row r broadcast.  u_stride: columns between pairs of rows.
 */
template <int kRows, int kVectors>
KOKORO_EXT_BF16_TARGET inline void ProductKernelBf16(const uint16_t* w, int64_t pairs,
                                                     const uint16_t* u, int64_t u_stride,
                                                     float* m, int64_t m_stride,
                                                     bool accumulate) {
  __m512 acc[kRows][kVectors];
  for (int r = 0; r < kRows; ++r) {
    for (int v = 0; v < kVectors; ++v) acc[r][v] = _mm512_setzero_ps();
  }
  for (int64_t p = 0; p < pairs; ++p, u += 2 * u_stride, w += 2 * kPack) {
    __m512bh uv[kVectors];
    for (int v = 0; v < kVectors; ++v) {
      uv[v] = (__m512bh)_mm512_loadu_si512(reinterpret_cast<const void*>(u + 32 * v));
    }
    for (int r = 0; r < kRows; ++r) {
      int32_t pair;
      std::memcpy(&pair, w + 2 * r, sizeof(pair));
      const __m512bh wr = (__m512bh)_mm512_set1_epi32(pair);
      for (int v = 0; v < kVectors; ++v) acc[r][v] = _mm512_dpbf16_ps(acc[r][v], wr, uv[v]);
    }
  }
  for (int r = 0; r < kRows; ++r) {
    for (int v = 0; v < kVectors; ++v) {
      float* p = m + r * m_stride + 16 * v;
      _mm512_storeu_ps(p, accumulate ? _mm512_add_ps(_mm512_loadu_ps(p), acc[r][v]) : acc[r][v]);
    }
  }
}

KOKORO_EXT_BF16_TARGET void PairRowsKernel(const float* src, int64_t rows, int64_t src_stride,
                                           int64_t cols, uint16_t* dst, int64_t dst_stride) {
  // vcvtne2ps2bf16 puts row 2p in lanes 0-15 and row 2p + 1 in lanes 16-31; the permute
  // interleaves them column by column.
  alignas(64) static const uint16_t kInterleave[32] = {
      0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23,
      8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31};
  const __m512i interleave = _mm512_load_si512(kInterleave);
  for (int64_t p = 0; p < rows / 2; ++p) {
    const float* a = src + 2 * p * src_stride;
    const float* b = a + src_stride;
    uint16_t* out = dst + 2 * p * dst_stride;
    int64_t q = 0;
    for (; q + 16 <= cols; q += 16) {
      const __m512bh both = _mm512_cvtne2ps_pbh(_mm512_loadu_ps(b + q), _mm512_loadu_ps(a + q));
      _mm512_storeu_si512(reinterpret_cast<void*>(out + 2 * q),
                          _mm512_permutexvar_epi16(interleave, (__m512i)both));
    }
    for (; q < cols; ++q) {
      out[2 * q] = ToBf16(a[q]);
      out[2 * q + 1] = ToBf16(b[q]);
    }
  }
}

KOKORO_EXT_BF16_TARGET void PairInt8Kernel(const int8_t* packed, int64_t pairs, uint16_t* dst) {
  for (int64_t p = 0; p < pairs; ++p, packed += 2 * kPack, dst += 2 * kPack) {
    // rows 2p and 2p + 1, kPack values each, interleaved byte by byte; an int8 value is a
    // float with at most 8 significant bits, so its bf16 form is exact.
    const __m128i rows = _mm_loadu_si128(reinterpret_cast<const __m128i*>(packed));
    const __m128i pairs_of = _mm_unpacklo_epi8(rows, _mm_srli_si128(rows, 8));
    const __m512 values = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(pairs_of));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst), (__m256i)_mm512_cvtneps_pbh(values));
  }
}

KOKORO_EXT_BF16_TARGET void PackedProductKernels(const uint16_t* gw, int64_t depth,
                                                 int64_t o_blocks, int64_t chunks,
                                                 int64_t C_in, const uint16_t* U,
                                                 int64_t u_stride, int64_t shift,
                                                 int64_t cols16, float* M, int64_t m_stride) {
  constexpr int kRows = 8, kWideVectors = 3, kWide = 16 * kWideVectors;
  static_assert(kPack == kRows, "one kernel row per output channel of a packed block");
  auto product = [&](int64_t ob, int64_t q, auto kernel) {
    float* m = M + ob * kPack * m_stride + q;
    for (int64_t chunk = 0; chunk < chunks; ++chunk) {
      for (int64_t c0 = 0; c0 < C_in; c0 += kSumLength) {
        const uint16_t* w = gw + (ob * depth + chunk * C_in + c0) * kPack;
        kernel(w, std::min(kSumLength, C_in - c0) / 2,
               U + (c0 / 2 * u_stride + chunk * shift + q) * 2, u_stride, m, m_stride,
               chunk > 0 || c0 > 0);
      }
    }
  };
  auto each_panel = [&](auto visit) {
    int64_t q = 0;
    for (; q + kWide <= cols16; q += kWide) visit(q, ProductKernelBf16<kRows, kWideVectors>);
    for (; q + 32 <= cols16; q += 32) visit(q, ProductKernelBf16<kRows, 2>);
    for (; q < cols16; q += 16) visit(q, ProductKernelBf16<kRows, 1>);
  };
  LargerOperandOnce(o_blocks, depth, C_in, cols16, each_panel, product);
}

/*!
 * \brief m[r][q] = sum_k sum_p sum_j w[k][p][r][j] u[p][k shift + q][j] for r < kPack,
 *  q < 16 kVectors, exact in int32: 16 columns of a quad of rows per register, the quad
 *  of weights of row r broadcast.
 */
template <int kVectors>
KOKORO_EXT_VNNI_TARGET inline void ProductKernelInt8(const int8_t* w, int64_t K, int64_t quads,
                                                     const uint8_t* u, int64_t u_stride,
                                                     int64_t shift, const Int8Output& out,
                                                     int64_t row0, int64_t col0) {
  __m512i acc[kPack][kVectors];
  for (int r = 0; r < kPack; ++r) {
    for (int v = 0; v < kVectors; ++v) acc[r][v] = _mm512_setzero_si512();
  }
  for (int64_t k = 0; k < K; ++k) {
    const uint8_t* uk = u + k * shift * 4;
    for (int64_t p = 0; p < quads; ++p, w += 4 * kPack) {
      __m512i uv[kVectors];
      for (int v = 0; v < kVectors; ++v) {
        uv[v] = _mm512_loadu_si512(reinterpret_cast<const void*>(uk + (p * u_stride + 16 * v) * 4));
      }
      for (int r = 0; r < kPack; ++r) {
        int32_t quad;
        std::memcpy(&quad, w + 4 * r, sizeof(quad));
        const __m512i wr = _mm512_set1_epi32(quad);
        for (int v = 0; v < kVectors; ++v) acc[r][v] = _mm512_dpbusd_epi32(acc[r][v], uv[v], wr);
      }
    }
  }
  // Columns past out.width belong to the next tile (another thread's): masked stores.
  __mmask16 masks[kVectors];
  for (int v = 0; v < kVectors; ++v) {
    const int64_t left = std::clamp<int64_t>(out.width - col0 - 16 * v, 0, 16);
    masks[v] = static_cast<__mmask16>((1u << left) - 1u);
  }
  __m512 columns[kVectors];
  __m512i column_zeros[kVectors];
  for (int v = 0; v < kVectors; ++v) {
    columns[v] = out.column_scale == nullptr
                     ? _mm512_set1_ps(1.f)
                     : _mm512_maskz_loadu_ps(masks[v], out.column_scale + col0 + 16 * v);
    column_zeros[v] = out.column_zero == nullptr
                          ? _mm512_set1_epi32(1)
                          : _mm512_maskz_loadu_epi32(masks[v], out.column_zero + col0 + 16 * v);
  }
  const int rows = static_cast<int>(std::min<int64_t>(kPack, out.rows - row0));
  for (int r = 0; r < rows; ++r) {
    const int64_t o = row0 + r;
    const __m512i zero = _mm512_set1_epi32(out.zero[o]);
    const __m512 scale = _mm512_set1_ps(out.scale[o]), bias = _mm512_set1_ps(out.bias[o]);
    float* y = out.y + o * out.y_stride + col0;
    for (int v = 0; v < kVectors; ++v) {
      const __m512i offset =
          out.column_zero == nullptr ? zero : _mm512_mullo_epi32(zero, column_zeros[v]);
      const __m512 sums = _mm512_cvtepi32_ps(_mm512_sub_epi32(acc[r][v], offset));
      const __m512 scaled = _mm512_mul_ps(sums, columns[v]);
      _mm512_mask_storeu_ps(y + 16 * v, masks[v], _mm512_fmadd_ps(scaled, scale, bias));
    }
  }
}

KOKORO_EXT_VNNI_TARGET void PackedProductInt8Kernels(const int8_t* w, int64_t o_blocks,
                                                     int64_t K, int64_t C_in, const uint8_t* U,
                                                     int64_t u_stride, int64_t shift,
                                                     int64_t cols16, const Int8Output& out) {
  constexpr int kWideVectors = 3, kWide = 16 * kWideVectors;
  const int64_t quads = C_in / 4, block = K * C_in * kPack;
  // Column panels outside, as products.h does where the columns are the larger operand:
  // a panel of U stays in L1 while the filter blocks stream past it.
  int64_t q = 0;
  for (; q + kWide <= cols16; q += kWide) {
    for (int64_t ob = 0; ob < o_blocks; ++ob) {
      ProductKernelInt8<kWideVectors>(w + ob * block, K, quads, U + q * 4, u_stride, shift,
                                      out, ob * kPack, q);
    }
  }
  for (; q + 32 <= cols16; q += 32) {
    for (int64_t ob = 0; ob < o_blocks; ++ob) {
      ProductKernelInt8<2>(w + ob * block, K, quads, U + q * 4, u_stride, shift, out,
                           ob * kPack, q);
    }
  }
  for (; q < cols16; q += 16) {
    for (int64_t ob = 0; ob < o_blocks; ++ob) {
      ProductKernelInt8<1>(w + ob * block, K, quads, U + q * 4, u_stride, shift, out,
                           ob * kPack, q);
    }
  }
}

KOKORO_EXT_VNNI_TARGET float PeakKernel(const float* x, int64_t rows, int64_t row_stride,
                                        int64_t lo, int64_t hi) {
  __m512 peak = _mm512_setzero_ps();
  float tail = 0.f;
  for (int64_t c = 0; c < rows; ++c) {
    const float* row = x + c * row_stride;
    int64_t q = lo;
    for (; q + 16 <= hi; q += 16) peak = _mm512_max_ps(peak, _mm512_abs_ps(_mm512_loadu_ps(row + q)));
    for (; q < hi; ++q) tail = std::max(tail, std::abs(row[q]));
  }
  alignas(64) float lanes[16];
  _mm512_store_ps(lanes, peak);
  return std::max(tail, *std::max_element(lanes, lanes + 16));
}

KOKORO_EXT_VNNI_TARGET void QuantizeKernel(const float* x, int64_t quads, int64_t row_stride,
                                           int64_t lo, int64_t hi, int64_t cols, float inv,
                                           uint8_t* dst) {
  // Columns [lo, hi) hold data; the rest are zeros, 128 as unsigned bytes.
  const __m512 scale = _mm512_set1_ps(inv);
  const __m512i offset = _mm512_set1_epi32(128);
  for (int64_t p = 0; p < quads; ++p) {
    uint8_t* out = dst + p * cols * 4;
    std::memset(out, 128, lo * 4);
    int64_t q = lo;
    for (; q + 16 <= hi; q += 16) {
      __m128i rows[4];
      for (int j = 0; j < 4; ++j) {
        const __m512 v = _mm512_mul_ps(_mm512_loadu_ps(x + (4 * p + j) * row_stride + q), scale);
        rows[j] = _mm512_cvtepi32_epi8(_mm512_add_epi32(_mm512_cvtps_epi32(v), offset));
      }
      // [row][column] bytes to [column][row]
      const __m128i a = _mm_unpacklo_epi8(rows[0], rows[1]), b = _mm_unpackhi_epi8(rows[0], rows[1]);
      const __m128i c = _mm_unpacklo_epi8(rows[2], rows[3]), d = _mm_unpackhi_epi8(rows[2], rows[3]);
      __m128i* o = reinterpret_cast<__m128i*>(out + q * 4);
      _mm_storeu_si128(o, _mm_unpacklo_epi16(a, c));
      _mm_storeu_si128(o + 1, _mm_unpackhi_epi16(a, c));
      _mm_storeu_si128(o + 2, _mm_unpacklo_epi16(b, d));
      _mm_storeu_si128(o + 3, _mm_unpackhi_epi16(b, d));
    }
    for (; q < hi; ++q) {
      for (int j = 0; j < 4; ++j) {
        out[q * 4 + j] = static_cast<uint8_t>(
            std::nearbyint(x[(4 * p + j) * row_stride + q] * inv) + 128);
      }
    }
    std::memset(out + hi * 4, 128, (cols - hi) * 4);
  }
}

KOKORO_EXT_VNNI_TARGET void QuantizeRowKernel(const float* x, int64_t K, int64_t quads,
                                              int64_t cols, float* scale, int32_t* zero,
                                              uint8_t* dst) {
  __m512 lo = _mm512_setzero_ps(), hi = _mm512_setzero_ps();
  for (int64_t k = 0; k < K; k += 16) {
    const __m512 v = _mm512_maskz_loadu_ps(
        static_cast<__mmask16>((1u << std::min<int64_t>(16, K - k)) - 1u), x + k);
    lo = _mm512_min_ps(lo, v);
    hi = _mm512_max_ps(hi, v);
  }
  RowStep(_mm512_reduce_min_ps(lo), _mm512_reduce_max_ps(hi), scale, zero);
  const __m512 inv = _mm512_set1_ps(1.f / *scale);
  const __m512i offset = _mm512_set1_epi32(*zero), top = _mm512_set1_epi32(255);
  // 16 values are 4 quads, each one 32-bit word of its quad's row of dst; past K, zeros
  // (masked loads) quantize to the zero point.
  for (int64_t p = 0; p < quads; p += 4) {
    const int64_t left = std::clamp<int64_t>(K - 4 * p, 0, 16);
    const __m512 v = _mm512_mul_ps(
        _mm512_maskz_loadu_ps(static_cast<__mmask16>((1u << left) - 1u), x + 4 * p), inv);
    const __m512i q = _mm512_min_epi32(
        _mm512_max_epi32(_mm512_add_epi32(_mm512_cvtps_epi32(v), offset), _mm512_setzero_si512()),
        top);
    alignas(16) uint32_t words[4];
    _mm_store_si128(reinterpret_cast<__m128i*>(words), _mm512_cvtepi32_epi8(q));
    for (int64_t j = 0; j < 4 && p + j < quads; ++j) {
      std::memcpy(dst + (p + j) * cols * 4, &words[j], 4);
    }
  }
}

}  // namespace

#endif  // KOKORO_EXT_HAS_X86_KERNELS

float QuantizeColumnsInt8(const float* x, int64_t C_in, int64_t row_stride, int64_t T,
                          int64_t t0, int64_t cols, uint8_t* dst) {
  // Columns of x in [t0, t0 + cols): [lo, hi) of the tile.
  const int64_t lo = std::min(cols, std::max<int64_t>(0, -t0));
  const int64_t hi = std::max(lo, std::min(cols, T - t0));
  float peak = 0.f;
#ifdef KOKORO_EXT_HAS_X86_KERNELS
  const bool vnni = HostHasVnni();
  if (vnni) peak = PeakKernel(x + t0, C_in, row_stride, lo, hi);
#else
  constexpr bool vnni = false;
#endif
  for (int64_t c = 0; c < C_in && !vnni; ++c) {
    const float* row = x + c * row_stride + t0;
    for (int64_t q = lo; q < hi; ++q) peak = std::max(peak, std::abs(row[q]));
  }
  const float s = peak > 0.f ? peak / 127.f : 1.f;
  // Whole quads by the vector kernel; a last quad with fewer than 4 rows (the decoder's
  // 514 and 1090 input channels), or every quad without it, by the portable loop below.
  int64_t first = 0;
#ifdef KOKORO_EXT_HAS_X86_KERNELS
  if (vnni) {
    first = C_in / 4;
    QuantizeKernel(x + t0, first, row_stride, lo, hi, cols, 1.f / s, dst);
  }
#endif
  const float inv = 1.f / s;
  for (int64_t p = first; p < (C_in + 3) / 4; ++p) {
    for (int64_t q = 0; q < cols; ++q) {
      for (int64_t j = 0; j < 4; ++j) {
        const int64_t c = 4 * p + j;
        const float v = q >= lo && q < hi && c < C_in ? x[c * row_stride + t0 + q] : 0.f;
        dst[(p * cols + q) * 4 + j] = static_cast<uint8_t>(std::nearbyint(v * inv) + 128);
      }
    }
  }
  return s;
}

void QuantizeRowsInt8(const float* x, int64_t M, int64_t K, int64_t x_stride, int64_t quads,
                      int64_t cols, uint8_t* dst, float* scale, int32_t* zero) {
  for (int64_t p = 0; p < quads; ++p) std::memset(dst + (p * cols + M) * 4, 0, (cols - M) * 4);
  for (int64_t m = M; m < cols; ++m) {
    scale[m] = 1.f;
    zero[m] = 0;
  }
  ParallelFor(M, [&](int64_t m) {
    const float* row = x + m * x_stride;
#ifdef KOKORO_EXT_HAS_X86_KERNELS
    if (HostHasVnni()) {
      QuantizeRowKernel(row, K, quads, cols, scale + m, zero + m, dst + m * 4);
      return;
    }
#endif
    float lo = 0.f, hi = 0.f;
    for (int64_t k = 0; k < K; ++k) {
      lo = std::min(lo, row[k]);
      hi = std::max(hi, row[k]);
    }
    RowStep(lo, hi, scale + m, zero + m);
    const float inv = 1.f / scale[m];
    for (int64_t k = 0; k < 4 * quads; ++k) {
      const float v = k < K ? std::nearbyint(row[k] * inv) + zero[m] : zero[m];
      dst[((k / 4) * cols + m) * 4 + k % 4] = static_cast<uint8_t>(std::clamp(v, 0.f, 255.f));
    }
  }, M * K >= (int64_t{1} << 16));
}

void QuadFilterInt8(const int8_t* taps, int64_t blocks, int64_t K, int64_t C_in, int8_t* out,
                    int32_t* sums) {
  // At build time (taps_filter_q8_quads), once per filter: a plain loop.
  const int64_t quads = (C_in + 3) / 4, C4 = 4 * quads;
  for (int64_t b = 0; b < blocks; ++b) {
    int32_t* sum = sums + b * kPack;
    std::fill(sum, sum + kPack, 0);
    for (int64_t k = 0; k < K; ++k) {
      const int8_t* src = taps + (b * K + k) * C_in * kPack;  // [C_in][kPack]
      int8_t* dst = out + (b * K + k) * C4 * kPack;           // [quads][kPack][4]
      // a last quad with fewer than 4 rows zero-padded
      for (int64_t p = 0; p < quads; ++p) {
        for (int64_t r = 0; r < kPack; ++r) {
          for (int64_t j = 0; j < 4; ++j) {
            const int64_t c = 4 * p + j;
            const int8_t v = c < C_in ? src[c * kPack + r] : 0;
            dst[(p * kPack + r) * 4 + j] = v;
            sum[r] += v;
          }
        }
      }
    }
  }
}

void PackedProductInt8(const int8_t* w, int64_t o_blocks, int64_t K, int64_t C_in,
                       const uint8_t* U, int64_t u_stride, int64_t shift, int64_t cols16,
                       const Int8Output& out) {
#ifdef KOKORO_EXT_HAS_X86_KERNELS
  if (HostHasVnni()) {
    PackedProductInt8Kernels(w, o_blocks, K, C_in, U, u_stride, shift, cols16, out);
    return;
  }
#endif
  RequireVnni("the int8 products (low_precision.h)");
}

void PairRowsBf16(const float* src, int64_t rows, int64_t src_stride, int64_t cols,
                  uint16_t* dst, int64_t dst_stride) {
#ifdef KOKORO_EXT_HAS_X86_KERNELS
  if (HostHasBf16()) {
    PairRowsKernel(src, rows, src_stride, cols, dst, dst_stride);
    return;
  }
#endif
  for (int64_t p = 0; p < rows / 2; ++p) {
    for (int64_t q = 0; q < cols; ++q) {
      dst[(p * dst_stride + q) * 2] = ToBf16(src[2 * p * src_stride + q]);
      dst[(p * dst_stride + q) * 2 + 1] = ToBf16(src[(2 * p + 1) * src_stride + q]);
    }
  }
}

void PairInt8FilterBf16(const int8_t* packed, int64_t blocks, int64_t depth, uint16_t* dst) {
  static_assert(kPack == 8, "a pair of int8 rows is one 16-byte load");
#ifdef KOKORO_EXT_HAS_X86_KERNELS
  if (HostHasBf16()) {
    PairInt8Kernel(packed, blocks * depth / 2, dst);
    return;
  }
#endif
  for (int64_t p = 0; p < blocks * depth / 2; ++p) {
    const int8_t* rows = packed + 2 * p * kPack;
    for (int64_t r = 0; r < kPack; ++r) {
      dst[(p * kPack + r) * 2] = ToBf16(static_cast<float>(rows[r]));
      dst[(p * kPack + r) * 2 + 1] = ToBf16(static_cast<float>(rows[kPack + r]));
    }
  }
}

void PackedProductBf16(const uint16_t* gw, int64_t depth, int64_t o_blocks, int64_t chunks,
                       int64_t C_in, const uint16_t* U, int64_t u_stride, int64_t shift,
                       int64_t cols16, float* M, int64_t m_stride) {
#ifdef KOKORO_EXT_HAS_X86_KERNELS
  if (HostHasBf16()) {
    PackedProductKernels(gw, depth, o_blocks, chunks, C_in, U, u_stride, shift, cols16, M,
                         m_stride);
    return;
  }
#endif
  RequireBf16("the bf16 products (low_precision.h)");
}

}  // namespace kokoro_ext
