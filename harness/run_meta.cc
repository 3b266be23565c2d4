// Run metadata helpers. The git revision is baked in at configure time
// (harness/io.cmake) and may lag uncommitted edits; it names a build, not a tree.
#include "harness/run_meta.h"

#include <unistd.h>

#include <climits>
#include <cstdio>
#include <ctime>
#include <random>

#ifndef PB_GIT_REV
#define PB_GIT_REV "unknown"
#endif

namespace pb {

namespace {
std::tm utc(std::chrono::system_clock::time_point t) {
  const std::time_t secs = std::chrono::system_clock::to_time_t(t);
  std::tm tm{};
  gmtime_r(&secs, &tm);
  return tm;
}
}  // namespace

std::vector<std::pair<std::string, std::string>> RunMeta::fields() const {
  return {{"run_id", run_id}, {"kind", kind},   {"timestamp", timestamp},     {"git_rev", git_rev},
          {"host", host},     {"backend", backend}, {"world", std::to_string(world)}, {"mesh", mesh},
          {"config_hash", config_hash}, {"status", status}, {"reason", reason}};
}

std::string iso8601_utc(std::chrono::system_clock::time_point t) {
  const auto floor_s = std::chrono::floor<std::chrono::seconds>(t);
  const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(t - floor_s).count();
  const std::tm tm = utc(floor_s);
  char buf[96];
  std::snprintf(buf, sizeof buf, "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday,
                tm.tm_hour, tm.tm_min, tm.tm_sec, int(ms));
  return buf;
}

std::string make_run_id(std::chrono::system_clock::time_point now, uint32_t nonce) {
  const std::tm tm = utc(std::chrono::floor<std::chrono::seconds>(now));
  char buf[96];
  std::snprintf(buf, sizeof buf, "%04d%02d%02dT%02d%02d%02dZ-%06x", tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday,
                tm.tm_hour, tm.tm_min, tm.tm_sec, unsigned(nonce & 0xffffffu));
  return buf;
}

std::string make_run_id(std::chrono::system_clock::time_point now) {
  std::random_device rd;
  return make_run_id(now, rd());
}

std::string host_name() {
  char buf[HOST_NAME_MAX + 1] = {};
  if (::gethostname(buf, sizeof buf - 1) != 0 || buf[0] == '\0') return "unknown";
  return buf;
}

std::string mesh_string(int64_t dp, int64_t tp, int64_t cp, int64_t pp, int64_t ep) {
  std::string s = "dp" + std::to_string(dp) + ".tp" + std::to_string(tp) + ".cp" + std::to_string(cp) + ".pp" +
                  std::to_string(pp);
  if (ep > 1) s += ".ep" + std::to_string(ep);
  return s;
}

std::string build_git_rev() { return PB_GIT_REV; }

}  // namespace pb
