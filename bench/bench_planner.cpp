// Times whole-run plan generation for the paper's configs and schedule
// building for K=8, M=48. Prints medians over repeated runs.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include "planner/cost_model.hpp"
#include "planner/run_plan.hpp"
#include "planner/schedule.hpp"
#include "planner/stats.hpp"

namespace {

double median_ms(int reps, const std::function<void()>& f) {
  std::vector<double> ms;
  for (int i = 0; i < reps; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    f();
    ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  }
  return ep::median(ms);
}

}  // namespace

int main() {
  const int reps = 21;
  std::printf("%-40s %12s\n", "what", "median (ms)");
  for (const char* name : {"vit_imagenet", "vit_cifar100", "bert_large_squad", "bert_base_sst2"}) {
    const ep::Config c = ep::load_config(std::string(EP_SOURCE_DIR) + "/configs/paper/" + name + ".toml");
    const ep::AnalyticCostModel cost(c.cluster, c.training);
    const double ms = median_ms(reps, [&] { (void)ep::plan_run(c, cost); });
    std::printf("%-40s %12.3f\n", (std::string("plan_run ") + name).c_str(), ms);
  }
  for (auto kind : {ep::ScheduleKind::GPipe, ep::ScheduleKind::OneFOneB, ep::ScheduleKind::LoopingBreadthFirst,
                    ep::ScheduleKind::LoopingDepthFirst}) {
    ep::ScheduleOptions o;
    o.kind = kind;
    o.K = 8;
    o.M = 48;
    o.v = kind == ep::ScheduleKind::LoopingBreadthFirst || kind == ep::ScheduleKind::LoopingDepthFirst ? 2 : 1;
    o.buckets_per_stage.assign(o.K * o.v, 4);
    o.optimizer_step = true;
    const double build = median_ms(reps, [&] { (void)ep::build_schedule(o); });
    const ep::Schedule s = ep::build_schedule(o);
    const double check = median_ms(reps, [&] { ep::check_schedule(s); });
    const double sim = median_ms(reps, [&] { (void)ep::simulate(s, ep::unit_cost(1, 2, o.v)); });
    std::printf("%-40s %12.3f\n", ("build_schedule " + ep::to_string(kind) + " K=8 M=48").c_str(), build);
    std::printf("%-40s %12.3f\n", ("check_schedule " + ep::to_string(kind) + " K=8 M=48").c_str(), check);
    std::printf("%-40s %12.3f\n", ("simulate " + ep::to_string(kind) + " K=8 M=48").c_str(), sim);
  }
  return 0;
}
