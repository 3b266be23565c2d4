// Fuzz target: the checkpoint index reader, as `parabench reshard SRC`,
// `check --reshard` and a resumed run read a checkpoint
// (harness/io/checkpoint.h: CheckpointIndex::parse, then CheckpointReader::open,
// which checks every shard file the index names). Input: the text of
// index.json, written into a scratch checkpoint directory that holds one real
// shard file, rank-00000.safetensors (tensor "w" of 6 F32 values in shards
// "w@0" of 4 and "w@4" of 2, and "b" of 3 I64 values in "b@0"), so an index
// can name files and keys that exist. Only pb::InputError may leave the reader.
// Invariants: an index that parses has shards that tile every tensor
// (check_tiling does not throw); it writes back (to_json) to JSON that
// parses, whose text, parsed and written again, is the same (a fixed point);
// an index that opens reads every tensor whole, and each element it reads is
// the shard file's.
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

#include "harness/io/checkpoint.h"
#include "harness/status.h"
#include "suites/fuzz/fuzz_check.h"

namespace {

const std::string& scratch() {
  static const std::string dir = [] {
    const std::string d = "/tmp/pb_fuzz_checkpoint_" + std::to_string(::getpid());
    std::filesystem::create_directories(d);
    pb::CheckpointShardWriter w(0);
    const float wv[6] = {1, 2, 3, 4, 5, 6};
    const int64_t bv[3] = {7, 8, 9};
    w.add("w", {2, 3}, pb::StDType::F32, 0, 4, wv);
    w.add("w", {2, 3}, pb::StDType::F32, 4, 2, wv + 4);
    w.add("b", {3}, pb::StDType::I64, 0, 3, bv);
    w.write(d);
    return d;
  }();
  return dir;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string in(reinterpret_cast<const char*>(data), size);
  pb::CheckpointIndex ix;
  try {
    ix = pb::CheckpointIndex::parse(in, "fuzz");
  } catch (const pb::InputError&) {
    return 0;
  }
  try {
    ix.check_tiling("fuzz");
  } catch (const pb::InputError& e) {
    PB_FUZZ_CHECK(false, std::string("a parsed index does not tile: ") + e.what());
  }
  std::string text = ix.to_json(), previous;
  for (int round = 0; round < 2; ++round) {
    try {
      previous = text;
      text = pb::CheckpointIndex::parse(text, "fuzz written").to_json();
    } catch (const pb::InputError& e) {
      PB_FUZZ_CHECK(false, std::string("a written index does not parse: ") + e.what() + "\n" + text);
    }
  }
  PB_FUZZ_CHECK(text == previous, "to_json is not a fixed point:\n" + previous + "\n---\n" + text);

  // Opened beside the real shard file: every file, key, dtype and count checked.
  const std::string dir = scratch();
  PB_FUZZ_CHECK(pb_fuzz_write_file(dir + "/" + pb::kCheckpointIndexName, in), "cannot write the scratch index");
  std::shared_ptr<const pb::CheckpointReader> r;
  try {
    r = pb::CheckpointReader::open(dir);
  } catch (const pb::InputError&) {
    return 0;
  }
  for (const pb::CheckpointTensor& t : r->index().tensors) {
    const size_t es = pb::st_dtype_size(t.dtype);
    std::vector<char> whole(size_t(t.numel()) * es);
    try {
      r->read(t.name, 0, t.numel(), t.dtype, whole.data());
    } catch (const pb::InputError& e) {
      PB_FUZZ_CHECK(false, std::string("an opened checkpoint does not read ") + t.name + ": " + e.what());
    }
    // Each shard's range is the shard file's tensor, byte for byte.
    const pb::SafetensorsFile f = pb::SafetensorsFile::open(dir + "/rank-00000.safetensors");
    for (const pb::CheckpointShard& s : t.shards) {
      PB_FUZZ_CHECK(s.file == "rank-00000.safetensors", "opened with a file that is not there: " + s.file);
      const auto raw = f.raw(s.key);
      PB_FUZZ_CHECK(raw.size() == size_t(s.count) * es &&
                        std::memcmp(raw.data(), whole.data() + size_t(s.offset) * es, raw.size()) == 0,
                    "read " + t.name + " differs from " + s.key + " of the shard file");
    }
  }
  return 0;
}
