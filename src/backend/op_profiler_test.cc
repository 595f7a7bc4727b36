// OpProfiler (op_profiler.h): what it records, and when.

#include "backend/op_profiler.h"

#include <gtest/gtest.h>

#include <chrono>
#include <thread>

namespace rowlm {
namespace {

const Backend::OpProfile* find(const std::vector<Backend::OpProfile>& list, const std::string& op) {
  for (const auto& p : list)
    if (p.op == op) return &p;
  return nullptr;
}

TEST(OpProfiler, SumsOutermostScopesOnlyWhileOn) {
  OpProfiler profiler;
  { const auto off = profiler.scope("before"); }
  EXPECT_TRUE(profiler.list().empty()) << "a scope opened while off records nothing";
  profiler.set_on(true);
  for (int i = 0; i < 3; ++i) {
    const auto outer = profiler.scope("outer");
    const auto inner = profiler.scope("inner");  // an operation built from another: counted once, as the outer
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  { const auto other = profiler.scope("other"); }
  profiler.set_on(false);
  { const auto after = profiler.scope("outer"); }
  const auto list = profiler.list();
  ASSERT_EQ(list.size(), 2u);
  const auto* outer = find(list, "outer");
  ASSERT_NE(outer, nullptr);
  EXPECT_EQ(outer->launches, 3);
  EXPECT_GE(outer->seconds, 3 * 0.002) << "the sleeps inside the scopes";
  EXPECT_LT(outer->seconds, 10.0);
  const auto* other = find(list, "other");
  ASSERT_NE(other, nullptr);
  EXPECT_EQ(other->launches, 1);
  EXPECT_EQ(find(list, "inner"), nullptr);
  profiler.clear();
  EXPECT_TRUE(profiler.list().empty());
}

}  // namespace
}  // namespace rowlm
