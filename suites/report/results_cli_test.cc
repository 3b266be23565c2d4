// End to end through the parabench binary: `plan` at 1T parameters on
// thousands of ranks (and its flag errors -> exit 2), `gate` on doctored
// fixture CSVs (exit 1) and unchanged ones (exit 0), and `report` producing
// valid PNGs embedded in the HTML. Fixtures come from scripts/report_fixture.py.
#include <sys/wait.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "harness/io/csv.h"
#include "harness/io/csv_schema.h"

namespace {

namespace fs = std::filesystem;
const std::string kExe = PARABENCH_EXE;
const std::string kSrc = PARABENCH_SOURCE_DIR;
const fs::path kDir = RESULTS_CLI_TEST_DIR;

// Exit code of a shell command (its output goes to DIR/last.log).
int run(const std::string& cmd) {
  fs::create_directories(kDir);
  const int st = std::system((cmd + " > " + (kDir / "last.log").string() + " 2>&1").c_str());
  return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

std::string slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::string fixture(const std::string& name, const std::string& flags = "") {
  const fs::path d = kDir / name;
  fs::remove_all(d);
  EXPECT_EQ(run("/usr/bin/python3 " + kSrc + "/scripts/report_fixture.py --out " + d.string() + " " + flags), 0)
      << slurp(kDir / "last.log");
  return d.string();
}

TEST(ResultsCli, PlanTrillionParametersWritesSchemaValidRow) {
  const fs::path csv = kDir / "plan.csv";
  fs::remove(csv);
  ASSERT_EQ(run(kExe + " plan --model megatron-1t --tp 8 --pp 64 --dp 96 --sp --shard zero1 --recompute selective"
                       " --global-batch 6144 --peak-tflops 312 --bw-intra 300 --bw-inter 25 --latency-us 5"
                       " --ranks-per-node 8 --csv " + csv.string()), 0)
      << slurp(kDir / "last.log");
  const std::string out = slurp(kDir / "last.log");
  EXPECT_NE(out.find("world 49152"), std::string::npos) << out;
  EXPECT_NE(out.find("MFU"), std::string::npos) << out;
  EXPECT_TRUE(pb::validate_csv_against_schema(csv.string(), pb::ResultsSchema::builtin()).empty());
  const pb::CsvTable t = pb::read_csv(csv.string());
  ASSERT_EQ(t.rows.size(), 1u);
  for (const char* col : {"mem_params", "mem_activations", "comm_tp_bytes", "est_step_time_s", "est_mfu"})
    EXPECT_FALSE(t.rows[0][t.column(col)].empty()) << col;
  EXPECT_EQ(t.rows[0][t.column("backend")], "analytic");
  // A parameter count alone (ZeRO-3 over 4096 ranks), printing CSV to stdout.
  EXPECT_EQ(run(kExe + " plan --params 1T --dp 4096 --shard zero3 --ranks-per-node 8 --csv -"), 0);
  EXPECT_NE(slurp(kDir / "last.log").find("run_id,kind,"), std::string::npos);
}

// The row names the machine profile (as given) and the planner's own
// non-default options (schema version 3), with the hardware figures typed by
// hand among them (on a profile or alone); a file written before them still
// validates and takes new rows under its own header.
TEST(ResultsCli, PlanRowRecordsMachineAndPlanOptions) {
  const fs::path csv = kDir / "plan_options.csv";
  fs::remove(csv);
  ASSERT_EQ(run(kExe + " plan --model gpt2-124m --dp 2 --peak-tflops 100 --bw-intra 50 --csv " + csv.string()), 0)
      << slurp(kDir / "last.log");
  ASSERT_EQ(run(kExe + " plan --model llama3-8b --tp 2 --sp --machine h100 --train-loop megatron-lm --tp-overlap wgrad"
                       " --loss megatron-fp32 --kernels eager --attention flash --sp-gather saved --grad-reduce fp32"
                       " --order tp-cp-pp-dp --recompute op --csv " + csv.string()),
            0)
      << slurp(kDir / "last.log");
  ASSERT_EQ(run(kExe + " plan --model gpt2-124m --dp 2 --dropout --grad-accum autograd --optimizer megatron-fp16"
                       " --csv " + csv.string()),
            0)
      << slurp(kDir / "last.log");
  ASSERT_EQ(run(kExe + " plan --model gpt2-124m --dp 16 --ranks-per-node 8 --machine a100 --bw-inter 12.5"
                       " --mem-bw 0.1 --attention flash --csv " + csv.string()),
            0)
      << slurp(kDir / "last.log");
  EXPECT_TRUE(pb::validate_csv_against_schema(csv.string(), pb::ResultsSchema::builtin()).empty());
  const pb::CsvTable t = pb::read_csv(csv.string());
  ASSERT_EQ(t.rows.size(), 4u);
  const size_t machine = t.column("machine"), options = t.column("plan_options");
  EXPECT_EQ(t.rows[0][machine], "");
  EXPECT_EQ(t.rows[0][options], "bw_intra_GBps=50,peak_tflops=100");
  EXPECT_EQ(t.rows[1][machine], "h100");
  EXPECT_EQ(t.rows[1][options],
            "attention=flash,grad_reduce=fp32,kernels=eager,loss=megatron-fp32,order=tp-cp-pp-dp,recompute=op,"
            "sp_gather=saved,tp_overlap=wgrad,train_loop=megatron-lm");
  EXPECT_EQ(t.rows[2][machine], "");
  EXPECT_EQ(t.rows[2][options], "dropout=1,grad_accum=autograd,optimizer=megatron-fp16");
  EXPECT_EQ(t.rows[3][machine], "a100");
  EXPECT_EQ(t.rows[3][options], "attention=flash,bw_inter_GBps=12.5,mem_bw_GBps=0.1");

  // A file of schema version 2: the plan header without the two columns.
  std::vector<std::string> old_header;
  for (size_t c = 0; c < t.header.size(); ++c)
    if (c != machine && c != options) old_header.push_back(t.header[c]);
  std::vector<std::string> old_row;
  for (size_t c = 0; c < t.header.size(); ++c)
    if (c != machine && c != options) old_row.push_back(t.rows[0][c]);
  const fs::path old_csv = kDir / "plan_v2.csv";
  {
    std::ofstream out(old_csv, std::ios::binary | std::ios::trunc);
    out << pb::csv_format_row(old_header) << pb::csv_format_row(old_row);
  }
  EXPECT_EQ(run(kExe + " validate " + old_csv.string()), 0) << slurp(kDir / "last.log");
  // A new row appended to it keeps the file's header (and stays valid).
  ASSERT_EQ(run(kExe + " plan --model gpt2-124m --machine a100 --attention flash --csv " + old_csv.string()), 0)
      << slurp(kDir / "last.log");
  EXPECT_EQ(run(kExe + " validate " + old_csv.string()), 0) << slurp(kDir / "last.log");
  const pb::CsvTable o = pb::read_csv(old_csv.string());
  EXPECT_EQ(o.header, old_header);
  EXPECT_EQ(o.rows.size(), 2u);
}

TEST(ResultsCli, PlanBadFlagsExit2) {
  for (const char* flags : {"--model gpt2-124m --dp 0", "--model gpt2-124m --shard zero5", "--model nope",
                            "--model gpt2-124m --tp 5", "--model gpt2-124m --bogus 1", "--params 1e12 --tp 2",
                            "--model gpt2-124m --params 1e9", "--model gpt2-124m --recompute some",
                            "--model gpt2-124m --dp 4 --global-batch 6", "--params 12Q",
                            "--model gpt2-124m --dp 2 --peak-tflops 100", "--layers 4 --channels 64",
                            "--model gpt2-124m --mesh cp5 --strategy cp_algo=ulysses --seq 1000", "--model tiny-moe --pp 2 --schedule zb-h1 --recompute full",
                            "--model tiny-mixtral --pp 2 --schedule zb-h1 --recompute full"})
    EXPECT_EQ(run(kExe + " plan " + flags), 2) << flags << "\n" << slurp(kDir / "last.log");
}

// Tensor-parallel specs that cannot run: exit 2 naming the part, before any rank starts.
TEST(ResultsCli, CheckTensorParallelBadSpecsExit2) {
  const std::pair<const char*, const char*> cases[] = {
      {"--mesh tp5", "does not divide model.heads"},
      {"--mesh tp3 --model tiny", "tp3 does not divide model.heads = 2"},
      {"--mesh dp1 --strategy sp=on", "sp"},
      {"--mesh tp2 --strategy recompute=most", "none, selective, full"},
      {"--mesh tp2.rpn3", "ranks_per_node"},
      {"--mesh tp2 --strategy faults=skip_sp_grad_reduce", "faults that apply here"},
      {"--mesh tp2 --strategy faults=bogus", "tensor-parallel faults"},
      {"--mesh tp2.pp2 --strategy schedule=zb-h1,recompute=full", "zb-h1's W pass reads"},
      {"--mesh pp2 --strategy schedule=zb-h1,recompute=full", "zb-h1's W pass reads"},
      {"--mesh pp2 --strategy faults=bias_tp_times", "need tp > 1"},
      {"--tp 0", "--tp"}};
  for (const auto& [flags, says] : cases) {
    EXPECT_EQ(run(kExe + " check " + flags + " --out " + (kDir / "tp_bad").string()), 2) << flags;
    EXPECT_NE(slurp(kDir / "last.log").find(says), std::string::npos) << flags << "\n" << slurp(kDir / "last.log");
  }
}

// Context-parallel specs that cannot run: exit 2 naming the part.
TEST(ResultsCli, CheckContextParallelBadSpecsExit2) {
  const std::pair<const char*, const char*> cases[] = {
      {"--mesh cp5", "does not split into 10 zigzag chunks"},
      {"--mesh cp8 --strategy cp_algo=ulysses,zigzag=off", "model.heads = 12 is not divisible by cp8"},
      {"--mesh cp2 --strategy cp_algo=spiral", "ring, ulysses"},
      {"--mesh dp2 --strategy cp_algo=ulysses", "cp > 1 in the mesh"},
      {"--mesh cp2 --strategy zigzag=off,faults=causal_by_rank", "faults that apply here"},
      {"--mesh cp2 --strategy cp_algo=ulysses,faults=dkv_not_returned", "faults that apply here"},
      {"--mesh cp2 --strategy faults=bogus", "context-parallel faults"},
      {"--mesh dp2.cp2.rpn1", "multiple of tp x cp = 2"},
      {"--mesh cp2.pp2 --strategy schedule=zb-h1,recompute=full", "zb-h1's W pass reads"},
      {"--mesh cp2.pp2 --strategy schedule=1f1b,cp_algo=ulysses --model tiny-tp", ""},
      {"--mesh dp2.cp3 --strategy cp_algo=ulysses,shard=hsdp,shard_group=3", ""},  // F spans a replica's cp ranks
      {"--cp 0", "--cp"},
      {"--mesh cp2.ep4.pp2 --model tiny-moe --strategy schedule=1f1b", "must divide dp*cp = 2, got 4"},
      {"--mesh dp2.cp2.ep8 --model tiny-moe-e8", "must divide dp*cp = 4, got 8"},
      {"--mesh cp2.pp2 --model tiny-moe --strategy schedule=1f1b,faults=ep_combine_permuted",
       "MoE faults that do under context"},
      {"--mesh dp2.pp2 --model tiny-moe --strategy schedule=1f1b,faults=moe_recompute_aux_twice",
       "needs recompute=full"},
      {"--mesh cp2 --model tiny-moe --strategy faults=ep_combine_permuted", "MoE faults that do under context"},
      {"--mesh tp2 --model tiny-moe --strategy faults=moe_recompute_aux_twice", "needs recompute=full"},
      {"--mesh tp2.ep2 --model tiny-moe", "must divide dp*cp = 1"},
      {"--mesh dp2.ep2 --model tiny", "needs a mixture-of-experts model"},
      {"--mesh dp3.ep3 --model tiny-moe", "must divide model.moe.experts (4)"},
      {"--mesh dp2.ep4 --model tiny-moe", "ep"},
      {"--mesh dp2 --model tiny-moe --strategy faults=ep_combine_permuted", "needs expert parallel (mesh ep >= 2)"},
      {"--mesh dp4.ep2 --model tiny-moe --strategy shard=hsdp,shard_group=1,faults=bogus", "mixture-of-experts faults"},
      {"--ep 3", "--ep"},
      {"--mesh dp2.ep2 --model tiny-moe --moe-capacity wide", "--moe-capacity"},
      {"--mesh dp2 --model tiny --strategy faults=moe_aux_per_rank", "needs a mixture-of-experts model"},
      {"--mesh pp2 --model tiny-mixtral --strategy schedule=zb-h1,faults=drop_w", "its W has nothing to drop"},
      {"--mesh dp2.ep2.pp2 --model tiny-moe --strategy schedule=2bw", "2bw with a mixture-of-experts model"},
      {"--mesh dp2.ep2.pp2 --model tiny", "needs a mixture-of-experts model"},
      {"--mesh dp4.ep4.pp2 --model tiny-moe-e6", "must divide model.moe.experts (6)"},
      {"--mesh dp2.ep2.tp2 --model tiny", "needs a mixture-of-experts model"},
      {"--mesh dp3.ep3.tp2 --model tiny-moe", "must divide model.moe.experts (4)"},
      {"--mesh dp2.tp2 --model tiny-moe --strategy faults=ep_combine_permuted", "needs expert parallel"},
      {"--mesh dp2.pp2 --model tiny-moe --strategy faults=ep_combine_permuted", "needs expert parallel"},
      {"--mesh dp1 --model tiny-moe", ""}};
  for (const auto& [flags, says] : cases) {
    const int want = std::string(says).empty() ? 0 : 2;  // the one that runs: a valid spec among the refusals
    EXPECT_EQ(run(kExe + " check " + flags + " --precision fp32 --out " + (kDir / "cp_bad").string()), want) << flags;
    EXPECT_NE(slurp(kDir / "last.log").find(says), std::string::npos) << flags << "\n" << slurp(kDir / "last.log");
  }
}

// An unknown command is named with the commands there are; a config of
// 200,000 unknown keys gets a message of ten of them and a count, not
// megabytes.
TEST(ResultsCli, UnknownCommandAndHugeUnknownKeyListsAreNamedBriefly) {
  EXPECT_EQ(run(kExe + " frobnicate --dp 2"), 2);
  EXPECT_NE(slurp(kDir / "last.log").find("unknown command 'frobnicate' (commands: "), std::string::npos)
      << slurp(kDir / "last.log");
  const fs::path big = kDir / "unknown_keys.toml";
  {
    std::ofstream f(big);
    for (int i = 0; i < 200000; ++i) f << "key_" << i << " = 1\n";
  }
  EXPECT_EQ(run(kExe + " train --config " + big.string()), 2);
  const std::string log = slurp(kDir / "last.log");
  EXPECT_LT(log.size(), 4096u);
  EXPECT_NE(log.find("and 199990 more unknown keys"), std::string::npos) << log;
}

// train's numeric flags: 0 and -1 are values (refused), not "not given";
// non-finite and overflowing numbers are refused; each names its flag and
// writes no rows.
TEST(ResultsCli, TrainOutOfRangeFlagsExit2NamingTheFlag) {
  const std::pair<const char*, const char*> cases[] = {
      {"--steps 0", "--steps"},        {"--batch 0", "--batch"},     {"--seq 0", "--seq"},
      {"--dp 0", "--dp"},              {"--threads 0", "--threads"}, {"--lr 0", "--lr"},
      {"--seed -1", "--seed"},         {"--lr inf", "--lr"},         {"--lr nan", "--lr"},
      {"--batch 2000000000", "--batch"}, {"--microbatches -1", "--microbatches"}, {"--steps 1e3", "--steps"}};
  // plan and schedule: a given size of 0 is refused too.
  for (const char* flags : {"plan --model tiny --seq 0", "plan --model tiny --dp 0", "plan --model tiny --global-batch 0",
                            "plan --layers 0 --channels 8 --heads 2", "plan --model tiny --ep 0",
                            "schedule --schedule 1f1b --pp 2 --microbatches 4 --steps 0"}) {
    EXPECT_EQ(run(kExe + " " + flags), 2) << flags;
    EXPECT_NE(slurp(kDir / "last.log").find("not in range 1"), std::string::npos) << flags << "\n" << slurp(kDir / "last.log");
  }
  const fs::path out = kDir / "train_bad";
  fs::remove_all(out);
  for (const auto& [flags, says] : cases) {
    EXPECT_EQ(run(kExe + " train " + flags + " --out " + out.string()), 2) << flags;
    EXPECT_NE(slurp(kDir / "last.log").find(says), std::string::npos) << flags << "\n" << slurp(kDir / "last.log");
  }
  EXPECT_FALSE(fs::exists(out)) << "a refused run wrote results";
}

TEST(ResultsCli, GateExitCodes) {
  const std::string base = fixture("base"), same = fixture("same");
  const std::string slow = fixture("slow", "--doctor-throughput -0.2");
  const std::string conf = fixture("conf", "--fail-conformance"), drop = fixture("drop", "--drop-point");
  auto gate = [&](const std::string& cur, const std::string& extra = "") {
    return run(kExe + " gate --baseline " + base + " --current " + cur + " " + extra);
  };
  EXPECT_EQ(gate(same), 0) << slurp(kDir / "last.log");
  EXPECT_EQ(gate(slow), 1);
  EXPECT_NE(slurp(kDir / "last.log").find("tokens_per_s"), std::string::npos);
  EXPECT_EQ(gate(slow, "--max-throughput-drop 0.25"), 0) << slurp(kDir / "last.log");
  EXPECT_EQ(gate(conf), 1);
  EXPECT_EQ(gate(drop), 1);
  EXPECT_EQ(gate(slow + "/sweep.csv"), 1);  // single files work too
  EXPECT_EQ(gate(base + "/missing.csv"), 2);
  EXPECT_EQ(gate(base + "/timeline_1f1b_p4_m8.csv"), 2);  // not a results CSV
  EXPECT_EQ(gate(same, "--max-throughput-drop 2"), 2);
}

// PNG signature and a non-empty IHDR (width, height big-endian at bytes 16..23).
void expect_png(const fs::path& p) {
  const std::string b = slurp(p);
  ASSERT_GT(b.size(), 1000u) << p;
  EXPECT_EQ(b.substr(0, 8), std::string("\x89PNG\r\n\x1a\n", 8)) << p;
  EXPECT_EQ(b.substr(12, 4), "IHDR") << p;
  auto be32 = [&](size_t i) {
    return (uint32_t(uint8_t(b[i])) << 24) | (uint32_t(uint8_t(b[i + 1])) << 16) |
           (uint32_t(uint8_t(b[i + 2])) << 8) | uint32_t(uint8_t(b[i + 3]));
  };
  EXPECT_GT(be32(16), 300u) << p;
  EXPECT_GT(be32(20), 200u) << p;
  EXPECT_EQ(b.substr(b.size() - 8, 4), "IEND") << p;
}

std::string base64(const std::string& in) {
  static const char* t = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  size_t i = 0;
  for (; i + 2 < in.size(); i += 3) {
    const uint32_t v = (uint32_t(uint8_t(in[i])) << 16) | (uint32_t(uint8_t(in[i + 1])) << 8) | uint8_t(in[i + 2]);
    for (int k = 18; k >= 0; k -= 6) out += t[(v >> k) & 63];
  }
  if (i < in.size()) {
    uint32_t v = uint32_t(uint8_t(in[i])) << 16;
    if (i + 1 < in.size()) v |= uint32_t(uint8_t(in[i + 1])) << 8;
    out += t[(v >> 18) & 63];
    out += t[(v >> 12) & 63];
    out += i + 1 < in.size() ? t[(v >> 6) & 63] : '=';
    out += '=';
  }
  return out;
}

TEST(ResultsCli, ReportWritesPngsEmbeddedInHtml) {
  const std::string dir = fixture("report");
  ASSERT_EQ(run(kExe + " report " + dir), 0) << slurp(kDir / "last.log");
  const std::string html = slurp(fs::path(dir) / "report.html");
  int pngs = 0;
  for (const auto& e : fs::directory_iterator(dir)) {
    if (e.path().extension() != ".png") continue;
    ++pngs;
    expect_png(e.path());
    EXPECT_NE(html.find(base64(slurp(e.path()))), std::string::npos) << e.path() << " not embedded";
  }
  // Scaling measured and planned to 1024 ranks, scaling, memory, comm (the small model's and tiny-moe's), pipeline
  // bubble, tensor parallel (activations and tp bytes), context parallel,
  // mixture of experts, collectives, pipeline timeline, planner-vs-measured,
  // conformance, loss.
  EXPECT_EQ(pngs, 17);
  EXPECT_NE(html.find("Measured scaling and the plan, extrapolated to 1024 ranks"), std::string::npos);
  EXPECT_NE(html.find("Tensor parallel: activation memory per recompute mode and SP"), std::string::npos);
  EXPECT_NE(html.find("Pipeline bubble, measured vs declared"), std::string::npos);
  EXPECT_NE(html.find("Conformance ratios"), std::string::npos);
  EXPECT_EQ(html.find("skipped"), std::string::npos);

  // Only collective rows: every other plot is skipped with a note, not an error.
  const fs::path partial = kDir / "partial";
  fs::remove_all(partial);
  fs::create_directories(partial);
  fs::copy_file(fs::path(dir) / "collective.csv", partial / "collective.csv");
  ASSERT_EQ(run(kExe + " report " + partial.string()), 0) << slurp(kDir / "last.log");
  expect_png(partial / "collective_busbw.png");
  EXPECT_NE(slurp(partial / "report.html").find("Scaling: skipped"), std::string::npos);
  EXPECT_EQ(run(kExe + " report " + (kDir / "no_such_dir").string()), 2);
}

// Machines side by side: two fixture runs recorded on different hosts (one
// 2.5x faster, on GPUs its sweep rows name) and a run with only collectives,
// in one report.
TEST(ResultsCli, ReportPutsMachinesSideBySide) {
  const std::string a = fixture("machine_a", "--host node-a"),
                    b = fixture("machine_b", "--host node-b --speed 2.5 --device 'cuda:0 NVIDIA H100 80GB HBM3'");
  const fs::path coll = kDir / "machine_c";
  fs::remove_all(coll);
  fs::create_directories(coll);
  fs::copy_file(fs::path(a) / "collective.csv", coll / "collective.csv");  // host node-a again: labelled by directory
  const fs::path out = kDir / "compare";
  fs::remove_all(out);
  ASSERT_EQ(run(kExe + " report " + a + " " + b + " " + coll.string() + " --out " + out.string()), 0)
      << slurp(kDir / "last.log");
  const std::string html = slurp(out / "report.html");
  for (const char* png : {"compare_collectives.png", "compare_throughput.png", "compare_planner.png"}) {
    expect_png(out / png);
    EXPECT_NE(html.find(base64(slurp(out / png))), std::string::npos) << png << " not embedded";
  }
  EXPECT_NE(html.find("3 runs side by side"), std::string::npos);
  EXPECT_NE(html.find("node-b (cuda:0 NVIDIA H100 80GB HBM3)"), std::string::npos);  // the GPU its rows name
  EXPECT_NE(html.find("node-a [machine_a]"), std::string::npos);  // a host recorded twice: the directory added
  EXPECT_NE(html.find("node-a [machine_c]"), std::string::npos);
  EXPECT_EQ(html.find("skipped"), std::string::npos);
  // The faster machine's best sweep throughput is 2.5x the other's, in the table.
  const pb::CsvTable ta = pb::read_csv(a + "/sweep.csv"), tb = pb::read_csv(b + "/sweep.csv");
  double best_a = 0, best_b = 0;
  for (const auto& r : ta.rows) best_a = std::max(best_a, std::stod(r[ta.column("tokens_per_s")]));
  for (const auto& r : tb.rows) best_b = std::max(best_b, std::stod(r[tb.column("tokens_per_s")]));
  EXPECT_NEAR(best_b / best_a, 2.5, 1e-9);

  // Bad input: several directories without --out, one given twice, one missing.
  EXPECT_EQ(run(kExe + " report " + a + " " + b), 2);
  EXPECT_NE(slurp(kDir / "last.log").find("--out: required with several run directories"), std::string::npos);
  EXPECT_EQ(run(kExe + " report " + a + " " + a + " --out " + out.string()), 2);
  EXPECT_NE(slurp(kDir / "last.log").find("is given twice"), std::string::npos);
  EXPECT_EQ(run(kExe + " report " + a + " " + (kDir / "no_such_dir").string() + " --out " + out.string()), 2);
}

}  // namespace
