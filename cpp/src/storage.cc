/*!
 * \file storage.cc
 * \brief kokoro_ext.alloc_storage: the stage libraries' storage allocations, from a pool
 *  that reuses freed buffers.
 *
 * A stage library's buffers have symbolic sizes (they follow the input's length), so the
 * VM's pooled allocator, which keeps freed buffers for requests of exactly their size,
 * would only grow, and the build uses its naive one.  That one hands every buffer back to
 * the system when its last use is over: a large buffer is a fresh mmap on the next call,
 * page-faulted in page by page.  On one word through the full model that was about 10,000
 * page faults per synthesis, 5-8% of its time.  kokoro_ext.build.memory.pooled_storage
 * sends a stage's alloc_storage calls here instead: a request takes the smallest freed
 * buffer it fits in.  A larger buffer costs no memory by its size alone (only the pages
 * a call writes are backed, and a reused buffer's first pages are the ones written
 * before), so any fit is taken.  A request that fits no freed buffer sends the largest
 * one back to the system (most likely the same tensor's from a shorter input, whose
 * touched pages would otherwise stay resident beside the new buffer's).  The pool keeps
 * at most kMinCachedBytes of freed buffers, or the most it has had in use at once if
 * that is more; the largest go back to the system first.
 *
 * A buffer keeps the pages of every tensor it has served, so over a stream of inputs of
 * varied lengths the cached buffers' pages added up to more than any one input needs
 * (a warm process grew by 180 MB over the twenty chunks of a 400-word page).  A freed
 * buffer of kReleaseBytes or more therefore gives back its pages past the first
 * kKeptBytes (MADV_DONTNEED) as it goes into the cache: a short input's tensors stay
 * resident, a long one's are faulted in again, on huge pages (the buffer is allocated
 * with MADV_HUGEPAGE), a fault per 2 MiB.
 *
 *   kokoro_ext.alloc_storage(size, dtype) -> vm.Storage   size Shape (nbytes,), on the CPU
 *   kokoro_ext.storage_pool_stats() -> Shape (cached bytes, cached buffers, bytes in use,
 *                                             most bytes in use at once)
 *   kokoro_ext.storage_pool_clear()   frees every cached buffer
 */
#include <tvm/ffi/container/shape.h>
#include <tvm/ffi/error.h>
#include <tvm/ffi/function.h>
#include <tvm/ffi/reflection/registry.h>
#include <tvm/runtime/memory/memory_manager.h>

#include <sys/mman.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <map>
#include <mutex>

namespace kokoro_ext {
namespace {

using tvm::runtime::memory::Allocator;
using tvm::runtime::memory::Buffer;
using tvm::runtime::memory::Storage;

/*!
 * \brief Freed bytes the pool keeps for reuse at least; beyond this and beyond the most it
 *  has had in use at once, buffers go back to the system, the largest first.  (Sizes are
 *  address space: only the pages a call writes are ever backed, and a buffer of static
 *  size, planned for the largest batch a stage takes, is mostly untouched; the buffers the
 *  length sizes are the call's own, kokoro_ext.build.passes.memory.exact_dynamic_sizes.)
 */
constexpr size_t kMinCachedBytes = size_t{1} << 30;

/*! \brief Freed buffers of at least this many bytes give back their pages past the first
 *  kKeptBytes (see above). */
constexpr size_t kReleaseBytes = size_t{8} << 20, kKeptBytes = size_t{4} << 20;
constexpr size_t kHugePage = size_t{2} << 20;

/*! \brief The whole pages of [data, data + size) given back to the system. */
void ReleasePages(void* data, size_t size) {
  const uintptr_t page = 4096, start = reinterpret_cast<uintptr_t>(data);
  const uintptr_t first = (start + page - 1) / page * page, end = (start + size) / page * page;
  if (end > first) madvise(reinterpret_cast<void*>(first), end - first, MADV_DONTNEED);
}

/*! \brief n rounded up to one of eight sizes per power of two (at most 12.5% more), so
 *  that a buffer serves requests a little larger than the one it was made for. */
size_t SizeClass(size_t n) {
  if (n <= 4096) return 4096;
  size_t octave = 4096;
  while (octave * 2 < n) octave *= 2;
  const size_t step = octave / 8;
  return (n + step - 1) / step * step;
}

class StoragePool final : public Allocator {
 public:
  StoragePool() : Allocator(tvm::runtime::memory::kPooled) {}

  Buffer Alloc(DLDevice device, size_t nbytes, size_t alignment, DLDataType) final {
    Buffer buffer;
    buffer.device = device;
    buffer.alloc_type = type();
    if (!TakeCached(nbytes, &buffer)) {
      ReleaseLargestCached();
      buffer.size = SizeClass(nbytes);
      const bool large = buffer.size >= kReleaseBytes;
      const size_t align = large ? kHugePage : tvm::runtime::kAllocAlignment;
      if (posix_memalign(&buffer.data, std::max(alignment, align), buffer.size) != 0) {
        TVM_FFI_THROW(RuntimeError) << "kokoro_ext.alloc_storage: out of memory allocating "
                                    << buffer.size << " bytes";
      }
      if (large) madvise(buffer.data, buffer.size / kHugePage * kHugePage, MADV_HUGEPAGE);
    }
    std::lock_guard<std::mutex> lock(mutex_);
    used_bytes_ += buffer.size;
    peak_used_bytes_ = std::max(peak_used_bytes_, used_bytes_);
    return buffer;
  }

  void Free(const Buffer& buffer) final {
    if (buffer.size >= kReleaseBytes) {
      ReleasePages(static_cast<char*>(buffer.data) + kKeptBytes, buffer.size - kKeptBytes);
    }
    std::lock_guard<std::mutex> lock(mutex_);
    used_bytes_ -= buffer.size;
    free_.emplace(buffer.size, buffer.data);
    cached_bytes_ += buffer.size;
    while (cached_bytes_ > std::max(kMinCachedBytes, peak_used_bytes_)) FreeLargestCached();
  }

  void Clear() final {
    std::lock_guard<std::mutex> lock(mutex_);
    for (auto& [size, data] : free_) std::free(data);
    free_.clear();
    cached_bytes_ = 0;
  }

  size_t UsedMemory() const final {
    std::lock_guard<std::mutex> lock(mutex_);
    return used_bytes_;
  }

  tvm::ffi::Shape Stats() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return tvm::ffi::Shape({static_cast<int64_t>(cached_bytes_),
                            static_cast<int64_t>(free_.size()),
                            static_cast<int64_t>(used_bytes_),
                            static_cast<int64_t>(peak_used_bytes_)});
  }

 private:
  /*!
   * \brief Return the largest cached buffer to the system, when a request finds none it
   *  fits in: that buffer is most likely this tensor's from a shorter input, and keeping
   *  both would hold the pages of two generations of a stage's buffers.
   */
  void ReleaseLargestCached() {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!free_.empty()) FreeLargestCached();
  }

  /*! \brief Return the largest cached buffer to the system; mutex_ held, free_ not empty. */
  void FreeLargestCached() {
    auto largest = std::prev(free_.end());
    cached_bytes_ -= largest->first;
    std::free(largest->second);
    free_.erase(largest);
  }

  /*! \brief The smallest freed buffer of at least nbytes into *buffer, if there is one. */
  bool TakeCached(size_t nbytes, Buffer* buffer) {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = free_.lower_bound(nbytes);
    if (it == free_.end()) return false;
    buffer->size = it->first;
    buffer->data = it->second;
    cached_bytes_ -= it->first;
    free_.erase(it);
    return true;
  }

  mutable std::mutex mutex_;
  std::multimap<size_t, void*> free_;  // capacity -> buffer
  size_t cached_bytes_ = 0, used_bytes_ = 0, peak_used_bytes_ = 0;
};

/*! \brief The pool, made on first use and never destroyed: storages may outlive statics. */
StoragePool& Pool() {
  static StoragePool* pool = new StoragePool();
  return *pool;
}

Storage AllocStorage(tvm::ffi::Shape size, DLDataType dtype) {
  if (size.size() != 1 || size[0] < 0) {
    TVM_FFI_THROW(ValueError) << "kokoro_ext.alloc_storage: size must be (nbytes,), got "
                              << size;
  }
  const DLDevice cpu{kDLCPU, 0};
  StoragePool& pool = Pool();
  return Storage(pool.Alloc(cpu, static_cast<size_t>(size[0]), tvm::runtime::kAllocAlignment,
                            dtype),
                 &pool);
}

}  // namespace

TVM_FFI_STATIC_INIT_BLOCK() {
  namespace refl = tvm::ffi::reflection;
  refl::GlobalDef()
      .def("kokoro_ext.alloc_storage", AllocStorage)
      .def("kokoro_ext.storage_pool_stats", []() { return Pool().Stats(); })
      .def("kokoro_ext.storage_pool_clear", []() { Pool().Clear(); });
}

}  // namespace kokoro_ext
