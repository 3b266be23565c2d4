// write_output_file: what stands at the output path stays what it is unless
// it is a regular file or a new name; an input is never the output.
#include "harness/io/output_file.h"

#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include <gtest/gtest.h>

#include "harness/status.h"

namespace pb {
namespace {

namespace fs = std::filesystem;

class OutputFile : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("pb_output_file_" + std::to_string(::getpid()) + "_" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string at(const std::string& name) const { return (dir_ / name).string(); }
  static std::string read(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    std::stringstream s;
    s << in.rdbuf();
    return s.str();
  }
  // Only the named entries are in the directory (no temporary left behind).
  void expect_entries(std::initializer_list<std::string> names) const {
    size_t n = 0;
    for (const auto& e : fs::directory_iterator(dir_)) {
      ++n;
      EXPECT_NE(std::find(names.begin(), names.end(), e.path().filename().string()), names.end())
          << "unexpected " << e.path();
    }
    EXPECT_EQ(n, names.size());
  }
  static std::string refusal(const std::string& path, std::string_view bytes,
                             const std::vector<std::string>& inputs = {}) {
    try {
      write_output_file(path, bytes, "--out", inputs);
    } catch (const InputError& e) {
      return e.what();
    }
    return "";
  }
  fs::path dir_;
};

TEST_F(OutputFile, ANewNameAndARegularFileAreWrittenWhole) {
  write_output_file(at("a.xml"), "first", "--out");
  EXPECT_EQ(read(at("a.xml")), "first");
  EXPECT_EQ(fs::status(at("a.xml")).permissions() & fs::perms::all,
            fs::perms::owner_read | fs::perms::owner_write | fs::perms::group_read | fs::perms::others_read);
  ::chmod(at("a.xml").c_str(), 0600);
  write_output_file(at("a.xml"), "second", "--out");
  EXPECT_EQ(read(at("a.xml")), "second");
  EXPECT_EQ(fs::status(at("a.xml")).permissions() & fs::perms::all, fs::perms::owner_read | fs::perms::owner_write);
  expect_entries({"a.xml"});
}

TEST_F(OutputFile, ALinkStaysALinkAndItsTargetIsWritten) {
  write_output_file(at("target"), "old", "--out");
  fs::create_symlink(at("target"), at("link"));
  write_output_file(at("link"), "new", "--out");
  EXPECT_TRUE(fs::is_symlink(fs::symlink_status(at("link"))));
  EXPECT_EQ(read(at("target")), "new");
  fs::create_symlink(at("not_yet"), at("dangling"));
  write_output_file(at("dangling"), "made", "--out");
  EXPECT_TRUE(fs::is_symlink(fs::symlink_status(at("dangling"))));
  EXPECT_EQ(read(at("not_yet")), "made");
  expect_entries({"target", "link", "not_yet", "dangling"});
}

TEST_F(OutputFile, ACharacterDeviceIsWrittenNotReplaced) {
  write_output_file("/dev/null", "discarded", "--out");
  EXPECT_TRUE(fs::is_character_file("/dev/null"));
  // /dev/full fails every write: the failure is named, the device stays.
  const std::string why = refusal("/dev/full", "x");
  EXPECT_NE(why.find("--out /dev/full: write failed"), std::string::npos) << why;
  EXPECT_TRUE(fs::is_character_file("/dev/full"));
}

TEST_F(OutputFile, APipeIsWrittenInPlace) {
  ASSERT_EQ(::mkfifo(at("fifo").c_str(), 0600), 0);
  std::string got;
  std::thread reader([&] { got = read(at("fifo")); });
  write_output_file(at("fifo"), "through the pipe", "--out");
  reader.join();
  EXPECT_EQ(got, "through the pipe");
  EXPECT_TRUE(fs::is_fifo(at("fifo")));
  expect_entries({"fifo"});
}

// /dev/stdout into a pipe is /proc/self/fd/1 -> "pipe:[N]", a link to no
// path: the kernel's resolution is what is written.
TEST_F(OutputFile, APipeBehindAMagicLinkIsWritten) {
  int fds[2];
  ASSERT_EQ(::pipe(fds), 0);
  write_output_file("/proc/self/fd/" + std::to_string(fds[1]), "via the fd", "--out");
  ::close(fds[1]);
  char buf[32] = {};
  EXPECT_EQ(::read(fds[0], buf, sizeof(buf)), 10);
  EXPECT_EQ(std::string(buf), "via the fd");
  ::close(fds[0]);
}

TEST_F(OutputFile, WhatIsNotAFileIsRefusedByName) {
  EXPECT_NE(refusal(dir_.string(), "x").find("is a directory"), std::string::npos);
  EXPECT_NE(refusal(at("missing/x.xml"), "x").find("does not exist"), std::string::npos);
  EXPECT_NE(refusal("", "x").find("--out: empty path"), std::string::npos);
  const int s = ::socket(AF_UNIX, SOCK_STREAM, 0);
  ASSERT_GE(s, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  const std::string sock = at("sock");
  ASSERT_LT(sock.size(), sizeof(addr.sun_path));
  std::copy(sock.begin(), sock.end(), addr.sun_path);
  ASSERT_EQ(::bind(s, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  EXPECT_NE(refusal(sock, "x").find("not a regular file"), std::string::npos);
  ::close(s);
  EXPECT_TRUE(fs::is_socket(sock));
  expect_entries({"sock"});
}

TEST_F(OutputFile, AnInputIsNeverTheOutputHoweverSpelled) {
  write_output_file(at("trace.safetensors"), "the trace", "--out");
  fs::create_hard_link(at("trace.safetensors"), at("hard"));
  fs::create_symlink(at("trace.safetensors"), at("soft"));
  const std::string other_spelling = (dir_ / "." / "trace.safetensors").string();
  for (const std::string& out : {at("trace.safetensors"), other_spelling, at("hard"), at("soft")}) {
    const std::string why = refusal(out, "<xml/>", {at("trace.safetensors")});
    EXPECT_NE(why.find("is also an input of this command"), std::string::npos) << out << ": " << why;
  }
  EXPECT_THROW(check_output_path(at("hard"), "--junit", {at("soft")}), InputError);
  EXPECT_EQ(read(at("trace.safetensors")), "the trace");
  EXPECT_NO_THROW(check_output_path(at("report.xml"), "--junit", {at("trace.safetensors")}));
  expect_entries({"trace.safetensors", "hard", "soft"});
}

}  // namespace
}  // namespace pb
