// ConfigReader over toml++. Keys are walked table by table; every value read
// or defaulted is recorded in `consumed`, every key asked for in `known`.
#include "harness/io/config.h"

#include "harness/io/input_file.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <climits>
#include <cmath>
#include <cstdio>
#include <set>
#include <sstream>

#include <toml++/toml.h>

#include "harness/rng.h"
#include "harness/status.h"

namespace pb {

namespace {

// A TOML config is a page or two; 16 MiB leaves room and bounds the parse.
constexpr uint64_t kMaxConfigBytes = uint64_t(16) << 20;

std::string type_name(const toml::node& n) {
  switch (n.type()) {
    case toml::node_type::table: return "table";
    case toml::node_type::array: return "array";
    case toml::node_type::string: return "string";
    case toml::node_type::integer: return "integer";
    case toml::node_type::floating_point: return "float";
    case toml::node_type::boolean: return "boolean";
    case toml::node_type::date: return "date";
    case toml::node_type::time: return "time";
    case toml::node_type::date_time: return "date-time";
    default: return "none";
  }
}

std::string fmt_num_shortest(double v) {
  char buf[64];
  const auto res = std::to_chars(buf, buf + sizeof buf, v, std::chars_format::general);
  return std::string(buf, res.ptr);
}

// For messages: integral values without exponent ("got 5000000000").
std::string fmt_num(double v) {
  if (std::isfinite(v) && v == std::trunc(v) && std::fabs(v) < 1e15) return std::to_string(int64_t(v));
  return fmt_num_shortest(v);
}

std::vector<std::string_view> split_key(std::string_view key) {
  std::vector<std::string_view> parts;
  size_t start = 0;
  while (true) {
    const size_t dot = key.find('.', start);
    parts.push_back(key.substr(start, dot == std::string_view::npos ? key.npos : dot - start));
    if (parts.back().empty()) throw InputError("config key '" + std::string(key) + "': empty component");
    if (dot == std::string_view::npos) return parts;
    start = dot + 1;
  }
}

// Per-type extraction from / conversion to a toml node.
template <class T> struct Traits;
template <> struct Traits<bool> {
  static constexpr const char* what = "a boolean";
  static std::optional<bool> from(const toml::node& n) { return n.value_exact<bool>(); }
  static bool to_node(bool v) { return v; }
};
template <> struct Traits<int64_t> {
  static constexpr const char* what = "an integer";
  static constexpr const char* plural = "integers";
  static std::optional<int64_t> from(const toml::node& n) { return n.value_exact<int64_t>(); }
  static int64_t to_node(int64_t v) { return v; }
};
template <> struct Traits<int> {
  static constexpr const char* what = "an integer";
  static std::optional<int64_t> from(const toml::node& n) { return n.value_exact<int64_t>(); }
  static int64_t to_node(int v) { return v; }
};
template <> struct Traits<double> {
  static constexpr const char* what = "a float";
  static constexpr const char* plural = "floats";
  static std::optional<double> from(const toml::node& n) {
    if (n.is_integer()) return double(*n.value_exact<int64_t>());
    return n.value_exact<double>();
  }
  static double to_node(double v) { return v; }
};
template <> struct Traits<std::string> {
  static constexpr const char* what = "a string";
  static constexpr const char* plural = "strings";
  static std::optional<std::string> from(const toml::node& n) { return n.value_exact<std::string>(); }
  static std::string to_node(const std::string& v) { return v; }
};

template <class T> struct is_vector : std::false_type {};
template <class E> struct is_vector<std::vector<E>> : std::true_type {};

template <class T>
T extract_scalar(const toml::node& n, const std::string& key) {
  auto v = Traits<T>::from(n);
  if (!v) throw InputError(key + ": expected " + Traits<T>::what + ", got " + type_name(n));
  if constexpr (std::is_same_v<T, int>) {
    if (*v < INT_MIN || *v > INT_MAX)
      throw InputError(key + ": must fit in a 32-bit integer, got " + std::to_string(*v));
    return int(*v);
  } else if constexpr (std::is_same_v<T, double>) {
    // inf and nan are never a setting: every float a config gives must be finite
    // (lr = inf trained into NaN; clip = nan turned clipping off).
    if (!std::isfinite(*v)) throw InputError(key + ": must be a finite number, got " + fmt_num(*v));
    return *v;
  } else {
    return *v;
  }
}

template <class T>
T extract(const toml::node& n, const std::string& key) {
  if constexpr (is_vector<T>::value) {
    using E = typename T::value_type;
    const toml::array* arr = n.as_array();
    if (!arr)
      throw InputError(key + ": expected an array of " + std::string(Traits<E>::plural) + ", got " + type_name(n));
    T out;
    for (size_t i = 0; i < arr->size(); ++i)
      out.push_back(extract_scalar<E>(*arr->get(i), key + "[" + std::to_string(i) + "]"));
    return out;
  } else {
    return extract_scalar<T>(n, key);
  }
}

template <class T>
auto to_node(const T& v) {
  if constexpr (is_vector<T>::value) {
    toml::array arr;
    for (const auto& e : v) arr.push_back(Traits<typename T::value_type>::to_node(e));
    return arr;
  } else {
    return Traits<T>::to_node(v);
  }
}

template <class T>
void check_bounds(const T& v, const std::string& key, const Bounds& rule) {
  if constexpr (is_vector<T>::value) {
    for (size_t i = 0; i < v.size(); ++i) check_bounds(v[i], key + "[" + std::to_string(i) + "]", rule);
  } else if constexpr (std::is_arithmetic_v<T> && !std::is_same_v<T, bool>) {
    if (!rule.contains(double(v))) throw InputError(key + ": must be " + rule.describe() + ", got " + fmt_num(double(v)));
  } else {
    static_assert(!sizeof(T*), "Bounds apply to numbers and arrays of numbers");
  }
}

// Well-formed UTF-8 (The Unicode Standard, section 3.9, table 3-7: no
// overlong forms, surrogates or code points past U+10FFFF), as TOML requires
// of every key and string.
bool is_utf8(std::string_view s) {
  for (size_t i = 0; i < s.size();) {
    const uint8_t c = uint8_t(s[i]);
    if (c < 0x80) {
      ++i;
      continue;
    }
    const size_t n = (c >= 0xC2 && c <= 0xDF) ? 2 : (c >= 0xE0 && c <= 0xEF) ? 3 : (c >= 0xF0 && c <= 0xF4) ? 4 : 0;
    if (n == 0 || i + n > s.size()) return false;
    for (size_t k = 1; k < n; ++k)
      if ((uint8_t(s[i + k]) & 0xC0) != 0x80) return false;
    const uint8_t c1 = uint8_t(s[i + 1]);  // the second byte's range is narrower after these leads
    if ((c == 0xE0 && c1 < 0xA0) || (c == 0xED && c1 > 0x9F) || (c == 0xF0 && c1 < 0x90) || (c == 0xF4 && c1 > 0x8F))
      return false;
    i += n;
  }
  return true;
}

void walk_leaves(const toml::table& t, const std::string& prefix, std::vector<std::string>* out) {
  for (const auto& [k, node] : t) {
    const std::string path = prefix.empty() ? std::string(k.str()) : prefix + "." + std::string(k.str());
    const toml::table* sub = node.as_table();
    if (sub && !sub->empty()) walk_leaves(*sub, path, out);
    else out->push_back(path);
  }
}

// Canonical TOML text. toml++'s own formatter prints floats with 17 digits
// (0.1 as 0.10000000000000001) and keeps integer spellings (0x10); this one
// prints the shortest round-trip float and decimal integers, so the dump is
// readable and equal configs dump (and hash) equally. Keys come sorted
// (toml::table is ordered).
std::string toml_key(std::string_view k) {
  const bool bare = !k.empty() && std::all_of(k.begin(), k.end(), [](char c) {
    return std::isalnum(uint8_t(c)) || c == '_' || c == '-';
  });
  if (bare) return std::string(k);
  std::string out = "\"";
  for (char c : k) {
    if (c == '"' || c == '\\') out += '\\';
    if (uint8_t(c) < 0x20 || c == 0x7f) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04x", unsigned(uint8_t(c)));
      out += buf;
    } else {
      out += c;
    }
  }
  return out + '"';
}

std::string toml_value(const toml::node& n) {
  if (auto v = n.value_exact<int64_t>()) return std::to_string(*v);
  if (auto v = n.value_exact<double>()) {
    if (std::isnan(*v)) return "nan";
    if (std::isinf(*v)) return *v > 0 ? "inf" : "-inf";
    std::string t = fmt_num_shortest(*v);
    if (t.find_first_of(".e") == std::string::npos) t += ".0";
    return t;
  }
  if (auto v = n.value_exact<bool>()) return *v ? "true" : "false";
  if (auto v = n.value_exact<std::string>()) {
    std::string out = toml_key(*v);  // a quoted key is a valid basic string
    return out.front() == '"' ? out : '"' + out + '"';
  }
  if (const toml::array* a = n.as_array()) {
    std::string out = "[";
    for (size_t i = 0; i < a->size(); ++i) {
      if (i) out += ", ";
      out += toml_value(*a->get(i));
    }
    return out + "]";
  }
  if (const toml::table* t = n.as_table()) {
    std::string out = "{";
    for (const auto& [k, v] : *t) {
      if (out.size() > 1) out += ",";
      out += " " + toml_key(k.str()) + " = " + toml_value(v);
    }
    return out + (t->empty() ? "}" : " }");
  }
  std::ostringstream os;  // dates and times: toml++ prints their TOML form
  n.visit([&](const auto& leaf) { os << leaf; });
  return os.str();
}

void emit_table(const toml::table& t, const std::string& path, std::string* out) {
  for (const auto& [k, v] : t)
    if (!v.is_table()) *out += toml_key(k.str()) + " = " + toml_value(v) + "\n";
  for (const auto& [k, v] : t)
    if (const toml::table* sub = v.as_table()) {
      const std::string sub_path = path.empty() ? toml_key(k.str()) : path + "." + toml_key(k.str());
      if (!out->empty()) *out += "\n";
      *out += "[" + sub_path + "]\n";
      emit_table(*sub, sub_path, out);
    }
}

}  // namespace

bool Bounds::contains(double v) const {
  if (std::isnan(v)) return false;
  if (lo && (lo_open ? !(v > *lo) : !(v >= *lo))) return false;
  if (hi && (hi_open ? !(v < *hi) : !(v <= *hi))) return false;
  return true;
}

std::string Bounds::describe() const {
  if (lo && hi)
    return std::string("in ") + (lo_open ? "(" : "[") + fmt_num(*lo) + ", " + fmt_num(*hi) + (hi_open ? ")" : "]");
  if (lo) return std::string(lo_open ? "> " : ">= ") + fmt_num(*lo);
  if (hi) return std::string(hi_open ? "< " : "<= ") + fmt_num(*hi);
  return "any number";
}

size_t edit_distance(std::string_view a, std::string_view b, size_t cap) {
  // The distance is at least the length difference, and a row's minimum never
  // falls in later rows: past the cap, stop (the "did you mean" search asks
  // only whether a key is within a few edits, over every known key).
  const size_t diff = a.size() > b.size() ? a.size() - b.size() : b.size() - a.size();
  if (diff > cap) return cap + 1;
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diag = row[0];
    row[0] = i;
    size_t least = row[0];
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diag + (a[i - 1] != b[j - 1])});
      diag = up;
      least = std::min(least, row[j]);
    }
    if (least > cap) return cap + 1;
  }
  return std::min(row[b.size()], cap + 1);
}

struct ConfigReader::Impl {
  toml::table root;
  std::string source;
  std::set<std::string, std::less<>> consumed, known;

  const toml::node* find(std::string_view key) {
    known.emplace(key);
    const auto parts = split_key(key);
    const toml::table* t = &root;
    std::string prefix;
    for (size_t i = 0; i + 1 < parts.size(); ++i) {
      if (i) prefix += '.';
      prefix += parts[i];
      const toml::node* n = t->get(parts[i]);
      if (!n) return nullptr;
      t = n->as_table();
      if (!t) throw InputError(std::string(key) + ": '" + prefix + "' is " + type_name(*n) + ", not a table");
    }
    return t->get(parts.back());
  }

  template <class V>
  void put(std::string_view key, V&& value) {
    const auto parts = split_key(key);
    toml::table* t = &root;
    std::string prefix;
    for (size_t i = 0; i + 1 < parts.size(); ++i) {
      if (i) prefix += '.';
      prefix += parts[i];
      toml::node* n = t->get(parts[i]);
      if (!n) n = &t->insert_or_assign(parts[i], toml::table{}).first->second;
      t = n->as_table();
      if (!t) throw InputError(std::string(key) + ": cannot set, '" + prefix + "' is " + type_name(*n) + ", not a table");
    }
    t->insert_or_assign(parts.back(), std::forward<V>(value));
  }
};

ConfigReader::ConfigReader() : impl_(std::make_unique<Impl>()) { impl_->source = "<defaults>"; }
ConfigReader::~ConfigReader() = default;
ConfigReader::ConfigReader(ConfigReader&&) noexcept = default;
ConfigReader& ConfigReader::operator=(ConfigReader&&) noexcept = default;

const std::string& ConfigReader::source() const { return impl_->source; }

ConfigReader ConfigReader::from_string(std::string_view toml_text, std::string source) {
  ConfigReader r;
  r.impl_->source = source;
  try {
    r.impl_->root = toml::parse(toml_text, source);
  } catch (const toml::parse_error& e) {
    const auto& at = e.source().begin;
    throw InputError("config " + source + ":" + std::to_string(at.line) + ":" + std::to_string(at.column) + ": " +
                     std::string(e.description()));
  }
  return r;
}

ConfigReader ConfigReader::from_file(const std::string& path) {
  return from_string(read_input_file(path, "config " + path + ": ", "TOML config", kMaxConfigBytes), path);
}

template <class T>
T ConfigReader::get(std::string_view key, const T& def) {
  const toml::node* n = impl_->find(key);
  impl_->consumed.emplace(key);
  if (!n) {
    impl_->put(key, to_node(def));
    return def;
  }
  return extract<T>(*n, std::string(key));
}

template <class T>
T ConfigReader::require(std::string_view key) {
  const toml::node* n = impl_->find(key);
  if (!n) throw InputError(std::string(key) + ": required key is missing (in " + impl_->source + ")");
  impl_->consumed.emplace(key);
  return extract<T>(*n, std::string(key));
}

template <class T>
T ConfigReader::get(std::string_view key, const T& def, const Bounds& rule) {
  T v = get<T>(key, def);
  check_bounds(v, std::string(key), rule);
  return v;
}

template <class T>
T ConfigReader::require(std::string_view key, const Bounds& rule) {
  T v = require<T>(key);
  check_bounds(v, std::string(key), rule);
  return v;
}

namespace {
void check_enum(const std::string& v, std::string_view key, const std::vector<std::string>& allowed) {
  if (std::find(allowed.begin(), allowed.end(), v) != allowed.end()) return;
  std::string list;
  for (const auto& a : allowed) {
    if (!list.empty()) list += ", ";
    list += a;
  }
  throw InputError(std::string(key) + ": must be one of " + list + "; got '" + v + "'");
}
}  // namespace

std::string ConfigReader::get_enum(std::string_view key, const std::string& def, const std::vector<std::string>& allowed) {
  std::string v = get<std::string>(key, def);
  check_enum(v, key, allowed);
  return v;
}

std::string ConfigReader::require_enum(std::string_view key, const std::vector<std::string>& allowed) {
  std::string v = require<std::string>(key);
  check_enum(v, key, allowed);
  return v;
}

bool ConfigReader::has(std::string_view key) { return impl_->find(key) != nullptr; }

template <class T>
void ConfigReader::set(std::string_view key, const T& value) {
  impl_->put(key, to_node(value));
}

void ConfigReader::set_from_assignment(std::string_view assignment) {
  const size_t eq = assignment.find('=');
  auto trim = [](std::string_view s) {
    while (!s.empty() && std::isspace(uint8_t(s.front()))) s.remove_prefix(1);
    while (!s.empty() && std::isspace(uint8_t(s.back()))) s.remove_suffix(1);
    return s;
  };
  const std::string_view key = eq == assignment.npos ? std::string_view{} : trim(assignment.substr(0, eq));
  if (key.empty()) throw InputError("--set '" + std::string(assignment) + "': expected key=value");
  // A TOML file can hold nothing else; the dump must read back.
  if (!is_utf8(assignment)) throw InputError("--set '" + std::string(assignment) + "': not valid UTF-8");
  const std::string_view text = trim(assignment.substr(eq + 1));
  try {
    const toml::table t = toml::parse("v = " + std::string(text));
    if (const toml::node* v = t.get("v"); v && t.size() == 1) {
      impl_->put(key, *v);
      return;
    }
  } catch (const toml::parse_error&) {
    // Not a TOML value: a bare string such as bf16 or zero3.
  }
  impl_->put(key, std::string(text));
}

std::vector<std::string> ConfigReader::unread_keys() const {
  std::vector<std::string> leaves, unread;
  walk_leaves(impl_->root, "", &leaves);
  for (auto& k : leaves)
    if (!impl_->consumed.count(k)) unread.push_back(std::move(k));
  return unread;
}

void ConfigReader::check_no_unknown_keys() const {
  const auto unread = unread_keys();
  if (unread.empty()) return;
  std::string msg = "config " + impl_->source + ": ";
  constexpr size_t kShown = 10;  // a file of a million unknown keys gets a message, not a megabyte of one
  for (size_t u = 0; u < std::min(unread.size(), kShown); ++u) {
    const std::string& key = unread[u];
    const std::string_view leaf = std::string_view(key).substr(key.rfind('.') + 1);
    const size_t near = std::max<size_t>(2, key.size() / 4);  // a suggestion within this many edits
    std::string best;
    size_t best_d = near + 1;
    for (const auto& k : impl_->known) {
      const std::string_view kleaf = std::string_view(k).substr(k.rfind('.') + 1);
      const size_t d = kleaf == leaf ? 1 : edit_distance(key, k, best_d - 1);
      if (d < best_d) best_d = d, best = k;
      if (best_d == 0) break;
    }
    if (u) msg += "; ";
    msg += "unknown key '" + key + "'";
    if (best_d <= near) msg += " (did you mean '" + best + "'?)";
  }
  if (unread.size() > kShown) msg += "; and " + std::to_string(unread.size() - kShown) + " more unknown keys";
  throw InputError(msg);
}

std::string ConfigReader::dump() const {
  std::string out;
  emit_table(impl_->root, "", &out);
  return out;
}

std::string ConfigReader::config_hash() const {
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(rng::fnv1a64(dump())));
  return buf;
}

#define PB_CONFIG_INSTANTIATE(T)                                                 \
  template T ConfigReader::get<T>(std::string_view, const T&);                   \
  template T ConfigReader::require<T>(std::string_view);                         \
  template void ConfigReader::set<T>(std::string_view, const T&);
PB_CONFIG_INSTANTIATE(bool)
PB_CONFIG_INSTANTIATE(int)
PB_CONFIG_INSTANTIATE(int64_t)
PB_CONFIG_INSTANTIATE(double)
PB_CONFIG_INSTANTIATE(std::string)
PB_CONFIG_INSTANTIATE(std::vector<int64_t>)
PB_CONFIG_INSTANTIATE(std::vector<double>)
PB_CONFIG_INSTANTIATE(std::vector<std::string>)
#undef PB_CONFIG_INSTANTIATE

#define PB_CONFIG_INSTANTIATE_BOUNDED(T)                                         \
  template T ConfigReader::get<T>(std::string_view, const T&, const Bounds&);    \
  template T ConfigReader::require<T>(std::string_view, const Bounds&);
PB_CONFIG_INSTANTIATE_BOUNDED(int)
PB_CONFIG_INSTANTIATE_BOUNDED(int64_t)
PB_CONFIG_INSTANTIATE_BOUNDED(double)
PB_CONFIG_INSTANTIATE_BOUNDED(std::vector<int64_t>)
PB_CONFIG_INSTANTIATE_BOUNDED(std::vector<double>)
#undef PB_CONFIG_INSTANTIATE_BOUNDED

}  // namespace pb
