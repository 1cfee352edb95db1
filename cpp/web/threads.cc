/*!
 * \file cpp/web/threads.cc
 * \brief A thread pool for the wasm target's stages: TVMBackendParallelLaunch on Web
 *  Workers that share the stage's WebAssembly memory.
 *
 * TVM's web runtime runs TVMBackendParallelLaunch serially, and emscripten's pthreads
 * need its JavaScript glue, which a STANDALONE_WASM module that tvmjs loads has not.  So
 * the stage is linked with shared, imported memory (kokoro_ext.build.web.kernels), and
 * kokoro.js instantiates the same module in each Web Worker of a pool on that memory
 * (wasm-thread.js): each worker gives its instance a stack and thread-local storage of
 * its own (kx_thread_init), then waits in kx_worker for tasks.  The link routes the
 * TVM-generated code's and the kernels' calls of TVMBackendParallelLaunch here (wasm-ld
 * --wrap), and malloc and its kin through one lock: emscripten's single-threaded
 * dlmalloc is the one a standalone module links.
 *
 * A launch publishes its job with a ticket (its generation, its number of tasks and the
 * next task to claim, in one word); the calling thread and the workers claim tasks from
 * it with a compare-and-swap, so that a task runs once, on whichever thread is free, and
 * a worker woken late cannot take a task of a later job: the claim decides on the
 * ticket's bits alone, and a job's function and data cannot change before its claimed
 * tasks are done.  The caller spins until the job's tasks
 * are done: a page's main thread may not block (memory.atomic.wait traps there).
 * Without workers (a page not cross-origin isolated, or one thread asked for) every
 * launch runs its tasks in the calling thread, in turn, as the web runtime's does.
 */
#ifdef __EMSCRIPTEN__

#include <tvm/runtime/c_backend_api.h>
#ifndef KOKORO_EXT_THREADS_ALONE  // tests/test_web_threads.py: the pool without tvm-ffi
#include <tvm/ffi/function.h>
#include <tvm/ffi/reflection/registry.h>
#endif

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstdlib>

#include <unistd.h>  // sbrk

namespace {

// a ticket: generation (16 bits) | tasks (8 bits) | next task (8 bits)
constexpr int kMaxTasks = 255;  // far more than a page's workers
constexpr uint32_t Generation(uint32_t ticket) { return ticket >> 16; }
constexpr uint32_t Tasks(uint32_t ticket) { return (ticket >> 8) & 0xff; }
constexpr uint32_t Next(uint32_t ticket) { return ticket & 0xff; }

struct Pool {
  std::atomic<uint32_t> ticket{0};
  std::atomic<int> done{0};         // tasks of the current job finished
  std::atomic<int> workers{0};      // workers waiting in kx_worker
  std::atomic<int> failed{0};       // a worker trapped (its JS reports it)
  FTVMParallelLambda lambda = nullptr;
  void* cdata = nullptr;
};

Pool pool;
void* main_thread = nullptr;  // the page's thread state (kx_main_thread)
thread_local bool in_task = false;
std::atomic<int> heap_lock{0};

struct HeapLock {
  HeapLock() {
    while (heap_lock.exchange(1, std::memory_order_acquire)) {
    }
  }
  ~HeapLock() { heap_lock.store(0, std::memory_order_release); }
};

/*! \brief Claim and run tasks of the job of generation ``generation`` while any is left. */
void RunTasks(uint32_t generation) {
  uint32_t ticket = pool.ticket.load();
  while (Generation(ticket) == generation && Next(ticket) < Tasks(ticket)) {
    if (!pool.ticket.compare_exchange_weak(ticket, ticket + 1)) continue;
    // the job cannot change before this task is done: its fields are this generation's
    TVMParallelGroupEnv env{nullptr, static_cast<int32_t>(Tasks(ticket))};
    in_task = true;
    pool.lambda(static_cast<int>(Next(ticket)), &env, pool.cdata);
    in_task = false;
    pool.done.fetch_add(1);
    ticket = pool.ticket.load();
  }
}

// The heap's bytes in use and the most since the last reset, counted under the heap's
// lock: what a stage's allocations need at once, against the memory the heap has grown
// to (kx_heap).
size_t heap_in_use = 0, heap_peak = 0;

/*! \brief The bytes of p's dlmalloc chunk: its size word, the one before p, less the
 *  flag bits (malloc_usable_size is a weak alias of the allocator's own). */
size_t ChunkBytes(void* p) { return reinterpret_cast<const size_t*>(p)[-1] & ~size_t{7}; }

void* Counted(void* p) {
  if (p != nullptr) heap_in_use += ChunkBytes(p);
  heap_peak = std::max(heap_peak, heap_in_use);
  return p;
}

}  // namespace

extern "C" {

void* __real_malloc(size_t);
void __real_free(void*);
void* __real_calloc(size_t, size_t);
void* __real_realloc(void*, size_t);
int __real_posix_memalign(void**, size_t, size_t);
void* __real_aligned_alloc(size_t, size_t);
void* __real_memalign(size_t, size_t);

void* __wrap_malloc(size_t n) {
  HeapLock lock;
  return Counted(__real_malloc(n));
}
void __wrap_free(void* p) {
  HeapLock lock;
  if (p != nullptr) heap_in_use -= ChunkBytes(p);
  __real_free(p);
}
void* __wrap_calloc(size_t n, size_t size) {
  HeapLock lock;
  return Counted(__real_calloc(n, size));
}
void* __wrap_realloc(void* p, size_t n) {
  HeapLock lock;
  const size_t before = p != nullptr ? ChunkBytes(p) : 0;
  void* q = __real_realloc(p, n);
  if (q != nullptr || n == 0) heap_in_use -= before;
  return Counted(q);
}
int __wrap_posix_memalign(void** p, size_t align, size_t n) {
  HeapLock lock;
  const int error = __real_posix_memalign(p, align, n);
  if (error == 0) Counted(*p);
  return error;
}
void* __wrap_aligned_alloc(size_t align, size_t n) {
  HeapLock lock;
  return Counted(__real_aligned_alloc(align, n));
}
void* __wrap_memalign(size_t align, size_t n) {
  HeapLock lock;
  return Counted(__real_memalign(align, n));
}

int __wrap_TVMBackendParallelLaunch(FTVMParallelLambda lambda, void* cdata, int num_task) {
  // the tasks asked for (they need not be fewer than the threads: whoever is free claims
  // the next), or one a thread; one in this thread where there are no workers or the
  // launch is inside a task (the lambda divides its work by the env's num_task)
  const int threads = std::min(pool.workers.load() + 1, kMaxTasks);
  const int n = threads == 1 || in_task ? 1 : num_task > 0 ? std::min(num_task, kMaxTasks) : threads;
  if (n == 1) {
    TVMParallelGroupEnv env{nullptr, 1};
    return lambda(0, &env, cdata);
  }
  pool.lambda = lambda;
  pool.cdata = cdata;
  pool.done.store(0);
  const uint32_t generation = (Generation(pool.ticket.load()) + 1) & 0xffff;
  pool.ticket.store(generation << 16 | uint32_t(n) << 8);  // publishes the fields above
  __builtin_wasm_memory_atomic_notify(reinterpret_cast<int*>(&pool.ticket), ~0u);
  RunTasks(generation);
  while (pool.done.load() < n) {
    if (pool.failed.load()) __builtin_trap();  // a worker died: fail, do not spin forever
  }
  return 0;
}

/*! \brief Memory for a worker's stack or thread-local storage, from the stage's heap. */
__attribute__((export_name("kx_alloc"))) void* kx_alloc(size_t n, size_t align) {
  void* p = nullptr;
  return __wrap_posix_memalign(&p, align < sizeof(void*) ? sizeof(void*) : align, n) ? nullptr : p;
}
__attribute__((export_name("kx_tls_size"))) size_t kx_tls_size() { return __builtin_wasm_tls_size(); }
__attribute__((export_name("kx_tls_align"))) size_t kx_tls_align() {
  return __builtin_wasm_tls_align();
}

void __wasm_init_tls(void*);
// the -mt libc's thread state (emscripten_thread_init.c): pthread_self, and whether the
// thread may block
void _emscripten_thread_init(void* self, int is_main, int is_runtime, int can_block,
                             int start_profiling);

/*! \brief The page's thread, as the -mt libc's first constructor calls its JavaScript
 *  (emscripten's glue would): its thread state, and thread-local storage of its own,
 *  before any constructor touches a thread_local (a module with shared memory leaves
 *  its __tls_base at 0 until someone sets it). */
__attribute__((export_name("kx_main_thread"))) void kx_main_thread(void* self) {
  _emscripten_thread_init(self, 1, 1, 0, 0);
  main_thread = self;
  const size_t size = __builtin_wasm_tls_size();
  if (size) __wasm_init_tls(kx_alloc(size, __builtin_wasm_tls_align()));
}

/*! \brief A worker's instance takes ``tls`` as its thread-local storage, and the page's
 *  thread state (pthread_self names the page's thread: the tasks call nothing that
 *  tells threads apart by it); its stack is set from JavaScript first, with emscripten's
 *  stackRestore (a C function needs one). */
__attribute__((export_name("kx_thread_init"))) void kx_thread_init(void* tls) {
  __wasm_init_tls(tls);
  _emscripten_thread_init(main_thread, 0, 0, 1, 0);
}

/*! \brief A worker's loop: wait for a job, claim its tasks; never returns. */
__attribute__((export_name("kx_worker"))) void kx_worker() {
  uint32_t seen = pool.ticket.load();
  pool.workers.fetch_add(1);  // after reading the ticket: a job counting this worker is newer
  for (;;) {
    uint32_t ticket = pool.ticket.load();
    while (Generation(ticket) == Generation(seen)) {
      __builtin_wasm_memory_atomic_wait32(reinterpret_cast<int*>(&pool.ticket),
                                          static_cast<int>(ticket), -1);
      ticket = pool.ticket.load();
    }
    seen = ticket;
    RunTasks(Generation(ticket));
  }
}

/*! \brief The heap's bytes: 0 in use, 1 the most in use since the last reset, 2 its top
 *  (how far it has grown into the memory), 3 resets the most to those in use now. */
__attribute__((export_name("kx_heap"))) uint32_t kx_heap(int what) {
  HeapLock lock;
  if (what == 3) heap_peak = heap_in_use;
  return what == 0 ? heap_in_use : what == 2 ? reinterpret_cast<uintptr_t>(sbrk(0)) : heap_peak;
}

/*! \brief A worker trapped: the launch waiting for it fails instead of spinning. */
__attribute__((export_name("kx_worker_failed"))) void kx_worker_failed() { pool.failed.store(1); }

/*! \brief The threads launches use: the workers waiting and the caller. */
__attribute__((export_name("kx_threads"))) int kx_threads() { return pool.workers.load() + 1; }

}  // extern "C"

#ifndef KOKORO_EXT_THREADS_ALONE
// the kernels size their work by TVM's pool (kokoro_ext/threading.h MaxThreads)
TVM_FFI_STATIC_INIT_BLOCK() {
  tvm::ffi::reflection::GlobalDef().def("runtime.NumThreads", []() { return kx_threads(); });
}
#endif

#endif  // __EMSCRIPTEN__
