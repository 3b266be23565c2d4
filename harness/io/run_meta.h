// The common run-metadata columns of every results row (results/SCHEMA.md),
// and the small helpers that fill them. Nothing here reads a clock, the
// environment or a global: time and randomness come from the caller.
#pragma once
#include <chrono>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace pb {

struct RunMeta {
  std::string run_id;
  std::string kind;        // train_step | conformance | collective | sweep | plan
  std::string timestamp;   // iso8601_utc(...)
  std::string git_rev;     // build_git_rev() unless known better
  std::string host;        // host_name()
  std::string backend;     // local | mpi | nccl | analytic
  int64_t world = 1;
  std::string mesh;        // mesh_string(...)
  std::string config_hash; // ConfigReader::config_hash()
  std::string status = "ok";  // ok | rejected | oom | failed | skipped
  std::string reason;         // required when status != ok

  // (column, value) in schema order.
  std::vector<std::pair<std::string, std::string>> fields() const;
};

// "YYYY-MM-DDThh:mm:ss.mmmZ" (UTC, millisecond resolution).
std::string iso8601_utc(std::chrono::system_clock::time_point t);
// "YYYYMMDDThhmmssZ-xxxxxx": the UTC second of `now` and the low 24 bits of
// `nonce` in hex. Sorts by time; safe as a directory name.
std::string make_run_id(std::chrono::system_clock::time_point now, uint32_t nonce);
// As above with the nonce drawn from std::random_device.
std::string make_run_id(std::chrono::system_clock::time_point now);
// gethostname(2); "unknown" if it fails.
std::string host_name();
// The mesh's text form (harness/mesh.h mesh_text): "dp2", "dp4.tp2.ep8.pp2".
std::string mesh_string(int64_t dp, int64_t tp, int64_t cp, int64_t pp, int64_t ep = 1);
// The short git hash of the source tree at configure time, or "unknown".
std::string build_git_rev();

}  // namespace pb
