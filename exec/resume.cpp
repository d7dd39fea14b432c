// Checkpoints of a training and the resume from one: weights, optimizer
// state and the run state (traces/run_outputs.hpp), with the config's
// fingerprint that a resuming job must match.
#include <ATen/ATen.h>

#include <cstdio>
#include <filesystem>

#include "exec/checkpoint.hpp"
#include "exec/state.hpp"
#include "exec/trainer_impl.hpp"

namespace ep::exec {

using nlohmann::json;

namespace {

// What a checkpoint must agree on with the config that resumes it: the
// model, the data and the training's fixed hyper-parameters. (Cluster and
// planner keys may differ: the resumed job replans with the recorded frozen
// counts, possibly with another replica count.)
json fingerprint(const Config& c) {
  const auto& m = c.model;
  json f = {{"model.family", to_string(m.family)},
          {"model.num_hidden_layers", m.num_hidden_layers},
          {"model.hidden_size", m.hidden_size},
          {"model.num_attention_heads", m.num_attention_heads},
          {"model.intermediate_size", m.intermediate_size},
          {"model.image_size", m.image_size},
          {"model.patch_size", m.patch_size},
          {"model.num_channels", m.num_channels},
          {"model.seq_length", m.seq_length},
          {"model.vocab_size", m.vocab_size},
          {"model.num_labels", m.num_labels},
          {"data.name", c.data.name},
          {"data.num_train_samples", c.data.num_train_samples},
          {"data.classes", c.data.classes},
          {"training.epochs", c.training.epochs},
          {"training.batch_size", c.training.batch_size},
          {"training.batch_policy", to_string(c.training.batch_policy)},
          {"training.optimizer", to_string(c.training.optimizer)},
          {"training.seed", c.training.seed},
          {"planner.freeze_interval_epochs", c.planner.freeze_interval_epochs}};
  // Recorded where they may differ from the seeded models' (whose
  // checkpoints, written before these keys, stay resumable): a
  // checkpoint's architecture and a user's data set.
  if (!m.checkpoint.empty()) {
    f["model.hidden_act"] = to_string(m.hidden_act);
    f["model.layer_norm_eps"] = m.layer_norm_eps;
  }
  if (c.data.name == "prepared") f["data.path"] = c.data.path;
  return f;
}

void check_fingerprint(const json& saved, const Config& c, const std::string& path) {
  const json now = fingerprint(c);
  for (const auto& [key, value] : now.items()) {
    if (!saved.contains(key))
      throw Error("checkpoint " + path + " does not record " + key + "; it was not written by this version");
    if (saved.at(key) != value)
      throw Error("checkpoint " + path + " was written with " + key + " = " + saved.at(key).dump() + ", " +
                  c.source + " has " + value.dump() + ": refusing to resume a different run");
  }
}

}  // namespace

// `running_s`: the open epoch's time since this process started it (a
// resumed run adds it to what the checkpoint holds).
void Trainer::checkpoint(double running_s) {
  if (!rank0() || opt_.out_dir.empty()) return;
  check_finite_weights();  // a checkpoint is only ever of a state worth resuming
  trace::RunState state = p_;
  state.epoch_elapsed_s += running_s;
  const json meta = {{"fingerprint", fingerprint(c_)},
                     {"progress", json::parse(trace::run_state_json(state))},
                     {"replicas", plan_->layout.replicas},
                     {"processes", env_.world_size}};
  write_checkpoint((std::filesystem::path(opt_.out_dir) / "checkpoints").string(),
                   static_cast<std::int64_t>(p_.iteration_losses.size()), pack_state(model_, optimizer_, meta),
                   x_.checkpoint_keep);
}

void Trainer::resume() {
  const LoadedCheckpoint ck = read_checkpoint(opt_.resume, max_state_bytes(model_));
  const json meta = peek_meta(ck.state, ck.path);
  if (!meta.contains("fingerprint") || !meta.contains("progress"))
    throw Error("checkpoint " + ck.path + " has no training progress: not an elasticpipe train checkpoint");
  check_fingerprint(meta.at("fingerprint"), c_, ck.path);
  (void)unpack_state(ck.state, model_, optimizer_, ck.path);
  p_ = trace::parse_run_state(meta.at("progress").dump(), "checkpoint " + ck.path + ": progress");
  // The same plans as the interrupted run: its frozen counts, chunk
  // timings and cache measurements, replayed through the RunPlanner. A
  // resume of another layout may time a K the interrupted run never did:
  // rank 0 replays first and hands every timing it then holds to the others.
  const auto replay = [&] { replay_steps(planner_, p_.steps); };
  if (rank0()) {
    replay();
    if (dist_) dist_->control("resume/chunk_times", chunk_times_json());
  } else {
    if (dist_) take_chunk_times(dist_->control("resume/chunk_times"));
    replay();
  }
  const Plan& plan = planner_.run().plans.back();  // the run loop enters it afresh
  resumed_ = true;
  char buf[200];
  std::snprintf(buf, sizeof buf, "resumed from %s: epoch %d, iteration %lld, frozen %d, %d replicas (saved with %d)",
                ck.path.c_str(), p_.epoch + 1, static_cast<long long>(p_.iteration), plan.frozen_layers,
                plan.layout.replicas, meta.value("replicas", 0));
  log(buf);
}

}  // namespace ep::exec
