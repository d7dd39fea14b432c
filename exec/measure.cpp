#include "exec/measure.hpp"

#include <c10/core/GradMode.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>

#include "exec/exec_config.hpp"
#include "exec/timing.hpp"
#include "exec/torch_compat.hpp"
#include "planner/digest.hpp"
#include "planner/program_text.hpp"
#include "planner/run_plan.hpp"
#include "planner/transition.hpp"
#include "traces/chunk_memo.hpp"
#include "traces/output_dir.hpp"

namespace ep::exec {

double time_chunk_candidate(Pipeline& pipeline, const Dataset& train, const IterationProgram& program, int runs) {
  const IterationSetup& s = program.setup;
  pipeline.configure(s.partition, s.K, s.v);
  // On the devices before the clock starts, as training's loader puts them
  // there: a pageable batch copied to a GPU inside would wait for the
  // device's queue to drain at every micro-batch.
  BatchLoader loader(train);
  const std::vector<MicroBatch> mbs = loader.take(batch_request(pipeline, first_samples(train, s.batch), program));
  return median_seconds(runs, [&] { (void)pipeline.run(program, mbs, s.batch, 0); });
}

void run_start_iterations(Pipeline& pipeline, BatchLoader& loader, const IterationProgram& start,
                          const BatchLoader::Request& request, const BatchLoader::Request& then, double real_samples) {
  std::vector<IterationFuture> queued;
  for (int i = 0; i < kStartIterations; ++i) {
    const std::vector<MicroBatch> batches = loader.take(request);
    loader.request(i + 1 < kStartIterations ? request : then);
    queued.push_back(pipeline.launch(start, batches, real_samples, 0.0, std::nullopt));
    if (queued.size() == 2) {  // one read while the next is queued, as train_epoch does
      (void)queued.front().get();
      queued.erase(queued.begin());
    }
  }
  for (IterationFuture& f : queued) (void)f.get();
  pipeline.prepare_step(start);
  // The device timer of AutoCache's probe (median_compute_times holds the
  // stream with a spin kernel, set up once per process: its kernel loaded,
  // its clock rate measured) set up here, not in the first freeze step.
  if (const at::Device first = pipeline.device_of_sublayer(0); first.is_cuda()) compat::hold_stream(first, 0);
}

namespace {

std::string environment(const Config& c, int cores) {
  char host[256] = {};
  gethostname(host, sizeof host - 1);
  const auto& m = c.model;
  return std::string(host) + "|" + std::to_string(cores) + " cores|" + to_string(c.device) + "|libtorch " +
         TORCH_VERSION + "|" + to_string(m.family) + " L" + std::to_string(m.num_hidden_layers) + " H" +
         std::to_string(m.hidden_size) + " A" + std::to_string(m.num_attention_heads) + " I" +
         std::to_string(m.intermediate_size) + " img" + std::to_string(m.image_size) + "/" +
         std::to_string(m.patch_size) + " seq" + std::to_string(m.seq_length) + "|" + to_string(c.training.precision) +
         "|" + to_string(c.training.checkpointing) + "|" + to_string(c.planner.schedule) + " v" +
         std::to_string(c.planner.virtual_stages) + "|" + std::to_string(c.cluster.gpus_per_node) +
         " processes per node";
}

std::string memo_path(const Config& c) {
  if (std::string path = read_exec_config(c).chunk_memo; !path.empty()) return path;
  const char* home = std::getenv("HOME");
  return std::string(home && *home ? home : "/tmp") + "/.cache/elasticpipe/chunk_memo.json";
}

// The memo's entries; a damaged memo is refused with what to do about it.
std::vector<trace::ChunkMemoEntry> read_memo(const std::string& path) {
  try {
    return trace::read_chunk_memo(path);
  } catch (const Error& e) {
    throw Error("chunk memo " + std::string(e.what()) + "; delete it or set exec.chunk_memo");
  }
}

}  // namespace

ChunkMemo::ChunkMemo(const Config& c, int cores) : environment_(environment(c, cores)), path_(memo_path(c)) {
  // Its folder made (and found writable) before a search that it would keep.
  create_output_dir(std::filesystem::path(path_).parent_path().string(), "exec.chunk_memo");
}

trace::ChunkMemoKey ChunkMemo::key(const std::vector<IterationProgram>& programs) const {
  trace::ChunkMemoKey k{environment_, programs.front().setup.K, programs.front().setup.batch, {}, {}};
  Digest digest;
  for (const IterationProgram& p : programs) {
    k.M.push_back(p.setup.M);
    digest.add(program_text(p));
  }
  k.programs = digest.hex();
  return k;
}

std::vector<double> ChunkMemo::find(const std::vector<IterationProgram>& programs) const {
  const trace::ChunkMemoKey wanted = key(programs);
  for (const trace::ChunkMemoEntry& e : read_memo(path_))
    if (e.key == wanted) return e.iteration_s;
  return {};
}

void ChunkMemo::add(const std::vector<IterationProgram>& programs, const std::vector<double>& times) const {
  std::vector<trace::ChunkMemoEntry> entries = read_memo(path_);  // as find() read it: a damaged memo was refused there
  entries.push_back({key(programs), times});
  trace::write_chunk_memo(entries, path_);
}

static_assert(kWarmupRuns == 1, "predict_cache_probe_s counts one untimed run before the timed ones");

CacheProbe::CacheProbe(const Dataset& train, int batch, const at::Device& device, bool bf16, std::string path,
                       std::vector<std::int64_t> entry_shape)
    // The frozen forward as a stage worker runs it: its input already on the device.
    : CacheProbe(make_batch(train, first_samples(train, batch)).input.to(device), bf16, std::move(path),
                 std::move(entry_shape)) {}

CacheProbe::CacheProbe(at::Tensor input, bool bf16, std::string path, std::vector<std::int64_t> entry_shape)
    : input_(std::move(input)),
      device_(input_.device()),
      bf16_(bf16),
      file_(std::make_unique<ActivationCache>(std::move(path), input_.size(0), std::move(entry_shape), true)) {
  for (std::int64_t i = 0; i < input_.size(0); ++i) rows_.push_back(i);
}

CacheProbe::~CacheProbe() {
  try {
    file_->remove();
  } catch (...) {  // a destructor does not throw; the launcher removes a job's leftover files
  }
}

MeasuredCache CacheProbe::measure(Model& model, int frozen, const std::function<at::Device(int)>& device_of) {
  c10::NoGradGuard no_grad;
  MeasuredCache m;
  // The probe runs before the freeze step's plan moves anything: the
  // newly frozen layers may still sit on later stages' devices. Each
  // device's run of them is timed there, the hand-over between devices off
  // the clock: their sum is the frozen forward that stage 0 runs once the
  // prefix is on its device (the GPUs of a node are alike).
  const SublayerRange prefix = ModelSpec::frozen_prefix(frozen);
  const Clock::time_point start = Clock::now();
  at::Tensor out = input_;
  {
    const compat::AutocastScope precision(device_.type(), bf16_);
    for (int first = prefix.first; first < prefix.last;) {
      const at::Device dev = device_of(first);
      int last = first + 1;
      while (last < prefix.last && device_of(last) == dev) ++last;
      const at::Tensor in = out.to(dev);
      m.frozen_forward_s +=
          median_compute_seconds(dev, kCacheProbeRuns, [&] { out = model.forward({first, last}, in); });
      first = last;
    }
  }
  const Clock::time_point written = Clock::now();
  last_.forward_s = seconds(start, written);
  file_->write(rows_, out, frozen);
  const Clock::time_point read = Clock::now();
  last_.write_s = seconds(written, read);
  // Timed as the frozen forward is: a stage worker copies the rows on the
  // host while the device runs earlier work, so the read costs the device
  // its copy there, or the host's copy where that is slower.
  m.read_s = median_compute_seconds(device_, kCacheProbeRuns, [&] { (void)file_->read(rows_, frozen, device_); });
  last_.read_s = seconds(read, Clock::now());
  return m;
}

}  // namespace ep::exec
