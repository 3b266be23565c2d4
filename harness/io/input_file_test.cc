// read_input_file: only a regular file within its limit is read; a directory,
// a FIFO (which would block) and an oversized file are refused by name.
#include "harness/io/input_file.h"

#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>

#include "harness/io/config.h"
#include "harness/io/csv.h"
#include "harness/status.h"

namespace pb {
namespace {

namespace fs = std::filesystem;

std::string refusal(const std::string& path, uint64_t max_bytes = 1024) {
  try {
    read_input_file(path, "in " + path + ": ", "TOML config", max_bytes);
  } catch (const InputError& e) {
    return e.what();
  }
  return "";
}

TEST(InputFile, OnlyARegularFileWithinItsLimitIsRead) {
  const fs::path dir = fs::temp_directory_path() / ("pb_input_file_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  const std::string file = (dir / "a.toml").string();
  std::ofstream(file) << "x = 1\n";
  EXPECT_EQ(read_input_file(file, "", "TOML config", 6), "x = 1\n");
  EXPECT_EQ(refusal(file, 5), "in " + file + ": is 6 bytes, more than the 5 a TOML config may have");
  EXPECT_EQ(refusal(dir.string()), "in " + dir.string() + ": is a directory (give a TOML config file)");
  EXPECT_EQ(refusal((dir / "missing").string()), "in " + (dir / "missing").string() + ": cannot open");
  EXPECT_EQ(refusal(""), "in : cannot open");
  const std::string fifo = (dir / "fifo").string();
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  EXPECT_NE(refusal(fifo).find("is not a regular file"), std::string::npos);  // returns: does not block
  EXPECT_NE(refusal("/dev/zero").find("is not a regular file"), std::string::npos);
  // The config and CSV readers go through it: a directory is not an empty config.
  EXPECT_THROW(ConfigReader::from_file(dir.string()), InputError);
  EXPECT_THROW(ConfigReader::from_file(fifo), InputError);
  EXPECT_THROW(read_csv(fifo), InputError);
  fs::remove_all(dir);
}

}  // namespace
}  // namespace pb
