/*!
 * \file winograd.cc
 * \brief Stride-1 conv1d by Winograd minimal filtering, F(m, r), with its own products.
 *
 * Kokoro's iSTFTNet generator spends nearly all its FLOPs in stride-1 convolutions with
 * 3, 7 and 11 taps (dilations 1, 3, 5) over long sequences.  With n = m + r - 1
 * interpolation points, y = A^T [(G g) . (B^T d)] gives m outputs of an r-tap correlation
 * with n products instead of m r (Lavin & Gray 2016); over channels each of the n
 * products is one GEMM [C_out x C_in] x [C_in x tiles].  The filter transform G g is done
 * once, at compile time (kokoro_ext.frontend.winograd; the weights are constants), as in
 * TVM's conv2d_winograd_without_weight_transform.
 *
 * Layout: the time axis is split into D = dilation * m phases, X[c][p][v] = x[c][p + D v],
 * so that the inputs a tile transform reads, and the outputs it writes, are contiguous in
 * the tile index: the transforms vectorize across tiles.  A filter of K > r taps is cut
 * into r-tap chunks; with m dividing r, chunk j of tile q reads the transformed input of
 * tile q + j r / m, so all chunks accumulate into the same GEMM output.
 *
 * The GEMMs are products.h's on filters packed by winograd_filter, not BLAS calls.
 *
 *   kokoro_ext.winograd_pays(C_in, C_out, K, dilation, T_out) -> bool
 *     whether compilation should use the two functions below for this convolution
 *   kokoro_ext.winograd_filter_shape(C_out, C_in, K) -> Shape [n, ceil(C_out / 8), chunks C_in, 8]
 *   kokoro_ext.winograd_filter(w, gw)      gw = G w, chunked and packed for the products
 *     w [C_out, C_in, K]   gw as above, zero rows past C_out
 *   kokoro_ext.conv1d_winograd(options, x, gw, bias, out)   PyTorch conv1d, stride 1
 *     options  Shape (padding, dilation, K)
 *     x [B, C_in, T_in]   gw as above   bias [C_out]   out [B, C_out, T_out]
 *   kokoro_ext.conv1d_winograd_if_pays(options, x, taps, gw, bias, out)   the same, with
 *     both filters: Winograd on gw where winograd_pays(.., T_out) at this call's T_out,
 *     else kokoro_ext.conv1d_taps on taps [ceil(C_out / 8), K, C_in, 8] (dense.cc).  For a
 *     symbolic length that Winograd pays for at some
 *     of its values and not at others: each call takes the kernel a static-length build
 *     for that length would have chosen.
 */
#include <kokoro_ext/products.h>
#include <kokoro_ext/quantized.h>
#include <kokoro_ext/tensor_args.h>
#include <kokoro_ext/threading.h>
#include <tvm/ffi/container/shape.h>
#include <tvm/ffi/function.h>
#include <tvm/ffi/reflection/registry.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <list>
#include <map>
#include <mutex>
#include <tuple>
#include <vector>

namespace kokoro_ext {
namespace {

/*! \brief The transforms of F(m, r): A^T [m][n], G [n][r], B^T [n][n], as floats. */
struct WinogradTransform {
  int64_t m, r, n;
  std::vector<float> AT, G, BT;

  /*! \brief The r-tap chunks a K-tap filter is cut into (the last one zero-padded). */
  int64_t Chunks(int64_t K) const { return (K + r - 1) / r; }
};

/*! \brief Rows (1, a, ..., a^(cols-1)) for each finite point, then the point at infinity. */
std::vector<double> Vandermonde(const std::vector<double>& points, int64_t cols) {
  const int64_t rows = static_cast<int64_t>(points.size()) + 1;
  std::vector<double> v(rows * cols, 0.0);
  for (size_t i = 0; i < points.size(); ++i) {
    for (int64_t k = 0; k < cols; ++k) v[i * cols + k] = std::pow(points[i], static_cast<double>(k));
  }
  v[(rows - 1) * cols + cols - 1] = 1.0;
  return v;
}

/*! \brief Inverse of a small square matrix, Gauss-Jordan with partial pivoting. */
std::vector<double> Inverse(std::vector<double> a, int64_t n) {
  std::vector<double> inv(n * n, 0.0);
  for (int64_t i = 0; i < n; ++i) inv[i * n + i] = 1.0;
  for (int64_t col = 0; col < n; ++col) {
    int64_t pivot = col;
    for (int64_t row = col + 1; row < n; ++row) {
      if (std::abs(a[row * n + col]) > std::abs(a[pivot * n + col])) pivot = row;
    }
    for (int64_t k = 0; k < n; ++k) {
      std::swap(a[col * n + k], a[pivot * n + k]);
      std::swap(inv[col * n + k], inv[pivot * n + k]);
    }
    const double scale = 1.0 / a[col * n + col];
    for (int64_t k = 0; k < n; ++k) {
      a[col * n + k] *= scale;
      inv[col * n + k] *= scale;
    }
    for (int64_t row = 0; row < n; ++row) {
      const double f = a[row * n + col];
      if (row == col || f == 0.0) continue;
      for (int64_t k = 0; k < n; ++k) {
        a[row * n + k] -= f * a[col * n + k];
        inv[row * n + k] -= f * inv[col * n + k];
      }
    }
  }
  return inv;
}

/*!
 * \brief Toom-Cook construction: correlation is the transpose of polynomial multiplication,
 *  so A^T = V_m^T, G = V_r and B^T = V_n^-T for the Vandermonde matrices V_k (n x k).
 */
WinogradTransform MakeTransform(int64_t m, int64_t r, const std::vector<double>& points) {
  const int64_t n = m + r - 1;
  const std::vector<double> vm = Vandermonde(points, m), vr = Vandermonde(points, r);
  const std::vector<double> vn_inv = Inverse(Vandermonde(points, n), n);
  WinogradTransform t{m, r, n, std::vector<float>(m * n), std::vector<float>(n * r),
                      std::vector<float>(n * n)};
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t k = 0; k < m; ++k) t.AT[k * n + i] = static_cast<float>(vm[i * m + k]);
    for (int64_t k = 0; k < r; ++k) t.G[i * r + k] = static_cast<float>(vr[i * r + k]);
    for (int64_t j = 0; j < n; ++j) t.BT[i * n + j] = static_cast<float>(vn_inv[j * n + i]);
  }
  return t;
}

/*!
 * \brief The transform with the fewest products per output, chunks(K) n / m, for a K-tap
 *  filter: F(4, 3) for 3 taps (1.5 per output against 3), F(4, 7) for 4 to 7 (2.5 against
 *  7), F(6, 6) in 6-tap chunks past that (3.7 against 11).  The points are the ones with
 *  the least float32 error among those tried (the largest ones cost the most): against
 *  float64 on 128 channels, F(4, 7) has about 4x and F(6, 6) about 7x the error of F(4, 4)
 *  in 4-tap chunks, which did 3.5 and 5.25 products per output at 7 and 11 taps; on
 *  kokoro's whole decoder that is 3.4e-6 max-abs on the audio, against 1.3e-6.
 */
constexpr int64_t kMaxPoints = 11;  // n of the transforms below

const WinogradTransform& TransformFor(int64_t K) {
  static const WinogradTransform f43 = MakeTransform(4, 3, {0.0, 1.0, -1.0, 0.5, -0.5});
  static const WinogradTransform f47 =
      MakeTransform(4, 7, {0.0, 1.0, -1.0, 2.0, -2.0, 0.5, -0.5, 1.25, -0.8});
  static const WinogradTransform f66 =
      MakeTransform(6, 6, {0.0, 1.0, -1.0, 2.0, -2.0, 0.5, -0.5, 1.5, -1.5, -0.25});
  return K <= 3 ? f43 : K <= 7 ? f47 : f66;
}

/*!
 * \brief U[i][q] = sum_j B^T[i][j] x_j[q] for q < cols, the n input rows x_j read once per
 *  register of columns (the host's width: 11 rows of two-register vectors spill on AVX2)
 *  and the n sums kept in registers (the row-at-a-time loop this replaces read and
 *  rewrote U once per nonzero coefficient).  Same sums in the same order.
 */
template <int N>
void InputTransform(const float* BT, const float* const* x, int64_t cols, float* U,
                    int64_t u_stride) {
  int64_t q = 0;
  for (; q + kVectorLanes <= cols; q += kVectorLanes) {
    RegisterVector xv[N];
    for (int j = 0; j < N; ++j) xv[j] = LoadRegister(x[j] + q);
    for (int i = 0; i < N; ++i) {
      RegisterVector acc = Splat(0.f);
      for (int j = 0; j < N; ++j) acc += BT[i * N + j] * xv[j];
      StoreRegister(U + i * u_stride + q, acc);
    }
  }
  for (; q < cols; ++q) {
    for (int i = 0; i < N; ++i) {
      float acc = 0.f;
      for (int j = 0; j < N; ++j) acc += BT[i * N + j] * x[j][q];
      U[i * u_stride + q] = acc;
    }
  }
}

/*!
 * \brief rows[k][q] = bias + sum_i A^T[k][i] M_i[q] for k < m, q < cols: the n rows of M
 *  read once per register of columns.  Same sums in the same order as one row at a time.
 */
template <int N, int kM>
void OutputTransform(const float* AT, const float* M, int64_t m_stride, float bias,
                     int64_t cols, float* rows, int64_t row_stride) {
  int64_t q = 0;
  for (; q + kVectorLanes <= cols; q += kVectorLanes) {
    RegisterVector mv[N];
    for (int i = 0; i < N; ++i) mv[i] = LoadRegister(M + i * m_stride + q);
    for (int k = 0; k < kM; ++k) {
      RegisterVector acc = Splat(bias);
      for (int i = 0; i < N; ++i) acc += AT[k * N + i] * mv[i];
      StoreRegister(rows + k * row_stride + q, acc);
    }
  }
  for (; q < cols; ++q) {
    for (int k = 0; k < kM; ++k) {
      float acc = bias;
      for (int i = 0; i < N; ++i) acc += AT[k * N + i] * M[i * m_stride + q];
      rows[k * row_stride + q] = acc;
    }
  }
}

/*! \brief InputTransform for f's n points. */
void InputTransformFor(const WinogradTransform& f, const float* const* x, int64_t cols,
                       float* U, int64_t u_stride) {
  switch (f.n) {
    case 6: return InputTransform<6>(f.BT.data(), x, cols, U, u_stride);
    case 10: return InputTransform<10>(f.BT.data(), x, cols, U, u_stride);
    default: return InputTransform<11>(f.BT.data(), x, cols, U, u_stride);
  }
}

/*! \brief OutputTransform for f's n points and m outputs. */
void OutputTransformFor(const WinogradTransform& f, const float* M, int64_t m_stride,
                        float bias, int64_t cols, float* rows, int64_t row_stride) {
  switch (f.n) {
    case 6: return OutputTransform<6, 4>(f.AT.data(), M, m_stride, bias, cols, rows, row_stride);
    case 10: return OutputTransform<10, 4>(f.AT.data(), M, m_stride, bias, cols, rows, row_stride);
    default: return OutputTransform<11, 6>(f.AT.data(), M, m_stride, bias, cols, rows, row_stride);
  }
}

constexpr int64_t kMaxTileColumns = 256;
constexpr int64_t kMinTileColumns = 64;

/*!
 * \brief gw[i][o / kPack][chunk C_in + c][o % kPack] = sum_j G[i][j] w[o][c][chunk r + j],
 *  zero past K and past C_out, from the filter packed as taps (products.h's PackTaps:
 *  [ceil(C_out / kPack)][K][C_in][kPack], float32 or int8 with a scale per output
 *  channel, whose float32 values are the same), kPack output channels in vector lanes.
 *  The sums are in double: float products are exact there, so whether the compiler fuses
 *  them into FMAs (it may differ between -march targets) cannot change gw, and a float32
 *  filter and its int8 form give the same gw.
 */
void FilterTransform(const WinogradTransform& f, const PackedFilter& taps, float* gw,
                     int64_t C_out, int64_t C_in, int64_t K) {
  typedef double Lanes __attribute__((vector_size(kPack * sizeof(double))));
  typedef float Floats __attribute__((vector_size(kPack * sizeof(float))));
  const int64_t r = f.r, n = f.n, chunks = f.Chunks(K);
  const int64_t blocks = PackedBlocks(C_out), depth = chunks * C_in;
  ParallelFor(blocks, [&](int64_t ob) {
    const float* w = taps.Blocks(ob, 1, K * C_in);  // [K][C_in][kPack]
    for (int64_t c = 0; c < C_in; ++c) {
      Lanes tap[kMaxPoints];  // channel c's taps, kPack output channels in the lanes
      for (int64_t k = 0; k < K; ++k) {
        Floats v;
        std::memcpy(&v, w + (k * C_in + c) * kPack, sizeof(v));
        tap[k] = __builtin_convertvector(v, Lanes);
      }
      for (int64_t chunk = 0; chunk < chunks; ++chunk) {
        for (int64_t i = 0; i < n; ++i) {
          Lanes acc = Lanes{};
          for (int64_t j = 0; j < r && chunk * r + j < K; ++j) {
            acc += static_cast<double>(f.G[i * r + j]) * tap[chunk * r + j];
          }
          const Floats out = __builtin_convertvector(acc, Floats);
          std::memcpy(gw + ((i * blocks + ob) * depth + chunk * C_in + c) * kPack, &out,
                      sizeof(out));
        }
      }
    }
  }, blocks * C_in * K * n >= (int64_t{1} << 16));
}

void Conv1dWinograd(const WinogradTransform& f, const float* x, const float* gw,
                    const float* bias, float* out, int64_t B, int64_t C_in, int64_t T_in,
                    int64_t C_out, int64_t K, int64_t pad, int64_t d, int64_t T_out) {
  const int64_t m = f.m, r = f.r, n = f.n;
  const int64_t chunks = f.Chunks(K);
  const int64_t shift = chunks > 1 ? r / m : 0;             // tiles between chunks
  const int64_t tiles = ((T_out + d - 1) / d + m - 1) / m;  // output tiles per phase
  const int64_t D = d * m;
  // Polyphase columns read: the products run on whole multiples of kColumnMultiple
  // tiles, so up to kColumnMultiple - 1 tiles past the last one (computed and dropped).
  const int64_t V = tiles + kColumnMultiple - 1 + (chunks - 1) * shift + (n - 1) / m + 1;

  // X[b][c][p][v] = x[b][c][p + D v - pad], zero outside x.
  float* X = Workspace<0>(B * C_in * D * V);
  ParallelFor(B * C_in, [&](int64_t bc) {
    const float* xc = x + bc * T_in;
    for (int64_t p = 0; p < D; ++p) {
      float* row = X + (bc * D + p) * V;
      // v with 0 <= p + D v - pad < T_in
      const int64_t lo = std::min(V, std::max<int64_t>(0, (pad - p + D - 1) / D));
      const int64_t hi = std::max(lo, std::min(V, (T_in + pad - p + D - 1) / D));
      std::fill(row, row + lo, 0.f);
      for (int64_t v = lo; v < hi; ++v) row[v] = xc[p + D * v - pad];
      std::fill(row + hi, row + V, 0.f);
    }
  });

  // Segments: (batch, phase, column tile), up to kMaxTileColumns tiles each, fewer (down
  // to kMinTileColumns) to give every core a few.  Items: a group of segments side by
  // side in the product columns, so that each filter block read serves them all (short
  // inputs through wide layers have a few tiles per phase, and re-reading a 256-channel
  // filter per phase cost as much as the products), times an output-channel block.
  // The segments of a phase have equal widths (a phase of 8 k + 1 tiles made a one-tile
  // segment), and where they stay half as wide, a multiple of the threads in number;
  // the items have equal numbers of segments where that makes a multiple of the threads
  // too: with whole items per thread, 9 equal items on 2 threads took as long as 10.
  const int64_t threads = MaxThreads();
  const int64_t per_phase = (4 * threads + B * d - 1) / (B * d);  // segments wanted
  const int64_t widest = std::min(
      tiles, std::max(kMinTileColumns, std::min(kMaxTileColumns, tiles / per_phase)));
  int64_t column_tiles = (tiles + widest - 1) / widest;
  for (int64_t more = column_tiles; more < column_tiles + threads; ++more) {
    if (B * d * more % threads == 0 && tiles / more >= kMinTileColumns / 2) {
      column_tiles = more;
      break;
    }
  }
  const int64_t width = (tiles + column_tiles - 1) / column_tiles;
  const int64_t segments = B * d * column_tiles;
  const int64_t width16 = RoundColumns(width);
  const int64_t width_in = width16 + (chunks - 1) * shift;  // a segment's product columns
  int64_t group = std::max<int64_t>(
      1, std::min((segments + 2 * threads - 1) / (2 * threads), kMaxTileColumns / width_in));
  for (int64_t even = group; even >= 1; --even) {
    if (segments % even == 0 && segments / even % threads == 0) {
      group = even;
      break;
    }
  }
  const int64_t column_items = (segments + group - 1) / group;
  const int64_t packed = PackedBlocks(C_out), depth = chunks * C_in;
  const int64_t wanted = OutputBlocks(column_items, C_out);
  const int64_t block = (packed + wanted - 1) / wanted * kPack;  // output channels per item
  const int64_t blocks = (C_out + block - 1) / block;
  const int64_t m_stride = RoundColumns(group * width_in);
  const int64_t u_stride = m_stride + (chunks - 1) * shift;

  // Segment seg as (batch, phase, first tile, tiles).
  auto segment = [&](int64_t seg) {
    const int64_t q0 = (seg % column_tiles) * width;
    return std::array<int64_t, 4>{seg / (d * column_tiles), (seg / column_tiles) % d, q0,
                                  std::min(width, tiles - q0)};
  };

  ParallelFor(column_items * blocks, [&](int64_t item) {
    float* U = Workspace<1>(n * C_in * u_stride);
    float* M = Workspace<2>(n * block * m_stride);
    float* rows = Workspace<3>(m * width16);
    const int64_t o0 = (item % blocks) * block, o_count = std::min(block, C_out - o0);
    const int64_t first = (item / blocks) * group;
    const int64_t count = std::min(group, segments - first);
    // U[i][c][s width_in + q] = sum_j B^T[i][j] x_phase[c][(q0 + q) m + j] for segment s
    // of the group: j % m picks the polyphase row, j / m the column offset.  Columns
    // past a segment's own are zeroed: their products are dropped, but must not be
    // computed on whatever the workspace held.
    for (int64_t s = 0; s < count; ++s) {
      const auto [b, phase, q0, cols] = segment(first + s);
      const int64_t cols_in = RoundColumns(cols) + (chunks - 1) * shift;
      const int64_t end = s + 1 < count ? width_in : u_stride - s * width_in;
      for (int64_t c = 0; c < C_in; ++c) {
        const float* xc = X + (b * C_in + c) * D * V;
        const float* xs[kMaxPoints];
        for (int64_t j = 0; j < n; ++j) xs[j] = xc + (phase + d * (j % m)) * V + q0 + j / m;
        float* u = U + c * u_stride + s * width_in;
        InputTransformFor(f, xs, cols_in, u, C_in * u_stride);
        for (int64_t i = 0; i < n; ++i) {
          std::fill(u + i * C_in * u_stride + cols_in, u + i * C_in * u_stride + end, 0.f);
        }
      }
    }
    // M[i][o][q] = sum_chunk gw[i][o] . U[i][.][chunk shift + q]
    const int64_t o_blocks = PackedBlocks(o_count);
    const int64_t cols16 = RoundColumns((count - 1) * width_in + width16);
    for (int64_t i = 0; i < n; ++i) {
      PackedProduct(gw + (i * packed + o0 / kPack) * depth * kPack, depth, o_blocks, chunks,
                   C_in, U + i * C_in * u_stride, u_stride, shift, cols16,
                   M + i * block * m_stride, m_stride);
    }
    // out[o][phase + d ((q0 + q) m + k)] = bias + sum_i A^T[k][i] M[i][o][s width_in + q]
    for (int64_t s = 0; s < count; ++s) {
      const auto [b, phase, q0, cols] = segment(first + s);
      for (int64_t o = 0; o < o_count; ++o) {
        float* yo = out + (b * C_out + o0 + o) * T_out;
        const float* mo = M + o * m_stride + s * width_in;
        OutputTransformFor(f, mo, block * m_stride, bias[o0 + o], cols, rows, width16);
        for (int64_t k = 0; k < m; ++k) {
          const float* row = rows + k * width16;
          const int64_t t0 = phase + d * (q0 * m + k);
          const int64_t valid = t0 < T_out ? std::min(cols, (T_out - t0 + D - 1) / D) : 0;
          for (int64_t q = 0; q < valid; ++q) yo[t0 + D * q] = row[q];
        }
      }
    }
  });
}

/*! \brief The shape winograd_filter writes for a [C_out, C_in, K] filter. */
std::vector<int64_t> FilterShape(int64_t C_out, int64_t C_in, int64_t K) {
  const WinogradTransform& f = TransformFor(K);
  return {f.n, PackedBlocks(C_out), f.Chunks(K) * C_in, kPack};
}

bool WinogradPays(int64_t C_in, int64_t C_out, int64_t K, int64_t dilation, int64_t T_out) {
  // The transforms cost O(n^2) per channel and tile against O(n C) in the GEMMs, so only
  // wide layers gain.  With 7 or 11 taps the products fall 2x and Winograd wins from the
  // first tile on (one thread, kokoro's 128/256-channel shapes: 0.93-1.1x the direct time
  // at one to three tiles per phase, 1.2-2.4x from there); with 3 taps they fall 1.5x and
  // it needs about 64 tiles per phase to gain (0.55-1.1x below).  The transformed filter
  // is stored with the build and about twice the filter, so only the generator's 128-
  // and 256-channel layers, most of kokoro's FLOPs, take it: its 1024-channel decoder
  // layers and the 512-channel text encoder and prosody layers (a few percent of the
  // time) stay direct, which keeps ~130 MB of filters out of the build.
  const int64_t tiles_per_phase = (T_out / dilation) / TransformFor(K).m;
  return K >= 3 && C_in >= 64 && C_out >= 64 && C_in * C_out <= 256 * 256 &&
         tiles_per_phase >= (K >= 7 ? 1 : 64);
}

void WinogradFilter(tvm::ffi::TensorView w, tvm::ffi::TensorView gw) {
  const auto [C_out, C_in, K] =
      CheckFilterTransformArgs("kokoro_ext.winograd_filter", w, "gw", gw, FilterShape);
  std::vector<float> taps(PackedBlocks(C_out) * K * C_in * kPack);
  PackTaps(DataPtr<const float>(w), taps.data(), C_out, C_in, K);
  FilterTransform(TransformFor(K), PackedFilter{taps.data()}, DataPtr<float>(gw), C_out, C_in,
                  K);
}

void Conv1dWinogradPacked(tvm::ffi::Shape options, tvm::ffi::TensorView x,
                          tvm::ffi::TensorView gw, tvm::ffi::TensorView bias,
                          tvm::ffi::TensorView out) {
  constexpr const char* kName = "kokoro_ext.conv1d_winograd";
  CheckConvArgs(kName, "(padding, dilation, K)", 3, options, x, "gw", gw, 4, bias, out);
  const int64_t pad = options[0], dilation = options[1], K = options[2];
  if (K < 1 || dilation < 1 || pad < 0) {
    TVM_FFI_THROW(ValueError) << kName << ": options (padding, dilation, K) = (" << pad << ", "
                              << dilation << ", " << K << ") are out of range";
  }
  const int64_t B = x.shape()[0], C_in = x.shape()[1], T_in = x.shape()[2];
  const int64_t C_out = out.shape()[1];
  const int64_t T_out = T_in + 2 * pad - dilation * (K - 1);
  CheckShape(kName, "gw", gw, FilterShape(C_out, C_in, K));
  CheckShape(kName, "bias", bias, {C_out});
  CheckShape(kName, "out", out, {B, C_out, T_out});
  Conv1dWinograd(TransformFor(K), DataPtr<const float>(x), DataPtr<const float>(gw),
                 DataPtr<const float>(bias), DataPtr<float>(out), B, C_in, T_in, C_out, K, pad,
                 dilation, T_out);
}

void Conv1dWinogradIfPays(tvm::ffi::Shape options, tvm::ffi::TensorView x,
                          tvm::ffi::TensorView taps, tvm::ffi::TensorView gw,
                          tvm::ffi::TensorView bias, tvm::ffi::TensorView out) {
  constexpr const char* kName = "kokoro_ext.conv1d_winograd_if_pays";
  if (options.size() != 3) {
    TVM_FFI_THROW(ValueError) << kName << ": options must be (padding, dilation, K)";
  }
  CheckFloat32Cpu(kName, "x", x, 3);
  CheckFloat32Cpu(kName, "taps", taps, 4);
  CheckFloat32Cpu(kName, "bias", bias, 1);
  const int64_t pad = options[0], dilation = options[1], K = options[2];
  const int64_t C_in = x.shape()[1], T_in = x.shape()[2];
  const int64_t C_out = bias.shape()[0];
  CheckShape(kName, "taps", taps, PackedTapsShape(C_out, C_in, K));
  const int64_t T_out = T_in + 2 * pad - dilation * (K - 1);
  if (WinogradPays(C_in, C_out, K, dilation, T_out)) {
    Conv1dWinogradPacked(options, x, gw, bias, out);
    return;
  }
  static const tvm::ffi::Function direct =
      tvm::ffi::Function::GetGlobalRequired("kokoro_ext.conv1d_taps");
  direct(tvm::ffi::Shape({pad, dilation}), x, taps, bias, out);
}

/*!
 * \brief KOKORO_EXT_WINOGRAD_CACHE_MB's default.  In a browser (emscripten) none: a
 *  WebAssembly memory never shrinks, so the kept filters (about 95 MB for Kokoro-82M's
 *  generator) would stay in the page's memory for good, on top of the int8 taps they are
 *  made from; there the transform at each call measured no slower on a sentence.
 */
#ifdef __EMSCRIPTEN__
constexpr size_t kDefaultCacheMB = 0;
#else
constexpr size_t kDefaultCacheMB = 192;
#endif

/*!
 * \brief Winograd filters transformed from int8 taps, kept for the filters a process uses
 *  again.  A filter is transformed into scratch on its first use and kept from its second
 *  on, so a process that speaks once (the say command) holds none of them and one that
 *  keeps speaking (a server) stops paying the transform, about a tenth of a short text's
 *  time.  At most KOKORO_EXT_WINOGRAD_CACHE_MB (default kDefaultCacheMB: 192 natively,
 *  Kokoro-82M's generator needs about 100; 0 in a browser) are kept, the least recently
 *  used going first; 0 keeps none.
 *
 *  A filter is known by its address, shape and scales: the weights are memory-mapped for
 *  the life of their Synthesizer, and another mapping at the same address would hold
 *  another checkpoint's weights, whose scales differ.
 */
class FilterCache {
 public:
  static FilterCache& Global() {
    static FilterCache* cache = new FilterCache();  // never destroyed: used at exit
    return *cache;
  }

  /*! \brief The transformed filter of (taps, scale): kept, or made in ``scratch``. */
  const float* Get(const WinogradTransform& f, const int8_t* taps, const float* scale,
                   int64_t C_out, int64_t C_in, int64_t K, float* scratch, size_t count) {
    std::lock_guard<std::mutex> lock(mu_);
    const Key key{taps, C_out, C_in, K};
    auto it = entries_.find(key);
    const int64_t channels = PackedBlocks(C_out) * kPack;
    if (it != entries_.end() && !std::equal(scale, scale + channels, it->second.scale.begin())) {
      Drop(it);  // another filter at this address
      it = entries_.end();
    }
    if (it != entries_.end() && !it->second.gw.empty()) {
      recent_.splice(recent_.begin(), recent_, it->second.position);
      return it->second.gw.data();
    }
    const bool keep = it != entries_.end() && count * sizeof(float) <= budget_;
    float* gw = scratch;
    if (keep) {
      it->second.gw.resize(count);
      gw = it->second.gw.data();
      bytes_ += count * sizeof(float);
      recent_.push_front(key);
      it->second.position = recent_.begin();
      while (bytes_ > budget_) Drop(entries_.find(recent_.back()));
    } else if (it == entries_.end()) {
      entries_[key].scale.assign(scale, scale + channels);  // seen once
    }
    FilterTransform(f, PackedFilter{nullptr, taps, scale}, gw, C_out, C_in, K);
    return gw;
  }

  /*! \brief The most bytes kept. */
  int64_t Budget() {
    std::lock_guard<std::mutex> lock(mu_);
    return static_cast<int64_t>(budget_);
  }

  /*! \brief (bytes kept, filters kept). */
  std::pair<int64_t, int64_t> Stats() {
    std::lock_guard<std::mutex> lock(mu_);
    return {static_cast<int64_t>(bytes_), static_cast<int64_t>(recent_.size())};
  }

  void Clear() {
    std::lock_guard<std::mutex> lock(mu_);
    entries_.clear();
    recent_.clear();
    bytes_ = 0;
  }

 private:
  using Key = std::tuple<const int8_t*, int64_t, int64_t, int64_t>;
  struct Entry {
    std::vector<float> scale, gw;  // gw empty: seen once, not kept
    std::list<Key>::iterator position;
  };

  FilterCache() {
    const char* mb = std::getenv("KOKORO_EXT_WINOGRAD_CACHE_MB");
    budget_ = (mb != nullptr ? std::strtoull(mb, nullptr, 10) : kDefaultCacheMB) << 20;
  }

  void Drop(std::map<Key, Entry>::iterator it) {
    if (!it->second.gw.empty()) {
      bytes_ -= it->second.gw.size() * sizeof(float);
      recent_.erase(it->second.position);
    }
    entries_.erase(it);
  }

  std::mutex mu_;
  std::map<Key, Entry> entries_;
  std::list<Key> recent_;  // kept filters, most recently used first
  size_t bytes_ = 0, budget_ = 0;
};

/*!
 * \brief conv1d_winograd_if_pays on an int8 filter packed as taps: Winograd where it pays,
 *  on the filter transformed from the taps (FilterCache: no transformed filter is stored
 *  with the build), else the direct products on the taps dequantized block by block.
 */
void Conv1dWinogradQ8IfPays(tvm::ffi::Shape options, tvm::ffi::TensorView x,
                            tvm::ffi::TensorView taps, tvm::ffi::TensorView scale,
                            tvm::ffi::TensorView bias, tvm::ffi::TensorView out) {
  constexpr const char* kName = "kokoro_ext.conv1d_winograd_q8_if_pays";
  const ConvShape s = CheckQuantizedConvArgs(kName, options, x, taps, scale, bias, out);
  if (WinogradPays(s.C_in, s.C_out, s.K, s.dilation, s.T_out)) {
    const WinogradTransform& f = TransformFor(s.K);
    const std::vector<int64_t> shape = FilterShape(s.C_out, s.C_in, s.K);
    const size_t count = shape[0] * shape[1] * shape[2] * shape[3];
    const float* gw = FilterCache::Global().Get(f, DataPtr<const int8_t>(taps),
                                                DataPtr<const float>(scale), s.C_out, s.C_in,
                                                s.K, Workspace<5>(count), count);
    Conv1dWinograd(f, DataPtr<const float>(x), gw, DataPtr<const float>(bias),
                   DataPtr<float>(out), s.B, s.C_in, s.T_in, s.C_out, s.K, s.pad, s.dilation,
                   s.T_out);
    return;
  }
  static const tvm::ffi::Function direct =
      tvm::ffi::Function::GetGlobalRequired("kokoro_ext.conv1d_taps_q8");
  direct(options, x, taps, scale, bias, out);
}

}  // namespace

TVM_FFI_STATIC_INIT_BLOCK() {
  namespace refl = tvm::ffi::reflection;
  refl::GlobalDef()
      .def("kokoro_ext.winograd_pays", WinogradPays)
      .def("kokoro_ext.winograd_filter_shape",
           [](int64_t C_out, int64_t C_in, int64_t K) {
             return tvm::ffi::Shape(FilterShape(C_out, C_in, K));
           })
      .def("kokoro_ext.winograd_filter", Scoped<WinogradFilter>)
      .def("kokoro_ext.conv1d_winograd", Scoped<Conv1dWinogradPacked>)
      .def("kokoro_ext.conv1d_winograd_if_pays", Scoped<Conv1dWinogradIfPays>)
      .def("kokoro_ext.conv1d_winograd_q8_if_pays", Scoped<Conv1dWinogradQ8IfPays>)
      .def("kokoro_ext.winograd_cache_stats",
           []() {
             const auto [bytes, filters] = FilterCache::Global().Stats();
             return tvm::ffi::Shape({bytes, filters});
           })
      .def("kokoro_ext.winograd_cache_budget", []() { return FilterCache::Global().Budget(); })
      .def("kokoro_ext.winograd_cache_clear", []() { FilterCache::Global().Clear(); });
}

}  // namespace kokoro_ext
