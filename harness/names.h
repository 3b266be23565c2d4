// One table of an enum's names (a family's injected faults): the name of a
// value, whether a string names one, the value it names, and the list for
// error messages — written once instead of per family.
#pragma once
#include <initializer_list>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "harness/status.h"

namespace pb {

template <class E>
class Names {
 public:
  Names(std::initializer_list<std::pair<E, const char*>> all) {
    for (const auto& [e, n] : all) all_.emplace_back(e, n);
  }
  std::string name(E e) const {
    for (const auto& [k, n] : all_)
      if (k == e) return n;
    return "?";
  }
  std::optional<E> find(std::string_view s) const {
    for (const auto& [k, n] : all_)
      if (n == s) return k;
    return std::nullopt;
  }
  bool has(std::string_view s) const { return find(s).has_value(); }
  // The value `s` names, or InputError "<field>: 's' is not a <what> (a, b, c)".
  E parse(const std::string& s, const std::string& field, const std::string& what) const {
    if (auto e = find(s)) return *e;
    throw InputError(field + ": '" + s + "' is not a " + what + " (" + list() + ")");
  }
  std::string list() const {  // "a, b, c"
    std::string out;
    for (const auto& [k, n] : all_) out += (out.empty() ? "" : ", ") + n;
    return out;
  }

 private:
  std::vector<std::pair<E, std::string>> all_;
};

}  // namespace pb
