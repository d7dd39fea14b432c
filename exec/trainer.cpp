// Epochs of iterations (the run loop, planner/run_loop.hpp, decides which
// and when), evaluation, and what stops a diverged run.
#include "exec/trainer.hpp"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <thread>
#include <utility>

#include "exec/crc32.hpp"
#include "exec/hf_weights.hpp"
#include "exec/torch_compat.hpp"
#include "exec/trainer_impl.hpp"
#include "planner/hf_model.hpp"
#include "planner/transition.hpp"
#include "traces/output_dir.hpp"

namespace ep::exec {

namespace {

// Runs `body`; a failure goes to options.report_error before it propagates,
// while the caller still holds its process group open.
template <class F>
auto reporting_errors(const TrainOptions& options, F&& body) -> decltype(body()) {
  try {
    return body();
  } catch (const std::exception& e) {
    if (options.report_error) options.report_error(e);
    throw;
  }
}

}  // namespace

Trainer::Trainer(const Config& c, const TrainOptions& opt)
    : c_(c),
      x_(read_exec_config(c)),
      opt_(opt),
      env_(opt.process),
      data_(load_data(c)),
      L_(c.model.num_hidden_layers),
      eval_batch_(x_.eval_batch_size > 0 ? x_.eval_batch_size : c.training.batch_size),
      cores_(static_cast<int>(std::max(1u, std::thread::hardware_concurrency()))),
      cost_(c.cluster, c.training),
      ctx_(c, cost_, cores_),
      analytic_(analytic_predictor(ctx_)),
      planner_(
          c, cost_, [this](const std::vector<IterationProgram>& p, PredictionUse use) { return predict(p, use); },
          cores_),
      model_(c.model, c.training.seed, checkpoint_dropout(c.model.checkpoint)),
      optimizer_(c.training),
      sampler_{data_.train.size, c.cluster.nodes, c.training.seed},
      node_(env_.rank / c.cluster.gpus_per_node),
      leader_(env_.rank % c.cluster.gpus_per_node == 0),
      timeline_(c, env_, cores_) {
  if (env_.world_size > 1)
    dist_ = std::make_unique<Dist>(env_, std::chrono::milliseconds(static_cast<std::int64_t>(
                                             x_.collective_timeout_s * 1000)));
  reporting_errors(opt, [&] {
    PipelineOptions po{devices(c), c.training.precision == Precision::BF16};
    pipeline_ = std::make_unique<Pipeline>(model_, optimizer_, po);
    pipeline_->set_reducer(dist_.get());
    // One intra-op thread here: model work runs on a stage worker
    // (Pipeline::on_worker), and whatever else this thread computes must not
    // start a second OpenMP team beside the workers'.
    compat::set_thread_count(1);
    p_.interval_norm_sum.assign(L_, 0.0);
    if (!opt.out_dir.empty() && rank0()) create_output_dir(opt.out_dir);
  });
}

void Trainer::load_initial_weights() {
  if (!c_.model.checkpoint.empty()) return load_checkpoint_weights();
  if (c_.training.init_weights.empty()) return;
  try {
    model_.check_keep(c_.training.init_keep);
  } catch (const Error& e) {
    throw c_.error("training.init_keep", "prefixes of this model's parameter names", e.what());
  }
  bool checked = false;
  try {
    checked = model_.load(c_.training.init_weights, c_.training.init_keep);
  } catch (const Error& e) {
    throw c_.error("training.init_weights", "a weights file with this model's parameter names and shapes "
                   "(those not kept by training.init_keep)", e.what());
  }
  log("initial weights from " + c_.training.init_weights +
      (checked ? "" : " (an older weights file, without a checksum: damage to it cannot be seen)"));
}

// A Hugging Face checkpoint's weights; what stays seeded, what goes unused
// and the dropout training applies are said, not hidden.
void Trainer::load_checkpoint_weights() {
  try {
    model_.check_keep(c_.training.init_keep);
  } catch (const Error& e) {
    throw c_.error("training.init_keep", "prefixes of this model's parameter names", e.what());
  }
  const HfLoaded loaded = load_hf_weights(model_, c_.model.checkpoint, c_.training.init_keep);
  const auto list = [](const std::vector<std::string>& names) {
    std::string out;
    for (const std::string& n : names) out += (out.empty() ? "" : ", ") + n;
    return out;
  };
  log("initial weights from " + c_.model.checkpoint + " (" + loaded.architecture + ")" +
      (loaded.seeded.empty() ? "" : "; seeded, not from it: " + list(loaded.seeded)) +
      (loaded.unused.empty() ? "" : "; unused: " + list(loaded.unused)));
  const Dropout& d = model_.dropout();
  if (d.any()) {
    char buf[200];
    std::snprintf(buf, sizeof buf,
                  "dropout from the checkpoint: hidden %g, attention %g, classifier %g (trained layers only; "
                  "frozen ones run as in evaluation)",
                  d.hidden, d.attention, d.classifier);
    log(buf);
  }
}

namespace {

// Where the epoch stands: `done` of the `n` iterations this process runs of
// it (since it, or its resume, began `elapsed_s` ago, `real0` samples in).
EpochProgress epoch_progress(const trace::RunState& p, int epochs, double elapsed_s, std::int64_t real0,
                             std::int64_t done, std::int64_t n) {
  EpochProgress e;
  e.epoch = p.epoch + 1;
  e.epochs = epochs;
  e.iteration = p.iteration;
  e.iterations = p.iteration + (n - done);
  e.loss = p.epoch_real > 0 ? p.epoch_loss_sum / static_cast<double>(p.epoch_real) : 0.0;
  e.samples_per_s = elapsed_s > 0 ? static_cast<double>(p.epoch_real - real0) / elapsed_s : 0.0;
  e.left_s = elapsed_s / static_cast<double>(done) * static_cast<double>(n - done);
  return e;
}

// The samples, their labels and sizes: what each rank's data files gave.
std::uint32_t data_crc(const Data& d) {
  std::uint32_t crc = 0;
  const auto add = [&](const auto& v) {
    crc = crc32_of(reinterpret_cast<const std::uint8_t*>(v.data()), v.size() * sizeof(v[0]), crc);
  };
  for (const Dataset* s : {&d.train, &d.test}) {
    add(std::vector<std::int64_t>{s->size, s->num_classes, s->channels, s->height, s->width, s->seq_length});
    add(s->pixels);
    add(s->image_bytes);
    add(s->tokens);
    add(s->lengths);
    add(s->labels);
  }
  return crc;
}

}  // namespace

// Ranks launched apart (torchrun, mpirun: a config and data on each node)
// that read other settings, data or initial weights would train apart and
// still end "successfully": refused before the first step. Paths may differ
// (settings leave them out); what they name is compared.
void Trainer::check_ranks_agree() {
  // The initial weights; a resumed run's come from one checkpoint, read
  // by the ranks that train first (the others are sent theirs when woken).
  const std::uint32_t weights = opt_.resume.empty() ? state_crc() : 0;
  const std::string settings = job_settings(c_);
  const std::int64_t mine[] = {
      crc32_of(reinterpret_cast<const std::uint8_t*>(settings.data()), settings.size()), data_crc(data_), weights};
  const std::vector<std::int64_t> all = dist_->all_gather(mine, "comparing the config, data and weights");
  const char* const what[] = {"config (its settings and --set values; paths aside)", "data (samples and labels)",
                               "initial weights"};
  for (std::size_t k = 0; k < 3; ++k) {
    std::string differ;
    for (int r = 1; r < env_.world_size; ++r)
      if (all[static_cast<std::size_t>(r) * 3 + k] != all[k]) differ += (differ.empty() ? "" : ",") + std::to_string(r);
    if (!differ.empty())
      throw Error("rank " + std::to_string(env_.rank) + ": the ranks of this job disagree: the " + what[k] +
                  " of rank(s) " + differ + " differ from rank 0's; every process must be started on the same config, "
                  "--set values, data and weights");
  }
}

TrainResult Trainer::run() {
  run_start_ = Clock::now();
  if (!opt_.resume.empty()) resume();  // the checkpoint's weights and plans, not the initial ones
  else load_initial_weights();
  if (!c_.data.augment.empty()) {
    std::string ops;
    for (const Augmentation a : c_.data.augment) ops += (ops.empty() ? "" : ", ") + to_string(a);
    log("augmentation: " + ops + " (crop pads " + std::to_string(crop_padding(data_.train.height)) + "x" +
        std::to_string(crop_padding(data_.train.width)) + "), drawn per sample and epoch; no activation cache");
  }
  if (dist_) check_ranks_agree();
  run_training(planner_, *this, p_.epoch);  // the planner's run loop calls back here
  if (dist_) {
    dist_->barrier("end of training");
    timeline_.gather(*dist_, seconds(origin_, Clock::now()));
  }
  TrainResult result;
  result.epochs = p_.epochs;
  result.iteration_losses = p_.iteration_losses;
  result.grad_norms = p_.grad_norms;
  result.transitions = p_.transitions;
  result.start_s = start_s_;
  result.total_s = p_.train_s;  // a resumed run's holds each process's start
  result.final_accuracy = p_.epochs.empty() ? -1 : p_.epochs.back().accuracy;
  result.ran = ever_active_;
  // The last step's gradients were checked by no later loss (nor by their
  // norms, where none are computed): weights.bin is of finite weights.
  if (rank0() && !opt_.out_dir.empty() && ever_active_) check_finite_weights();
  if (rank0() && !opt_.out_dir.empty())
    write_run_outputs(opt_.out_dir, c_, timeline_, result, planner_, data_.train.size, model_, data_.train.class_names);
  loader_.settle();  // a read ahead of an epoch that will not come, done before the cache goes
  if (cache_ && leader_) cache_->remove();
  drop_cache_ahead();  // a run that ended before a step took it
  return result;
}

bool Trainer::active() const {
  const auto& r = plan_->layout.active_ranks;
  return std::find(r.begin(), r.end(), env_.rank) != r.end();
}

const ReplicaLayout::Replica& Trainer::replica() const {
  const auto& l = plan_->layout;
  const auto it = std::find(l.active_ranks.begin(), l.active_ranks.end(), env_.rank);
  return l.replica.at(static_cast<std::size_t>(it - l.active_ranks.begin()));
}

void Trainer::log(const std::string& line) const {
  if (rank0() && opt_.log) opt_.log(line);
}

// Iterations per epoch of the initial plan: the lr schedule's unit.
std::int64_t Trainer::per_epoch0() const { return planner_.run().plans.front().iterations_per_epoch; }

// The lr schedule's position, in iterations of the initial plan: with more
// replicas an iteration covers more samples, so the schedule follows the
// samples seen, not the step count.
std::int64_t Trainer::lr_position(std::int64_t consumed) const {
  const Plan& first = planner_.run().plans.front();
  return static_cast<std::int64_t>(p_.epoch) * per_epoch0() +
         consumed / (static_cast<std::int64_t>(first.layout.pipelines_per_node) * first.batch);
}

// Whether this epoch fills (or advances) the cache rather than reading it.
bool Trainer::filling() const {
  const CacheRole role = plan_->cache_role(p_.epoch);
  return role == CacheRole::Fill || role == CacheRole::Advance;
}

// The replica's batch as the plan's pipeline reads it; an error names this rank.
BatchLoader::Request Trainer::batch_request(const std::vector<std::int64_t>& idx,
                                            const IterationProgram& program, int epoch) const {
  try {
    BatchLoader::Request r = exec::batch_request(*pipeline_, idx, program);
    r.epoch = epoch;
    return r;
  } catch (const Error& e) {
    throw Error("rank " + std::to_string(env_.rank) + ": " + e.what());
  }
}

// The next epoch's first batch, as this plan would run it (BatchLoader::take
// drops the guess when a freeze step changes the micro-batches, the
// devices or whether the cache stands in for the input).
void Trainer::request_next_epoch(const IterationProgram& program, int ppn, int local, int batch) {
  const int following = p_.epoch + 1;
  if (following >= c_.training.epochs) return;
  next_order_ = node_order(sampler_, node_, following);
  next_order_epoch_ = following;
  loader_.request(batch_request(replica_batch(next_order_, 0, ppn, local, batch),
                                 following < plan_->end_epoch ? plan_->program_for(following) : program, following));
}

// After a transition, its first batch: assembled ahead or not, the host's wait.
void Trainer::note_first_batch() {
  meter_.first_batch(loader_.last_take().prefetched, loader_.last_take().wait_s);
}

// One of the new plan's first iterations into the warm-up meter: launched at
// `launch`, done where its timed actions ended on the device. Every one of
// them was launched timed: the meter starts between epochs, none in flight.
void Trainer::meter_warmup(Clock::time_point launch, const IterationResult& r, bool epoch_done) {
  double done_s = seconds(origin_, launch);
  for (const ActionRecord& rec : r.records) done_s = std::max(done_s, rec.end_s);
  meter_.warmup_iteration(seconds(origin_, launch), done_s, epoch_done);
}

// This epoch's sampler order (drawn at the last epoch's end, where it was).
std::vector<std::int64_t> Trainer::epoch_order() {
  const bool drawn = next_order_epoch_ == p_.epoch;
  next_order_epoch_ = -1;
  return drawn ? std::move(next_order_) : node_order(sampler_, node_, p_.epoch);
}

namespace {

// The sample audit log of one rank: it grows by appending (a kill keeps
// what it holds); a write it loses is an error, not a silently shorter file.
class SampleAudit {
 public:
  SampleAudit(const ExecConfig& x, const std::string& out_dir, int rank) {
    if (!x.record_samples || out_dir.empty()) return;
    const auto dir = std::filesystem::path(out_dir) / "samples";
    create_output_dir(dir.string());
    path_ = (dir / ("rank" + std::to_string(rank) + ".csv")).string();
    out_ = std::make_unique<std::ofstream>(path_, std::ios::app);
  }
  void add(int epoch, std::int64_t slot, const std::vector<std::int64_t>& idx) {
    if (out_)
      for (const auto i : idx)
        if (i >= 0) *out_ << epoch << ',' << slot << ',' << i << '\n';
  }
  void close() {
    if (out_ && !out_->flush()) throw Error(path_ + ": write failed (the sample audit is incomplete)");
  }

 private:
  std::string path_;
  std::unique_ptr<std::ofstream> out_;
};

}  // namespace

// The run's start (planner/transition.hpp): the plan's start_program, as
// the run loop lowered it, run kStartIterations times on the epoch's first
// batch, as the epoch runs iterations (each queued before the one before is
// read, the next batch assembled meanwhile), updating nothing; the last
// one's next batch is the epoch's first. It does the process's one-off
// work the first epoch would otherwise pay. Every process then waits for
// the others, so the first epoch's first all-reduce waits for no late
// start. The start, from run() on (planning, any chunk search, the first
// plan entered, these iterations, that wait), is said and recorded apart
// from the epochs.
void Trainer::start(const Plan&, const IterationProgram& program, int epoch) {
  const Clock::time_point t0 = Clock::now();
  const std::optional<PinnedAllocs> pinned_before =
      c_.device == DeviceKind::CUDA ? pinned_allocs_now() : std::nullopt;
  if (active()) start_iterations(program, epoch);
  const Clock::time_point t1 = Clock::now();
  if (dist_) dist_->barrier("the run's start");
  const Clock::time_point t2 = Clock::now();
  start_s_ = seconds(run_start_, t2);
  p_.train_s += start_s_;  // checkpointed with it: a resumed run's time holds the start before the kill too
  if (!rank0()) return;
  timeline_.note_start(start_s_);
  timeline_.transition(seconds(origin_, run_start_), seconds(origin_, t2), epoch, trace::kStartEventName);
  const std::optional<PinnedAllocs> pinned = pinned_allocs_since(pinned_before);
  char waited[64] = "";
  if (dist_) std::snprintf(waited, sizeof waited, ", the other ranks' %.3f s", seconds(t1, t2));
  char line[256];
  std::snprintf(line, sizeof line, "start: %.3f s before epoch %d (%d start iterations %.3f s%s%s%s)", start_s_,
                epoch + 1, kStartIterations, seconds(t0, t1), waited, pinned ? "; " : "",
                pinned ? format_pinned(*pinned).c_str() : "");
  log(line);
}

void Trainer::start_iterations(const IterationProgram& program, int epoch) {
  const int ppn = plan_->layout.pipelines_per_node, local = replica().local_rank, batch = plan_->batch;
  next_order_ = node_order(sampler_, node_, epoch);  // train_epoch takes it (epoch_order)
  next_order_epoch_ = epoch;
  const std::vector<std::int64_t> idx = replica_batch(next_order_, p_.consumed, ppn, local, batch);
  run_start_iterations(*pipeline_, loader_, program, batch_request(idx, program, epoch),
                       batch_request(idx, plan_->program_for(epoch), epoch), static_cast<double>(batch));
}

// The run loop's epoch: trained by the processes the plan makes active.
void Trainer::run_epoch(const Plan&, int epoch) {
  if (!active()) return;
  if (epoch != p_.epoch)
    throw Error("rank " + std::to_string(env_.rank) + ": the run loop asks for epoch " + std::to_string(epoch + 1) +
                ", this process is at epoch " + std::to_string(p_.epoch + 1));
  train_epoch();
}

// One epoch as train_epoch runs it: its fixed facts (the program, the
// node's sampler order, the batch), its cursors and what it measures.
struct Trainer::EpochPass {
  EpochPass(const IterationProgram& p, std::vector<std::int64_t> o, SampleAudit audit)
      : program(p), order(std::move(o)), samples(std::move(audit)) {}
  const IterationProgram& program;
  std::vector<std::int64_t> order;
  std::int64_t slots = 0;      // the order's sampler slots
  int ppn = 0, local = 0, batch = 0;
  std::int64_t slot_step = 0;  // slots per iteration: pipelines per node x batch
  std::int64_t total0 = 0;     // the lr schedule's steps
  bool prefetch = false;       // the disk tier's next windows read ahead
  std::int64_t n = 0;          // iterations to run
  std::int64_t real_at_start = 0;  // samples of this epoch before a resume
  Clock::time_point start;
  std::int64_t next = 0, launched = 0, done = 0;  // the launch cursor (slots), iterations launched, recorded
  SampleAudit samples;
  TracedMeasures traced;
  HostPace pace;
};

void Trainer::train_epoch() {
  pipeline_->set_dropout_seed(dropout_seed(c_.training.seed, p_.epoch));
  const bool fill = filling();
  std::vector<std::int64_t> order = epoch_order();
  EpochPass e(plan_->program_for(p_.epoch), std::move(order), SampleAudit(x_, opt_.out_dir, env_.rank));
  e.ppn = plan_->layout.pipelines_per_node;
  e.local = replica().local_rank;
  e.slots = static_cast<std::int64_t>(e.order.size());
  e.total0 = per_epoch0() * c_.training.epochs;
  e.prefetch = plan_->cache.on && !fill && plan_->cache.tier == CacheTier::Disk && cache_;
  e.batch = plan_->batch;  // training.batch_policy decides it per plan
  e.slot_step = static_cast<std::int64_t>(e.ppn) * e.batch;
  e.pace.begin(cache_.get(), c_.device == DeviceKind::CUDA);
  e.start = Clock::now();
  e.n = iterations_in_epoch(sampler_, p_.consumed, e.ppn, e.batch);
  e.real_at_start = p_.epoch_real;
  e.next = p_.consumed;
  e.launched = p_.iteration;
  const int every = x_.checkpoint_every;
  // The devices run one iteration ahead of the host's bookkeeping: the host
  // queues iteration i + 1 before it reads iteration i's loss and gradient
  // norms, so a GPU never waits for it. Not with replicas (their loss
  // all-reduce shares NCCL lane 0 with the gradients, in one order on every
  // rank), nor before a checkpoint (it saves the weights after iteration i).
  const bool ahead = !(dist_ && plan_->layout.replicas > 1);
  const auto checkpoint_after = [&] {  // the oldest iteration in flight, once recorded
    return every > 0 && (p_.iteration + 1) % every == 0 && p_.consumed + e.slot_step < e.slots;
  };
  std::optional<Launched> in_flight;
  while (e.next < e.slots || in_flight) {
    std::optional<Launched> queued;
    if (e.next < e.slots && (!in_flight || (ahead && !checkpoint_after()))) queued = launch_iteration(e);
    if (in_flight) record_iteration(e, *in_flight);
    in_flight = std::move(queued);
  }
  e.samples.close();
  if (cache_) cache_->flush();  // the epoch's writes stored behind it: landed, or their failure raised here
  e.pace.end(cache_.get());
  finish_epoch(p_.epoch_elapsed_s + seconds(e.start, Clock::now()), e.traced, fill, e.pace);
}

// Queues the pass's next iteration: its batch taken (the next one asked for,
// the disk tier's windows read ahead), its lr, whether it is traced.
Trainer::Launched Trainer::launch_iteration(EpochPass& e) {
  Launched l;
  l.start = Clock::now();
  l.idx = replica_batch(e.order, e.next, e.ppn, e.local, e.batch);
  const std::vector<MicroBatch> batches = loader_.take(batch_request(l.idx, e.program, p_.epoch));
  note_first_batch();
  if (e.next + e.slot_step < e.slots)
    loader_.request(
        batch_request(replica_batch(e.order, e.next + e.slot_step, e.ppn, e.local, e.batch), e.program, p_.epoch));
  else
    request_next_epoch(e.program, e.ppn, e.local, e.batch);
  if (e.prefetch)  // the sampler's next window, read ahead by the kernel
    for (int w = 1; w <= x_.prefetch_iterations; ++w)
      if (e.next + w * e.slot_step < e.slots)
        cache_->prefetch(replica_batch(e.order, e.next + w * e.slot_step, e.ppn, e.local, e.batch));
  l.global_real = iteration_real_samples(sampler_, e.next, e.ppn, e.batch);
  l.lr = learning_rate(c_.training, lr_position(e.next), e.total0) * plan_->lr_scale;
  l.traced = e.launched < x_.trace_iterations;  // on every rank: rank 0 gathers them at the end
  // A new plan's first iterations are timed as traced ones are (not
  // traced): the warm-up meter needs when the device was done with each.
  l.future = pipeline_->launch(e.program, batches, static_cast<double>(l.global_real), l.lr,
                               l.traced || meter_.warming() ? std::optional<Clock::time_point>(origin_) : std::nullopt);
  e.pace.queue_s.push_back(seconds(l.start, Clock::now()));
  e.next += e.slot_step;
  ++e.launched;
  return l;
}

// A launched iteration's result into the run state: the global batch's loss
// and hits, the layers' gradient norms, the counters; then the warm-up, the
// progress line and a checkpoint where one is due.
void Trainer::record_iteration(EpochPass& e, Launched& l) {
  const IterationResult r = l.future.get();
  e.pace.done_s.push_back(seconds(e.start, Clock::now()));
  if (l.traced) {
    timeline_.add(r, *plan_, p_.epoch, static_cast<int>(p_.iteration), replica());
    e.traced.add(r, plan_->K);
  }
  double loss = r.loss, correct = static_cast<double>(r.correct);
  if (dist_ && plan_->layout.replicas > 1) {  // the global batch's loss and hits
    at::Tensor t = at::tensor({loss, correct}, at::kDouble);
    dist_->allreduce_now(t, "loss all-reduce");
    loss = t[0].item<double>();
    correct = t[1].item<double>();
  }
  check_finite(loss, r.layer_grad_sq, l.lr);  // before anything records the iteration
  e.samples.add(p_.epoch, p_.consumed, l.idx);
  p_.iteration_losses.push_back(loss);
  p_.epoch_loss_sum += loss * static_cast<double>(l.global_real);
  p_.epoch_real += l.global_real;
  p_.epoch_correct += static_cast<std::int64_t>(std::llround(correct));
  for (int layer = 0; layer < L_ && !r.layer_grad_sq.empty(); ++layer)
    p_.interval_norm_sum[layer] += std::sqrt(r.layer_grad_sq[layer]);
  ++p_.interval_iterations;
  p_.consumed += e.slot_step;
  ++p_.iteration;
  if (meter_.warming()) meter_warmup(l.start, r, p_.consumed >= e.slots);
  ++e.done;
  if (opt_.progress && rank0())
    opt_.progress(epoch_progress(p_, c_.training.epochs, seconds(e.start, Clock::now()), e.real_at_start, e.done, e.n));
  const int every = x_.checkpoint_every;
  if (every > 0 && p_.iteration % every == 0 && p_.consumed < e.slots) checkpoint(seconds(e.start, Clock::now()));
}

// Records the epoch just run, starts the next, and checkpoints.
void Trainer::finish_epoch(double epoch_s, const TracedMeasures& traced, bool fill, const HostPace& pace) {
  const double transition_s = meter_.take_seconds();
  p_.train_s += epoch_s + transition_s;
  const trace::EpochMetrics m = epoch_metrics(*plan_, p_, traced, epoch_s, transition_s, fill, evaluate());
  p_.epochs.push_back(m);
  log(format_epoch(m, c_.training.epochs, L_));
  // Where the host may pace the epoch: a GPU's queued work, the cache's copies.
  if (c_.device == DeviceKind::CUDA || pace.cache.reads > 0 || pace.cache.writes > 0) log(format_host_pace(pace));
  ++p_.epoch;
  p_.consumed = 0;
  p_.iteration = 0;
  p_.epoch_loss_sum = 0;
  p_.epoch_real = p_.epoch_correct = 0;
  p_.epoch_elapsed_s = 0;
  // Rewritten every epoch: a run that fails later keeps what it measured.
  if (rank0() && !opt_.out_dir.empty())
    write_epoch_csv(p_.epochs, (std::filesystem::path(opt_.out_dir) / "epochs.csv").string());
  checkpoint();
}

// A diverged run stops here, before its loss, its gradient norms (which
// would drive the freeze policy) or a checkpoint of its state are kept:
// the checkpoints on disk are all of finite states from before, and the
// message names them.
void Trainer::check_finite(double loss, const std::vector<double>& layer_grad_sq, double lr) const {
  std::string what;
  if (!std::isfinite(loss)) what = "loss " + std::to_string(loss);
  for (std::size_t l = 0; what.empty() && l < layer_grad_sq.size(); ++l)
    if (!std::isfinite(layer_grad_sq[l]))
      what = "gradient norm of layer " + std::to_string(l) + " " + std::to_string(std::sqrt(layer_grad_sq[l]));
  char lr_text[32];
  std::snprintf(lr_text, sizeof lr_text, "%g", lr);
  if (!what.empty()) diverged(p_.iteration + 1, what + " (learning rate " + lr_text + ")");
}

// A finite loss can still leave non-finite weights after the step.
void Trainer::check_finite_weights() const {
  for (const NamedTensor& p : model_.named_params())
    if (!at::isfinite(p.tensor).all().item<bool>()) diverged(p_.iteration, "parameter " + p.name + " is not finite");
}

void Trainer::diverged(std::int64_t iteration, const std::string& what) const {
  const std::filesystem::path checkpoints = std::filesystem::path(opt_.out_dir) / "checkpoints";
  std::error_code ec;
  const bool have = !opt_.out_dir.empty() && std::filesystem::exists(checkpoints / "latest", ec);
  throw Error("training diverged at epoch " + std::to_string(p_.epoch + 1) + ", iteration " +
              std::to_string(iteration) + ": " + what + "; " +
              (have ? "the last good checkpoint is " + checkpoints.string() + ": continue with --resume " +
                          checkpoints.string() + " and a smaller training.lr"
                    : std::string("no checkpoint was written before it: start again with a smaller training.lr")));
}

// The active replicas split the test set; the hits are summed.
double Trainer::evaluate() {
  const Dataset& test = data_.test;
  if (test.size == 0) return -1;
  const auto& ranks = plan_->layout.active_ranks;
  const auto n = static_cast<std::int64_t>(ranks.size());
  const auto me = static_cast<std::int64_t>(std::find(ranks.begin(), ranks.end(), env_.rank) - ranks.begin());
  const std::int64_t block = (test.size + n - 1) / n;
  const std::int64_t lo = std::min(test.size, me * block), hi = std::min(test.size, lo + block);
  const int batch = eval_batch_;
  double correct = 0;
  on_worker([&] {
    // In float32, whatever the training precision.
    const compat::AutocastScope fp32(pipeline_->device_of_sublayer(0).type(), false);
    for (std::int64_t first = lo; first < hi; first += batch) {
      std::vector<std::int64_t> idx;
      for (std::int64_t i = first; i < std::min(hi, first + batch); ++i) idx.push_back(i);
      const MicroBatch mb = make_batch(test, idx);
      const at::Tensor logits = pipeline_->infer(mb.input, mb.lengths);
      correct += static_cast<double>((logits.argmax(-1).cpu() == mb.labels).sum().item<std::int64_t>());
    }
  });
  if (dist_ && n > 1) {
    at::Tensor t = at::tensor({correct}, at::kDouble);
    dist_->allreduce_now(t, "evaluation all-reduce");
    correct = t[0].item<double>();
  }
  return correct / static_cast<double>(test.size);
}

TrainResult train(const Config& c, const TrainOptions& opt) {
  check_runnable(c, opt.process);
  Trainer trainer(c, opt);
  return reporting_errors(opt, [&] { return trainer.run(); });
}

}  // namespace ep::exec
