// Tests only: the message of the InputError a call throws (the refusals of
// docs/reliability.md are judged by their text), or a test failure when the
// call throws none.
#pragma once
#include <gtest/gtest.h>

#include <string>
#include <utility>

#include "harness/status.h"

namespace pb {

template <class F>
std::string input_error_of(F&& f) {
  try {
    std::forward<F>(f)();
  } catch (const InputError& e) {
    return e.what();
  }
  ADD_FAILURE() << "no InputError";
  return "";
}

}  // namespace pb
