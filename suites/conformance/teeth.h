// The checker's teeth, measured (docs/numerics.md#teeth): every injected fault of
// every data-parallel strategy and every pipeline schedule, run under the
// conformance engine at a given precision, with the checks that failed. A
// fault counts as caught when any check fails: bit equality with the replay,
// the ratio rule, the exact memory figures or the exact communication bytes.
// The fault cases are the ones a CI user runs (tiny model, dp 4 or pp 2-3,
// three steps): conformance_teeth_test asserts every one is caught at fp32
// and bf16-mixed, and teeth_table prints docs/numerics.md#the-teeth-table.
// The faults are the strategies' declarations (impl/spec/fault.h): a case
// names a correct run and the fault axes measured on it, and every declared
// fault of those axes that applies to the run is injected, one at a time.
#pragma once
#include <string>
#include <vector>

#include "impl/spec/fault.h"
#include "suites/conformance/engine.h"

namespace pb {

struct FaultCatch {
  std::string strategy;  // the mesh, then ConformanceResult::strategy without the fault
  std::string fault;
  Precision precision = Precision::fp32;
  bool bitwise_declared = false;
  bool bits = false, rule = false, fp64 = false, memory = false, comm = false;  // failed checks
  double worst_ratio = 0;  // largest rule ratio (error / noise floor; fails above C)
  bool caught() const { return bits || rule || fp64 || memory || comm; }
  std::string caught_by() const;  // "bits+rule", "comm", ... or "NOT CAUGHT"
};

// Which checks of r failed (memory and comm: any rank's, by rank 0's rows or
// the all-rank mismatch count).
FaultCatch classify(const ConformanceResult& r, std::string strategy, std::string fault);

// A correct run and the fault axes the teeth measure on it.
struct TeethCase {
  StrategyRun base;
  std::vector<FaultAxis> axes;
};
// Every fault of the case's axes that its strategy declares, that applies to
// the base (FaultDecl::applies) and that the strategy's validate accepts
// there, injected alone and run under the conformance engine.
std::vector<FaultCatch> fault_catches(const std::vector<TeethCase>& cases);
// The faults of `axis` some strategy declares (each name once).
std::vector<FaultDecl> declared_faults(FaultAxis axis);

// The data-parallel case the teeth are measured on: tiny model, dp 4, three
// steps, HSDP with F = 2, hZeRO on two nodes of two ranks.
StrategyRun dp_case(dp::Shard shard, int micro, Precision p);

// Every fault of every strategy (DDP with accumulation, ZeRO-1/2/3, HSDP,
// hZeRO at dp 4; offload's own fault on each shard), at precision p.
std::vector<TeethCase> dp_teeth_cases(Precision p);
std::vector<FaultCatch> dp_fault_catches(Precision p);
// Every pipeline fault on every schedule it applies to
// (pipeline::validate decides), at precision p.
std::vector<TeethCase> pipeline_teeth_cases(Precision p);
std::vector<FaultCatch> pipeline_fault_catches(Precision p);

// The tensor-parallel case: tiny-tp (V = 67, padded at every tp), tp 2 or 3,
// optional dp, three steps; `opts` in the strategy text form.
StrategyRun tp_case(int dp, int tp, const std::string& opts, Precision p);
// The same on tiny-llama (kv_heads 2: replicated at tp 4).
StrategyRun llama_tp_case(int dp, int tp, const std::string& opts, Precision p);
// tiny-llama (4 blocks) under pipeline parallel: 1F1B and GPipe x ZeRO-3 at
// dp2, interleaved (v 2), 2BW and ZB-H1, pp 2 (the pipeline teeth's llama rows).
std::vector<StrategyRun> llama_pipe_cases(Precision p);
// tiny-mixtral (SwiGLU experts, every block MoE) inside pipeline stages:
// gpipe pp2, 1f1b dp2.ep2.pp2, interleaved dp2.ep2.pp2 ZeRO-3, and the
// experts split over tp too (1f1b dp2.ep2.tp2.pp2); four blocks.
std::vector<StrategyRun> mixtral_pipe_cases(Precision p);
// tiny-mixtral under PipeDream-2BW (local capacity: each microbatch's own):
// pp2, and dp2.ep2.pp2 ZeRO-1; four blocks.
std::vector<StrategyRun> mixtral_2bw_cases(Precision p);
// Every tensor-parallel fault where it applies (tp 2 and 3, with and without
// SP, full recompute, x ZeRO-3 at dp 2; tiny-llama at tp 4 with and without
// SP), at precision p.
std::vector<TeethCase> tp_teeth_cases(Precision p);
std::vector<FaultCatch> tp_fault_catches(Precision p);

// The context-parallel case: tiny-tp, dp x tp x cp, seq 12 (16 at cp 4),
// three steps; `opts` in the strategy text form.
StrategyRun cp_case(int dp, int tp, int cp, const std::string& opts, Precision p);
// cp_case on tiny-llama (RoPE, grouped-query attention; opts applied after the model).
StrategyRun llama_cp_case(int dp, int tp, int cp, const std::string& opts, Precision p);
// Case s in two pipeline stages (pp 2) of two blocks each, four microbatches
// of one sequence: how the teeth put a tp/cp case inside stages.
StrategyRun in_two_stages(StrategyRun s);
// Every context-parallel fault where it applies (ring zigzag at cp 2 and 3,
// ring contiguous, Ulysses, tp2.cp2, dp2.cp2 x ZeRO-3, cp2.pp2 1F1B), at
// precision p.
std::vector<TeethCase> cp_teeth_cases(Precision p);
std::vector<FaultCatch> cp_fault_catches(Precision p);

// Every mixture-of-experts fault (tiny-moe under data parallel: dp2 DDP and
// ZeRO-3 with global capacity, dp2 DDP with local capacity; under expert
// parallel dp4.ep2: DDP and ZeRO-3 global, ZeRO-1 local, with the dispatch's
// and the expert reduction's faults too), at precision p.
std::vector<TeethCase> moe_teeth_cases(Precision p);
std::vector<FaultCatch> moe_fault_catches(Precision p);

// A markdown table: strategy | fault | one column per precision (caught by).
std::string catch_table_markdown(const std::vector<FaultCatch>& rows);

}  // namespace pb
