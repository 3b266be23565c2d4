// Text forms of a pipeline timeline (simulated, or measured by an executor):
// an ASCII Gantt chart, one row per rank, and the CSV the report plots.
// Invariant: both read only TimelineEntry rows, so a measured timeline renders
// exactly like a simulated one.
#pragma once
#include <string>
#include <vector>

#include "impl/pipeline/simulator.h"

namespace pb::pipeline {

using Timeline = std::vector<std::vector<TimelineEntry>>;  // [rank]

// One row per rank: "rank 0 |F0-F1-B0----..|". Time runs along x; each action
// is drawn as its label (op letter, microbatch, ".chunk" when v > 1) padded
// with '-', idle time is '.'. A full backward (BW) is drawn as 'B'. width = 0
// picks a scale where the shortest action fits its label; otherwise the chart
// is `width` columns and labels that do not fit shrink to their letter.
// InputError for width < 0.
std::string render_timeline(const Timeline& tl, double makespan, int virtual_stages, int width = 0);

// "rank,action,microbatch,chunk,start,end" then one row per entry, ranks in
// order; action is F, B, W or BW; times with 17 significant digits.
std::string timeline_csv(const Timeline& tl);

}  // namespace pb::pipeline
