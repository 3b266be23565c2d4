#include "harness/preflight.h"

#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <string>

#include "harness/status.h"

namespace pb {

double machine_memory_bytes() {
  const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGE_SIZE);
  return pages > 0 && page > 0 ? double(pages) * double(page) : 0;
}

std::string human_bytes(double b) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  int u = 0;
  while (b >= 1024 && u < 6) {
    b /= 1024;
    ++u;
  }
  char buf[48];
  std::snprintf(buf, sizeof buf, u ? "%.2f %s" : "%.0f %s", b, units[u]);
  return buf;
}

void require_fits(const Need& need, const Limits& limits, std::string_view what) {
  const std::string w(what);
  require(need.local_ranks <= limits.max_local_ranks,
          w + ": runs " + std::to_string(need.local_ranks) + " ranks as threads of this process, more than the " +
              std::to_string(limits.max_local_ranks) +
              " allowed (--max-ranks N raises the limit; use mpirun for a real world this large, or "
              "`parabench plan` to size it without running it)");
  const double have = limits.memory_bytes > 0 ? limits.memory_bytes : machine_memory_bytes();
  if (have <= 0) return;  // unknown machine: nothing to compare with
  require(!(need.bytes > have),
          w + ": needs " + human_bytes(need.bytes) + " of memory, " +
              (limits.memory_bytes > 0 ? "the limit is " : "this machine has ") + human_bytes(have) +
              " (--max-memory SIZE raises the limit; `parabench plan` sizes shapes this large without running them)");
}

int64_t parse_byte_size(std::string_view text, std::string_view field) {
  const std::string s(text), f(field);
  const std::string example = " (e.g. 8, 64K, 128M, 1.5G, 2T)";
  size_t used = 0;
  double v = 0;
  try {
    v = std::stod(s, &used);
  } catch (const std::exception&) {
    throw InputError(f + ": '" + s + "' is not a size" + example);
  }
  // stod takes "inf", "nan", hex floats and leading blanks: sizes are plain.
  require(std::isfinite(v) && !s.empty() && (std::isdigit(static_cast<unsigned char>(s[0])) || s[0] == '.') &&
              s.find_first_of("xXpP") == std::string::npos,
          f + ": '" + s + "' is not a size" + example);
  const std::string suffix = s.substr(used);
  double scale = 1;
  if (suffix == "K" || suffix == "k") scale = 1024.0;
  else if (suffix == "M" || suffix == "m") scale = 1024.0 * 1024;
  else if (suffix == "G" || suffix == "g") scale = 1024.0 * 1024 * 1024;
  else if (suffix == "T" || suffix == "t") scale = 1024.0 * 1024 * 1024 * 1024;
  else require(suffix.empty(), f + ": unknown suffix '" + suffix + "' in '" + s + "'" + example);
  const double bytes = v * scale;
  require(bytes < 0x1p62, f + ": '" + s + "' is " + human_bytes(bytes) + ", more than any size parabench handles (4 EiB)");
  return int64_t(bytes);
}

int64_t checked_product(std::string_view what, std::initializer_list<std::pair<std::string_view, int64_t>> factors,
                        int64_t max) {
  int64_t product = 1;
  bool over = false;
  std::string named;
  for (const auto& [name, v] : factors) {
    named += (named.empty() ? "" : " x ") + std::to_string(v) + " (" + std::string(name) + ")";
    over = over || v < 0 || __builtin_mul_overflow(product, v, &product) || product > max;
  }
  require(!over, std::string(what) + " = " + named + " is more than " + std::to_string(max));
  return product;
}

}  // namespace pb
