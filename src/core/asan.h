#pragma once
// AddressSanitizer's manual poisoning, for memory that does not come from
// malloc (mmap'd arenas and chunks): a poisoned range is reported when
// touched. Without ASan these are no-ops. Memory must be unpoisoned before
// it is unmapped, since the range may be mapped again by anyone.

#include <cstddef>

#if defined(__SANITIZE_ADDRESS__)
#define ROWLM_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define ROWLM_ASAN 1
#endif
#endif
#ifdef ROWLM_ASAN
#include <sanitizer/asan_interface.h>
#endif

namespace rowlm {

#ifdef ROWLM_ASAN
inline constexpr bool kAsan = true;
inline void asan_poison(const void* p, std::size_t n) { ASAN_POISON_MEMORY_REGION(p, n); }
inline void asan_unpoison(const void* p, std::size_t n) { ASAN_UNPOISON_MEMORY_REGION(p, n); }
#else
inline constexpr bool kAsan = false;
inline void asan_poison(const void*, std::size_t) {}
inline void asan_unpoison(const void*, std::size_t) {}
#endif

}  // namespace rowlm
