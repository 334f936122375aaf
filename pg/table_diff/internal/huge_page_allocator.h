// HugePageAllocator: a std::allocator for the large flat arrays of one
// table's rows (a scan's tokens, digests and keys; a build's gathered rows),
// whose blocks of 2 MiB or more are backed by transparent huge pages.
//
// Why: such an array is written once, front to back, over tens to hundreds
// of megabytes. With 4 KiB pages every page is a fault on first write, and
// in a virtual machine a fault costs far more than the writes it serves: a
// profile of `tally diff URL URL` (1M rows a side) put 18% of the client's
// time in page faults, most of them in TableScan::Add. A huge page is one
// fault per 2 MiB. The kernel's THP mode here is `madvise`, so the pages
// are asked for with madvise(MADV_HUGEPAGE); where THP is off the call
// fails harmlessly and the memory is ordinary.
//
//   std::vector<tree::Digest128, HugePageAllocator<tree::Digest128>> d;
//   d.reserve(rows);  // one aligned block, advised
//
// Blocks under 2 MiB come from operator new as usual. Stateless: all
// instances are equal.
#ifndef TALLY_PG_TABLE_DIFF_INTERNAL_HUGE_PAGE_ALLOCATOR_H_
#define TALLY_PG_TABLE_DIFF_INTERNAL_HUGE_PAGE_ALLOCATOR_H_

#include <sys/mman.h>

#include <cstddef>
#include <cstdlib>
#include <new>

namespace tally {
namespace pg {
namespace internal {

inline constexpr size_t kHugePageBytes = size_t{2} << 20;

// Allocates `bytes` (a multiple of kHugePageBytes once rounded) aligned to
// a huge page, advised for THP. Throws std::bad_alloc as operator new does.
inline void* AllocateHugePages(size_t bytes) {
  const size_t rounded =
      (bytes + kHugePageBytes - 1) / kHugePageBytes * kHugePageBytes;
  void* p = std::aligned_alloc(kHugePageBytes, rounded);
  if (p == nullptr) throw std::bad_alloc();
  // Best effort: without THP the memory is ordinary pages.
  (void)madvise(p, rounded, MADV_HUGEPAGE);
  return p;
}

template <typename T>
class HugePageAllocator {
 public:
  using value_type = T;

  HugePageAllocator() = default;
  template <typename U>
  HugePageAllocator(const HugePageAllocator<U>&) {}  // NOLINT: rebinding

  T* allocate(size_t n) {
    const size_t bytes = n * sizeof(T);
    if (bytes < kHugePageBytes) {
      return static_cast<T*>(::operator new(bytes));
    }
    return static_cast<T*>(AllocateHugePages(bytes));
  }

  void deallocate(T* p, size_t n) {
    if (n * sizeof(T) < kHugePageBytes) {
      ::operator delete(p);
    } else {
      std::free(p);
    }
  }

  template <typename U>
  bool operator==(const HugePageAllocator<U>&) const {
    return true;
  }
  template <typename U>
  bool operator!=(const HugePageAllocator<U>&) const {
    return false;
  }
};

}  // namespace internal
}  // namespace pg
}  // namespace tally

#endif  // TALLY_PG_TABLE_DIFF_INTERNAL_HUGE_PAGE_ALLOCATOR_H_
