// parabench: the CLI. Reads the environment (only here), registers every
// subcommand, and maps errors to exit codes: bad input 2, failure 1.
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <exception>
#include <iostream>

#include "harness/io/run_meta.h"
#include "harness/status.h"
#include "suites/cli/command.h"

int main(int argc, char** argv) {
  using namespace pb::cli;
  Env env;
  env.under_mpirun = std::getenv("OMPI_COMM_WORLD_SIZE") || std::getenv("PMI_SIZE") ||
                     std::getenv("PMIX_RANK");
  for (const char* var : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE"})
    if (const char* v = std::getenv(var); v && std::atoi(v) > 0) {
      env.launched_size = std::atoi(v);
      break;
    }
  env.is_tty = isatty(STDOUT_FILENO);
  const char* rev = std::getenv("PARABENCH_GIT_REV");
  env.git_rev = rev ? rev : pb::build_git_rev();
  env.argv0 = argv[0];

  CLI::App app{"parabench: conformance and benchmark suite for parallel training"};
  app.require_subcommand(1);
  Registry reg;
  // PARABENCH_COMMANDS (one line per command)
  register_collectives(app, reg, env);
  register_plan(app, reg, env);
  register_report(app, reg, env);
  register_gate(app, reg, env);
  register_schedule(app, reg, env);
  register_train(app, reg, env);
  register_export(app, reg, env);
  register_verify(app, reg, env);
  register_selftest(app, reg, env);
  register_calibrate(app, reg, env);
  register_check(app, reg, env);
  register_run(app, reg, env);
  register_sweep(app, reg, env);
  register_validate(app, reg, env);
  register_reshard(app, reg, env);

  // An unknown first word is named with the commands there are (CLI11 would
  // only say that a subcommand is required).
  std::string known;
  bool found = false;
  for (const CLI::App* sub : app.get_subcommands([](const CLI::App*) { return true; })) {
    known += (known.empty() ? "" : ", ") + sub->get_name();
    found |= argc > 1 && sub->check_name(argv[1]);
  }
  if (argc > 1 && argv[1][0] != '-' && !found) {
    std::fprintf(stderr, "parabench: error: unknown command '%s' (commands: %s)\n", argv[1], known.c_str());
    return 2;
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    int rc = app.exit(e);
    return rc == 0 ? 0 : 2;
  }
  return pb::run_main("parabench", [&] {
    for (auto& c : reg)
      if (c.app->parsed()) return c.run();
    return 0;
  });
}
