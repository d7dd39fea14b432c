// The whole-training simulation: for each ablation mode, the planner's run
// plan (its chunk search answered by SimGrid), every plan's steady-state
// iteration simulated and scaled to the epoch, transitions charged where the
// plan changes. The driver decides nothing: plans come from the planner,
// times from SimGrid.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "planner/modes.hpp"
#include "planner/run_plan.hpp"
#include "planner/transition.hpp"
#include "sim/sim_config.hpp"
#include "sim/simulator.hpp"
#include "traces/chunks_csv.hpp"
#include "traces/trace.hpp"

namespace ep::sim {

// The modes are the planner's (planner/modes.hpp).
using ep::kAllModes;
using ep::Mode;
using ep::mode_config;
using ep::parse_mode;
using ep::to_string;

// What the simulator adds to a plan. The plan's own iteration_s,
// fill_iteration_s and bubble_fraction are already SimGrid's (its predictor).
struct PlanSim {
  int plan_id = 0;
  double transition_s = 0;    // charged before the plan's first epoch (the first plan: none, the start is)
  double exposed_comm_s = 0;  // period minus the period with free communication
  SimResult steady;           // per-iteration breakdown of the steady state
};

struct ModeRun {
  Mode mode = Mode::Baseline;
  RunPlan plan;
  std::vector<PlanSim> plans;
  TransitionCost start;  // the run's start, before its first epoch (predict_start)
  std::vector<trace::EpochMetrics> epochs;
  [[nodiscard]] double total_s() const;  // the start and every epoch
};

// Iterations traced per distinct plan: an epoch's first, which starts from
// idle devices (its cache reads cannot run ahead of it), and the next, as
// the steady state runs (trace diff aligns each with its like in a real run).
inline constexpr int kTracedIterations = 2;

// The simulator's answer to the paper's profiling step: throughput vs M for
// each K a mode meets, as chunks.csv holds it (mode by name).
using ChunkRow = trace::ChunkCsvRow;

struct RunResult {
  std::string config;
  double device_memory_bytes = 0;
  Mode reference = Mode::Baseline;  // speedups are over it (it always runs)
  std::vector<ModeRun> modes;
  std::vector<ChunkRow> chunks;
  trace::Trace trace;  // kTracedIterations iterations per distinct plan of the last mode, on one timeline
  trace::RunSummary summary;
  std::string plan_json;  // plan.json: the last mode's run plan (planner's to_json), its times SimGrid's
};

struct RunOptions {
  std::vector<Mode> modes{std::begin(kAllModes), std::end(kAllModes)};
  Mode reference = Mode::Baseline;  // speedups are over it; added to `modes` where missing
  bool exact = false;  // simulate every iteration instead of scaling the steady state
  bool trace = true;   // false: no trace whatever sim.trace says (a sweep keeps each point's summary only)
  int jobs = 0;        // simulations run at once; 0: one per core
  // Called as work completes (fraction in [0, 1]); may be empty.
  std::function<void(double fraction)> progress;
  // Where compute, cache and optimizer times come from; null: the analytic
  // model of the config's cluster (e.g. a FittedCostModel from a profile).
  const CostModel* cost = nullptr;
};

// Every mode is planned in its own thread; their SimGrid runs go to the
// Simulator's fork server, at most `jobs` at a time, and are shared through
// one memo. The result is the same as planning the modes one after another.
[[nodiscard]] RunResult simulate_training(const Config&, const RunOptions&, Simulator&);
// Several trainings at once on the platform of `sim`: every config must
// describe the cluster `sim` was built from. Their modes all run in
// parallel and share the memo, so points of a sweep that ask SimGrid the
// same question get one run. Results in the order of `configs`.
[[nodiscard]] std::vector<RunResult> simulate_trainings(const std::vector<Config>&, const RunOptions&, Simulator&);

// What SimGrid runs for a program as the planner lowered it: its schedule,
// replicas (GPUs and ranks) and cache, its actions priced by ctx's cost
// model (iteration_costs), `iterations` back to back, its all-reduces moved
// as `sim` (the config's [sim], read_sim_config) says.
[[nodiscard]] SimRequest program_request(const PlanContext& ctx, const SimConfig& sim, const IterationProgram& p,
                                         int iterations = 1, int plan_id = -1);

// The steady-state iteration time (seconds) SimGrid gives each program under
// `cost`: what `elasticpipe validate` compares with measured iterations.
[[nodiscard]] std::vector<double> simulate_steady_iterations(const Config&, const CostModel& cost,
                                                             const std::vector<IterationProgram>&, Simulator&);

// The one-iteration time (seconds) SimGrid gives each program, from idle
// devices: what the chunk search compares across M.
[[nodiscard]] std::vector<double> simulate_chunk_iterations(const Config&, const CostModel& cost,
                                                            const std::vector<IterationProgram>&, Simulator&);

// The CLI's summary: per mode its time, speedup over the reference, global
// batch, updates, memory, utilisation and whether it fits (with a note
// where a mode trains otherwise than the reference), then per epoch of the
// last mode: frozen layers, K, replicas, M, throughput.
[[nodiscard]] std::string format_result(const RunResult&);
// summary.json, epochs.csv, chunks.csv, plan.json and (when traced)
// trace.json in `dir`.
void write_outputs(const RunResult&, const std::string& dir);

}  // namespace ep::sim
