#include "tools/cli/args.h"

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <system_error>

#include "absl/flags/commandlineflag.h"
#include "absl/flags/reflection.h"
#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace tally {
namespace cli {

const std::vector<CommandSpec>& Commands() {
  static const auto* const kCommands = new std::vector<CommandSpec>{
      {"put",
       2,
       1 + kMaxKeyValues,
       "put KEY... VALUE [--escaped] [--create-keyspace]",
       "write one row (a PostgreSQL table: KEY... its primary key as text, "
       "VALUE a JSON object of columns)",
       "tally put user:1 '{\"name\":\"Ada\"}'",
       {"escaped", "create_keyspace"}},
      {"get",
       1,
       kMaxKeyValues,
       "get KEY... [--escaped]",
       "print a row's value (exit 1 if the key is absent or deleted; a "
       "PostgreSQL table's row as JSON)",
       "tally --json get user:1",
       {"escaped"}},
      {"del",
       1,
       kMaxKeyValues,
       "del KEY... [--escaped] [--create-keyspace]",
       "delete a row (it becomes a tombstone)",
       "tally del --escaped 'k\\x00'",
       {"escaped", "create_keyspace"}},
      {"load",
       0,
       0,
       "load --file FILE.jsonl|- | --count N [--seed S] [--value-size B] "
       "[--create-keyspace]",
       "bulk-load rows from JSON Lines ({\"key\":...,\"value\":...} per line; "
       "- is standard input) or synthetic rows key-0..key-<N-1>",
       "tally --keyspace=users load --count=100000 --seed=7 "
       "--create-keyspace",
       {"file", "count", "seed", "value_size", "create_keyspace"}},
      {"keyspaces",
       0,
       2,
       "keyspaces [drop NAME --yes | undrop NAME] [--everywhere]",
       "list the node's keyspaces: rows, depth, root (a PostgreSQL "
       "sidecar's tables among them) and the dropped ones; drop one (its "
       "rows go, and the node refuses the name to every writer and session "
       "until undrop), on every peer too with --everywhere",
       "tally --node=10.0.0.5:7400 keyspaces drop usres --yes --everywhere",
       {"yes", "everywhere"}},
      {"status",
       0,
       0,
       "status",
       "show a node: name, epoch, keyspaces with roots, peers, sessions",
       "tally --node=10.0.0.5:7400 status",
       {}},
      {"diff",
       2,
       2,
       "diff A B [--range=FROM:TO | --keys-from=FILE] [--third-party] "
       "[--all-keyspaces] [--values] [--columns=C,... | "
       "--exclude-columns=C,...] [--where=COND] [--transfer=auto|rows|hashes]",
       "list the keys that differ between nodes A and B, or between the "
       "tables of two PostgreSQL URLs (exit 1 if any); A diffs against B "
       "itself, or this tool does with --third-party",
       "tally --keyspace=users diff 127.0.0.1:7400 127.0.0.1:7401",
       {"third_party", "table", "all_keyspaces", "range", "keys_from",
        "escaped", "values", "columns", "exclude_columns", "where",
        "transfer"}},
      {"repair",
       2,
       2,
       "repair A B [--source=A|B] [--dry-run] [--bandwidth=MB/s] "
       "[--insert-only | --upsert-only] [--max-rows=N] [--report=FILE "
       "[--values]] "
       "[--range=FROM:TO | --keys-from=FILE] [--third-party] "
       "[--all-keyspaces] [--columns=C,... | --exclude-columns=C,...] "
       "[--where=COND] [--transfer=auto|rows|hashes]",
       "make A and B equal: two-way last writer wins, or one-way from "
       "--source; run by A, or by this tool with --third-party",
       "tally repair --source=A 127.0.0.1:7400 127.0.0.1:7401",
       {"source", "dry_run", "bandwidth", "third_party", "table",
        "all_keyspaces", "range", "keys_from", "escaped", "insert_only",
        "upsert_only", "max_rows", "report", "columns", "exclude_columns",
        "where", "values", "transfer"}},
      {"recheck",
       1,
       1,
       "recheck REPORT",
       "diff again the keys of a repair report (tally repair --report) "
       "between its two nodes: which still differ (exit 1 if any)",
       "tally recheck repair-users.jsonl",
       {}},
      {"report",
       1,
       1,
       "report REPORT [--format=html|csv]",
       "a repair report (tally repair --report) as one HTML page or as CSV, "
       "on stdout, for review outside a terminal",
       "tally report repair-users.jsonl > repair-users.html",
       {"format"}},
      {"verify",
       0,
       0,
       "verify --data-dir DIR | verify [--table T]",
       "offline: recompute a stopped node's trees from its rows and report "
       "every mismatch (exit 1 if any); without --data-dir: compare a running "
       "PostgreSQL sidecar's (--node) index with its tables",
       "tally verify --data-dir=/var/lib/tally",
       {"data_dir", "table"}},
      {"recover",
       0,
       0,
       "recover --data-dir DIR [--node-name NAME]",
       "offline: salvage a stopped node's store that no longer opens "
       "(damaged or missing log, missing CURRENT), then verify it (exit 1 "
       "if problems remain); peers refill what was lost",
       "tally recover --data-dir=/var/lib/tally",
       {"data_dir", "node_name"}},
      {"peer",
       2,
       2,
       "peer pause|resume PEER",
       "pause or resume the node's (--node) sessions with one of its peers "
       "(its address or node name); a pause stops a running session at its "
       "next step and lasts until resumed (a restart keeps it)",
       "tally --node=127.0.0.1:7400 peer pause 127.0.0.1:7401",
       {}},
      {"sync",
       1,
       1,
       "sync A [--peer=B] [--keyspace=K]",
       "node A starts a session now with its peer B (default: every peer "
       "not paused), of keyspace K (default: all), and this tool follows it "
       "to its end; a session running with B is waited for (exit 1 if the "
       "nodes still differ after it)",
       "tally sync 127.0.0.1:7400 --peer=127.0.0.1:7401",
       {"peer"}},
      {"token",
       1,
       kMaxKeyValues,
       "token KEY... [--escaped]",
       "print each key's token and its heat-map segment (no node asked): "
       "what --range takes",
       "tally token user:1",
       {"escaped"}},
      {"help", 0, 0, "help", "print this text", "tally help", {}},
  };
  return *kCommands;
}

const CommandSpec* FindCommand(absl::string_view name) {
  for (const CommandSpec& c : Commands()) {
    if (c.name == name) return &c;
  }
  return nullptr;
}

std::string UsageText() {
  std::string out =
      "usage: tally [flags] COMMAND ARGS...\n\n"
      "Talks to tally nodes (tallyd): writes and reads rows, shows status, "
      "diffs and repairs any two nodes. Flags may come before or after the "
      "command; put '--' before a key or value that starts with '-'.\n\n"
      "commands:\n";
  for (const CommandSpec& c : Commands()) {
    absl::StrAppendFormat(&out, "  %s\n      %s\n      e.g. %s\n", c.synopsis,
                          c.summary, c.example);
  }
  absl::StrAppend(
      &out,
      "\nglobal flags:\n"
      "  --node=HOST:PORT   the node for put/get/del/load/status/verify/peer "
      "(default 127.0.0.1:7400)\n"
      "  --keyspace=NAME    the keyspace (default 'default')\n"
      "  --json             machine-readable output: one JSON object per "
      "line\n"
      "  --timeout=SECONDS  deadline of each call to a node (default 30)\n"
      "  --tls-cert=FILE --tls-key=FILE\n"
      "                     PEM certificate and key to present to nodes "
      "(mutual TLS)\n"
      "  --tls-ca=FILE      PEM CA to check nodes against; any --tls-* flag "
      "makes the connections TLS\n"
      "  --flagfile=FILE    more flags, one --name=value a line (# comments)\n"
      "  --version          print the version and build\n"
      "\nexit codes (like diff(1) and grep(1)):\n"
      "  0  success; diff: the nodes are equal; verify, recover: the store is "
      "sound\n"
      "  1  get: no such key (or deleted); diff: the nodes differ; "
      "repair, sync: the nodes still differ afterwards (a dry run: it found "
      "differences); verify, recover: problems found\n"
      "  2  trouble: bad arguments, unknown keyspace, unreachable node, "
      "failed repair or sync\n");
  return out;
}

std::string FlagsText(absl::string_view defining_file) {
  std::vector<const absl::CommandLineFlag*> flags;
  for (const auto& [name, flag] : absl::GetAllFlags()) {
    if (absl::StrContains(flag->Filename(), defining_file)) {
      flags.push_back(flag);
    }
  }
  std::sort(flags.begin(), flags.end(),
            [](const auto* a, const auto* b) { return a->Name() < b->Name(); });
  std::string out =
      "flags (a dash and an underscore are the same: --dry-run, "
      "--dry_run):\n";
  for (const absl::CommandLineFlag* flag : flags) {
    std::string name(flag->Name());
    std::replace(name.begin(), name.end(), '_', '-');
    absl::StrAppendFormat(&out, "  --%s (default: %s)\n      %s\n", name,
                          flag->DefaultValue().empty() ? std::string("\"\"")
                                                       : flag->DefaultValue(),
                          flag->Help());
  }
  return out;
}

bool WantsHelp(const std::vector<std::string>& args) {
  for (const std::string& arg : args) {
    if (arg == "--") return false;
    if (arg == "--help" || arg == "-help" || arg == "--helpshort" ||
        arg == "-helpshort") {
      return true;
    }
  }
  return false;
}

void NormalizeFlagNames(std::vector<std::string>* args) {
  for (std::string& arg : *args) {
    if (arg == "--") return;
    if (arg.size() < 2 || arg[0] != '-') continue;
    const size_t start = arg[1] == '-' ? 2 : 1;
    // A negative number is a value, not a flag.
    if (start >= arg.size() || !absl::ascii_isalpha(arg[start])) continue;
    const size_t end = std::min(arg.find('='), arg.size());
    for (size_t i = start; i < end; ++i) {
      if (arg[i] == '-') arg[i] = '_';
    }
  }
}

namespace {

bool IsAbslBuiltinFlag(absl::string_view name) {
  for (absl::string_view builtin :
       {"help", "helpfull", "helpshort", "helppackage", "helpmatch", "helpon",
        "version", "only_check_args", "flagfile", "fromenv", "tryfromenv",
        "undefok"}) {
    if (name == builtin) return true;
  }
  return false;
}

}  // namespace

namespace {

// How deep --flagfile lines inside flag files are followed: a file that
// names itself must end in an error, not a stack overflow.
constexpr int kMaxFlagfileDepth = 10;

// For "--NAME=VALUE", "-NAME=VALUE", "--NAME VALUE" (the value taken from
// args[*i + 1], *i advanced) with NAME `name`: the value. nullopt otherwise.
std::optional<std::string> TakeFlagValue(const std::vector<std::string>& args,
                                         size_t* i, absl::string_view name) {
  absl::string_view arg = args[*i];
  if (!absl::ConsumePrefix(&arg, "--")) {
    if (!absl::ConsumePrefix(&arg, "-")) return std::nullopt;
  }
  if (!absl::ConsumePrefix(&arg, name)) return std::nullopt;
  if (absl::ConsumePrefix(&arg, "=")) return std::string(arg);
  if (!arg.empty()) return std::nullopt;  // --flagfilex
  if (*i + 1 >= args.size()) return std::string();
  return args[++*i];
}

absl::Status ExpandInto(const std::vector<std::string>& args, int depth,
                        std::vector<std::string>* out) {
  for (size_t i = 0; i < args.size(); ++i) {
    if (args[i] == "--") {
      out->insert(out->end(), args.begin() + i, args.end());
      return absl::OkStatus();
    }
    if (std::optional<std::string> files = TakeFlagValue(args, &i, "flagfile");
        files.has_value()) {
      if (files->empty()) {
        return absl::InvalidArgumentError("flag --flagfile needs a file name");
      }
      if (depth >= kMaxFlagfileDepth) {
        return absl::InvalidArgumentError(absl::StrFormat(
            "--flagfile=%s: flag files nest more than %d deep (does one name "
            "itself?)",
            *files, kMaxFlagfileDepth));
      }
      for (absl::string_view file : absl::StrSplit(*files, ',')) {
        const std::string path(file);
        // An ifstream opens a directory and reads it as empty: the flags
        // would silently not apply.
        std::error_code ec;
        if (std::filesystem::is_directory(path, ec)) {
          return absl::InvalidArgumentError(absl::StrFormat(
              "--flagfile %s is a directory; give a file of --name=value "
              "lines",
              path));
        }
        std::ifstream in(path);
        std::stringstream text;
        if (in) text << in.rdbuf();
        if (!in || in.bad()) {
          return absl::NotFoundError(absl::StrFormat(
              "cannot read --flagfile %s: %s", path, std::strerror(errno)));
        }
        std::vector<std::string> lines;
        int line_number = 0;
        for (absl::string_view line : absl::StrSplit(text.str(), '\n')) {
          ++line_number;
          line = absl::StripAsciiWhitespace(line);
          if (line.empty() || absl::StartsWith(line, "#")) continue;
          if (!absl::StartsWith(line, "-") || line == "--") {
            return absl::InvalidArgumentError(absl::StrFormat(
                "--flagfile %s line %d: '%s' is not a flag; a flag file "
                "holds one --name=value a line",
                path, line_number, absl::CHexEscape(line)));
          }
          lines.emplace_back(line);
        }
        absl::Status s = ExpandInto(lines, depth + 1, out);
        if (!s.ok()) return s;
      }
      continue;
    }
    bool from_environment = false;
    for (const bool required : {true, false}) {
      const char* const flag = required ? "fromenv" : "tryfromenv";
      std::optional<std::string> names = TakeFlagValue(args, &i, flag);
      if (!names.has_value()) continue;
      from_environment = true;
      for (absl::string_view name : absl::StrSplit(*names, ',')) {
        if (name.empty()) continue;
        const std::string variable = absl::StrCat("FLAGS_", name);
        const char* value = std::getenv(variable.c_str());
        if (value == nullptr) {
          if (!required) continue;
          return absl::NotFoundError(absl::StrFormat(
              "--fromenv=%s: the environment has no %s", name, variable));
        }
        out->push_back(absl::StrCat("--", name, "=", value));
      }
      break;
    }
    if (!from_environment) out->push_back(args[i]);
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status ExpandFlagfiles(std::vector<std::string>* args) {
  std::vector<std::string> out;
  absl::Status s = ExpandInto(*args, 0, &out);
  if (!s.ok()) return s;
  *args = std::move(out);
  return absl::OkStatus();
}

absl::StatusOr<FlagSet> ScanFlags(const std::vector<std::string>& args) {
  FlagSet given;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& arg = args[i];
    if (arg == "--") break;
    if (arg.size() < 2 || arg[0] != '-') continue;
    absl::string_view body(arg);
    body.remove_prefix(arg[1] == '-' ? 2 : 1);
    const size_t eq = body.find('=');
    const bool has_value = eq != absl::string_view::npos;
    absl::string_view name = body.substr(0, eq);
    absl::string_view value = has_value ? body.substr(eq + 1) : "";
    // What the user typed, for messages: dashes as they wrote them.
    const std::string shown = absl::StrCat("--", name);

    // absl's own flags (--help, --flagfile, ...) are absl's business; they
    // are not all in the registry this build can search.
    if (IsAbslBuiltinFlag(name)) continue;
    absl::CommandLineFlag* flag = absl::FindCommandLineFlag(name);
    bool negated = false;
    if (flag == nullptr && absl::StartsWith(name, "no")) {
      flag = absl::FindCommandLineFlag(name.substr(2));
      negated = flag != nullptr && flag->IsOfType<bool>();
      if (!negated) flag = nullptr;
    }
    if (flag == nullptr || flag->IsRetired()) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "unknown flag '%s'; 'tally help' lists the commands and flags",
          shown));
    }
    std::string parse_value;
    if (flag->IsOfType<bool>()) {
      if (negated && has_value) {
        return absl::InvalidArgumentError(
            absl::StrFormat("'%s' takes no value", arg));
      }
      parse_value = negated ? "false" : has_value ? std::string(value) : "true";
    } else if (has_value) {
      parse_value = std::string(value);
    } else if (i + 1 < args.size()) {
      parse_value = args[++i];
    } else {
      return absl::InvalidArgumentError(
          absl::StrFormat("flag %s needs a value", shown));
    }
    std::string error;
    if (!flag->ParseFrom(parse_value, &error)) {
      return absl::InvalidArgumentError(
          absl::StrFormat("bad value '%s' for %s: %s",
                          absl::CHexEscape(parse_value), shown, error));
    }
    given.insert(std::string(flag->Name()));
  }
  return given;
}

void JoinFlagValues(std::vector<std::string>* args) {
  std::vector<std::string> out;
  for (size_t i = 0; i < args->size(); ++i) {
    const std::string& arg = (*args)[i];
    if (arg == "--") {
      out.insert(out.end(), args->begin() + i, args->end());
      break;
    }
    out.push_back(arg);
    if (arg.size() < 2 || arg[0] != '-' || arg.find('=') != std::string::npos)
      continue;
    absl::string_view name(arg);
    name.remove_prefix(arg[1] == '-' ? 2 : 1);
    if (IsAbslBuiltinFlag(name)) continue;
    const absl::CommandLineFlag* flag = absl::FindCommandLineFlag(name);
    if (flag == nullptr || flag->IsOfType<bool>() || i + 1 >= args->size()) {
      continue;
    }
    absl::StrAppend(&out.back(), "=", (*args)[++i]);
  }
  *args = std::move(out);
}

absl::Status CheckCommandLine(const CommandSpec& command, size_t args,
                              const FlagSet& given) {
  if (args < command.min_args || args > command.max_args) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s takes %s; got %d argument%s (usage: tally %s)", command.name,
        command.min_args == command.max_args
            ? (command.max_args == 0
                   ? std::string("no arguments")
                   : absl::StrCat(command.max_args, " argument",
                                  command.max_args == 1 ? "" : "s"))
            : absl::StrCat(command.min_args, "..", command.max_args,
                           " arguments"),
        args, args == 1 ? "" : "s", command.synopsis));
  }
  // Flags that some command owns must belong to this one: `tally get k
  // --dry-run` would otherwise silently do something else than asked.
  for (const CommandSpec& other : Commands()) {
    if (other.name == command.name) continue;
    for (absl::string_view flag : other.flags) {
      const bool mine = std::find(command.flags.begin(), command.flags.end(),
                                  flag) != command.flags.end();
      if (!mine && given.count(std::string(flag)) > 0) {
        std::string dashed(flag);
        std::replace(dashed.begin(), dashed.end(), '_', '-');
        return absl::InvalidArgumentError(
            absl::StrFormat("--%s applies to '%s', not to '%s'", dashed,
                            other.name, command.name));
      }
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<Side> ParseSide(absl::string_view source,
                               absl::string_view address_a,
                               absl::string_view address_b) {
  const bool is_a = absl::EqualsIgnoreCase(source, "a") || source == address_a;
  const bool is_b = absl::EqualsIgnoreCase(source, "b") || source == address_b;
  if (is_a && is_b) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "--source=%s names both A and B; use --source=A or --source=B",
        source));
  }
  if (is_a) return Side::kA;
  if (is_b) return Side::kB;
  return absl::InvalidArgumentError(absl::StrFormat(
      "--source must be A, B or one of the two addresses; got '%s'", source));
}

}  // namespace cli
}  // namespace tally
