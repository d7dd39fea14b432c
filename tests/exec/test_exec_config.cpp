// [exec], read by the executor itself (exec/exec_config.hpp), without
// LibTorch: its keys, an unknown key refused with file:line, the planner's
// two facts of the section, and the settings a job's processes compare.
#include <catch2/catch.hpp>

#include <string>

#include "exec/exec_config.hpp"
#include "tests/planner/support.hpp"

using namespace ep;

TEST_CASE("[exec] is read by the executor, the planner reading only device and threads", "[exec][config]") {
  const Config c = load_config(test::repo_path("configs/fashion_mnist_vit_tiny.toml"),
                               {"exec.device=\"cuda\"", "exec.threads_per_worker=3", "exec.trace_iterations=5",
                                "exec.chunk_memo=\"memo.json\""});
  CHECK(c.device == DeviceKind::CUDA);
  CHECK(c.threads_per_worker == 3);
  const exec::ExecConfig x = exec::read_exec_config(c);
  CHECK(x.trace_iterations == 5);
  CHECK(x.chunk_memo == "memo.json");  // a --set path is taken as given
  CHECK(x.checkpoint_keep == 2);        // the default

  // An unknown key: the nearest known one, the planner's included.
  std::string msg = test::error_of([] { (void)exec::read_exec_config(test::tiny_bert({"exec.trace_iteratons=1"})); });
  CHECK(msg.find("key 'exec.trace_iteratons'") != std::string::npos);
  CHECK(msg.find("did you mean exec.trace_iterations?") != std::string::npos);
  msg = test::error_of([] { (void)exec::read_exec_config(test::tiny_bert({"exec.devices=\"cpu\""})); });
  CHECK(msg.find("did you mean exec.device?") != std::string::npos);
  msg = test::error_of([] { (void)exec::read_exec_config(test::tiny_bert({"exec.checkpoint_keep=0"})); });
  CHECK(msg.rfind("--set exec.checkpoint_keep: key 'exec.checkpoint_keep': expected an integer >= 1", 0) == 0);
}

TEST_CASE("a job's processes compare settings without any path, [exec]'s included", "[exec][config]") {
  const auto settings = [](const Overrides& o) { return exec::job_settings(test::tiny_bert(o)); };
  const std::string base = settings({"exec.cache_memory_dir=\"/a\"", "exec.chunk_memo=\"/m1\""});
  CHECK(settings({"exec.cache_memory_dir=\"/b\"", "exec.chunk_memo=\"/m2\""}) == base);
  CHECK(base.find("/a") == std::string::npos);
  CHECK(settings({"exec.cache_memory_dir=\"/a\"", "exec.chunk_memo=\"/m1\"", "exec.trace_iterations=7"}) != base);
  CHECK(settings({"exec.cache_memory_dir=\"/a\"", "exec.chunk_memo=\"/m1\"", "exec.device=\"cuda\""}) != base);
}
