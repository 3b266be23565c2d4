// The analytic planner (model and time assumptions in planner.h): checks the
// input, lays out the pipeline and the data axis, and assembles the parts
// (planner_parts.h): memory (planner_memory.cc), communication
// (planner_comm.cc) and time (planner_time.cc).
#include "suites/planner/planner.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <optional>

#include "harness/status.h"
#include "impl/expert_parallel/cost.h"
#include "impl/expert_parallel/options.h"
#include "impl/pipeline/validate.h"
#include "suites/planner/planner_parts.h"

namespace pb::planner {
namespace {

using namespace parts;

void check_input(const PlanInput& in) {
  auto positive = [](const char* flag, int64_t v) {
    require(v >= 1, std::string(flag) + ": must be >= 1 (got " + std::to_string(v) + ")");
  };
  positive("--dp", in.dp);
  positive("--tp", in.tp);
  positive("--cp", in.cp);
  positive("--pp", in.pp);
  positive("--microbatch-size", in.microbatch_size);
  require(in.global_batch >= 0, "--global-batch: must be >= 1");
  require(in.seq >= 0, "--seq: must be >= 1");
  require(in.ranks_per_node >= 0, "--ranks-per-node: must be >= 1");
  if (in.shape) {
    in.shape->validate();
    const ModelConfig& m = *in.shape;
    if (m.llama()) {  // the family's shards (docs/planner.md#the-llama-family)
      require(m.ffn % in.tp == 0, "--tp: must divide the llama MLP's ffn (" + std::to_string(m.ffn) + "), got " +
                                      std::to_string(in.tp));
      require(m.kv_heads >= in.tp ? m.kv_heads % in.tp == 0 : in.tp % m.kv_heads == 0,
              "--tp: must divide, or be a multiple of, the model's kv_heads (" + std::to_string(m.kv_heads) +
                  "), got " + std::to_string(in.tp));
    }
    require(!in.recompute_even_matmuls ||
                (in.recompute == Recompute::none && in.pp == 1 && m.moe.experts == 0),
            "recompute op (every other matmul recomputed): plans with one pipeline stage and dense blocks only "
            "(got pp " + std::to_string(in.pp) + (m.moe.experts ? ", a mixture of experts" : "") + ")");
    require(!in.dropout || !m.llama(),
            "--dropout: Megatron's GPT dropout; the llama family has none (--model " + m.name + ")");
    require(!in.eager_kernels || m.llama(),
            "--kernels eager: counted for the llama family's blocks only (torchtitan's eager ops), not --model " +
                m.name);
  } else {
    require(!in.eager_kernels, "--kernels eager: needs a llama-family model shape, not --params");
    require(!in.recompute_even_matmuls, "recompute op: needs a model shape, not --params");
    require(in.params >= 1, "--params: must be >= 1");
    require(in.tp == 1 && in.cp == 1 && in.pp == 1,
            "--tp/--cp/--pp: need a model shape (--model or --layers/--channels/--heads), not --params");
  }
  const int64_t R = in.ranks_per_node;
  for (int64_t span : {int64_t(in.tp), int64_t(in.tp) * in.cp})
    require(R == 0 || R % span == 0 || span % R == 0,
            "--ranks-per-node: must divide, or be a multiple of, tp and tp*cp (got " + std::to_string(R) + ")");
  const Hardware& h = in.hw;
  // A rate is 0 (not given) or a finite number in a range no device leaves:
  // inf or 1e300 TFLOP/s would print NaN, 1e-308 GB/s an infinite step.
  auto rate = [](const char* name, double v, double lo, double hi) {
    char buf[64];
    std::snprintf(buf, sizeof buf, "%g", v);
    char range[64];
    std::snprintf(range, sizeof range, "[%g, %g]", lo, hi);
    require(std::isfinite(v) && (v == 0 || (v >= lo && v <= hi)),
            std::string(name) + ": must be 0 (not given) or a finite number in " + range + ", got " + buf);
  };
  rate("--peak-tflops (peak TFLOP/s per rank)", h.peak_tflops, 1e-6, 1e6);
  rate("--bw-intra (GB/s)", h.bw_intra_GBps, 1e-6, 1e7);
  rate("--bw-inter (GB/s)", h.bw_inter_GBps, 1e-6, 1e7);
  rate("--mem-bw (GB/s)", h.mem_bw_GBps, 1e-6, 1e7);
  for (const KindRate& k : kKindRates) rate(k.key, h.*k.rate, 1e-6, 1e7);
  require(!(h.norm_mem_bw_GBps > 0 && h.shared_mem_bw_GBps > 0),
          "norm_mem_bw_GBps: give it or shared_mem_bw_GBps (the norms and adds at one rate), not both");
  require(!(h.eager_norm_mem_bw_GBps > 0 && h.shared_mem_bw_GBps > 0),
          "eager_norm_mem_bw_GBps: give it or shared_mem_bw_GBps (the norms and adds at one rate), not both");
  rate("--latency-us", h.latency_us, 0, 1e9);
  rate("latency_inter_us", h.latency_inter_us, 0, 1e9);
  rate("latency_call_us", h.latency_call_us, 0, 1e9);
  for (const GemmRate& g : h.gemm_rates) rate("a GEMM table's gflops", g.gflops, 1e-6, 1e9);
  for (const auto& [op, fits] : h.collectives)
    for (const CollectiveFit& c : fits) {
      rate(("collective " + op + " GBps").c_str(), c.GBps, 1e-6, 1e7);
      rate(("collective " + op + " alpha_us").c_str(), c.alpha_us, 0, 1e9);
    }
  require(h.peak_tflops >= 0 && h.bw_intra_GBps >= 0 && h.bw_inter_GBps >= 0 && h.latency_us >= 0,
          "--peak-tflops/--bw-intra/--bw-inter/--latency-us: must be >= 0");
  require(h.gemm_efficiency > 0 && h.gemm_efficiency <= 1, "--gemm-efficiency: must be in (0, 1]");
  require(h.mem_bw_GBps >= 0, "--mem-bw: must be >= 0");
  require(h.ring_plateau >= 1 && h.ring_plateau <= 10, "ring_plateau: must be in [1, 10] (NCCL's 1.4 or 1.9; 1: none)");
  require(h.gemm_spread >= 0 && h.gemm_spread < 0.5, "--gemm-spread: must be in [0, 0.5) (a fraction of the typical "
                                                      "GPU's GEMM time; NaN is not a spread)");
  require(h.shared_mem_bw_GBps >= 0 && std::isfinite(h.shared_mem_bw_GBps),
          "shared_mem_bw_GBps: must be a finite number >= 0");
  require(h.optimizer_mem_bw_GBps >= 0 && std::isfinite(h.optimizer_mem_bw_GBps),
          "optimizer_mem_bw_GBps: must be a finite number >= 0");
  require(h.buffer_mem_bw_GBps >= 0 && std::isfinite(h.buffer_mem_bw_GBps),
          "buffer_mem_bw_GBps: must be a finite number >= 0");
  require(h.compute_scale > 0 && std::isfinite(h.compute_scale), "compute_scale: must be a finite number > 0");
  require(h.corun_scale > 0 && std::isfinite(h.corun_scale) && h.corun_ranks >= 1,
          "corun_scale: must be a finite number > 0, at corun_ranks >= 1");
  require(h.core_share > 0 && h.core_share <= 1, "core_share: must be in (0, 1]");
  require(h.attention_fwd_s >= 0 && std::isfinite(h.attention_fwd_s) && h.attention_bwd_s >= 0 &&
              std::isfinite(h.attention_bwd_s),
          "attention_fwd_s/attention_bwd_s: must be finite numbers >= 0");
  for (size_t i = 0; i < h.async_call_cost.size(); ++i) {
    const AsyncCallCost& a = h.async_call_cost[i];
    require(a.compute_us > 0 && std::isfinite(a.compute_us) && a.cost_us >= 0 && std::isfinite(a.cost_us),
            "async_call_cost: compute_us must be a finite number > 0 and cost_us finite and >= 0");
    require(i == 0 || a.compute_us > h.async_call_cost[i - 1].compute_us,
            "async_call_cost: compute_us must be strictly ascending");
  }
  require(in.prefetch >= 0, "prefetch: must be >= 0 (units gathered ahead)");
  // BACKWARD_POST only changes when a prefetched sharded axis's backward
  // gathers are waited for on a device: elsewhere it would plan nothing.
  require(!in.backward_prefetch_post || device_prefetches(in),
          std::string("--bwd-prefetch post: FSDP's backward prefetch acts on a sharded, prefetched data axis (shard "
                      "zero3, hsdp or hzero; prefetch > 0) timed on a GPU profile (--machine); got shard ") +
              std::string(dp::shard_name(in.shard)) + ", prefetch " + std::to_string(in.prefetch) +
              (in.hw.peak_tflops > 0 ? (in.hw.host_kernels ? ", not a GPU profile" : "") : ", no machine"));
  if (in.tp_overlap == TpOverlap::wgrad) {
    require(in.tp > 1, "--tp-overlap wgrad: hides the tensor-parallel backward collectives of the column-parallel "
                       "linears; needs --tp > 1 (got --tp " + std::to_string(in.tp) + ")");
    require(!in.hw.host_kernels,
            "--tp-overlap wgrad: a GPU profile's (--machine a100, h100, ...): the CPU profiles and typed figures "
            "plan parabench's tensor-parallel ranks, which wait for each collective");
  }
  require(!in.grad_accum_autograd || (in.shard == dp::Shard::none && in.ep == 1),
          "--grad-accum autograd: PyTorch's .grad accumulation under DDP (shard none, no expert parallel); got shard " +
              std::string(dp::shard_name(in.shard)) + (in.ep > 1 ? ", ep " + std::to_string(in.ep) : ""));
}

// The step's shape (seq, global batch, microbatches) into r, checked against
// the model and the mesh.
void check_shape(const PlanInput& in, PlanResult& r) {
  r.seq = in.seq > 0 ? in.seq : in.shape ? in.shape->maxT : 1024;
  if (in.shape)
    require(r.seq <= in.shape->maxT, "--seq: must be <= the model's context length (" +
                                         std::to_string(in.shape->maxT) + ")");
  // Mixture of experts: every composition the engine runs (impl/spec/run_spec.cc
  // validate, impl/pipeline/executor_step.cc); the rest named as not run yet.
  if (in.shape && in.shape->moe.experts > 0) {
    const std::string model = "--model " + in.shape->name + ": a mixture-of-experts model";
    const bool piped = in.pp > 1;
    require(!piped || in.schedule != pipeline::ScheduleKind::zb_h1 || in.recompute != Recompute::full,
            "--schedule: zb-h1 with recompute=full and a mixture-of-experts model: the engine does not run it (zb-h1's "
            "W reads each block's activations, which full recompute drops), so there is nothing to plan it as");
    // 2BW replays each microbatch's routing on its own weight version.
    require(!piped || in.schedule != pipeline::ScheduleKind::pipedream_2bw ||
                in.shape->moe.capacity != MoeCapacity::global || in.dp == 1,
            "--schedule: 2bw with a mixture-of-experts model needs each microbatch's own capacity (dp 1, or a "
            "model with local capacity): global capacity over dp " + std::to_string(in.dp) +
                " routes microbatches of different weight versions together");
  }
  // As the executor (impl/pipeline/executor_step.cc): 2BW's two weight
  // versions are held in full, so the states shard no further than zero1.
  require(in.pp == 1 || in.schedule != pipeline::ScheduleKind::pipedream_2bw || in.shard == dp::Shard::none ||
              in.shard == dp::Shard::zero1,
          "--schedule: 2bw keeps two weight versions in full; it composes with shard none or zero1, got " +
              std::string(dp::shard_name(in.shard)));
  require(in.ep >= 1, "--ep: must be >= 1 (got " + std::to_string(in.ep) + ")");
  if (in.ep > 1) {
    require(in.shape && in.shape->moe.experts > 0,
            "--ep: expert parallel needs a mixture-of-experts model (--model tiny-moe or a [moe] config)");
    require(in.shape->moe.experts % in.ep == 0, "--ep: must divide the " + std::to_string(in.shape->moe.experts) +
                                                    " experts, got " + std::to_string(in.ep));
    // An ep group folds over the dp x cp ranks (harness/mesh.h).
    require(in.cp > 1 ? int64_t(in.dp) * in.cp % in.ep == 0 : in.dp % in.ep == 0,
            in.cp > 1 ? "--ep: must divide --dp x --cp (" + std::to_string(int64_t(in.dp) * in.cp) + "), got " +
                            std::to_string(in.ep)
                      : "--ep: must divide --dp (" + std::to_string(in.dp) + "), got " + std::to_string(in.ep));
  }
  require(r.seq % in.cp == 0, "--cp: must divide the sequence length (" + std::to_string(r.seq) + ")");
  if (in.shape && in.cp > 1 && in.cp_algo == CpAlgo::ulysses) {
    const int heads = in.shape->NH / in.tp;
    require(heads % in.cp == 0, "--cp: ulysses shards the heads over cp: heads / tp = " + std::to_string(heads) +
                                    " is not divisible by cp" + std::to_string(in.cp) + "; use cp_algo=ring");
    if (in.shape->llama()) {
      const int64_t kv = llama_kv_heads_per_rank(*in.shape, in.tp);
      require(kv % in.cp == 0, "--cp: ulysses shards the kv heads over cp: kv heads per tp rank = " +
                                   std::to_string(kv) + " is not divisible by cp " + std::to_string(in.cp) +
                                   "; use cp_algo=ring");
    }
  }
  require(!in.sp || r.seq / in.cp % in.tp == 0, "--sp: tp must divide the per-rank sequence length");
  const int64_t per_step = int64_t(in.dp) * in.microbatch_size;
  r.global_batch = in.global_batch > 0 ? in.global_batch : per_step * in.pp;
  require(r.global_batch % per_step == 0, "--global-batch: must be a multiple of dp * microbatch-size (" +
                                              std::to_string(per_step) + ")");
  r.microbatches = r.global_batch / per_step;
  require(r.microbatches <= (int64_t(1) << 30), "--global-batch: too many microbatches per replica");
  // The byte and FLOP counts are 64-bit products of these factors: refuse
  // sizes whose products leave the range instead of wrapping (a microbatch
  // of 2^32 sequences printed 0.000 GiB of activations).
  if (in.shape) {
    const ModelConfig& m = *in.shape;
    const long double width = std::max<long double>({16.0L * m.C, 5.0L * m.NH * double(r.seq), double(m.V)});
    const long double act = (long double)in.microbatch_size * r.seq * width * m.L * 8;
    const long double tokens = (long double)r.global_batch * r.seq * 8;
    const auto text = [](long double v) {
      char buf[32];
      std::snprintf(buf, sizeof buf, "%.3Lg", v);
      return std::string(buf);
    };
    require(act < 0x1p62L, "--microbatch-size " + std::to_string(in.microbatch_size) + " x --seq " +
                               std::to_string(r.seq) + " x layers " + std::to_string(m.L) +
                               " x the widest activation (" + text(width) + " elements): " + text(act) +
                               " bytes overflow the planner's 64-bit counts (at most 2^62)");
    require(tokens * m.C * m.L < 0x1p62L,
            "--global-batch " + std::to_string(r.global_batch) + " x --seq " + std::to_string(r.seq) + " x channels " +
                std::to_string(m.C) + " x layers " + std::to_string(m.L) +
                ": the step's counts overflow the planner's 64-bit range (at most 2^62)");
  }
}

// The pipeline's schedule, partition and declared peaks.
Pipe make_pipe(const PlanInput& in, const PlanResult& r) {
  Pipe pipe;
  pipe.cfg = {in.pp, int(r.microbatches), in.virtual_stages, 1};
  try {
    pipeline::check_config(in.schedule, pipe.cfg);
  } catch (const InputError& e) {
    throw InputError(std::string(e.what()) + " (microbatches = global-batch / (dp * microbatch-size))");
  }
  pipe.part = pipeline::partition_layers(in.shape ? in.shape->L : in.pp * in.virtual_stages, in.pp,
                                         in.virtual_stages);
  pipe.in_flight = pipeline::declared_peak_in_flight(in.schedule, pipe.cfg);
  if (in.shape && pipe.staged()) {
    pipeline::ScheduleConfig bounded = pipe.cfg;
    bounded.microbatches = std::min(bounded.microbatches, pipeline::comm_peak_microbatches(pipe.cfg));
    pipe.comm_schedule = pipeline::make_schedule(in.schedule, bounded);
    if (!in.hw.host_kernels) pipe.comm_schedule = pipeline::posted_without_tags(std::move(pipe.comm_schedule), "nccl");
  }
  return pipe;
}

// Gradients are reduced and states sharded over the dp x cp ranks that hold
// the same parameters (Megatron-LM's data-parallel-with-context group).
dp::DataAxis make_axis(const PlanInput& in, const PlanResult& r) {
  dp::DataAxis axis;
  axis.dp = int64_t(in.dp) * in.cp;
  axis.shard = in.shard;
  axis.shard_group = in.hsdp_group;
  axis.offload = in.offload;
  axis.precision = in.precision;
  axis.ranks_per_node = in.ranks_per_node;
  // The dp x cp group's stride as one (the data axis knows one): tp, or with
  // pp placed inside dp (Llama 3's order) and no cp, tp x pp. place_groups
  // (planner_comm.cc) recomputes which of its rows cross nodes.
  axis.stride = in.pp_inside_dp && in.cp == 1 ? int64_t(in.tp) * in.pp : in.tp;
  axis.grad_accum = r.microbatches;
  axis.on_device = !in.hw.host_kernels;
  return axis;
}

// A mixture-of-experts model: in pipeline stages, the experts' data axis
// (pipe.experts); under expert parallel, the expert-parallel rank's state
// costs.
std::optional<ep::StateCosts> expert_states(const PlanInput& in, const PlanResult& r, Pipe& pipe) {
  std::optional<ep::StateCosts> eps;
  const bool moe_stages = in.shape && in.shape->moe.experts > 0 && pipe.staged();
  if (moe_stages) {  // the pipeline executor's two components per stage (impl/pipeline/executor.h)
    require(r.global_batch <= INT32_MAX && r.seq <= INT32_MAX && in.ranks_per_node <= INT32_MAX,
            "--global-batch: mixture-of-experts pipeline plans take at most 2^31-1 sequences (got " +
                std::to_string(r.global_batch) + ")");
    const dp::DpOptions eo = ep::expert_options(ep_spec(in, r.seq, r.microbatches, r.global_batch));
    pipe.experts = dp::data_axis(eo, in.precision, int(r.microbatches));
    pipe.experts->on_device = !in.hw.host_kernels;
  } else if (in.ep > 1) {
    // The expert-parallel rank's own cost functions take a run spec (32-bit sizes).
    require(r.global_batch <= INT32_MAX && r.seq <= INT32_MAX && in.ranks_per_node <= INT32_MAX,
            "--global-batch: expert parallel plans take at most 2^31-1 sequences (got " +
                std::to_string(r.global_batch) + ")");
    const RunSpec spec = ep_spec(in, r.seq, r.microbatches, r.global_batch);
    ep::validate(spec);
    eps = ep::state_costs(spec);
  }
  return eps;
}

}  // namespace

bool device_prefetches(const PlanInput& in) {
  const bool sharded = in.shard == dp::Shard::zero3 || in.shard == dp::Shard::hsdp || in.shard == dp::Shard::hzero;
  return sharded && in.prefetch > 0 && in.hw.peak_tflops > 0 && !in.hw.host_kernels;
}

PlanResult plan(const PlanInput& in) {
  check_input(in);
  PlanResult r;
  r.world = world_of(in);
  // The slowest of the world's GPUs (Hardware::gemm_spread), once: the comm
  // plan's overlapped GEMMs and the step's compute both run at its pace.
  r.slowest_gpu = in.hw.gemm_spread > 0 ? 1 + in.hw.gemm_spread * expected_max_normal(r.world) : 1;
  // The llama family's count is the planner's own (its units at tp 1, from the
  // config's fields), which plan_flops_test holds to the published totals.
  r.params_total = !in.shape ? in.params
                   : in.shape->llama() ? [&] {
                       int64_t n = 0;
                       for (int64_t u : llama_unit_params(*in.shape, 1)) n += u;
                       return n;
                     }()
                                       : in.shape->num_params();
  check_shape(in, r);
  Pipe pipe = make_pipe(in, r);
  const dp::DataAxis axis = make_axis(in, r);
  const std::optional<ep::StateCosts> eps = expert_states(in, r, pipe);
  const std::vector<int64_t> worst_units = plan_memory(in, axis, pipe, eps ? &*eps : nullptr, r);
  plan_comm(in, axis, pipe, eps ? &*eps : nullptr, worst_units, r);
  require(in.tp_overlap == TpOverlap::none ||
              std::any_of(r.comm.begin(), r.comm.end(), [](const CommRow& c) { return !c.overlaps.empty(); }),
          "--tp-overlap wgrad: the planned rank (pipeline rank " + std::to_string(r.worst.stage) +
              ") has no column-parallel backward collective to hide");
  plan_flops(in, pipe, r);
  if (in.hw.peak_tflops <= 0) return r;
  const double flash_tflops =
      in.flash_attention && in.shape
          ? flash_attention_rate(in.hw, in.flash_triton, in.shape->head_size(), r.seq / in.cp)
          : 0.0;
  if (flash_tflops > 0 && in.hw.attention_fwd_s <= 0) {
    // FlashAttention's core at the profile's rate (planner.h Hardware::flash_attention_tflops,
    // flash_rates: by head dimension and sequence where the profile has them).
    PlanInput fa = in;
    const ModelConfig& m = *in.shape;
    const double fwd_flops = 4.0 * double(in.microbatch_size) * double(r.seq / in.cp) * double(r.seq) *
                             double(m.C) / double(in.tp) / 2.0;
    fa.hw.attention_fwd_s = fwd_flops / (flash_tflops * 1e12);
    fa.hw.attention_bwd_s = 2.5 * fa.hw.attention_fwd_s;
    fa.hw.attention_includes_cp = false;
    time_step(fa, pipe, r);
  } else {
    time_step(in, pipe, r);
  }
  // A plan row is never NaN or infinite: the figures are checked above, and
  // a combination that still leaves the range is refused, naming the results.
  for (const auto& [name, v] : {std::pair<const char*, double>{"step", r.step_s}, {"compute", r.compute_s},
                                {"bubble", r.bubble_s}, {"exposed comm", r.exposed_comm_s},
                                {"tokens/s", r.tokens_per_s}, {"MFU", r.mfu}})
    require(std::isfinite(v) && v >= 0 && v < 1e30,
            std::string("plan: the ") + name + " estimate is not a finite number (" + std::to_string(v) +
                "): the hardware figures (--peak-tflops, --bw-intra, --bw-inter, --mem-bw, --latency-us or the "
                "profile's) are out of any device's range");
  return r;
}

}  // namespace pb::planner
