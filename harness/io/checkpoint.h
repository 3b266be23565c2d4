// A sharded checkpoint (docs/checkpoint.md): one safetensors file per rank
// that holds state, plus an index, `index.json`, naming every tensor (its
// global shape and dtype) and the shards that tile it (the rank, its file,
// the tensor's key in that file, and the element range [offset, offset +
// count) of the tensor's row-major flattening the shard holds), and the run
// that wrote it (the run spec as canonical TOML, its hash, the model, the
// steps done, the data position and the seeds: the RNG state of a run whose
// randomness is counter-based, reference/init.h and reference/data.h).
// Invariants: a shard's key is "TENSOR@OFFSET" and its safetensors shape is
// [count]; an index is accepted only when every tensor's shards tile it
// exactly (sorted by offset: no gap, no overlap, nothing past the end), each
// shard's file exists and holds its key with the tensor's dtype and count
// (SafetensorsFile validates the file against its size, so a truncated shard
// is refused). Every refusal is an InputError naming the file and the fault.
// Nothing here knows the model: the caller names tensors (impl/spec
// checkpoint_state.h maps the flat parameter vector onto them).
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "harness/io/safetensors.h"

namespace pb {

inline constexpr int kCheckpointVersion = 1;
inline constexpr const char* kCheckpointIndexName = "index.json";
// A tensor's elements, a shard's offset and count: at most 2^53 (an index
// saying more is refused before any arithmetic on them can overflow).
inline constexpr int64_t kMaxCheckpointElements = int64_t(1) << 53;

struct CheckpointShard {
  int rank = 0;
  std::string file;  // relative to the checkpoint directory
  std::string key;   // "TENSOR@OFFSET"
  int64_t offset = 0, count = 0;
};

struct CheckpointTensor {
  std::string name;
  Shape shape;
  StDType dtype = StDType::F32;
  std::vector<CheckpointShard> shards;  // sorted by offset
  int64_t numel() const { return pb::numel(shape); }
};

// The run that wrote a checkpoint.
struct CheckpointRun {
  std::string spec_toml;   // the run spec (impl/spec/run_spec.h write_run_spec), canonical TOML
  std::string spec_hash;   // FNV-1a 64 of spec_toml, 16 hex digits
  std::string spec_label;  // "dp2 shard=zero3", for messages
  std::string model;       // the model's name
  int world = 1;
  int64_t step = 0;           // optimizer steps done (Adam's bias correction resumes at step + 1)
  int64_t data_position = 0;  // the next step's index into the data stream
  uint64_t seed = 0, data_seed = 0;  // init and data RNG keys (counter-based: the whole RNG state)
};

struct CheckpointIndex {
  int version = kCheckpointVersion;
  CheckpointRun run;
  std::vector<CheckpointTensor> tensors;  // in name order
  std::string to_json() const;
  // InputError "checkpoint WHERE: ..." on malformed JSON, a missing field or
  // a version this build does not read.
  static CheckpointIndex parse(const std::string& json, const std::string& where);
  const CheckpointTensor* find(const std::string& name) const;
  // Every tensor's shards tile it exactly: InputError naming the tensor and
  // the gap or overlap otherwise.
  void check_tiling(const std::string& where) const;
};

// One rank's shard file, filled piece by piece.
class CheckpointShardWriter {
 public:
  explicit CheckpointShardWriter(int rank) : rank_(rank) {}
  // Elements [offset, offset + count) of tensor `name` (global shape
  // `shape`), `count` values of `dtype` at `data`.
  void add(const std::string& name, const Shape& shape, StDType dtype, int64_t offset, int64_t count,
           const void* data);
  int rank() const { return rank_; }
  bool empty() const { return shards_.empty(); }
  static std::string file_name(int rank);  // "rank-00003.safetensors"
  // Writes DIR/file_name(rank) (write_output_file: a fresh temporary renamed over it).
  void write(const std::string& dir) const;
  // The tensors and shards this file holds, for the index.
  const std::vector<CheckpointTensor>& pieces() const { return shards_; }

 private:
  int rank_;
  SafetensorsWriter st_;
  std::vector<CheckpointTensor> shards_;  // one tensor entry per piece (one shard each)
};

// The index of the pieces the ranks wrote: tensors merged by name (shape and
// dtype must agree), shards sorted by offset; InputError if two ranks
// describe one tensor differently.
CheckpointIndex make_checkpoint_index(const CheckpointRun& run, const std::vector<std::vector<CheckpointTensor>>& ranks);

// Writes DIR/index.json (write_output_file semantics) after checking the tiling.
void write_checkpoint_index(const std::string& dir, const CheckpointIndex& index);

// A checkpoint opened for reading: the index validated (tiling, files,
// keys, dtypes, counts) before anything is read.
class CheckpointReader {
 public:
  // InputError "checkpoint DIR: ..." when DIR is not a readable checkpoint.
  static std::shared_ptr<const CheckpointReader> open(const std::string& dir);
  const CheckpointIndex& index() const { return index_; }
  const std::string& dir() const { return dir_; }
  bool has(const std::string& tensor) const { return index_.find(tensor) != nullptr; }
  // Elements [offset, offset + count) of `tensor` into `out` (count values of
  // `dtype`, which must be the stored one): InputError if the tensor is absent,
  // has another dtype or the range lies outside it.
  void read(const std::string& tensor, int64_t offset, int64_t count, StDType dtype, void* out) const;

 private:
  std::string dir_;
  CheckpointIndex index_;
  std::map<std::string, std::unique_ptr<SafetensorsFile>> files_;
};

// FNV-1a 64 of `text`, 16 lowercase hex digits.
std::string checkpoint_hash(const std::string& text);

}  // namespace pb
