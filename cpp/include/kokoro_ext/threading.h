/*!
 * \file kokoro_ext/threading.h
 * \brief How the kernels share out work (OpenMP) and reuse their scratch memory.
 */
#ifndef KOKORO_EXT_THREADING_H_
#define KOKORO_EXT_THREADING_H_

#ifdef _OPENMP
#include <omp.h>
#endif

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

namespace kokoro_ext {

inline int MaxThreads() {
#ifdef _OPENMP
  return omp_get_max_threads();
#else
  return 1;
#endif
}

/*!
 * \brief Blocks to split C_out into when there are too few column items to fill the cores
 *  (short sequences through wide layers).
 */
inline int64_t OutputBlocks(int64_t column_items, int64_t C_out) {
  const int64_t want = 2 * MaxThreads();
  if (column_items >= want) return 1;
  return std::max<int64_t>(1, std::min((want + column_items - 1) / column_items, C_out / 16));
}

/*!
 * \brief A per-thread scratch buffer of at least n floats, kept between calls.  Fresh
 *  allocations of this size are mmapped and page-faulted in on every call, which costs
 *  as much as a small convolution.  Contents are unspecified.
 */
template <int kSlot>
float* Workspace(size_t n) {
  thread_local std::vector<float> buffer;
  if (buffer.size() < n) buffer.resize(n);
  return buffer.data();
}

}  // namespace kokoro_ext

#endif  // KOKORO_EXT_THREADING_H_
