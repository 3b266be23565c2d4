// Errors are values up to main(): library code throws these, main() maps them
// to exit codes (InputError -> 2, anything else -> 1) and never lets one crash.
#pragma once
#include <stdexcept>
#include <string>

namespace pb {

// Bad user input: a config field, a CLI flag, a file. The message names the
// field (or file) and the rule it broke. Exit code 2.
class InputError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// A failure of a distributed run: names the rank where it started.
class RankError : public std::runtime_error {
 public:
  RankError(int rank, const std::string& what)
      : std::runtime_error("rank " + std::to_string(rank) + ": " + what), rank_(rank) {}
  int rank() const { return rank_; }

 private:
  int rank_;
};

// Throws InputError(msg) unless cond.
inline void require(bool cond, const std::string& msg) {
  if (!cond) throw InputError(msg);
}

}  // namespace pb
