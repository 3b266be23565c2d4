// parabench validate FILE...: checks CSVs against results/schema.json (the
// copy compiled into the binary, or --schema FILE): results CSVs against their
// kind, pipeline timelines and communication counters against the schema's
// auxiliary files (suites/report/validate.h). Prints one line per problem.
// Exit 0: all valid; 1: a problem; 2: bad input (a missing file or schema).
#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "harness/status.h"
#include "suites/cli/command.h"
#include "suites/report/validate.h"

namespace pb::cli {
namespace {

struct ValidateFlags {
  std::vector<std::string> files;
  std::string schema;
};

int run_validate(const ValidateFlags& f) {
  const report::RunFileSchema schema =
      f.schema.empty() ? report::RunFileSchema::parse(builtin_results_schema_json(), "<builtin results/schema.json>")
                       : report::RunFileSchema::load(f.schema);
  for (const auto& file : f.files)
    require(std::filesystem::is_regular_file(file), "FILE: '" + file + "' is not a file");
  int bad = 0;
  for (const auto& file : f.files) {
    const auto problems = schema.validate(file);
    for (const auto& p : problems) std::printf("%s\n", p.c_str());
    bad += !problems.empty();
  }
  std::printf("%zu file%s checked, %d with problems\n", f.files.size(), f.files.size() == 1 ? "" : "s", bad);
  return bad ? 1 : 0;
}

}  // namespace

void register_validate(CLI::App& root, Registry& reg, const Env& /*env*/) {
  auto f = std::make_shared<ValidateFlags>();
  CLI::App* app = root.add_subcommand("validate", "check CSV files against the results schema");
  app->add_option("files", f->files, "CSV files (results, pipeline timelines, comm counters)")->required();
  app->add_option("--schema", f->schema, "schema JSON (default: the results/schema.json built in)");
  reg.push_back({app, [f] { return run_validate(*f); }});
}

}  // namespace pb::cli
