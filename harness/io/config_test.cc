// ConfigReader: typed reads, the messages of every rule, unknown-key
// detection with suggestions, overrides, and the canonical dump and hash.
#include "harness/io/config.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>

#include "harness/input_error_testing.h"
#include "harness/status.h"

namespace pb {
namespace {

const char* kToml = R"(
[model]
layers = 4
heads = -1
hidden = 64
precision = "bf16-mixed"
sizes = [1, 2, 3]
names = ["a", "b"]

[train]
lr = 3e-4
steps = 10
warmup = 2
clip = true
lr_bad = "fast"
)";

// Runs f, expects InputError, returns its message.
TEST(Config, TypedReads) {
  auto c = ConfigReader::from_string(kToml);
  EXPECT_EQ(c.require<int64_t>("model.layers"), 4);
  EXPECT_EQ(c.get<int>("model.hidden", 0), 64);
  EXPECT_DOUBLE_EQ(c.require<double>("train.lr"), 3e-4);
  EXPECT_DOUBLE_EQ(c.require<double>("train.steps"), 10.0);  // an integer is a valid float
  EXPECT_TRUE(c.require<bool>("train.clip"));
  EXPECT_EQ(c.require<std::string>("model.precision"), "bf16-mixed");
  EXPECT_EQ(c.require<std::vector<int64_t>>("model.sizes"), (std::vector<int64_t>{1, 2, 3}));
  EXPECT_EQ(c.require<std::vector<std::string>>("model.names"), (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(c.get<int64_t>("model.absent", 7), 7);
  EXPECT_EQ(c.get<std::string>("data.kind", "markov"), "markov");
}

TEST(Config, RuleMessagesNameKeyAndRule) {
  auto c = ConfigReader::from_string(kToml);
  EXPECT_EQ(input_error_of([&] { c.require<int64_t>("model.heads", Bounds::positive()); }), "model.heads: must be > 0, got -1");
  EXPECT_EQ(input_error_of([&] { c.require<double>("train.lr_bad"); }), "train.lr_bad: expected a float, got string");
  EXPECT_EQ(input_error_of([&] { c.require<int64_t>("train.lr"); }), "train.lr: expected an integer, got float");
  EXPECT_EQ(input_error_of([&] { c.require<bool>("model.layers"); }), "model.layers: expected a boolean, got integer");
  EXPECT_EQ(input_error_of([&] { c.require<std::vector<std::string>>("model.sizes"); }),
            "model.sizes[0]: expected a string, got integer");
  EXPECT_EQ(input_error_of([&] { c.require<std::vector<int64_t>>("model.layers"); }),
            "model.layers: expected an array of integers, got integer");
  EXPECT_EQ(input_error_of([&] { c.require<double>("train.lr", Bounds::half_open(0.1, 1)); }),
            "train.lr: must be in [0.1, 1), got 0.0003");
  EXPECT_EQ(input_error_of([&] { c.require<std::vector<int64_t>>("model.sizes", Bounds::at_least(2)); }),
            "model.sizes[0]: must be >= 2, got 1");
  EXPECT_EQ(input_error_of([&] { c.get<int64_t>("model.layers", 0, Bounds::at_most(2)); }), "model.layers: must be <= 2, got 4");
  EXPECT_EQ(input_error_of([&] { c.require_enum("model.precision", {"fp64", "fp32"}); }),
            "model.precision: must be one of fp64, fp32; got 'bf16-mixed'");
  EXPECT_NE(input_error_of([&] { c.require<int64_t>("train.epochs"); }).find("train.epochs: required key is missing"),
            std::string::npos);
  EXPECT_EQ(input_error_of([&] { c.require<int64_t>("model.layers.x"); }), "model.layers.x: 'model.layers' is integer, not a table");
  EXPECT_EQ(input_error_of([&] { c.require<int64_t>("model..x"); }), "config key 'model..x': empty component");
  EXPECT_EQ(c.require_enum("model.precision", {"fp64", "bf16-mixed"}), "bf16-mixed");
  EXPECT_EQ(c.get<int64_t>("train.warmup", 0, Bounds::closed(0, 2)), 2);
}

TEST(Config, IntRange) {
  auto c = ConfigReader::from_string("big = 5000000000\n");
  EXPECT_EQ(input_error_of([&] { c.require<int>("big"); }), "big: must fit in a 32-bit integer, got 5000000000");
  EXPECT_EQ(c.require<int64_t>("big"), 5000000000);
}

// A float that is not finite is refused wherever a float is read, naming the key.
TEST(Config, NonFiniteFloatsAreRefused) {
  auto c = ConfigReader::from_string("a = inf\nb = -inf\nc = nan\nd = [1.0, nan]\ne = 2.5\n");
  for (const char* k : {"a", "b", "c"}) {
    try {
      (void)c.get<double>(k, 0.0);
      ADD_FAILURE() << k;
    } catch (const InputError& e) {
      EXPECT_NE(std::string(e.what()).find(std::string(k) + ": must be a finite number"), std::string::npos) << e.what();
    }
  }
  EXPECT_THROW((void)c.get<std::vector<double>>("d", {}), InputError);
  EXPECT_EQ(c.get<double>("e", 0.0), 2.5);
}

TEST(Config, UnknownKeysWithSuggestion) {
  auto c = ConfigReader::from_string("[model]\nhiden = 64\nlayers = 2\n[train]\nlayers = 3\n", "x.toml");
  EXPECT_EQ(c.get<int64_t>("model.hidden", 32), 32);
  EXPECT_EQ(c.get<int64_t>("model.layers", 1), 2);
  EXPECT_EQ(c.unread_keys(), (std::vector<std::string>{"model.hiden", "train.layers"}));
  const std::string msg = input_error_of([&] { c.check_no_unknown_keys(); });
  EXPECT_EQ(msg,
            "config x.toml: unknown key 'model.hiden' (did you mean 'model.hidden'?); "
            "unknown key 'train.layers' (did you mean 'model.layers'?)");
}

TEST(Config, UnknownKeyWithoutCloseMatch) {
  auto c = ConfigReader::from_string("zzzzzz = 1\n", "y.toml");
  c.get<int64_t>("model.layers", 1);
  EXPECT_EQ(input_error_of([&] { c.check_no_unknown_keys(); }), "config y.toml: unknown key 'zzzzzz'");
}

TEST(Config, AllReadMeansNoUnknownKeys) {
  auto c = ConfigReader::from_string("[a]\nb = 1\n[a.c]\nd = \"x\"\n");
  c.require<int64_t>("a.b");
  c.require<std::string>("a.c.d");
  EXPECT_NO_THROW(c.check_no_unknown_keys());
}

TEST(Config, ParseErrorHasLineAndColumn) {
  const std::string msg = input_error_of([] { ConfigReader::from_string("a = 1\nb = = 2\n", "bad.toml"); });
  EXPECT_EQ(msg.rfind("config bad.toml:2:", 0), 0u) << msg;
}

TEST(Config, MissingFile) {
  EXPECT_EQ(input_error_of([] { ConfigReader::from_file("/nonexistent/cfg.toml"); }), "config /nonexistent/cfg.toml: cannot open");
}

TEST(Config, FromFile) {
  const auto path = std::filesystem::temp_directory_path() / "pb_config_test.toml";
  {
    std::ofstream(path) << "[model]\nlayers = 3\n";
  }
  auto c = ConfigReader::from_file(path.string());
  EXPECT_EQ(c.require<int64_t>("model.layers"), 3);
  EXPECT_EQ(c.source(), path.string());
  std::filesystem::remove(path);
}

TEST(Config, OverridesAndAssignments) {
  auto c = ConfigReader::from_string(kToml);
  c.set("train.steps", 20);
  c.set("model.precision", "fp32");
  c.set("new.table.flag", true);
  c.set_from_assignment("train.lr = 1e-3");
  c.set_from_assignment("model.kind=zero3");
  c.set_from_assignment("model.sizes=[4, 5]");
  EXPECT_EQ(c.require<int64_t>("train.steps"), 20);
  EXPECT_EQ(c.require<std::string>("model.precision"), "fp32");
  EXPECT_TRUE(c.require<bool>("new.table.flag"));
  EXPECT_DOUBLE_EQ(c.require<double>("train.lr"), 1e-3);
  EXPECT_EQ(c.require<std::string>("model.kind"), "zero3");
  EXPECT_EQ(c.require<std::vector<int64_t>>("model.sizes"), (std::vector<int64_t>{4, 5}));
  EXPECT_EQ(input_error_of([&] { c.set_from_assignment("noequals"); }), "--set 'noequals': expected key=value");
  EXPECT_EQ(input_error_of([&] { c.set("model.layers.x", 1); }), "model.layers.x: cannot set, 'model.layers' is integer, not a table");
}

// Found by suites/fuzz/fuzz_config: a --set key or bare value that is not
// UTF-8 went into the table, and the dump (config hash, safetensors metadata)
// was TOML that no reader accepts.
TEST(Config, SetRefusesInvalidUtf8) {
  auto c = ConfigReader::from_string("[train]\nsteps = 3\n");
  c.set_from_assignment("train.lr=3e-4");
  EXPECT_EQ(input_error_of([&] { c.set_from_assignment("str\xff\xff\xff" "ategy.mesh=dp2"); }),
            "--set 'str\xff\xff\xff" "ategy.mesh=dp2': not valid UTF-8");
  EXPECT_NE(input_error_of([&] { c.set_from_assignment("model.precision=bf\xc0\xaf" "16"); }).find("not valid UTF-8"),
            std::string::npos);  // an overlong '/'
  EXPECT_NE(input_error_of([&] { c.set_from_assignment("a=\xed\xa0\x80"); }).find("not valid UTF-8"),
            std::string::npos);  // a surrogate
  c.set_from_assignment("model.name=caf\xc3\xa9 \xf0\x9f\x9a\x80");  // UTF-8 stays welcome
  EXPECT_EQ(c.require<std::string>("model.name"), "caf\xc3\xa9 \xf0\x9f\x9a\x80");
  EXPECT_EQ(ConfigReader::from_string(c.dump()).dump(), c.dump());
}

TEST(Config, DumpIsCanonicalAndIncludesDefaults) {
  auto a = ConfigReader::from_string("[train]\nsteps = 10\nlr = 0.001\n[model]\nlayers = 0x4\n");
  auto b = ConfigReader::from_string("[model]\nlayers = 4\n[train]\nlr = 1e-3\n");
  for (auto* c : {&a, &b}) {
    c->get<int64_t>("train.steps", 10);
    c->get<int64_t>("model.layers", 2);
    c->get<double>("train.lr", 0.1);
  }
  EXPECT_EQ(a.dump(), b.dump());
  EXPECT_EQ(a.config_hash(), b.config_hash());
  EXPECT_EQ(a.config_hash().size(), 16u);
  EXPECT_NE(a.dump().find("steps = 10"), std::string::npos) << a.dump();
  // The dump parses back to the same effective config.
  auto round = ConfigReader::from_string(a.dump());
  EXPECT_EQ(round.require<int64_t>("model.layers"), 4);
  EXPECT_DOUBLE_EQ(round.require<double>("train.lr"), 1e-3);
  EXPECT_EQ(round.dump(), a.dump());
  b.set("train.steps", 11);
  EXPECT_NE(a.config_hash(), b.config_hash());
}

TEST(Config, DumpIsReadableTomlThatRoundTrips) {
  const char* text = R"(
top = "x"
[a]
f = 0.1
whole = 2.0
big = 1e300
neg = -0.0
n = 0x10
s = "say \"hi\"\n\ttab \u0001"
nested = [[1, 2], ["a"]]
inline = { k = 1, "odd key" = true }
when = 1979-05-27T07:32:00Z
[[rows]]
v = 1
[a."dotted.key"]
x = inf
)";
  auto c = ConfigReader::from_string(text);
  const std::string d = c.dump();
  EXPECT_NE(d.find("f = 0.1\n"), std::string::npos) << d;
  EXPECT_NE(d.find("whole = 2.0\n"), std::string::npos) << d;
  EXPECT_NE(d.find("n = 16\n"), std::string::npos) << d;
  EXPECT_NE(d.find("[a.\"dotted.key\"]"), std::string::npos) << d;
  EXPECT_EQ(d.rfind("rows = [{ v = 1 }]\ntop = \"x\"\n\n[a]\n", 0), 0u) << d;  // root values first
  auto back = ConfigReader::from_string(d, "dump");
  EXPECT_EQ(back.dump(), d);
  EXPECT_EQ(back.require<std::string>("a.s"), "say \"hi\"\n\ttab \u0001");
  EXPECT_DOUBLE_EQ(back.require<double>("a.f"), 0.1);
  EXPECT_EQ(back.require<double>("a.big"), 1e300);
  EXPECT_TRUE(std::signbit(back.require<double>("a.neg")));
  EXPECT_EQ(back.require<int64_t>("a.n"), 16);
}

TEST(Config, EditDistance) {
  EXPECT_EQ(edit_distance("kitten", "sitting"), 3u);
  EXPECT_EQ(edit_distance("", "abc"), 3u);
  EXPECT_EQ(edit_distance("same", "same"), 0u);
  // With a cap: the distance when within it, else cap + 1 (early, on length or
  // a row's minimum).
  EXPECT_EQ(edit_distance("kitten", "sitting", 3), 3u);
  EXPECT_EQ(edit_distance("kitten", "sitting", 2), 3u);
  EXPECT_EQ(edit_distance("kitten", "sitting", 0), 1u);
  EXPECT_EQ(edit_distance("a", std::string(5000, 'b'), 4), 5u);
  EXPECT_EQ(edit_distance(std::string(3000, 'x'), std::string(3000, 'y'), 2), 3u);
  EXPECT_EQ(edit_distance("train.stepz", "train.steps", 2), 1u);
}

}  // namespace
}  // namespace pb
