#include "backend/cpu/weight_copy.h"

#include <sys/mman.h>

#include <cstdint>
#include <cstring>
#include <memory>
#include <string>

#include "core/error.h"

namespace rowlm::cpu {
namespace {

constexpr std::size_t kHugePage = std::size_t(2) << 20;
constexpr int64_t kCopyGrain = int64_t(1) << 20;  // bytes per parallel piece at least

}  // namespace

Tensor copy_to_huge_pages(const Tensor& src, ThreadPool& pool) {
  const std::size_t bytes = src.nbytes();
  if (bytes == 0) return Tensor::uninitialized(src.dtype(), src.shape());
  // Over-allocate by a huge page so that an aligned start exists inside.
  const std::size_t rounded = (bytes + kHugePage - 1) / kHugePage * kHugePage, mapped = rounded + kHugePage;
  void* base = ::mmap(nullptr, mapped, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (base == MAP_FAILED) throw OutOfMemory("out of memory copying a " + std::to_string(bytes) + "-byte weight");
  std::shared_ptr<void> owner(base, [mapped](void* p) { ::munmap(p, mapped); });
  auto* start = reinterpret_cast<std::byte*>((reinterpret_cast<std::uintptr_t>(base) + kHugePage - 1) /
                                             kHugePage * kHugePage);
  ::madvise(start, rounded, MADV_HUGEPAGE);  // a hint: without it the copy is still right
  const auto* from = static_cast<const std::byte*>(src.raw());
  pool.parallel_for(int64_t(bytes), kCopyGrain, [&](int64_t b, int64_t e) {
    std::memcpy(start + b, from + b, std::size_t(e - b));
  });
  return Tensor::view(src.dtype(), src.shape(), start, std::move(owner));
}

}  // namespace rowlm::cpu
