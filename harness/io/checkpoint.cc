#include "harness/io/checkpoint.h"

#include <algorithm>
#include <climits>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "harness/io/input_file.h"
#include "harness/io/output_file.h"
#include "harness/status.h"

namespace pb {

using nlohmann::json;

std::string checkpoint_hash(const std::string& text) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : text) {
    h ^= c;
    h *= 1099511628211ull;
  }
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(h));
  return buf;
}

std::string CheckpointShardWriter::file_name(int rank) {
  char buf[40];
  std::snprintf(buf, sizeof buf, "rank-%05d.safetensors", rank);
  return buf;
}

void CheckpointShardWriter::add(const std::string& name, const Shape& shape, StDType dtype, int64_t offset,
                                int64_t count, const void* data) {
  require(count > 0 && offset >= 0 && offset + count <= pb::numel(shape),
          "checkpoint: piece [" + std::to_string(offset) + ", " + std::to_string(offset + count) + ") of " + name +
              " lies outside its " + std::to_string(pb::numel(shape)) + " elements");
  const std::string key = name + "@" + std::to_string(offset);
  st_.add(key, dtype, Shape{count}, data, size_t(count) * st_dtype_size(dtype));
  CheckpointTensor t;
  t.name = name;
  t.shape = shape;
  t.dtype = dtype;
  t.shards.push_back({rank_, file_name(rank_), key, offset, count});
  shards_.push_back(std::move(t));
}

void CheckpointShardWriter::write(const std::string& dir) const {
  st_.write((std::filesystem::path(dir) / file_name(rank_)).string());
}

CheckpointIndex make_checkpoint_index(const CheckpointRun& run, const std::vector<std::vector<CheckpointTensor>>& ranks) {
  CheckpointIndex ix;
  ix.run = run;
  std::map<std::string, CheckpointTensor> by_name;
  for (const auto& pieces : ranks)
    for (const CheckpointTensor& p : pieces) {
      auto [it, fresh] = by_name.try_emplace(p.name, p);
      if (fresh) continue;
      require(it->second.shape == p.shape && it->second.dtype == p.dtype,
              "checkpoint: ranks describe tensor " + p.name + " with different shapes or dtypes");
      it->second.shards.insert(it->second.shards.end(), p.shards.begin(), p.shards.end());
    }
  for (auto& [name, t] : by_name) {
    std::sort(t.shards.begin(), t.shards.end(),
              [](const CheckpointShard& a, const CheckpointShard& b) { return a.offset < b.offset; });
    ix.tensors.push_back(std::move(t));
  }
  return ix;
}

const CheckpointTensor* CheckpointIndex::find(const std::string& name) const {
  auto it = std::lower_bound(tensors.begin(), tensors.end(), name,
                             [](const CheckpointTensor& t, const std::string& n) { return t.name < n; });
  return it != tensors.end() && it->name == name ? &*it : nullptr;
}

void CheckpointIndex::check_tiling(const std::string& where) const {
  for (size_t i = 1; i < tensors.size(); ++i)
    require(tensors[i - 1].name < tensors[i].name,
            "checkpoint " + where + ": tensors not in name order or duplicated at " + tensors[i].name);
  for (const CheckpointTensor& t : tensors) {
    const std::string what = "checkpoint " + where + ": the shards of " + t.name + " do not tile its " +
                             std::to_string(t.numel()) + " elements: ";
    int64_t at = 0;
    for (const CheckpointShard& s : t.shards) {
      require(s.count > 0, what + "shard " + s.key + " is empty");
      require(s.offset >= at, what + "shard " + s.key + " at " + std::to_string(s.offset) +
                                  " overlaps the one before it (which ends at " + std::to_string(at) + ")");
      require(s.offset == at, what + "a gap [" + std::to_string(at) + ", " + std::to_string(s.offset) + ")");
      at = s.offset + s.count;
    }
    require(at <= t.numel(), what + "shards run to " + std::to_string(at));
    require(at == t.numel(), what + "a gap [" + std::to_string(at) + ", " + std::to_string(t.numel()) + ")");
  }
}

std::string CheckpointIndex::to_json() const {
  json j;
  j["format"] = "parabench-checkpoint";
  j["version"] = version;
  json r;
  r["spec_toml"] = run.spec_toml;
  r["spec_hash"] = run.spec_hash;
  r["spec_label"] = run.spec_label;
  r["model"] = run.model;
  r["world"] = run.world;
  r["step"] = run.step;
  r["data_position"] = run.data_position;
  r["seed"] = run.seed;
  r["data_seed"] = run.data_seed;
  j["run"] = r;
  json ts = json::array();
  for (const CheckpointTensor& t : tensors) {
    json jt;
    jt["name"] = t.name;
    jt["shape"] = t.shape;
    jt["dtype"] = std::string(st_dtype_name(t.dtype));
    json ss = json::array();
    for (const CheckpointShard& s : t.shards)
      ss.push_back({{"rank", s.rank}, {"file", s.file}, {"key", s.key}, {"offset", s.offset}, {"count", s.count}});
    jt["shards"] = ss;
    ts.push_back(jt);
  }
  j["tensors"] = ts;
  return j.dump(1) + "\n";
}

namespace {
// An integer field in [lo, hi]: a float (1e103), a string or a value out of
// range is an InputError naming the field (nlohmann's get<int> would convert
// a float unchecked: undefined behaviour, found by fuzz_checkpoint).
int64_t int_field(const json& j, const char* key, int64_t lo, int64_t hi, const std::string& pre) {
  const json& v = j.at(key);
  require(v.is_number_integer() && !(v.is_number_unsigned() && v.get<uint64_t>() > uint64_t(INT64_MAX)),
          pre + "'" + key + "' is not an integer");
  const int64_t x = v.get<int64_t>();
  require(x >= lo && x <= hi, pre + "'" + key + "' is " + std::to_string(x) + ", outside [" + std::to_string(lo) +
                                  ", " + std::to_string(hi) + "]");
  return x;
}
uint64_t u64_field(const json& j, const char* key, const std::string& pre) {
  const json& v = j.at(key);
  require(v.is_number_unsigned() || (v.is_number_integer() && v.get<int64_t>() >= 0),
          pre + "'" + key + "' is not an unsigned integer");
  return v.get<uint64_t>();
}
}  // namespace

CheckpointIndex CheckpointIndex::parse(const std::string& text, const std::string& where) {
  const std::string pre = "checkpoint " + where + ": ";
  json j = json::parse(text, nullptr, false);
  require(!j.is_discarded() && j.is_object(), pre + "index is not a JSON object");
  CheckpointIndex ix;
  try {
    require(j.value("format", std::string()) == "parabench-checkpoint",
            pre + "not a parabench checkpoint index (format is not parabench-checkpoint)");
    ix.version = int(int_field(j, "version", INT32_MIN, INT32_MAX, pre));
    require(ix.version == kCheckpointVersion, pre + "index version " + std::to_string(ix.version) +
                                                  " (this build reads version " +
                                                  std::to_string(kCheckpointVersion) + ")");
    const json& r = j.at("run");
    ix.run.spec_toml = r.at("spec_toml").get<std::string>();
    ix.run.spec_hash = r.at("spec_hash").get<std::string>();
    ix.run.spec_label = r.at("spec_label").get<std::string>();
    ix.run.model = r.at("model").get<std::string>();
    ix.run.world = int(int_field(r, "world", 0, INT32_MAX, pre));
    ix.run.step = int_field(r, "step", INT64_MIN, INT64_MAX, pre);
    ix.run.data_position = int_field(r, "data_position", INT64_MIN, INT64_MAX, pre);
    ix.run.seed = u64_field(r, "seed", pre);
    ix.run.data_seed = u64_field(r, "data_seed", pre);
    for (const json& jt : j.at("tensors")) {
      CheckpointTensor t;
      t.name = jt.at("name").get<std::string>();
      require(jt.at("shape").is_array(), pre + "tensor " + t.name + ": 'shape' is not an array");
      for (const json& d : jt.at("shape")) {
        require(d.is_number_integer() && !(d.is_number_unsigned() && d.get<uint64_t>() > uint64_t(INT64_MAX)),
                pre + "tensor " + t.name + ": a dimension is not an integer");
        t.shape.push_back(d.get<int64_t>());
      }
      // The element count in int64 before anything multiplies or adds it (a
      // forged shape or offset would overflow: numel, the tiling's ends).
      int64_t n = 1;
      for (int64_t d : t.shape) {
        require(d >= 0, pre + "tensor " + t.name + " has a negative dimension");
        require(d == 0 || n <= kMaxCheckpointElements / d,
                pre + "tensor " + t.name + " has more than 2^53 elements (shape " + shape_str(t.shape) + ")");
        n *= d;
      }
      const std::string dt = jt.at("dtype").get<std::string>();
      require(parse_st_dtype(dt, &t.dtype), pre + "tensor " + t.name + " has unknown dtype " + dt);
      for (const json& js : jt.at("shards")) {
        CheckpointShard s;
        s.rank = int(int_field(js, "rank", 0, INT32_MAX, pre));
        s.file = js.at("file").get<std::string>();
        s.key = js.at("key").get<std::string>();
        s.offset = int_field(js, "offset", INT64_MIN, INT64_MAX, pre);
        s.count = int_field(js, "count", INT64_MIN, INT64_MAX, pre);
        require(s.offset >= 0 && s.count >= 0 && s.offset <= kMaxCheckpointElements &&
                    s.count <= kMaxCheckpointElements,
                pre + "shard " + s.key + " of " + t.name + " has offset " + std::to_string(s.offset) + " and count " +
                    std::to_string(s.count) + " (each must be in [0, 2^53])");
        require(s.file.find('/') == std::string::npos && s.file != ".." && !s.file.empty(),
                pre + "shard file '" + s.file + "' of " + t.name + " is not a file name inside the checkpoint");
        t.shards.push_back(std::move(s));
      }
      ix.tensors.push_back(std::move(t));
    }
  } catch (const json::exception& e) {
    throw InputError(pre + "malformed index: " + e.what());
  }
  require(ix.run.spec_hash == checkpoint_hash(ix.run.spec_toml),
          pre + "the run spec's hash " + ix.run.spec_hash + " does not match its text (" +
              checkpoint_hash(ix.run.spec_toml) + "): the index was edited");
  ix.check_tiling(where);
  return ix;
}

void write_checkpoint_index(const std::string& dir, const CheckpointIndex& index) {
  index.check_tiling(dir);
  write_output_file((std::filesystem::path(dir) / kCheckpointIndexName).string(), index.to_json(),
                    "checkpoint index");
}

std::shared_ptr<const CheckpointReader> CheckpointReader::open(const std::string& dir) {
  namespace fs = std::filesystem;
  std::shared_ptr<CheckpointReader> r(new CheckpointReader());
  r->dir_ = dir;
  std::error_code ec;
  require(fs::is_directory(dir, ec), "checkpoint " + dir + ": not a directory");
  const std::string ipath = (fs::path(dir) / kCheckpointIndexName).string();
  require(fs::is_regular_file(ipath, ec), "checkpoint " + dir + ": no " + kCheckpointIndexName);
  r->index_ = CheckpointIndex::parse(read_input_file(ipath, "checkpoint " + ipath + ": ", "checkpoint index", 256ull << 20), dir);
  for (const CheckpointTensor& t : r->index_.tensors)
    for (const CheckpointShard& s : t.shards) {
      auto& f = r->files_[s.file];
      if (!f) f = std::make_unique<SafetensorsFile>(SafetensorsFile::open((fs::path(dir) / s.file).string()));
      require(f->contains(s.key), "checkpoint " + dir + ": shard file " + s.file + " has no tensor " + s.key +
                                      " (the index names it for " + t.name + ")");
      const TensorInfo& ti = f->info(s.key);
      require(ti.dtype == t.dtype && ti.numel() == s.count,
              "checkpoint " + dir + ": " + s.file + ":" + s.key + " holds " + std::to_string(ti.numel()) + " " +
                  std::string(st_dtype_name(ti.dtype)) + " values; the index says " + std::to_string(s.count) +
                  " " + std::string(st_dtype_name(t.dtype)));
    }
  return r;
}

void CheckpointReader::read(const std::string& tensor, int64_t offset, int64_t count, StDType dtype,
                            void* out) const {
  const CheckpointTensor* t = index_.find(tensor);
  require(t != nullptr, "checkpoint " + dir_ + ": no tensor " + tensor);
  require(t->dtype == dtype, "checkpoint " + dir_ + ": " + tensor + " is " + std::string(st_dtype_name(t->dtype)) +
                                 ", asked for " + std::string(st_dtype_name(dtype)));
  require(offset >= 0 && count >= 0 && offset + count <= t->numel(),
          "checkpoint " + dir_ + ": [" + std::to_string(offset) + ", " + std::to_string(offset + count) + ") lies outside " +
              tensor + "'s " + std::to_string(t->numel()) + " elements");
  const size_t es = st_dtype_size(dtype);
  char* dst = static_cast<char*>(out);
  for (const CheckpointShard& s : t->shards) {
    const int64_t lo = std::max(offset, s.offset), hi = std::min(offset + count, s.offset + s.count);
    if (lo >= hi) continue;
    const std::span<const char> raw = files_.at(s.file)->raw(s.key);
    std::memcpy(dst + size_t(lo - offset) * es, raw.data() + size_t(lo - s.offset) * es, size_t(hi - lo) * es);
  }
}

}  // namespace pb
