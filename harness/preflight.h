// Preflight: before a command allocates or starts ranks, it estimates what it
// will need and refuses (InputError, exit 2) with the figure when that is more
// than the limits — so a huge world, stage count, message or model is refused
// in milliseconds instead of dying of std::bad_alloc, failing to create
// threads, or swapping for minutes. The estimates live with what they
// estimate (the planner's memory for runs, the collective driver's buffers,
// the schedule's actions); this file holds the limits, the check and the
// size parser every command shares.
//
// Limits: memory defaults to this machine's physical memory; local ranks (the
// local backend runs each rank as a thread) default to kDefaultMaxLocalRanks,
// measured: a 1024-rank all-reduce of 8 bytes takes 1.1 s on 2 cores, 4096
// ranks did not finish in 120 s. Both are raised (or lowered) deliberately
// with --max-memory SIZE and --max-ranks N.
#pragma once
#include <climits>
#include <cstdint>
#include <initializer_list>
#include <string>
#include <string_view>
#include <utility>

namespace pb {

inline constexpr int kDefaultMaxLocalRanks = 1024;

// Memory one rank costs beyond its data (a local rank's thread stack pages,
// communicator and bookkeeping), measured: a 1024-rank local world of 8-byte
// collectives peaks at 257 MiB resident.
inline constexpr double kRankOverheadBytes = 256.0 * 1024;

// Memory one pipeline action (a forward, backward or weight-gradient of one
// microbatch on one stage) costs in a schedule, its simulation and timeline,
// measured by `parabench schedule`'s peak resident memory.
inline constexpr double kScheduleBytesPerAction = 160;

struct Limits {
  double memory_bytes = 0;                          // 0: this machine's physical memory
  int64_t max_local_ranks = kDefaultMaxLocalRanks;  // ranks one process runs as threads
};

// Physical memory of this machine (sysconf pages x page size); 0 if unknown.
double machine_memory_bytes();

// What a command will need: bytes in this process and ranks it runs as threads.
struct Need {
  double bytes = 0;
  int64_t local_ranks = 0;
};

// InputError unless `need` fits `limits`, naming `what` and the figures, e.g.
// "check dp1000000: needs 3.10 TiB of memory, this machine has 23.4 GiB
// (--max-memory SIZE raises the limit; `parabench plan` sizes shapes this
// large without running them)".
void require_fits(const Need& need, const Limits& limits, std::string_view what);

// "1.50 MiB" (powers of 1024; B, KiB ... EiB).
std::string human_bytes(double bytes);

// A byte size: a finite number >= 0 with an optional suffix K, M, G, T
// (powers of 1024, either case), e.g. "8", "64K", "1.5G". InputError naming
// `field` for anything else, and for sizes of 2^62 bytes or more (so size
// arithmetic downstream cannot overflow).
int64_t parse_byte_size(std::string_view text, std::string_view field);

// A product of sizes (a world, a global batch, a token count), computed
// checked: the product of the named factors, or InputError naming `what`,
// every factor and the bound when it would exceed `max` (or overflow int64),
// e.g. "train.batch = 8 (sequences per dp rank) x 2147483647 (mesh dp) is more
// than 2147483647". A product that wrapped would reach the user as a negative
// batch or an empty allocation.
int64_t checked_product(std::string_view what, std::initializer_list<std::pair<std::string_view, int64_t>> factors,
                        int64_t max = INT_MAX);

}  // namespace pb
