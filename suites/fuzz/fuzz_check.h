// What a fuzz target asserts beyond "no crash": an invariant of the reader
// (a round trip, a size it promises). A broken one aborts, so libFuzzer saves
// the input as a crash like any sanitizer report.
#pragma once
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

#define PB_FUZZ_CHECK(cond, detail)                                                                \
  do {                                                                                             \
    if (!(cond)) {                                                                                 \
      std::fprintf(stderr, "fuzz invariant broken at %s:%d: %s\n  %s\n", __FILE__, __LINE__, #cond, \
                   std::string(detail).c_str());                                                   \
      std::abort();                                                                                \
    }                                                                                              \
  } while (0)

// Writes text to path (a target's scratch file for readers that take a path).
inline bool pb_fuzz_write_file(const std::string& path, std::string_view text) {
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (!f) return false;
  const bool ok = std::fwrite(text.data(), 1, text.size(), f) == text.size();
  return std::fclose(f) == 0 && ok;
}
