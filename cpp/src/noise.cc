/*!
 * \file noise.cc
 * \brief kokoro's harmonic-source noise: the normal draws torch's CPU generator makes.
 *
 * kokoro's SineGen, after torch.manual_seed(seed), draws its initial phases
 * (torch.rand(B, H): one 32-bit word each) and then randn_like of its sine waves, a
 * transposed view [B, H, L] in memory.  torch fills a non-contiguous tensor element by
 * element in memory order with at::normal_distribution<double>: Box-Muller on two doubles
 * u1, u2 (each from two 32-bit words, high word first, low 53 bits kept), r cos(theta)
 * first and then, from the generator's cache, r sin(theta); each rounded to float32.
 * The same scalar libm calls as torch's, so the draws are equal bit for bit
 * (tests/test_noise.py compares with torch).
 *
 * The engine is sequential, so the words are drawn in blocks on the calling thread and
 * each block's Box-Muller (the expensive part: log1p, cos, sin) is shared out.
 *
 *   kokoro_ext.source_noise(seed, out)
 *     seed   torch.manual_seed's value, low 32 bits (what torch's engine keeps)
 *     out    float32 [B, L, H]
 */
#include <kokoro_ext/tensor_args.h>
#include <kokoro_ext/threading.h>
#include <tvm/ffi/function.h>
#include <tvm/ffi/reflection/registry.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

namespace kokoro_ext {
namespace {

constexpr int64_t kBlockPairs = 1 << 15;
constexpr int64_t kShare = 1 << 11;  // pairs per parallel item

/*! \brief A double in [0, 1) from two words, as torch's uniform_real_distribution. */
inline double Uniform53(uint32_t high, uint32_t low) {
  const uint64_t bits = ((static_cast<uint64_t>(high) << 32) | low) & ((1ULL << 53) - 1);
  return static_cast<double>(bits) * std::ldexp(1.0, -53);
}

void SourceNoise(int64_t seed, tvm::ffi::TensorView out) {
  constexpr const char* kName = "kokoro_ext.source_noise";
  CheckFloat32Cpu(kName, "out", out, 3);
  if (seed < 0 || seed > 0xFFFFFFFFLL) {
    TVM_FFI_THROW(ValueError) << kName << ": seed " << seed
                              << " is out of range; pass its low 32 bits";
  }
  const int64_t B = out.shape()[0], L = out.shape()[1], H = out.shape()[2];
  const int64_t count = B * H * L, pairs = (count + 1) / 2;
  float* y = DataPtr<float>(out);
  std::mt19937 engine(static_cast<uint32_t>(seed));
  engine.discard(static_cast<unsigned long long>(B * H));  // the initial phases
  std::vector<uint32_t> words(4 * std::min(pairs, kBlockPairs));
  // memory index k of the [B, H, L] view -> element of out [B, L, H]
  auto store = [&](int64_t k, double value) {
    if (k >= count) return;  // the cached sine of an odd count is never used
    const int64_t b = k / (H * L), h = k / L % H, l = k % L;
    y[(b * L + l) * H + h] = static_cast<float>(value);
  };
  for (int64_t p0 = 0; p0 < pairs; p0 += kBlockPairs) {
    const int64_t block = std::min(kBlockPairs, pairs - p0);
    for (int64_t i = 0; i < 4 * block; ++i) words[i] = engine();
    ParallelFor((block + kShare - 1) / kShare, [&](int64_t item) {
      const int64_t end = std::min(block, (item + 1) * kShare);
      for (int64_t p = item * kShare; p < end; ++p) {
        const uint32_t* w = words.data() + 4 * p;
        const double u1 = Uniform53(w[0], w[1]), u2 = Uniform53(w[2], w[3]);
        const double r = std::sqrt(-2.0 * std::log1p(-u2));
        const double theta = 2.0 * M_PI * u1;
        store(2 * (p0 + p), r * std::cos(theta));
        store(2 * (p0 + p) + 1, r * std::sin(theta));
      }
    });
  }
}

}  // namespace

TVM_FFI_STATIC_INIT_BLOCK() {
  namespace refl = tvm::ffi::reflection;
  refl::GlobalDef().def("kokoro_ext.source_noise", SourceNoise);
}

}  // namespace kokoro_ext
