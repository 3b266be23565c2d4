#include "harness/io/checkpoint.h"

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <gtest/gtest.h>

#include "harness/input_error_testing.h"
#include "harness/status.h"

namespace pb {
namespace {

namespace fs = std::filesystem;

struct TempDir {
  fs::path path;
  TempDir() {
    path = fs::temp_directory_path() / ("pb_ckpt_test_" + std::to_string(::getpid()) + "_" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(path);
    fs::create_directories(path);
  }
  ~TempDir() { fs::remove_all(path); }
  std::string str() const { return path.string(); }
};

CheckpointRun a_run() {
  CheckpointRun r;
  r.spec_toml = "[train]\nseed = 1\n";
  r.spec_hash = checkpoint_hash(r.spec_toml);
  r.spec_label = "dp2 shard=zero3";
  r.model = "tiny";
  r.world = 2;
  r.step = 3;
  r.data_position = 3;
  r.seed = 1234;
  r.data_seed = 7;
  return r;
}

// Tensor "w" (shape 2 x 5, 10 floats 0..9) split unevenly over two ranks: 6 + 4.
void write_two_ranks(const std::string& dir) {
  std::vector<float> w(10);
  for (int i = 0; i < 10; ++i) w[size_t(i)] = float(i);
  CheckpointShardWriter r0(0), r1(1);
  r0.add("w", {2, 5}, StDType::F32, 0, 6, w.data());
  r1.add("w", {2, 5}, StDType::F32, 6, 4, w.data() + 6);
  const double b = 2.5;
  r1.add("b", {1}, StDType::F64, 0, 1, &b);
  r0.write(dir);
  r1.write(dir);
  write_checkpoint_index(dir, make_checkpoint_index(a_run(), {r0.pieces(), r1.pieces()}));
}

TEST(Checkpoint, RoundTripAcrossShardBoundaries) {
  TempDir d;
  write_two_ranks(d.str());
  auto r = CheckpointReader::open(d.str());
  EXPECT_EQ(r->index().run.step, 3);
  EXPECT_EQ(r->index().run.model, "tiny");
  ASSERT_TRUE(r->has("w"));
  EXPECT_EQ(r->index().find("w")->shards.size(), 2u);
  std::vector<float> got(5);
  r->read("w", 4, 5, StDType::F32, got.data());  // crosses the 6 | 4 boundary
  EXPECT_EQ(got, (std::vector<float>{4, 5, 6, 7, 8}));
  double b = 0;
  r->read("b", 0, 1, StDType::F64, &b);
  EXPECT_EQ(b, 2.5);
  EXPECT_THROW(r->read("w", 0, 1, StDType::F64, got.data()), InputError);  // wrong dtype
  EXPECT_THROW(r->read("w", 8, 3, StDType::F32, got.data()), InputError);  // past the end
  EXPECT_THROW(r->read("nope", 0, 1, StDType::F32, got.data()), InputError);
}

TEST(Checkpoint, IndexJsonRoundTrip) {
  CheckpointShardWriter r0(0);
  std::vector<float> w(4, 1.f);
  r0.add("w", {4}, StDType::F32, 0, 4, w.data());
  const CheckpointIndex ix = make_checkpoint_index(a_run(), {r0.pieces()});
  const CheckpointIndex back = CheckpointIndex::parse(ix.to_json(), "test");
  EXPECT_EQ(back.to_json(), ix.to_json());
}

TEST(Checkpoint, ShardsThatDoNotTileAreRefused) {
  std::vector<float> w(10, 0.f);
  CheckpointShardWriter r0(0), r1(1);
  r0.add("w", {10}, StDType::F32, 0, 6, w.data());
  r1.add("w", {10}, StDType::F32, 5, 5, w.data());  // overlaps [5, 6)
  const CheckpointIndex overlap = make_checkpoint_index(a_run(), {r0.pieces(), r1.pieces()});
  EXPECT_NE(input_error_of([&] { overlap.check_tiling("x"); }).find("overlaps"), std::string::npos);
  CheckpointShardWriter r2(1);
  r2.add("w", {10}, StDType::F32, 7, 3, w.data());  // gap [6, 7)
  const CheckpointIndex gap = make_checkpoint_index(a_run(), {r0.pieces(), r2.pieces()});
  EXPECT_NE(input_error_of([&] { gap.check_tiling("x"); }).find("a gap [6, 7)"), std::string::npos);
  const CheckpointIndex short_end = make_checkpoint_index(a_run(), {r0.pieces()});
  EXPECT_NE(input_error_of([&] { short_end.check_tiling("x"); }).find("a gap [6, 10)"), std::string::npos);
  TempDir d;  // and nothing is written when the index does not tile
  EXPECT_THROW(write_checkpoint_index(d.str(), gap), InputError);
  EXPECT_FALSE(fs::exists(d.path / kCheckpointIndexName));
}

TEST(Checkpoint, TruncatedShardIsRefused) {
  TempDir d;
  write_two_ranks(d.str());
  const fs::path f = d.path / CheckpointShardWriter::file_name(1);
  fs::resize_file(f, fs::file_size(f) - 3);
  const std::string msg = input_error_of([&] { CheckpointReader::open(d.str()); });
  EXPECT_NE(msg.find("rank-00001.safetensors"), std::string::npos) << msg;
}

TEST(Checkpoint, EditedIndexIsRefused) {
  TempDir d;
  write_two_ranks(d.str());
  const fs::path ip = d.path / kCheckpointIndexName;
  std::string text;
  {
    std::ifstream in(ip);
    text.assign(std::istreambuf_iterator<char>(in), {});
  }
  auto rewrite = [&](std::string t) {
    std::ofstream(ip, std::ios::trunc) << t;
  };
  // A shard's count changed: the tiling (or the file) disagrees.
  std::string t = text;
  const size_t at = t.find("\"count\": 4");
  ASSERT_NE(at, std::string::npos);
  t.replace(at, 10, "\"count\": 3");
  rewrite(t);
  EXPECT_THROW(CheckpointReader::open(d.str()), InputError);
  // The run spec edited without its hash.
  t = text;
  const size_t s = t.find("seed = 1");
  ASSERT_NE(s, std::string::npos);
  t.replace(s, 8, "seed = 2");
  rewrite(t);
  EXPECT_NE(input_error_of([&] { CheckpointReader::open(d.str()); }).find("hash"), std::string::npos);
  rewrite("{ not json");
  EXPECT_THROW(CheckpointReader::open(d.str()), InputError);
  fs::remove(ip);
  EXPECT_NE(input_error_of([&] { CheckpointReader::open(d.str()); }).find("no index.json"), std::string::npos);
}

TEST(Checkpoint, ShardFileOutsideTheDirectoryIsRefused) {
  TempDir d;
  write_two_ranks(d.str());
  const fs::path ip = d.path / kCheckpointIndexName;
  std::string text;
  {
    std::ifstream in(ip);
    text.assign(std::istreambuf_iterator<char>(in), {});
  }
  const size_t at = text.find("rank-00000.safetensors");
  text.replace(at, 22, "../x.safetensors");
  std::ofstream(ip, std::ios::trunc) << text;
  EXPECT_NE(input_error_of([&] { CheckpointReader::open(d.str()); }).find("not a file name"), std::string::npos);
}

// Sizes past 2^53 elements are refused before anything multiplies or adds
// them (the fuzz target's guard: numel and offset + count would overflow).
TEST(Checkpoint, SizesPastTwoToTheFiftyThreeAreRefused) {
  CheckpointIndex ix;
  ix.run = a_run();
  CheckpointTensor t;
  t.name = "w";
  t.shape = {int64_t(1) << 40, int64_t(1) << 40};
  t.shards.push_back({0, "rank-00000.safetensors", "w@0", 0, 4});
  ix.tensors.push_back(t);
  EXPECT_NE(input_error_of([&] { CheckpointIndex::parse(ix.to_json(), "test"); }).find("more than 2^53 elements"),
            std::string::npos);
  ix.tensors[0].shape = {8};
  ix.tensors[0].shards[0].count = INT64_MAX;
  EXPECT_NE(input_error_of([&] { CheckpointIndex::parse(ix.to_json(), "test"); }).find("each must be in [0, 2^53]"),
            std::string::npos);
}

}  // namespace
}  // namespace pb
