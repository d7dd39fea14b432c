// elasticpipe: the single command-line program. Every expected failure is
// an ep::Error, printed once as `ERROR: ...` with exit code 2.
#include <CLI/CLI.hpp>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <thread>

#include "planner/config.hpp"
#include "planner/cost_model.hpp"
#include "planner/fitted_cost_model.hpp"
#include "planner/profile.hpp"
#include "planner/run_plan.hpp"
#include "planner/schedule.hpp"
#include "planner/validation.hpp"
#if ELASTICPIPE_EXEC
#include "exec/launch.hpp"
#include "exec/profiler.hpp"
#include "exec/trainer.hpp"
#endif
#include "sim/driver.hpp"
#include "traces/atomic_file.hpp"
#include "traces/diff.hpp"
#include "traces/output_dir.hpp"

namespace {

constexpr int kBadInput = 2;

struct PlanArgs {
  std::string config;
  std::vector<std::string> overrides;
  bool json = false;
};

struct ScheduleArgs {
  std::string config;
  std::vector<std::string> overrides;
  int K = 0;
  int M = 0;
  std::string kind;
  int v = 0;
  bool csv = false;
};

struct SimulateArgs {
  std::string config;
  std::vector<std::string> overrides;
  std::string mode = "all";
  std::string out;
  std::string profile;  // a fitted cost model instead of the analytic one
  bool exact = false;
  int jobs = 0;  // sweep only
};

// "baseline,autocache", "all", "all,freeze": each mode once, the baseline
// first so that speedups are over it. An empty list or entry is refused.
std::vector<ep::sim::Mode> parse_modes(const std::string& s) {
  std::vector<ep::sim::Mode> modes;
  std::size_t begin = 0;
  while (true) {
    const std::size_t end = std::min(s.find(',', begin), s.size());
    const std::string m = s.substr(begin, end - begin);
    if (m == "all")
      modes.insert(modes.end(), std::begin(ep::sim::kAllModes), std::end(ep::sim::kAllModes));
    else
      modes.push_back(ep::sim::parse_mode(m));  // names the entry, '' included
    if (end == s.size()) break;
    begin = end + 1;
  }
  std::sort(modes.begin(), modes.end());
  modes.erase(std::unique(modes.begin(), modes.end()), modes.end());
  return modes;
}

std::string default_out(const std::string& config, const std::string& what) {
  return (std::filesystem::path("out") / what / std::filesystem::path(config).stem()).string();
}

// The command line, for the output folder's lock (who holds it).
std::string g_command_line;

// A bar on stderr, only when stdout is a terminal.
std::function<void(double)> progress_bar(const std::string& label) {
  if (!isatty(STDOUT_FILENO)) return {};
  return [label](double f) {
    const int width = 30, done = static_cast<int>(f * width + 0.5);
    std::fprintf(stderr, "\r%s [%s%s] %3d%%", label.c_str(), std::string(done, '#').c_str(),
                 std::string(width - done, ' ').c_str(), static_cast<int>(f * 100 + 0.5));
    if (f >= 1.0) std::fprintf(stderr, "\r%*s\r", static_cast<int>(label.size()) + width + 8, "");
    std::fflush(stderr);
  };
}

// The simulator models every device, link and flow, and its time and
// memory grow with the square of the devices: beyond this, a run takes
// many minutes and gigabytes (and runs out of memory well before the
// planner's limit).
constexpr int kMaxSimulatedDevices = 256;

void check_simulable(const ep::Config& c) {
  if (c.cluster.total_gpus() > kMaxSimulatedDevices)
    throw c.error("cluster.nodes",
                  "at most " + std::to_string(kMaxSimulatedDevices) +
                      " devices to simulate, nodes x gpus_per_node (the simulator's time and memory grow with the "
                      "square of the devices: 128 take about a minute and 1 GB, 256 four minutes and 4 GB)",
                  std::to_string(c.cluster.nodes) + " x " + std::to_string(c.cluster.gpus_per_node));
}

// A profile holds for the model it was recorded on: another model's
// compute timings would be used without a word.
std::optional<ep::FittedCostModel> fitted_model(const std::string& profile_path, const ep::Config& config,
                                                const ep::CostModel& analytic) {
  if (profile_path.empty()) return std::nullopt;
  const ep::Profile profile = ep::read_profile(profile_path);
  ep::check_profile_model(profile, profile_path, config.model, config.source);
  return std::optional<ep::FittedCostModel>(std::in_place, profile, analytic);
}

int run_simulate_cmd(const SimulateArgs& a) {
  const ep::Config config = ep::load_config(a.config, a.overrides);
  check_simulable(config);
  ep::sim::RunOptions opt;
  opt.modes = parse_modes(a.mode);
  opt.exact = a.exact;
  const ep::AnalyticCostModel analytic(config.cluster, config.training);
  const std::optional<ep::FittedCostModel> fitted = fitted_model(a.profile, config, analytic);
  if (fitted) opt.cost = &*fitted;
  const std::string out = a.out.empty() ? default_out(a.config, "simulate") : a.out;
  const ep::OutputDirLock lock(out, g_command_line, "--out");
  opt.progress = progress_bar("simulating");
  ep::sim::Simulator sim(config.cluster);
  const ep::sim::RunResult r = ep::sim::simulate_training(config, opt, sim);
  std::cout << ep::sim::format_result(r) << std::flush;
  ep::sim::write_outputs(r, out);
  std::cout << "\nwrote " << out << "/{summary.json,epochs.csv,chunks.csv" << (r.trace.events.empty() ? "" : ",trace.json")
            << "}\n";
  return 0;
}

#if ELASTICPIPE_EXEC
struct TrainArgs {
  std::string config;
  std::vector<std::string> overrides;
  std::string out;
  int nproc = 0;
  std::string resume;
};

// One machine's processes: each rank is a whole LibTorch process with its
// own threads and memory; a larger job spans machines (torchrun, mpirun).
constexpr int kMaxLocalProcesses = 256;

// `train --nproc N`: this process becomes the launcher of N copies of
// itself (same arguments minus --nproc), which find their rank in the
// environment as under torchrun; the job's exit code is the first failure's.
// Whatever ends the job (a failed or killed rank, Ctrl-C), the node-shared
// cache files its ranks created are removed before returning.
int launch_train(const TrainArgs& a, const ep::Config& config, const ep::exec::ProcessEnv& env,
                 const std::string& out, int argc, char** argv) {
  ep::exec::LaunchOptions o;
  o.nproc = a.nproc;
  o.master_port = env.master_port;  // MASTER_PORT when set, else a free port
  o.program = std::filesystem::canonical("/proc/self/exe").string();
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--nproc") {
      ++i;
      continue;
    }
    if (arg.rfind("--nproc=", 0) == 0) continue;
    o.args.push_back(arg);
  }
  const ep::exec::LaunchResult r = ep::exec::launch_local(o);
  (void)ep::exec::remove_cache_files(config, out);
  if (r.exit_code != 0) std::cerr << "ERROR: training job failed: " << r.reason << "\n";
  return r.exit_code;
}

// A single training process removes its cache files when Ctrl-C or SIGTERM
// ends it: unlink(2) is async-signal-safe, the names are fixed beforehand.
std::vector<std::string> g_cache_files;
extern "C" void remove_cache_files_and_die(int sig) {
  for (const std::string& f : g_cache_files) ::unlink(f.c_str());
  std::signal(sig, SIG_DFL);
  std::raise(sig);
}

void remove_cache_files_on_signals(const ep::Config& config, const std::string& out) {
  g_cache_files.clear();
  for (const std::string& f : ep::exec::cache_file_names(config, out, 0)) g_cache_files.push_back(f);
  for (const int sig : {SIGINT, SIGTERM, SIGHUP})
    if (std::signal(sig, remove_cache_files_and_die) == SIG_IGN) std::signal(sig, SIG_IGN);  // nohup stays nohup
}

int run_train_cmd(const TrainArgs& a, int argc, char** argv) {
  const ep::Config config = ep::load_config(a.config, a.overrides);  // bad input fails before any process starts
  const ep::exec::ProcessEnv env = ep::exec::detect_process_env();
  if (!env.warning.empty() && env.rank == 0) std::cerr << "WARNING: " << env.warning << "\n";
  if (a.nproc > 0 && env.launcher != "single")
    throw ep::Error("--nproc " + std::to_string(a.nproc) + " inside a job already launched by " + env.launcher +
                    " (rank " + std::to_string(env.rank) + " of " + std::to_string(env.world_size) +
                    "): drop --nproc");
  if (a.nproc > kMaxLocalProcesses)
    throw ep::Error("--nproc " + std::to_string(a.nproc) + ": at most " + std::to_string(kMaxLocalProcesses) +
                    " processes on one machine (each rank is a LibTorch process with its own threads and memory; "
                    "a larger job spans machines: use torchrun or mpirun)");
  if (a.nproc > 1) {
    try {
      ep::exec::check_process_count(config, a.nproc);  // before any process starts
    } catch (const ep::Error& e) {
      throw e.with_context("--nproc " + std::to_string(a.nproc));
    }
  }
  const std::string out = a.out.empty() ? default_out(a.config, "train") : a.out;
  // One job per output folder: the launcher (or rank 0 of torchrun/mpirun)
  // holds it; our own launcher's ranks run under its lock.
  std::optional<ep::OutputDirLock> lock;
  if (env.launcher != "elasticpipe" && env.rank == 0) lock.emplace(out, g_command_line, "--out");
  if (a.nproc > 1) return launch_train(a, config, env, out, argc, argv);
  if (env.launcher == "single") remove_cache_files_on_signals(config, out);
  ep::exec::TrainOptions opt;
  opt.out_dir = out;
  opt.process = env;
  opt.resume = a.resume;
  if (env.rank == 0) {
    opt.progress = progress_bar("training");
    opt.log = [](const std::string& line) { std::cout << line << std::endl; };
  }
  ep::exec::TrainResult r;
  try {
    r = ep::exec::train(config, opt);
  } catch (...) {
    if (env.launcher == "single") (void)ep::exec::remove_cache_files(config, out);
    throw;
  }
  if (env.rank != 0) return 0;
  std::printf("trained %d epochs in %.1f s, final test accuracy %.2f%%\n", config.training.epochs, r.total_s,
              100 * r.final_accuracy);
  std::cout << "wrote " << out
            << "/{summary.json,epochs.csv,trace.json,grad_norms.csv,plan.json,transitions.json,iterations.csv,weights.bin,checkpoints}\n";
  return 0;
}

struct ProfileArgs {
  std::string config;
  std::vector<std::string> overrides;
  std::string out;
  int repeats = 5;
};

int run_profile_cmd(const ProfileArgs& a) {
  const ep::Config config = ep::load_config(a.config, a.overrides);
  const std::string out =
      a.out.empty() ? (std::filesystem::path("out") / "profile" / (std::filesystem::path(a.config).stem().string() + ".json")).string()
                    : a.out;
  ep::exec::ProfileOptions o;
  o.repeats = a.repeats;
  o.log = [](const std::string& line) { std::cout << line << std::endl; };
  const std::string dir = std::filesystem::path(out).parent_path().string();
  if (!dir.empty()) ep::create_output_dir(dir, "--out");  // before measuring: a bad --out loses nothing
  const ep::Profile profile = ep::exec::profile_executor(config, o);
  ep::write_file_atomically(out, [&](const std::string& temp) { ep::write_profile(profile, temp); });
  const ep::AnalyticCostModel analytic(config.cluster, config.training);
  std::cout << ep::FittedCostModel(profile, analytic).describe() << "wrote " << out << "\n";
  return 0;
}

struct ValidateArgs {
  std::string config;
  std::vector<std::string> overrides;
  std::string profile;
  int iterations = 5;
};

// Plans over K, M, replicas (AutoDP's K = 1 ones), frozen depth and cache
// on/off, measured on the executor (replicas as threads with Gloo ranks)
// and simulated with the fitted cost model. Per (K, replicas), the plans
// with M = 2K fit one factor, measured / simulated; the other plans are
// held out and predicted with it.
int run_validate_cmd(const ValidateArgs& a) {
  ep::Config config = ep::load_config(a.config, a.overrides);
  // The CPU executor's stage workers are threads sharing this machine's
  // cores: the simulator models that unless the config says otherwise.
  if (config.exec.device == ep::ExecDevice::CPU && config.cluster.shared_cores == 0) {
    config.cluster.shared_cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
    std::cout << "simulating the CPU executor: cluster.shared_cores = " << config.cluster.shared_cores << "\n";
  }
  const ep::AnalyticCostModel analytic(config.cluster, config.training);
  const ep::FittedCostModel fitted = *fitted_model(a.profile, config, analytic);
  const ep::PlanContext ctx(config, fitted);
  const int L = config.model.num_hidden_layers, B = config.training.batch_size;
  std::vector<ep::IterationSetup> setups;
  std::vector<std::string> names;
  const int I = config.cluster.gpus_per_node;
  for (int K = 1; K <= config.planner.K; K *= 2)
    for (int replicas = 1; replicas * K <= I; replicas *= 2)
      for (const int frozen : {0, L / 2})
        for (const bool cache : {false, true}) {
          if (cache && frozen == 0) continue;
          // Data-parallel plans: AutoDP's own (K = 1, the freed devices), all frozen depths.
          if (replicas > 1 && K > 1) continue;
          for (const int M : {K, 2 * K, 4 * K}) {
            if (M > B) continue;
            ep::IterationSetup s;
            s.partition = ep::plan_partition(ctx, frozen, K, cache);
            s.K = K;
            s.M = M;
            s.replicas = replicas;
            s.cache_on = cache;
            setups.push_back(s);
            names.push_back("K=" + std::to_string(K) + " M=" + std::to_string(M) + " x" + std::to_string(replicas) +
                            " frozen=" + std::to_string(frozen) + (cache ? " cache" : ""));
          }
        }
  std::cout << "measuring " << setups.size() << " plans (" << a.iterations << " iterations each)..." << std::endl;
  const std::vector<double> measured = ep::exec::measure_iterations(config, setups, a.iterations);
  std::cout << "simulating them..." << std::endl;
  ep::sim::Simulator sim(config.cluster);
  const std::vector<double> simulated = ep::sim::simulate_steady_iterations(config, fitted, setups, sim);
  std::map<std::pair<int, int>, std::vector<double>> ratios;  // (K, replicas)
  const auto key = [&](std::size_t i) { return std::make_pair(setups[i].K, setups[i].replicas); };
  for (std::size_t i = 0; i < setups.size(); ++i)
    if (setups[i].M == 2 * setups[i].K) ratios[key(i)].push_back(measured[i] / simulated[i]);
  std::vector<ep::ValidationRow> rows;
  for (std::size_t i = 0; i < setups.size(); ++i) {
    auto r = ratios[key(i)];
    std::sort(r.begin(), r.end());
    const double factor = r.empty() ? 1.0 : r[r.size() / 2];
    rows.push_back({names[i], setups[i].M != 2 * setups[i].K, measured[i], simulated[i] * factor});
  }
  for (const auto& [k, r] : ratios) {
    auto v = r;
    std::sort(v.begin(), v.end());
    std::printf("K=%d x%d: measured/simulated factor %.3f (median of %zu fitting plans)\n", k.first, k.second,
                v[v.size() / 2], v.size());
  }
  std::cout << ep::format_validation(rows);
  return 0;
}

#endif  // ELASTICPIPE_EXEC

// "a=1,2,3" -> {"a=1", "a=2", "a=3"}; commas inside [] stay (TOML arrays).
std::vector<std::string> sweep_values(const std::string& assignment) {
  const auto eq = assignment.find('=');
  if (eq == std::string::npos) throw ep::Error("--set '" + assignment + "': expected KEY=V1,V2,...");
  const std::string key = assignment.substr(0, eq + 1);
  std::vector<std::string> out;
  std::string cur;
  int depth = 0;
  for (char ch : assignment.substr(eq + 1)) {
    if (ch == '[') ++depth;
    if (ch == ']') --depth;
    if (ch == ',' && depth == 0) {
      out.push_back(key + cur);
      cur.clear();
    } else {
      cur += ch;
    }
  }
  out.push_back(key + cur);
  return out;
}

// Each point is a whole simulated training (about a second per mode on a
// core): a sweep larger than this is a mistake or a job for several runs.
constexpr std::size_t kMaxSweepPoints = 1000;

// Progress: a bar on a terminal, else a line on stderr every 5% (or every
// point of a small sweep), so that a long sweep in a log shows it is alive.
std::function<void(std::size_t)> sweep_progress(std::size_t total) {
  if (const auto bar = progress_bar("sweeping"))
    return [bar, total](std::size_t done) { bar(static_cast<double>(done) / static_cast<double>(total)); };
  const auto start = std::chrono::steady_clock::now();
  return [start, total, last = std::size_t{0}](std::size_t done) mutable {
    const std::size_t step = std::max<std::size_t>(1, total / 20);
    if (done != total && done < last + step) return;
    last = done;
    const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    std::fprintf(stderr, "sweep: %zu/%zu points done (%.0f%%), %.0f s elapsed, about %.0f s left\n", done, total,
                 100.0 * static_cast<double>(done) / static_cast<double>(total), elapsed,
                 elapsed / static_cast<double>(done) * static_cast<double>(total - done));
  };
}

int run_sweep_cmd(const SimulateArgs& a) {
  // The cartesian product of every --set list, its size checked before it
  // is built.
  std::vector<std::vector<std::string>> lists;
  std::size_t size = 1;
  for (const auto& set : a.overrides) {
    lists.push_back(sweep_values(set));
    size *= lists.back().size();
    if (size > kMaxSweepPoints)
      throw ep::Error("--set: the sweep has more than " + std::to_string(kMaxSweepPoints) +
                      " points (each is a whole simulated training, about a second per mode on a core); "
                      "split it into several sweeps");
  }
  std::vector<std::vector<std::string>> points{{}};
  for (const auto& values : lists) {
    std::vector<std::vector<std::string>> next;
    for (const auto& p : points)
      for (const auto& v : values) {
        next.push_back(p);
        next.back().push_back(v);
      }
    points = std::move(next);
  }
  // Validate every point before running any: bad input loses nothing.
  for (const auto& p : points) check_simulable(ep::load_config(a.config, p));
  const auto modes = parse_modes(a.mode == "all" ? "baseline,autocache" : a.mode);
  const int jobs = a.jobs > 0 ? a.jobs : std::max(1L, sysconf(_SC_NPROCESSORS_ONLN));
  const std::string out = a.out.empty() ? default_out(a.config, "sweep") : a.out;
  const ep::OutputDirLock lock(out, g_command_line, "--out");
  std::printf("sweep: %zu point%s x %zu mode%s, %d at a time\n", points.size(), points.size() == 1 ? "" : "s",
              modes.size(), modes.size() == 1 ? "" : "s", jobs);
  std::fflush(stdout);
  auto progress = sweep_progress(points.size());

  // SimGrid allows one engine per process: every point runs in a child,
  // which writes its summary JSON to a pipe.
  struct Child { pid_t pid; int fd; std::size_t point; };
  std::vector<Child> running;
  std::vector<std::string> results(points.size());
  std::size_t next = 0, done = 0;
  const auto reap = [&] {
    Child c = running.front();
    running.erase(running.begin());
    std::string text;
    char buf[4096];
    for (ssize_t n; (n = read(c.fd, buf, sizeof buf)) > 0;) text.append(buf, n);
    close(c.fd);
    int status = 0;
    waitpid(c.pid, &status, 0);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
      throw ep::Error("sweep point " + std::to_string(c.point) + " failed: " + text);
    results[c.point] = text;
    progress(++done);
  };
  while (next < points.size() || !running.empty()) {
    if (next < points.size() && static_cast<int>(running.size()) < jobs) {
      int fds[2];
      if (pipe(fds) != 0) throw ep::Error("sweep: pipe failed");
      std::fflush(nullptr);
      const pid_t pid = fork();
      if (pid < 0) throw ep::Error("sweep: fork failed");
      if (pid == 0) {
        close(fds[0]);
        std::string text;
        int rc = 0;
        try {
          const ep::Config config = ep::load_config(a.config, points[next]);
          ep::sim::RunOptions opt;
          opt.modes = modes;
          opt.exact = a.exact;
          ep::sim::Simulator sim(config.cluster);
          nlohmann::json j;
          for (const auto& m : ep::sim::simulate_training(config, opt, sim).summary.modes)
            j[m.mode] = {{"total_s", m.total_s}, {"speedup", m.speedup}, {"samples_per_s", m.samples_per_s}};
          text = j.dump();
        } catch (const std::exception& e) {
          text = e.what();
          rc = 1;
        }
        if (write(fds[1], text.data(), text.size()) < 0) rc = 1;
        _exit(rc);
      }
      close(fds[1]);
      running.push_back({pid, fds[0], next++});
    } else {
      reap();
    }
  }

  ep::AtomicFile csv_file((std::filesystem::path(out) / "sweep.csv").string());
  std::ostream& csv = csv_file.stream();
  std::vector<std::string> keys;
  for (const auto& set : a.overrides) keys.push_back(set.substr(0, set.find('=')));
  for (const auto& k : keys) {
    std::cout << k << "  ";
    csv << k << ",";
  }
  std::cout << "\n";
  for (std::size_t m = 0; m < modes.size(); ++m) {
    const std::string name = ep::sim::to_string(modes[m]);
    csv << name << "_total_s," << name << "_speedup" << (m + 1 < modes.size() ? "," : "\n");
  }
  for (std::size_t i = 0; i < points.size(); ++i) {
    const nlohmann::json j = nlohmann::json::parse(results[i]);
    for (const auto& v : points[i]) {
      const std::string value = v.substr(v.find('=') + 1);
      std::cout << value << "  ";
      csv << value << ",";
    }
    for (std::size_t m = 0; m < modes.size(); ++m) {
      const auto& r = j.at(ep::sim::to_string(modes[m]));
      char cell[96];
      std::snprintf(cell, sizeof cell, "%s %.1f s (%.2fx)  ", ep::sim::to_string(modes[m]).c_str(),
                    r.at("total_s").get<double>(), r.at("speedup").get<double>());
      std::cout << cell;
      csv << r.at("total_s").get<double>() << "," << r.at("speedup").get<double>() << (m + 1 < modes.size() ? "," : "\n");
    }
    std::cout << "\n";
  }
  csv_file.commit();
  std::cout << "wrote " << csv_file.path() << "\n";
  return 0;
}

int run_plan_cmd(const PlanArgs& a) {
  const ep::Config config = ep::load_config(a.config, a.overrides);
  const ep::AnalyticCostModel cost(config.cluster, config.training);
  const ep::RunPlan run = ep::plan_run(config, cost);
  const ep::ModelSpec spec = ep::build_model_spec(config.model, config.training.precision);
  if (a.json)
    std::cout << ep::to_json(run, spec).dump(2) << "\n";
  else
    std::cout << ep::format_run_plan(run, spec);
  return 0;
}

ep::ScheduleKind parse_kind(const std::string& s) {
  if (s == "gpipe") return ep::ScheduleKind::GPipe;
  if (s == "1f1b") return ep::ScheduleKind::OneFOneB;
  if (s == "looping" || s == "looping_bf") return ep::ScheduleKind::LoopingBreadthFirst;
  if (s == "looping_df") return ep::ScheduleKind::LoopingDepthFirst;
  throw ep::Error("--kind: expected gpipe|1f1b|looping|looping_bf|looping_df, found '" + s + "'");
}

int run_schedule_cmd(const ScheduleArgs& a) {
  ep::ScheduleOptions o;
  o.kind = ep::ScheduleKind::GPipe;
  o.v = 1;
  if (!a.config.empty()) {  // defaults from the config's planner section
    const ep::Config config = ep::load_config(a.config, a.overrides);
    o.kind = config.planner.schedule;
    o.v = config.planner.virtual_stages;
  } else if (!a.overrides.empty()) {
    throw ep::Error("--set needs a CONFIG");
  }
  if (!a.kind.empty()) o.kind = parse_kind(a.kind);
  const bool looping = o.kind == ep::ScheduleKind::LoopingBreadthFirst ||
                       o.kind == ep::ScheduleKind::LoopingDepthFirst;
  if (a.v > 0) o.v = a.v;
  else if (looping && o.v == 1 && a.config.empty()) o.v = 2;
  o.K = a.K;
  o.M = a.M;
  // Four actions or more per device, micro-batch and chunk, each a few
  // dozen bytes, plus the timeline's text: a million keeps it to about a
  // second and a few hundred MB.
  constexpr std::int64_t kMaxChunkPasses = 1'000'000;
  if (static_cast<std::int64_t>(o.K) * o.M * o.v > kMaxChunkPasses)
    throw ep::Error("--K " + std::to_string(o.K) + " --M " + std::to_string(o.M) + " --v " + std::to_string(o.v) +
                    ": K x M x v = " + std::to_string(static_cast<std::int64_t>(o.K) * o.M * o.v) +
                    " chunk passes, expected at most " + std::to_string(kMaxChunkPasses) +
                    " (the schedule and its timeline grow with it: gigabytes and minutes beyond)");
  const ep::Schedule schedule = ep::build_schedule(o);
  ep::check_schedule(schedule);
  if (a.csv) {
    std::cout << ep::to_csv(schedule);
    return 0;
  }
  // Unit costs: a device's forward of one micro-batch takes 1, its backward 2.
  const ep::Timeline t = ep::simulate(schedule, ep::unit_cost(1.0, 2.0, o.v));
  std::cout << ep::to_string(o.kind) << " K=" << o.K << " M=" << o.M << " v=" << o.v
            << " (unit costs: F = 1/v, B = 2/v per chunk; transfers free)\n"
            << ep::render_timeline(t, schedule) << "makespan " << t.makespan << ", bubble fraction "
            << t.bubble_fraction() << "\n";
  return 0;
}

}  // namespace

// The commands that run LibTorch. They live in elasticpipe-exec, beside
// this program: loading LibTorch (and the ~300 libraries Debian's links)
// takes about 0.6 s and 190 MB at every start, which plan, schedule,
// simulate, sweep and trace diff do not pay.
#if !ELASTICPIPE_EXEC
constexpr const char* kExecCommands[] = {"train", "profile", "validate"};
constexpr const char* kExecProgram = "elasticpipe-exec";

int run_in_executor(char** argv) {
  const std::filesystem::path self = std::filesystem::canonical("/proc/self/exe");
  const std::string program = (self.parent_path() / kExecProgram).string();
  ::execv(program.c_str(), argv);  // returns only on failure
  std::cerr << "ERROR: " << argv[1] << " runs in " << program << ", which cannot be started (" << std::strerror(errno)
            << "): build with -DELASTICPIPE_EXEC=ON (LibTorch)\n";
  return kBadInput;
}
#endif

int main(int argc, char** argv) {
  CLI::App app{"ElasticPipe: elastic pipelining with progressive layer freezing (PipeTransformer)"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "elasticpipe 0.1");
#if !ELASTICPIPE_EXEC
  if (argc > 1)
    for (const char* command : kExecCommands)
      if (std::string(argv[1]) == command) return run_in_executor(argv);
#endif

  PlanArgs plan;
  auto* plan_cmd = app.add_subcommand("plan", "Print the whole training's plan timeline (one row per freeze step)");
  plan_cmd->add_option("config", plan.config, "TOML config file")->required()->check(CLI::ExistingFile);
  plan_cmd->add_option("--set", plan.overrides, "Override a config key, e.g. --set planner.alpha=0.2")
      ->take_all();
  plan_cmd->add_flag("--json", plan.json, "Print the plans as JSON (schema elasticpipe.plan/1)");

  ScheduleArgs sched;
  auto* sched_cmd = app.add_subcommand("schedule", "Print one pipeline schedule as a timeline under unit costs");
  sched_cmd->add_option("config", sched.config, "TOML config (optional: schedule kind and v defaults)")
      ->check(CLI::ExistingFile);
  sched_cmd->add_option("--set", sched.overrides, "Override a config key")->take_all();
  sched_cmd->add_option("--K", sched.K, "Pipeline length (devices)")->required()->check(CLI::Range(1, 1024));
  sched_cmd->add_option("--M", sched.M, "Micro-batches")->required()->check(CLI::Range(1, 100000));
  sched_cmd->add_option("--kind", sched.kind, "gpipe|1f1b|looping|looping_bf|looping_df");
  sched_cmd->add_option("--v", sched.v, "Chunks per device (looping)")->check(CLI::Range(1, 64));
  sched_cmd->add_flag("--csv", sched.csv, "Print the lowered schedule as CSV instead");

  SimulateArgs simulate;
  auto* sim_cmd = app.add_subcommand("simulate", "Simulate the whole training on a SimGrid model of the cluster");
  sim_cmd->add_option("config", simulate.config, "TOML config file")->required()->check(CLI::ExistingFile);
  sim_cmd->add_option("--mode", simulate.mode, "all|baseline|freeze|autopipe|autodp|autocache (comma-separated)");
  sim_cmd->add_option("--set", simulate.overrides, "Override a config key")->take_all();
  sim_cmd->add_option("--out", simulate.out, "Output folder (default out/simulate/<config name>)");
  sim_cmd->add_flag("--exact", simulate.exact, "Simulate every iteration instead of scaling the steady state");
  sim_cmd->add_option("--profile", simulate.profile, "Cost model fitted to a profile (elasticpipe profile) instead of the analytic one")
      ->check(CLI::ExistingFile);

  SimulateArgs sweep;
  auto* sweep_cmd = app.add_subcommand("sweep", "Simulate the cartesian product of --set lists, e.g. --set planner.alpha=0.2,0.33,0.5");
  sweep_cmd->add_option("config", sweep.config, "TOML config file")->required()->check(CLI::ExistingFile);
  sweep_cmd->add_option("--set", sweep.overrides, "KEY=V1,V2,... (one list per key)")->take_all();
  sweep_cmd->add_option("--mode", sweep.mode, "Modes per point (default baseline,autocache)");
  sweep_cmd->add_option("--out", sweep.out, "Output folder (default out/sweep/<config name>)");
  sweep_cmd->add_option("--jobs", sweep.jobs, "Points simulated at once (default: cores)")->check(CLI::Range(1, 256));
  sweep_cmd->add_flag("--exact", sweep.exact, "Simulate every iteration");

  std::string diff_first, diff_second;
#if ELASTICPIPE_EXEC
  TrainArgs train;
  auto* train_cmd = app.add_subcommand(
      "train", "Train for real with LibTorch: one process per pipeline (--nproc N here; or torchrun/mpirun)");
  train_cmd->add_option("config", train.config, "TOML config file")->required()->check(CLI::ExistingFile);
  train_cmd->add_option("--set", train.overrides, "Override a config key")->take_all();
  train_cmd->add_option("--out", train.out, "Output folder (default out/train/<config name>)");
  train_cmd->add_option("--nproc", train.nproc, "Start this many local processes (one per device of the config's cluster)")
      ->check(CLI::PositiveNumber);
  train_cmd->add_option("--resume", train.resume, "Continue from a checkpoint directory (e.g. OUT/checkpoints)");

  ProfileArgs prof;
  auto* prof_cmd = app.add_subcommand("profile", "Measure this machine's executor (compute, hand-over, all-reduce, cache, "
                                                  "optimizer, transitions) into a profile for a fitted cost model");
  prof_cmd->add_option("config", prof.config, "TOML config file")->required()->check(CLI::ExistingFile);
  prof_cmd->add_option("--set", prof.overrides, "Override a config key")->take_all();
  prof_cmd->add_option("--out", prof.out, "Profile file (default out/profile/<config name>.json)");
  prof_cmd->add_option("--repeats", prof.repeats, "Timed runs per figure (median)")->check(CLI::Range(1, 1000));

  ValidateArgs val;
  auto* val_cmd = app.add_subcommand("validate", "Run plans for real and in simulation with a fitted cost model; "
                                                 "print the error table (MAPE, max error, Kendall tau)");
  val_cmd->add_option("config", val.config, "TOML config file")->required()->check(CLI::ExistingFile);
  val_cmd->add_option("--set", val.overrides, "Override a config key")->take_all();
  val_cmd->add_option("--profile", val.profile, "Profile file (elasticpipe profile)")->required()->check(CLI::ExistingFile);
  val_cmd->add_option("--iterations", val.iterations, "Timed iterations per plan")->check(CLI::Range(1, 1000));

#else
  // Listed in --help; `elasticpipe train --help` shows elasticpipe-exec's.
  app.add_subcommand("train", "Train for real with LibTorch (elasticpipe train --help)");
  app.add_subcommand("profile", "Measure this machine's executor into a profile (elasticpipe profile --help)");
  app.add_subcommand("validate", "Run plans for real and in simulation with a fitted cost model (elasticpipe validate --help)");
#endif
  auto* trace_cmd = app.add_subcommand("trace", "Work with trace files");
  trace_cmd->require_subcommand(1);
  auto* diff_cmd = trace_cmd->add_subcommand(
      "diff", "Align two traces of the same config (e.g. simulated vs real) and print per-action-kind time error");
  diff_cmd->add_option("first", diff_first, "trace.json (e.g. simulated)")->required()->check(CLI::ExistingFile);
  diff_cmd->add_option("second", diff_second, "trace.json (e.g. real; the reference for MAPE)")
      ->required()
      ->check(CLI::ExistingFile);

  for (int i = 0; i < argc; ++i) g_command_line += (i ? " " : "") + std::string(argv[i]);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int rc = app.exit(e);
    return rc == 0 ? 0 : kBadInput;
  }
  try {
    if (*plan_cmd) return run_plan_cmd(plan);
    if (*sched_cmd) return run_schedule_cmd(sched);
    if (*sim_cmd) return run_simulate_cmd(simulate);
    if (*sweep_cmd) return run_sweep_cmd(sweep);
#if ELASTICPIPE_EXEC
    if (*train_cmd) return run_train_cmd(train, argc, argv);
    if (*prof_cmd) return run_profile_cmd(prof);
    if (*val_cmd) return run_validate_cmd(val);
#endif
    if (*diff_cmd) {
      const ep::trace::Trace a = ep::trace::read_chrome_trace(diff_first);
      const ep::trace::Trace b = ep::trace::read_chrome_trace(diff_second);
      ep::trace::TraceDiff d;
      try {
        d = ep::trace::diff_traces(a, b);
      } catch (const ep::Error& e) {
        throw e.with_context("trace diff " + diff_first + " " + diff_second);
      }
      std::cout << ep::trace::format_diff(d, a, b);
      return 0;
    }
  } catch (const ep::Error& e) {
    std::cerr << "ERROR: " << e.what() << "\n";
    return kBadInput;
  } catch (const std::exception& e) {  // a library's failure (c10d, I/O): not bad input, still one clear line
    const std::string what = e.what();
    std::cerr << "ERROR: " << what.substr(0, what.find('\n')) << "\n";
    return 1;
  }
  return 0;
}
