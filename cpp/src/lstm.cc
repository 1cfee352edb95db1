/*!
 * \file lstm.cc
 * \brief kokoro_ext.lstm: LSTM forward with packed-sequence semantics.
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
 * Work per layer: a BLAS GEMM per sample and direction projects every time step
 * (x W_ih^T + b), then the recurrences of all (sample, direction) pairs run in
 * parallel (TVM's thread pool, threading.h), each doing one [4H, H] matrix-vector
 * product per step with W_hh repacked into gate panels.
 */
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

inline float Sigmoid(float x) { return 1.f / (1.f + std::exp(-x)); }

// The recurrent product is vectorized across gates in blocks of kGateBlock, with
// one broadcast of h[k] per block row.
constexpr int kGateVecs = 8;
constexpr int64_t kGateBlock = kGateVecs * simd::kLanes;

/*!
 * \brief Repack W_hh [G, H] so each block of kGateBlock gates is one contiguous
 * [H, kGateBlock] panel (the tail gates form a last [H, G % kGateBlock] panel), so the
 * recurrence streams through memory instead of striding across rows.
 */
std::unique_ptr<float[]> PackRecurrentWeights(const float* w, int64_t G, int64_t H) {
  std::unique_ptr<float[]> packed(new float[G * H]);
  for (int64_t g0 = 0; g0 < G; g0 += kGateBlock) {
    const int64_t width = std::min(kGateBlock, G - g0);
    float* panel = packed.get() + g0 * H;
    for (int64_t k = 0; k < H; ++k)  // write the panel contiguously
      for (int64_t v = 0; v < width; ++v) panel[k * width + v] = w[(g0 + v) * H + k];
  }
  return packed;
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
 * \param w_hh    recurrent weights packed by PackRecurrentWeights
 * \param out     y at time 0 for this sample and direction; steps are out_stride apart
 * \param h, c    initial state in, final state out ([H] each)
 */
void Recurrence(const float* proj, int64_t len, bool reverse, const float* w_hh, int64_t H,
                float* out, int64_t out_stride, float* h, float* c) {
  std::vector<float> gates(4 * H);
  for (int64_t s = 0; s < len; ++s) {
    const int64_t t = reverse ? len - 1 - s : s;
    std::memcpy(gates.data(), proj + t * 4 * H, 4 * H * sizeof(float));
    AddRecurrentTerm(h, w_hh, H, 4 * H, gates.data());
    UpdateState(gates.data(), H, h, c);
    std::memcpy(out + t * out_stride, h, H * sizeof(float));
  }
}

void CheckLengths(const int64_t* lengths, int64_t B, int64_t T, bool enforce_sorted) {
  for (int64_t b = 0; b < B; ++b) {
    if (lengths[b] < 1 || lengths[b] > T) {
      TVM_FFI_THROW(ValueError) << kName << ": lengths[" << b << "] = " << lengths[b]
                                << " is outside [1, " << T
                                << "]; every sequence needs at least one step and no more "
                                   "steps than the padded length T";
    }
    if (enforce_sorted && b > 0 && lengths[b] > lengths[b - 1]) {
      TVM_FFI_THROW(ValueError) << kName << ": lengths must be sorted in decreasing order "
                                << "with enforce_sorted=True, but lengths[" << b - 1
                                << "] = " << lengths[b - 1] << " < lengths[" << b
                                << "] = " << lengths[b];
    }
  }
}

void Lstm(tvm::ffi::Shape options, tvm::ffi::TensorView x, tvm::ffi::TensorView lengths,
          tvm::ffi::TensorView h0, tvm::ffi::TensorView c0, tvm::ffi::TensorView w_ih_first,
          tvm::ffi::TensorView w_ih_rest, tvm::ffi::TensorView w_hh, tvm::ffi::TensorView bias,
          tvm::ffi::TensorView y, tvm::ffi::TensorView h_n, tvm::ffi::TensorView c_n) {
  if (options.size() != 1) {
    TVM_FFI_THROW(ValueError) << kName << ": options must be (enforce_sorted,)";
  }
  const bool enforce_sorted = options[0] != 0;
  CheckFloat32Cpu(kName, "w_hh", w_hh, 4);
  const int64_t L = w_hh.shape()[0], D = w_hh.shape()[1], H = w_hh.shape()[3];
  if (D != 1 && D != 2) {
    TVM_FFI_THROW(ValueError) << kName << ": w_hh must be [L, D, 4H, H] with D = 1 or 2, got "
                              << ShapeString(w_hh.shape());
  }
  CheckShape(kName, "w_hh", w_hh, {L, D, 4 * H, H});
  CheckFloat32Cpu(kName, "x", x, 3);
  const int64_t B = x.shape()[0], T = x.shape()[1], I = x.shape()[2];
  CheckFloat32Cpu(kName, "h0", h0, 3);
  CheckShape(kName, "h0", h0, {L * D, B, H});
  CheckFloat32Cpu(kName, "c0", c0, 3);
  CheckShape(kName, "c0", c0, {L * D, B, H});
  CheckFloat32Cpu(kName, "w_ih_first", w_ih_first, 3);
  CheckShape(kName, "w_ih_first", w_ih_first, {D, 4 * H, I});
  CheckFloat32Cpu(kName, "w_ih_rest", w_ih_rest, 4);
  CheckShape(kName, "w_ih_rest", w_ih_rest, {L - 1, D, 4 * H, D * H});
  CheckFloat32Cpu(kName, "bias", bias, 3);
  CheckShape(kName, "bias", bias, {L, D, 4 * H});
  CheckFloat32Cpu(kName, "y", y, 3);
  CheckShape(kName, "y", y, {B, T, D * H});
  CheckFloat32Cpu(kName, "h_n", h_n, 3);
  CheckShape(kName, "h_n", h_n, {L * D, B, H});
  CheckFloat32Cpu(kName, "c_n", c_n, 3);
  CheckShape(kName, "c_n", c_n, {L * D, B, H});
  if (lengths.device().device_type != kDLCPU || lengths.dtype().code != kDLInt ||
      lengths.dtype().bits != 64 || lengths.ndim() != 1 || lengths.shape()[0] != B) {
    TVM_FFI_THROW(ValueError) << kName << ": lengths must be an int64 CPU tensor of shape [" << B
                              << "], got shape " << ShapeString(lengths.shape());
  }
  const int64_t* len = DataPtr<const int64_t>(lengths);
  CheckLengths(len, B, T, enforce_sorted);

  const int64_t G = 4 * H;
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
    const float* w_ih = l == 0 ? DataPtr<const float>(w_ih_first)
                               : DataPtr<const float>(w_ih_rest) + (l - 1) * D * G * in_dim;
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
    std::vector<std::unique_ptr<float[]>> w_rec(D);
    ParallelFor(D, [&](int64_t d) {
      w_rec[d] = PackRecurrentWeights(DataPtr<const float>(w_hh) + (l * D + d) * G * H, G, H);
    });
    ParallelFor(D * B, [&](int64_t task) {
      const int64_t d = task / B, b = task % B;
      const int64_t state = ((l * D + d) * B + b) * H;
      Recurrence(proj.get() + (d * B + b) * T * G, len[b], d == 1, w_rec[d].get(), H,
                 dst + b * T * D * H + d * H, D * H, hn + state, cn + state);
    });
    layer_in.swap(layer_out);
    layer_out.resize(B * T * D * H);
  }
}

}  // namespace

TVM_FFI_STATIC_INIT_BLOCK() {
  // The kernels parallelize around BLAS calls themselves (see Lstm).
  scipy_openblas_set_num_threads(1);
  namespace refl = tvm::ffi::reflection;
  refl::GlobalDef().def(kName, Lstm);
}

}  // namespace kokoro_ext
