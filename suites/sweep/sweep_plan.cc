// Planner rows for sweep points (see sweep_plan.h). Time model of the planner:
// suites/planner/planner.h (compute at the per-rank peak, ring alpha-beta
// communication: steps x latency + bus bytes / bandwidth).
#include "suites/sweep/sweep_plan.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <map>
#include <optional>
#include <tuple>
#include <vector>

#include "harness/status.h"
#include "harness/mesh.h"
#include "impl/spec/run_spec.h"
#include "suites/planner/machine.h"
#include "suites/planner/model_cost.h"
#include "suites/planner/plan_input.h"
#include "suites/planner/plan_output.h"

namespace pb::sweep {

using calibrate::core_share;
using calibrate::LocalHardware;
using calibrate::MemoryBoundRates;
using calibrate::planner_hardware;
using calibrate::ShapeRates;

namespace {

// A point the planner refuses: its identifying columns and why.
void reject(PlanRow& row, const SweepPoint& p, const PointResult& r, const InputError& e) {
  row.values = CsvRecord{};
  row.values.set("strategy", p.strategy()).set("model", p.model()).set("precision", p.precision());
  row.values.set("params", p.spec.train.model.num_params());
  row.values.set("global_batch", r.global_batch).set("seq_len", r.seq);
  row.meta.status = "rejected";
  row.meta.reason = std::string("planner: ") + e.what();
}

}  // namespace

double single_rank_compute_scale(const ShapeKey& k, int seq, const LocalHardware& h, ShapeRates r,
                                 double measured_s) {
  SweepConfig one;
  one.seq = seq;
  PointResult res;
  res.seq = seq;
  res.global_batch = k.batch();
  r.compute_scale = 1;
  return planner::compute_scale_for(planner::plan(plan_input(one, single_rank_point(k), res, h, r)), measured_s);
}

namespace {
// in's compute_scale times ShapeRates::corun_at for `together` of its ranks
// computing at once, with a 1 / (tp x pp) slice of the model's weights each.
void scale_for_corun(planner::PlanInput& in, const ShapeRates& rates, int together) {
  in.hw.compute_scale *= rates.corun_at(together, double(together) / double(in.tp * in.pp));
}

// The measured memory-bound rates (none: the memcpy figure planner_hardware
// set stays), at the rank's core share.
void set_memory_rates(planner::PlanInput& in, const MemoryBoundRates& m, int64_t microbatches, double share) {
  const double mem = m.GBps(microbatches);
  if (!(mem > 0)) return;
  in.hw.mem_bw_GBps = mem * share;
  in.hw.shared_mem_bw_GBps = m.shared_GBps() * share;
  in.hw.optimizer_mem_bw_GBps = m.optimizer_GBps() * share;
  in.hw.buffer_mem_bw_GBps = m.buffer_GBps() * share;
}

// A context-parallel plan's measured attention core (ShapeRates::cp_attention),
// at the world's core share: it ran on its own tp x cp threads, which shared
// the cores as those ranks do, and runs among `world` ranks. The rest of the rank's
// GEMMs then run at the split's linear efficiency.
void set_cp_attention(planner::PlanInput& in, const ShapeRates& rates, const LocalHardware& h, int world) {
  if (in.cp < 2) return;
  const auto it = rates.cp_attention.find({in.tp, in.cp, in.cp_algo, in.zigzag});
  if (it == rates.cp_attention.end() || it->second.fwd_s <= 0 || it->second.bwd_s <= 0) return;
  const double slower = core_share(h, it->second.threads) / core_share(h, world);
  in.hw.attention_fwd_s = it->second.fwd_s * slower;
  in.hw.attention_bwd_s = it->second.bwd_s * slower;
  in.hw.gemm_efficiency = rates.linear_efficiency_at(in.tp, in.cp);  // the core's own GEMMs are in its time
}

// The plan's hardware from this machine's measurement, for one of `world`
// ranks of a local run, `together` of them computing at once: the measured
// figures at the world's core share (planner_hardware), with the shape's
// GEMM efficiency, compute scale, memory-bound rates, measured attention core
// and the co-run factor.
void set_local_hardware(planner::PlanInput& in, const LocalHardware& h, int world, const ShapeRates& rates,
                        int64_t microbatches, int together) {
  in.hw = planner_hardware(h, world);
  in.hw.gemm_efficiency = rates.gemm_efficiency_at(in.tp, in.cp);
  in.hw.compute_scale = rates.compute_scale;
  set_memory_rates(in, rates.memory, microbatches, core_share(h, world));
  set_cp_attention(in, rates, h, world);
  scale_for_corun(in, rates, together);
}

// The row's reason: the hardware the plan used, as measured on this machine
// (GEMM and memory-bound rates, compute and co-run factors, latency, the
// measured attention core, bus bandwidth per op, calls issued without
// waiting).
std::string measured_reason(const SweepPoint& p, const LocalHardware& h, const ShapeRates& rates,
                            const planner::PlanInput& in, const planner::PlanResult& pr) {
  char split[96] = "";
  if (in.tp > 1 || in.cp > 1)
    std::snprintf(split, sizeof split, " (at a tp%d cp%d rank's shapes%s)", in.tp, in.cp,
                  in.hw.attention_fwd_s > 0 ? ", the attention core's left out" : "");
  char note[600];
  std::string shared_note = "2 x memcpy";
  if (rates.memory.GBps(p.microbatches) > 0) {
    std::snprintf(note, sizeof note,
                  "measured at the model's shapes; its LayerNorms and residual adds at %.4g GB/s, the optimizer "
                  "step at %.4g GB/s, the data-parallel buffers at %.4g GB/s",
                  rates.memory.shared_GBps(), rates.memory.optimizer_GBps(), rates.memory.buffer_GBps());
    shared_note = note;
  }
  std::snprintf(note, sizeof note,
                "measured hardware: %.4g GFLOP/s sgemm x %.3g core share, the model's GEMMs at %.3g of it%s, "
                "memory-bound kernels at %.4g GB/s (%s), compute x %.3g (%s), latency %.4g us per ring step at "
                "%d ranks%s",
                h.peak_flops_per_rank / 1e9, core_share(h, p.world()), in.hw.gemm_efficiency, split,
                in.hw.mem_bw_GBps / core_share(h, p.world()), shared_note.c_str(),
                rates.compute_scale,
                rates.step_measured ? "a measured single-rank step of the shape over the kernels' estimate"
                                    : "no single-rank step measured: it did not fit this machine on one rank or failed",
                planner_hardware(h, p.world()).latency_us, std::max(2, p.world()),
                p.world() < 2 ? " (unused: one rank)" : "");
  std::string reason = note;
  const int together = std::min(p.world(), h.cores);
  if (const auto it = rates.corun_scale.find(together); together > 1 && it != rates.corun_scale.end()) {
    std::snprintf(note, sizeof note,
                  ", x %.3g for %d ranks computing at once (the single-rank step ran x %.3g as %d copies side by "
                  "side, meeting after every step; taken at the copies of the weights these ranks hold)",
                  in.hw.compute_scale / rates.compute_scale, together, it->second, together);
    reason += note;
  }
  if (in.hw.attention_fwd_s > 0) {
    std::snprintf(note, sizeof note,
                  "; the attention core measured (%s%s at this rank's shape, cp traffic included): %.3g + %.3g us "
                  "forward + backward per block and microbatch",
                  std::string(cp_algo_name(in.cp_algo)).c_str(),
                  in.cp_algo == CpAlgo::ring ? (in.zigzag ? " zigzag" : " contiguous") : "",
                  in.hw.attention_fwd_s * 1e6, in.hw.attention_bwd_s * 1e6);
    reason += note;
  }
  if (p.world() > 1 && !in.hw.collectives.empty()) {
    reason += "; bus bandwidth per op, measured";
    const char* sep = ": ";
    for (const auto& [op, fits] : in.hw.collectives)
      for (const planner::CollectiveFit& f : fits)
        if (f.group_size <= p.world()) {
          std::snprintf(note, sizeof note, "%s%s %.3g GB/s at %lld", sep, op.c_str(), f.GBps,
                        (long long)f.group_size);
          reason += note;
          sep = ", ";
        }
    reason += " ranks (at this world's core share)";
  }
  if (pr.async_cost_s > 0) {
    std::snprintf(note, sizeof note,
                  "; %lld collectives per step issued without waiting cost %.3g ms on time-shared cores (measured: ",
                  (long long)pr.async_calls, pr.async_cost_s * 1e3);
    reason += note;
    for (size_t i = 0; i < in.hw.async_call_cost.size(); ++i) {
      const planner::AsyncCallCost& a = in.hw.async_call_cost[i];
      std::snprintf(note, sizeof note, "%s%.3g us per call at %.3g us of compute between calls", i ? ", " : "",
                    a.cost_us, a.compute_us);
      reason += note;
    }
    reason += ")";
  }
  return reason;
}

}  // namespace

planner::PlanInput plan_input(const SweepConfig& c, const SweepPoint& p, const PointResult& r,
                              const LocalHardware& h, const ShapeRates& rates) {
  const RunSpec& spec = p.spec;
  planner::PlanInput in;
  planner::set_parallelism(in, spec);
  in.shape = planner::planner_model(p.model());
  in.seq = r.seq;
  in.precision = p.spec.train.precision;
  in.global_batch = r.global_batch;
  in.microbatch_size = r.global_batch / (int64_t(p.dp()) * p.microbatches);
  // Only where the local backend runs its collectives on progress threads:
  // with fewer than two cores per rank it runs them at the wait
  // (WorldOptions::Progress), so the buckets are exposed.
  WorldOptions wo;
  wo.size = p.world();
  in.overlap = in.overlap && !local_progress_deferred(wo, unsigned(h.cores));
  in.ranks_per_node = spec.mesh.ranks_per_node ? spec.mesh.ranks_per_node : c.ranks_per_node;
  set_local_hardware(in, h, p.world(), rates, p.microbatches, std::min(p.world(), h.cores));
  return in;
}

PlanRow plan_row(const SweepConfig& c, const SweepPoint& p, const PointResult& r, const LocalHardware& h,
                 const RunMeta& point_meta, const ShapeRates& rates) {
  PlanRow row;
  row.meta = point_meta;
  row.meta.kind = "plan";
  row.meta.backend = "analytic";
  try {
    const planner::PlanInput in = plan_input(c, p, r, h, rates);
    const planner::PlanResult pr = planner::plan(in);
    row.values = planner::plan_record(in, pr);
    // The sweep's spelling of the point (the strategy text), so the report
    // pairs the two rows.
    row.values.set("strategy", p.strategy());
    row.meta.status = "ok";
    row.meta.reason = measured_reason(p, h, rates, in, pr);
  } catch (const InputError& e) {
    reject(row, p, r, e);
  }
  return row;
}

std::vector<PlanRow> extrapolated_plan_rows(const SweepConfig& c, const std::vector<MeasuredPoint>& measured,
                                            const LocalHardware& h,
                                            const std::map<ShapeKey, ShapeRates>& rates) {
  // The largest measured point of each series.
  std::map<std::string, const MeasuredPoint*> largest;
  for (const MeasuredPoint& m : measured) {
    MeshShape other = m.point.spec.mesh;
    other.dp = 1;
    const std::string series = m.point.strategy() + "|" + mesh_text(other) + "|" + m.point.model() + "|" +
                               m.point.precision() + "|" + std::to_string(m.point.microbatches) + "|" + m.point.scaling;
    const MeasuredPoint*& best = largest[series];
    if (!best || m.point.world() > best->point.world()) best = &m;
  }
  std::optional<planner::MachineProfile> profile;
  if (!c.machine.empty()) profile = planner::load_machine(c.machine);
  // This machine's figures for one rank per core: the latency at the largest
  // world measured (the fixed cost at full occupancy).
  LocalHardware local = h;
  if (!h.latency_us_by_world.empty()) local.latency_us = h.latency_us_by_world.rbegin()->second;
  local.latency_us_by_world.clear();
  local.async_call_cost_by_world.clear();  // one rank per core: no time-shared cores
  std::vector<PlanRow> rows;
  for (const auto& [series, m] : largest) {
    for (int64_t target : c.extrapolate) {
      if (target <= m->point.world()) continue;
      const int other = m->point.world() / m->point.dp();
      SweepPoint p = m->point;
      PointResult r = m->result;
      PlanRow row;
      row.meta = m->meta;
      row.meta.kind = "plan";
      row.meta.backend = "analytic";
      row.meta.world = int(target);
      try {
        require(target % other == 0, "extrapolate: " + std::to_string(target) + " ranks is not a multiple of the " +
                                         std::to_string(other) + " ranks of the series' other axes");
        p.spec.mesh.dp = int(target / other);
        if (p.scaling == "weak") r.global_batch = r.global_batch / m->point.dp() * p.dp();
        require(r.global_batch % (int64_t(p.dp()) * p.microbatches) == 0,
                "extrapolate: a global batch of " + std::to_string(r.global_batch) + " does not split over dp " +
                    std::to_string(p.dp()) + " x " + std::to_string(p.microbatches) + " microbatches");
        row.meta.mesh = p.mesh();
        const auto found = rates.find(shape_key(m->point, m->result));
        const ShapeRates shape_rates = found != rates.end() ? found->second : ShapeRates{};
        planner::PlanInput in = plan_input(c, p, r, local, shape_rates);
        char note[320];
        if (profile) {
          in.hw = planner::hardware_for(*profile, in);
          in.ranks_per_node = profile->ranks_per_node;
          in.overlap = planner::ddp_overlaps(p.spec);  // the profile's devices overlap on their own streams
          std::snprintf(note, sizeof note, "extrapolated from %d measured ranks with machine profile %s (%s)",
                        m->point.world(), profile->name().c_str(), profile->source.c_str());
        } else {
          // One rank per core: every core busy.
          set_local_hardware(in, local, 1, shape_rates, p.microbatches, local.cores);
          in.ranks_per_node = local.cores;
          std::snprintf(note, sizeof note,
                        "extrapolated from %d measured ranks with this machine's figures: one rank per core, %d "
                        "per node, inter-node links as fast as intra-node (no profile given), latency %.4g us",
                        m->point.world(), local.cores, local.latency_us);
        }
        const planner::PlanResult pr = planner::plan(in);
        row.values = planner::plan_record(in, pr);
        row.values.set("strategy", p.strategy());
        // sweep.machine as given (a profile name or file); empty: this machine's figures.
        row.values.set("machine", c.machine);
        row.meta.status = "ok";
        row.meta.reason = note;
        if (in.hw.attention_fwd_s > 0)
          row.meta.reason += "; the attention core as measured at the series' cp rank, at a whole core";
      } catch (const InputError& e) {
        reject(row, p, r, e);
        row.meta.reason = "extrapolated: " + row.meta.reason;  // every extrapolated row's reason says so
      }
      rows.push_back(std::move(row));
    }
  }
  return rows;
}

std::vector<ProfilePoint> plan_against(const planner::MachineProfile& m, const std::string& sweep_csv) {
  CsvTable t;
  try {
    t = read_csv(sweep_csv, {/*drop_partial_tail=*/true});
  } catch (const InputError& e) {
    throw InputError(std::string("--against: ") + e.what());
  }
  size_t ck = 0, cs = 0, cst = 0, cme = 0, cmo = 0, cpr = 0, csc = 0, cw = 0, cmb = 0, cgb = 0, csq = 0, cts = 0,
         chash = 0;
  try {
    ck = t.column("kind"), cs = t.column("status"), cst = t.column("strategy"), cme = t.column("mesh");
    cmo = t.column("model"), cpr = t.column("precision"), csc = t.column("scaling"), cw = t.column("world");
    cmb = t.column("microbatches"), cgb = t.column("global_batch"), csq = t.column("seq_len");
    cts = t.column("step_time_s"), chash = t.column("config_hash");
  } catch (const std::out_of_range& e) {
    throw InputError("--against: " + sweep_csv + " is not a sweep CSV (" + e.what() + ")");
  }
  LocalHardware h;  // the measured runs' progress rule at the profile's cores; its figures are replaced
  h.cores = m.ranks_per_node;
  h.peak_flops_per_rank = h.copy_GBps = 1;
  std::vector<ProfilePoint> out;
  for (size_t i = 0; i < t.rows.size(); ++i) {
    const auto& row = t.rows[i];
    if (row[ck] != "sweep" || row[cs] != "ok") continue;
    ProfilePoint pt;
    pt.label = row[cme] + " " + row[cst] + " " + row[cmo] + " " + row[cpr];
    try {
      auto number = [&](size_t c) {
        const std::string& text = row[c];
        double v = 0;
        const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
        require(ec == std::errc() && end == text.data() + text.size() && std::isfinite(v) && v > 0 && v < 1e15,
                "--against: " + sweep_csv + " line " + std::to_string(t.row_lines[i]) + ": " + t.header[c] +
                    " '" + text + "' is not a number > 0");
        return v;
      };
      const int world = int(number(cw));
      const SweepPoint p = make_point(row[cst], row[cme], row[cmo], row[cpr], row[csc], int(number(cmb)), "--against");
      pt.mesh = p.spec.mesh;
      PointResult r;
      r.global_batch = int64_t(number(cgb));
      r.seq = int64_t(number(csq));
      pt.measured_s = number(cts);
      if (world > m.ranks_per_node) {
        pt.why = std::to_string(world) + " ranks on a node of " + std::to_string(m.ranks_per_node) +
                 " cores: time-shared here, " + std::to_string((world + m.ranks_per_node - 1) / m.ranks_per_node) +
                 " nodes in the profile's plan";
      } else {
        planner::PlanInput in = plan_input(SweepConfig{}, p, r, h);
        in.hw = planner::hardware_for(m, in);
        in.ranks_per_node = m.ranks_per_node;
        const planner::PlanResult pr = planner::plan(in);
        pt.planned_s = pr.step_s;
        pt.compared = pt.planned_s > 0;
        if (!pt.compared) pt.why = "the profile gives no time (no peak)";
        pt.plan = planner::plan_record(in, pr);
        pt.plan.set("strategy", p.strategy());
        pt.world = world;
        pt.config_hash = row[chash];
      }
    } catch (const InputError& e) {
      pt.why = std::string("not planned: ") + e.what();
    }
    out.push_back(pt);
  }
  require(!out.empty(), "--against: " + sweep_csv + " has no ok sweep rows");
  return out;
}

}  // namespace pb::sweep
