// The collective benchmark, nccl-tests style: each op is one small descriptor
// (buffer sizes for a byte count, input init, expected result, bus-bandwidth
// factor, run) in its own file; one driver (driver.h) sweeps sizes, warms up,
// times, validates and prints.
// Invariant: inputs are small integers in {-1, 0, 1} (value()), so every
// reduction of up to 256 ranks is exact in every dtype and the expected
// result is known exactly whatever order a backend sums in; #wrong compares
// bits (avg within a few ulps: NCCL pre-scales its inputs by 1/n).
#pragma once
#include <cstddef>
#include <cstdint>
#include <string_view>
#include <vector>

#include "harness/comm/comm.h"

namespace pb::coll {

// One measured point.
struct Ctx {
  int rank = 0, n = 1;
  DType dtype = DType::f32;
  ReduceOp redop = ReduceOp::sum;
  int root = 0;
  size_t param = 0;  // the op's count argument (per-rank block for reduce_scatter/all_gather/all_to_all)
  uint64_t rep = 0;  // varies the inputs between validation rounds
};

// Buffer layout in elements (nccl-tests' GetCollByteCount). In place, one
// buffer of max(send, recv) elements holds both: send at send_inplace,
// recv at recv_inplace (offsets for this rank).
struct Layout {
  size_t send = 0, recv = 0, param = 0;
  size_t send_inplace = 0, recv_inplace = 0;
};

struct CollDesc {
  std::string_view name;         // CLI and table name
  std::string_view schema_name;  // `op` column of results/SCHEMA.md
  bool reduces = false;          // uses -o
  bool rooted = false;           // uses -r
  // Layout for `count` elements of S on `rank` of n (counts rounded down as nccl-tests does).
  Layout (*layout)(size_t count, int n, int rank);
  void (*init)(const Ctx& c, void* send);           // this rank's input (layout.send elements, host)
  bool (*expected)(const Ctx& c, void* recv);       // this rank's result (layout.recv, host); false: unchecked
  double (*bus_factor)(int n);
  void (*run)(Communicator& comm, const Ctx& c, const void* send, void* recv);
};

// Every op, in nccl-tests' order.
const std::vector<const CollDesc*>& all_colls();
// By name; accepts nccl-tests' and the schema's spellings (alltoall/all_to_all, sendrecv/send_recv).
const CollDesc* find_coll(std::string_view name);

// Input element i of rank r: -1, 0 or 1 from a splitmix64 hash of (r, i, rep),
// so any two ranks (and any two elements) differ in about 2/3 of places.
inline int value(int r, size_t i, uint64_t rep) {
  uint64_t z = uint64_t(r) * 0x9E3779B97F4A7C15ull + uint64_t(i) * 0xD1B54A32D192ED03ull + rep * 0x8CB92BA72F3D8DD7ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return int((z ^ (z >> 31)) % 3) - 1;
}
// dst[k] = value(r, first + k) in dtype.
void fill_values(DType t, void* dst, size_t n, int r, size_t first, uint64_t rep);
// dst[k] = redop over ranks 0..nranks-1 of value(j, first + k): rank order,
// accumulation type, one rounding.
void fill_reduced(DType t, ReduceOp op, void* dst, size_t n, int nranks, size_t first, uint64_t rep);

extern const CollDesc kAllReduce, kReduceScatter, kAllGather, kBroadcast, kReduce, kAllToAll, kSendRecv;

}  // namespace pb::coll
