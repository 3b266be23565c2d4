// CommLog: totals per (group, op) in first-use order; lookups are linear
// because a rank touches a handful of groups and ops.
#include "harness/comm/comm_log.h"

#include <ostream>

#include "harness/io/csv.h"

namespace pb {

std::string_view comm_op_name(CommOp op) {
  switch (op) {
    case CommOp::all_reduce: return "all_reduce";
    case CommOp::reduce_scatter: return "reduce_scatter";
    case CommOp::all_gather: return "all_gather";
    case CommOp::broadcast: return "broadcast";
    case CommOp::reduce: return "reduce";
    case CommOp::all_to_all: return "all_to_all";
    case CommOp::send: return "send";
    case CommOp::recv: return "recv";
    case CommOp::sendrecv: return "sendrecv";
    case CommOp::barrier: return "barrier";
  }
  return "?";
}

CommCounters& CommCounters::operator+=(const CommCounters& o) {
  calls += o.calls;
  bytes += o.bytes;
  sent_bytes += o.sent_bytes;
  inter_node_bytes += o.inter_node_bytes;
  blocked_s += o.blocked_s;
  return *this;
}

size_t CommLog::find_or_add(std::string_view group, CommOp op) {
  for (size_t i = 0; i < entries_.size(); ++i)
    if (entries_[i].op == op && entries_[i].group == group) return i;
  entries_.push_back({std::string(group), op, {}});
  return entries_.size() - 1;
}

CommLog::Ticket CommLog::record(std::string_view group, CommOp op, DType dtype, uint64_t count,
                                uint64_t bytes, uint64_t sent_bytes, uint64_t inter_node_bytes) {
  CommCounters c;
  c.calls = 1;
  c.bytes = bytes;
  c.sent_bytes = sent_bytes;
  c.inter_node_bytes = inter_node_bytes;
  std::lock_guard lk(mu_);
  Ticket t;
  t.epoch = epoch_;
  t.entry = find_or_add(group, op);
  entries_[t.entry].c += c;
  if (tracing_) {
    t.trace = trace_.size();
    trace_.push_back({std::string(group), op, dtype, count, c});
  }
  return t;
}

void CommLog::add_blocked(const Ticket& t, double seconds) {
  std::lock_guard lk(mu_);
  if (t.epoch != epoch_ || t.entry >= entries_.size()) return;
  entries_[t.entry].c.blocked_s += seconds;
  if (t.trace < trace_.size()) trace_[t.trace].counters.blocked_s += seconds;
}

CommCounters CommLog::total() const {
  std::lock_guard lk(mu_);
  CommCounters s;
  for (const auto& e : entries_) s += e.c;
  return s;
}

CommCounters CommLog::get(std::string_view group, CommOp op) const {
  std::lock_guard lk(mu_);
  for (const auto& e : entries_)
    if (e.op == op && e.group == group) return e.c;
  return {};
}

CommCounters CommLog::by_group(std::string_view group) const {
  std::lock_guard lk(mu_);
  CommCounters s;
  for (const auto& e : entries_)
    if (e.group == group) s += e.c;
  return s;
}

CommCounters CommLog::by_op(CommOp op) const {
  std::lock_guard lk(mu_);
  CommCounters s;
  for (const auto& e : entries_)
    if (e.op == op) s += e.c;
  return s;
}

std::vector<std::string> CommLog::groups() const {
  std::lock_guard lk(mu_);
  std::vector<std::string> out;
  for (const auto& e : entries_) {
    bool seen = false;
    for (const auto& g : out) seen = seen || g == e.group;
    if (!seen) out.push_back(e.group);
  }
  return out;
}

void CommLog::reset() {
  std::lock_guard lk(mu_);
  for (auto& e : entries_) e.c = {};
  trace_.clear();
  ++epoch_;
}

void CommLog::set_trace(bool on) {
  std::lock_guard lk(mu_);
  tracing_ = on;
}

std::vector<CommRecord> CommLog::trace() const {
  std::lock_guard lk(mu_);
  return trace_;
}

std::vector<std::string> CommLog::csv_header() {
  return {"rank", "group", "op", "calls", "bytes", "sent_bytes", "inter_node_bytes", "blocked_s"};
}

std::vector<std::vector<std::string>> CommLog::csv_rows() const {
  std::lock_guard lk(mu_);
  std::vector<std::vector<std::string>> rows;
  for (const auto& e : entries_) {
    if (e.c.calls == 0) continue;
    rows.push_back({std::to_string(rank_), e.group, std::string(comm_op_name(e.op)),
                    std::to_string(e.c.calls), std::to_string(e.c.bytes),
                    std::to_string(e.c.sent_bytes), std::to_string(e.c.inter_node_bytes),
                    csv_number(e.c.blocked_s)});
  }
  return rows;
}

void CommLog::write_csv(std::ostream& out, bool with_header) const {
  if (with_header) out << csv_format_row(csv_header());
  for (const auto& r : csv_rows()) out << csv_format_row(r);
}

}  // namespace pb
