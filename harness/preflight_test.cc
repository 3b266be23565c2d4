// The preflight's shared pieces: checked products of sizes name their
// factors instead of wrapping, and the byte-size parser.
#include "harness/preflight.h"

#include <gtest/gtest.h>

#include <climits>
#include <string>

#include "harness/status.h"

namespace pb {
namespace {

std::string error_of(void (*f)()) {
  try {
    f();
  } catch (const InputError& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(Preflight, CheckedProductIsTheProductWithinItsBound) {
  EXPECT_EQ(checked_product("train.batch", {{"per rank", 8}, {"dp", 4}}), 32);
  EXPECT_EQ(checked_product("tokens", {{"batch", 1 << 30}, {"seq", 1 << 30}}, INT64_MAX), int64_t(1) << 60);
}

TEST(Preflight, CheckedProductNamesEveryFactorInsteadOfWrapping) {
  // 8 x 2147483647 wraps an int to -8: `check --mesh dp2147483647` said
  // "train.batch: must be > 0, got -8".
  EXPECT_EQ(error_of([] { checked_product("train.batch", {{"sequences per dp rank", 8}, {"mesh dp", INT_MAX}}); }),
            "train.batch = 8 (sequences per dp rank) x 2147483647 (mesh dp) is more than 2147483647");
  // Past int64 itself: refused, not wrapped.
  EXPECT_NE(error_of([] { checked_product("x", {{"a", INT64_MAX / 2}, {"b", 3}, {"c", 0}}, INT64_MAX); })
                .find("(a) x 3 (b) x 0 (c) is more than"),
            std::string::npos);
  EXPECT_NE(error_of([] { checked_product("x", {{"a", -1}}); }).find("-1 (a)"), std::string::npos);
}

TEST(Preflight, ByteSizesAreParsedAndBounded) {
  EXPECT_EQ(parse_byte_size("64K", "-b"), 64 * 1024);
  EXPECT_EQ(parse_byte_size("1.5G", "-b"), int64_t(1536) << 20);
  for (const char* bad : {"inf", "nan", "-1", "0x10", "1e400", "12Q", "99999999999G"})
    EXPECT_THROW(parse_byte_size(bad, "-b"), InputError) << bad;
}

}  // namespace
}  // namespace pb
