// diff-mem: DiffViews between two in-memory views of N rows, for several
// numbers of differences, against a Cassandra-style baseline over the same
// views (every leaf digest at depth 16 from both sides, then every row of
// each mismatched leaf from both sides).
//
// What it shows: bytes and rounds per session as d grows, with N fixed, and
// how far below the leaf-exchange baseline tally stays, beside what the cost
// model (tree::EstimateDiffCost) predicts. It checks that the diff found
// exactly the keys it changed.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <ostream>
#include <random>
#include <string>
#include <unordered_set>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "tools/bench/scenario.h"
#include "tree/diff/diff.h"
#include "tree/digest.h"
#include "tree/memory_tree_view.h"
#include "tree/status_macros.h"
#include "tree/token.h"
#include "tree/tree_view.h"

ABSL_FLAG(std::string, diffs, "0,1,100,10000",
          "diff-mem: comma-separated numbers of differing keys.");
ABSL_FLAG(int, max_rounds, tally::tree::DiffOptions{}.max_rounds,
          "diff-mem: DiffOptions::max_rounds.");
ABSL_FLAG(double, round_saving, tally::tree::DiffOptions{}.round_saving,
          "diff-mem: DiffOptions::round_saving.");
ABSL_FLAG(double, round_price_bytes,
          tally::tree::DiffOptions{}.round_price_bytes,
          "diff-mem: DiffOptions::round_price_bytes.");
ABSL_FLAG(std::string, modes, "plain,seeded,session",
          "diff-mem: comma-separated ways of asking the views: plain (64-bit "
          "fingerprints, as a node from before seeds), seeded (both views "
          "asked alike: `tally diff` from a third party), session (view a "
          "answers in process and sends its fingerprints: a node's own "
          "session; bytes are view b's only).");
ABSL_FLAG(int, handshake_levels, tally::tree::DiffOptions{}.handshake_levels,
          "diff-mem: DiffOptions::handshake_levels.");
ABSL_FLAG(int, diff_mem_runs, 3,
          "diff-mem: diffs per (d, mode) over the same views, each under a "
          "fresh seed; bytes and ms are printed as min / median / max.");
ABSL_FLAG(bool, diff_mem_model_only, false,
          "diff-mem: print only the cost model (tree::EstimateDiffCost) for "
          "--rows and --diffs in every mode, without building views: for "
          "sizes whose views do not fit in memory.");

namespace tally {
namespace bench {
namespace {

using tree::RowEntry;

constexpr int kDepth = 16;
constexpr int kBaselineDepth = 16;
constexpr size_t kKeyBytes = 16;
constexpr size_t kValueBytes = 100;
constexpr char kKeyspace[] = "bench";
// Origins travel by long name, so their length is part of every row's wire
// size; these are as long as a host:port name.
constexpr char kOriginA[] = "tally-a.example.internal:7000";
constexpr char kOriginB[] = "tally-b.example.internal:7000";

// A 16-byte key; distinct for distinct `i` (multiplying by an odd constant
// is a bijection on 64-bit integers).
std::string KeyOf(uint64_t i) {
  return absl::StrFormat("%016x", (i + 1) * 0x9E3779B97F4A7C15ull);
}

RowEntry MakeRow(std::string key, uint64_t millis, const char* origin,
                 bool deleted, std::mt19937_64& rng) {
  std::string value;
  if (!deleted) {
    value.resize(kValueBytes);
    for (char& c : value) c = static_cast<char>('a' + rng() % 26);
  }
  RowEntry row;
  row.token = tree::TokenOf(key);
  row.key = std::move(key);
  row.version = tree::Version{tree::HlcTimestamp::FromParts(millis, 0), origin};
  row.deleted = deleted;
  row.digest = tree::RowDigest(kKeyspace, row.key, row.version, deleted, value);
  return row;
}

// Replica b: a copy of `base` with `d` distinct keys changed on b alone,
// mixing updates, deletes (tombstones), keys b lacks and keys only b has.
std::vector<RowEntry> MakeReplicaB(const std::vector<RowEntry>& base,
                                   uint64_t d, std::mt19937_64& rng,
                                   std::unordered_set<std::string>* changed) {
  std::vector<RowEntry> b = base;
  std::vector<bool> erased(b.size(), false);
  std::vector<RowEntry> added;
  std::unordered_set<uint64_t> picked;
  for (uint64_t i = 0; i < d; ++i) {
    const uint64_t t = 2'000'000 + i;
    if (i % 10 == 9) {  // only on b
      added.push_back(MakeRow(KeyOf(base.size() + i), t, kOriginB, false, rng));
      changed->insert(added.back().key);
      continue;
    }
    uint64_t index;
    do {
      index = rng() % b.size();
    } while (!picked.insert(index).second);
    changed->insert(b[index].key);
    switch (i % 10) {
      case 6:
      case 7:  // deleted on b
        b[index] = MakeRow(b[index].key, t, kOriginB, true, rng);
        break;
      case 8:  // only on a
        erased[index] = true;
        break;
      default:  // updated on b
        b[index] = MakeRow(b[index].key, t, kOriginB, false, rng);
        break;
    }
  }
  size_t kept = 0;
  for (size_t i = 0; i < b.size(); ++i) {
    if (erased[i]) continue;
    if (kept != i) b[kept] = std::move(b[i]);
    ++kept;
  }
  b.resize(kept);
  for (RowEntry& row : added) b.push_back(std::move(row));
  return b;
}

// Cassandra-style repair over the same views: both sides send every leaf
// digest at depth 16, then both stream every row of each leaf that differs.
// Counted with the diff's own wire model (tree::WireSize).
absl::StatusOr<uint64_t> BaselinePayload(tree::TreeView& a, tree::TreeView& b) {
  tree::ViewRequest request;
  request.descend.push_back({tree::NodeRef{0, 0}, kBaselineDepth});
  TALLY_ASSIGN_OR_RETURN(const tree::ViewResponse leaves_a,
                         a.Exchange(request));
  TALLY_ASSIGN_OR_RETURN(const tree::ViewResponse leaves_b,
                         b.Exchange(request));
  uint64_t bytes = 2 * tree::WireSize(request) + tree::WireSize(leaves_a) +
                   tree::WireSize(leaves_b);
  std::vector<tree::NodeRef> mismatched;
  for (size_t i = 0; i < leaves_a.descendants.size(); ++i) {
    if (leaves_a.descendants[i] != leaves_b.descendants[i]) {
      mismatched.push_back(tree::NodeRef{kBaselineDepth, i});
    }
  }
  const tree::EntrySink count = [&bytes](const RowEntry& entry) {
    bytes += tree::WireSize(entry);
    return absl::OkStatus();
  };
  TALLY_RETURN_IF_ERROR(a.Scan(mismatched, count));
  TALLY_RETURN_IF_ERROR(b.Scan(mismatched, count));
  return bytes;
}

absl::StatusOr<std::vector<uint64_t>> ParseDiffs(const std::string& flag) {
  std::vector<uint64_t> out;
  for (absl::string_view part : absl::StrSplit(flag, ',', absl::SkipEmpty())) {
    uint64_t d;
    if (!absl::SimpleAtoi(part, &d)) {
      return absl::InvalidArgumentError(
          absl::StrFormat("--diffs: '%s' is not a number", part));
    }
    out.push_back(d);
  }
  if (out.empty()) {
    return absl::InvalidArgumentError("--diffs names no number of differences");
  }
  return out;
}

// "min/median/max" of `values`, with `decimals` digits after the point.
std::string Spread(std::vector<double> values, int decimals) {
  std::sort(values.begin(), values.end());
  return absl::StrFormat("%.*f/%.*f/%.*f", decimals, values.front(), decimals,
                         values[values.size() / 2], decimals, values.back());
}

struct Mode {
  bool seeded;
  tree::DiffOptions::OwnView own;
};

absl::StatusOr<Mode> ModeOf(const std::string& name) {
  if (name == "plain") return Mode{false, tree::DiffOptions::OwnView::kNeither};
  if (name == "seeded") return Mode{true, tree::DiffOptions::OwnView::kNeither};
  if (name == "session") return Mode{true, tree::DiffOptions::OwnView::kA};
  return absl::InvalidArgumentError(
      absl::StrFormat("--modes: '%s' is not plain, seeded or session", name));
}

// The cost model alone (no views): the rounds the planner's rule picks and
// the bytes per difference it expects, and what it expects in each fixed
// number of rounds beside it.
absl::Status PrintModel(uint64_t n, const std::vector<uint64_t>& diffs,
                        const std::vector<std::string>& modes,
                        double entry_bytes, const tree::DiffOptions& base,
                        std::ostream& out) {
  out << absl::StrFormat(
      "wire model only (tree::EstimateDiffCost), no views built; rows of %.0f "
      "bytes on the wire\n",
      entry_bytes);
  out << absl::StrFormat("%11s %6s %8s %6s %9s | %s\n", "N", "d", "mode",
                         "rounds", "B/diff", "B/diff in 2 3 4 5 6 rounds");
  for (uint64_t d : diffs) {
    for (const std::string& name : modes) {
      TALLY_ASSIGN_OR_RETURN(const Mode mode, ModeOf(name));
      tree::DiffOptions options = base;
      options.seeded = mode.seeded;
      options.own_view = mode.own;
      const tree::DiffCostEstimate model =
          tree::EstimateDiffCost(n, d, entry_bytes, options);
      const double per = static_cast<double>(std::max<uint64_t>(d, 1));
      std::string fixed;
      for (int r = 2; r <= 6; ++r) {
        tree::DiffOptions same = options;
        same.max_rounds = r;
        same.budget_rounds = r;
        same.round_saving = 0;
        same.round_price_bytes = 0;
        absl::StrAppendFormat(
            &fixed, " %7.0f",
            tree::EstimateDiffCost(n, d, entry_bytes, same).bytes / per);
      }
      out << absl::StrFormat("%11d %6d %8s %6d %9.0f |%s\n", n, d, name,
                             model.rounds, model.bytes / per, fixed);
    }
  }
  return absl::OkStatus();
}

absl::Status RunDiffMem(std::ostream& out) {
  const uint64_t n = absl::GetFlag(FLAGS_rows);
  const uint64_t seed = absl::GetFlag(FLAGS_seed);
  const int runs = std::max(1, absl::GetFlag(FLAGS_diff_mem_runs));
  TALLY_ASSIGN_OR_RETURN(const std::vector<uint64_t> diffs,
                         ParseDiffs(absl::GetFlag(FLAGS_diffs)));
  for (uint64_t d : diffs) {
    if (n == 0 || d > n / 2) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "--diffs=%d with --rows=%d: at most half the rows may differ", d, n));
    }
  }
  const std::vector<std::string> modes =
      absl::StrSplit(absl::GetFlag(FLAGS_modes), ',', absl::SkipEmpty());
  for (const std::string& mode : modes) {
    TALLY_RETURN_IF_ERROR(ModeOf(mode).status());
  }

  tree::DiffOptions options;
  options.max_rounds = absl::GetFlag(FLAGS_max_rounds);
  options.round_saving = absl::GetFlag(FLAGS_round_saving);
  options.round_price_bytes = absl::GetFlag(FLAGS_round_price_bytes);
  options.handshake_levels = absl::GetFlag(FLAGS_handshake_levels);

  std::mt19937_64 rng(seed);
  if (absl::GetFlag(FLAGS_diff_mem_model_only)) {
    // Every row has the same wire size here (keys of one length, one origin).
    const RowEntry sample = MakeRow(KeyOf(0), 1'000'000, kOriginA, false, rng);
    return PrintModel(n, diffs, modes,
                      static_cast<double>(tree::WireSize(sample)), options,
                      out);
  }
  std::vector<RowEntry> base;
  base.reserve(n);
  for (uint64_t i = 0; i < n; ++i) {
    // Drawn before the call: MakeRow draws from rng too, and the order of a
    // call's arguments is the compiler's.
    const uint64_t millis = 1'000'000 + rng() % 1'000'000;
    base.push_back(MakeRow(KeyOf(i), millis, kOriginA, false, rng));
  }
  TALLY_ASSIGN_OR_RETURN(std::unique_ptr<tree::MemoryTreeView> view_a,
                         tree::MemoryTreeView::Create(kDepth, base));

  out << absl::StrFormat(
      "rows: %d-byte keys, %d-byte values, depth %d on both sides; seed %d\n"
      "diff: max_rounds=%d round_saving=%.2f handshake_levels=%d; %d runs "
      "per row, each under a fresh seed (min/median/max)\n"
      "baseline: every depth-%d leaf digest from both sides, then every row "
      "of each mismatched leaf from both sides\n\n",
      kKeyBytes, kValueBytes, kDepth, seed, options.max_rounds,
      options.round_saving, options.handshake_levels, runs, kBaselineDepth);
  const char* const kHeader =
      "%9s %6s %8s %6s %5s %8s %8s %11s %14s %20s %12s %11s %6s | %6s %8s\n";
  const char* const kRow =
      "%9d %6d %8s %6s %5d %8d %8d %11d %14s %20s %12d %11s %6s | %6d %8s\n";
  out << absl::StrFormat(kHeader, "N", "d", "mode", "rounds", "exch", "digests",
                         "entries", "payload", "B/diff", "ms", "base_payload",
                         "tally/base", "passes", "m.rnd", "m.B/diff");
  out << "payload, exch, digests, entries: the median run's; m.rnd: rounds "
         "the cost model picks; m.B/diff: bytes per difference it expects in "
         "the rounds measured\n";
  // Every row has the same wire size here (keys of one length, one origin).
  const double entry_bytes = static_cast<double>(tree::WireSize(base.front()));
  for (uint64_t d : diffs) {
    std::unordered_set<std::string> changed;
    TALLY_ASSIGN_OR_RETURN(std::unique_ptr<tree::MemoryTreeView> view_b,
                           tree::MemoryTreeView::Create(
                               kDepth, MakeReplicaB(base, d, rng, &changed)));
    TALLY_ASSIGN_OR_RETURN(const uint64_t baseline_both,
                           BaselinePayload(*view_a, *view_b));

    for (const std::string& name : modes) {
      TALLY_ASSIGN_OR_RETURN(const Mode mode, ModeOf(name));
      options.seeded = mode.seeded;
      options.own_view = mode.own;
      std::vector<tree::DiffStats> all;
      std::vector<double> millis;
      std::vector<uint64_t> payloads;
      std::vector<uint64_t> rounds;
      std::vector<uint64_t> passes;
      for (int run = 0; run < runs; ++run) {
        tree::DiffStats stats;
        uint64_t unexpected = 0;
        const auto start = std::chrono::steady_clock::now();
        TALLY_RETURN_IF_ERROR(tree::DiffViews(
            *view_a, *view_b, options,
            [&](const RowEntry* in_a, const RowEntry* in_b) {
              const std::string& key = in_a != nullptr ? in_a->key : in_b->key;
              if (changed.count(key) == 0) ++unexpected;
              return absl::OkStatus();
            },
            &stats));
        millis.push_back(std::chrono::duration<double, std::milli>(
                             std::chrono::steady_clock::now() - start)
                             .count());
        if (stats.differences != d || unexpected != 0) {
          return absl::InternalError(absl::StrFormat(
              "diff with d=%d reported %d differences, %d of them unchanged "
              "keys (%s)",
              d, stats.differences, unexpected, stats.DebugString()));
        }
        payloads.push_back(stats.payload_bytes());
        rounds.push_back(stats.rounds);
        passes.push_back(stats.passes);
        all.push_back(stats);
      }
      // The run of median payload, for the columns that show one run.
      std::vector<size_t> order(all.size());
      for (size_t i = 0; i < order.size(); ++i) order[i] = i;
      std::sort(order.begin(), order.end(),
                [&](size_t x, size_t y) { return payloads[x] < payloads[y]; });
      const tree::DiffStats& median = all[order[order.size() / 2]];

      // The baseline's own side is free in a session too.
      const uint64_t baseline = mode.own == tree::DiffOptions::OwnView::kNeither
                                    ? baseline_both
                                    : baseline_both / 2;
      std::string per_diff = "-";
      if (d > 0) {
        std::vector<double> per;
        for (uint64_t p : payloads) {
          per.push_back(static_cast<double>(p) / static_cast<double>(d));
        }
        per_diff = Spread(per, 0);
      }
      const std::string ratio = absl::StrFormat(
          "%.4f", static_cast<double>(median.payload_bytes()) /
                      static_cast<double>(std::max<uint64_t>(baseline, 1)));
      const std::string round_spread =
          *std::min_element(rounds.begin(), rounds.end()) ==
                  *std::max_element(rounds.begin(), rounds.end())
              ? absl::StrFormat("%d", rounds.front())
              : absl::StrFormat(
                    "%d-%d", *std::min_element(rounds.begin(), rounds.end()),
                    *std::max_element(rounds.begin(), rounds.end()));
      const std::string pass_spread = absl::StrFormat(
          "%d", *std::max_element(passes.begin(), passes.end()));
      const tree::DiffCostEstimate model =
          tree::EstimateDiffCost(n, d, entry_bytes, options);
      // And what it expects in the rounds the diff took.
      tree::DiffOptions same_rounds = options;
      same_rounds.max_rounds = static_cast<int>(median.rounds);
      same_rounds.budget_rounds = same_rounds.max_rounds;
      same_rounds.round_saving = 0;
      same_rounds.round_price_bytes = 0;
      const std::string model_per_diff =
          d == 0 ? "-"
                 : absl::StrFormat("%.0f", tree::EstimateDiffCost(
                                               n, d, entry_bytes, same_rounds)
                                                   .bytes /
                                               static_cast<double>(d));
      out << absl::StrFormat(
          kRow, n, d, name, round_spread, median.exchanges, median.digests,
          median.entries, median.payload_bytes(), per_diff, Spread(millis, 1),
          baseline, ratio, pass_spread, model.rounds, model_per_diff);
      out.flush();
    }
  }
  return absl::OkStatus();
}

}  // namespace

Scenario DiffMemScenario() {
  return {"diff-mem",
          "DiffViews between two in-memory views vs. a leaf-exchange baseline",
          &RunDiffMem};
}

}  // namespace bench
}  // namespace tally
