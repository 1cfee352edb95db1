/*!
 * \file kokoro_ext/threading.h
 * \brief How the kernels share out work and reuse their scratch memory.
 *
 * The kernels run between TVM-generated kernels of the same Relax function, which run on
 * the TVM runtime's thread pool.  A second pool (OpenMP) would leave its threads
 * spinning, after each kernel, on cores the other pool's threads need, and the two take
 * turns stealing them from each other; on a loaded 2-core machine that made synthesis
 * several times slower.  So the kernels' parallel loops run on TVM's pool too, through
 * TVMBackendParallelLaunch, the entry TVM-generated code uses.
 */
#ifndef KOKORO_EXT_THREADING_H_
#define KOKORO_EXT_THREADING_H_

#include <tvm/ffi/function.h>
#include <tvm/runtime/c_backend_api.h>

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <mutex>
#include <numeric>
#include <utility>
#include <vector>

namespace kokoro_ext {

/*! \brief The threads of TVM's pool (TVM_NUM_THREADS, runtime.config_threadpool). */
inline int MaxThreads() {
  static const auto num_threads = tvm::ffi::Function::GetGlobal("runtime.NumThreads");
  return num_threads ? std::max(1, (*num_threads)().cast<int>()) : 1;
}

namespace detail {
/*! \brief This thread's workspaces that hold memory (ReleaseWorkspaces). */
inline thread_local std::vector<std::vector<float>*> held_workspaces;
}  // namespace detail

/*!
 * \brief A per-thread scratch buffer of at least n floats.  Contents are unspecified, so a
 *  buffer too small is replaced, not grown by a copy.  Natively it is kept between calls:
 *  fresh allocations of this size are mmapped and page-faulted in on every call, which
 *  costs as much as a small convolution.  In a WebAssembly memory, which never shrinks,
 *  a kept buffer would be memory no later kernel could use: there it is given back when
 *  the kernel call returns (Scoped) or a worker's task ends (ParallelFor), and the next
 *  allocation reuses the pages, already touched, that the heap keeps.
 */
template <int kSlot>
float* Workspace(size_t n) {
  thread_local std::vector<float> buffer;
  if (buffer.size() < n) {
#ifdef __EMSCRIPTEN__
    if (buffer.capacity() == 0) detail::held_workspaces.push_back(&buffer);
#endif
    std::vector<float>().swap(buffer);
    buffer.resize(n);
  }
  return buffer.data();
}

/*! \brief Frees this thread's workspaces in a WebAssembly build; nothing natively. */
inline void ReleaseWorkspaces() {
#ifdef __EMSCRIPTEN__
  for (std::vector<float>* buffer : detail::held_workspaces) std::vector<float>().swap(*buffer);
  detail::held_workspaces.clear();
#endif
}

template <auto F, typename Signature = decltype(F)>
struct ScopedCall;
template <auto F, typename R, typename... Args>
struct ScopedCall<F, R (*)(Args...)> {
  static R Call(Args... args) {
    struct Release {
      ~Release() { ReleaseWorkspaces(); }
    } release;
    return F(std::forward<Args>(args)...);
  }
};

/*! \brief Kernel F as registered: its calling thread's workspaces freed when it returns
 *  (ReleaseWorkspaces). */
template <auto F>
constexpr auto Scoped = &ScopedCall<F>::Call;

/*!
 * \brief body(i) for i in [0, n), items handed out one at a time to the threads of TVM's
 *  pool (dynamic scheduling), or in this thread when ``parallel`` is false.  The first
 *  exception a body throws is rethrown here, after the other threads have stopped.
 */
template <typename F>
void ParallelFor(int64_t n, F&& body, bool parallel = true) {
  const int64_t tasks = parallel ? std::min<int64_t>(n, MaxThreads()) : 1;
  if (tasks <= 1) {
    for (int64_t i = 0; i < n; ++i) body(i);
    return;
  }
  // a thread's own address: the launching thread's workspaces outlive the launch
  static thread_local const char self = 0;
  struct Job {
    Job(int64_t n, F* body) : n(n), body(body) {}
    const int64_t n;
    F* const body;
    const char* const launcher = &self;
    std::atomic<int64_t> next{0};
    std::mutex mutex;
    std::exception_ptr error;
  } job(n, &body);
  auto run = [](int, TVMParallelGroupEnv*, void* data) -> int {
    Job& job = *static_cast<Job*>(data);
    try {
      for (int64_t i = job.next++; i < job.n; i = job.next++) (*job.body)(i);
    } catch (...) {
      std::lock_guard<std::mutex> lock(job.mutex);
      if (!job.error) job.error = std::current_exception();
      job.next = job.n;
    }
    if (&self != job.launcher) ReleaseWorkspaces();  // a worker's task: none outlive it
    return 0;
  };
  TVMBackendParallelLaunch(run, &job, static_cast<int>(tasks));
  if (job.error) std::rethrow_exception(job.error);
}

/*! \brief Work items per thread from which a last, partial round costs little (an eighth
 *  at most) and OutputBlocks and RoundsOfColumns leave the items as they are. */
constexpr int64_t kItemsPerThreadUnrounded = 8;

/*!
 * \brief Blocks to split C_out into: enough for two work items per thread where there are
 *  too few column items (short sequences through wide layers), and, where there are few
 *  items, whole rounds of them: the items are of one size, and a last round of fewer items
 *  than threads leaves the others idle (five tiles on two threads: a sixth of the time).
 */
inline int64_t OutputBlocks(int64_t column_items, int64_t C_out) {
  const int64_t threads = MaxThreads(), most = std::max<int64_t>(1, C_out / 16);
  int64_t blocks = 1;
  if (column_items < 2 * threads) blocks = (2 * threads + column_items - 1) / column_items;
  const int64_t items = column_items * blocks;
  if (items % threads != 0 && items < kItemsPerThreadUnrounded * threads) {
    const int64_t round = threads / std::gcd(column_items, threads);
    blocks = (blocks + round - 1) / round * round;
  }
  return std::min(blocks, most);
}

/*!
 * \brief The width of the tiles to cut n columns into, shared out to the threads: ``width``,
 *  unless that makes few tiles and not whole rounds of them, then narrower (a multiple of
 *  ``multiple``) so that they are: ALBERT's 768 output columns as three tiles of 256 on two
 *  threads left one idle a quarter of the time.
 */
inline int64_t RoundsOfColumns(int64_t n, int64_t width, int64_t multiple) {
  const int64_t threads = MaxThreads();
  int64_t tiles = (n + width - 1) / width;
  if (tiles % threads == 0 || tiles >= kItemsPerThreadUnrounded * threads) return width;
  tiles = (tiles + threads - 1) / threads * threads;
  const int64_t narrower = (n + tiles - 1) / tiles;
  return std::max(multiple, (narrower + multiple - 1) / multiple * multiple);
}

}  // namespace kokoro_ext

#endif  // KOKORO_EXT_THREADING_H_
