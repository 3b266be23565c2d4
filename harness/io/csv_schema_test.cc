// The results schema: the compiled-in copy equals results/schema.json, every
// column is documented in results/SCHEMA.md, ResultWriter output validates,
// and doctored files yield one problem per defect, naming file, line, column.
#include "harness/io/csv_schema.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "harness/status.h"

namespace pb {
namespace {

namespace fs = std::filesystem;

std::string slurp(const std::string& p) {
  std::ifstream in(p, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

RunMeta meta() {
  RunMeta m;
  m.run_id = make_run_id(std::chrono::system_clock::time_point{}, 0xabcdefu);
  m.timestamp = "2024-05-01T12:00:00.250Z";
  m.git_rev = "abc123";
  m.host = "node0";
  m.backend = "local";
  m.world = 2;
  m.mesh = mesh_string(2, 1, 1, 1);
  m.config_hash = "0123456789abcdef";
  return m;
}

class SchemaTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("pb_schema_test_" + std::to_string(::getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string path(const std::string& n) const { return (dir_ / n).string(); }
  // Writes a good train_step file with two rows, returns its path.
  std::string good_train_file() {
    const std::string p = path("train.csv");
    fs::remove(p);
    ResultWriter w(p, "train_step");
    RunMeta m = meta();
    w.write(m, CsvRecord().set("step", 1).set("loss", 10.5).set("lr", 3e-4).set("mem_params", int64_t{4096}));
    m.status = "oom";
    m.reason = "activations exceed 16 GiB";
    w.write(m, CsvRecord().set("step", 2));
    return p;
  }
  fs::path dir_;
};

TEST(Schema, BuiltinEqualsTheFile) {
  const ResultsSchema file = ResultsSchema::load(PB_SCHEMA_JSON_PATH);
  const ResultsSchema& built = ResultsSchema::builtin();
  EXPECT_EQ(file.kinds(), built.kinds());
  for (const auto& k : file.kinds()) EXPECT_EQ(file.header(k), built.header(k));
  EXPECT_EQ(built.kinds(), (std::vector<std::string>{"train_step", "conformance", "collective", "sweep", "plan"}));
  EXPECT_EQ(built.version(), 3);  // 2: sweep.unreliable added; 3: plan.machine, plan.plan_options
  EXPECT_EQ(file.version(), built.version());
}

TEST(Schema, RunMetaMatchesCommonColumns) {
  std::vector<std::string> common, fields;
  for (const auto& c : ResultsSchema::builtin().common()) common.push_back(c.name);
  for (const auto& [name, value] : RunMeta{}.fields()) fields.push_back(name);
  EXPECT_EQ(common, fields);
}

TEST(Schema, EveryColumnIsDocumented) {
  const std::string md = slurp(PB_SCHEMA_MD_PATH);
  ASSERT_FALSE(md.empty());
  const ResultsSchema& s = ResultsSchema::builtin();
  for (const auto& k : s.kinds()) {
    EXPECT_NE(md.find("`" + k + "`"), std::string::npos) << "kind " << k;
    for (const auto& c : s.header(k)) EXPECT_NE(md.find("`" + c + "`"), std::string::npos) << "column " << c;
  }
}

TEST(Schema, HeaderIsCommonThenKind) {
  const auto h = ResultsSchema::builtin().header("collective");
  EXPECT_EQ(h.front(), "run_id");
  EXPECT_EQ(h[10], "reason");
  EXPECT_EQ(h[11], "op");
  EXPECT_THROW(ResultsSchema::builtin().header("nope"), std::invalid_argument);
}

TEST(Schema, LoadErrors) {
  EXPECT_THROW(ResultsSchema::load("/nonexistent/schema.json"), InputError);
  EXPECT_THROW(ResultsSchema::parse("{", "x"), InputError);
  try {
    ResultsSchema::parse(R"({"common": [{"name": "a", "type": "blob"}], "kinds": {}})", "x.json");
    ADD_FAILURE();
  } catch (const InputError& e) {
    EXPECT_STREQ(e.what(), "schema x.json: common: column 'a': unknown type 'blob'");
  }
  EXPECT_THROW(ResultsSchema::parse(R"({"common": [{"name": "a", "type": "int"}],
      "kinds": {"k": {"columns": [{"name": "a", "type": "int"}]}}})", "x.json"), InputError);  // duplicate
}

// Found by suites/fuzz/fuzz_schema_json: nlohmann exceptions other than
// parse_error (a number too large for a double; a field of the wrong type read
// with value() or get()) left parse as themselves, not as InputError.
TEST(Schema, HostileJsonIsInputError) {
  auto message = [](const std::string& json) {
    try {
      ResultsSchema::parse(json, "x.json");
    } catch (const InputError& e) {
      return std::string(e.what());
    }
    ADD_FAILURE() << "no InputError for " << json;
    return std::string();
  };
  EXPECT_NE(message(R"({"schema_version": 1e400, "common": [], "kinds": {}})").find("schema x.json: not valid JSON"),
            std::string::npos);
  EXPECT_EQ(message(R"({"schema_version": "1", "common": [], "kinds": {}})"),
            "schema x.json: 'schema_version' must be a whole number >= 0");
  EXPECT_EQ(message(R"({"schema_version": 1e300, "common": [], "kinds": {}})"),
            "schema x.json: 'schema_version' must be a whole number >= 0");
  EXPECT_EQ(message(R"({"common": [{"name": "a", "type": "int", "required": 1}], "kinds": {}})"),
            "schema x.json: common: column 'a': 'required' must be a string");
  EXPECT_EQ(message(R"({"common": [{"name": "a", "type": "int", "unit": []}], "kinds": {}})"),
            "schema x.json: common: column 'a': 'unit' must be a string");
  EXPECT_EQ(message(R"({"common": [], "kinds": {"k": {"columns": [{"name": "p", "type": "string", "pattern": 7}]}}})"),
            "schema x.json: kind 'k': column 'p': 'pattern' must be a string");
  EXPECT_EQ(message(R"({"common": [{"name": "e", "type": "enum", "values": "ab"}], "kinds": {}})"),
            "schema x.json: common: column 'e': 'values' must be an array of strings");
  EXPECT_EQ(message(R"({"common": [{"name": "e", "type": "enum", "values": ["a", 1]}], "kinds": {}})"),
            "schema x.json: common: column 'e': 'values' must be an array of strings");
  EXPECT_EQ(ResultsSchema::parse(R"({"schema_version": 3, "common": [], "kinds": {}})", "x.json").version(), 3);
}

TEST_F(SchemaTest, WriterOutputValidates) {
  const std::string p = good_train_file();
  EXPECT_EQ(validate_csv_against_schema(p, ResultsSchema::builtin()), std::vector<std::string>{});
  EXPECT_EQ(validate_csv_against_schema(p, std::string(PB_SCHEMA_JSON_PATH)), std::vector<std::string>{});
  const CsvTable t = read_csv(p);
  EXPECT_EQ(t.header, ResultsSchema::builtin().header("train_step"));
  EXPECT_EQ(t.rows[0][t.column("kind")], "train_step");
  EXPECT_EQ(t.rows[0][t.column("lr")], "0.0003");
}

// An exception's multi-line message as a reason: folded to one line, so the
// file stays one record per line and validates.
TEST_F(SchemaTest, MultiLineReasonIsOneLine) {
  const std::string p = path("failed.csv");
  {
    ResultWriter w(p, "train_step");
    RunMeta m = meta();
    m.status = "failed";
    m.reason = "rank 1: timeout\nrank 0: waiting in all_reduce, \"grad\"\r\n";
    w.write(m, CsvRecord().set("step", 1));
  }
  const std::string text = slurp(p);
  EXPECT_EQ(std::count(text.begin(), text.end(), '\n'), 2);
  EXPECT_EQ(validate_csv_against_schema(p, ResultsSchema::builtin()), std::vector<std::string>{});
  const CsvTable t = read_csv(p);
  EXPECT_EQ(t.rows.at(0).at(t.column("reason")), "rank 1: timeout | rank 0: waiting in all_reduce, \"grad\" | ");
}

TEST_F(SchemaTest, WriterRejectsBadRows) {
  ResultWriter w(path("conf.csv"), "conformance");
  RunMeta m = meta();
  EXPECT_THROW(w.write(m, CsvRecord().set("strategy", "ddp").set("precision", "fp16").set("quantity", "loss")),
               std::invalid_argument);
  EXPECT_THROW(w.write(m, CsvRecord().set("not_a_column", 1)), std::invalid_argument);
  EXPECT_THROW(w.write(m, CsvRecord().set("status", "ok")), std::invalid_argument);  // common: from RunMeta
  m.status = "rejected";  // no reason
  EXPECT_THROW(w.write(m, CsvRecord().set("strategy", "ddp").set("precision", "fp32").set("quantity", "loss")),
               std::invalid_argument);
  m.reason = "tp must divide heads";
  w.write(m, CsvRecord().set("strategy", "tp3").set("precision", "fp32").set("quantity", "loss"));
  EXPECT_EQ(validate_csv_against_schema(w.path(), ResultsSchema::builtin()), std::vector<std::string>{});
}

// A figure with a unit in a row of status ok is a measurement: NaN, inf and
// negative values are refused there (#50: validate accepted a NaN step time
// and a negative throughput that the report then choked on); a failed row
// keeps whatever it has.
TEST_F(SchemaTest, MeasurementsAreFiniteAndNonNegative) {
  const std::string p = good_train_file();
  const CsvTable t = read_csv(p);
  auto with = [&](const char* col, const char* v, const char* status) {
    std::string text = "";
    for (size_t i = 0; i < t.header.size(); ++i) text += (i ? "," : "") + t.header[i];
    text += "\n";
    for (size_t i = 0; i < t.header.size(); ++i) {
      std::string x = t.header[i] == col ? v : t.header[i] == "status" ? status : t.rows[0][i];
      if (t.header[i] == "reason" && std::string(status) != "ok") x = "why";
      text += (i ? "," : "") + x;
    }
    const std::string f = path(std::string("m_") + col + ".csv");
    std::ofstream(f) << text << "\n";
    return validate_csv_against_schema(f, ResultsSchema::builtin());
  };
  for (const char* bad : {"nan", "inf", "-inf", "-1.5"}) {
    const auto problems = with("step_time_s", bad, "ok");
    ASSERT_EQ(problems.size(), 1u) << bad;
    EXPECT_NE(problems[0].find("column 'step_time_s': '" + std::string(bad) + "' is not a measurement"),
              std::string::npos)
        << problems[0];
  }
  EXPECT_EQ(with("mem_total", "-8", "ok").size(), 1u);
  EXPECT_EQ(with("step_time_s", "0.25", "ok"), std::vector<std::string>{});
  EXPECT_EQ(with("step_time_s", "nan", "failed"), std::vector<std::string>{});
  EXPECT_EQ(with("loss", "nan", "ok"), std::vector<std::string>{});  // no unit: a diverged loss is a result
}

// Found while fuzzing the validator (suites/fuzz/fuzz_schema_csv; its inputs
// stay under 4 KB, so the value that crashes was written by hand): patterns
// ran on libstdc++'s backtracking executor, one stack frame per character, and
// `parabench validate` died of SIGSEGV on a run_id of 100 KB. A schema's own
// pattern could also take exponential time or overflow the regex compiler.
TEST_F(SchemaTest, PatternsOnHugeValuesAndHostilePatterns) {
  const std::string text = slurp(good_train_file());
  const std::string id = meta().run_id, huge(1 << 20, 'a');
  std::string doctored = text;  // both rows' run_id 1 MiB long, still matching ^[A-Za-z0-9._-]+$
  for (size_t at; (at = doctored.find(id)) != std::string::npos;) doctored.replace(at, id.size(), huge);
  EXPECT_EQ(validate_csv_text_against_schema(doctored, "big.csv", ResultsSchema::builtin()), std::vector<std::string>{});
  doctored.replace(doctored.find(huge), huge.size(), huge + "!");
  const auto problems = validate_csv_text_against_schema(doctored, "big.csv", ResultsSchema::builtin());
  ASSERT_EQ(problems.size(), 1u);
  EXPECT_EQ(problems[0].find("big.csv:2: column 'run_id': 'aaaa"), 0u);

  const std::string exponential = R"({"common": [{"name": "x", "type": "string", "pattern": "(a|a)*(a*)*b"},
      {"name": "status", "type": "string"}], "kinds": {"k": {"columns": []}}})";
  const ResultsSchema s = ResultsSchema::parse(exponential, "x.json");
  const auto got = s.check_row("k", {"x"}, {std::string(100000, 'a')});
  ASSERT_EQ(got.size(), 1u);
  EXPECT_NE(got[0].find("does not match (a|a)*(a*)*b"), std::string::npos);
  auto error_of = [](const std::string& pattern) {
    try {
      ResultsSchema::parse(R"({"common": [{"name": "x", "type": "string", "pattern": ")" + pattern + R"("}], "kinds": {}})",
                           "x.json");
    } catch (const InputError& e) {
      return std::string(e.what());
    }
    return std::string("no InputError");
  };
  EXPECT_EQ(error_of(std::string(20000, '(') + std::string(20000, ')')),
            "schema x.json: common: column 'x': pattern longer than 1024 characters");
  EXPECT_EQ(error_of("(a)\\\\1").find("schema x.json: common: column 'x': bad pattern"), 0u);  // a back-reference
  // Numbers libstdc++ would overflow a long reading (UBSan, found by fuzzing).
  EXPECT_EQ(error_of("a{99999999999999999999}"),
            "schema x.json: common: column 'x': bad pattern: a repetition count longer than 4 digits");
  EXPECT_EQ(error_of("a{1,99999999999999999999}"),
            "schema x.json: common: column 'x': bad pattern: a repetition count longer than 4 digits");
  EXPECT_EQ(error_of("\\\\99999999999999999999"),
            "schema x.json: common: column 'x': bad pattern: a back-reference number longer than 4 digits");
  EXPECT_EQ(error_of("[0-9]{1,4},12345"), "no InputError");  // a comma outside braces is a literal
  EXPECT_EQ(error_of("a{1000}{1000}{1000}").find("schema x.json: common: column 'x': bad pattern"), 0u);  // too many states
}

// Replaces the first occurrence of `from` in the file.
void doctor(const std::string& p, const std::string& from, const std::string& to) {
  std::string s = slurp(p);
  const size_t at = s.find(from);
  ASSERT_NE(at, std::string::npos) << from;
  s.replace(at, from.size(), to);
  std::ofstream(p, std::ios::binary | std::ios::trunc) << s;
}

TEST_F(SchemaTest, DoctoredFiles) {
  const auto problems = [&](const std::string& p) { return validate_csv_against_schema(p, ResultsSchema::builtin()); };
  {
    const std::string p = good_train_file();
    doctor(p, ",10.5,", ",ten,");
    EXPECT_EQ(problems(p), std::vector<std::string>{p + ":2: column 'loss': 'ten' is not a number"});
  }
  {
    const std::string p = good_train_file();
    doctor(p, ",oom,", ",exploded,");
    EXPECT_EQ(problems(p), std::vector<std::string>{p + ":3: column 'status': 'exploded' is not one of ok, rejected, oom, failed, skipped"});
  }
  {
    const std::string p = good_train_file();
    doctor(p, ",mem_params,", ",mem_parameters,");
    const auto got = problems(p);
    ASSERT_EQ(got.size(), 2u);
    EXPECT_EQ(got[0], p + ": missing column 'mem_params' (kind 'train_step')");
    EXPECT_EQ(got[1], p + ": unknown column 'mem_parameters' (kind 'train_step')");
  }
  {
    const std::string p = good_train_file();
    doctor(p, ",train_step,", ",trains,");
    EXPECT_EQ(problems(p), std::vector<std::string>{p + ":2: unknown kind 'trains' (known: train_step, conformance, collective, sweep, plan)"});
  }
  {
    const std::string p = good_train_file();
    doctor(p, ",10.5,", ",,");  // loss is required when status is ok
    EXPECT_EQ(problems(p), std::vector<std::string>{p + ":2: column 'loss': required when status is ok, but empty"});
  }
  {
    const std::string p = good_train_file();
    doctor(p, ",4096,", ",4096.5,");
    doctor(p, "2024-05-01T12:00:00.250Z", "2024-05-01 12:00");
    doctor(p, ",dp2,", ",2x1,");
    const auto got = problems(p);
    ASSERT_EQ(got.size(), 3u);
    EXPECT_EQ(got[0], p + ":2: column 'timestamp': '2024-05-01 12:00' is not an ISO-8601 UTC timestamp");
    EXPECT_EQ(got[1].find(p + ":2: column 'mesh': '2x1' does not match"), 0u);
    EXPECT_EQ(got[2], p + ":2: column 'mem_params': '4096.5' is not an integer");
  }
  {
    const std::string p = good_train_file();
    doctor(p, "activations exceed 16 GiB", "");
    EXPECT_EQ(problems(p), std::vector<std::string>{p + ":3: column 'reason': required when status is 'oom', but empty"});
  }
  {
    const std::string p = good_train_file();
    std::ofstream(p, std::ios::app) << "torn,row";
    const auto got = problems(p);
    ASSERT_EQ(got.size(), 1u);
    EXPECT_NE(got[0].find(p + ":4: truncated last row"), std::string::npos);
  }
  EXPECT_EQ(problems(path("missing.csv")), std::vector<std::string>{path("missing.csv") + ": cannot open"});
}

TEST_F(SchemaTest, EmptyFileOfAKind) {
  const std::string p = path("empty.csv");
  { ResultWriter w(p, "plan"); }
  EXPECT_EQ(validate_csv_against_schema(p, ResultsSchema::builtin()), std::vector<std::string>{});
  std::ofstream(p, std::ios::trunc) << "a,b\n";
  EXPECT_EQ(validate_csv_against_schema(p, ResultsSchema::builtin()),
            std::vector<std::string>{p + ": header (no rows) matches no kind of the schema"});
}

// A column a later schema version added ("added": N): a file written
// before lacks it and stays valid, and a writer appending to such a file
// keeps its header; any other missing column is still a problem.
TEST_F(SchemaTest, AColumnAddedLaterKeepsOlderFilesReadable) {
  const ResultsSchema s = ResultsSchema::parse(R"({"schema_version": 2,
    "common": [{"name": "run_id", "type": "string", "required": "always"}, {"name": "kind", "type": "string"},
               {"name": "timestamp", "type": "string"}, {"name": "git_rev", "type": "string"},
               {"name": "host", "type": "string"}, {"name": "backend", "type": "string"},
               {"name": "world", "type": "int"}, {"name": "mesh", "type": "string"},
               {"name": "config_hash", "type": "string"}, {"name": "status", "type": "string"},
               {"name": "reason", "type": "string"}],
    "kinds": {"k": {"columns": [{"name": "a", "type": "int"}, {"name": "b", "type": "bool", "added": 2}]}}})",
                                               "x.json");
  const std::string common = "run_id,kind,timestamp,git_rev,host,backend,world,mesh,config_hash,status,reason";
  EXPECT_TRUE(s.accepts_header("k", s.header("k")));
  std::vector<std::string> old_header = s.header("k");
  old_header.pop_back();
  EXPECT_TRUE(s.accepts_header("k", old_header));
  EXPECT_FALSE(s.accepts_header("k", {"run_id"}));
  EXPECT_FALSE(s.accepts_header("nope", old_header));
  const std::string old_file = path("old.csv");
  std::ofstream(old_file) << common << ",a\nr,k,t,g,h,local,1,dp1,,ok,,7\n";
  EXPECT_EQ(validate_csv_against_schema(old_file, s), std::vector<std::string>{});
  {  // appended under the file's own header; b's value is not written
    ResultWriter w(old_file, "k", s);
    RunMeta m = meta();
    m.config_hash.clear();
    w.write(m, CsvRecord().set("a", 8).set("b", true));
  }
  const CsvTable t = read_csv(old_file);
  EXPECT_EQ(t.header, old_header);
  ASSERT_EQ(t.rows.size(), 2u);
  EXPECT_EQ(t.rows[1][t.column("a")], "8");
  EXPECT_EQ(validate_csv_against_schema(old_file, s), std::vector<std::string>{});
  // A new file gets the whole header; a column that was always there is still required.
  const std::string new_file = path("new.csv");
  { ResultWriter w(new_file, "k", s); }
  EXPECT_EQ(read_csv(new_file).header, s.header("k"));
  const std::string no_a = path("no_a.csv");
  std::ofstream(no_a) << common << ",b\nr,k,t,g,h,local,1,dp1,,ok,,1\n";
  EXPECT_EQ(validate_csv_against_schema(no_a, s), std::vector<std::string>{no_a + ": missing column 'a' (kind 'k')"});
  const std::string swapped = path("swapped.csv");
  std::ofstream(swapped) << common << ",b,a\nr,k,t,g,h,local,1,dp1,,ok,,1,2\n";
  EXPECT_EQ(validate_csv_against_schema(swapped, s),
            std::vector<std::string>{swapped + ": columns are not in schema order"});
  try {
    ResultsSchema::parse(R"({"common": [], "kinds": {"k": {"columns": [{"name": "a", "type": "int", "added": 0}]}}})",
                         "y.json");
    ADD_FAILURE() << "no error";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("'added' must be a schema version >= 1"), std::string::npos) << e.what();
  }
  // The results schema's own: sweep.unreliable came in version 2.
  const ResultsSchema& b = ResultsSchema::builtin();
  EXPECT_GE(b.version(), 2);
  std::vector<std::string> v1 = b.header("sweep");
  ASSERT_EQ(v1.back(), "unreliable");
  v1.pop_back();
  EXPECT_TRUE(b.accepts_header("sweep", v1));
}

}  // namespace
}  // namespace pb
