// Errors are values up to main(): library code throws these, main() maps them
// to exit codes (InputError -> 2, anything else -> 1) and never lets one crash.
#pragma once
#include <charconv>
#include <climits>
#include <cstdio>
#include <stdexcept>
#include <string>
#include <string_view>

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

// A whole number in [lo, hi] (hi = INT_MAX prints as inf), or InputError
// naming `field`: the one parser for integer flags and option values.
inline int parse_int(std::string_view s, std::string_view field, int lo, int hi) {
  int v = 0;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  require(!s.empty() && ec == std::errc() && p == s.data() + s.size() && v >= lo && v <= hi,
          std::string(field) + ": '" + std::string(s) + "' must be a whole number in [" + std::to_string(lo) + ", " +
              (hi == INT_MAX ? std::string("inf") : std::to_string(hi)) + "]");
  return v;
}

// A program's body with the exit codes above: its value, or on InputError
// "<tool>: error: <message>" and 2, on any other exception
// "<tool>: failed: <message>" and 1.
template <class F>
int run_main(const char* tool, F&& body) {
  try {
    return body();
  } catch (const InputError& e) {
    std::fprintf(stderr, "%s: error: %s\n", tool, e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s: failed: %s\n", tool, e.what());
    return 1;
  }
}

}  // namespace pb
