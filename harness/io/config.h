// A validated reader over a TOML config (toml++). Keys are dotted paths
// ("model.layers"); every error is a pb::InputError naming the key and the
// rule ("model.heads: must be > 0, got -1").
// Invariants: (1) every key the program asks for is remembered, so
// check_no_unknown_keys() can name any key in the file that nothing read (a
// typo), with a suggestion among the keys that were asked for; (2) reading an
// absent key with a default writes the default into the table, so dump() and
// config_hash() describe the effective config: "steps = 10" written or
// defaulted hashes the same. Dotted paths cannot address keys that themselves
// contain '.'.
#pragma once
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace pb {

// A numeric range rule: each bound optional, open or closed.
struct Bounds {
  std::optional<double> lo, hi;
  bool lo_open = false, hi_open = false;

  static Bounds positive() { return {0.0, std::nullopt, true, false}; }        // > 0
  static Bounds non_negative() { return {0.0, std::nullopt, false, false}; }   // >= 0
  static Bounds at_least(double v) { return {v, std::nullopt, false, false}; } // >= v
  static Bounds at_most(double v) { return {std::nullopt, v, false, false}; }  // <= v
  static Bounds closed(double a, double b) { return {a, b, false, false}; }    // [a, b]
  static Bounds half_open(double a, double b) { return {a, b, false, true}; }  // [a, b)
  static Bounds open_closed(double a, double b) { return {a, b, true, false}; } // (a, b]

  bool contains(double v) const;
  std::string describe() const;  // "> 0", "in [0, 1)", "<= 8"
};

class ConfigReader {
 public:
  ConfigReader();  // an empty config (everything defaulted)
  ~ConfigReader();
  ConfigReader(ConfigReader&&) noexcept;
  ConfigReader& operator=(ConfigReader&&) noexcept;

  // InputError "config FILE: cannot open" or "config FILE:LINE:COL: <parse error>".
  static ConfigReader from_file(const std::string& path);
  static ConfigReader from_string(std::string_view toml_text, std::string source = "<string>");

  // T: bool, int, int64_t, double (integers accepted), std::string,
  // std::vector<int64_t>, std::vector<double>, std::vector<std::string>.
  template <class T> T get(std::string_view key, const T& def);
  template <class T> T require(std::string_view key);
  // Range-checked numbers (each element for vectors).
  template <class T> T get(std::string_view key, const T& def, const Bounds& rule);
  template <class T> T require(std::string_view key, const Bounds& rule);
  // A string from a fixed set: "model.precision: must be one of fp64, fp32; got 'fp16'".
  std::string get_enum(std::string_view key, const std::string& def, const std::vector<std::string>& allowed);
  std::string require_enum(std::string_view key, const std::vector<std::string>& allowed);
  // Presence test; marks the key as known (for suggestions), not as consumed.
  bool has(std::string_view key);

  // Overrides (e.g. from CLI flags). Intermediate tables are created.
  template <class T> void set(std::string_view key, const T& value);
  void set(std::string_view key, const char* value) { set(key, std::string(value)); }
  // "train.lr=3e-4": the value is parsed as a TOML value, or taken as a bare
  // string if it is not one ("model.precision=bf16").
  void set_from_assignment(std::string_view assignment);

  // Throws InputError naming every key present but never read, e.g.
  // "config FILE: unknown key 'model.hiden' (did you mean 'model.hidden'?)".
  void check_no_unknown_keys() const;
  // Keys present in the table that nothing has read (sorted).
  std::vector<std::string> unread_keys() const;

  // The effective config as canonical TOML (keys sorted) and its hash:
  // 16 hex digits of FNV-1a 64 over dump().
  std::string dump() const;
  std::string config_hash() const;
  const std::string& source() const;

  struct Impl;  // the toml::table and the read/asked-for key sets (config.cc)

 private:
  std::unique_ptr<Impl> impl_;
};

// Levenshtein distance (for "did you mean"), or cap + 1 when it exceeds cap.
size_t edit_distance(std::string_view a, std::string_view b, size_t cap = SIZE_MAX - 1);

}  // namespace pb
