// parabench export: init weights, every step's batch and a golden trace as
// safetensors with GPT-2 names (see reference/export.h), so any framework can
// load and compare them.
#include <cstdio>
#include <memory>

#include "reference/export.h"
#include "reference/train_config_io.h"
#include "suites/cli/command.h"
#include "suites/cli/common.h"
#include "suites/planner/preflight.h"

namespace pb::cli {

void register_export(CLI::App& root, Registry& reg, const Env&) {
  struct Flags {
    ConfigFlags cfg;
    std::string dir = "results/export";
    PreflightFlags limits;
  };
  auto f = std::make_shared<Flags>();
  CLI::App* app = root.add_subcommand("export", "write init weights, batches and a golden trace");
  add_config_flags(app, f->cfg);
  app->add_option("--dir", f->dir, "output directory")->capture_default_str();
  add_preflight_flags(app, f->limits);
  reg.push_back({app, [f] {
                   ConfigReader r = load_config(f->cfg);
                   TrainConfig cfg = read_train_config(r);
                   r.check_no_unknown_keys();
                   RunSpec one;  // the export trains the reference (at fp64 for the trace's truth)
                   one.train = cfg;
                   Need need = planner::run_need(one, 1, false, /*conformance=*/true);
                   need.bytes += export_bytes(cfg);  // every step's batch and the files' images
                   require_fits(need, limits_of(f->limits), "export " + cfg.model.name);
                   for (const auto& p : export_golden(cfg, f->dir, r.dump()))
                     std::printf("wrote %s\n", p.c_str());
                   return 0;
                 }});
}

}  // namespace pb::cli
