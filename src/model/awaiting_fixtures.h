#pragma once
// Fixtures that scripts write on the accelerator machine and that are not
// committed yet (tests only). The tests that read one report themselves
// skipped while its directory is absent; every other missing fixture fails.
// A new script's fixtures are listed here until their first run is committed.

#include <algorithm>
#include <array>
#include <string_view>

namespace rowlm::test {

// None now: every fixture a test reads is committed.
inline constexpr std::array<std::string_view, 0> kAwaitingFixtures = {};

// `name` is its path under tests/fixtures (<family>/<case>, gguf/llamacpp/<type>,
// gguf/families/<family>).
inline bool awaiting_fixture(std::string_view name) {
  return std::find(kAwaitingFixtures.begin(), kAwaitingFixtures.end(), name) != kAwaitingFixtures.end();
}

}  // namespace rowlm::test
