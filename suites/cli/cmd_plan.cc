// parabench plan: the analytic planner (suites/planner) from the command line.
// Prints the table; --csv FILE appends a `plan` row (results/SCHEMA.md), "-"
// writes header and row to stdout instead. Bad flags are InputError (exit 2).
#include <algorithm>
#include <charconv>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <initializer_list>
#include <map>
#include <iostream>
#include <memory>
#include <tuple>

#include "harness/io/csv.h"
#include "harness/io/csv_schema.h"
#include "harness/io/input_file.h"
#include "harness/io/run_meta.h"
#include "harness/status.h"
#include "harness/mesh.h"
#include "impl/registry.h"
#include "impl/spec/run_spec.h"
#include "suites/cli/command.h"
#include "suites/cli/common.h"
#include "suites/planner/machine.h"
#include "suites/planner/plan_input.h"
#include "suites/planner/plan_output.h"
#include "suites/planner/planner.h"
#include "suites/sweep/sweep_plan.h"

namespace pb::cli {
namespace {

struct PlanFlags {
  std::string model, params, csv;
  int layers = 0, channels = 0, heads = 0, vocab = 0;
  int64_t seq = 0;
  std::string precision = "bf16-mixed";
  std::string mesh, strategy;  // the run spec's text form (instead of the shorthand below)
  // The shorthand: each flag one field of the run spec (spec_of).
  int dp = 1, tp = 1, cp = 1, pp = 1, ep = 1, ranks_per_node = 0, shard_group = 0, virtual_stages = 1;
  bool sp = false, overlap = false;
  std::string shard, offload = "none", recompute = "none", schedule = "1f1b";
  std::string machine;         // --machine NAME|FILE
  std::string order = "tp-cp-dp-pp";  // --order: placement of the axes over ranks, fastest first
  std::string attention = "unfused";  // --attention: flash (FlashAttention) or unfused
  std::string kernels = "fused";      // --kernels: fused or eager (PyTorch eager ops, llama family)
  std::string sp_gather = "regather"; // --sp-gather: regather (Megatron-LM) or saved (PyTorch DTensor)
  std::string grad_reduce;            // --grad-reduce: bf16|fp16|fp32 (empty: the precision's gradient bytes)
  std::string bwd_prefetch;  // --bwd-prefetch: FSDP's BackwardPrefetch, pre or post (empty: pre)
  std::string optimizer = "fused";    // --optimizer: the optimizer step's kernels (PlanInput::optimizer_step)
  std::string grad_accum = "buffer";  // --grad-accum: buffer or autograd (PlanInput::grad_accum_autograd)
  std::string loss = "fused";         // --loss: the LM head's loss kernels (PlanInput::loss)
  std::string tp_overlap = "none";    // --tp-overlap: none or wgrad (PlanInput::tp_overlap)
  std::string train_loop;             // --train-loop: none or megatron-lm (PlanInput::train_loop; empty: none)
  std::string against;         // --against SWEEP_CSV: the profile's plans of measured points
  std::string validate;        // --validate TABLE_CSV: a published table planned row by row
  double max_median_pct = -1;  // --max-median: fail when the table's median |error| exceeds it
  double max_memory_pct = -1;  // --max-memory-error: fail when a row's peak-memory |error| exceeds it
  bool explain = false;        // --explain: the step's parts, each figure with its source
  std::vector<CLI::Option*> hw_flags;  // --peak-tflops ...: given ones override the machine's figures
  CLI::Option* rpn_flag = nullptr;
  planner::PlanInput in;
};

// The hardware flags' fields, in PlanFlags::hw_flags' order, and their names
// in a TOML profile.
double planner::Hardware::* const kHwFlagTargets[] = {
    &planner::Hardware::peak_tflops,  &planner::Hardware::bw_intra_GBps,   &planner::Hardware::bw_inter_GBps,
    &planner::Hardware::latency_us,   &planner::Hardware::gemm_efficiency, &planner::Hardware::mem_bw_GBps,
    &planner::Hardware::gemm_spread};
const char* const kHwFlagFields[] = {"peak_tflops", "bw_intra_GBps",   "bw_inter_GBps", "latency_us",
                                     "gemm_efficiency", "mem_bw_GBps", "gemm_spread"};

// --machine: the profile's figures for the precision, then any hardware flag
// given by hand on top; its ranks per node unless the mesh or the flag says.
void apply_machine(const PlanFlags& f, planner::PlanInput& in) {
  if (f.machine.empty()) return;
  const planner::MachineProfile m = planner::load_machine(f.machine);
  planner::Hardware hw = planner::hardware_for(m, in);
  const planner::Hardware typed = in.hw;
  for (size_t i = 0; i < f.hw_flags.size(); ++i)
    if (f.hw_flags[i]->count() > 0) hw.*kHwFlagTargets[i] = typed.*kHwFlagTargets[i];
  // A figure typed by hand wins over the profile's measured tables too.
  if (f.hw_flags[0]->count() > 0 || f.hw_flags[4]->count() > 0) hw.gemm_rates.clear(), hw.gemm_achievable_tflops = 0;
  if (f.hw_flags[1]->count() > 0 || f.hw_flags[3]->count() > 0) hw.collectives.clear();
  // and over its calibrated kernel classes' and its kernel kinds' rates (one
  // rate for all then).
  if (f.hw_flags[5]->count() > 0) {
    hw.shared_mem_bw_GBps = hw.optimizer_mem_bw_GBps = hw.buffer_mem_bw_GBps = 0;
    for (const planner::KindRate& k : planner::kKindRates) hw.*k.rate = 0;
  }
  in.hw = hw;
  if (in.ranks_per_node == 0 && f.rpn_flag->count() == 0) in.ranks_per_node = m.ranks_per_node;
}

// The hardware figures typed by hand (--peak-tflops ...), on a profile or
// alone, as name=value (the TOML profile's field names): they join the row's
// plan_options, so the row says every figure it was planned on.
std::vector<std::string> typed_hardware(const PlanFlags& f) {
  std::vector<std::string> parts;
  for (size_t i = 0; i < f.hw_flags.size(); ++i)
    if (f.hw_flags[i]->count() > 0) {
      char v[32];  // the shortest text that reads back as the same double
      const auto end = std::to_chars(v, v + sizeof v, f.in.hw.*kHwFlagTargets[i]).ptr;
      parts.push_back(std::string(kHwFlagFields[i]) + "=" + std::string(v, end));
    }
  return parts;
}

// The run spec's mesh and options: --mesh and --strategy in its text form
// (the same parser check, train and sweep use), or the shorthand flags, each
// one field of it (--dp -> mesh.dp, --shard -> data.shard, ...; --overlap ->
// data.overlap, off unless given; --schedule names the pipeline's schedule
// when there is a pipeline or it is not the default). Each part given once.
RunSpec spec_of(const PlanFlags& f) {
  RunSpec spec;
  if (!f.mesh.empty()) {
    require(f.dp == 1 && f.tp == 1 && f.cp == 1 && f.pp == 1 && f.ep == 1 && f.ranks_per_node == 0,
            "--mesh: give the mesh once, as --mesh or as --dp/--tp/--cp/--pp/--ep/--ranks-per-node");
    spec.mesh = parse_mesh(f.mesh, "--mesh");
  } else {
    spec.mesh = MeshShape{f.dp, f.tp, f.cp, f.pp, f.ranks_per_node, f.ep};
  }
  if (!f.strategy.empty()) {
    require(f.shard.empty() && f.offload == "none" && f.schedule == "1f1b" && !f.sp && f.virtual_stages == 1 &&
                f.shard_group == 0 && !f.overlap && f.recompute == "none",
            "--strategy: give the options once, as --strategy or as --shard/--offload/--schedule/"
            "--virtual-stages/--sp/--recompute/--shard-group/--overlap");
    apply_strategy_text(spec, f.strategy, fault_catalogue(), "--strategy");
    return spec;
  }
  if (!f.shard.empty()) spec.data.shard = dp::parse_shard(f.shard, "--shard");
  require(f.offload == "none" || f.offload == "optimizer", "--offload: must be none or optimizer");
  spec.data.offload = f.offload == "optimizer" ? dp::Offload::optimizer : dp::Offload::none;
  spec.data.shard_group = f.shard_group;
  spec.data.overlap = f.overlap;
  spec.tensor.sp = f.sp;
  // op (torchtitan's op-level selective checkpointing) is the planner's own:
  // the run spec's recompute is none, PlanInput::recompute_even_matmuls set.
  spec.tensor.recompute = f.recompute == "op" ? Recompute::none : planner::parse_recompute(f.recompute, "--recompute");
  const pipeline::ScheduleKind schedule = pipeline::parse_schedule_kind(f.schedule, "--schedule");
  if (spec.mesh.pp > 1 || schedule != pipeline::ScheduleKind::one_f_one_b) spec.pipe.schedule = schedule;
  spec.pipe.virtual_stages = f.virtual_stages;
  return spec;
}

// "124439808", "1.3e9", "1.3B", "175b", "1T" (K, M, B/G, T suffixes).
int64_t parse_count(const std::string& s, const char* flag) {
  size_t used = 0;
  double v = 0;
  try {
    v = std::stod(s, &used);
  } catch (const std::exception&) {
    throw InputError(std::string(flag) + ": '" + s + "' is not a number");
  }
  const std::string suffix = s.substr(used);
  double scale = 1;
  if (suffix == "K" || suffix == "k") scale = 1e3;
  else if (suffix == "M" || suffix == "m") scale = 1e6;
  else if (suffix == "B" || suffix == "b" || suffix == "G" || suffix == "g") scale = 1e9;
  else if (suffix == "T" || suffix == "t") scale = 1e12;
  else require(suffix.empty(), std::string(flag) + ": unknown suffix '" + suffix + "' (K, M, B, T)");
  const double n = std::round(v * scale);
  require(n >= 1 && n < 9e18, std::string(flag) + ": must be in [1, 9e18), got '" + s + "'");
  return int64_t(n);
}

// The placement order of the axes (planner.h): Megatron's tp-cp-dp-pp or
// Llama 3's tp-cp-pp-dp; true for the latter.
bool parse_order(const std::string& s, const std::string& what) {
  require(s == "tp-cp-dp-pp" || s == "tp-cp-pp-dp",
          what + ": '" + s + "' must be tp-cp-dp-pp (Megatron's) or tp-cp-pp-dp (Llama 3's [TP, CP, PP, DP])");
  return s == "tp-cp-pp-dp";
}

// The attention kernel: FlashAttention-2 (flash), Tri Dao's Triton
// FlashAttention (flash-triton) or scores materialized (unfused).
struct AttentionKernel {
  bool flash = false, triton = false;
};
AttentionKernel parse_attention(const std::string& s, const std::string& what) {
  require(s == "flash" || s == "flash-triton" || s == "unfused",
          what + ": '" + s +
              "' must be flash (FlashAttention-2), flash-triton (Triton FlashAttention) or unfused (scores "
              "materialized, as GEMMs)");
  return {s != "unfused", s == "flash-triton"};
}

// The memory-bound kernels: fused (Megatron's) or eager (one PyTorch op each),
// or eager with the RMSNorms as one Triton kernel (torchtitan's fused_rmsnorm).
struct KernelSet {
  bool eager = false, fused_norm = false;
};
KernelSet parse_kernels(const std::string& s, const std::string& what) {
  require(s == "fused" || s == "eager" || s == "eager-fused-norm",
          what + ": '" + s +
              "' must be fused (one kernel per fused op), eager (PyTorch eager ops, one kernel each) or "
              "eager-fused-norm (eager, the RMSNorms one Triton kernel each)");
  return {s != "fused", s == "eager-fused-norm"};
}

// A flag's or column's value among `words` (empty: the first, unless
// `empty_is_first` is false): its index; anything else is refused, naming
// each word and what it means.
struct Word {
  const char* word;
  const char* meaning;
};
size_t parse_word(const std::string& s, const std::string& what, std::initializer_list<Word> words,
                  bool empty_is_first = true) {
  if (s.empty() && empty_is_first) return 0;
  size_t i = 0;
  for (const Word& w : words) {
    if (s == w.word) return i;
    ++i;
  }
  std::string list;
  i = 0;
  for (const Word& w : words) {
    list += std::string(i == 0 ? "" : i + 1 == words.size() ? " or " : ", ") + w.word + " (" + w.meaning + ")";
    ++i;
  }
  throw InputError(what + ": '" + s + "' must be " + list);
}

// Sequence parallel's backward: regather the column-parallel GEMMs' inputs
// (Megatron-LM) or keep the gathered ones (saved: PyTorch DTensor, torchtitan).
bool parse_sp_regather(const std::string& s, const std::string& what) {
  return parse_word(s, what,
                    {{"regather", "the backward all-gathers the stored norm outputs again, Megatron-LM"},
                     {"saved", "the gathered inputs kept, PyTorch DTensor"}},
                    false) == 0;
}

// FSDP's backward prefetch (PlanInput::backward_prefetch_post): pre or post.
bool parse_bwd_prefetch_post(const std::string& s, const std::string& what) {
  return parse_word(s, what,
                    {{"pre", "BACKWARD_PRE: the next unit's all-gather beside the current gradient computation; FSDP2"},
                     {"post", "BACKWARD_POST: issued after it, so waited for"}}) == 1;
}

// The data-parallel gradient reduce's dtype: its bytes per element
// (PlanInput::grad_reduce_bytes); empty: 0, the precision's gradient bytes.
int parse_grad_reduce(const std::string& s, const std::string& what) {
  if (s.empty()) return 0;
  require(s == "bf16" || s == "fp16" || s == "fp32",
          what + ": '" + s + "' must be bf16, fp16 (2-byte gradient reduce) or fp32 (4-byte)");
  return s == "fp32" ? 4 : 2;
}

// A DDP run's gradient accumulation (PlanInput::grad_accum_autograd); empty: buffer.
bool parse_grad_accum_autograd(const std::string& s, const std::string& what) {
  return parse_word(s, what,
                    {{"buffer", "the engine's: accumulated where produced, zeroed once"},
                     {"autograd", "PyTorch's .grad: an add per microbatch, the all-reduce's bucket copies; torch DDP, "
                                  "Megatron-LM's local DDP"}}) == 1;
}

// Tensor-parallel overlap (PlanInput::tp_overlap); empty: none.
planner::TpOverlap parse_tp_overlap(const std::string& s, const std::string& what) {
  return parse_word(s, what,
                    {{"none", "every tensor-parallel collective waited for"},
                     {"wgrad", "Megatron-LM's async column-parallel backward: the input gradient's all-reduce or "
                               "reduce-scatter beside the weight-gradient GEMM, with sp the input's all-gather beside "
                               "the input-gradient GEMM"}}) == 1
             ? planner::TpOverlap::wgrad
             : planner::TpOverlap::none;
}

// The training loop around the model (PlanInput::train_loop); empty: none.
planner::TrainLoop parse_train_loop(const std::string& s, const std::string& what) {
  return parse_word(s, what,
                    {{"none", "the step's model work, optimizer and one host synchronization"},
                     {"megatron-lm", "Megatron-LM's pretrain_gpt.py loop: the batch and mask per microbatch, its "
                                     "timers' synchronizations, the batch's tp broadcast, the loss's dp all-reduce, "
                                     "the model-parallel norm"}}) == 1
             ? planner::TrainLoop::megatron_lm
             : planner::TrainLoop::none;
}

// The optimizer step's kernels (PlanInput::optimizer_step); empty: fused.
planner::OptimizerStep parse_optimizer_step(const std::string& s, const std::string& what) {
  if (s.empty() || s == "fused") return planner::OptimizerStep::fused;
  if (s == "megatron-fp16") return planner::OptimizerStep::megatron_fp16;
  if (s == "torch-foreach") return planner::OptimizerStep::torch_foreach;
  if (s == "composer") return planner::OptimizerStep::composer;
  throw InputError(what + ": '" + s +
                   "' must be fused (one pass: the default), megatron-fp16 (Megatron-LM's fp16 optimizer), "
                   "torch-foreach (PyTorch's foreach AdamW and clip_grad_norm_) or composer (composer's "
                   "DecoupledAdamW and FSDP clip_grad_norm_)");
}

// The LM head's loss kernels (PlanInput::loss); empty: fused.
planner::LossKernel parse_loss(const std::string& s, const std::string& what) {
  if (s.empty() || s == "fused") return planner::LossKernel::fused;
  if (s == "megatron-fp32") return planner::LossKernel::megatron_fp32;
  if (s == "flash-xentropy") return planner::LossKernel::flash_xentropy;
  if (s == "composer-flash-xentropy") return planner::LossKernel::composer_flash_xentropy;
  throw InputError(what + ": '" + s +
                   "' must be fused (the default), megatron-fp32 (Megatron-LM's vocab_parallel_cross_entropy "
                   "over the fp32 logits), flash-xentropy (flash-attn 1.0.9's fused cross "
                   "entropy) or "
                   "composer-flash-xentropy (that and composer's two training metrics, as llm-foundry's MPT)");
}

planner::PlanInput resolve(PlanFlags& f) {
  planner::PlanInput in = f.in;
  const bool custom = f.layers || f.channels || f.heads;
  require(int(!f.model.empty()) + int(custom) + int(!f.params.empty()) == 1,
          "model: give exactly one of --model NAME, --layers/--channels/--heads, or --params N");
  if (!f.model.empty()) {
    in.shape = planner::planner_model(f.model);
    require(f.vocab == 0, "--vocab: only with a custom shape (--layers/--channels/--heads)");
  } else if (custom) {
    require(f.layers > 0 && f.channels > 0 && f.heads > 0, "--layers/--channels/--heads: all three are required (> 0)");
    ModelConfig m;
    m.name = "custom";
    m.L = f.layers;
    m.C = f.channels;
    m.NH = f.heads;
    m.V = f.vocab > 0 ? f.vocab : 50257;
    m.maxT = f.seq > 0 ? int(f.seq) : 1024;
    in.shape = m;
  } else {
    in.params = parse_count(f.params, "--params");
    require(f.vocab == 0, "--vocab: only with a custom shape (--layers/--channels/--heads)");
  }
  in.seq = f.seq;
  planner::set_parallelism(in, spec_of(f));
  require(f.precision == "fp64" || f.precision == "fp32" || f.precision == "bf16-mixed",
          "--precision: must be one of fp64, fp32, bf16-mixed (got '" + f.precision + "')");
  in.precision = parse_precision(f.precision);
  apply_machine(f, in);
  in.pp_inside_dp = parse_order(f.order, "--order");
  const AttentionKernel attention = parse_attention(f.attention, "--attention");
  in.flash_attention = attention.flash;
  in.flash_triton = attention.triton;
  const KernelSet kernels = parse_kernels(f.kernels, "--kernels");
  in.eager_kernels = kernels.eager;
  in.fused_norm = kernels.fused_norm;
  in.sp_regather = parse_sp_regather(f.sp_gather, "--sp-gather");
  in.grad_reduce_bytes = parse_grad_reduce(f.grad_reduce, "--grad-reduce");
  in.backward_prefetch_post = parse_bwd_prefetch_post(f.bwd_prefetch, "--bwd-prefetch");
  // `pre` is the default: said explicitly where no prefetched sharded axis
  // is timed on a GPU it plans nothing (post: the planner's own check).
  require(f.bwd_prefetch != "pre" || planner::device_prefetches(in),
          "--bwd-prefetch pre: FSDP's backward prefetch acts on a sharded, prefetched data axis (shard zero3, hsdp "
          "or hzero) timed on a GPU profile (--machine); this plan has none, so the flag would plan nothing");
  in.optimizer_step = parse_optimizer_step(f.optimizer, "--optimizer");
  require(in.optimizer_step == planner::OptimizerStep::fused || in.precision == Precision::bf16_mixed,
          "--optimizer " + f.optimizer + ": its byte counts are a mixed-precision run's; needs --precision bf16-mixed");
  in.loss = parse_loss(f.loss, "--loss");
  in.grad_accum_autograd = parse_grad_accum_autograd(f.grad_accum, "--grad-accum");
  in.tp_overlap = parse_tp_overlap(f.tp_overlap, "--tp-overlap");
  in.train_loop = parse_train_loop(f.train_loop, "--train-loop");
  in.recompute_even_matmuls = f.recompute == "op";
  return in;
}

// --against: the profile's plan of every measured point of a sweep CSV (or a
// run directory's sweep.csv) beside its measured step, and the median
// |throughput error| by group as the report gives it (the upper median; a
// point counts for each parallel axis of its mesh, dp for meshes with no
// other).
int run_against(const PlanFlags& f, const Env& env) {
  require(!f.machine.empty(), "--against: needs --machine NAME|FILE (the profile to check)");
  require(f.model.empty() && f.params.empty() && !f.layers && !f.channels && !f.heads && f.mesh.empty() &&
              f.strategy.empty() && f.dp == 1 && f.tp == 1 && f.cp == 1 && f.pp == 1 && f.ep == 1,
          "--against: plans the points of the sweep CSV; give only --machine (and --csv) with it");
  require(f.csv != "-", "--against: --csv needs a file (the plan rows of the compared points)");
  for (const CLI::Option* o : f.hw_flags)
    require(o->count() == 0, "--against: " + o->get_name() + " is the profile's (give only --machine and --csv)");
  std::string csv = f.against;
  std::error_code ec;
  if (std::filesystem::is_directory(csv, ec)) csv = (std::filesystem::path(csv) / "sweep.csv").string();
  // A torn last row (a sweep killed mid-write, a truncated copy) is refused,
  // named, rather than dropped silently: the comparison would miss a point.
  try {
    read_csv(csv);
  } catch (const InputError& e) {
    throw InputError(std::string("--against: ") + e.what());
  }
  const planner::MachineProfile m = planner::load_machine(f.machine);
  const std::vector<sweep::ProfilePoint> pts = sweep::plan_against(m, csv);
  std::string shapes;
  for (const planner::ShapeFigures& s : m.shapes) shapes += (shapes.empty() ? "" : "; ") + s.workload;
  shapes = shapes.empty() ? "no training shape calibrated" : "training shapes calibrated: " + shapes;
  std::printf("plan --machine %s against %s (%s)\n", m.name().c_str(), csv.c_str(), shapes.c_str());
  std::printf("  %-58s %11s %11s %7s\n", "point", "measured ms", "planned ms", "error");
  std::map<std::string, std::vector<const sweep::ProfilePoint*>> groups;
  for (const sweep::ProfilePoint& p : pts) {
    if (!p.compared) continue;
    std::printf("  %-58s %11.4g %11.4g %+6.1f%%\n", p.label.c_str(), p.measured_s * 1e3, p.planned_s * 1e3,
                100 * p.error());
    groups["all compared"].push_back(&p);
    bool other = false;
    const std::pair<const char*, int> axes[] = {
        {"tp", p.mesh.tp}, {"cp", p.mesh.cp}, {"ep", p.mesh.ep}, {"pp", p.mesh.pp}};
    for (const auto& [axis, size] : axes)
      if (size > 1) groups[std::string("axis ") + axis].push_back(&p), other = true;
    if (!other) groups["axis dp"].push_back(&p);
  }
  size_t skipped = 0;
  for (const sweep::ProfilePoint& p : pts)
    if (!p.compared) {
      if (skipped++ == 0) std::printf("not compared:\n");
      std::printf("  %-58s %s\n", p.label.c_str(), p.why.c_str());
    }
  std::printf("median |throughput error| (the plan's tokens/s over the measured; + : the plan is too fast)\n");
  if (groups.empty()) std::printf("  no point compared\n");
  for (const char* g : {"all compared", "axis dp", "axis tp", "axis cp", "axis ep", "axis pp"}) {
    const auto it = groups.find(g);
    if (it == groups.end()) continue;
    std::vector<double> e;
    const sweep::ProfilePoint* worst = it->second.front();
    for (const sweep::ProfilePoint* p : it->second) {
      e.push_back(std::abs(p->error()));
      if (std::abs(p->error()) > std::abs(worst->error())) worst = p;
    }
    std::sort(e.begin(), e.end());
    std::printf("  %-13s %5.1f%% over %zu points (worst %+.0f%%: %s)\n", g, 100 * e[e.size() / 2], e.size(),
                100 * worst->error(), worst->label.c_str());
  }
  if (f.csv.empty()) return 0;
  // The compared points' plan rows (the report's "calibrated profile" table).
  ResultWriter w(f.csv, "plan");
  const auto now = std::chrono::system_clock::now();
  RunMeta meta;
  meta.run_id = make_run_id(now);
  meta.timestamp = iso8601_utc(now);
  meta.git_rev = env.git_rev;
  meta.host = host_name();
  meta.backend = "analytic";
  meta.reason = "machine profile " + m.name() + " (" + shapes + ") for the measured point of " + csv;
  int rows = 0;
  for (const sweep::ProfilePoint& p : pts) {
    if (!p.compared) continue;
    meta.world = p.world;
    meta.mesh = mesh_text(p.mesh);
    meta.config_hash = p.config_hash;
    CsvRecord rec = p.plan;
    rec.set("machine", f.machine);  // the profile as given (name or file)
    w.write(meta, rec);
    ++rows;
  }
  std::printf("wrote %d plan rows to %s\n", rows, f.csv.c_str());
  return 0;
}

// --validate FILE: a published table (configs/published/*.csv) planned row by
// row. Lines starting with '#' are the table's header comment (its source);
// the rest is a CSV with exactly the columns below, every field given.
const std::vector<std::string>& published_columns() {
  static const std::vector<std::string> cols = {
      "label",  "machine",      "layers",        "channels", "heads",  "vocab",          "seq",
      "gpus",   "tp",           "pp",            "dp",       "microbatch", "global_batch", "recompute",
      "sp",     "schedule",     "virtual_stages", "shard",   "overlap", "metric",        "published",
      "assumed", "source"};
  return cols;
}
// Columns a table may add: `model` (a planner model name, e.g. llama3-70b: the
// family and the shape's other fields come from it; layers, channels, heads
// and vocab must equal its), `cp` (context parallel; gpus = tp x cp x pp x dp),
// `order` (the axes' placement, --order: tp-cp-dp-pp by default), `attention`
// (flash, flash-triton or unfused, --attention: unfused by default), `kernels` (fused or
// eager, --kernels: fused by default), `published_gib` (the peak memory per GPU the
// source reports, GiB; empty where it gives none), `sp_gather` (regather or saved,
// --sp-gather: regather by default), `grad_reduce` (the dtype of the
// data-parallel gradient reduce, --grad-reduce: bf16, fp16 or fp32; empty: bf16),
// `dropout` (0 or 1, --dropout: Megatron's GPT dropout; 0 by default),
// `bwd_prefetch` (pre or post, --bwd-prefetch: FSDP's backward prefetch; pre by default),
// `optimizer` (fused, megatron-fp16, torch-foreach or composer, --optimizer: the optimizer
// step's kernels; empty: fused), `loss` (fused, megatron-fp32, flash-xentropy or
// composer-flash-xentropy, --loss: the LM head's loss kernels; empty: fused), `grad_accum` (buffer or autograd, --grad-accum: a DDP run's
// gradients; empty: buffer), `tp_overlap` (none or wgrad, --tp-overlap: the column-parallel
// backward's async TP collectives; empty: none), `train_loop` (none or megatron-lm, --train-loop:
// the loop around the model; empty: none).
const std::vector<std::string>& published_optional_columns() {
  static const std::vector<std::string> cols = {"model", "cp", "order", "attention", "kernels", "published_gib",
                                                "sp_gather", "grad_reduce", "dropout", "bwd_prefetch",
                                                "optimizer", "loss", "grad_accum", "tp_overlap",
                                                "train_loop"};
  return cols;
}

struct PublishedRow {
  std::string label, machine, recompute, schedule, shard, metric, assumed, source, model;
  bool pp_inside_dp = false, sp_regather = true;
  KernelSet kernels;
  int grad_reduce_bytes = 0;  // 0: the precision's gradient bytes
  AttentionKernel attention;
  int layers = 0, channels = 0, heads = 0, vocab = 0, tp = 1, cp = 1, pp = 1, dp = 1, virtual_stages = 1;
  int64_t seq = 0, gpus = 0, microbatch = 0, global_batch = 0;
  bool sp = false, overlap = false, dropout = false, bwd_prefetch_post = false, grad_accum_autograd = false;
  planner::OptimizerStep optimizer_step = planner::OptimizerStep::fused;
  planner::LossKernel loss = planner::LossKernel::fused;
  planner::TpOverlap tp_overlap = planner::TpOverlap::none;
  planner::TrainLoop train_loop = planner::TrainLoop::none;
  double published = 0;
  double published_gib = 0;  // 0: the source gives no memory figure
};

struct ValidatedRow {
  PublishedRow row;
  double planned = 0, error = 0;  // error: the plan's throughput over the published, minus 1
  double memory_gib = 0, memory_error = 0;  // memory_error: planned over published_gib, minus 1
  std::string parts;  // where the plan's step goes
};

std::vector<PublishedRow> read_published(const std::string& path) {
  const std::string text = read_input_file(path, "--validate: " + path + ": ", "published table", 16u << 20);
  std::string body;
  size_t pos = 0, header_line = 0, line_no = 0;
  while (pos < text.size()) {
    size_t end = text.find('\n', pos);
    const std::string line = text.substr(pos, end == std::string::npos ? std::string::npos : end + 1 - pos);
    ++line_no;
    if (!line.empty() && line[0] == '#') {
      body += "\n";  // keep the line numbers of the rows
    } else {
      if (header_line == 0 && line.find_first_not_of(" \r\n") != std::string::npos) header_line = line_no;
      body += line;
    }
    if (end == std::string::npos) break;
    pos = end + 1;
  }
  // Blank lines before the header (the comment block) would read as an empty header.
  const size_t skip = header_line == 0 ? body.size() : [&] {
    size_t p = 0;
    for (size_t i = 1; i < header_line; ++i) p = body.find('\n', p) + 1;
    return p;
  }();
  require(header_line != 0, "--validate: " + path + ": no header row (only comments)");
  const CsvTable t = parse_csv(std::string_view(body).substr(skip), path);
  const std::vector<std::string>& cols = published_columns();
  const std::vector<std::string>& optional = published_optional_columns();
  auto has = [&](const std::string& c) { return std::find(t.header.begin(), t.header.end(), c) != t.header.end(); };
  for (const std::string& c : t.header)
    require(std::find(cols.begin(), cols.end(), c) != cols.end() ||
                std::find(optional.begin(), optional.end(), c) != optional.end(),
            "--validate: " + path + ": unknown column '" + c + "' (a published table has exactly: " + [&] {
              std::string s;
              for (const std::string& k : cols) s += (s.empty() ? "" : ", ") + k;
              for (const std::string& k : optional) s += ", optionally " + k;
              return s;
            }() + ")");
  for (const std::string& c : cols)
    require(std::find(t.header.begin(), t.header.end(), c) != t.header.end(),
            "--validate: " + path + ": missing column '" + c + "'");
  require(!t.rows.empty(), "--validate: " + path + ": no rows: a check that compares nothing fails");
  std::vector<PublishedRow> rows;
  for (size_t i = 0; i < t.rows.size(); ++i) {
    const size_t line = t.row_lines[i] + header_line - 1;
    auto at = [&](const char* c) -> const std::string& {
      const std::string& v = t.rows[i][t.column(c)];
      require(!v.empty(), "--validate: " + path + " line " + std::to_string(line) + ": field '" + c + "' is empty");
      return v;
    };
    const std::string where = "--validate: " + path + " line " + std::to_string(line) + ": ";
    auto whole = [&](const char* c, int64_t lo, int64_t hi) {
      const std::string& s = at(c);
      int64_t v = 0;
      auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
      require(ec == std::errc() && p == s.data() + s.size() && v >= lo && v <= hi,
              where + c + " '" + s + "' must be a whole number in [" + std::to_string(lo) + ", " + std::to_string(hi) +
                  "]");
      return v;
    };
    auto flag = [&](const char* c) {
      const std::string& s = at(c);
      require(s == "0" || s == "1", where + c + " '" + s + "' must be 0 or 1");
      return s == "1";
    };
    PublishedRow r;
    r.label = at("label");
    r.machine = at("machine");
    r.layers = int(whole("layers", 1, 1 << 20));
    r.channels = int(whole("channels", 1, 1 << 24));
    r.heads = int(whole("heads", 1, 1 << 20));
    r.vocab = int(whole("vocab", 1, 1 << 24));
    r.seq = whole("seq", 1, 1 << 24);
    r.gpus = whole("gpus", 1, 1 << 24);
    r.tp = int(whole("tp", 1, 1 << 16));
    if (has("cp")) r.cp = int(whole("cp", 1, 1 << 16));
    if (has("order")) r.pp_inside_dp = parse_order(at("order"), where + "order");
    if (has("attention")) r.attention = parse_attention(at("attention"), where + "attention");
    if (has("kernels")) r.kernels = parse_kernels(at("kernels"), where + "kernels");
    if (has("sp_gather")) r.sp_regather = parse_sp_regather(at("sp_gather"), where + "sp_gather");
    if (has("grad_reduce"))  // empty: the default (parse_grad_reduce)
      r.grad_reduce_bytes = parse_grad_reduce(t.rows[i][t.column("grad_reduce")], where + "grad_reduce");
    if (has("model")) {
      r.model = at("model");
      ModelConfig named;
      try {
        named = planner::planner_model(r.model);
      } catch (const InputError& e) {
        throw InputError(where + e.what());
      }
      const int64_t kv = named.kv_heads_or_heads();
      for (auto [col, got, want] : {std::tuple{"layers", int64_t(r.layers), int64_t(named.L)},
                                    std::tuple{"channels", int64_t(r.channels), int64_t(named.C)},
                                    std::tuple{"heads", int64_t(r.heads), int64_t(named.NH)},
                                    std::tuple{"vocab", int64_t(r.vocab), int64_t(named.V)}})
        require(got == want, where + col + " " + std::to_string(got) + " is not model " + r.model + "'s (" +
                                 std::to_string(want) + ", kv heads " + std::to_string(kv) + ")");
    }
    r.pp = int(whole("pp", 1, 1 << 16));
    r.dp = int(whole("dp", 1, 1 << 24));
    r.microbatch = whole("microbatch", 1, 1 << 20);
    r.global_batch = whole("global_batch", 1, int64_t(1) << 30);
    r.recompute = at("recompute");
    r.sp = flag("sp");
    if (has("dropout")) r.dropout = flag("dropout");
    if (has("bwd_prefetch")) r.bwd_prefetch_post = parse_bwd_prefetch_post(at("bwd_prefetch"), where + "bwd_prefetch");
    if (has("optimizer"))  // empty: fused
      r.optimizer_step = parse_optimizer_step(t.rows[i][t.column("optimizer")], where + "optimizer");
    if (has("loss")) r.loss = parse_loss(t.rows[i][t.column("loss")], where + "loss");  // empty: fused
    if (has("grad_accum"))  // empty: buffer
      r.grad_accum_autograd = parse_grad_accum_autograd(t.rows[i][t.column("grad_accum")], where + "grad_accum");
    if (has("tp_overlap"))  // empty: none
      r.tp_overlap = parse_tp_overlap(t.rows[i][t.column("tp_overlap")], where + "tp_overlap");
    if (has("train_loop"))  // empty: none
      r.train_loop = parse_train_loop(t.rows[i][t.column("train_loop")], where + "train_loop");
    r.schedule = at("schedule");
    r.virtual_stages = int(whole("virtual_stages", 1, 1 << 10));
    r.shard = at("shard");
    r.overlap = flag("overlap");
    r.metric = at("metric");
    require(r.metric == "tflops_per_gpu" || r.metric == "iteration_s" || r.metric == "tokens_per_s_per_gpu" ||
                r.metric == "mfu",
            where + "metric '" + r.metric + "' must be one of tflops_per_gpu, iteration_s, tokens_per_s_per_gpu, mfu");
    const std::string& pub = at("published");
    size_t used = 0;
    try {
      r.published = std::stod(pub, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    require(used == pub.size() && std::isfinite(r.published) && r.published > 0,
            where + "published '" + pub + "' must be a finite number > 0");
    if (has("published_gib") && !t.rows[i][t.column("published_gib")].empty()) {
      const std::string& g = t.rows[i][t.column("published_gib")];
      size_t gused = 0;
      try {
        r.published_gib = std::stod(g, &gused);
      } catch (const std::exception&) {
        gused = 0;
      }
      require(gused == g.size() && std::isfinite(r.published_gib) && r.published_gib > 0,
              where + "published_gib '" + g + "' must be a finite number > 0 (or empty: the source gives none)");
    }
    r.assumed = at("assumed");
    r.source = at("source");
    const int64_t world = int64_t(r.tp) * r.cp * r.pp * r.dp;
    require(r.gpus == world, where + "gpus " + std::to_string(r.gpus) + " is not " +
                                 (has("cp") ? "tp x cp x pp x dp (" : "tp x pp x dp (") + std::to_string(world) + ")");
    rows.push_back(r);
  }
  return rows;
}

planner::PlanInput published_input(const PublishedRow& r) {
  planner::PlanInput in;
  ModelConfig m;
  if (!r.model.empty()) m = planner::planner_model(r.model);  // the family and its fields (read_published checked the shape)
  m.name = r.model.empty() ? r.label : r.model;
  m.L = r.layers;
  m.C = r.channels;
  m.NH = r.heads;
  m.V = r.vocab;
  m.maxT = std::max<int>(m.maxT, int(r.seq));
  in.shape = m;
  in.seq = r.seq;
  RunSpec spec;
  spec.mesh = MeshShape{r.dp, r.tp, r.cp, r.pp, 0, 1};
  spec.data.shard = dp::parse_shard(r.shard, "shard");
  spec.data.overlap = r.overlap;
  spec.tensor.sp = r.sp;
  spec.tensor.recompute = r.recompute == "op" ? Recompute::none : planner::parse_recompute(r.recompute, "recompute");
  const pipeline::ScheduleKind schedule = pipeline::parse_schedule_kind(r.schedule, "schedule");
  if (r.pp > 1 || schedule != pipeline::ScheduleKind::one_f_one_b) spec.pipe.schedule = schedule;
  spec.pipe.virtual_stages = r.virtual_stages;
  planner::set_parallelism(in, spec);
  in.precision = Precision::bf16_mixed;
  in.microbatch_size = r.microbatch;
  in.global_batch = r.global_batch;
  const planner::MachineProfile machine = planner::load_machine(r.machine);
  in.hw = planner::hardware_for(machine, in);
  in.ranks_per_node = machine.ranks_per_node;
  in.pp_inside_dp = r.pp_inside_dp;
  in.flash_attention = r.attention.flash;
  in.flash_triton = r.attention.triton;
  in.eager_kernels = r.kernels.eager;
  in.fused_norm = r.kernels.fused_norm;
  in.sp_regather = r.sp_regather;
  in.grad_reduce_bytes = r.grad_reduce_bytes;
  in.dropout = r.dropout;
  in.backward_prefetch_post = r.bwd_prefetch_post;
  in.optimizer_step = r.optimizer_step;
  in.grad_accum_autograd = r.grad_accum_autograd;
  in.loss = r.loss;
  in.tp_overlap = r.tp_overlap;
  in.train_loop = r.train_loop;
  in.recompute_even_matmuls = r.recompute == "op";
  return in;
}

double median_of(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

int run_validate(const PlanFlags& f) {
  std::vector<ValidatedRow> out;
  for (const PublishedRow& r : read_published(f.validate)) {
    ValidatedRow v{r, 0, 0, 0, 0, ""};
    planner::PlanResult p;
    try {
      const planner::PlanInput in = published_input(r);
      p = planner::plan(in);
    } catch (const InputError& e) {
      throw InputError("--validate: " + f.validate + ": row '" + r.label + "': " + e.what());
    }
    require(p.timed && p.step_s > 0, "--validate: row '" + r.label + "': the machine gives no time estimate");
    const double world = double(p.world);
    if (r.metric == "tflops_per_gpu") {
      v.planned = p.hardware_flops / p.step_s / world / 1e12;
      v.error = v.planned / r.published - 1;
    } else if (r.metric == "iteration_s") {
      v.planned = p.step_s;
      v.error = r.published / p.step_s - 1;
    } else if (r.metric == "tokens_per_s_per_gpu") {
      v.planned = p.tokens_per_s / world;
      v.error = v.planned / r.published - 1;
    } else {
      v.planned = 100 * p.mfu;
      v.error = v.planned / r.published - 1;
    }
    v.memory_gib = double(p.worst.device_total()) / double(int64_t(1) << 30);
    if (r.published_gib > 0) v.memory_error = v.memory_gib / r.published_gib - 1;
    char buf[160];
    std::snprintf(buf, sizeof buf, "compute %.3g s (GEMMs at %.0f%%), bubble %.3g s, exposed comm %.3g s, host %.3g s",
                  p.compute_s, 100 * p.gemm_efficiency, p.bubble_s, p.exposed_comm_s, p.host_overhead_s);
    v.parts = buf;
    out.push_back(v);
  }
  std::printf("plan --validate %s: %zu rows (+ : the plan is faster than published)\n", f.validate.c_str(),
              out.size());
  std::printf("  %-20s %-14s %-21s %11s %11s %8s %9s %15s  %s\n", "row", "machine", "metric", "published", "planned",
              "error", "mem GiB", "published GiB", "where the plan's step goes");
  std::vector<double> abs_err;
  const ValidatedRow* worst = &out.front();
  int plus = 0, minus = 0;
  for (const ValidatedRow& v : out) {
    char pub_gib[40] = "-";
    if (v.row.published_gib > 0)
      std::snprintf(pub_gib, sizeof pub_gib, "%.1f (%+.1f%%)", v.row.published_gib, 100 * v.memory_error);
    std::printf("  %-20s %-14s %-21s %11.4g %11.4g %+7.1f%% %9.2f %15s  %s\n", v.row.label.c_str(),
                v.row.machine.c_str(), v.row.metric.c_str(), v.row.published, v.planned, 100 * v.error, v.memory_gib,
                pub_gib, v.parts.c_str());
    abs_err.push_back(std::abs(v.error));
    if (std::abs(v.error) > std::abs(worst->error)) worst = &v;
    (v.error >= 0 ? plus : minus)++;
  }
  const double med = median_of(abs_err);
  std::printf("median |error| %.1f%% over %zu rows; worst %+.1f%% (%s); signs: %d +, %d -\n", 100 * med, out.size(),
              100 * worst->error, worst->row.label.c_str(), plus, minus);
  const bool goal = med <= 0.15 && std::abs(worst->error) <= 0.30 && plus > 0 && minus > 0;
  std::printf("goal (median <= 15%%, no row worse than 30%%, errors of both signs): %s\n", goal ? "met" : "not met");
  // Peak memory: stated for every row; held to the source where it gives a figure.
  const ValidatedRow* mem_worst = nullptr;
  int mem_rows = 0;
  for (const ValidatedRow& v : out)
    if (v.row.published_gib > 0) {
      ++mem_rows;
      if (!mem_worst || std::abs(v.memory_error) > std::abs(mem_worst->memory_error)) mem_worst = &v;
    }
  if (mem_worst)
    std::printf("peak memory per GPU: %d rows with a published figure; worst %+.1f%% (%s); within 5%%: %s\n", mem_rows,
                100 * mem_worst->memory_error, mem_worst->row.label.c_str(),
                std::abs(mem_worst->memory_error) <= 0.05 ? "met" : "not met");
  else
    std::printf("peak memory per GPU: planned for every row; the source gives no memory figure to hold it to\n");
  if (f.max_median_pct >= 0 && 100 * med > f.max_median_pct) {
    std::printf("FAIL: median |error| %.1f%% exceeds --max-median %.1f%%\n", 100 * med, f.max_median_pct);
    return 1;
  }
  if (f.max_memory_pct >= 0) {
    if (!mem_worst) {  // a check that compared nothing fails
      std::printf("FAIL: --max-memory-error: no row of %s gives a published peak memory (published_gib)\n",
                  f.validate.c_str());
      return 1;
    }
    if (100 * std::abs(mem_worst->memory_error) > f.max_memory_pct) {
      std::printf("FAIL: peak memory |error| %.1f%% (%s) exceeds --max-memory-error %.1f%%\n",
                  100 * std::abs(mem_worst->memory_error), mem_worst->row.label.c_str(), f.max_memory_pct);
      return 1;
    }
  }
  return 0;
}

// --explain: the step as parts, each with the figure it was timed at and
// where that figure comes from (the profile's [machine.sources]; a flag typed
// by hand is its own source).
void print_explain(const PlanFlags& f, const planner::PlanInput& in, const planner::PlanResult& r) {
  std::printf("\nwhere the step goes (plan --explain)\n");
  if (!r.timed) {
    std::printf("  no time estimate: give --machine or --peak-tflops\n");
    return;
  }
  std::map<std::string, std::string, std::less<>> src;
  if (!f.machine.empty()) src = planner::load_machine(f.machine).sources;
  for (size_t i = 0; i < f.hw_flags.size(); ++i)
    if (f.hw_flags[i]->count() > 0) src[kHwFlagFields[i]] = "typed by hand: " + f.hw_flags[i]->get_name();
  auto source = [&](const std::string& k) {
    const auto it = src.find(k);
    return it == src.end() ? std::string("(no source: the planner's default)") : it->second;
  };
  const planner::Hardware& h = in.hw;
  std::printf("  %-16s %10s  %-44s %s\n", "part", "seconds", "figure used", "source");
  char fig[160];
  const double gemm_s = r.compute_s - r.memory_s;
  if (h.gemm_achievable_tflops > 0 && h.gemm_rates.empty() && f.hw_flags[4]->count() == 0) {
    if (h.gemm_units > 0)
      std::snprintf(fig, sizeof fig, "GEMMs at %.1f%% of %g TFLOP/s (achievable %g x tiles/waves on %lld SMs)",
                    100 * r.gemm_efficiency, h.peak_tflops, h.gemm_achievable_tflops, (long long)h.gemm_units);
    else  // no tile model in the profile: the achievable rate, the memory roofline below it
      std::snprintf(fig, sizeof fig, "GEMMs at %.1f%% of %g TFLOP/s (achievable %g; no tile model)",
                    100 * r.gemm_efficiency, h.peak_tflops, h.gemm_achievable_tflops);
    std::printf("  %-16s %10.4g  %-44s %s\n", "GEMMs", gemm_s, fig,
                (source("gemm_achievable_tflops_bf16") + "; " + source("gemm_units")).c_str());
  } else {
    std::snprintf(fig, sizeof fig, "GEMMs at %.1f%% of %g TFLOP/s", 100 * r.gemm_efficiency, h.peak_tflops);
    std::printf("  %-16s %10.4g  %-44s %s\n", "GEMMs", gemm_s, fig,
                (source(h.gemm_rates.empty() ? "gemm_efficiency"
                                             : in.precision == Precision::bf16_mixed ? "gemm.bf16"
                                             : in.precision == Precision::fp32       ? "gemm.fp32"
                                                                                     : "gemm.fp64") +
                 "; peak: " +
                 source(f.hw_flags[0]->count() > 0 ? "peak_tflops" : "peak_tflops_bf16")).c_str());
  }
  const double flash = in.flash_attention && in.shape ? planner::flash_attention_rate(
                                                           h, in.flash_triton, in.shape->head_size(), r.seq / in.cp)
                                                     : 0.0;
  if (flash > 0) {
    const bool tabled = std::any_of(h.flash_rates.begin(), h.flash_rates.end(),
                                    [&](const planner::Hardware::AttentionRate& a) { return a.triton == in.flash_triton; });
    // The tables are FlashAttention-2's; a profile's single rate names its kernel in its source.
    const char* kernel = in.flash_triton ? "Triton FlashAttention" : tabled ? "FlashAttention-2" : "FlashAttention";
    std::snprintf(fig, sizeof fig, "%s at %.4g TFLOP/s (d %d, seq %lld; causal half counted)", kernel, flash,
                  in.shape->head_size(), (long long)(r.seq / in.cp));
    std::printf("  %-16s %10s  %-44s %s\n", "attention", "(in compute)", fig,
                source(tabled ? "flash_attention_rates" : "flash_attention_tflops_bf16").c_str());
  } else {
    std::printf("  %-16s %10s  %-44s %s\n", "attention", "(in GEMMs)", "per-head GEMMs timed like the others",
                in.flash_attention ? "--attention flash, but the profile gives no rate for the kernel"
                                   : "unfused attention (--attention flash for FlashAttention's rate)");
  }
  // The slowest of the world's GPUs (Hardware::gemm_spread): its share of
  // the GEMMs' seconds above.
  if (h.gemm_spread > 0) {
    std::snprintf(fig, sizeof fig, "GEMM-bound compute x %.4f: slowest of %lld GPUs, %.2f sd of %.3g%%",
                  r.slowest_gpu, (long long)r.world, (r.slowest_gpu - 1) / h.gemm_spread, 100 * h.gemm_spread);
    std::printf("  %-16s %10s  %-44s %s\n", "slowest GPU", "(in GEMMs)", fig, source("gemm_spread").c_str());
  } else {
    std::printf("  %-16s %10s  %-44s %s\n", "slowest GPU", "-", "identical GPUs (gemm_spread 0)",
                source("gemm_spread").c_str());
  }
  const char* optimizer = in.optimizer_step == planner::OptimizerStep::megatron_fp16   ? "; optimizer megatron-fp16"
                          : in.optimizer_step == planner::OptimizerStep::torch_foreach ? "; optimizer torch-foreach"
                          : in.optimizer_step == planner::OptimizerStep::composer      ? "; optimizer composer"
                                                                                        : "";
  std::snprintf(fig, sizeof fig, "%.4g GB of non-GEMM traffic (%s kernels%s%s%s) at %g GB/s", r.memory_bytes / 1e9,
                in.fused_norm ? "eager, Triton RMSNorm" : in.eager_kernels ? "eager" : "fused", optimizer,
                in.loss == planner::LossKernel::megatron_fp32             ? "; loss megatron-fp32"
                : in.loss == planner::LossKernel::flash_xentropy          ? "; loss flash-xentropy"
                : in.loss == planner::LossKernel::composer_flash_xentropy ? "; loss composer-flash-xentropy"
                                                                          : "",
                in.grad_accum_autograd ? "; grads autograd" : "", h.mem_bw_GBps);
  if (planner::has_kind_rates(h)) {
    const std::string head = fig;  // by kind below: mem_bw_GBps only where a kind has no rate of its own
    std::snprintf(fig, sizeof fig, "%s where its kind has none", head.c_str());
  }
  std::printf("  %-16s %10.4g  %-44s %s\n", "memory-bound", r.memory_s, fig,
              h.mem_bw_GBps > 0 ? source("mem_bw_GBps").c_str() : "not timed (no memory bandwidth)");
  // Its kinds (planner_parts.h RankBytes), each at the profile's rate for it
  // (Hardware::norm_mem_bw_GBps ...), else mem_bw_GBps's; the optimizer's and
  // buffers' at a calibration's rates where it measured them. Not where a CPU
  // calibration times the norms and adds together (shared_mem_bw_GBps).
  if (h.mem_bw_GBps > 0 && in.shape && !(h.shared_mem_bw_GBps > 0)) {
    const double elementwise = r.memory_bytes - r.memory_norm_bytes - r.memory_eager_norm_bytes -
                               r.memory_softmax_bytes - r.memory_loss_bytes - r.memory_optimizer_bytes -
                               r.memory_buffer_bytes;
    struct Kind {
      const char* name;
      double bytes, GBps;
      const char* key;
    };
    const Kind kinds[] = {
        // The norms by the kernel the plan runs (--kernels): one kernel each
        // way (fused; eager-fused-norm's Triton RMSNorm), or eager ops.
        {in.fused_norm ? "norms (Triton)" : "norms (fused)", r.memory_norm_bytes, h.norm_mem_bw_GBps,
         "norm_mem_bw_GBps"},
        {"norms (eager)", r.memory_eager_norm_bytes, h.eager_norm_mem_bw_GBps, "eager_norm_mem_bw_GBps"},
        {"softmax", r.memory_softmax_bytes, h.softmax_mem_bw_GBps, "softmax_mem_bw_GBps"},
        {"loss", r.memory_loss_bytes, h.loss_mem_bw_GBps, "loss_mem_bw_GBps"},
        {"elementwise", elementwise, h.elementwise_mem_bw_GBps, "elementwise_mem_bw_GBps"},
        {"optimizer", r.memory_optimizer_bytes, h.optimizer_mem_bw_GBps, "optimizer_mem_bw_GBps"},
        {"dp buffers", r.memory_buffer_bytes, h.buffer_mem_bw_GBps, "buffer_mem_bw_GBps"},
    };
    for (const Kind& k : kinds) {
      if (!(k.bytes > 0)) continue;
      const bool own = k.GBps > 0;
      const double GBps = own ? k.GBps : h.mem_bw_GBps;
      std::snprintf(fig, sizeof fig, "%.4g GB at %g GB/s%s", k.bytes / 1e9, GBps, own ? "" : " (mem_bw_GBps)");
      std::printf("  %-16s %10.4g  %-44s %s\n", ("  " + std::string(k.name)).c_str(), k.bytes / (GBps * 1e9), fig,
                  source(own ? k.key : "mem_bw_GBps").c_str());
    }
  }
  std::snprintf(fig, sizeof fig, "%s = %.3g of ideal compute", r.bubble_formula.c_str(), r.bubble_over_ideal);
  std::printf("  %-16s %10.4g  %-44s %s\n", "pipeline bubble", r.bubble_s, fig,
              "the schedule's declared bubble (impl/pipeline/cost.h)");
  struct GroupTime {
    double s = 0, inter_GBps = 0;  // its time; the bandwidth of its (slowest) inter-node row, 0: none
    int64_t per_node = 1;
  };
  std::map<std::string, GroupTime> groups;
  for (const planner::CommRow& c : r.comm) {
    GroupTime& g = groups[c.group];
    g.s += c.time_s;
    if (c.inter_node) {
      const double bw = planner::inter_node_GBps(c, h, in.ranks_per_node);
      if (g.inter_GBps == 0 || bw < g.inter_GBps) g.inter_GBps = bw, g.per_node = c.per_node;
    }
  }
  for (const auto& [g, t] : groups) {
    if (t.inter_GBps > 0 && h.rails > 0)
      std::snprintf(fig, sizeof fig, "bus bytes at %g GB/s (inter-node: %lld per node, %lld rails of %g)",
                    t.inter_GBps, (long long)t.per_node, (long long)h.rails, h.bw_inter_GBps);
    else
      std::snprintf(fig, sizeof fig, "bus bytes at %g GB/s (%s)", t.inter_GBps > 0 ? t.inter_GBps : h.bw_intra_GBps,
                    t.inter_GBps > 0 ? "inter-node" : "intra-node");
    std::string why = t.inter_GBps > 0 ? source("bw_inter_GBps") + (h.rails > 0 ? "; rails: " + source("rails") : "")
                                       : source("bw_intra_GBps");
    // The per-step latency the ring model adds (planner_comm.cc), where no collective fit replaces it.
    const bool inter_lat = t.inter_GBps > 0 && h.latency_inter_us > 0;
    const double lat = inter_lat ? h.latency_inter_us : h.latency_us;
    if (lat > 0 && (t.inter_GBps > 0 || h.collectives.empty())) {
      const std::string head = fig;
      std::snprintf(fig, sizeof fig, "%s + %g us per ring step", head.c_str(), lat);
      why += "; latency: " + source(inter_lat ? "latency_inter_us" : "latency_us");
    }
    // And the base per collective call (Hardware::latency_call_us), where the group has a collective.
    bool collective = false;
    for (const planner::CommRow& c : r.comm)
      if (c.group == g &&
          (c.op == "all_reduce" || c.op == "all_gather" || c.op == "reduce_scatter" || c.op == "broadcast") &&
          (c.inter_node || !h.collectives.count(c.op)))
        collective = true;
    if (h.latency_call_us > 0 && collective) {
      const std::string head = fig;
      std::snprintf(fig, sizeof fig, "%s + %g us per call", head.c_str(), h.latency_call_us);
      why += "; per call: " + source("latency_call_us");
    }
    // NCCL's plateau of a ring across nodes (Hardware::ring_plateau), where it applied.
    if (std::any_of(r.comm.begin(), r.comm.end(), [&](const planner::CommRow& c) {
          return c.group == g && planner::ring_plateau_applies(c, h);
        })) {
      const std::string head = fig;
      std::snprintf(fig, sizeof fig, "%s; all-reduce latency x %g", head.c_str(), h.ring_plateau);
      why += "; plateau: " + source("ring_plateau");
    }
    std::printf("  %-16s %10.4g  %-44s %s\n", ("comm " + g).c_str(), t.s, fig, why.c_str());
  }
  std::printf("  %-16s %10s  %-44s %s\n", "placement", "",
              in.pp_inside_dp ? "tp-cp-pp-dp (Llama 3's order; --order)" : "tp-cp-dp-pp (Megatron's order; --order)",
              (std::to_string(in.ranks_per_node) + " ranks per node").c_str());
  std::snprintf(fig, sizeof fig,
                in.tp_overlap == planner::TpOverlap::wgrad ? "of %.4g s communication; PP, fwd and row-parallel TP always"
                                                           : "of %.4g s communication; TP, PP always",
                r.comm_s);
  std::printf("  %-16s %10.4g  %-44s %s\n", "exposed comm", r.exposed_comm_s, fig,
              in.overlap ? "DP hidden under backward (--overlap), only the excess shown"
              : !h.host_kernels && (in.shard == dp::Shard::zero3 || in.shard == dp::Shard::hsdp ||
                                    in.shard == dp::Shard::hzero) && in.prefetch > 0
                  ? "the sharded gathers and reduce-scatters hidden under their phase (device, prefetch)"
              : in.tp_overlap == planner::TpOverlap::wgrad
                  ? "column-parallel bwd TP collectives hidden behind their GEMMs (--tp-overlap wgrad, below)"
                  : "nothing overlapped");
  if (!h.host_kernels || h.overlap_compute_slowdown > 0) {
    // Of the exposed comm: what overlap cannot hide, and the compute it slows (planner_comm.cc's time_comm).
    std::printf("  %-16s %10.4g  %-44s %s\n", "unhidden comm", r.unhidden_comm_s,
                "in exposed comm: FSDP first unit gathers, last reduce-scatter; DDP last bucket",
                "by construction (PyTorch FSDP prefetch, arXiv:2304.11277; DDP buckets, arXiv:2006.15704)");
    std::snprintf(fig, sizeof fig, "in exposed comm: compute beside hidden collectives x %.3g", h.overlap_compute_slowdown);
    std::printf("  %-16s %10.4g  %-44s %s\n", "overlap slowdown", r.overlap_slowdown_s, fig,
                source("overlap_compute_slowdown").c_str());
  }
  if (in.tp_overlap == planner::TpOverlap::wgrad) {
    // planner_comm.cc's time_comm: each column-parallel backward collective behind the GEMM it runs beside.
    std::snprintf(fig, sizeof fig, "hidden: %.4g s of %.4g s column-parallel bwd TP comm behind its GEMMs",
                  r.tp_hidden_s, r.tp_overlap_comm_s);
    std::printf("  %-16s %10.4g  %-44s %s\n", "TP hidden", r.tp_hidden_s, fig,
                "--tp-overlap wgrad: Megatron-LM 2755bcb87b megatron/mpu/layers.py "
                "LinearWithGradAccumulationAndAsyncCommunication.backward (all-reduce/reduce-scatter beside dW, "
                "sp all-gather beside dx)");
    std::snprintf(fig, sizeof fig, "in exposed comm: compute beside it x %.3g", h.overlap_compute_slowdown);
    std::printf("  %-16s %10.4g  %-44s %s\n", "TP slowdown", r.tp_overlap_slowdown_s, fig,
                source("overlap_compute_slowdown").c_str());
  }
  if (h.host_op_us > 0) {
    if (r.loop_syncs > 0)
      std::snprintf(fig, sizeof fig, "%lld ops, %lld Megatron loop syncs at %g us host each",
                    (long long)r.host_ops, (long long)r.loop_syncs, h.host_op_us);
    else
      std::snprintf(fig, sizeof fig, "%lld ops at %g us host each; exposed where above device time",
                    (long long)r.host_ops, h.host_op_us);
    std::printf("  %-16s %10.4g  %-44s %s\n", "per-op overhead", r.host_overhead_s, fig, source("host_op_us").c_str());
  } else {
    std::printf("  %-16s %10s  %-44s %s\n", "per-op overhead", "0", "kernel launch and framework overhead",
                "not modelled: the profile gives no host_op_us (built-in GPU profiles only)");
  }
  std::printf("  %-16s %10.4g\n", "step", r.step_s);
}

int run_plan(PlanFlags& f, const Env& env) {
  if (!f.validate.empty()) {
    require(f.model.empty() && f.params.empty() && !f.layers && !f.channels && !f.heads && f.mesh.empty() &&
                f.strategy.empty() && f.against.empty() && f.machine.empty() && f.csv.empty() && f.dp == 1 &&
                f.tp == 1 && f.cp == 1 && f.pp == 1 && f.ep == 1,
            "--validate: plans the rows of the published table (each names its machine); give only --validate, "
            "--max-median and --max-memory-error");
    for (const CLI::Option* o : f.hw_flags)
      require(o->count() == 0, "--validate: " + o->get_name() + " is the row's machine's (give only --validate)");
    return run_validate(f);
  }
  require(f.max_median_pct < 0, "--max-median: only with --validate");
  require(f.max_memory_pct < 0, "--max-memory-error: only with --validate");
  if (!f.against.empty()) return run_against(f, env);
  const planner::PlanInput in = resolve(f);
  const planner::PlanResult r = planner::plan(in);
  std::fputs(planner::format_plan_table(in, r).c_str(), stdout);
  if (f.explain) print_explain(f, in, r);
  if (f.csv.empty()) return 0;

  const auto now = std::chrono::system_clock::now();
  RunMeta meta;
  meta.run_id = make_run_id(now);
  meta.kind = "plan";
  meta.timestamp = iso8601_utc(now);
  meta.git_rev = env.git_rev;
  meta.host = host_name();
  meta.backend = "analytic";
  meta.world = r.world;
  meta.mesh = planner::mesh_spec(in);
  CsvRecord rec = planner::plan_record(in, r);
  rec.set("machine", f.machine);  // the profile as given (name or file); empty: figures typed by hand
  rec.set("plan_options", planner::plan_options(in, typed_hardware(f)));
  if (f.csv == "-") {
    const auto header = ResultsSchema::builtin().header("plan");
    std::vector<std::string> row;
    auto common = meta.fields();
    for (const std::string& col : header) {
      const std::string* v = rec.find(col);
      std::string value = v ? *v : "";
      for (auto& [k, cv] : common)
        if (k == col) value = cv;
      row.push_back(value);
    }
    std::fputs(("\n" + csv_format_row(header) + csv_format_row(row)).c_str(), stdout);
  } else {
    ResultWriter w(f.csv, "plan");
    w.write(meta, rec);
    std::printf("\nwrote a plan row to %s\n", f.csv.c_str());
  }
  return 0;
}

}  // namespace

void register_plan(CLI::App& root, Registry& reg, const Env& env) {
  auto f = std::make_shared<PlanFlags>();
  CLI::App* app = root.add_subcommand("plan", "analytic memory / comm / time at any scale (no run)");
  // A given size is a size: 0 is refused naming the flag, not read as "not given".
  const auto kPositive = CLI::Range(int64_t(1), int64_t(1) << 40);
  app->add_option("--model", f->model, "named model (" + [] {
    std::string s;
    for (const auto& n : planner::planner_model_names()) s += (s.empty() ? "" : ", ") + n;
    return s;
  }() + ")");
  app->add_option("--layers", f->layers, "custom shape: transformer blocks L")->check(kPositive);
  app->add_option("--channels", f->channels, "custom shape: channels C")->check(kPositive);
  app->add_option("--heads", f->heads, "custom shape: attention heads NH")->check(kPositive);
  app->add_option("--vocab", f->vocab, "custom shape: vocabulary V (default 50257)")->check(kPositive);
  app->add_option("--seq", f->seq, "tokens per sequence (default: the model's context; custom 1024)")->check(kPositive);
  app->add_option("--params", f->params, "parameter count only (e.g. 7e9, 175B, 1T): model states and DP");
  app->add_option("--mesh", f->mesh, "the mesh in the run spec's text form, e.g. dp12.tp8.pp16.rpn8");
  app->add_option("--strategy", f->strategy, "strategy options in the run spec's text form, e.g. "
                                             "shard=zero1,schedule=interleaved,virtual_stages=2");
  app->add_option("--dp", f->dp, "data-parallel size")->check(kPositive);
  app->add_option("--tp", f->tp, "tensor-parallel size")->check(kPositive);
  app->add_option("--ep", f->ep, "expert-parallel size (a mixture-of-experts model; divides dp and the experts)")->check(kPositive);
  app->add_option("--cp", f->cp, "context-parallel size (ring attention)")->check(kPositive);
  app->add_option("--pp", f->pp, "pipeline-parallel size")->check(kPositive);
  app->add_flag("--sp", f->sp, "Megatron sequence parallel (with --tp)");
  app->add_option("--shard", f->shard, "none (DDP)|zero1|zero2|zero3|hsdp|hzero (default none)");
  app->add_option("--shard-group", f->shard_group, "hsdp shard group size F (default: dp ranks per node)")->check(kPositive);
  app->add_option("--offload", f->offload, "none|optimizer");
  app->add_option("--precision", f->precision, "fp64|fp32|bf16-mixed (default bf16-mixed)");
  app->add_option("--microbatch-size", f->in.microbatch_size, "sequences per microbatch (default 1)")->check(kPositive);
  app->add_option("--global-batch", f->in.global_batch, "sequences per step (default dp*microbatch-size*pp)")->check(kPositive);
  app->add_option("--recompute", f->recompute,
                  "none|selective|full|op (op: torchtitan's op-level checkpointing, every other matmul recomputed)");
  app->add_flag("--dropout", f->in.dropout, "Megatron's GPT dropout (attention and hidden, p = 0.1 by default there): its masks in memory, its kernels' traffic in time (the canonical model has none)");
  app->add_option("--schedule", f->schedule, "gpipe|1f1b|interleaved|zb-h1|2bw (default 1f1b)");
  app->add_option("--virtual-stages", f->virtual_stages, "model chunks per rank (interleaved)")->check(kPositive);
  app->add_flag("--overlap", f->overlap, "DDP overlaps its bucket all-reduces with backward (overlap=on; shard none, no "
                                        "pipeline): only the excess is exposed");
  app->add_option("--machine", f->machine, "a machine profile: " + [] {
    std::string s;
    for (const auto& m : planner::builtin_machines()) s += (s.empty() ? "" : ", ") + m.name();
    return s;
  }() + " (datasheet peaks, sources in suites/planner/machine.cc) or a TOML file; the flags below override it")
      ->check(non_empty());  // "" would silently mean "no profile"
  f->hw_flags = {
      app->add_option("--peak-tflops", f->in.hw.peak_tflops, "per-rank peak TFLOP/s (enables the time estimate)"),
      app->add_option("--bw-intra", f->in.hw.bw_intra_GBps, "per-rank intra-node bandwidth, GB/s"),
      app->add_option("--bw-inter", f->in.hw.bw_inter_GBps, "per-rank inter-node bandwidth, GB/s"),
      app->add_option("--latency-us", f->in.hw.latency_us, "per-step link latency, us (default 0)"),
      app->add_option("--gemm-efficiency", f->in.hw.gemm_efficiency,
                      "fraction of the peak the model's GEMMs reach, in (0, 1] (default 1)"),
      app->add_option("--mem-bw", f->in.hw.mem_bw_GBps,
                      "per-rank device-memory bandwidth, GB/s: times the non-GEMM work (default 0: not timed)"),
      app->add_option("--gemm-spread", f->in.hw.gemm_spread,
                      "the standard deviation of a GPU's GEMM time over identical GPUs, a fraction of the typical "
                      "one's, in [0, 0.5): the world's GEMMs run at its slowest GPU's pace (default 0: identical; "
                      "a100 and a100-2022 carry a fleet's)")};
  f->rpn_flag = app->add_option("--ranks-per-node", f->ranks_per_node,
                                "ranks per node (default: the machine's, else all on one node)")
                    ->check(kPositive);
  app->add_option("--order", f->order,
                  "placement of the axes over ranks, fastest first: tp-cp-dp-pp (Megatron's, default) or tp-cp-pp-dp "
                  "(Llama 3's): which groups share a node");
  app->add_option("--attention", f->attention,
                  "the attention kernel: unfused (default: scores materialized, timed as GEMMs and softmax) or "
                  "flash (FlashAttention-2) or flash-triton (Tri Dao's Triton FlashAttention), at the profile's rates "
                  "by head dimension and sequence, else its flash_attention_tflops_bf16");
  app->add_option("--kernels", f->kernels,
                  "the memory-bound kernels: fused (default: Megatron's fused norms and activations) or eager "
                  "(PyTorch eager ops with the model source's fp32 upcasts, as torchtitan runs Llama without "
                  "torch.compile; llama family only) or eager-fused-norm (eager, the RMSNorms one Triton kernel "
                  "each: torchtitan's fused_rmsnorm)");
  app->add_option("--sp-gather", f->sp_gather,
                  "with --sp, the backward's column-parallel inputs: regather (default: all-gathered again from the "
                  "stored shards, as Megatron-LM) or saved (the forward's gathered inputs kept, as PyTorch DTensor "
                  "and torchtitan)");
  app->add_option("--grad-reduce", f->grad_reduce,
                  "the dtype of the data-parallel gradient reduce (reduce-scatter/all-reduce rows): bf16 or fp16 "
                  "(2 bytes: the default under bf16-mixed) or fp32 (4 bytes: FSDP2 reduce_dtype=float32, "
                  "Megatron-LM --accumulate-allreduce-grads-in-fp32); the parameter all-gathers keep their bytes");
  app->add_option("--bwd-prefetch", f->bwd_prefetch,
                  "FSDP's backward prefetch on a GPU profile (shard zero3/hsdp/hzero): pre (default: BACKWARD_PRE, "
                  "PyTorch FSDP's default: the next unit's all-gather hidden beside the current gradient "
                  "computation; FSDP2 always) or post (BACKWARD_POST, composer's default: issued after it, so each "
                  "backward all-gather is waited for)");
  app->add_option("--grad-accum", f->grad_accum,
                  "a DDP run's gradients (shard none): buffer (default: the engine's, accumulated where produced, "
                  "zeroed once a step) or autograd (PyTorch's .grad, as torch DDP under no_sync and Megatron-LM's "
                  "local DDP without contiguous buffers: an in-place add per microbatch after the first, the "
                  "all-reduce's flat bucket copied in, divided and copied back)");
  app->add_option("--optimizer", f->optimizer,
                  "the optimizer step's kernels, as the run's framework runs them: fused (default: one pass over "
                  "params, grads and states), megatron-fp16 (Megatron-LM's --fp16 optimizer: grads to fp32, unscale, "
                  "norm, FusedAdam, params copied back), torch-foreach (torch.optim.AdamW foreach and "
                  "clip_grad_norm_ foreach, as torchtitan) or composer (composer's DecoupledAdamW and FSDP "
                  "clip_grad_norm_, as llm-foundry's MPT); needs bf16-mixed");
  app->add_option("--loss", f->loss,
                  "the LM head's loss kernels: fused (default), megatron-fp32 (Megatron-LM's "
                  "vocab_parallel_cross_entropy over the fp32 logits: max, sub_, exp, sum, div_ and backward mul_), "
                  "flash-xentropy (flash-attn 1.0.9's fused cross entropy: the logits read forward, read and the "
                  "gradient written backward) or composer-flash-xentropy (that and composer's training metrics, two "
                  "fp32 cross entropies over the logits each microbatch, as llm-foundry's MPT)");
  app->add_option("--train-loop", f->train_loop,
                  "the training loop around the model: none (default) or megatron-lm (Megatron-LM's pretrain_gpt.py "
                  "loop at 6985e58938 and 2755bcb87b: the batch and s x s mask per microbatch, its timers' "
                  "synchronizations on a GPU profile, the batch's tp broadcast, the loss's dp all-reduce, the "
                  "model-parallel norm and found_inf all-reduces)");
  app->add_option("--tp-overlap", f->tp_overlap,
                  "tensor-parallel overlap on a GPU profile: none (default: every TP collective waited for) or "
                  "wgrad (Megatron-LM's async column-parallel backward, on by default there from September 2021: the "
                  "input gradient's all-reduce, with --sp its reduce-scatter, beside the weight-gradient GEMM, and "
                  "with --sp the saved input's all-gather beside the input-gradient GEMM; needs --tp > 1)");
  app->add_option("--csv", f->csv, "append a plan row to FILE ('-': print it)");
  app->add_option("--against", f->against,
                  "a sweep CSV (or run directory): plan its measured points with --machine and print the error of "
                  "each and the median by axis");
  app->add_option("--validate", f->validate,
                  "a published table (configs/published/*.csv): plan every row on its machine and print the error "
                  "of each, the median and the worst");
  app->add_flag("--explain", f->explain,
                "the step as parts (GEMMs, memory-bound, bubble, comm by group, exposed comm), each with the profile "
                "figure it used and that figure's source");
  app->add_option("--max-median", f->max_median_pct,
                  "with --validate: exit 1 when the median |error| exceeds this many percent")
      ->check(CLI::Range(0.0, 1000.0));
  app->add_option("--max-memory-error", f->max_memory_pct,
                  "with --validate: exit 1 when a row's planned peak memory per GPU is further than this many percent "
                  "from its published_gib (and when no row gives one)")
      ->check(CLI::Range(0.0, 1000.0));
  reg.push_back({app, [f, env] { return run_plan(*f, env); }});
}

}  // namespace pb::cli
