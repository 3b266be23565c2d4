// Run metadata: formats of run ids, timestamps and meshes are what the schema
// patterns accept, and the helpers are pure functions of their inputs.
#include "harness/io/run_meta.h"

#include <gtest/gtest.h>

#include <regex>

namespace pb {
namespace {

using namespace std::chrono;

TEST(RunMeta, TimestampIsIso8601Utc) {
  const system_clock::time_point t = sys_days{year{2024} / 2 / 29} + hours{23} + minutes{59} + seconds{58} + milliseconds{7};
  EXPECT_EQ(iso8601_utc(t), "2024-02-29T23:59:58.007Z");
  EXPECT_EQ(iso8601_utc(system_clock::time_point{}), "1970-01-01T00:00:00.000Z");
}

TEST(RunMeta, RunIdFromCallerTimeAndNonce) {
  const system_clock::time_point t = sys_days{year{2025} / 1 / 2} + hours{3} + minutes{4} + seconds{5};
  EXPECT_EQ(make_run_id(t, 0x12abcdefu), "20250102T030405Z-abcdef");
  EXPECT_EQ(make_run_id(t, 0x1u), "20250102T030405Z-000001");
  const std::string a = make_run_id(t), b = make_run_id(t);
  EXPECT_TRUE(std::regex_match(a, std::regex("20250102T030405Z-[0-9a-f]{6}"))) << a;
  EXPECT_EQ(a.size(), b.size());
}

TEST(RunMeta, MeshAndHost) {
  EXPECT_EQ(mesh_string(2, 1, 1, 1), "dp2");
  EXPECT_EQ(mesh_string(1, 1, 1, 1), "dp1");
  EXPECT_EQ(mesh_string(4, 2, 1, 2, 8), "dp4.tp2.ep8.pp2");
  EXPECT_FALSE(host_name().empty());
  EXPECT_FALSE(build_git_rev().empty());
}

TEST(RunMeta, FieldsInOrder) {
  RunMeta m;
  m.world = 8;
  m.status = "skipped";
  const auto f = m.fields();
  ASSERT_EQ(f.size(), 11u);
  EXPECT_EQ(f[0].first, "run_id");
  EXPECT_EQ(f[6], (std::pair<std::string, std::string>{"world", "8"}));
  EXPECT_EQ(f[9].second, "skipped");
  EXPECT_EQ(f[10].first, "reason");
}

}  // namespace
}  // namespace pb
