#include "impl/spec/rank.h"

#include "harness/status.h"

namespace pb {

void Declared::add_comm(const std::string& group, CommOp op, int64_t bytes) {
  for (auto& c : comm)
    if (c.group == group && c.op == op) {
      c.bytes += bytes;
      return;
    }
  comm.push_back({group, op, bytes});
}

std::shared_ptr<TrainDevice> open_device(Device device, const DeviceOpener& open) {
  if (device == Device::cpu) return nullptr;
  require(open != nullptr, "train.device: cuda: the run was given no way to open a device");
  std::shared_ptr<TrainDevice> d = open();
  require(d != nullptr, "train.device: cuda: no device was opened");
  return d;
}

RankDevice::RankDevice(Communicator& world, Device device, const DeviceOpener& open)
    : device_(open_device(device, open)), world_(world), before_(world.ordered_after()) {
  if (device_) world_.order_after(device_->stream);
}

RankDevice::~RankDevice() { world_.order_after(before_); }

void Rank::save_state(RankCheckpointOut&) {
  throw InputError("checkpoint: this strategy does not write checkpoints (docs/checkpoint.md lists those that do)");
}

void Rank::load_state(const RankCheckpointIn&) {
  throw InputError("checkpoint: this strategy does not read checkpoints (docs/checkpoint.md lists those that do)");
}

std::vector<StepStats> Rank::train(int steps, std::vector<double>* grads1) {
  std::vector<StepStats> out;
  for (int i = 0; i < steps; ++i) {
    out.push_back(step());
    if (i == 0 && grads1) *grads1 = full_grads();
  }
  return out;
}

}  // namespace pb
