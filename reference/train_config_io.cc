#include "reference/train_config_io.h"

#include "harness/status.h"

namespace pb {

TrainConfig read_train_config(ConfigReader& r) {
  TrainConfig c;
  const auto pos = Bounds::positive();
  std::string name = r.get<std::string>("model.name", "tiny");
  c.model = named_model(name);
  c.model.V = r.get<int>("model.vocab", c.model.V, pos);
  c.model.maxT = r.get<int>("model.context", c.model.maxT, pos);
  c.model.C = r.get<int>("model.channels", c.model.C, pos);
  c.model.L = r.get<int>("model.layers", c.model.L, pos);
  c.model.NH = r.get<int>("model.heads", c.model.NH, pos);
  // [moe]: experts (0: dense), top_k, capacity_factor, every, aux_loss_coef, capacity.
  MoeConfig& moe = c.model.moe;
  moe.experts = r.get<int>("moe.experts", moe.experts, Bounds::non_negative());
  moe.top_k = r.get<int>("moe.top_k", moe.top_k, pos);
  moe.capacity_factor = r.get<double>("moe.capacity_factor", moe.capacity_factor, pos);
  moe.every = r.get<int>("moe.every", moe.every, pos);
  moe.aux_loss_coef = r.get<double>("moe.aux_loss_coef", moe.aux_loss_coef, Bounds::non_negative());
  moe.capacity = r.get_enum("moe.capacity", moe.capacity == MoeCapacity::local ? "local" : "global",
                            {"global", "local"}) == "local"
                     ? MoeCapacity::local
                     : MoeCapacity::global;
  // The family and its options (docs/models.md): a gpt2 model takes none of
  // them, so giving one names the key and the family.
  ModelConfig& m = c.model;
  m.family = r.get_enum("model.family", family_name(m.family), {"gpt2", "llama"}) == "llama" ? ModelFamily::llama
                                                                                          : ModelFamily::gpt2;
  for (const char* key : {"model.kv_heads", "model.ffn", "model.rope_theta", "model.norm_eps"})
    require(m.llama() || !r.has(key), std::string(key) + ": model '" + name +
                                          "' is model.family = gpt2, which takes no " + (key + 6) +
                                          " (set model.family = \"llama\" or use a llama model, e.g. tiny-llama)");
  if (m.llama()) {
    if (m.kv_heads == 0) m.kv_heads = m.NH;  // a gpt2 shape turned llama: multi-head until told
    m.kv_heads = r.get<int>("model.kv_heads", m.kv_heads, Bounds::non_negative());
    m.ffn = r.get<int>("model.ffn", m.ffn, Bounds::non_negative());
    m.rope_theta = r.get<double>("model.rope_theta", m.rope_theta, pos);
    m.norm_eps = r.get<double>("model.norm_eps", m.norm_eps, pos);
  }
  ModelConfig named = named_model(name);
  named.name = c.model.name;
  if (!(named == c.model)) c.model.name = "custom";

  c.precision = parse_precision(
      r.get_enum("train.precision", "fp32", {"fp64", "fp32", "bf16-mixed", "bf16"}));
  c.seed = uint64_t(r.get<int64_t>("train.seed", int64_t(c.seed), Bounds::non_negative()));
  c.steps = r.get<int>("train.steps", c.steps, pos);
  c.batch = r.get<int>("train.batch", c.batch, pos);
  c.seq = r.get<int>("train.seq", std::min(c.model.maxT, c.seq), pos);
  c.microbatches = r.get<int>("train.microbatches", c.microbatches, pos);
  c.threads = r.get<int>("train.threads", c.threads, pos);
  c.device = parse_device(r.get_enum("train.device", "cpu", {"cpu", "cuda"}));

  auto& o = c.optim;
  o.lr = r.get<double>("optim.lr", o.lr, pos);
  o.min_lr = r.get<double>("optim.min_lr", o.min_lr, Bounds::non_negative());
  o.warmup = r.get<int>("optim.warmup", o.warmup, Bounds::non_negative());
  o.schedule = r.get_enum("optim.schedule", o.schedule, {"cosine", "constant"});
  o.beta1 = r.get<double>("optim.beta1", o.beta1, Bounds::half_open(0, 1));
  o.beta2 = r.get<double>("optim.beta2", o.beta2, Bounds::half_open(0, 1));
  o.eps = r.get<double>("optim.eps", o.eps, pos);
  o.weight_decay = r.get<double>("optim.weight_decay", o.weight_decay, Bounds::non_negative());
  o.clip = r.get<double>("optim.clip", o.clip);

  c.data.seed = uint64_t(r.get<int64_t>("data.seed", int64_t(c.data.seed), Bounds::non_negative()));
  c.data.branching = r.get<int>("data.branching", c.data.branching, pos);
  c.data.mix = r.get<double>("data.mix", c.data.mix, Bounds{0.0, 1.0, true, true});
  c.validate();
  return c;
}

void write_train_config(const TrainConfig& c, ConfigReader& r) {
  r.set("model.name", c.model.name);
  r.set("model.vocab", c.model.V);
  r.set("model.context", c.model.maxT);
  r.set("model.channels", c.model.C);
  r.set("model.layers", c.model.L);
  r.set("model.heads", c.model.NH);
  if (c.model.llama()) {  // absent: gpt2 (the hashes of earlier exports)
    r.set("model.family", std::string(family_name(c.model.family)));
    r.set("model.kv_heads", c.model.kv_heads);
    r.set("model.ffn", c.model.ffn);
    r.set("model.rope_theta", c.model.rope_theta);
    r.set("model.norm_eps", c.model.norm_eps);
  }
  if (c.model.moe.experts > 0) {
    r.set("moe.experts", c.model.moe.experts);
    r.set("moe.top_k", c.model.moe.top_k);
    r.set("moe.capacity_factor", c.model.moe.capacity_factor);
    r.set("moe.every", c.model.moe.every);
    r.set("moe.aux_loss_coef", c.model.moe.aux_loss_coef);
    r.set("moe.capacity", std::string(c.model.moe.capacity == MoeCapacity::local ? "local" : "global"));
  }
  r.set("train.precision", precision_name(c.precision));
  r.set("train.seed", int64_t(c.seed));
  r.set("train.steps", c.steps);
  r.set("train.batch", c.batch);
  r.set("train.seq", c.seq);
  r.set("train.microbatches", c.microbatches);
  r.set("train.threads", c.threads);
  if (c.device != Device::cpu) r.set("train.device", device_name(c.device));  // absent: the CPU (earlier hashes)
  r.set("optim.lr", c.optim.lr);
  r.set("optim.min_lr", c.optim.min_lr);
  r.set("optim.warmup", c.optim.warmup);
  r.set("optim.schedule", c.optim.schedule);
  r.set("optim.beta1", c.optim.beta1);
  r.set("optim.beta2", c.optim.beta2);
  r.set("optim.eps", c.optim.eps);
  r.set("optim.weight_decay", c.optim.weight_decay);
  r.set("optim.clip", c.optim.clip);
  r.set("data.seed", int64_t(c.data.seed));
  r.set("data.branching", c.data.branching);
  r.set("data.mix", c.data.mix);
}

}  // namespace pb
