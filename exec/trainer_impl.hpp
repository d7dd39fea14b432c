// Internal to exec/: the Trainer behind train(), the executor's side of the
// planner's run loop (planner/run_loop.hpp). One object per process; its
// member functions live by job: epochs (trainer.cpp), the measurements a
// freeze step needs and their broadcast (run_backend.cpp), a plan's entry
// and the transition (enter_plan.cpp), checkpoints and resume (resume.cpp).
#pragma once

#include <functional>
#include <future>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "exec/cache.hpp"
#include "exec/dist.hpp"
#include "exec/exec_config.hpp"
#include "exec/job.hpp"
#include "exec/measure.hpp"
#include "exec/model.hpp"
#include "exec/optimizer.hpp"
#include "exec/pipeline.hpp"
#include "exec/progress.hpp"
#include "exec/train_outputs.hpp"
#include "exec/transition_meter.hpp"
#include "exec/timing.hpp"
#include "exec/trainer.hpp"
#include "planner/autodp.hpp"
#include "planner/run_loop.hpp"
#include "planner/run_plan.hpp"
#include "traces/run_outputs.hpp"

namespace ep::exec {

class Trainer final : RunBackend {
 public:
  Trainer(const Config& c, const TrainOptions& opt);
  TrainResult run();

 private:
  // The run loop's calls (run_backend.cpp, enter_plan.cpp, trainer.cpp).
  [[nodiscard]] bool decides() const override { return rank0(); }
  std::vector<double> grad_norms() override;
  std::optional<MeasuredCache> probe_cache(int frozen_layers) override;
  void publish(int step, const StepInputs& in, const Plan& plan) override;
  StepInputs follow(int step) override;
  void begin_step(int step) override;
  void enter(const Plan& plan, const Plan* previous) override;
  void start(const Plan& plan, const IterationProgram& program, int epoch) override;
  void run_epoch(const Plan& plan, int epoch) override;

  [[nodiscard]] bool rank0() const { return env_.rank == 0; }
  [[nodiscard]] bool active() const;
  [[nodiscard]] const ReplicaLayout::Replica& replica() const;
  void log(const std::string& line) const;

  // run_backend.cpp: the chunk search's timings.
  std::vector<IterationPrediction> predict(const std::vector<IterationProgram>& programs, PredictionUse use);
  std::vector<double> chunk_times(const std::vector<IterationProgram>& programs);
  // Every chunk timing this process holds (K -> per candidate M), as rank 0
  // hands them to the others; take_chunk_times adds those it lacks.
  [[nodiscard]] nlohmann::json chunk_times_json() const;
  void take_chunk_times(const nlohmann::json& times);
  [[nodiscard]] std::string cache_file(CacheTier tier, const std::string& name) const;
  [[nodiscard]] std::string node_cache_file(CacheTier tier) const { return cache_file(tier, "node" + std::to_string(node_)); }
  std::vector<std::int64_t> entry_shape();
  // Model work outside an iteration, on stage 0's worker (Pipeline::on_worker)
  // with the plan's threads.
  void on_worker(const std::function<void()>& task);

  // enter_plan.cpp: carrying out a plan and the move between two.
  [[nodiscard]] std::vector<at::Device> plan_devices() const;
  void enter_plan(TransitionCost* move);
  void onboard();
  void repartition();
  void make_cache_ahead();
  void drop_cache_ahead();
  void check_replicas();
  // The CRC-32 that closes pack_state's bytes of this replica's weights
  // and optimizer state.
  [[nodiscard]] std::uint32_t state_crc() const;
  void rebuild_cache();
  void transition(const Plan& previous);

  // trainer.cpp: epochs.
  [[nodiscard]] std::int64_t per_epoch0() const;
  // At `consumed` slots into this epoch.
  [[nodiscard]] std::int64_t lr_position(std::int64_t consumed) const;
  [[nodiscard]] bool filling() const;
  void start_iterations(const IterationProgram& program, int epoch);  // the start's (Trainer::start)
  void train_epoch();
  // Logs the epoch's line, then, on a GPU or with the cache, its host line.
  void finish_epoch(double epoch_s, const TracedMeasures& traced, bool fill, const HostPace& pace);
  // An iteration queued on the pipeline, not yet recorded (train_epoch).
  struct Launched {
    IterationFuture future;
    std::vector<std::int64_t> idx;
    std::int64_t global_real = 0;
    double lr = 0;
    bool traced = false;
    Clock::time_point start;
  };
  // One epoch as train_epoch runs it (trainer.cpp): its launches and records.
  struct EpochPass;
  Launched launch_iteration(EpochPass& e);
  void record_iteration(EpochPass& e, Launched& l);
  void check_finite(double loss, const std::vector<double>& layer_grad_sq, double lr) const;
  void check_finite_weights() const;
  [[noreturn]] void diverged(std::int64_t iteration, const std::string& what) const;
  double evaluate();
  [[nodiscard]] BatchLoader::Request batch_request(const std::vector<std::int64_t>& idx,
                                                   const IterationProgram& program, int epoch) const;
  void request_next_epoch(const IterationProgram& program, int ppn, int local, int batch);
  void note_first_batch();
  void meter_warmup(Clock::time_point launch, const IterationResult& r, bool epoch_done);
  [[nodiscard]] std::vector<std::int64_t> epoch_order();

  // resume.cpp: checkpoints.
  void checkpoint(double running_s = 0);
  void resume();
  // training.init_weights (or model.checkpoint's weights) into the model
  // before the first step; a file that does not fit is an error of that
  // key (of the checkpoint's file and tensor).
  void load_initial_weights();
  // Every process of a job must train the same thing: compares the
  // digests of the config (its settings), the data and the initial
  // weights across the ranks; throws, on every rank alike, naming what
  // differs on which ranks.
  void check_ranks_agree();
  void load_checkpoint_weights();

  // The run: its config, this process, its data and sizes.
  const Config& c_;
  const ExecConfig x_;  // [exec]: how this process runs
  const TrainOptions& opt_;
  ProcessEnv env_;
  Data data_;
  int L_;
  int eval_batch_;  // samples per evaluation or cache-fill chunk (exec.eval_batch_size, else training.batch_size)
  int cores_;       // this machine's: the planner's thread counts divide them
  // Planning: the cost model, the context, the run planner (which times
  // the chunk search through predict()).
  AnalyticCostModel cost_;
  PlanContext ctx_;
  IterationPredictor analytic_;
  RunPlanner planner_;
  // Training: the model, its optimizer, the sampler.
  Model model_;
  Optimizer optimizer_;
  SamplerSpec sampler_;
  // Carrying plans out: this process's node, its group, its pipeline, the
  // node's activation cache and rank 0's cache probe.
  int node_;
  bool leader_;
  std::unique_ptr<Dist> dist_;
  std::unique_ptr<Pipeline> pipeline_;
  std::unique_ptr<ActivationCache> cache_;
  std::unique_ptr<CacheProbe> probe_;  // rank 0's, kept from one freeze step to the next
  // Across epochs: the last iteration of an epoch starts assembling the
  // next epoch's first batch (and its sampler order), so the device does
  // not wait for it after the evaluation and the freeze step.
  BatchLoader loader_{data_.train, Augment{c_.data.augment, c_.training.seed}};
  int next_order_epoch_ = -1;
  std::vector<std::int64_t> next_order_;
  std::vector<std::int64_t> entry_shape_;
  // Where the run stands: the plan in force and the one before, the run
  // state a checkpoint holds, the freeze step's transition being measured.
  Plan plan_storage_, prev_storage_;
  const Plan* plan_ = nullptr;
  const Plan* previous_plan_ = nullptr;
  trace::RunState p_;
  TransitionMeter meter_{p_.transitions};  // the freeze step being planned and carried out
  bool resumed_ = false, ever_active_ = false;
  // The trace and the clocks.
  TraceRecorder timeline_;
  Clock::time_point origin_ = Clock::now();
  Clock::time_point run_start_ = origin_;  // run() began: the run's start counts from here
  double start_s_ = 0;                     // this process's start, once over
  // The node's cache file made on a host thread while a plan without the
  // cache trains (Plan::cache_file_ahead), with the seconds it took; the
  // plan that turns the cache on takes it. Last: destroyed (joined) first.
  struct MadeCache {
    std::unique_ptr<ActivationCache> cache;
    CacheTier tier = CacheTier::HostMemory;
    double seconds = 0;
  };
  std::future<MadeCache> cache_ahead_;
};

}  // namespace ep::exec
