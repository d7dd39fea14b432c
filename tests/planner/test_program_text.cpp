// program_text, which the chunk memo's key is a digest of, writes every
// field of a program: each field changed in turn gives a text of its own,
// so a timing kept for one freeze step, partition or layout never answers
// another's.
#include <catch2/catch.hpp>

#include <functional>
#include <map>
#include <set>
#include <string>
#include <utility>

#include "planner/cost_model.hpp"
#include "planner/autopipe.hpp"
#include "planner/program_text.hpp"
#include "tests/planner/support.hpp"

using namespace ep;

TEST_CASE("program text: every field of a program changes it", "[planner][memo]") {
  const Config c = test::paper_config("vit_imagenet", {"planner.K=2"});
  const AnalyticCostModel cost(c.cluster, c.training);
  const PlanContext ctx(c, cost, 2);
  IterationSetup setup;
  setup.partition = plan_partition(ctx, 4, 2, true);
  setup.K = 2;
  setup.M = 4;
  setup.replicas = 2;
  setup.batch = c.training.batch_size;
  const IterationProgram base = lower_iteration(ctx, setup);
  REQUIRE(base.layout.replica.size() == 2);

  using Edit = std::function<void(IterationProgram&)>;
  const std::map<std::string, Edit> edits = {
      {"partition.frozen_layers", [](IterationProgram& p) { ++p.setup.partition.frozen_layers; }},
      {"partition.frozen_end", [](IterationProgram& p) { ++p.setup.partition.frozen_end; }},
      {"partition.bounds", [](IterationProgram& p) { ++p.setup.partition.bounds.at(1); }},
      {"K", [](IterationProgram& p) { ++p.setup.K; }},
      {"v", [](IterationProgram& p) { ++p.setup.v; }},
      {"M", [](IterationProgram& p) { ++p.setup.M; }},
      {"replicas", [](IterationProgram& p) { ++p.setup.replicas; }},
      {"replicas_span_nodes", [](IterationProgram& p) { p.setup.replicas_span_nodes ^= true; }},
      {"cache_on", [](IterationProgram& p) { p.setup.cache_on ^= true; }},
      {"cache_tier", [](IterationProgram& p) { p.setup.cache_tier = CacheTier::Disk; }},
      {"cache_valid_layers", [](IterationProgram& p) { p.setup.cache_valid_layers = 2; }},
      {"batch", [](IterationProgram& p) { ++p.setup.batch; }},
      {"cache_writes_behind", [](IterationProgram& p) { p.setup.cache_writes_behind ^= true; }},
      {"cache_reads_ahead", [](IterationProgram& p) { p.setup.cache_reads_ahead ^= true; }},
      {"grad_norms", [](IterationProgram& p) { p.setup.grad_norms ^= true; }},
      {"schedule.kind", [](IterationProgram& p) { p.schedule.kind = ScheduleKind::OneFOneB; }},
      {"schedule.K", [](IterationProgram& p) { ++p.schedule.K; }},
      {"schedule.M", [](IterationProgram& p) { ++p.schedule.M; }},
      {"schedule.v", [](IterationProgram& p) { ++p.schedule.v; }},
      {"schedule order", [](IterationProgram& p) { std::swap(p.schedule.devices.at(0).at(0), p.schedule.devices.at(0).at(1)); }},
      {"an action's peer", [](IterationProgram& p) {
         for (Action& a : p.schedule.devices.at(0))
           if (is_transfer(a.kind)) {
             a.peer_device += 1;
             return;
           }
       }},
      {"micro_batches", [](IterationProgram& p) { ++p.micro_batches.at(0); }},
      {"recomputed_microbatches", [](IterationProgram& p) { ++p.recomputed_microbatches; }},
      {"layout.K", [](IterationProgram& p) { ++p.layout.K; }},
      {"layout.nodes", [](IterationProgram& p) { ++p.layout.nodes; }},
      {"layout.gpus_per_node", [](IterationProgram& p) { ++p.layout.gpus_per_node; }},
      {"layout.pipelines_per_node", [](IterationProgram& p) { ++p.layout.pipelines_per_node; }},
      {"layout.replicas", [](IterationProgram& p) { ++p.layout.replicas; }},
      {"layout.active_ranks", [](IterationProgram& p) { ++p.layout.active_ranks.at(1); }},
      {"replica.rank", [](IterationProgram& p) { ++p.layout.replica.at(1).rank; }},
      {"replica.node", [](IterationProgram& p) { ++p.layout.replica.at(1).node; }},
      {"replica.local_rank", [](IterationProgram& p) { ++p.layout.replica.at(1).local_rank; }},
      {"replica.gpus", [](IterationProgram& p) { ++p.layout.replica.at(1).gpus.at(0); }},
      {"threads", [](IterationProgram& p) { ++p.threads.worker; }},
  };
  std::set<std::string> texts{program_text(base)};
  CHECK(program_text(base) == program_text(lower_iteration(ctx, setup)));
  for (const auto& [field, edit] : edits) {
    CAPTURE(field);
    IterationProgram p = base;
    edit(p);
    REQUIRE(!(p == base));
    CHECK(texts.insert(program_text(p)).second);
  }
  // The chunk search's candidates at two freeze steps: timed apart.
  IterationSetup deeper = setup;
  deeper.partition = plan_partition(ctx, 6, 2, true);
  CHECK(program_text(timing_program(ctx, lower_iteration(ctx, deeper))) !=
        program_text(timing_program(ctx, base)));
}
