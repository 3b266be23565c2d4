// What a fuzz target asserts beyond "no crash": an invariant of the reader
// (a round trip, a size it promises). A broken one aborts, so libFuzzer saves
// the input as a crash like any sanitizer report.
#pragma once
#include <cstdio>
#include <cstdlib>
#include <string>

#define PB_FUZZ_CHECK(cond, detail)                                                                \
  do {                                                                                             \
    if (!(cond)) {                                                                                 \
      std::fprintf(stderr, "fuzz invariant broken at %s:%d: %s\n  %s\n", __FILE__, __LINE__, #cond, \
                   std::string(detail).c_str());                                                   \
      std::abort();                                                                                \
    }                                                                                              \
  } while (0)
