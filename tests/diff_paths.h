// DiffPath: the two ways `tally diff` and `tally repair` run (tools/tally.cc)
// — on node A, which diffs against B itself (Admin.RunDiff), and from the
// tool, which asks both nodes (--third-party) — so that the multi-process
// diff and repair tests run through both, unchanged:
//
//   class TwoNodes : public ::testing::TestWithParam<DiffPath> { ... };
//   RunDiffCommand(GetParam(), {"diff", a, b, "--json"});
//   INSTANTIATE_TEST_SUITE_P(BothPaths, TwoNodes, kBothDiffPaths,
//                            DiffPathName);
//
// On the node path a fallback to the tool (A could not reach B, or has no
// RunDiff) is a test failure: the test would not be testing that path.
#ifndef TALLY_TESTS_DIFF_PATHS_H_
#define TALLY_TESTS_DIFF_PATHS_H_

#include <string>
#include <vector>

#include "absl/strings/str_join.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "support/process.h"

namespace tally {
namespace testing {

enum class DiffPath { kOnNode, kThirdParty };

inline const auto kBothDiffPaths =
    ::testing::Values(DiffPath::kOnNode, DiffPath::kThirdParty);

inline std::string DiffPathName(const ::testing::TestParamInfo<DiffPath>& p) {
  return p.param == DiffPath::kOnNode ? "OnNode" : "ThirdParty";
}

// `args` (a tally command line) run through `path`.
inline std::vector<std::string> OnPath(DiffPath path,
                                       std::vector<std::string> args) {
  if (path == DiffPath::kThirdParty) args.push_back("--third-party");
  return args;
}

// RunTally on `path`; on kOnNode, also expects that the tool did not run
// the command itself (its fallback note says "ran it from here").
inline CommandResult RunDiffCommand(
    DiffPath path, const std::vector<std::string>& args,
    absl::Duration timeout = absl::Seconds(120)) {
  CommandResult r = RunTally(OnPath(path, args), timeout);
  if (path == DiffPath::kOnNode) {
    EXPECT_THAT(r.err, ::testing::Not(::testing::HasSubstr("from here")))
        << absl::StrJoin(args, " ");
  }
  return r;
}

}  // namespace testing
}  // namespace tally

#endif  // TALLY_TESTS_DIFF_PATHS_H_
