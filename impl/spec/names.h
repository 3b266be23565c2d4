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
  std::string list() const {  // "a, b, c"
    std::string out;
    for (const auto& [k, n] : all_) out += (out.empty() ? "" : ", ") + n;
    return out;
  }

 private:
  std::vector<std::pair<E, std::string>> all_;
};

}  // namespace pb
