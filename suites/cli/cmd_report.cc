// parabench report DIR: runs scripts/report.py (matplotlib, headless) on a
// results directory. The script is found through the source tree this binary
// was built from (PARABENCH_SOURCE_DIR, set at build time) unless --script
// names it. The script's exit status is passed through (2 stays bad input).
#include <filesystem>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "harness/status.h"
#include "suites/cli/command.h"
#include "suites/cli/common.h"

#ifndef PARABENCH_SOURCE_DIR
#define PARABENCH_SOURCE_DIR ""
#endif

namespace pb::cli {
namespace {

struct ReportFlags {
  std::string dir, out, script, python = "/usr/bin/python3";
};

int run_report(const ReportFlags& f) {
  namespace fs = std::filesystem;
  require(fs::is_directory(f.dir), "DIR: '" + f.dir + "' is not a directory");
  const std::string script =
      !f.script.empty() ? f.script : std::string(PARABENCH_SOURCE_DIR) + "/scripts/report.py";
  require(fs::is_regular_file(script), "--script: '" + script + "' not found (pass --script PATH)");
  require(fs::exists(f.python), "--python: '" + f.python + "' not found");
  std::vector<std::string> args = {f.python, script, f.dir};
  if (!f.out.empty()) args.insert(args.end(), {"--out", f.out});
  const int rc = run_child(args);
  if (rc < 0) throw std::runtime_error("report: " + script + " was killed (signal " + std::to_string(-rc) + ")");
  return rc == 0 ? 0 : rc == 2 ? 2 : 1;
}

}  // namespace

void register_report(CLI::App& root, Registry& reg, const Env& /*env*/) {
  auto f = std::make_shared<ReportFlags>();
  CLI::App* app = root.add_subcommand("report", "plots + self-contained HTML report from a results directory");
  app->add_option("dir", f->dir, "run directory holding results CSVs")->required();
  app->add_option("--out", f->out, "output directory (default: DIR)");
  app->add_option("--script", f->script, "report script (default: scripts/report.py of the source tree)");
  app->add_option("--python", f->python, "Python with matplotlib (default /usr/bin/python3)");
  reg.push_back({app, [f] { return run_report(*f); }});
}

}  // namespace pb::cli
