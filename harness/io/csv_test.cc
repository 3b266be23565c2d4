// CSV: RFC 4180 quoting round trips, round-trip doubles, header checks on
// reopen, torn rows (hand-made and from a real SIGKILL) detected by the reader
// and healed by the writer, and whole rows under concurrent writers.
#include "harness/io/csv.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <thread>

#include "harness/input_error_testing.h"
#include "harness/status.h"

namespace pb {
namespace {

namespace fs = std::filesystem;

class CsvTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("pb_csv_test_" + std::to_string(::getpid()));
    fs::remove_all(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }
  static void write_file(const std::string& p, const std::string& text) {
    fs::create_directories(fs::path(p).parent_path());
    std::ofstream(p, std::ios::binary) << text;
  }
  static std::string read_file(const std::string& p) {
    std::ifstream in(p, std::ios::binary);
    std::ostringstream s;
    s << in.rdbuf();
    return s.str();
  }
  fs::path dir_;
};

TEST(CsvFormat, Rfc4180Quoting) {
  EXPECT_EQ(csv_escape("plain"), "plain");
  EXPECT_EQ(csv_escape("a,b"), "\"a,b\"");
  EXPECT_EQ(csv_escape("say \"hi\""), "\"say \"\"hi\"\"\"");
  EXPECT_EQ(csv_escape("two\nlines"), "two | lines");  // line breaks folded: a record is one line
  EXPECT_EQ(csv_escape("a\r\nb\rc,\n"), "\"a | b | c, | \"");
  EXPECT_EQ(csv_escape(" padded"), "\" padded\"");
  EXPECT_EQ(csv_escape(""), "");
  EXPECT_EQ(csv_format_row({"a", "b,c", ""}), "a,\"b,c\",\n");
}

TEST(CsvFormat, QuotedFieldsRoundTrip) {
  const std::vector<std::string> header = {"x", "y", "z"};
  const std::vector<std::string> row = {"a,b", "q\"uote", " ,\"\"x"};
  const std::string text = csv_format_row(header) + csv_format_row(row) + csv_format_row({"multi\nline\r\nend", "", "3"});
  const CsvTable t = parse_csv(text, "mem");
  ASSERT_EQ(t.rows.size(), 2u);
  EXPECT_EQ(t.header, header);
  EXPECT_EQ(t.rows[0], row);
  EXPECT_EQ(t.rows[1], (std::vector<std::string>{"multi | line | end", "", "3"}));
  EXPECT_EQ(t.row_lines, (std::vector<size_t>{2, 3}));
  EXPECT_EQ(t.column("z"), 2u);
  EXPECT_THROW(t.column("w"), std::out_of_range);
}

TEST(CsvFormat, CrlfAccepted) {
  const CsvTable t = parse_csv("a,b\r\n1,2\r\n", "mem");
  EXPECT_EQ(t.rows.at(0), (std::vector<std::string>{"1", "2"}));
}

TEST(CsvFormat, LinesAreCutLikeLineReaders) {
  // A byte-order mark at the start is skipped, only there; a '\r' before the
  // '\n' is dropped, a lone one is data; line numbers count the header as 1.
  const CsvTable t = parse_csv("\xEF\xBB\xBF" "a,b\r\n1,x\ry\n", "mem", {});
  EXPECT_EQ(t.header, (std::vector<std::string>{"a", "b"}));
  ASSERT_EQ(t.rows.size(), 1u);
  EXPECT_EQ(t.rows[0], (std::vector<std::string>{"1", "x\ry"}));
  EXPECT_EQ(t.row_lines[0], 2u);
  try {
    parse_csv("a,b\n1,2\n\n", "mem");
    FAIL() << "an empty row was accepted";
  } catch (const InputError& e) {
    EXPECT_STREQ(e.what(), "mem:3: row has 1 fields, header has 2");
  }
}

TEST(CsvFormat, LineOver16MiBIsNamed) {
  std::string text = "a\n" + std::string(size_t(1) << 24, 'x') + "\n";
  try {
    parse_csv(text, "big.csv");
    FAIL() << "a 16 MiB line was accepted";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("big.csv:2: line longer than 16 MiB"), std::string::npos) << e.what();
  }
  text = "a\n" + std::string((size_t(1) << 24) - 1, 'x') + "\n";
  EXPECT_EQ(parse_csv(text, "big.csv").rows.size(), 1u);
}

TEST(CsvFormat, DoublesRoundTrip) {
  std::mt19937_64 gen(1);
  std::uniform_real_distribution<double> exp10(-300, 300);
  for (int i = 0; i < 2000; ++i) {
    const double v = std::pow(10.0, exp10(gen)) * (i % 2 ? -1 : 1) * (1 + double(gen() % 1000) / 997);
    EXPECT_EQ(std::stod(csv_number(v)), v) << csv_number(v);
  }
  EXPECT_EQ(csv_number(0.1), "0.1");
  EXPECT_EQ(csv_number(3.0), "3");
  EXPECT_EQ(csv_number(std::nan("")), "nan");
  EXPECT_EQ(csv_number(-INFINITY), "-inf");
  CsvRecord r;
  r.set("a", true).set("b", int64_t{-5}).set("c", 2.5f).set("d", "text").set("a", false);
  EXPECT_EQ(*r.find("a"), "0");
  EXPECT_EQ(*r.find("b"), "-5");
  EXPECT_EQ(*r.find("c"), "2.5");
  EXPECT_EQ(*r.find("d"), "text");
  EXPECT_EQ(r.find("e"), nullptr);
}

TEST(CsvFormat, ReaderErrorsNameFileAndLine) {
  EXPECT_EQ(input_error_of([] { parse_csv("", "f.csv"); }), "f.csv: empty file (no header)");
  EXPECT_EQ(input_error_of([] { parse_csv("a,b", "f.csv"); }), "f.csv:1: truncated header (no terminating newline)");
  EXPECT_EQ(input_error_of([] { parse_csv("a,b,c\n1,2,3\n1,2\n", "f.csv"); }), "f.csv:3: row has 2 fields, header has 3");
  EXPECT_EQ(input_error_of([] { parse_csv("a,b\n1,2\nx,3\n4,5", "f.csv"); }),
            "f.csv:4: truncated last row (no terminating newline; was the writer killed mid-row?)");
  // A quoted line break (valid RFC 4180, never written by parabench) is a
  // quote left open at the end of its line.
  EXPECT_EQ(input_error_of([] { parse_csv("a,b\n1,\"open\nclose\"\n", "f.csv"); }),
            "f.csv:2: unterminated quoted field (a field never spans lines)");
  EXPECT_EQ(input_error_of([] { parse_csv("a,b\n1,\"x\"\"\n", "f.csv"); }),
            "f.csv:2: unterminated quoted field (a field never spans lines)");
  EXPECT_EQ(input_error_of([] { parse_csv("a,b\n1,x\"y\n", "f.csv"); }), "f.csv:2: stray quote inside an unquoted field");
  EXPECT_EQ(input_error_of([] { parse_csv("a,b\n1,x\"y\"\n", "f.csv"); }), "f.csv:2: stray quote inside an unquoted field");
  EXPECT_EQ(input_error_of([] { parse_csv("a,b\n1,\"x\"y\n", "f.csv"); }),
            "f.csv:2: unexpected character 'y' after a closing quote");
  EXPECT_EQ(input_error_of([] { read_csv("/nonexistent/x.csv"); }), "/nonexistent/x.csv: cannot open");
  EXPECT_EQ(input_error_of([] { parse_csv(std::string_view("a,b\n1,2\n3,1\0x\n", 14), "f.csv"); }),
            "f.csv:3: NUL byte (not a text CSV)");
  // A line longer than libfccp's 16 MiB limit is bad input too, not a crash.
  const std::string huge = "a,b\n1," + std::string((size_t(1) << 24) + 10, 'x') + "\n";
  EXPECT_NE(input_error_of([&] { parse_csv(huge, "f.csv"); }).find("f.csv:2: "), std::string::npos);
  const CsvTable t = parse_csv("a,b\n1,2\n3,", "f.csv", {.drop_partial_tail = true});
  EXPECT_TRUE(t.dropped_partial_tail);
  EXPECT_EQ(t.rows.size(), 1u);
}

TEST(CsvFormat, CommittedPrefix) {
  EXPECT_EQ(csv_committed_prefix(""), 0u);
  EXPECT_EQ(csv_committed_prefix("a,b"), 0u);
  EXPECT_EQ(csv_committed_prefix("a,b\n1,2\n3"), 8u);
  EXPECT_EQ(csv_committed_prefix("a,b\n1,2\r\n"), 9u);
}

TEST_F(CsvTest, WriteReopenAppend) {
  const std::string p = path("sub/dir/r.csv");  // parent directories are created
  {
    CsvWriter w(p, {"step", "loss", "note"});
    w.write_row({"1", csv_number(2.5), "a, b"});
    w.write(CsvRecord().set("step", 2).set("loss", 2.25));
    EXPECT_EQ(w.rows_written(), 2u);
    EXPECT_THROW(w.write_row({"too", "few"}), std::invalid_argument);
    EXPECT_THROW(w.write(CsvRecord().set("lost", 1)), std::invalid_argument);
  }
  {
    CsvWriter w(p, {"step", "loss", "note"});
    w.write_row({"3", "2", "x"});
  }
  EXPECT_EQ(read_file(p), "step,loss,note\n1,2.5,\"a, b\"\n2,2.25,\n3,2,x\n");
  const std::string msg = input_error_of([&] { CsvWriter(p, {"step", "loss", "other"}); });
  EXPECT_EQ(msg, p + ": existing header [step, loss, note] does not match [step, loss, other]");
}

TEST_F(CsvTest, ReopenTruncatesTornRow) {
  const std::string p = path("torn.csv");
  write_file(p, "a,b\n1,2\n3,\"unfini");
  EXPECT_NE(input_error_of([&] { read_csv(p); }).find(p + ":3: truncated last row"), std::string::npos);
  {
    CsvWriter w(p, {"a", "b"});
    w.write_row({"5", "6"});
  }
  EXPECT_EQ(read_file(p), "a,b\n1,2\n5,6\n");
}

TEST_F(CsvTest, ReopenCompletesTornHeader) {
  const std::string p = path("torn_header.csv");
  write_file(p, "alpha,be");
  {
    CsvWriter w(p, {"alpha", "beta"});
    w.write_row({"1", "2"});
  }
  EXPECT_EQ(read_file(p), "alpha,beta\n1,2\n");
}

TEST_F(CsvTest, RefusesForeignFile) {
  const std::string p = path("foreign.csv");
  write_file(p, "not a csv header at all");
  EXPECT_EQ(input_error_of([&] { CsvWriter(p, {"a"}); }),
            p + ": exists but is not a CSV file with a complete header; refusing to append");
  EXPECT_EQ(read_file(p), "not a csv header at all");  // untouched
  write_file(p, "a,b\n1,\"x\"y\n");
  EXPECT_EQ(input_error_of([&] { CsvWriter(p, {"a", "b"}); }), p + ":2: unexpected character 'y' after a closing quote");
}

TEST_F(CsvTest, ConcurrentWritersLeaveWholeRows) {
  const std::string p = path("threads.csv");
  CsvWriter w(p, {"thread", "i", "payload"});
  std::vector<std::thread> ts;
  for (int t = 0; t < 4; ++t)
    ts.emplace_back([&w, t] {
      for (int i = 0; i < 300; ++i) w.write_row({std::to_string(t), std::to_string(i), std::string(100 + i, 'a' + t)});
    });
  for (auto& t : ts) t.join();
  const CsvTable table = read_csv(p);
  ASSERT_EQ(table.rows.size(), 1200u);
  std::vector<int> next(4, 0);
  for (const auto& r : table.rows) {
    const int t = std::stoi(r[0]), i = std::stoi(r[1]);
    ASSERT_EQ(i, next[t]++);  // each thread's rows in its own order
    ASSERT_EQ(r[2], std::string(100 + i, 'a' + t));
  }
}

// A real SIGKILL in the middle of a stream of 20 KB rows (each spans pages, so
// a torn write is possible): every row read back is whole, and a reopened
// writer appends cleanly after the committed prefix.
TEST_F(CsvTest, SigkillLeavesOnlyWholeRowsAfterReopen) {
  const std::string p = path("killed.csv");
  const std::vector<std::string> header = {"i", "payload", "len"};
  { CsvWriter w(p, header); }
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    try {
      CsvWriter w(p, header);
      for (int i = 0;; ++i) {
        std::string payload(20000 + i % 97, char('a' + i % 26));
        w.write_row({std::to_string(i), payload, std::to_string(payload.size())});
      }
    } catch (...) {
      ::_exit(3);
    }
  }
  while (fs::file_size(p) < (4u << 20)) {
    int early = 0;
    if (::waitpid(child, &early, WNOHANG) == child) FAIL() << "writer exited early, status " << early;
    std::this_thread::yield();
  }
  ::kill(child, SIGKILL);
  int status = 0;
  ::waitpid(child, &status, 0);
  ASSERT_TRUE(WIFSIGNALED(status));
  const CsvTable t = read_csv(p, {.drop_partial_tail = true});
  ASSERT_GT(t.rows.size(), 100u);
  for (size_t k = 0; k < t.rows.size(); ++k) {
    ASSERT_EQ(t.rows[k][0], std::to_string(k));
    ASSERT_EQ(t.rows[k][1].size(), std::stoul(t.rows[k][2]));
  }
  {
    CsvWriter w(p, header);
    w.write_row({"end", "x", "1"});
  }
  const CsvTable after = read_csv(p);
  EXPECT_EQ(after.rows.size(), t.rows.size() + 1);
  EXPECT_EQ(after.rows.back()[0], "end");
}

}  // namespace
}  // namespace pb
