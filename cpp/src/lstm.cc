/*!
 * \file lstm.cc
 * \brief kokoro_ext.lstm: LSTM forward with packed-sequence semantics, on float32 or int8
 *  weights.
 *
 * Equivalent to
 *   packed = pack_padded_sequence(x, lengths, batch_first=True, enforce_sorted=...)
 *   y, (h_n, c_n) = torch.nn.LSTM(..., batch_first=True)(packed, (h0, c0))
 *   y = pad_packed_sequence(y, batch_first=True, total_length=T)
 * for float32 on the CPU: each sample runs over its own length only, the reverse
 * direction starts at the sample's last valid step, y is zero past each length, and
 * h_n/c_n hold the state after each sample's last step.
 *
 * Call (destination-passing style, as R.call_dps_packed emits it):
 *   kokoro_ext.lstm(options, x, lengths, h0, c0, w_ih_first, w_ih_rest, w_hh, bias,
 *                   y, h_n, c_n)
 *     options     Shape (enforce_sorted,)
 *     x           [B, T, I]             lengths  int64 [B], each in [1, T]
 *     h0, c0      [L*D, B, H]
 *     w_ih_first  [D, 4H, I]            layer 0 input weights
 *     w_ih_rest   [L-1, D, 4H, D*H]     input weights of the layers above
 *     w_hh        [L, D, 4H, H]         bias  [L, D, 4H] (b_ih + b_hh)
 *     y           [B, T, D*H]           h_n, c_n [L*D, B, H]
 * Weights are PyTorch's, stacked by layer and direction; gate order i, f, g, o.
 *
 *   kokoro_ext.lstm_q8(options, x, lengths, h0, c0, w_ih_first, w_ih_first_scale,
 *                      w_ih_rest, w_ih_rest_scale, w_hh, w_hh_scale, bias, y, h_n, c_n)
 *     the same on int8 weights with a float32 scale per row (per layer, direction and
 *     gate row: [D, 4H], [L-1, D, 4H], [L, D, 4H]), standing for float(q) * scale.  The
 *     input weights are dequantized where they are read, into the float32 operands lstm
 *     reads.  w_hh comes in gate panels, [L, D, ceil(4H / 128), H, 128] (gates past 4H
 *     zero), as lstm_recurrent_q8 packs it, dequantized in registers at each step.  The
 *     sums are lstm's on float(q) * scale, bit for bit.
 *   kokoro_ext.lstm_weights_q8(w, q, scale) -> int
 *     w [..., 4H, n] float32 as q int8 [..., 4H, n] and scale [..., 4H] (quantized.h's
 *     QuantizeRows, a row per all but the last axis); returns the rows quantized off a
 *     grid (lossy).  The build's weight transform runs it (kokoro_ext.build.passes.quantize).
 *   kokoro_ext.lstm_recurrent_q8(w, panels, scale) -> int
 *     w_hh [..., 4H, H] quantized as lstm_weights_q8 does, its int8 values packed in gate
 *     panels [..., ceil(4H / 128), H, 128] for lstm_q8; returns the lossy rows.
 *
 * Work per layer: a BLAS GEMM per sample and direction projects every time step
 * (x W_ih^T + b), then the recurrences of all (sample, direction) pairs run in
 * parallel (TVM's thread pool, threading.h), each doing one [4H, H] matrix-vector
 * product per step with W_hh in gate panels.  The float32 kernel packs them per call;
 * lstm_q8 takes them packed at build time, in int8, so that a call neither dequantizes
 * nor repacks them (1 MB of float32 per direction at Kokoro's H = 256, allocated and
 * written at every call) and a step reads a quarter of the bytes; the conversion in
 * registers costs about what those bytes did, so a step takes as long as before.
 */
#include <kokoro_ext/products.h>
#include <kokoro_ext/quantized.h>
#include <kokoro_ext/simd.h>
#include <kokoro_ext/tensor_args.h>
#include <kokoro_ext/threading.h>
#include <cblas.h>
#include <tvm/ffi/container/shape.h>
#include <tvm/ffi/function.h>
#include <tvm/ffi/reflection/registry.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <vector>

namespace kokoro_ext {
namespace {

constexpr const char* kName = "kokoro_ext.lstm";
constexpr const char* kNameQ8 = "kokoro_ext.lstm_q8";

inline float Sigmoid(float x) { return 1.f / (1.f + std::exp(-x)); }

// The recurrent product is vectorized across gates in blocks of kGateBlock, with
// one broadcast of h[k] per block row.
constexpr int kGateVecs = 8;
constexpr int64_t kGateBlock = kGateVecs * simd::kLanes;

/*! \brief dst[i] = float(q[i]) * scale for i < n: one row of an int8 weight. */
void DequantizeRow(const int8_t* q, float scale, int64_t n, float* dst) {
  const RegisterVector s = Splat(scale);
  int64_t i = 0;
  for (; i + kVectorLanes <= n; i += kVectorLanes) StoreRegister(dst + i, LoadInt8(q + i) * s);
  for (; i < n; ++i) dst[i] = static_cast<float>(q[i]) * scale;
}

/*!
 * \brief One of the weights w_ih_first, w_ih_rest, w_hh: rows of n values (a row per
 *  layer, direction and gate), float32 or int8 with a float32 scale per row.
 */
struct LstmWeights {
  const float* f32 = nullptr;
  const int8_t* q8 = nullptr;
  const float* scale = nullptr;  // with q8

  /*!
   * \brief Rows [r0, r0 + rows) as float32: the weights themselves, or dequantized into
   *  dst ([rows, n]) on the thread pool.
   */
  const float* Rows(int64_t r0, int64_t rows, int64_t n, float* dst) const {
    if (f32 != nullptr) return f32 + r0 * n;
    constexpr int64_t kRowsPerTask = 64;
    ParallelFor((rows + kRowsPerTask - 1) / kRowsPerTask, [&](int64_t task) {
      const int64_t end = std::min(rows, (task + 1) * kRowsPerTask);
      for (int64_t r = task * kRowsPerTask; r < end; ++r) {
        DequantizeRow(q8 + (r0 + r) * n, scale[r0 + r], n, dst + r * n);
      }
    });
    return dst;
  }
};

/*!
 * \brief Repack W_hh [G, H] (value(g, k) its entries) so each block of kGateBlock gates is
 * one contiguous [H, kGateBlock] panel (the tail gates form a last [H, G % kGateBlock]
 * panel), so the recurrence streams through memory instead of striding across rows.
 */
template <typename Value>
std::unique_ptr<float[]> PackPanels(Value value, int64_t G, int64_t H) {
  std::unique_ptr<float[]> packed(new float[G * H]);
  for (int64_t g0 = 0; g0 < G; g0 += kGateBlock) {
    const int64_t width = std::min(kGateBlock, G - g0);
    float* panel = packed.get() + g0 * H;
    for (int64_t k = 0; k < H; ++k)  // write the panel contiguously
      for (int64_t v = 0; v < width; ++v) panel[k * width + v] = value(g0 + v, k);
  }
  return packed;
}

/*! \brief Rows [r0, r0 + G) of float32 ``w`` (W_hh of one layer and direction) packed by
 *  PackPanels. */
std::unique_ptr<float[]> PackRecurrentWeights(const float* w, int64_t r0, int64_t G, int64_t H) {
  const float* rows = w + r0 * H;
  return PackPanels([rows, H](int64_t g, int64_t k) { return rows[g * H + k]; }, G, H);
}

/*! \brief Gate panels of G gates. */
constexpr int64_t Panels(int64_t G) { return (G + kGateBlock - 1) / kGateBlock; }

/*! \brief w[0:G, 0:H] (value(g, k) its entries, G <= kGateBlock rows of a panel) into
 *  an int8 panel [H, kGateBlock], gates past G zero. */
template <typename Value>
void PackPanelInt8(Value value, int64_t G, int64_t H, int8_t* panel) {
  std::memset(panel, 0, H * kGateBlock);
  for (int64_t k = 0; k < H; ++k)
    for (int64_t g = 0; g < G; ++g) panel[k * kGateBlock + g] = value(g, k);
}

/*! \brief gates[0:G] += W_hh h, with W_hh packed by PackRecurrentWeights. */
void AddRecurrentTerm(const float* h, const float* packed, int64_t H, int64_t G, float* gates) {
  using namespace simd;
  int64_t g0 = 0;
  for (; g0 + kGateBlock <= G; g0 += kGateBlock) {
    const float* panel = packed + g0 * H;
    f32x16 acc[kGateVecs];
    for (int v = 0; v < kGateVecs; ++v) acc[v] = Load(gates + g0 + v * kLanes);
    for (int64_t k = 0; k < H; ++k) {
      const f32x16 hk = Broadcast(h[k]);
      for (int v = 0; v < kGateVecs; ++v) acc[v] += hk * Load(panel + k * kGateBlock + v * kLanes);
    }
    for (int v = 0; v < kGateVecs; ++v) Store(gates + g0 + v * kLanes, acc[v]);
  }
  const int64_t width = G - g0;
  const float* panel = packed + g0 * H;
  for (int64_t k = 0; k < H; ++k)
    for (int64_t v = 0; v < width; ++v) gates[g0 + v] += h[k] * panel[k * width + v];
}

/*!
 * \brief gates[0:G] += W_hh h, with W_hh in int8 panels [ceil(G / kGateBlock), H,
 *  kGateBlock] and a scale per gate, dequantized in registers (quantized.h's LoadInt8
 *  times the gates' scales): the float32 kernel's sums on float(q) * scale, bit for bit.
 *  A panel's gates go kSpan at a time, 8 of the host's vectors (all 128 on AVX-512, two
 *  halves on AVX2 and NEON, whose 16 and 32 registers hold 8 sums and their operands).
 */
void AddRecurrentTermQ8(const float* h, const int8_t* panels, const float* scale, int64_t H,
                        int64_t G, float* gates) {
  constexpr int kSpanVecs = 8;
  constexpr int64_t kSpan = kSpanVecs * kVectorLanes;
  static_assert(kGateBlock % kSpan == 0, "a panel is whole spans");
  for (int64_t g0 = 0; g0 < G; g0 += kSpan) {
    const int8_t* panel = panels + g0 / kGateBlock * kGateBlock * H + g0 % kGateBlock;
    // The tail past G: zero int8 values, a zero scale and gates not stored.
    const int64_t width = std::min(kSpan, G - g0);
    float in[kSpan] = {}, scales[kSpan] = {};
    std::memcpy(in, gates + g0, width * sizeof(float));
    std::memcpy(scales, scale + g0, width * sizeof(float));
    RegisterVector acc[kSpanVecs], s[kSpanVecs];
    for (int v = 0; v < kSpanVecs; ++v) {
      acc[v] = LoadRegister(in + v * kVectorLanes);
      s[v] = LoadRegister(scales + v * kVectorLanes);
    }
    for (int64_t k = 0; k < H; ++k) {
      const RegisterVector hk = Splat(h[k]);
      for (int v = 0; v < kSpanVecs; ++v) {
        acc[v] += hk * (LoadInt8(panel + k * kGateBlock + v * kVectorLanes) * s[v]);
      }
    }
    float out[kSpan];
    for (int v = 0; v < kSpanVecs; ++v) StoreRegister(out + v * kVectorLanes, acc[v]);
    std::memcpy(gates + g0, out, width * sizeof(float));
  }
}

/*! \brief W_hh of one layer and direction: float32 panels (PackRecurrentWeights), or
 *  int8 panels with a scale per gate (lstm_recurrent_q8). */
struct RecurrentWeights {
  const float* f32 = nullptr;
  const int8_t* q8 = nullptr;
  const float* scale = nullptr;

  void AddTerm(const float* h, int64_t H, int64_t G, float* gates) const {
    if (f32 != nullptr) {
      AddRecurrentTerm(h, f32, H, G, gates);
    } else {
      AddRecurrentTermQ8(h, q8, scale, H, G, gates);
    }
  }
};

/*! \brief c = f c + i g; h = o tanh(c), from pre-activation gates [i | f | g | o]. */
void UpdateState(const float* gates, int64_t H, float* h, float* c) {
  using namespace simd;
  int64_t j = 0;
  for (; j + kLanes <= H; j += kLanes) {
    const f32x16 i_gate = simd::Sigmoid(Load(gates + j));
    const f32x16 f_gate = simd::Sigmoid(Load(gates + H + j));
    const f32x16 g_gate = simd::Tanh(Load(gates + 2 * H + j));
    const f32x16 o_gate = simd::Sigmoid(Load(gates + 3 * H + j));
    const f32x16 c_new = f_gate * Load(c + j) + i_gate * g_gate;
    Store(c + j, c_new);
    Store(h + j, o_gate * simd::Tanh(c_new));
  }
  for (; j < H; ++j) {
    c[j] = Sigmoid(gates[H + j]) * c[j] + Sigmoid(gates[j]) * std::tanh(gates[2 * H + j]);
    h[j] = Sigmoid(gates[3 * H + j]) * std::tanh(c[j]);
  }
}

/*!
 * \brief Run one direction of one layer over one sample.
 * \param proj    [len, 4H] input projections incl. bias, in time order
 * \param w_hh    recurrent weights in gate panels
 * \param out     y at time 0 for this sample and direction; steps are out_stride apart
 * \param h, c    initial state in, final state out ([H] each)
 */
void Recurrence(const float* proj, int64_t len, bool reverse, const RecurrentWeights& w_hh,
                int64_t H, float* out, int64_t out_stride, float* h, float* c) {
  std::vector<float> gates(4 * H);
  for (int64_t s = 0; s < len; ++s) {
    const int64_t t = reverse ? len - 1 - s : s;
    std::memcpy(gates.data(), proj + t * 4 * H, 4 * H * sizeof(float));
    w_hh.AddTerm(h, H, 4 * H, gates.data());
    UpdateState(gates.data(), H, h, c);
    std::memcpy(out + t * out_stride, h, H * sizeof(float));
  }
}

void CheckLengths(const char* kernel, const int64_t* lengths, int64_t B, int64_t T,
                  bool enforce_sorted) {
  for (int64_t b = 0; b < B; ++b) {
    if (lengths[b] < 1 || lengths[b] > T) {
      TVM_FFI_THROW(ValueError) << kernel << ": lengths[" << b << "] = " << lengths[b]
                                << " is outside [1, " << T
                                << "]; every sequence needs at least one step and no more "
                                   "steps than the padded length T";
    }
    if (enforce_sorted && b > 0 && lengths[b] > lengths[b - 1]) {
      TVM_FFI_THROW(ValueError) << kernel << ": lengths must be sorted in decreasing order "
                                << "with enforce_sorted=True, but lengths[" << b - 1
                                << "] = " << lengths[b - 1] << " < lengths[" << b
                                << "] = " << lengths[b];
    }
  }
}

/*! \brief The sizes of an LSTM call. */
struct LstmShape {
  int64_t L, D, H, B, T, I;
  bool enforce_sorted;
};

/*!
 * \brief The checks both kernels make of everything but the input weights: options, the
 *  shape of w_hh (rows [L, D, 4H, H], or with ``panels`` gate panels [L, D,
 *  ceil(4H / 128), H, 128]; its dtype is the caller's to check), x, h0, c0, bias, y, h_n,
 *  c_n and lengths (values too).
 */
LstmShape CheckLstmArgs(const char* kernel, const tvm::ffi::Shape& options,
                        const tvm::ffi::TensorView& x, const tvm::ffi::TensorView& lengths,
                        const tvm::ffi::TensorView& h0, const tvm::ffi::TensorView& c0,
                        const tvm::ffi::TensorView& w_hh, const tvm::ffi::TensorView& bias,
                        const tvm::ffi::TensorView& y, const tvm::ffi::TensorView& h_n,
                        const tvm::ffi::TensorView& c_n, bool panels = false) {
  if (options.size() != 1) {
    TVM_FFI_THROW(ValueError) << kernel << ": options must be (enforce_sorted,)";
  }
  LstmShape s;
  s.enforce_sorted = options[0] != 0;
  s.L = w_hh.shape()[0], s.D = w_hh.shape()[1], s.H = w_hh.shape()[3];
  const int64_t L = s.L, D = s.D, H = s.H;
  const char* layout = panels ? "[L, D, ceil(4H / 128), H, 128]" : "[L, D, 4H, H]";
  if (D != 1 && D != 2) {
    TVM_FFI_THROW(ValueError) << kernel << ": w_hh must be " << layout
                              << " with D = 1 or 2, got " << ShapeString(w_hh.shape());
  }
  if (panels) {
    CheckShape(kernel, "w_hh", w_hh, {L, D, Panels(4 * H), H, kGateBlock});
  } else {
    CheckShape(kernel, "w_hh", w_hh, {L, D, 4 * H, H});
  }
  CheckFloat32Cpu(kernel, "x", x, 3);
  s.B = x.shape()[0], s.T = x.shape()[1], s.I = x.shape()[2];
  const int64_t B = s.B, T = s.T;
  CheckFloat32Cpu(kernel, "h0", h0, 3);
  CheckShape(kernel, "h0", h0, {L * D, B, H});
  CheckFloat32Cpu(kernel, "c0", c0, 3);
  CheckShape(kernel, "c0", c0, {L * D, B, H});
  CheckFloat32Cpu(kernel, "bias", bias, 3);
  CheckShape(kernel, "bias", bias, {L, D, 4 * H});
  CheckFloat32Cpu(kernel, "y", y, 3);
  CheckShape(kernel, "y", y, {B, T, D * H});
  CheckFloat32Cpu(kernel, "h_n", h_n, 3);
  CheckShape(kernel, "h_n", h_n, {L * D, B, H});
  CheckFloat32Cpu(kernel, "c_n", c_n, 3);
  CheckShape(kernel, "c_n", c_n, {L * D, B, H});
  if (lengths.device().device_type != kDLCPU || lengths.dtype().code != kDLInt ||
      lengths.dtype().bits != 64 || lengths.ndim() != 1 || lengths.shape()[0] != B) {
    TVM_FFI_THROW(ValueError) << kernel << ": lengths must be an int64 CPU tensor of shape ["
                              << B << "], got shape " << ShapeString(lengths.shape());
  }
  CheckLengths(kernel, DataPtr<const int64_t>(lengths), B, T, s.enforce_sorted);
  return s;
}

/*! \brief A float32 weight of the given shape. */
LstmWeights FloatWeights(const tvm::ffi::TensorView& w, const char* name,
                         const std::vector<int64_t>& shape) {
  CheckFloat32Cpu(kName, name, w, static_cast<int>(shape.size()));
  CheckShape(kName, name, w, shape);
  return LstmWeights{DataPtr<const float>(w)};
}

/*! \brief An int8 weight of the given shape, with its scale [shape without the last axis]. */
LstmWeights Int8Weights(const tvm::ffi::TensorView& w, const char* name,
                        const tvm::ffi::TensorView& scale, const char* scale_name,
                        const std::vector<int64_t>& shape) {
  CheckInt8Cpu(kNameQ8, name, w, static_cast<int>(shape.size()));
  CheckShape(kNameQ8, name, w, shape);
  const std::vector<int64_t> rows(shape.begin(), shape.end() - 1);
  CheckFloat32Cpu(kNameQ8, scale_name, scale, static_cast<int>(rows.size()));
  CheckShape(kNameQ8, scale_name, scale, rows);
  return LstmWeights{nullptr, DataPtr<const int8_t>(w), DataPtr<const float>(scale)};
}

/*! \brief The LSTM on input weights as LstmWeights hold them and W_hh as float32 rows
 *  [L, D, 4H, H] (packed in panels here) or int8 panels [L, D, ceil(4H / 128), H, 128]
 *  with a scale per gate [L, D, 4H] (q8 and scale). */
void LstmForward(const LstmShape& s, const tvm::ffi::TensorView& x,
                 const tvm::ffi::TensorView& lengths, const tvm::ffi::TensorView& h0,
                 const tvm::ffi::TensorView& c0, const LstmWeights& w_ih_first,
                 const LstmWeights& w_ih_rest, const LstmWeights& w_hh,
                 const tvm::ffi::TensorView& bias, const tvm::ffi::TensorView& y,
                 const tvm::ffi::TensorView& h_n, const tvm::ffi::TensorView& c_n) {
  const int64_t L = s.L, D = s.D, H = s.H, B = s.B, T = s.T, I = s.I;
  const int64_t G = 4 * H;
  const int64_t* len = DataPtr<const int64_t>(lengths);
  float* out = DataPtr<float>(y);
  float* hn = DataPtr<float>(h_n);
  float* cn = DataPtr<float>(c_n);
  std::memcpy(hn, DataPtr<const float>(h0), L * D * B * H * sizeof(float));
  std::memcpy(cn, DataPtr<const float>(c0), L * D * B * H * sizeof(float));

  // Layer input: x for the first layer, the previous layer's output after that.
  std::vector<float> layer_in, layer_out(B * T * D * H);
  std::unique_ptr<float[]> proj(new float[D * B * T * G]);  // fully written before read
  for (int64_t l = 0; l < L; ++l) {
    const float* in = l == 0 ? DataPtr<const float>(x) : layer_in.data();
    const int64_t in_dim = l == 0 ? I : D * H;
    // The layer's [D, 4H, in_dim] input weights; int8 ones dequantized into the calling
    // thread's scratch, kept between calls (fresh, it would be page-faulted in each time).
    const LstmWeights& w_in = l == 0 ? w_ih_first : w_ih_rest;
    const int64_t r0 = l == 0 ? 0 : (l - 1) * D * G;
    const float* w_ih =
        w_in.Rows(r0, D * G, in_dim, w_in.f32 ? nullptr : Workspace<0>(D * G * in_dim));
    float* dst = l == L - 1 ? out : layer_out.data();
    std::memset(dst, 0, B * T * D * H * sizeof(float));
    // Input projections x W_ih^T + b of every step, [D][B][T][4H]: one single-threaded
    // BLAS GEMM per sample and direction, in parallel.  Per sample, so a sample's result
    // does not depend on the batch; single-threaded, so OpenBLAS's thread pool does not
    // compete with ours.
    ParallelFor(D * B, [&](int64_t task) {
      const int64_t d = task / B, b = task % B;
      const float* b_d = DataPtr<const float>(bias) + (l * D + d) * G;
      float* p = proj.get() + (d * B + b) * T * G;
      for (int64_t t = 0; t < T; ++t) std::memcpy(p + t * G, b_d, G * sizeof(float));
      scipy_cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, T, G, in_dim, 1.f,
                        in + b * T * in_dim, in_dim, w_ih + d * G * in_dim, in_dim, 1.f, p, G);
    });
    std::vector<std::unique_ptr<float[]>> packed(D);  // float32 W_hh, for this call
    std::vector<RecurrentWeights> w_rec(D);
    ParallelFor(D, [&](int64_t d) {
      const int64_t matrix = l * D + d;
      if (w_hh.q8 != nullptr) {
        w_rec[d] = {nullptr, w_hh.q8 + matrix * Panels(G) * H * kGateBlock,
                    w_hh.scale + matrix * G};
      } else {
        packed[d] = PackRecurrentWeights(w_hh.f32, matrix * G, G, H);
        w_rec[d] = {packed[d].get()};
      }
    }, w_hh.f32 != nullptr);
    ParallelFor(D * B, [&](int64_t task) {
      const int64_t d = task / B, b = task % B;
      const int64_t state = ((l * D + d) * B + b) * H;
      Recurrence(proj.get() + (d * B + b) * T * G, len[b], d == 1, w_rec[d], H,
                 dst + b * T * D * H + d * H, D * H, hn + state, cn + state);
    });
    layer_in.swap(layer_out);
    layer_out.resize(B * T * D * H);
  }
}

void Lstm(tvm::ffi::Shape options, tvm::ffi::TensorView x, tvm::ffi::TensorView lengths,
          tvm::ffi::TensorView h0, tvm::ffi::TensorView c0, tvm::ffi::TensorView w_ih_first,
          tvm::ffi::TensorView w_ih_rest, tvm::ffi::TensorView w_hh, tvm::ffi::TensorView bias,
          tvm::ffi::TensorView y, tvm::ffi::TensorView h_n, tvm::ffi::TensorView c_n) {
  CheckFloat32Cpu(kName, "w_hh", w_hh, 4);
  const LstmShape s = CheckLstmArgs(kName, options, x, lengths, h0, c0, w_hh, bias, y, h_n, c_n);
  const int64_t L = s.L, D = s.D, H = s.H;
  const LstmWeights first = FloatWeights(w_ih_first, "w_ih_first", {D, 4 * H, s.I});
  const LstmWeights rest = FloatWeights(w_ih_rest, "w_ih_rest", {L - 1, D, 4 * H, D * H});
  LstmForward(s, x, lengths, h0, c0, first, rest, LstmWeights{DataPtr<const float>(w_hh)},
              bias, y, h_n, c_n);
}

void LstmQ8(tvm::ffi::Shape options, tvm::ffi::TensorView x, tvm::ffi::TensorView lengths,
            tvm::ffi::TensorView h0, tvm::ffi::TensorView c0, tvm::ffi::TensorView w_ih_first,
            tvm::ffi::TensorView w_ih_first_scale, tvm::ffi::TensorView w_ih_rest,
            tvm::ffi::TensorView w_ih_rest_scale, tvm::ffi::TensorView w_hh,
            tvm::ffi::TensorView w_hh_scale, tvm::ffi::TensorView bias, tvm::ffi::TensorView y,
            tvm::ffi::TensorView h_n, tvm::ffi::TensorView c_n) {
  CheckInt8Cpu(kNameQ8, "w_hh", w_hh, 5);
  const LstmShape s =
      CheckLstmArgs(kNameQ8, options, x, lengths, h0, c0, w_hh, bias, y, h_n, c_n, true);
  const int64_t L = s.L, D = s.D, H = s.H;
  const LstmWeights first = Int8Weights(w_ih_first, "w_ih_first", w_ih_first_scale,
                                        "w_ih_first_scale", {D, 4 * H, s.I});
  const LstmWeights rest = Int8Weights(w_ih_rest, "w_ih_rest", w_ih_rest_scale,
                                       "w_ih_rest_scale", {L - 1, D, 4 * H, D * H});
  CheckFloat32Cpu(kNameQ8, "w_hh_scale", w_hh_scale, 3);
  CheckShape(kNameQ8, "w_hh_scale", w_hh_scale, {L, D, 4 * H});
  const LstmWeights rec{nullptr, DataPtr<const int8_t>(w_hh), DataPtr<const float>(w_hh_scale)};
  LstmForward(s, x, lengths, h0, c0, first, rest, rec, bias, y, h_n, c_n);
}

/*! \brief The checks an LSTM weight quantizer makes of w [..., 4H, n] (float32, ``layout``
 *  naming its axes in the message) and scale [..., 4H]; returns w's shape. */
std::vector<int64_t> CheckQuantizerArgs(const char* kernel, const char* layout,
                                        const tvm::ffi::TensorView& w,
                                        const tvm::ffi::TensorView& scale) {
  const int ndim = w.ndim();
  if (ndim < 2) {
    TVM_FFI_THROW(ValueError) << kernel << ": w must be " << layout << ", got shape "
                              << ShapeString(w.shape());
  }
  CheckFloat32Cpu(kernel, "w", w, ndim);
  const std::vector<int64_t> shape(w.shape().begin(), w.shape().end());
  CheckFloat32Cpu(kernel, "scale", scale, ndim - 1);
  CheckShape(kernel, "scale", scale, std::vector<int64_t>(shape.begin(), shape.end() - 1));
  return shape;
}

/*!
 * \brief w [..., 4H, n] (of ``shape``) quantized per row into q (the same shape) and scale
 *  [..., 4H]; returns the rows quantized off a grid.  Each [4H, n] matrix (a layer and
 *  direction) is quantized on its own, so that a scale per direction
 *  (DynamicQuantizeLSTM's) is the grid tried first for each of its rows, also those
 *  without a small multiple of it.
 */
int64_t QuantizeMatrices(const float* w, const std::vector<int64_t>& shape, int8_t* q,
                         float* scale) {
  const size_t ndim = shape.size();
  const int64_t G = shape[ndim - 2], n = shape[ndim - 1];
  int64_t matrices = 1;
  for (size_t i = 0; i + 2 < ndim; ++i) matrices *= shape[i];
  int64_t lossy = 0;
  for (int64_t m = 0; m < matrices; ++m) {
    lossy += QuantizeRows(w + m * G * n, G, n, n, 1, q + m * G * n, n, 1, scale + m * G);
  }
  return lossy;
}

/*!
 * \brief w [..., 4H, n] quantized per row, a row per all but the last axis (quantized.h,
 *  QuantizeMatrices): q int8 of w's shape, scale [..., 4H].  Returns the rows quantized
 *  off a grid.
 */
int64_t LstmWeightsQ8(tvm::ffi::TensorView w, tvm::ffi::TensorView q, tvm::ffi::TensorView scale) {
  constexpr const char* kQuantizer = "kokoro_ext.lstm_weights_q8";
  const std::vector<int64_t> shape = CheckQuantizerArgs(kQuantizer, "[..., 4H, n]", w, scale);
  CheckInt8Cpu(kQuantizer, "q", q, w.ndim());
  CheckShape(kQuantizer, "q", q, shape);
  return QuantizeMatrices(DataPtr<const float>(w), shape, DataPtr<int8_t>(q),
                          DataPtr<float>(scale));
}

/*!
 * \brief w_hh [..., 4H, H] quantized as LstmWeightsQ8 quantizes it, its int8 values packed
 *  in gate panels [..., ceil(4H / 128), H, 128] (gates past 4H zero) for lstm_q8, the
 *  scales [..., 4H].  Returns the rows quantized off a grid.
 */
int64_t LstmRecurrentQ8(tvm::ffi::TensorView w, tvm::ffi::TensorView panels,
                        tvm::ffi::TensorView scale) {
  constexpr const char* kPacker = "kokoro_ext.lstm_recurrent_q8";
  const std::vector<int64_t> shape = CheckQuantizerArgs(kPacker, "[..., 4H, H]", w, scale);
  const size_t ndim = shape.size();
  const int64_t G = shape[ndim - 2], H = shape[ndim - 1];
  std::vector<int64_t> panels_shape(shape.begin(), shape.end() - 2);
  panels_shape.insert(panels_shape.end(), {Panels(G), H, kGateBlock});
  CheckInt8Cpu(kPacker, "panels", panels, static_cast<int>(ndim) + 1);
  CheckShape(kPacker, "panels", panels, panels_shape);
  std::vector<int8_t> q(w.numel());
  const int64_t lossy =
      QuantizeMatrices(DataPtr<const float>(w), shape, q.data(), DataPtr<float>(scale));
  const int64_t matrices = G * H > 0 ? static_cast<int64_t>(q.size()) / (G * H) : 0;
  for (int64_t m = 0; m < matrices; ++m) {
    int8_t* dst = DataPtr<int8_t>(panels) + m * Panels(G) * H * kGateBlock;
    for (int64_t g0 = 0; g0 < G; g0 += kGateBlock) {
      const int8_t* rows = q.data() + (m * G + g0) * H;
      PackPanelInt8([rows, H](int64_t g, int64_t k) { return rows[g * H + k]; },
                    std::min(kGateBlock, G - g0), H, dst + g0 * H);
    }
  }
  return lossy;
}

}  // namespace

TVM_FFI_STATIC_INIT_BLOCK() {
  // The kernels parallelize around BLAS calls themselves (see Lstm).
  scipy_openblas_set_num_threads(1);
  namespace refl = tvm::ffi::reflection;
  refl::GlobalDef()
      .def(kName, Scoped<Lstm>)
      .def(kNameQ8, Scoped<LstmQ8>)
      .def("kokoro_ext.lstm_weights_q8", Scoped<LstmWeightsQ8>)
      .def("kokoro_ext.lstm_recurrent_q8", Scoped<LstmRecurrentQ8>);
}

}  // namespace kokoro_ext
