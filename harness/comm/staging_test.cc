// Host buffers through a device backend (staging.h), on a machine without
// one: a BufferSpace that plays device memory (it reaches only what it
// allocated) and a one-rank communicator that refuses any pointer its space
// does not reach, so every host buffer must arrive staged, in place or not.
#include "harness/comm/staging.h"

#include <gtest/gtest.h>

#include <cstring>
#include <functional>
#include <map>
#include <numeric>
#include <vector>

#include "harness/comm/runner.h"

namespace pb {
namespace {

class FakeDeviceSpace final : public BufferSpace {
 public:
  void* allocate(size_t bytes) override {
    auto* p = new std::byte[bytes == 0 ? 1 : bytes]();
    live_[p] = bytes;
    ++allocations;
    return p;
  }
  void deallocate(void* p) override {
    auto it = live_.find(static_cast<std::byte*>(p));
    ASSERT_NE(it, live_.end()) << "freed a pointer the space did not allocate";
    delete[] it->first;
    live_.erase(it);
  }
  void copy_in(void* dst, const void* src, size_t bytes) override {
    EXPECT_TRUE(reaches(dst));
    std::memcpy(dst, src, bytes);
    copied_in += bytes;
  }
  void copy_out(void* dst, const void* src, size_t bytes) override {
    EXPECT_TRUE(reaches(src));
    std::memcpy(dst, src, bytes);
    copied_out += bytes;
  }
  bool is_host() const override { return false; }
  bool reaches(const void* p) const override {
    if (!p) return true;
    const auto* b = static_cast<const std::byte*>(p);
    auto it = live_.upper_bound(const_cast<std::byte*>(b));
    if (it == live_.begin()) return false;
    --it;
    return b < it->first + std::max<size_t>(it->second, 1);
  }
  size_t live() const { return live_.size(); }
  int allocations = 0;
  size_t copied_in = 0, copied_out = 0;

 private:
  std::map<std::byte*, size_t> live_;
};

// One rank: every collective is a copy of send to recv (what a group of one
// does), run only on pointers the space reaches.
class OneRankDeviceComm final : public Communicator {
 public:
  OneRankDeviceComm() : Communicator(0, {0}, {0}, "dev", nullptr) {}
  std::string_view backend() const override { return "fake-device"; }
  BufferSpace& buffers() override { return space; }
  FakeDeviceSpace space;
  int ran = 0;

 protected:
  void run(const OpDesc& d) override {
    ++ran;
    EXPECT_TRUE(space.reaches(d.send)) << "send not staged";
    EXPECT_TRUE(space.reaches(d.recv)) << "recv not staged";
    const size_t bytes = recv_elems(d, 0) * d.elem_size();
    if (d.send && d.recv && d.send != d.recv) std::memmove(d.recv, d.send, bytes);
  }
  std::shared_ptr<RequestState> start(const OpDesc& d) override {
    struct Done final : RequestState {
      std::function<void()> f;
      bool test() override { return wait(), true; }
      void wait() override {
        if (f) f(), f = nullptr;
      }
    };
    auto r = std::make_shared<Done>();
    r->f = [this, d] { run(d); };  // runs at wait: the copy-out must come after it
    return r;
  }
  std::unique_ptr<Communicator> do_split(int, int, std::string) override { return nullptr; }
};

TEST(Staging, HostBuffersCrossADeviceBackendAndComeBack) {
  OneRankDeviceComm c;
  std::vector<double> in = {1, 2, 3}, out(3, 0);
  c.all_reduce(in.data(), out.data(), 3, DType::f64);
  EXPECT_EQ(out, in);
  EXPECT_EQ(c.ran, 1);
  EXPECT_EQ(c.space.live(), 0u) << "staging buffers left";
  EXPECT_EQ(c.space.copied_in, 3 * sizeof(double)) << "only the send range is copied in";
  EXPECT_EQ(c.space.copied_out, 3 * sizeof(double));
}

TEST(Staging, InPlaceKeepsTheOffsetBetweenSendAndRecv) {
  OneRankDeviceComm c;
  double x = 7;  // a loss reduced in place, as the strategies do
  c.all_reduce(&x, &x, 1, DType::f64);
  EXPECT_EQ(x, 7);
  EXPECT_EQ(c.space.allocations, 1) << "in place is one region";
  // all_gather in place: send is this rank's block of recv.
  std::vector<float> buf = {5.f};
  c.all_gather(buf.data(), buf.data(), 1, DType::f32);
  EXPECT_EQ(buf[0], 5.f);
  EXPECT_EQ(c.space.allocations, 2);
  EXPECT_EQ(c.space.live(), 0u);
}

TEST(Staging, StagedOpMapsOverlappingRangesIntoOneRegion) {
  FakeDeviceSpace space;
  std::vector<float> send(8);
  std::iota(send.begin(), send.end(), 0.f);
  OpDesc d;
  d.op = CommOp::reduce_scatter;
  d.dtype = DType::f32;
  d.counts = {4, 4};
  d.send = send.data();
  d.recv = send.data() + 4;  // rank 1's block, in place
  {
    StagedOp st(d, 1, space);
    ASSERT_TRUE(st.staged());
    EXPECT_EQ(space.allocations, 1);
    EXPECT_EQ(static_cast<const float*>(st.desc().recv) - static_cast<const float*>(st.desc().send), 4);
    EXPECT_EQ(static_cast<const float*>(st.desc().send)[5], 5.f) << "the region is copied in whole";
    static_cast<float*>(st.desc().recv)[0] = 40.f;
    st.finish();
    EXPECT_EQ(space.live(), 0u);
  }
  EXPECT_EQ(send[4], 40.f);
  EXPECT_EQ(send[3], 3.f) << "only the receive range is copied out";
}

TEST(Staging, ReachableAndNullPointersPassThrough) {
  FakeDeviceSpace space;
  void* dev = space.allocate(16);
  OpDesc d;
  d.op = CommOp::all_reduce;
  d.dtype = DType::f32;
  d.count = 4;
  d.send = dev;
  d.recv = dev;
  {
    StagedOp st(d, 0, space);
    EXPECT_FALSE(st.staged());
    EXPECT_EQ(st.desc().send, dev);
  }
  // A reduce's recv off its root, a broadcast's send off its root: untouched.
  float host[4] = {1, 2, 3, 4};
  d.op = CommOp::reduce;
  d.root = 1;
  d.send = dev;
  d.recv = host;
  {
    StagedOp st(d, 0, space);
    EXPECT_FALSE(st.staged());
    st.finish();
  }
  EXPECT_EQ(host[0], 1.f);
  d.op = CommOp::broadcast;
  d.send = host;
  d.recv = dev;
  EXPECT_FALSE(StagedOp(d, 0, space).staged());
  d.op = CommOp::barrier;
  d.send = d.recv = nullptr;
  EXPECT_FALSE(StagedOp(d, 0, space).staged());
  space.deallocate(dev);
  EXPECT_EQ(space.allocations, 1);
}

TEST(Staging, NonBlockingCopiesOutAtWait) {
  OneRankDeviceComm c;
  std::vector<double> in = {4, 5}, out(2, 0);
  Request r = c.iall_reduce(in.data(), out.data(), 2, DType::f64);
  EXPECT_EQ(out[0], 0) << "nothing is copied out before the operation completes";
  r.wait();
  EXPECT_EQ(out, in);
  EXPECT_EQ(c.space.live(), 0u);
}

TEST(Staging, AHostSpaceStagesNothing) {
  BufferSpace host;
  double x = 1;
  OpDesc d;
  d.op = CommOp::all_reduce;
  d.dtype = DType::f64;
  d.count = 1;
  d.send = d.recv = &x;
  StagedOp st(d, 0, host);
  EXPECT_FALSE(st.staged());
  EXPECT_EQ(st.desc().recv, &x);
}

// The stream a rank's communicators wait for reaches every group split from
// its world, so a strategy's dp, replica or check group is ordered too.
TEST(Staging, OrderAfterReachesSplitGroups) {
  WorldOptions o;
  o.size = 2;
  auto world = make_local_world(o);
  int stream_stand_in = 0;
  run_ranks(*world, [&](Communicator& c) {
    EXPECT_EQ(c.ordered_after(), nullptr);
    c.order_after(&stream_stand_in);
    auto half = c.split(c.rank(), 0, "half");
    auto pair = c.split_groups({{1, 0}}, "pair");
    ASSERT_TRUE(half && pair);
    EXPECT_EQ(half->ordered_after(), &stream_stand_in);
    EXPECT_EQ(pair->ordered_after(), &stream_stand_in);
    EXPECT_EQ(pair->split(0, 0, "again")->ordered_after(), &stream_stand_in);
    c.order_after(nullptr);
  });
}

}  // namespace
}  // namespace pb
