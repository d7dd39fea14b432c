#include "exec/train_outputs.hpp"

#include <charconv>
#include <cstdint>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <tuple>
#include <vector>

#include "exec/dist.hpp"
#include "exec/hf_weights.hpp"
#include "exec/torch_compat.hpp"
#include "planner/freeze.hpp"
#include "planner/hf_model.hpp"
#include "planner/input_file.hpp"
#include "planner/run_figures.hpp"
#include "traces/action_event.hpp"
#include "traces/atomic_file.hpp"
#include "traces/output_dir.hpp"
#include "traces/run_outputs.hpp"

namespace ep::exec {

TraceRecorder::TraceRecorder(const Config& c, const ProcessEnv& env, int cores) {
  device_prefix_ = c.device == DeviceKind::CUDA ? "gpu" : "cpu";
  rank_ = env.rank;
  trace_.source = "exec";
  trace_.config = c.source;
  trace_.mode = "train";
  trace_.metadata = describe(c);
  trace_.metadata["device"] = to_string(c.device);
  trace_.metadata["threads_per_worker"] =
      c.threads_per_worker > 0 ? std::to_string(c.threads_per_worker)
                                    : "cores/(K x pipelines per node), " + std::to_string(cores) + " cores";
  trace_.metadata["libtorch"] = TORCH_VERSION;
  trace_.metadata["processes"] = std::to_string(env.world_size);
  trace_.metadata["launcher"] = env.launcher;
  trace_.metadata["batch_policy"] = to_string(c.training.batch_policy);
}

void TraceRecorder::add(const IterationResult& r, const Plan& plan, int epoch, int iteration,
                        const ReplicaLayout::Replica& replica) {
  std::map<std::tuple<ActionKind, int, int>, std::int64_t> flows;  // (send kind, stage, mb) -> id
  std::vector<trace::Event> events;
  for (const ActionRecord& rec : r.records) {
    const Action& a = rec.action;
    const int device = replica.gpus.at(rec.device) - replica.node * plan.layout.gpus_per_node;  // in its node
    const int track =
        trace_.track({trace::TrackKind::Gpu, replica.node, device, device_prefix_ + std::to_string(device), 0});
    trace::Event e = trace::action_event(track, a, rec.start_s, rec.end_s,
                                         {.replica = replica.rank, .plan_id = plan.id, .iteration = iteration, .epoch = epoch});
    if (a.kind == ActionKind::SendAct) e.flow_out = flows[{ActionKind::SendAct, a.stage + 1, a.microbatch}] = next_flow_++;
    if (a.kind == ActionKind::SendGrad) e.flow_out = flows[{ActionKind::SendGrad, a.stage - 1, a.microbatch}] = next_flow_++;
    events.push_back(e);
  }
  for (std::size_t i = 0; i < r.records.size(); ++i) {
    const Action& a = r.records[i].action;
    const ActionKind send = a.kind == ActionKind::RecvAct ? ActionKind::SendAct : ActionKind::SendGrad;
    if (a.kind == ActionKind::RecvAct || a.kind == ActionKind::RecvGrad) {
      const auto it = flows.find({send, a.stage, a.microbatch});
      if (it != flows.end()) events[i].flow_in = it->second;
    }
  }
  const std::size_t first = trace_.events.size();
  trace_.events.insert(trace_.events.end(), events.begin(), events.end());
  trace::separate_overlaps(trace_, first);
}

void TraceRecorder::transition(double start_s, double end_s, int epoch, const std::string& what) {
  trace::Event e;
  e.track = trace_.track({trace::TrackKind::Gpu, 0, 0, device_prefix_ + "0", 0});
  e.name = what;
  e.category = "transition";
  e.start_s = start_s;
  e.end_s = end_s;
  e.epoch = epoch;
  const std::size_t first = trace_.events.size();
  trace_.events.push_back(e);
  trace::separate_overlaps(trace_, first);
}

void TraceRecorder::gather(Dist& dist, double barrier_s) {
  constexpr int kTag = 1 << 30;  // above every onboarding tag (plan id × 4096 + rank)
  constexpr const char* kBarrierKey = "end_of_training_barrier_s";
  if (rank_ != 0) {
    trace::Trace mine = trace_;
    // Its iterations only: rank 0's transitions and start stand for all.
    std::erase_if(mine.events, [](const trace::Event& e) { return e.category == "transition"; });
    char buf[32];
    mine.metadata = {{kBarrierKey, std::string(buf, std::to_chars(buf, buf + sizeof buf, barrier_s).ptr)}};
    std::ostringstream out;
    trace::write_chrome_trace(mine, out, "rank " + std::to_string(rank_) + "'s trace");
    const std::string text = out.str();
    dist.send_bytes({reinterpret_cast<const std::uint8_t*>(text.data()), text.size()}, 0, kTag, "trace");
    return;
  }
  std::string traced = trace_.events.empty() ? "" : "0";  // ranks whose spans the trace holds
  for (int r = 1; r < dist.world_size(); ++r) {
    const std::vector<std::uint8_t> bytes = dist.recv_bytes(r, kTag, "trace");
    const std::string name = "rank " + std::to_string(r) + "'s trace";
    std::istringstream in(std::string(bytes.begin(), bytes.end()));
    const trace::Trace theirs = trace::read_chrome_trace(in, name);
    const auto it = theirs.metadata.find(kBarrierKey);
    double their_barrier_s = 0;
    if (it == theirs.metadata.end() ||
        std::from_chars(it->second.data(), it->second.data() + it->second.size(), their_barrier_s).ec != std::errc())
      throw Error(name + ": metadata '" + kBarrierKey + "': expected a number");
    if (theirs.events.empty()) continue;
    trace::append(trace_, theirs, barrier_s - their_barrier_s);
    traced += (traced.empty() ? "" : ",") + std::to_string(r);
  }
  trace_.metadata["traced_ranks"] = (traced.find(',') == std::string::npos ? "rank " : "ranks ") + traced;
}

void write_run_outputs(const std::string& out_dir, const Config& c, const TraceRecorder& timeline,
                       const TrainResult& result, const RunPlanner& planner, std::int64_t train_samples,
                       const Model& model, const std::vector<std::string>& class_names) {
  const std::filesystem::path out(out_dir);
  const auto file = [&](const char* name) { return (out / name).string(); };
  AtomicFile trace(file("trace.json")), summary_file(file("summary.json")), grad_norms(file("grad_norms.csv")),
      plan(file("plan.json")), transitions(file("transitions.json")), iterations(file("iterations.csv")),
      weights(file("weights.bin"));
  write_chrome_trace(timeline.trace(), trace.stream(), trace.path());
  trace::RunSummary summary;
  summary.source = "exec";
  summary.config = c.source;
  summary.metadata = timeline.trace().metadata;
  trace::ModeSummary mode;
  mode.mode = "train";
  mode.start_s = result.start_s;
  mode.total_s = result.total_s;
  mode.samples_per_s = static_cast<double>(train_samples) * c.training.epochs / std::max(1e-9, result.total_s);
  if (result.final_accuracy >= 0) mode.final_accuracy = result.final_accuracy;
  const RunFigures figures = run_figures(planner.context().spec, planner.run().plans);
  mode.fits_memory = figures.fits_memory;
  mode.peak_memory_bytes = figures.peak_memory_bytes;
  mode.updates = figures.updates;
  mode.global_batch_min = figures.global_batch_min;
  mode.global_batch_max = figures.global_batch_max;
  mode.utilisation = utilisation(figures.flops, mode.total_s, planner.run().peak_flops_per_s);
  for (const auto& e : result.epochs) mode.epoch_s.push_back(e.epoch_s);
  summary.modes.push_back(mode);
  write_summary_json(summary, summary_file.stream(), summary_file.path());
  grad_norms.write_with([&](const std::string& temp) { write_grad_norm_trace(GradNormTrace{result.grad_norms}, temp); });
  // The planner writes its plans (`elasticpipe plan --json` prints the same bytes).
  plan.stream() << to_json(planner.run(), planner.context().spec).dump(2) << '\n';
  trace::write_transitions_json(result.transitions, transitions.stream(), transitions.path());
  trace::write_iterations_csv(result.iteration_losses, iterations.stream(), iterations.path());
  weights.write_with([&](const std::string& temp) { model.save(temp); });
  if (c.model.checkpoint.empty())
    return commit_together({&trace, &summary_file, &grad_norms, &plan, &transitions, &iterations, &weights});
  // The checkpoint's config.json with this model's labels: the data's class
  // names, else the checkpoint's own when there are as many.
  const HfConfig source = read_hf_config(c.model.checkpoint);
  const std::vector<std::string>& labels =
      !class_names.empty() ? class_names
      : static_cast<int>(source.labels.size()) == c.model.num_labels ? source.labels : std::vector<std::string>{};
  create_output_dir((out / "hf").string());
  AtomicFile hf_config((out / "hf" / "config.json").string()), hf_weights((out / "hf" / "model.safetensors").string());
  hf_config.stream() << hf_config_json(c.model, source.text, labels);
  write_hf_weights(model, hf_weights.stream(), hf_weights.path());
  commit_together({&trace, &summary_file, &grad_norms, &plan, &transitions, &iterations, &weights, &hf_config, &hf_weights});
  // The checkpoint's tokenizer and image-processor files as they are, so
  // hf/ opens in transformers with them (AutoTokenizer, AutoImageProcessor).
  static constexpr InputFormat kSideFile{"checkpoint file", std::int64_t{256} << 20,
                                         "a tokenizer's vocabulary or a processor's settings"};
  for (const char* name : {"tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "added_tokens.json",
                           "vocab.txt", "vocab.json", "merges.txt", "spiece.model", "sentencepiece.bpe.model",
                           "preprocessor_config.json"}) {
    const std::filesystem::path src = std::filesystem::path(c.model.checkpoint) / name;
    std::error_code ec;
    if (std::filesystem::exists(src, ec))
      write_file_atomically((out / "hf" / name).string(), read_input_file(src.string(), kSideFile));
  }
}

}  // namespace ep::exec
