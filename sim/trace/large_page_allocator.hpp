#pragma once
// An allocator for the large, append-only arrays of a reference trace (the joint-histogram pairs, GroupTrace): from
// kLargePageMinBytes up, memory comes from its own mapping aligned to 2 MiB and advised for transparent huge pages, so
// that appending into reserved room faults one 2 MiB page at a time instead of 512 4 KiB ones (on a VM each fault is a
// trap: measured 11-15 us per 4 KiB page on the development machine, 0.2-0.5 us per 4 KiB with huge pages; see
// docs/performance.md). Below that size, and where the kernel has no huge pages, it is plain operator new / 4 KiB
// pages; the contents never depend on it.
#include <cstddef>
#include <cstdint>
#include <new>
#include <vector>
#if defined(__linux__)
#include <sys/mman.h>
#endif

namespace wbaudit::sim {

inline constexpr std::size_t kLargePage = std::size_t{2} << 20;
inline constexpr std::size_t kLargePageMinBytes = std::size_t{1} << 20;

template <class T>
struct LargePageAllocator {
  using value_type = T;

  LargePageAllocator() noexcept = default;
  template <class U>
  LargePageAllocator(const LargePageAllocator<U>&) noexcept {}

  T* allocate(std::size_t n) {
    if (n > static_cast<std::size_t>(-1) / sizeof(T)) throw std::bad_array_new_length();
    const std::size_t bytes = n * sizeof(T);
#if defined(__linux__) && defined(MADV_HUGEPAGE)
    if (bytes >= kLargePageMinBytes) {
      const std::size_t length = rounded(bytes);
      // Map one large page more than needed, then unmap the unaligned head and the tail beyond `length`.
      void* raw = mmap(nullptr, length + kLargePage, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
      if (raw == MAP_FAILED) throw std::bad_alloc();
      const auto begin = reinterpret_cast<std::uintptr_t>(raw);
      const auto aligned = (begin + kLargePage - 1) & ~(kLargePage - 1);
      if (aligned > begin) munmap(raw, aligned - begin);
      const std::uintptr_t end = begin + length + kLargePage;
      if (end > aligned + length) munmap(reinterpret_cast<void*>(aligned + length), end - aligned - length);
      madvise(reinterpret_cast<void*>(aligned), length, MADV_HUGEPAGE);  // advice only: refused is fine
      return reinterpret_cast<T*>(aligned);
    }
#endif
    return static_cast<T*>(::operator new(bytes));
  }

  void deallocate(T* p, std::size_t n) noexcept {
    const std::size_t bytes = n * sizeof(T);
#if defined(__linux__) && defined(MADV_HUGEPAGE)
    if (bytes >= kLargePageMinBytes) {
      munmap(p, rounded(bytes));
      return;
    }
#endif
    ::operator delete(p);
  }

  template <class U>
  bool operator==(const LargePageAllocator<U>&) const noexcept {
    return true;
  }

 private:
  static std::size_t rounded(std::size_t bytes) {
    return (bytes + kLargePage - 1) & ~(kLargePage - 1);
  }
};

template <class T>
using LargePageVector = std::vector<T, LargePageAllocator<T>>;

}  // namespace wbaudit::sim
