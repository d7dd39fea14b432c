#include "sim/driver.hpp"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <cstdint>
#include <exception>
#include <filesystem>
#include <future>
#include <memory>
#include <mutex>
#include <optional>
#include <sstream>
#include <thread>

#include <nlohmann/json.hpp>
#include <unistd.h>

#include "planner/run_figures.hpp"
#include "planner/run_loop.hpp"
#include "planner/transition.hpp"
#include "sim/runs.hpp"
#include "traces/chunks_csv.hpp"
#include "traces/plan_epoch.hpp"
#include "traces/atomic_file.hpp"
#include "traces/output_dir.hpp"

namespace ep::sim {

double ModeRun::total_s() const {
  double t = start.total_s();
  for (const auto& e : epochs) t += e.epoch_s;
  return t;
}

SimRequest program_request(const PlanContext& ctx, const SimConfig& sim, const IterationProgram& p, int iterations,
                           int plan_id) {
  SimRequest req;
  req.schedule = p.schedule;
  req.costs = iteration_costs(ctx, p.setup);
  for (const auto& r : p.layout.replica) {
    req.replica_gpus.push_back(r.gpus);
    req.replica_rank.push_back(r.rank);
  }
  req.cache_tier = p.setup.cache_tier;
  req.cache_writes_behind = p.setup.cache_writes_behind;
  req.cache_reads_ahead = p.setup.cache_reads_ahead;
  req.collectives = sim.collectives;
  req.iterations = iterations;
  req.plan_id = plan_id;
  return req;
}

namespace {

// Iteration period with free communication: what communication adds is
// the measured period minus this.
double period_without_comm(const PlanContext& ctx, const IterationProgram& p) {
  const IterationCosts costs = iteration_costs(ctx, p.setup);
  const auto free_comm = [&](const Action& a) {
    switch (a.kind) {
      case ActionKind::SendAct:
      case ActionKind::RecvAct:
      case ActionKind::SendGrad:
      case ActionKind::RecvGrad:
      case ActionKind::AllReduce: return 0.0;
      default: return costs.duration(a);
    }
  };
  return simulate(p.schedule, free_comm).makespan;
}

// fn(0) .. fn(n - 1) on at most `jobs` threads (a training of many epochs
// has a plan per freeze step: a thread each would exhaust the process's),
// results in index order; the first exception by index is rethrown.
template <class T, class F>
std::vector<T> parallel_map(std::size_t n, int jobs, const F& fn) {
  std::vector<T> out(n);
  std::vector<std::exception_ptr> errors(n);
  std::atomic<std::size_t> next{0};
  const auto work = [&] {
    for (std::size_t i = next++; i < n; i = next++) {
      try {
        out[i] = fn(i);
      } catch (...) {
        errors[i] = std::current_exception();
      }
    }
  };
  std::vector<std::thread> threads;
  for (std::size_t t = 1; t < std::min<std::size_t>(static_cast<std::size_t>(std::max(1, jobs)), n); ++t)
    threads.emplace_back(work);
  work();
  for (std::thread& t : threads) t.join();
  for (const std::exception_ptr& e : errors)
    if (e) std::rethrow_exception(e);
  return out;
}

// The overhead before a plan's first epoch, in the parts SPEC §7's
// transition table dissects, as the planner predicts them, but for the
// moves of weights and state: those run on the simulated network.
TransitionCost transition(const PlanContext& ctx, const Plan* prev, const Plan& plan, Simulator& sim) {
  if (!prev) return {};  // the run's start is charged apart (predict_start)
  TransitionCost t = predict_transition(ctx, prev, plan);
  if (t.total_s() == 0) return t;
  std::vector<Simulator::Transfer> transfers;
  for (const StateMove& m : state_moves(ctx, *prev, plan)) transfers.push_back({m.src_gpu, m.dst_gpu, m.bytes});
  t.state_s = transfers.empty() ? 0.0 : sim.run_transfers(transfers);
  return t;
}

// Steady-state periods: the last iteration of warm-up + measured ones,
// once the measured ones repeat; more are simulated until they do.
std::vector<std::pair<double, Measured>> steady_periods(Runner& runner, const PlanContext& ctx, const SimConfig& k,
                                                        const std::vector<IterationProgram>& programs) {
  const auto period = [&](const Measured& m, bool* repeats) {
    const auto& end = m.sim.iteration_end_s;
    std::vector<double> d;
    for (std::size_t i = end.size() - k.measure_iterations; i < end.size(); ++i) d.push_back(end[i] - (i ? end[i - 1] : 0.0));
    const auto [lo, hi] = std::minmax_element(d.begin(), d.end());
    *repeats = *hi - *lo <= 1e-6 * *hi;
    return d.back();
  };
  const int n0 = k.warmup_iterations + k.measure_iterations;
  const std::vector<Measured> first = runner.run(ctx, k, programs, n0);
  std::vector<std::pair<double, Measured>> out;
  for (std::size_t i = 0; i < programs.size(); ++i) {
    Measured m = first[i];
    bool repeats = false;
    double p = period(m, &repeats);
    for (int n = 2 * n0; !repeats && n <= 64; n *= 2) {
      m = runner.run(ctx, k, {programs[i]}, n).front();
      p = period(m, &repeats);
    }
    out.emplace_back(p, m);
  }
  return out;
}

// One "transition" span per GPU of the new layout, the parts nested in it.
void add_transition_events(trace::Trace& t, const Config& c, const Plan& p, const Plan* prev, const TransitionCost& tr,
                           double start) {
  const std::string name = prev ? "transition K " + std::to_string(prev->K) + "->" + std::to_string(p.K)
                                : std::string(trace::kStartEventName);
  const std::pair<const char*, double> parts[] = {
      {"cache probe", tr.cache_probe_s}, {"cache file", tr.cache_create_s}, {"weights", tr.state_s},
      {"contexts", tr.contexts_s},       {"ddp", tr.rebuild_s},              {"warmup", tr.warmup_s}};
  const int I = c.cluster.gpus_per_node;
  for (const auto& r : p.layout.replica)
    for (int gpu : r.gpus) {
      trace::Event e;
      e.track = t.track({trace::TrackKind::Gpu, gpu / I, gpu % I, "gpu" + std::to_string(gpu % I)});
      e.category = "transition";
      e.replica = r.rank;
      e.plan_id = p.id;
      e.epoch = p.first_epoch;
      e.name = name;
      e.start_s = start;
      e.end_s = start + tr.total_s();
      t.events.push_back(e);
      const double end = e.end_s;
      for (const auto& [part, seconds] : parts) {
        if (seconds <= 0) continue;
        e.name = part;
        e.end_s = std::min(end, e.start_s + seconds);  // inside the span, rounding apart
        t.events.push_back(e);
        e.start_s = e.end_s;
      }
    }
}

// An epoch of n iterations at `period`, from `state`, the simulated
// steady state of the program it runs: the executor starts every epoch
// from idle devices (the first iteration's reads not ahead, a pipeline not
// yet full) and ends it once the cache writes queued behind the devices
// have landed (its flush), so the epoch is the first iteration from idle,
// n - 1 periods and that drain.
double epoch_seconds(const SimResult& state, double period, std::int64_t n) {
  if (n <= 0) return 0;
  const std::vector<double>& end = state.iteration_end_s;
  return end.front() + static_cast<double>(n - 1) * period + (state.drained_s - end.back());
}

// An epoch's row from `state`, the steady state of the program the epoch
// runs: the filling one in an epoch that (re)fills the cache (its frozen
// forward computes and writes), else the plan's.
trace::EpochMetrics epoch_row(Mode mode, const Plan& p, const PlanSim& ps, const Measured& state, int epoch,
                              bool fill, double epoch_s, double transition, std::int64_t samples) {
  trace::EpochMetrics e = trace::plan_epoch_row(p, epoch, "sim", to_string(mode), epoch_s, transition, fill);
  e.iteration_s = fill ? p.fill_iteration_s : p.iteration_s;
  e.samples_per_s = static_cast<double>(samples) / epoch_s;
  e.bubble_fraction = fill ? state.bubble_fraction(p.fill_iteration_s) : p.bubble_fraction;
  e.exposed_comm_s = ps.exposed_comm_s;
  e.comm_s = state.sim.allreduce_s;
  e.compute_s = state.sim.compute_s;
  return e;
}

// --exact simulates every iteration, one after the other: SimGrid takes
// about a millisecond per iteration of a small config, so a million take a
// quarter of an hour; beyond, the steady state, scaled, is the answer.
constexpr std::int64_t kMaxExactIterations = 1'000'000;

// Counts in 64 bits (a trillion samples make billions of iterations per
// epoch), refused before any is simulated.
void check_exact(const std::vector<Plan>& plans) {
  std::int64_t total = 0;
  for (const Plan& p : plans) total += p.iterations_per_epoch * p.epochs();
  if (total <= kMaxExactIterations) return;
  const auto most = std::max_element(plans.begin(), plans.end(), [](const Plan& a, const Plan& b) {
    return a.iterations_per_epoch < b.iterations_per_epoch;
  });
  throw Error("--exact: simulates every iteration, at most " + std::to_string(kMaxExactIterations) +
              " in a training (about a millisecond each on a small config), and this training has " +
              std::to_string(total) + " (" + std::to_string(most->iterations_per_epoch) + " per epoch in plan " +
              std::to_string(most->id) + "): drop --exact to scale each plan's steady state");
}

// One mode of one training: its plans, epochs and chunk rows, and (the
// traced mode) its trace.
struct ModeOutput {
  ModeRun run;
  std::vector<ChunkRow> chunks;
  trace::Trace trace;
  int untraced = 0;  // traced iterations and transitions beyond what a trace holds, left out
};

// The traced iterations at their starts on the run's timeline (the epoch
// each falls in), those beyond what a trace holds left out and counted.
void append_traced(ModeOutput& out, const std::vector<trace::Trace>& iterations,
                   const std::vector<std::pair<double, int>>& traced_at) {
  for (std::size_t i = 0; i < iterations.size(); ++i) {
    if (!trace::fits_trace(iterations[i], traced_at[i].first)) {
      ++out.untraced;
      continue;
    }
    const std::size_t begin = trace::append(out.trace, iterations[i], traced_at[i].first);
    for (std::size_t k = begin; k < out.trace.events.size(); ++k) out.trace.events[k].epoch = traced_at[i].second;
  }
}

// Traced: the program each plan starts with (it fills the cache when it
// does), kTracedIterations of its iterations, once per run of identical plans.
struct TracedPrograms {
  std::vector<IterationProgram> programs;
  std::vector<int> plan_ids;
  std::vector<int> iterations;  // per program: kTracedIterations, or fewer where an epoch has fewer
  std::vector<bool> is_traced;  // per plan
};

TracedPrograms traced_programs(const std::vector<Plan>& plans, bool traced) {
  TracedPrograms out;
  out.is_traced.assign(plans.size(), false);
  for (std::size_t pi = 0; traced && pi < plans.size(); ++pi) {
    const IterationProgram& first = plans[pi].program_for(plans[pi].first_epoch);
    const IterationSetup* last = out.programs.empty() ? nullptr : &out.programs.back().setup;
    const bool same = last && last->partition == first.setup.partition && last->M == first.setup.M &&
                      last->cache_on == first.setup.cache_on &&
                      last->cache_valid_layers == first.setup.cache_valid_layers &&
                      last->replicas == first.setup.replicas;
    if (same) continue;
    out.programs.push_back(first);
    out.plan_ids.push_back(plans[pi].id);
    out.iterations.push_back(
        static_cast<int>(std::clamp<std::int64_t>(plans[pi].iterations_per_epoch, 1, kTracedIterations)));
    out.is_traced[pi] = true;
  }
  return out;
}

// SimGrid answers the planner's profiling step with one iteration per
// candidate M (a synchronous iteration starts from idle devices), and a
// plan's throughput with its steady state, which the pricing reuses.
IterationPredictor sim_predictor(Runner& runner, const PlanContext& ctx, const SimConfig& sim) {
  return [&runner, &ctx, &sim](const std::vector<IterationProgram>& programs, PredictionUse use) {
    std::vector<IterationPrediction> out;
    if (use == PredictionUse::Plan) {
      for (const auto& [period, m] : steady_periods(runner, ctx, sim, programs))
        out.push_back({period, m.bubble_fraction(period)});
      return out;
    }
    for (const Measured& m : runner.run(ctx, sim, programs, 1)) {
      const double t = m.sim.iteration_end_s.front();
      out.push_back({t, m.bubble_fraction(t)});
    }
    return out;
  };
}

// The chunk search's table of every plan, as chunks.csv rows.
std::vector<ChunkRow> chunk_rows(Mode mode, const std::vector<Plan>& plans) {
  std::vector<ChunkRow> rows;
  for (const Plan& p : plans)
    for (const ChunkCandidate& c : p.chunk_table)
      rows.push_back({to_string(mode), p.K, c.M, p.layout.replicas, c.iteration_s,
                      p.layout.replicas * static_cast<double>(p.batch) / c.iteration_s, c.feasible, c.M == p.M});
  return rows;
}

// `trace`: this mode is traced where [sim] asks (the last mode of a run).
ModeOutput simulate_mode(const Config& config, Mode mode, bool trace, const CostModel& cost, bool exact,
                         Runner& runner, Simulator& sim, const std::function<void(double)>& progress) {
  ModeOutput out;
  const Config mc = mode_config(config, mode);
  const PlanContext ctx(mc, cost);
  const SimConfig sc = read_sim_config(mc);  // [sim], read once for every request of the mode
  const IterationPredictor predict = sim_predictor(runner, ctx, sc);
  ModeRun& run = out.run;
  run.mode = mode;
  // The run loop walks the training ahead (no measured gradient norms: the
  // freeze policy replays a trace or takes the alpha bound; no cache probe:
  // AutoCache decides on the cost model); the simulator prices its record,
  // its SimGrid runs in parallel.
  RunPlanner planner(mc, cost, predict);
  const RunRecord record = walk_ahead(planner);
  run.plan = std::move(planner).take();
  if (exact) check_exact(run.plan.plans);
  const bool traced = trace && sc.trace;
  const std::vector<Plan>& plans = run.plan.plans;
  const TracedPrograms to_trace = traced_programs(plans, traced);
  // The transitions' transfers and the traced iterations depend on nothing
  // but the plans: all start at once (their runs go to the same pool), and
  // the record's steps are then priced in order.
  std::future<std::vector<trace::Trace>> traces =
      std::async(std::launch::async, [&] { return runner.trace(ctx, sc, to_trace.programs, to_trace.plan_ids, to_trace.iterations); });
  const auto entered_from = [&](const StepRecord& step) { return step.previous < 0 ? nullptr : &plans.at(step.previous); };
  const std::vector<TransitionCost> transitions =
      parallel_map<TransitionCost>(record.steps.size(), runner.jobs(), [&](std::size_t si) {
        return transition(ctx, entered_from(record.steps[si]), plans.at(record.steps[si].plan), sim);
      });
  // The steady states plan_run had simulated (memo hits), for their
  // breakdown: each plan's, then the filling ones of the plans that fill.
  std::vector<IterationProgram> steady;
  for (const Plan& p : plans) steady.push_back(p.program);
  std::vector<std::size_t> fill_state(plans.size(), 0);
  for (std::size_t pi = 0; pi < plans.size(); ++pi)
    if (!plans[pi].fill_program.empty()) {
      fill_state[pi] = steady.size();
      steady.push_back(plans[pi].fill_program);
    }
  const auto steady_states = steady_periods(runner, ctx, sc, steady);
  // A transition's spans from `at`, where a trace can hold them (else counted as left out).
  const auto trace_transition = [&](const Plan& p, const Plan* prev, const TransitionCost& tr, double at) {
    const bool fits = at + tr.total_s() <= trace::kMaxTraceTimeS && tr.total_s() <= trace::kMaxTraceSpanS;
    if (tr.total_s() > 0 && fits) add_transition_events(out.trace, mc, p, prev, tr, at);
    out.untraced += !fits;
  };
  const auto starts = std::find_if(record.steps.begin(), record.steps.end(),
                                   [](const StepRecord& step) { return step.start_epoch >= 0; });
  if (starts == record.steps.end()) throw Error("simulate: the run loop walked no epoch, so nothing starts");
  const Plan& first = plans.at(starts->plan);
  run.start = predict_start(ctx, first, starts->start, predict);  // its iterations SimGrid's, from idle
  if (traced) trace_transition(first, nullptr, run.start, 0.0);
  double clock = run.start.total_s();  // start of the plan on the run's timeline
  std::vector<std::pair<double, int>> traced_at;  // start on the run's timeline, epoch
  for (std::size_t si = 0; si < record.steps.size(); ++si) {
    const StepRecord& step = record.steps[si];
    const auto pi = static_cast<std::size_t>(step.plan);
    const Plan& p = plans[pi];
    PlanSim ps;
    ps.plan_id = p.id;
    ps.steady = steady_states[pi].second.sim;
    ps.exposed_comm_s = std::max(0.0, p.iteration_s - period_without_comm(ctx, p.program));
    const TransitionCost& tr = transitions[si];
    ps.transition_s = tr.total_s();
    if (to_trace.is_traced[pi]) {
      // After the transition's parts.
      traced_at.push_back({clock + ps.transition_s, p.first_epoch});
      trace_transition(p, entered_from(step), tr, clock);
    }
    for (const int e : step.epochs) {
      const CacheRole role = p.cache_role(e);
      const bool fill = role == CacheRole::Fill || role == CacheRole::Advance;
      const Measured& state = steady_states[fill ? fill_state[pi] : pi].second;
      double epoch_s = epoch_seconds(state.sim, fill ? p.fill_iteration_s : p.iteration_s, p.iterations_per_epoch);
      if (exact) {
        const auto n = static_cast<int>(p.iterations_per_epoch);  // check_exact bounds it
        epoch_s = runner.run(ctx, sc, {p.program_for(e)}, n).front().sim.drained_s;
      }
      const double transition = e == p.first_epoch ? ps.transition_s : 0.0;
      run.epochs.push_back(epoch_row(mode, p, ps, state, e, fill, epoch_s, transition, mc.data.num_train_samples));
      clock += epoch_s + transition;
    }
    run.plans.push_back(ps);
    if (progress) progress((si + 1.0) / record.steps.size());
  }
  append_traced(out, traces.get(), traced_at);
  out.chunks = chunk_rows(mode, run.plan.plans);
  return out;
}

// A training's result from its modes' outputs, in mode order; speedups
// over `reference` where it fits (a reference that does not fit is no
// plan a user could run).
RunResult assemble(const Config& config, const std::vector<Mode>& modes, Mode reference, const CostModel& cost,
                   std::vector<ModeOutput> outputs) {
  RunResult out;
  out.config = config.source;
  out.device_memory_bytes = config.cluster.device.memory_bytes;
  out.reference = reference;
  for (ModeOutput& m : outputs) {
    out.chunks.insert(out.chunks.end(), m.chunks.begin(), m.chunks.end());
    out.modes.push_back(std::move(m.run));
  }
  const ModeRun& last = out.modes.back();
  const ModelSpec spec = build_model_spec(config.model, config.training.precision);
  out.plan_json = to_json(last.plan, spec).dump(2) + "\n";
  out.trace = std::move(outputs.back().trace);  // only the last mode is traced
  out.trace.source = "sim";
  out.trace.config = config.source;
  out.trace.mode = to_string(modes.back());
  // The knobs a figure needs to label a run (alpha for the freeze curve, ...).
  out.trace.metadata = describe(config);
  out.trace.metadata["network_model"] = "SimGrid CM02, crosstraffic off";
  out.trace.metadata["cost_model"] = cost.name();
  trace::note_start(out.trace, last.start.total_s());
  if (const int n = outputs.back().untraced; n > 0)
    out.trace.metadata["untraced"] = std::to_string(n) + " traced iterations or transitions later than 1e9 s or longer "
                                     "than 8e6 s, beyond a trace's times, are left out";
  out.summary.source = "sim";
  out.summary.config = config.source;
  out.summary.metadata = out.trace.metadata;
  out.summary.reference = to_string(reference);
  const auto ref = std::find_if(out.modes.begin(), out.modes.end(), [&](const ModeRun& r) { return r.mode == reference; });
  const bool ref_fits = ref != out.modes.end() && run_figures(spec, ref->plan.plans).fits_memory;
  for (const ModeRun& r : out.modes) {
    const RunFigures f = run_figures(spec, r.plan.plans);
    trace::ModeSummary s;
    s.mode = to_string(r.mode);
    s.start_s = r.start.total_s();
    s.total_s = r.total_s();
    for (const auto& e : r.epochs) s.epoch_s.push_back(e.epoch_s);
    s.samples_per_s = s.epoch_s.size() * static_cast<double>(config.data.num_train_samples) / s.total_s;
    if (ref_fits) s.speedup = ref->total_s() / s.total_s;
    s.fits_memory = f.fits_memory;
    s.peak_memory_bytes = f.peak_memory_bytes;
    s.updates = f.updates;
    s.global_batch_min = f.global_batch_min;
    s.global_batch_max = f.global_batch_max;
    s.utilisation = utilisation(f.flops, s.total_s, r.plan.peak_flops_per_s);
    out.summary.modes.push_back(std::move(s));
  }
  return out;
}

// Runs each task in a thread of its own; then rethrows the first task's
// exception in task order.
void run_in_threads(const std::vector<std::function<void()>>& tasks) {
  std::vector<std::exception_ptr> errors(tasks.size());
  std::vector<std::thread> threads;
  for (std::size_t i = 0; i < tasks.size(); ++i)
    threads.emplace_back([&, i] {
      try {
        tasks[i]();
      } catch (...) {
        errors[i] = std::current_exception();
      }
    });
  for (std::thread& t : threads) t.join();
  for (const std::exception_ptr& e : errors)
    if (e) std::rethrow_exception(e);
}

int default_jobs(int jobs) { return jobs > 0 ? jobs : static_cast<int>(std::max(1L, sysconf(_SC_NPROCESSORS_ONLN))); }

}  // namespace

std::vector<RunResult> simulate_trainings(const std::vector<Config>& configs, const RunOptions& opt, Simulator& sim) {
  if (opt.modes.empty())
    throw Error("no mode to simulate: expected at least one of all|baseline|gpipe|freeze|autopipe|autodp|autocache|configured");
  const std::vector<Mode> modes = with_reference(opt.modes, opt.reference);
  std::vector<std::unique_ptr<AnalyticCostModel>> analytic;
  for (const Config& c : configs) analytic.push_back(std::make_unique<AnalyticCostModel>(c.cluster, c.training));
  const int jobs = default_jobs(opt.jobs);
  Runner runner(sim, jobs);
  const std::size_t n_modes = modes.size();
  std::vector<std::vector<ModeOutput>> outputs(configs.size(), std::vector<ModeOutput>(n_modes));
  // Progress: the mean over every mode of every training of its share done.
  std::mutex progress_mutex;
  std::vector<double> done(configs.size() * n_modes, 0.0);
  std::vector<std::function<void()>> tasks;
  for (std::size_t ci = 0; ci < configs.size(); ++ci)
    for (std::size_t mi = 0; mi < n_modes; ++mi)
      tasks.push_back([&, ci, mi] {
        const CostModel& cost = opt.cost ? *opt.cost : *analytic[ci];
        const auto progress = [&](double fraction) {
          if (!opt.progress) return;
          const std::lock_guard lock(progress_mutex);
          done[ci * n_modes + mi] = fraction;
          double sum = 0;
          for (const double d : done) sum += d;
          opt.progress(sum / static_cast<double>(done.size()));
        };
        outputs[ci][mi] = simulate_mode(configs[ci], modes[mi], opt.trace && mi + 1 == n_modes, cost, opt.exact, runner,
                                        sim, progress);
      });
  run_in_threads(tasks);
  std::vector<RunResult> results;
  for (std::size_t ci = 0; ci < configs.size(); ++ci)
    results.push_back(
        assemble(configs[ci], modes, opt.reference, opt.cost ? *opt.cost : *analytic[ci], std::move(outputs[ci])));
  return results;
}

RunResult simulate_training(const Config& config, const RunOptions& opt, Simulator& sim) {
  return std::move(simulate_trainings({config}, opt, sim).front());
}

namespace {

std::string fmt_speedup(double x) {
  char b[32];
  std::snprintf(b, sizeof b, "%.2fx", x);
  return b;
}

std::string fmt_gib(double bytes) {
  char b[32];
  std::snprintf(b, sizeof b, "%.2f GiB", bytes / 1073741824.0);
  return b;
}

std::string batch_range(const trace::ModeSummary& s) {
  return s.global_batch_min == s.global_batch_max
             ? std::to_string(s.global_batch_min)
             : std::to_string(s.global_batch_min) + "-" + std::to_string(s.global_batch_max);
}

// The modes' table: time, speedup over the reference, and what makes two
// runs comparable (the same global batch and updates) or feasible.
void format_modes(std::ostream& os, const RunResult& r) {
  char line[256];
  std::snprintf(line, sizeof line, "  %-10s %12s %9s %11s %8s %12s %9s %8s %6s %4s\n", "mode", "time (s)", "time (h)",
                "samples/s", "speedup", "global batch", "updates", "mem GiB", "util", "fits");
  os << line;
  for (const auto& s : r.summary.modes) {
    const std::string speedup = s.speedup ? fmt_speedup(*s.speedup) : "n/a";
    std::snprintf(line, sizeof line, "  %-10s %12.1f %9.3f %11.1f %8s %12s %9lld %8.2f %5.1f%% %4s\n", s.mode.c_str(),
                  s.total_s, s.total_s / 3600, s.samples_per_s, speedup.c_str(), batch_range(s).c_str(),
                  static_cast<long long>(s.updates), s.peak_memory_bytes / 1073741824.0, 100 * s.utilisation,
                  s.fits_memory ? "yes" : "NO");
    os << line;
  }
  const std::string ref_name = to_string(r.reference);
  const auto ref = std::find_if(r.summary.modes.begin(), r.summary.modes.end(),
                                [&](const trace::ModeSummary& s) { return s.mode == ref_name; });
  const auto ref_run = std::find_if(r.modes.begin(), r.modes.end(), [&](const ModeRun& m) { return m.mode == r.reference; });
  os << "\n  speedup: over " << ref_name << ", " << describe(r.reference);
  if (ref_run != r.modes.end() && !ref_run->plan.plans.empty()) {
    const Plan& p = ref_run->plan.plans.front();
    os << ": K=" << p.K << " M=" << p.M << " x" << p.layout.replicas;
  }
  os << "\n";
  if (ref != r.summary.modes.end() && !ref->fits_memory)
    os << "  no speedup: " << ref_name << " does not fit (" << fmt_gib(ref->peak_memory_bytes) << " on its fullest device, "
       << fmt_gib(r.device_memory_bytes) << " there): no plan without freezing fits this cluster\n";
  for (const ModeRun& m : r.modes)
    if (m.mode != r.reference) os << "  " << to_string(m.mode) << ": " << describe(m.mode) << "\n";
  if (ref == r.summary.modes.end()) return;
  for (const auto& s : r.summary.modes) {
    if (!s.fits_memory)
      os << "  " << s.mode << " does not fit: " << fmt_gib(s.peak_memory_bytes) << " on its fullest device, "
         << fmt_gib(r.device_memory_bytes) << " there\n";
    if (s.mode == ref_name || (s.global_batch_min == ref->global_batch_min && s.global_batch_max == ref->global_batch_max))
      continue;
    os << "  " << s.mode << " trains otherwise than " << ref_name << ": global batch " << batch_range(s) << " against "
       << batch_range(*ref) << ", " << s.updates << " updates against " << ref->updates
       << " (training.batch_policy: more replicas add samples per update; \"global\" keeps the training)\n";
  }
}

}  // namespace

std::string format_result(const RunResult& r) {
  std::ostringstream os;
  char line[256];
  os << "simulated training of " << r.config << "\n"
     << "  SimGrid, CM02 network model; "
     << (r.trace.metadata.count("cost_model") ? r.trace.metadata.at("cost_model") : std::string("analytic"))
     << " cost model; the run's start and transitions included\n\n";
  format_modes(os, r);
  if (r.modes.empty()) return os.str();
  const ModeRun& last = r.modes.back();
  std::snprintf(line, sizeof line, "\n%s, the run's start (before epoch 1): %.3f s\n", to_string(last.mode).c_str(),
                last.start.total_s());
  os << line;
  // Epochs that print alike (a plan's steady epochs) are one row, "7-19".
  os << to_string(last.mode) << ", per epoch (alike epochs in one row):\n";
  std::snprintf(line, sizeof line, "  %9s %7s %3s %8s %4s %-5s %11s %9s %7s %10s %11s\n", "epoch", "frozen", "K",
                "replicas", "M", "cache", "samples/s", "iter (s)", "bubble", "epoch (s)", "transit (s)");
  os << line;
  const auto row = [&](const trace::EpochMetrics& e) {
    const std::string frozen = trace::frozen_text(e);
    std::snprintf(line, sizeof line, " %7s %3d %8d %4d %-5s %11.1f %9.4f %7.3f %10.1f %11.2f\n", frozen.c_str(), e.K,
                  e.replicas, e.M, !e.cache ? "off" : e.cache_hit_ratio > 0 ? "read" : "fill", e.samples_per_s,
                  e.iteration_s, e.bubble_fraction, e.epoch_s, e.transition_s);
    return std::string(line);
  };
  for (std::size_t i = 0; i < last.epochs.size();) {
    const std::string text = row(last.epochs[i]);
    std::size_t j = i + 1;
    while (j < last.epochs.size() && row(last.epochs[j]) == text) ++j;
    const int first = last.epochs[i].epoch, end = last.epochs[j - 1].epoch;
    const std::string epochs = first == end ? std::to_string(first) : std::to_string(first) + "-" + std::to_string(end);
    std::snprintf(line, sizeof line, "  %9s", epochs.c_str());
    os << line << text;
    i = j;
  }
  // A plan whose fullest device exceeds its memory is simulated all the
  // same (infeasible is a result), but said so.
  for (const Plan& p : last.plan.plans)
    if (!p.fits_memory) {
      std::snprintf(line, sizeof line,
                    "  warning: plan %d (K=%d, M=%d) needs %.2f GiB on its fullest device, more than %.2f GiB\n",
                    p.id, p.K, p.M, p.max_device_memory_bytes / 1073741824.0,
                    r.device_memory_bytes / 1073741824.0);
      os << line;
    }
  // The simulated chunk search: throughput (samples/s) vs M for each K met.
  os << "\n" << to_string(last.mode) << ", chunk search (samples/s by M; * = chosen):\n";
  int K = 0;
  for (const ChunkRow& c : r.chunks) {
    if (c.mode != to_string(last.mode)) continue;
    if (c.K != K) {
      os << (K ? "\n" : "") << "  K=" << c.K << ":";
      K = c.K;
    }
    std::snprintf(line, sizeof line, " %d:%.0f%s%s", c.M, c.samples_per_s, c.fits_memory ? "" : "(oom)",
                  c.chosen ? "*" : "");
    os << line;
  }
  if (K) os << "\n";
  if (const auto it = r.trace.metadata.find("untraced"); it != r.trace.metadata.end())
    os << "\nnote: in trace.json, " << it->second << "\n";
  return os.str();
}

void write_outputs(const RunResult& r, const std::string& dir) {
  create_output_dir(dir);
  const std::filesystem::path d(dir);
  // All written before any replaces an earlier run's: a full disk or a
  // trace the writer refuses leaves the folder as it was.
  AtomicFile summary((d / "summary.json").string()), epochs((d / "epochs.csv").string()),
      chunks((d / "chunks.csv").string()), plan((d / "plan.json").string());
  std::optional<AtomicFile> trace;
  trace::write_summary_json(r.summary, summary.stream(), summary.path());
  std::vector<trace::EpochMetrics> rows;
  for (const auto& m : r.modes) rows.insert(rows.end(), m.epochs.begin(), m.epochs.end());
  trace::write_epoch_csv(rows, epochs.stream(), epochs.path());
  trace::write_chunks_csv(r.chunks, chunks.stream(), chunks.path());
  plan.stream() << r.plan_json;
  if (!r.trace.events.empty()) {
    // A plan's traced iterations start from idle devices and can outlast an
    // epoch of one or two steady-state periods, so the next transition may
    // begin inside them: such spans go to lanes of their own.
    trace::Trace t = r.trace;
    trace::separate_overlaps(t);
    trace.emplace((d / "trace.json").string());
    trace::write_chrome_trace(t, trace->stream(), trace->path());
  }
  commit_together({&summary, &epochs, &chunks, &plan, trace ? &*trace : nullptr});
}

std::vector<double> simulate_steady_iterations(const Config& config, const CostModel& cost,
                                               const std::vector<IterationProgram>& programs, Simulator& sim) {
  const PlanContext ctx(config, cost);
  Runner runner(sim, default_jobs(0));
  std::vector<double> out;
  for (const auto& [period, m] : steady_periods(runner, ctx, read_sim_config(config), programs)) out.push_back(period);
  return out;
}

std::vector<double> simulate_chunk_iterations(const Config& config, const CostModel& cost,
                                              const std::vector<IterationProgram>& programs, Simulator& sim) {
  const PlanContext ctx(config, cost);
  Runner runner(sim, default_jobs(0));
  std::vector<double> out;
  for (const Measured& m : runner.run(ctx, read_sim_config(config), programs, 1))
    out.push_back(m.sim.iteration_end_s.front());
  return out;
}

}  // namespace ep::sim
