// Test-only: the configuration sweep every pipeline test runs over (pp in
// {1,2,3,4,8}, m in 1..4pp, v in {1,2,3}, 2bw over 1 and 2 steps), keeping the
// configs check_config() allows. Configs it rejects are collected separately.
#pragma once
#include <vector>

#include "harness/status.h"
#include "impl/pipeline/schedule.h"

namespace pb::pipeline::testing {

struct Case {
  ScheduleKind kind;
  ScheduleConfig cfg;
};

inline constexpr ScheduleKind kAllKinds[] = {ScheduleKind::gpipe, ScheduleKind::one_f_one_b,
                                             ScheduleKind::interleaved, ScheduleKind::zb_h1,
                                             ScheduleKind::pipedream_2bw};

// allowed = true: the accepted configs; false: the rejected ones.
inline std::vector<Case> sweep(bool allowed = true) {
  std::vector<Case> out;
  for (ScheduleKind k : kAllKinds)
    for (int pp : {1, 2, 3, 4, 8})
      for (int m = 1; m <= 4 * pp; ++m)
        for (int v : {1, 2, 3})
          for (int steps : {1, 2}) {
            const ScheduleConfig cfg{pp, m, v, steps};
            bool ok = true;
            try {
              check_config(k, cfg);
            } catch (const InputError&) {
              ok = false;
            }
            if (ok == allowed) out.push_back({k, cfg});
          }
  return out;
}

}  // namespace pb::pipeline::testing
