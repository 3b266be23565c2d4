#include "suites/cli/common.h"

#include <CLI/CLI.hpp>

#include <spawn.h>
#include <sys/wait.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <system_error>

#include "harness/status.h"
#include "suites/planner/machine.h"
#ifdef PARABENCH_HAVE_CUDA
#include "kernels/cuda/gpu.h"
#endif

extern char** environ;

namespace pb::cli {

const CLI::Validator& non_empty() {
  static const CLI::Validator v([](std::string& s) { return s.empty() ? std::string("must not be empty") : ""; },
                                "NONEMPTY");
  return v;
}

void add_config_flags(CLI::App* app, ConfigFlags& f) {
  // Given means given: an empty --config or --out is refused, not "the default".
  app->add_option("--config", f.config, "TOML configuration file")->check(non_empty());
  app->add_option("--set", f.sets, "override a config key: --set train.lr=3e-4 (repeatable)");
  app->add_option("--out", f.out, "results directory; this run writes to OUT/<run id>/")
      ->capture_default_str()
      ->check(non_empty());
}

void add_preflight_flags(CLI::App* app, PreflightFlags& f) {
  app->add_option("--max-memory", f.max_memory,
                  "refuse runs estimated to need more memory than this (e.g. 64G; default: this machine's memory)");
  app->add_option("--max-ranks", f.max_ranks, "refuse local-backend worlds of more ranks (threads) than this")
      ->capture_default_str()
      ->check(CLI::Range(int64_t(1), int64_t(1) << 24));
}

Limits limits_of(const PreflightFlags& f) {
  Limits l;
  l.max_local_ranks = f.max_ranks;
  if (!f.max_memory.empty()) {
    l.memory_bytes = double(parse_byte_size(f.max_memory, "--max-memory"));
    require(l.memory_bytes > 0, "--max-memory: must be > 0, got '" + f.max_memory + "'");
  }
  return l;
}

std::string as_given(const CLI::Option* o) {
  std::string s = o->get_name();
  for (const std::string& v : o->results()) s += " " + v;
  return s;
}

void refuse_together(const CLI::Option* a, const CLI::Option* b, const std::string& what) {
  if (a->count() == 0 || b->count() == 0) return;
  throw InputError(as_given(a) + " and " + as_given(b) + ": both give " + what + "; give one");
}

ConfigReader load_config(const ConfigFlags& f) {
  ConfigReader r = f.config.empty() ? ConfigReader() : ConfigReader::from_file(f.config);
  for (const auto& s : f.sets) {
    require(s.find('=') != std::string::npos,
            "--set: expected key=value, got '" + s + "'");
    r.set_from_assignment(s);
  }
  return r;
}

std::vector<std::string> input_files(const std::vector<std::string>& paths) {
  std::vector<std::string> files;
  for (const std::string& p : paths) {
    std::error_code ec;
    if (!std::filesystem::is_directory(p, ec)) {
      files.push_back(p);
      continue;
    }
    for (const auto& e : std::filesystem::directory_iterator(p, ec)) files.push_back(e.path().string());
  }
  return files;
}

std::filesystem::path make_run_dir(const std::string& out, const std::string& run_id) {
  std::filesystem::path dir = std::filesystem::path(out) / run_id;
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  require(!ec, "--out: cannot create '" + dir.string() + "': " + ec.message());
  return dir;
}

RunMeta make_meta(const std::string& run_id, const std::string& git_rev, const std::string& backend,
                  int64_t world, const std::string& mesh, const std::string& config_hash) {
  RunMeta m;
  m.run_id = run_id;
  m.timestamp = iso8601_utc(std::chrono::system_clock::now());
  m.git_rev = git_rev;
  m.host = host_name();
  m.backend = backend;
  m.world = world;
  m.mesh = mesh;
  m.config_hash = config_hash;
  return m;
}

int run_child(const std::vector<std::string>& args) {
  if (args.empty()) throw std::invalid_argument("run_child: no program");
  std::vector<std::string> copy = args;
  std::vector<char*> argv;
  for (auto& a : copy) argv.push_back(a.data());
  argv.push_back(nullptr);
  std::fflush(stdout);
  std::fflush(stderr);
  pid_t pid = 0;
  const int err = ::posix_spawn(&pid, args[0].c_str(), nullptr, nullptr, argv.data(), environ);
  if (err != 0) throw std::runtime_error("cannot start " + args[0] + ": " + std::strerror(err));
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0)
    if (errno != EINTR) throw std::runtime_error("waitpid for " + args[0] + " failed: " + std::strerror(errno));
  if (WIFSIGNALED(status)) return -WTERMSIG(status);
  return WEXITSTATUS(status);
}

std::string self_executable(const std::string& argv0) {
  std::error_code ec;
  const auto p = std::filesystem::read_symlink("/proc/self/exe", ec);
  return ec ? argv0 : p.string();
}

std::string cuda_unavailable() {
#ifdef PARABENCH_HAVE_CUDA
  std::string why;
  return kernels::cuda::device_count(&why) == 0 ? why : std::string();
#else
  return "this build has no CUDA (nvcc was not found at configure time)";
#endif
}

void require_cuda() {
  const std::string why = cuda_unavailable();
  if (!why.empty()) throw InputError("train.device: cuda: " + why);
}

std::shared_ptr<TrainDevice> open_cuda_device(int ordinal) {
  require_cuda();
#ifdef PARABENCH_HAVE_CUDA
  const kernels::cuda::Gpu g = kernels::cuda::open_gpu(ordinal < 0 ? kernels::cuda::current_device() : ordinal);
  return std::make_shared<TrainDevice>(TrainDevice{g.name, g.f32, g.bf16_ops, g.memory, g.stream});
#else
  (void)ordinal;
  return nullptr;  // not reached: cuda_unavailable() said why
#endif
}

std::function<std::shared_ptr<TrainDevice>()> rank_device_opener() {
  require_cuda();
  return [] { return open_cuda_device(-1); };
}

DevicePeaks device_peaks(Precision p, const std::string& device_name, int ordinal) {
  DevicePeaks out;
  if (const planner::MachineProfile* m = planner::machine_for_device(device_name)) {
    out.table = planner::hardware_for(*m, p).peak_tflops * 1e12;
    out.table_name = m->name();
  }
#ifdef PARABENCH_HAVE_CUDA
  const int gpu = ordinal < 0 ? kernels::cuda::current_device() : ordinal;
  out.measured = kernels::cuda::measure_gemm_flops(gpu, p == Precision::bf16_mixed, 4096, 0.2);
#else
  (void)ordinal;
#endif
  return out;
}

}  // namespace pb::cli
