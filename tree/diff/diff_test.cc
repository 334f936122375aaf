#include "tree/diff/diff.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <ostream>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tree/memory_tree_view.h"

namespace tally {
namespace tree {
namespace {

using Rows = std::map<std::string, RowEntry>;

RowEntry MakeRow(const std::string& key, const std::string& value,
                 uint64_t millis, const std::string& origin, bool deleted) {
  RowEntry row;
  row.key = key;
  row.token = TokenOf(key);
  row.version = Version{HlcTimestamp::FromParts(millis, 0), origin};
  row.deleted = deleted;
  row.digest = RowDigest("ks", key, row.version, deleted, value);
  return row;
}

std::vector<RowEntry> ToVector(const Rows& rows) {
  std::vector<RowEntry> out;
  for (const auto& [key, row] : rows) out.push_back(row);
  return out;
}

// The keys whose (version, deleted, value) differ, computed the slow way.
std::set<std::string> ExpectedDifferences(const Rows& a, const Rows& b) {
  std::set<std::string> out;
  for (const auto& [key, row] : a) {
    auto it = b.find(key);
    if (it == b.end() || it->second.digest != row.digest) out.insert(key);
  }
  for (const auto& [key, row] : b) {
    if (a.find(key) == a.end()) out.insert(key);
  }
  return out;
}

struct DiffResult {
  std::set<std::string> keys;
  DiffStats stats;
};

DiffResult RunDiff(const Rows& a, const Rows& b, int depth_a, int depth_b,
                   const DiffOptions& options = DiffOptions{}) {
  auto view_a = MemoryTreeView::Create(depth_a, ToVector(a));
  auto view_b = MemoryTreeView::Create(depth_b, ToVector(b));
  EXPECT_TRUE(view_a.ok() && view_b.ok());
  DiffResult result;
  absl::Status s = DiffViews(
      **view_a, **view_b, options,
      [&](const RowEntry* in_a, const RowEntry* in_b) {
        const std::string& key = in_a != nullptr ? in_a->key : in_b->key;
        if (in_a != nullptr && in_b != nullptr) {
          EXPECT_EQ(in_a->key, in_b->key);
        }
        // Each side reported must be that side's row.
        if (in_a != nullptr) {
          EXPECT_EQ(a.at(key).digest, in_a->digest);
        }
        if (in_b != nullptr) {
          EXPECT_EQ(b.at(key).digest, in_b->digest);
        }
        EXPECT_EQ(in_a == nullptr, a.count(key) == 0);
        EXPECT_EQ(in_b == nullptr, b.count(key) == 0);
        EXPECT_TRUE(result.keys.insert(key).second)
            << "reported twice: " << key;
        return absl::OkStatus();
      },
      &result.stats);
  EXPECT_TRUE(s.ok()) << s;
  return result;
}

// Makes `d` differences of every kind between two copies of `n` rows.
void MakeReplicas(uint64_t seed, int n, int d, Rows* a, Rows* b) {
  std::mt19937_64 rng(seed);
  for (int i = 0; i < n; ++i) {
    const std::string key = absl::StrCat("key-", i, "-", rng() % 1000);
    // One draw a statement: the order of a call's arguments is the
    // compiler's (GCC draws these two right to left, Clang left to right),
    // and the pinned seeds below need the same rows from both.
    const uint64_t wall = 1000 + rng() % 1000;
    const std::string value = absl::StrCat("v", rng());
    (*a)[key] = MakeRow(key, value, wall, "origin-a", false);
  }
  *b = *a;
  std::vector<std::string> keys;
  for (const auto& [key, row] : *a) keys.push_back(key);
  std::shuffle(keys.begin(), keys.end(), rng);
  for (int i = 0; i < d; ++i) {
    const uint64_t t = 5000 + i;
    const std::string key =
        i < static_cast<int>(keys.size()) ? keys[i] : absl::StrCat("new-", i);
    switch (i % 8) {
      case 0:  // updated on a
        (*a)[key] = MakeRow(key, "new-a", t, "origin-a", false);
        break;
      case 1:  // updated on b
        (*b)[key] = MakeRow(key, "new-b", t, "origin-b", false);
        break;
      case 2:  // deleted on a (tombstone)
        (*a)[key] = MakeRow(key, "", t, "origin-a", true);
        break;
      case 3:  // deleted on b
        (*b)[key] = MakeRow(key, "", t, "origin-b", true);
        break;
      case 4:  // present on a only
        b->erase(key);
        break;
      case 5:  // present on b only
        a->erase(key);
        break;
      case 6:  // changed on both sides
        (*a)[key] = MakeRow(key, "both-a", t, "origin-a", false);
        (*b)[key] = MakeRow(key, "both-b", t, "origin-b", false);
        break;
      case 7:  // same value, different version only
        (*b)[key] = MakeRow(key, "v", t, "origin-b", false);
        (*a)[key] = MakeRow(key, "v", t + 1, "origin-b", false);
        break;
    }
  }
}

// The root expansion sent with the summaries, from both views.
uint64_t HandshakeDigests(const DiffOptions& o) {
  return 2 * (uint64_t{1} << o.handshake_levels);
}

// Digests exchanged may grow with d * log N, never with N: every difference
// costs a few expansions on its way down, each no wider than listing the
// rows it avoids, and the handshake is fixed. Exchanging every leaf of a
// depth-16 tree (2^17 digests) exceeds it for every d below ~200 at
// N = 100000.
uint64_t DigestBound(uint64_t n, uint64_t d, const DiffOptions& o) {
  const double log_n = std::log2(static_cast<double>(n) + 2);
  return HandshakeDigests(o) +
         2 * (static_cast<uint64_t>(16.0 * static_cast<double>(d) * log_n));
}

// The ways the diff may ask its views.
struct Mode {
  const char* name;
  bool seeded;
  DiffOptions::OwnView own;
};
constexpr Mode kModes[] = {
    {"plain", false, DiffOptions::OwnView::kNeither},
    {"seeded", true, DiffOptions::OwnView::kNeither},
    {"session-a", true, DiffOptions::OwnView::kA},
    {"session-b", true, DiffOptions::OwnView::kB},
};

DiffOptions OptionsFor(const Mode& mode, uint64_t seed) {
  DiffOptions options;
  options.seeded = mode.seeded;
  options.own_view = mode.own;
  options.seed = seed | 1;
  return options;
}

// The seed a randomized test draws its data (and the diff its fingerprint
// seed) from: TALLY_TEST_SEED=N (or TALLY_DIFF_SEED=N, its older name)
// replays a run whose seed a failure printed; otherwise a fresh one.
uint64_t TestSeed() {
  for (const char* name : {"TALLY_TEST_SEED", "TALLY_DIFF_SEED"}) {
    if (const char* replay = std::getenv(name); replay != nullptr) {
      return std::strtoull(replay, nullptr, 10);
    }
  }
  return std::random_device{}();
}

struct Case {
  int n;
  int d;
  int depth_a;
  int depth_b;
};

class DiffPropertyTest : public ::testing::TestWithParam<Case> {};

TEST_P(DiffPropertyTest, FindsExactlyTheDifferingKeys) {
  const Case c = GetParam();
  // TALLY_TEST_SEED replays a run (its seed is printed below).
  const uint64_t seed = TestSeed();
  std::printf("seed=%llu n=%d d=%d depths=%d/%d\n",
              static_cast<unsigned long long>(seed), c.n, c.d, c.depth_a,
              c.depth_b);
  Rows a, b;
  MakeReplicas(seed, c.n, c.d, &a, &b);
  const std::set<std::string> expected = ExpectedDifferences(a, b);
  // Every way of asking the views: as a node from before seeds, as a
  // third party, and as a session of either side.
  for (const Mode mode : kModes) {
    const DiffOptions options = OptionsFor(mode, seed);
    const DiffResult result = RunDiff(a, b, c.depth_a, c.depth_b, options);
    EXPECT_EQ(result.keys, expected) << "seed " << seed << " " << mode.name;
    EXPECT_EQ(result.stats.differences, expected.size());
    std::printf("  %s: %s\n", mode.name, result.stats.DebugString().c_str());
    if (expected.empty()) {
      // Equal views cost the handshake and nothing more.
      EXPECT_EQ(result.stats.rounds, 1u);
      EXPECT_EQ(result.stats.digests, HandshakeDigests(options));
    }
    // Each pass within the bound: a pass that misses a difference under
    // short fingerprints (~1% of seeded diffs, tree/diff/diff.h "Fingerprints")
    // is followed by one more. Seed 3830699722 (n = 100,000, d = 1) takes
    // two, and failed the bound of one pass.
    EXPECT_LE(result.stats.passes, static_cast<uint64_t>(options.max_passes));
    EXPECT_LE(result.stats.digests,
              DigestBound(c.n, expected.size(), options) *
                  std::max<uint64_t>(result.stats.passes, 1))
        << "seed " << seed << " " << mode.name;
  }
}

INSTANTIATE_TEST_SUITE_P(
    EqualDepths, DiffPropertyTest,
    ::testing::Values(Case{0, 0, 16, 16}, Case{1000, 0, 10, 10},
                      Case{1000, 1, 10, 10}, Case{1000, 7, 10, 10},
                      Case{1000, 1000, 10, 10}, Case{100000, 0, 16, 16},
                      Case{100000, 1, 16, 16}, Case{100000, 8, 16, 16},
                      Case{100000, 150, 16, 16}, Case{100000, 5000, 16, 16},
                      Case{100000, 100000, 16, 16},
                      Case{20000, 20000, 12, 12}));

INSTANTIATE_TEST_SUITE_P(UnequalDepths, DiffPropertyTest,
                         ::testing::Values(Case{1000, 5, 4, 12},
                                           Case{100000, 1, 20, 8},
                                           Case{100000, 150, 10, 16},
                                           Case{100000, 3000, 16, 1},
                                           Case{5000, 5000, 1, 24}));

TEST(Diff, OneSideEmptyStreamsTheOtherWithoutDescending) {
  Rows a, b;
  MakeReplicas(7, 5000, 0, &a, &b);
  b.clear();
  const DiffOptions options;
  const DiffResult result = RunDiff(a, b, 16, 16, options);
  EXPECT_EQ(result.keys.size(), a.size());
  // The handshake's expansion travels before the counts are known; nothing
  // is expanded after it.
  EXPECT_EQ(result.stats.digests, HandshakeDigests(options));
  EXPECT_EQ(result.stats.rounds, 2u);
  const DiffResult reverse = RunDiff(b, a, 8, 16, options);
  EXPECT_EQ(reverse.keys.size(), a.size());
  EXPECT_EQ(reverse.stats.digests, HandshakeDigests(options));
}

TEST(Diff, BothEmptyIsOneRound) {
  const DiffResult result = RunDiff(Rows{}, Rows{}, 16, 4);
  EXPECT_TRUE(result.keys.empty());
  EXPECT_EQ(result.stats.rounds, 1u);
}

TEST(Diff, DenseDifferencesFetchWholeLevels) {
  // Every row differs: the descent must switch to whole levels rather than
  // name tens of thousands of nodes, so requests stay small.
  Rows a, b;
  MakeReplicas(11, 50000, 50000, &a, &b);
  const DiffResult result = RunDiff(a, b, 16, 16);
  EXPECT_EQ(result.keys, ExpectedDifferences(a, b));
  EXPECT_LT(result.stats.bytes_sent, result.stats.bytes_received / 4);
}

TEST(Diff, SparseDifferencesCostFewRounds) {
  Rows a, b;
  MakeReplicas(13, 100000, 100, &a, &b);
  const DiffResult result = RunDiff(a, b, 16, 16);
  EXPECT_EQ(result.keys.size(), ExpectedDifferences(a, b).size());
  EXPECT_LE(result.stats.rounds, 4u) << result.stats.DebugString();
}

// The planner against the cost model (EstimateDiffCost): the keys found
// are exactly the keys that differ, the rounds stay within the caps the
// model is tuned for (4 up to 1M rows), and the bytes stay near what the
// model expects for the rounds taken. The model is an idealisation (every
// node of a level alike, d known from the start), so the diff may cost
// more; it cannot cost much less, or the byte counts are wrong.
//
// Rounds and bytes are those of one pass. A pass whose short fingerprints
// falsely match a differing node hides the difference below it; the
// balance check catches it and a second pass under a new seed runs the
// whole descent again (docs/design/diff.md, "Short fingerprints": ~1% of seeded
// diffs by design, 0.5% at n = 100,000, d = 1,000 over 1,000 fingerprint
// seeds). These tests bounded the rounds and bytes of all passes together by
// one pass's model and so failed whenever that happened: seed 2042767170 with
// fingerprint seed d3c6ad90765aceca (n = 100,000, d = 1,000) matched two
// different level-13 nodes at 18 bits, found 999 keys in its first pass and
// took 8 rounds and 625,612 bytes in two, 4 rounds and ~312,800 bytes
// (0.98 of the model) each (Diff.ASecondPassCostsWhatTheFirstDid).
struct PlannerCase {
  int n;
  int d;
};

// Runs one planner check on replicas made from `seed`; the diff's first
// fingerprint seed is `diff_seed` (0: derived from `seed`, so that the
// printed seed replays the whole run). Returns the stats.
DiffStats CheckPlannerAgainstModel(const PlannerCase& c, uint64_t seed,
                                   uint64_t diff_seed,
                                   DiffOptions::OwnView own) {
  std::printf("seed=%llu n=%d d=%d\n", static_cast<unsigned long long>(seed),
              c.n, c.d);
  SCOPED_TRACE(absl::StrCat("replay with TALLY_TEST_SEED=", seed));
  Rows a, b;
  MakeReplicas(seed, c.n, c.d, &a, &b);
  const std::set<std::string> expected = ExpectedDifferences(a, b);
  DiffOptions options;
  options.own_view = own;
  options.seed = diff_seed != 0 ? diff_seed : seed | 1;
  const DiffResult result = RunDiff(a, b, 16, 16, options);
  std::printf("  %s\n", result.stats.DebugString().c_str());
  EXPECT_EQ(result.keys, expected);
  // The last pass accounts for the roots' difference, within max_passes.
  EXPECT_TRUE(result.stats.verified) << result.stats.DebugString();
  EXPECT_LE(result.stats.passes, static_cast<uint64_t>(options.max_passes));
  const uint64_t passes = std::max<uint64_t>(1, result.stats.passes);
  const uint64_t rounds = result.stats.rounds / passes;

  double entry_bytes = 0;
  for (const auto& [key, row] : a) entry_bytes += WireSize(row);
  entry_bytes /= static_cast<double>(a.size());
  DiffOptions same_rounds = options;
  same_rounds.max_rounds = static_cast<int>(rounds);
  same_rounds.budget_rounds = same_rounds.max_rounds;
  same_rounds.round_saving = 0;
  same_rounds.round_price_bytes = 0;
  const DiffCostEstimate model =
      EstimateDiffCost(c.n, expected.size(), entry_bytes, same_rounds);
  const double per_pass =
      static_cast<double>(result.stats.payload_bytes()) / passes;
  std::printf("  model %.0f bytes in %d rounds; measured/model %.2f a pass\n",
              model.bytes, model.rounds, per_pass / model.bytes);
  EXPECT_LE(rounds, 4u) << result.stats.DebugString();
  // A session's own view answers for free and lists only what differs:
  // it may come further below the model than a third party.
  const double floor = own == DiffOptions::OwnView::kNeither ? 0.8 : 0.7;
  EXPECT_GE(per_pass, floor * model.bytes) << result.stats.DebugString();
  EXPECT_LE(per_pass, 1.6 * model.bytes) << result.stats.DebugString();
  return result.stats;
}

class DiffPlannerTest : public ::testing::TestWithParam<PlannerCase> {};

TEST_P(DiffPlannerTest, RoundsAndBytesFollowTheCostModel) {
  CheckPlannerAgainstModel(GetParam(), TestSeed(), 0,
                           DiffOptions::OwnView::kNeither);
}

INSTANTIATE_TEST_SUITE_P(
    SeveralSizes, DiffPlannerTest,
    ::testing::Values(PlannerCase{20000, 10}, PlannerCase{20000, 200},
                      PlannerCase{100000, 30}, PlannerCase{100000, 1000},
                      PlannerCase{300000, 100}, PlannerCase{300000, 3000}));

TEST(Diff, ASecondPassCostsWhatTheFirstDid) {
  // The CI run above: its first pass misses one key behind a false match
  // of 18-bit fingerprints at level 13, and the second pass, under the next
  // seed, finds all 1,000 at the first pass's cost.
  const DiffStats stats = CheckPlannerAgainstModel(
      PlannerCase{100000, 1000}, 2042767170, 0xd3c6ad90765acecaull,
      DiffOptions::OwnView::kNeither);
  EXPECT_EQ(stats.passes, 2u);
  EXPECT_EQ(stats.rounds, 8u);
}

TEST(Diff, TinyDifferencesSpendBytesRatherThanRounds) {
  // One differing key: more rounds would save a few kilobytes, less than a
  // round trip is worth (DiffOptions::round_price_bytes).
  Rows a, b;
  MakeReplicas(19, 100000, 1, &a, &b);
  const DiffResult one = RunDiff(a, b, 16, 16);
  EXPECT_EQ(one.keys, ExpectedDifferences(a, b));
  EXPECT_LE(one.stats.rounds, 3u) << one.stats.DebugString();
  // Without a price per round the planner takes the rounds the model
  // finds worth taking.
  DiffOptions free_rounds;
  free_rounds.round_price_bytes = 0;
  free_rounds.round_saving = 0;
  const DiffResult more = RunDiff(a, b, 16, 16, free_rounds);
  EXPECT_EQ(more.keys, ExpectedDifferences(a, b));
  EXPECT_GT(more.stats.rounds, one.stats.rounds);
  EXPECT_LT(more.stats.payload_bytes(), one.stats.payload_bytes());
}

TEST(DiffCostModel, EqualViewsCostTheHandshakeOnly) {
  const DiffCostEstimate equal = EstimateDiffCost(1000000, 0, 40, {});
  EXPECT_EQ(equal.rounds, 1);
  EXPECT_LT(equal.bytes, 1024);
}

TEST(DiffCostModel, MoreRoundsWhereRowsPerDifferenceGrow) {
  // At d = 1000 the rule takes one round more for every ~10x rows, and
  // every extra round costs fewer bytes than going without it.
  const DiffOptions options;
  const DiffCostEstimate small = EstimateDiffCost(100000, 1000, 40, options);
  const DiffCostEstimate large = EstimateDiffCost(10000000, 1000, 40, options);
  EXPECT_LT(small.rounds, large.rounds);
  DiffOptions capped = options;
  capped.max_rounds = small.rounds;
  EXPECT_GT(EstimateDiffCost(10000000, 1000, 40, capped).bytes, large.bytes);
}

// The mean of `values` and the largest relative distance from it.
double SpreadAroundMean(const std::vector<double>& values, double* mean) {
  *mean = 0;
  for (double v : values) *mean += v / static_cast<double>(values.size());
  double spread = 0;
  for (double v : values) spread = std::max(spread, std::fabs(v / *mean - 1));
  return spread;
}

TEST(DiffCostModel, SessionBytesPerDifferenceAreFlatInN) {
  // Flat in N: at d = 1000 the round rule takes one round
  // more per tenfold N (3, 4, 5 rounds at 100k, 1M, 10M rows), which holds
  // the fan-out per round near (N/d)^(1/(r-1)) = 10, so a session's bytes
  // per difference stay within ±25% of their mean. With a dearer round
  // (round_saving = 0.35) 10M keeps 4 rounds and falls out of it.
  DiffOptions session;
  session.own_view = DiffOptions::OwnView::kA;
  std::vector<double> per_difference;
  int rounds = 2;
  for (const uint64_t n : {100000, 1000000, 10000000}) {
    const DiffCostEstimate model = EstimateDiffCost(n, 1000, 40, session);
    std::printf("n=%llu rounds=%d bytes/difference=%.0f\n",
                static_cast<unsigned long long>(n), model.rounds,
                model.bytes / 1000);
    EXPECT_EQ(model.rounds, rounds + 1) << n;
    rounds = model.rounds;
    per_difference.push_back(model.bytes / 1000);
  }
  double mean;
  EXPECT_LE(SpreadAroundMean(per_difference, &mean), 0.25) << mean;
  // The goal: at most 256 bytes per difference at 1M in 4 rounds.
  EXPECT_LE(per_difference[1], 256);
}

// The same against measurements on in-memory views: the keys found are
// exact; the diff takes the rounds the model's rule picks (which is what
// makes bytes per difference flat in N); and each pass's bytes are within
// 0.8x to 1.2x of the model's for those rounds. At d = 1000 and above,
// the handshake's 32 nodes all differ and say only "many": the planner's
// estimate for that case (3 s ln s differences below s saturated
// children) is what keeps the first descent deep enough; with the one
// before it (s ln 2s) a session at 100k rows took a fourth round and paid
// 15% over the model for it. A pass that misses a difference is
// followed by another (1% of diffs, see "Fingerprints"), so bytes and
// rounds are counted per pass.
struct FlatCase {
  int n;
  int d;
  bool session;
};

// Names the case in test names (gtest would otherwise print its bytes,
// padding included, which differ between runs and break ctest's filter).
void PrintTo(const FlatCase& c, std::ostream* os) {
  *os << "n=" << c.n << " d=" << c.d << (c.session ? " session" : " third");
}

class DiffFlatTest : public ::testing::TestWithParam<FlatCase> {};

TEST_P(DiffFlatTest, TakesTheModelsRoundsAndBytes) {
  const FlatCase c = GetParam();
  const uint64_t seed = TestSeed();
  std::printf("seed=%llu n=%d d=%d %s\n", static_cast<unsigned long long>(seed),
              c.n, c.d, c.session ? "session" : "third party");
  Rows a, b;
  MakeReplicas(seed, c.n, c.d, &a, &b);
  const std::set<std::string> expected = ExpectedDifferences(a, b);
  DiffOptions options;
  if (c.session) options.own_view = DiffOptions::OwnView::kA;
  options.seed = seed | 1;
  const DiffResult result = RunDiff(a, b, 16, 16, options);
  std::printf("  %s\n", result.stats.DebugString().c_str());
  EXPECT_EQ(result.keys, expected) << "seed " << seed;
  const uint64_t passes = std::max<uint64_t>(1, result.stats.passes);
  const uint64_t rounds = result.stats.rounds / passes;

  double entry_bytes = 0;
  for (const auto& [key, row] : a) entry_bytes += WireSize(row);
  entry_bytes /= static_cast<double>(a.size());
  const DiffCostEstimate rule =
      EstimateDiffCost(c.n, expected.size(), entry_bytes, options);
  EXPECT_EQ(static_cast<int>(rounds), rule.rounds) << "seed " << seed;
  DiffOptions same_rounds = options;
  same_rounds.max_rounds = static_cast<int>(rounds);
  same_rounds.budget_rounds = same_rounds.max_rounds;
  same_rounds.round_saving = 0;
  same_rounds.round_price_bytes = 0;
  const DiffCostEstimate model =
      EstimateDiffCost(c.n, expected.size(), entry_bytes, same_rounds);
  const double per_pass =
      static_cast<double>(result.stats.payload_bytes()) / passes;
  std::printf("  model %.0f bytes in %d rounds; measured/model %.2f\n",
              model.bytes, model.rounds, per_pass / model.bytes);
  // The model is an expectation; a run varies around it, most in the
  // smallest trees (few nodes a level, so the count of mismatched ones
  // varies most): over 1,600 seeded runs of these cases the ratio reached
  // 1.34 (n = 20,000, d = 200, third party), so a 1.2 bound failed ~3% of
  // CI runs. 1.4 still fails a planner that takes a round too few or too
  // many (the rounds check above) or pays a level twice.
  EXPECT_GE(per_pass, 0.8 * model.bytes) << "seed " << seed;
  EXPECT_LE(per_pass, 1.4 * model.bytes) << "seed " << seed;
}

INSTANTIATE_TEST_SUITE_P(SeveralSizes, DiffFlatTest,
                         ::testing::Values(FlatCase{20000, 200, true},
                                           FlatCase{20000, 200, false},
                                           FlatCase{100000, 1000, true},
                                           FlatCase{100000, 1000, false},
                                           FlatCase{200000, 200, true},
                                           FlatCase{200000, 200, false}));

// Two views that answer a call only once the other view has been asked the
// same call too: a diff that asks them one after the other never gets an
// answer from the first (it fails after a timeout).
class Rendezvous {
 public:
  // Records that `side`'s next call has arrived and waits for the other
  // side's matching call. Returns false after the timeout.
  bool Meet(int side) {
    absl::MutexLock lock(&mu_);
    const uint64_t mine = ++calls_[side];
    const uint64_t* other = &calls_[1 - side];
    const auto arrived = [other, mine] { return *other >= mine; };
    return mu_.AwaitWithTimeout(absl::Condition(&arrived), absl::Seconds(10));
  }

 private:
  absl::Mutex mu_;
  uint64_t calls_[2] = {0, 0};
};

class RendezvousView : public TreeView {
 public:
  RendezvousView(std::unique_ptr<MemoryTreeView> view, Rendezvous* meeting,
                 int side)
      : view_(std::move(view)), meeting_(meeting), side_(side) {}

  absl::StatusOr<ViewSummary> Summary(int top_levels) override {
    if (!meeting_->Meet(side_)) return Alone();
    return view_->Summary(top_levels);
  }
  absl::StatusOr<ViewResponse> Exchange(const ViewRequest& request) override {
    if (!meeting_->Meet(side_)) return Alone();
    return view_->Exchange(request);
  }
  absl::Status Scan(absl::Span<const NodeRef> ranges,
                    const EntrySink& sink) override {
    return view_->Scan(ranges, sink);
  }

 private:
  static absl::Status Alone() {
    return absl::DeadlineExceededError("asked while the other view was not");
  }
  std::unique_ptr<MemoryTreeView> view_;
  Rendezvous* const meeting_;
  const int side_;
};

TEST(Diff, AsksBothViewsAtTheSameTime) {
  // Within a round the two views are asked at once, so a round costs one
  // round trip however the views are placed.
  Rows a, b;
  MakeReplicas(23, 20000, 100, &a, &b);
  auto memory_a = MemoryTreeView::Create(16, ToVector(a));
  auto memory_b = MemoryTreeView::Create(16, ToVector(b));
  ASSERT_TRUE(memory_a.ok() && memory_b.ok());
  Rendezvous meeting;
  RendezvousView view_a(std::move(*memory_a), &meeting, 0);
  RendezvousView view_b(std::move(*memory_b), &meeting, 1);
  std::set<std::string> found;
  DiffStats stats;
  const absl::Status s = DiffViews(
      view_a, view_b, DiffOptions{},
      [&](const RowEntry* in_a, const RowEntry* in_b) {
        found.insert(in_a != nullptr ? in_a->key : in_b->key);
        return absl::OkStatus();
      },
      &stats);
  ASSERT_TRUE(s.ok()) << s;
  EXPECT_EQ(found, ExpectedDifferences(a, b));
  EXPECT_GE(stats.rounds, 3u);
}

TEST(Diff, SinkErrorStopsTheDiff) {
  Rows a, b;
  MakeReplicas(17, 1000, 50, &a, &b);
  auto view_a = MemoryTreeView::Create(10, ToVector(a));
  auto view_b = MemoryTreeView::Create(10, ToVector(b));
  ASSERT_TRUE(view_a.ok() && view_b.ok());
  int calls = 0;
  absl::Status s = DiffViews(
      **view_a, **view_b, DiffOptions{},
      [&](const RowEntry*, const RowEntry*) {
        ++calls;
        return absl::CancelledError("stop");
      },
      nullptr);
  EXPECT_EQ(s.code(), absl::StatusCode::kCancelled);
  EXPECT_EQ(calls, 1);
}

// A node's own session against the cost model, as DiffPlannerTest does for
// a third party: exact keys, rounds within the budget, bytes (the other
// view's only) near the model's for the rounds taken, per pass.
class SessionPlannerTest : public ::testing::TestWithParam<PlannerCase> {};

TEST_P(SessionPlannerTest, RoundsAndBytesFollowTheCostModel) {
  CheckPlannerAgainstModel(GetParam(), TestSeed(), 0, DiffOptions::OwnView::kA);
}

INSTANTIATE_TEST_SUITE_P(
    SeveralSizes, SessionPlannerTest,
    ::testing::Values(PlannerCase{20000, 10}, PlannerCase{20000, 200},
                      PlannerCase{100000, 30}, PlannerCase{100000, 1000},
                      PlannerCase{300000, 100}, PlannerCase{300000, 3000}));

TEST(Diff, SessionsPayFarFewerBytesThanAThirdParty) {
  // The own view's answers stay home, and the other answers with a bitmap
  // and only the rows that differ: well under half a third party's bytes.
  Rows a, b;
  MakeReplicas(29, 100000, 1000, &a, &b);
  DiffOptions session;
  session.own_view = DiffOptions::OwnView::kB;
  const DiffResult third = RunDiff(a, b, 16, 16);
  const DiffResult own = RunDiff(a, b, 16, 16, session);
  EXPECT_EQ(own.keys, third.keys);
  EXPECT_LT(own.stats.payload_bytes() * 2, third.stats.payload_bytes())
      << own.stats.DebugString() << " vs " << third.stats.DebugString();
}

// Counts the rows a view reads to answer: every row under a descent that
// ends below its stored leaves, and every row listed (docs/design/diff.md,
// "Reading rows is a cost too").
class ReadCountingView : public TreeView {
 public:
  ReadCountingView(std::unique_ptr<MemoryTreeView> view, int depth)
      : view_(std::move(view)), depth_(depth) {}

  absl::StatusOr<ViewSummary> Summary(int top_levels) override {
    return view_->Summary(top_levels);
  }
  absl::StatusOr<ViewResponse> Exchange(const ViewRequest& request) override {
    absl::StatusOr<ViewResponse> response = view_->Exchange(request);
    if (!response.ok()) return response;
    size_t at = 0;
    for (const DescendRequest& d : request.descend) {
      const size_t n = size_t{1} << d.levels_ahead;
      if (d.node.level + d.levels_ahead > depth_) {
        for (size_t i = at; i < at + n; ++i) {
          rows_read_ += response->descendants[i].count;
        }
      }
      at += n;
    }
    rows_read_ += response->entries.size();
    return response;
  }
  absl::Status Scan(absl::Span<const NodeRef> ranges,
                    const EntrySink& sink) override {
    return view_->Scan(ranges, sink);
  }

  uint64_t rows_read() const { return rows_read_; }

 private:
  std::unique_ptr<MemoryTreeView> view_;
  const int depth_;
  uint64_t rows_read_ = 0;
};

TEST(Diff, DescentsStopAtTheLeavesRatherThanReadEveryLeafBelow) {
  // 200k rows in depth-9 trees: ~390 rows a leaf. A descent from above the
  // leaves to below them reads the rows of every leaf it crosses; priced,
  // the planner stops at the leaves and goes on from each differing one, so
  // each view reads about one leaf per difference. Priced at 0 (bytes
  // alone, as before), the same diffs read several times more.
  Rows a, b;
  MakeReplicas(41, 200000, 100, &a, &b);
  const std::set<std::string> expected = ExpectedDifferences(a, b);
  constexpr int kDepth = 9;
  const double rows_per_leaf = 200000.0 / (1 << kDepth);
  for (const DiffOptions::OwnView own :
       {DiffOptions::OwnView::kNeither, DiffOptions::OwnView::kA}) {
    uint64_t read[2] = {0, 0};
    uint64_t bytes[2] = {0, 0};
    for (const double price : {1.0, 0.0}) {
      auto memory_a = MemoryTreeView::Create(kDepth, ToVector(a));
      auto memory_b = MemoryTreeView::Create(kDepth, ToVector(b));
      ASSERT_TRUE(memory_a.ok() && memory_b.ok());
      ReadCountingView view_a(std::move(*memory_a), kDepth);
      ReadCountingView view_b(std::move(*memory_b), kDepth);
      DiffOptions options;
      options.own_view = own;
      options.scan_row_bytes = price;
      std::set<std::string> found;
      DiffStats stats;
      ASSERT_TRUE(DiffViews(
                      view_a, view_b, options,
                      [&](const RowEntry* in_a, const RowEntry* in_b) {
                        found.insert(in_a != nullptr ? in_a->key : in_b->key);
                        return absl::OkStatus();
                      },
                      &stats)
                      .ok());
      EXPECT_EQ(found, expected);
      const int i = price > 0 ? 0 : 1;
      read[i] = view_a.rows_read() + view_b.rows_read();
      bytes[i] = stats.payload_bytes();
      std::printf(
          "own=%d price=%.0f rows read per difference per view %.0f "
          "(%.0f a leaf), %s\n",
          static_cast<int>(own), price,
          static_cast<double>(read[i]) / 2 / expected.size(), rows_per_leaf,
          stats.DebugString().c_str());
    }
    EXPECT_LE(static_cast<double>(read[0]) / 2 / expected.size(),
              2 * rows_per_leaf);
    EXPECT_GT(read[1], 3 * read[0]);
    // Bytes plus rows read, what the planner minimises at a price of 1, is
    // lower; a session's bytes hardly move (a third party's grow: it pays
    // 2 x 4-5 bytes a child and lists more where a descent would read a
    // leaf, 64 -> 106 KB here, where the rows it no longer reads are 190k).
    EXPECT_LT(bytes[0] + read[0], bytes[1] + read[1]);
    if (own != DiffOptions::OwnView::kNeither) {
      EXPECT_LE(bytes[0], 1.15 * bytes[1]);
    }
  }
}

// A single changed row on b, searched for a value whose short fingerprints
// match a's under `seed` somewhere on the way down: the diff, limited to
// one pass, does not see it.
TEST(Diff, AFalseMatchUnderOneSeedIsFoundUnderTheNext) {
  // Enough rows that the nodes under the handshake are too large to list,
  // and 8-bit fingerprints (the narrowest), so a search finds one soon.
  Rows a, b;
  MakeReplicas(31, 5000, 0, &a, &b);
  const std::string key = a.begin()->first;
  const uint64_t seed = 0x5eed;
  DiffOptions one_pass;
  one_pass.seed = seed;
  one_pass.max_passes = 1;
  one_pass.miss_probability = 1;
  one_pass.own_view = DiffOptions::OwnView::kA;
  bool collided = false;
  int tries = 0;
  for (; tries < 20000 && !collided; ++tries) {
    b[key] = MakeRow(key, absl::StrCat("v", tries), 9000, "origin-b", false);
    const DiffResult result = RunDiff(a, b, 10, 10, one_pass);
    if (result.keys.empty()) {
      collided = true;
      // The roots said otherwise: the pass knows it missed something.
      EXPECT_FALSE(result.stats.verified);
    }
  }
  ASSERT_TRUE(collided) << "no false match in " << tries << " tries";
  std::printf("false match under seed %llx after %d tries\n",
              static_cast<unsigned long long>(seed), tries);
  // The next session draws another seed and finds the key.
  DiffOptions next = one_pass;
  next.seed = seed + 1;
  const DiffResult later = RunDiff(a, b, 10, 10, next);
  EXPECT_EQ(later.keys, std::set<std::string>{key});
  EXPECT_TRUE(later.stats.verified);
  // Within one diff, the check against the roots runs a second pass.
  DiffOptions two_passes = one_pass;
  two_passes.max_passes = 2;
  const DiffResult checked = RunDiff(a, b, 10, 10, two_passes);
  EXPECT_EQ(checked.keys, std::set<std::string>{key});
  EXPECT_EQ(checked.stats.passes, 2u);
  EXPECT_TRUE(checked.stats.verified);
}

// A view of a node from before seeded exchanges: it answers plain ones only.
class OldNodeView : public TreeView {
 public:
  explicit OldNodeView(std::unique_ptr<MemoryTreeView> view)
      : view_(std::move(view)) {}
  absl::StatusOr<ViewSummary> Summary(int top_levels) override {
    return view_->Summary(top_levels);
  }
  absl::StatusOr<ViewResponse> Exchange(const ViewRequest& request) override {
    return view_->Exchange(request);
  }
  absl::StatusOr<SeededResponse> ExchangeSeeded(const SeededRequest&) override {
    return absl::UnimplementedError("a node from before seeds");
  }
  bool AnswersSeeded() const override { return false; }
  absl::Status Scan(absl::Span<const NodeRef> ranges,
                    const EntrySink& sink) override {
    return view_->Scan(ranges, sink);
  }

 private:
  std::unique_ptr<MemoryTreeView> view_;
};

TEST(Diff, APeerFromBeforeSeedsIsAskedThePlainWay) {
  Rows a, b;
  MakeReplicas(37, 20000, 100, &a, &b);
  for (const Mode mode : kModes) {
    auto memory_a = MemoryTreeView::Create(16, ToVector(a));
    auto memory_b = MemoryTreeView::Create(16, ToVector(b));
    ASSERT_TRUE(memory_a.ok() && memory_b.ok());
    OldNodeView old_b(std::move(*memory_b));
    std::set<std::string> found;
    DiffStats stats;
    const absl::Status s = DiffViews(
        **memory_a, old_b, OptionsFor(mode, 41),
        [&](const RowEntry* in_a, const RowEntry* in_b) {
          found.insert(in_a != nullptr ? in_a->key : in_b->key);
          return absl::OkStatus();
        },
        &stats);
    ASSERT_TRUE(s.ok()) << s << " " << mode.name;
    EXPECT_EQ(found, ExpectedDifferences(a, b)) << mode.name;
    EXPECT_EQ(stats.fingerprint_bits, 0u) << mode.name;
    EXPECT_EQ(stats.passes, 1u);
    EXPECT_TRUE(stats.verified);
  }
}

}  // namespace
}  // namespace tree
}  // namespace tally
