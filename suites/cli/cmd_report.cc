// parabench report DIR [DIR...]: runs scripts/report.py (matplotlib,
// headless) on a results directory, or puts several side by side (machines
// compared, each run labelled by the host its rows recorded; --out required). The script is found through the source tree this binary
// was built from (PARABENCH_SOURCE_DIR, set at build time) unless --script
// names it. The script's exit status is passed through (2 stays bad input).
#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "harness/io/csv_schema.h"
#include "harness/status.h"
#include "suites/report/validate.h"
#include "suites/cli/command.h"
#include "suites/cli/common.h"

#ifndef PARABENCH_SOURCE_DIR
#define PARABENCH_SOURCE_DIR ""
#endif

namespace pb::cli {
namespace {

struct ReportFlags {
  std::vector<std::string> dirs;
  std::string out, script, python = "/usr/bin/python3";
};

int run_report(const ReportFlags& f) {
  namespace fs = std::filesystem;
  require(!f.dirs.empty(), "DIR: at least one run directory");
  require(f.dirs.size() == 1 || !f.out.empty(),
          "--out: required with several run directories (the side-by-side report belongs to none of them)");
  for (size_t i = 0; i < f.dirs.size(); ++i) {
    require(fs::is_directory(f.dirs[i]), "DIR: '" + f.dirs[i] + "' is not a directory");
    for (size_t j = 0; j < i; ++j)
      require(!fs::equivalent(f.dirs[i], f.dirs[j]), "DIR: '" + f.dirs[i] + "' is given twice");
  }
  const std::string script =
      !f.script.empty() ? f.script : std::string(PARABENCH_SOURCE_DIR) + "/scripts/report.py";
  require(fs::is_regular_file(script), "--script: '" + script + "' not found (pass --script PATH)");
  require(fs::exists(f.python), "--python: '" + f.python + "' not found");
  // Every CSV the report will read is checked against results/schema.json
  // first (the validator of `parabench validate`): a torn row, a NUL byte, a
  // binary file or a missing column is exit 2 naming file and line, not a
  // plot of half a row or a Python traceback.
  const report::RunFileSchema schema =
      report::RunFileSchema::parse(builtin_results_schema_json(), "<builtin results/schema.json>");
  std::vector<std::string> problems;
  std::vector<std::string> files;
  for (const std::string& dir : f.dirs) {
    std::vector<std::string> in_dir;
    for (const auto& e : fs::directory_iterator(dir))
      if (e.path().extension() == ".csv") in_dir.push_back(e.path().string());
    std::sort(in_dir.begin(), in_dir.end());
    require(!in_dir.empty(), "DIR: '" + dir + "' holds no results CSV (*.csv): nothing to report");
    files.insert(files.end(), in_dir.begin(), in_dir.end());
  }
  for (const auto& file : files) {
    require(fs::is_regular_file(file), "DIR: '" + file + "' is not a regular file");
    for (auto& p : schema.validate(file)) problems.push_back(std::move(p));
  }
  if (!problems.empty()) {
    std::string msg;
    for (size_t i = 0; i < problems.size() && i < 5; ++i) msg += (i ? "\n  " : "") + problems[i];
    if (problems.size() > 5) msg += "\n  (" + std::to_string(problems.size() - 5) + " more)";
    throw InputError(msg + "\n  (the report reads only results CSVs of results/schema.json; `parabench validate` "
                           "lists every problem)");
  }
  // The output directory is writable before any plot is drawn.
  const fs::path out = f.out.empty() ? fs::path(f.dirs[0]) : fs::path(f.out);
  std::error_code ec;
  fs::create_directories(out, ec);
  require(!ec && fs::is_directory(out), "--out: cannot create directory '" + out.string() + "'" +
                                           (ec ? ": " + ec.message() : ""));
  const fs::path probe = out / ".parabench-write-test";
  {
    std::FILE* fp = std::fopen(probe.c_str(), "w");
    require(fp != nullptr, "--out: cannot write into '" + out.string() + "': " + std::strerror(errno));
    std::fclose(fp);
  }
  fs::remove(probe, ec);
  std::vector<std::string> args = {f.python, script};
  args.insert(args.end(), f.dirs.begin(), f.dirs.end());
  if (!f.out.empty()) args.insert(args.end(), {"--out", f.out});
  const int rc = run_child(args);
  if (rc < 0) throw std::runtime_error("report: " + script + " was killed (signal " + std::to_string(-rc) + ")");
  return rc == 0 ? 0 : rc == 2 ? 2 : 1;
}

}  // namespace

void register_report(CLI::App& root, Registry& reg, const Env& /*env*/) {
  auto f = std::make_shared<ReportFlags>();
  CLI::App* app = root.add_subcommand(
      "report", "plots + self-contained HTML report from a results directory, or several side by side (machines)");
  app->add_option("dir", f->dirs, "run directory holding results CSVs; several: compared side by side")->required();
  app->add_option("--out", f->out, "output directory (default: DIR; required with several)");
  app->add_option("--script", f->script, "report script (default: scripts/report.py of the source tree)");
  app->add_option("--python", f->python, "Python with matplotlib (default /usr/bin/python3)");
  reg.push_back({app, [f] { return run_report(*f); }});
}

}  // namespace pb::cli
