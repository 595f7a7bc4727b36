#include "backend/cpu/huge_pages.h"

#include <sys/mman.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <string>

#include "core/asan.h"
#include "core/error.h"

namespace rowlm::cpu {
namespace {

constexpr std::size_t kHugePage = std::size_t(2) << 20;
constexpr int64_t kCopyGrain = int64_t(1) << 20;  // bytes per parallel piece at least

}  // namespace

std::shared_ptr<std::byte> allocate_huge_pages(std::size_t bytes, const char* what) {
  // Over-allocate by a huge page so that an aligned start exists inside.
  const std::size_t rounded = (std::max<std::size_t>(bytes, 1) + kHugePage - 1) / kHugePage * kHugePage;
  const std::size_t mapped = rounded + kHugePage;
  void* base = ::mmap(nullptr, mapped, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (base == MAP_FAILED)
    throw OutOfMemory(std::string(what) + ": out of host memory for " + std::to_string(bytes) + " bytes");
  std::shared_ptr<void> mapping(base, [mapped](void* p) {
    asan_unpoison(p, mapped);
    ::munmap(p, mapped);
  });
  auto* start = reinterpret_cast<std::byte*>((reinterpret_cast<std::uintptr_t>(base) + kHugePage - 1) /
                                             kHugePage * kHugePage);
  ::madvise(start, rounded, MADV_HUGEPAGE);  // a hint: without it the memory is still right
  // Under ASan, all but the bytes asked for (to a whole cache line, as the
  // kernels read) is poisoned, as malloc's redzones would be.
  const std::size_t usable = (bytes + 63) / 64 * 64;
  asan_poison(base, std::size_t(start - static_cast<std::byte*>(base)));
  asan_poison(start + usable, static_cast<std::byte*>(base) + mapped - (start + usable));
  return std::shared_ptr<std::byte>(std::move(mapping), start);
}

Tensor copy_to_huge_pages(const Tensor& src, ThreadPool& pool) {
  const std::size_t bytes = src.nbytes();
  if (bytes == 0) return Tensor::uninitialized(src.dtype(), src.shape());
  std::shared_ptr<std::byte> start = allocate_huge_pages(bytes, "copying a weight");
  const auto* from = static_cast<const std::byte*>(src.raw());
  pool.parallel_for(int64_t(bytes), kCopyGrain, [&](int64_t b, int64_t e) {
    std::memcpy(start.get() + b, from + b, std::size_t(e - b));
  });
  std::byte* data = start.get();
  return Tensor::view(src.dtype(), src.shape(), data, std::move(start));
}

}  // namespace rowlm::cpu
