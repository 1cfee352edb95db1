// cpp/web/threads.cc's pool under load, in node (tests/test_web_threads.py): many
// launches of more tasks than threads, each task counted, allocating as it runs, with a
// launch inside a task; which threads ran tasks, told apart by their thread-local ids.
#include <tvm/runtime/c_backend_api.h>

#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <cstring>

namespace {
std::atomic<int> next_id{1};
thread_local int thread_id = 0;  // 0 until a thread first runs a task
std::atomic<int> runs[256];
std::atomic<int> seen_threads{0};  // bit i: thread id i ran a task
std::atomic<int> errors{0};
int last_tasks = 0;

int Nested(int task, TVMParallelGroupEnv* env, void*) {
  if (task != 0 || env->num_task != 1) errors.fetch_add(1);  // in the caller's thread
  return 0;
}

int Task(int task, TVMParallelGroupEnv* env, void* cdata) {
  if (thread_id == 0) thread_id = next_id.fetch_add(1);
  seen_threads.fetch_or(1 << (thread_id & 15));
  if (task < 0 || task >= env->num_task) errors.fetch_add(1);
  runs[task].fetch_add(1);
  // the heap from several threads at once
  for (int i = 0; i < 20; ++i) {
    size_t n = 64 + ((task * 131 + i * 17) % 4096);
    auto* p = static_cast<unsigned char*>(std::malloc(n));
    std::memset(p, task & 0xff, n);
    for (size_t k = 0; k < n; k += 97)
      if (p[k] != (task & 0xff)) errors.fetch_add(1);
    std::free(p);
  }
  // long enough for a woken worker to claim a task before the caller has run them all
  volatile int spin = 0;
  for (int i = 0; i < 20000; ++i) spin = spin + i;
  if (*static_cast<int*>(cdata) && task == 0) TVMBackendParallelLaunch(Nested, nullptr, 4);
  return 0;
}
}  // namespace

/*! \brief ``launches`` launches of ``num_task`` tasks (0: one a thread); the errors: a task
 *  run other than once (the tasks being those below the first not run), out of range, a heap block overwritten, a nested launch not in
 *  its caller's thread. */
extern "C" __attribute__((export_name("stress"))) int stress(int launches, int num_task) {
  for (int l = 0; l < launches; ++l) {
    for (auto& r : runs) r.store(0);
    int nested = l % 7 == 0;
    TVMBackendParallelLaunch(Task, &nested, num_task);
    int tasks = 0;
    while (tasks < 256 && runs[tasks].load()) ++tasks;
    for (int t = 0; t < 256; ++t) {
      int n = runs[t].load();
      if (t < tasks ? n != 1 : n != 0) errors.fetch_add(1);
    }
    last_tasks = tasks;
  }
  return errors.load();
}

/*! \brief The tasks the last launch ran. */
extern "C" __attribute__((export_name("last_tasks"))) int tasks_run() { return last_tasks; }

/*! \brief Bits of the thread ids that ran a task. */
extern "C" __attribute__((export_name("seen_threads"))) int threads_seen() { return seen_threads.load(); }
