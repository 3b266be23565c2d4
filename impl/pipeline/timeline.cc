// ASCII and CSV forms of a pipeline timeline (see timeline.h). Columns are
// assigned by flooring start and end times, so adjacent actions never overlap.
#include "impl/pipeline/timeline.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "harness/status.h"

namespace pb::pipeline {
namespace {

std::string label(const TimelineEntry& e, int v) {
  const char letter = e.op == Op::backward_weight ? 'W' : e.op == Op::forward ? 'F' : 'B';
  // Appends only: `char/"." + to_string()` trips GCC 12's -Wrestrict false positive (PR 105651).
  std::string s(1, letter);
  s += std::to_string(e.microbatch);
  if (v > 1) {
    s += '.';
    s += std::to_string(e.chunk);
  }
  return s;
}

}  // namespace

std::string render_timeline(const Timeline& tl, double makespan, int v, int width) {
  require(width >= 0, "--width: must be >= 0 (0 = automatic), got " + std::to_string(width));
  if (makespan <= 0) return "";
  constexpr int kMaxAuto = 400;
  if (width == 0) {
    double shortest = makespan;
    size_t longest = 1;
    for (const auto& row : tl)
      for (const auto& e : row)
        if (e.end > e.start) {
          shortest = std::min(shortest, e.end - e.start);
          longest = std::max(longest, label(e, v).size());
        }
    width = std::min(kMaxAuto, int(std::ceil(makespan / shortest * double(longest + 1) - 1e-9)));
  }
  const double scale = width / makespan;
  auto col = [&](double t) { return std::clamp(int(std::floor(t * scale + 1e-9)), 0, width); };
  std::string out;
  const int rank_digits = int(std::to_string(tl.empty() ? 0 : tl.size() - 1).size());
  for (size_t r = 0; r < tl.size(); ++r) {
    std::string row(size_t(width), '.');
    for (const auto& e : tl[r]) {
      const int c0 = col(e.start), c1 = std::max(col(e.end), std::min(c0 + 1, width));
      const std::string text = label(e, v);
      for (int c = c0; c < c1; ++c) {
        const size_t i = size_t(c - c0);
        row[size_t(c)] = c1 - c0 > int(text.size()) ? (i < text.size() ? text[i] : '-') : text[0];
      }
    }
    std::string name = std::to_string(r);
    name.insert(0, size_t(rank_digits) - name.size(), ' ');
    out += "rank " + name + " |" + row + "|\n";
  }
  return out;
}

std::string timeline_csv(const Timeline& tl) {
  std::string out = "rank,action,microbatch,chunk,start,end\n";
  char buf[160];
  for (size_t r = 0; r < tl.size(); ++r)
    for (const auto& e : tl[r]) {
      std::snprintf(buf, sizeof buf, "%zu,%s,%d,%d,%.17g,%.17g\n", r, std::string(op_name(e.op)).c_str(),
                    e.microbatch, e.chunk, e.start, e.end);
      out += buf;
    }
  return out;
}

}  // namespace pb::pipeline
