// tally: the command-line tool for tally nodes.
//
//   tally put user:1 '{"name":"Ada"}'
//   tally --json get user:1
//   tally load --file=rows.jsonl
//   tally status
//   tally diff 127.0.0.1:7400 127.0.0.1:7401
//   tally repair --source=A 127.0.0.1:7400 127.0.0.1:7401
//   tally diff --third-party 127.0.0.1:7400 127.0.0.1:7401
//   tally diff 'postgresql://a/app?table=public.t' 'postgresql://b/app'
//   tally verify --data-dir=/var/lib/tally
//   tally recover --data-dir=/var/lib/tally
//
// A thin front end: the node's client library (node/client.h) does the
// talking, tree/diff.h the diffing and node/sync.h the repairing (on node A,
// through Admin.RunDiff, or here with --third-party); this file parses the
// command line and prints. Exit codes follow diff(1): 0 equal /
// success, 1 different (or `get` of an absent key, as grep's "no match";
// or a repair that leaves the nodes different), 2 trouble — always with exactly
// one "tally: ..." line on stderr.
//
// The flags live in this file because absl's --help lists the flags of the
// file named after the program.
#include <grpc/support/log.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/flags/usage_config.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "node/client.h"
#include "node/exit.h"
#include "node/replica.h"
#include "node/schema_check.h"
#include "node/sync.h"
#include "node/tls.h"
#include "node/version.h"
#include "storage/store.h"
#include "tools/cli/args.h"
#include "tools/cli/format.h"
#include "tools/cli/jsonl.h"
#include "tools/cli/pg_diff.h"
#include "tools/cli/pg_url.h"
#include "tools/cli/status.h"
#include "tools/cli/synthetic.h"
#include "tree/absent_as_empty_view.h"
#include "tree/diff.h"
#include "tree/merkle_tree.h"
#include "tree/status_macros.h"

ABSL_FLAG(std::string, node, "127.0.0.1:7400",
          "HOST:PORT of the node that put, get, del, load and status talk "
          "to.");
ABSL_FLAG(std::string, keyspace, "default",
          "Keyspace for put, get, del, load, diff and repair.");
ABSL_FLAG(bool, json, false,
          "Machine-readable output: one JSON object per line.");
ABSL_FLAG(double, timeout, 30,
          "Deadline of each call to a node, in seconds. Streams (load, "
          "scans) get at least 30 minutes in total.");
ABSL_FLAG(bool, escaped, false,
          "put, get, del: KEY and VALUE are C-escaped, as diff prints keys "
          "(\\x00\\xff, \\n), so that any bytes can be given.");
ABSL_FLAG(std::string, file, "",
          "load: JSON Lines file, one {\"key\": ..., \"value\": ...} per "
          "line; - reads standard input. Read once, as the rows are sent: a "
          "bad line stops the load there, and the error says how many rows "
          "were loaded.");
ABSL_FLAG(uint64_t, count, 0,
          "load: number of synthetic rows key-0..key-<N-1> to load.");
ABSL_FLAG(uint64_t, seed, 1,
          "load --count: seed of the synthetic values; the same seed loads "
          "the same rows.");
ABSL_FLAG(uint64_t, value_size, 100,
          "load --count: bytes per synthetic value.");
ABSL_FLAG(std::string, source, "",
          "repair: A or B (or its address): the authoritative node. The "
          "other becomes an exact copy of it, extra rows erased. Without "
          "it, repair is two-way, last writer wins.");
ABSL_FLAG(bool, dry_run, false,
          "repair: print what would change, per key, and change nothing.");
ABSL_FLAG(bool, third_party, false,
          "diff, repair: run them from here, asking both nodes for their "
          "trees (and moving the rows through this tool), instead of asking "
          "node A to diff against B itself: for nodes that cannot reach "
          "each other. Used anyway when A cannot reach B or is an older "
          "tallyd.");
ABSL_FLAG(std::vector<std::string>, table, {},
          "diff, repair of two PostgreSQL URLs: the tables to compare; verify "
          "of a sidecar: the tables to verify; "
          "SCHEMA.TABLE, comma separated or repeated (or table= in the "
          "URLs; default: every table with a primary key).");
ABSL_FLAG(std::string, data_dir, "",
          "verify, recover: data directory of a stopped node (verify without "
          "it asks a running PostgreSQL sidecar, --node).");
ABSL_FLAG(std::string, tls_cert, "",
          "PEM client certificate to present to nodes (with --tls-key); "
          "needed by nodes that run mutual TLS (--tls-ca).");
ABSL_FLAG(std::string, tls_key, "", "PEM private key of --tls-cert.");
ABSL_FLAG(std::string, tls_ca, "",
          "PEM CA to check nodes' certificates against. Any --tls-* flag "
          "makes every connection TLS; without --tls-ca the system's roots "
          "check the node.");

namespace tally {
namespace cli {
namespace {

// What every command gets from the command line.
struct Context {
  std::vector<std::string> args;  // positional arguments after the command
  FlagSet given;                  // flags given on the command line
  std::string keyspace;
  bool json = false;
  node::ClientOptions client_options;
  node::TlsFiles tls;  // what client_options.credentials were made of
};

// Commands return their exit code (0 or 1); an error status means exit 2
// with its message as the one line on stderr.
using CommandResult = absl::StatusOr<int>;

constexpr int kTrouble = 2;

void PrintJson(const Json& value) { std::cout << DumpJson(value) << "\n"; }

// Rewrites one line on stderr — only when stderr is a terminal, so that
// logs and pipes never see carriage returns.
class ProgressLine {
 public:
  ProgressLine() : enabled_(isatty(STDERR_FILENO) == 1) {}
  ProgressLine(const ProgressLine&) = delete;
  ProgressLine& operator=(const ProgressLine&) = delete;
  ~ProgressLine() { Clear(); }

  bool enabled() const { return enabled_; }

  // At most ten updates a second: a terminal is slower than a fast repair.
  void Update(const std::string& text) {
    if (!enabled_) return;
    const absl::Time now = absl::Now();
    if (now - last_ < absl::Milliseconds(100)) return;
    last_ = now;
    std::fprintf(stderr, "\r%s\033[K", text.c_str());
    std::fflush(stderr);
    shown_ = true;
  }

  void Clear() {
    if (!shown_) return;
    std::fprintf(stderr, "\r\033[K");
    std::fflush(stderr);
    shown_ = false;
  }

 private:
  const bool enabled_;
  bool shown_ = false;
  absl::Time last_ = absl::InfinitePast();
};

absl::Status CheckKeyspace(const Context& ctx) {
  absl::Status s = storage::ValidateKeyspaceName(ctx.keyspace);
  if (!s.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("bad --keyspace: ", s.message()));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<node::NodeClient>> Connect(
    const Context& ctx, const std::string& address) {
  absl::Status valid = node::ValidateAddress(address);
  if (!valid.ok()) {
    return absl::InvalidArgumentError(
        absl::StrFormat("bad node address '%s': %s", absl::CHexEscape(address),
                        valid.message()));
  }
  return node::NodeClient::Connect(address, ctx.client_options);
}

// The client's errors already name the node and the call; a deadline
// additionally says which knob sets it, and a refused TLS handshake which
// --tls-* setting is the likely cause.
absl::Status CallFailed(const Context& ctx, const absl::Status& s) {
  if (s.code() == absl::StatusCode::kUnavailable) {
    return node::ExplainTlsFailure(s, ctx.tls);
  }
  if (s.code() != absl::StatusCode::kDeadlineExceeded) return s;
  return absl::Status(
      s.code(),
      absl::StrFormat("%s (--timeout=%s)", s.message(),
                      absl::FormatDuration(ctx.client_options.rpc_timeout)));
}

tree::Version VersionOf(const v1::Version& proto) {
  return tree::Version{tree::HlcTimestamp::FromRaw(proto.hlc()),
                       proto.origin()};
}

// The summary of `keyspace` on a node, or nullopt when the node lacks it.
absl::StatusOr<std::optional<v1::KeyspaceSummary>> FindKeyspace(
    const Context& ctx, node::NodeClient& client, const std::string& keyspace) {
  absl::StatusOr<v1::HandshakeResponse> r = client.Handshake({keyspace}, 0);
  if (absl::IsNotFound(r.status())) return std::nullopt;
  if (!r.ok()) return CallFailed(ctx, r.status());
  for (const v1::KeyspaceSummary& ks : r->keyspaces()) {
    if (ks.name() == keyspace) return ks;
  }
  return std::nullopt;
}

// FAILED_PRECONDITION when the backends of nodes `a` and `b` give
// ctx.keyspace different schema fingerprints (node/schema_check.h): its
// rows are then neither compared nor copied. OK when either lacks it.
absl::Status CheckSchemas(const Context& ctx, node::NodeClient& a,
                          node::NodeClient& b) {
  TALLY_ASSIGN_OR_RETURN(std::optional<v1::KeyspaceSummary> in_a,
                         FindKeyspace(ctx, a, ctx.keyspace));
  TALLY_ASSIGN_OR_RETURN(std::optional<v1::KeyspaceSummary> in_b,
                         FindKeyspace(ctx, b, ctx.keyspace));
  if (!in_a.has_value() || !in_b.has_value()) return absl::OkStatus();
  return node::CheckSchema(
      ctx.keyspace,
      node::SchemaOf{a.address(), in_a->schema_fingerprint(),
                     in_a->schema_description()},
      node::SchemaOf{b.address(), in_b->schema_fingerprint(),
                     in_b->schema_description()});
}

// ------------------------------------------------------------ put, get, del

// Positional argument `i` as bytes: as typed, or unescaped with --escaped
// (a shell cannot pass a NUL byte any other way).
absl::StatusOr<std::string> ArgBytes(const Context& ctx, size_t i,
                                     absl::string_view what) {
  if (!absl::GetFlag(FLAGS_escaped)) return ctx.args[i];
  std::string out;
  std::string error;
  if (!absl::CUnescape(ctx.args[i], &out, &error)) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "--escaped: %s '%s' is not a valid C-escaped string: %s", what,
        ctx.args[i], error));
  }
  return out;
}

// Positional arguments [first, last) as bytes (ArgBytes each): the key as
// a PostgreSQL table takes it, one text value per primary-key column.
absl::StatusOr<std::vector<std::string>> KeyValues(const Context& ctx,
                                                   size_t first, size_t last) {
  std::vector<std::string> values;
  for (size_t i = first; i < last; ++i) {
    TALLY_ASSIGN_OR_RETURN(std::string v, ArgBytes(ctx, i, "KEY"));
    values.push_back(std::move(v));
  }
  return values;
}

std::string KeyValuesText(const std::vector<std::string>& key) {
  std::vector<std::string> escaped;
  for (const std::string& v : key) escaped.push_back(absl::CHexEscape(v));
  return absl::StrCat("(", absl::StrJoin(escaped, ", "), ")");
}

// A PostgreSQL table's row (GetResponse.row_json) as JSON, or the text when
// it does not parse (it always should).
Json RowJson(const std::string& text) {
  Json row = Json::parse(text, nullptr, /*allow_exceptions=*/false);
  return row.is_discarded() ? Json(text) : row;
}

// put KEY VALUE, or for a PostgreSQL table put KEY... JSON: the node
// answers for the form its keyspace takes (tally.proto PutRequest).
CommandResult Put(const Context& ctx) {
  TALLY_RETURN_IF_ERROR(CheckKeyspace(ctx));
  const size_t value_arg = ctx.args.size() - 1;
  TALLY_ASSIGN_OR_RETURN(const std::string key, ArgBytes(ctx, 0, "KEY"));
  TALLY_ASSIGN_OR_RETURN(const std::vector<std::string> key_values,
                         KeyValues(ctx, 0, value_arg));
  TALLY_ASSIGN_OR_RETURN(const std::string value,
                         ArgBytes(ctx, value_arg, "VALUE"));
  TALLY_ASSIGN_OR_RETURN(auto client, Connect(ctx, absl::GetFlag(FLAGS_node)));
  absl::StatusOr<v1::PutResponse> r =
      client->Put(ctx.keyspace, key, value, key_values);
  if (!r.ok()) return CallFailed(ctx, r.status());
  if (r->postgres()) {
    if (ctx.json) {
      PrintJson({{"keyspace", ctx.keyspace},
                 {"key", key_values},
                 {"postgres", true}});
    } else {
      std::cout << absl::StrFormat(
          "put %s in table %s: written to PostgreSQL (its version is "
          "stamped when the sidecar captures it)\n",
          KeyValuesText(key_values), ctx.keyspace);
    }
    return 0;
  }
  const tree::Version version = VersionOf(r->version());
  if (ctx.json) {
    Json out = Json::object();
    SetBytesField(out, "key", key);
    out["keyspace"] = ctx.keyspace;
    out["version"] = VersionJson(version);
    PrintJson(out);
  } else {
    std::cout << absl::StrFormat("put '%s' in keyspace '%s': version %s\n",
                                 absl::CHexEscape(key), ctx.keyspace,
                                 VersionText(version));
  }
  return 0;
}

CommandResult Delete(const Context& ctx) {
  TALLY_RETURN_IF_ERROR(CheckKeyspace(ctx));
  TALLY_ASSIGN_OR_RETURN(const std::string key, ArgBytes(ctx, 0, "KEY"));
  TALLY_ASSIGN_OR_RETURN(const std::vector<std::string> key_values,
                         KeyValues(ctx, 0, ctx.args.size()));
  TALLY_ASSIGN_OR_RETURN(auto client, Connect(ctx, absl::GetFlag(FLAGS_node)));
  absl::StatusOr<v1::DeleteResponse> r =
      client->Delete(ctx.keyspace, key, key_values);
  if (!r.ok()) return CallFailed(ctx, r.status());
  if (r->postgres()) {
    if (ctx.json) {
      PrintJson({{"keyspace", ctx.keyspace},
                 {"key", key_values},
                 {"postgres", true},
                 {"deleted", true}});
    } else {
      std::cout << absl::StrFormat(
          "deleted %s from table %s in PostgreSQL (the sidecar captures the "
          "delete as a tombstone)\n",
          KeyValuesText(key_values), ctx.keyspace);
    }
    return 0;
  }
  const tree::Version version = VersionOf(r->version());
  if (ctx.json) {
    Json out = Json::object();
    SetBytesField(out, "key", key);
    out["keyspace"] = ctx.keyspace;
    out["version"] = VersionJson(version);
    out["deleted"] = true;
    PrintJson(out);
  } else {
    std::cout << absl::StrFormat(
        "deleted '%s' in keyspace '%s': tombstone version %s\n",
        absl::CHexEscape(key), ctx.keyspace, VersionText(version));
  }
  return 0;
}

CommandResult Get(const Context& ctx) {
  TALLY_RETURN_IF_ERROR(CheckKeyspace(ctx));
  TALLY_ASSIGN_OR_RETURN(const std::string key, ArgBytes(ctx, 0, "KEY"));
  TALLY_ASSIGN_OR_RETURN(const std::vector<std::string> key_values,
                         KeyValues(ctx, 0, ctx.args.size()));
  TALLY_ASSIGN_OR_RETURN(auto client, Connect(ctx, absl::GetFlag(FLAGS_node)));
  absl::StatusOr<v1::GetResponse> r =
      client->Get(ctx.keyspace, key, key_values);
  if (absl::IsNotFound(r.status()) &&
      absl::StrContains(r.status().message(), ": no row with key (")) {
    // A PostgreSQL table answers for itself (node/table_rows.h): the
    // table exists and the row does not.
    std::fprintf(stderr, "tally: %s\n",
                 std::string(r.status().message()).c_str());
    return 1;
  }
  if (absl::IsNotFound(r.status())) {
    // kNotFound covers an absent keyspace too; that is a mistake in the
    // command line (exit 2), an absent key is an answer (exit 1).
    TALLY_ASSIGN_OR_RETURN(std::optional<v1::KeyspaceSummary> ks,
                           FindKeyspace(ctx, *client, ctx.keyspace));
    if (!ks.has_value()) {
      return absl::NotFoundError(
          absl::StrFormat("keyspace '%s' does not exist on %s", ctx.keyspace,
                          client->address()));
    }
    std::fprintf(stderr, "tally: key '%s' not found in keyspace '%s'\n",
                 absl::CHexEscape(key).c_str(), ctx.keyspace.c_str());
    return 1;
  }
  if (!r.ok()) return CallFailed(ctx, r.status());
  if (!r->has_row()) {
    // A PostgreSQL table's row, as the table holds it now.
    if (ctx.json) {
      PrintJson({{"keyspace", ctx.keyspace},
                 {"key", key_values},
                 {"row", RowJson(r->row_json())}});
    } else {
      std::cout << r->row_json() << "\n";
    }
    return 0;
  }
  const v1::Row& row = r->row();
  const tree::Version version = VersionOf(row.version());
  if (ctx.json) {
    Json out = Json::object();
    SetBytesField(out, "key", row.key());
    SetBytesField(out, "value", row.value());
    out["version"] = VersionJson(version);
    out["deleted"] = row.deleted();
    PrintJson(out);
  } else if (!row.deleted()) {
    // The value exactly as stored, so that $(tally get k) is the value.
    std::cout << row.value() << "\n";
  }
  if (row.deleted()) {
    std::fprintf(stderr,
                 "tally: key '%s' in keyspace '%s' was deleted (version %s)\n",
                 absl::CHexEscape(key).c_str(), ctx.keyspace.c_str(),
                 VersionText(version).c_str());
    return 1;
  }
  return 0;
}

// -------------------------------------------------------------------- load

CommandResult Load(const Context& ctx) {
  TALLY_RETURN_IF_ERROR(CheckKeyspace(ctx));
  const bool from_file = ctx.given.count("file") > 0;
  const bool synthetic = ctx.given.count("count") > 0;
  if (from_file == synthetic) {
    return absl::InvalidArgumentError(
        "load needs exactly one of --file=FILE.jsonl (or - for standard "
        "input) or --count=N");
  }
  if (from_file &&
      (ctx.given.count("seed") > 0 || ctx.given.count("value_size") > 0)) {
    return absl::InvalidArgumentError(
        "--seed and --value-size apply to load --count, not to --file");
  }
  const std::string path = absl::GetFlag(FLAGS_file);
  const uint64_t count = absl::GetFlag(FLAGS_count);
  // The input is read once, as it is sent: a pipe (`--file -`,
  // /dev/stdin, a FIFO) cannot be read twice, and a file checked first could
  // change before the second read. So a bad line cannot stop the load before
  // the rows ahead of it are sent; it stops it there, and the error says how
  // many rows went in. Loading a row again writes the same value, so fixing
  // the line and loading the whole input again is safe.
  std::ifstream file;
  std::optional<JsonlReader> reader;
  std::optional<SyntheticRows> rows;
  std::string input;  // the file's name in messages
  if (from_file) {
    if (path.empty()) return absl::InvalidArgumentError("--file is empty");
    if (path == "-") {
      input = "standard input";
      // std::cin reads a closed descriptor or a directory as an empty
      // input: "loaded 0 rows", exit 0.
      struct stat st;
      if (fstat(STDIN_FILENO, &st) != 0) {
        return absl::InvalidArgumentError(
            absl::StrFormat("--file -: standard input cannot be read: %s",
                            std::strerror(errno)));
      }
      if (S_ISDIR(st.st_mode)) {
        return absl::InvalidArgumentError(
            "--file -: standard input is a directory; give a JSON Lines "
            "file");
      }
      reader.emplace(&std::cin);
    } else {
      input = path;
      // An ifstream opens a directory and reads it as empty: 0 rows, exit 0.
      std::error_code ec;
      if (std::filesystem::is_directory(path, ec)) {
        return absl::InvalidArgumentError(absl::StrFormat(
            "--file %s is a directory; give a JSON Lines file, or - for "
            "standard input",
            path));
      }
      file.open(path);
      if (!file) {
        return absl::NotFoundError(
            absl::StrFormat("cannot open %s: %s", path, std::strerror(errno)));
      }
      reader.emplace(&file);
    }
  } else {
    rows.emplace(count, absl::GetFlag(FLAGS_seed),
                 absl::GetFlag(FLAGS_value_size));
  }

  TALLY_ASSIGN_OR_RETURN(auto client, Connect(ctx, absl::GetFlag(FLAGS_node)));
  // Load's row source cannot fail: a bad line ends the stream early (what
  // was sent is committed), and the error is reported afterwards.
  absl::Status read_error;
  uint64_t sent = 0;
  ProgressLine progress;
  const absl::Time start = absl::Now();
  absl::StatusOr<v1::LoadResponse> r =
      client->Load(ctx.keyspace, [&](std::string* key, std::string* value) {
        bool more;
        if (reader.has_value()) {
          KeyValue row;
          absl::StatusOr<bool> next = reader->Next(&row);
          if (!next.ok()) read_error = next.status();
          more = next.ok() && *next;
          if (more) {
            *key = std::move(row.key);
            *value = std::move(row.value);
          }
        } else {
          more = rows->Next(key, value);
        }
        if (more && ++sent % 1024 == 0) {
          progress.Update(
              rows.has_value()
                  ? absl::StrFormat("load: %d of %d rows sent (%.0f%%)", sent,
                                    count, 100.0 * sent / count)
                  : absl::StrFormat("load: %d rows sent", sent));
        }
        return more;
      });
  progress.Clear();
  const double seconds = absl::ToDoubleSeconds(absl::Now() - start);
  // std::cin (synchronised with stdio) ends at a read error as at the end
  // of the input; only stdin's error flag tells them apart.
  if (read_error.ok() && path == "-" && from_file && std::ferror(stdin)) {
    read_error = absl::UnavailableError(
        absl::StrCat("read error after line ", reader->line_number()));
  }
  if (!r.ok()) {
    // A node that refused a message says itself what the earlier ones
    // committed (node/internal/write_stream.h); only a call lost on the way
    // (the node or the link died) leaves the client not knowing.
    const absl::StatusCode code = r.status().code();
    const bool lost = code == absl::StatusCode::kUnavailable ||
                      code == absl::StatusCode::kDeadlineExceeded ||
                      code == absl::StatusCode::kCancelled ||
                      code == absl::StatusCode::kUnknown ||
                      code == absl::StatusCode::kInternal;
    if (sent == 0 || !lost) return CallFailed(ctx, r.status());
    return absl::Status(
        r.status().code(),
        absl::StrFormat("%s; some of the %d rows sent may have been written "
                        "(loading again is safe)",
                        CallFailed(ctx, r.status()).message(), sent));
  }
  if (!read_error.ok()) {
    return absl::Status(
        read_error.code(),
        absl::StrFormat("%s %s; the load stopped there: the %d rows before it "
                        "were loaded into keyspace '%s' (fix the input and "
                        "load it again; loading a row twice is harmless)",
                        input, read_error.message(), r->rows(), ctx.keyspace));
  }
  // Never "success" for fewer rows than were read.
  const uint64_t expected = rows.has_value() ? count : sent;
  if (r->rows() != expected || sent != expected) {
    return absl::DataLossError(absl::StrFormat(
        "read %d rows from %s but the node loaded %d into keyspace '%s'; load "
        "again",
        sent, rows.has_value() ? "the synthetic source" : input, r->rows(),
        ctx.keyspace));
  }
  const double rate = seconds > 0 ? r->rows() / seconds : 0;
  if (ctx.json) {
    Json out = Json::object();
    out["keyspace"] = ctx.keyspace;
    out["rows"] = r->rows();
    out["seconds"] = seconds;
    out["rows_per_second"] = rate;
    PrintJson(out);
  } else {
    std::cout << absl::StrFormat(
        "loaded %d rows into keyspace '%s' on %s in %.2f s (%.0f rows/s)\n",
        r->rows(), ctx.keyspace, client->address(), seconds, rate);
  }
  return 0;
}

// ------------------------------------------------------------------ status

CommandResult Status(const Context& ctx) {
  TALLY_ASSIGN_OR_RETURN(auto client, Connect(ctx, absl::GetFlag(FLAGS_node)));
  absl::StatusOr<v1::StatusResponse> r = client->Status();
  if (!r.ok()) return CallFailed(ctx, r.status());
  if (ctx.json) {
    PrintJson(StatusJson(*r, client->address()));
  } else {
    std::cout << StatusText(*r, client->address(), absl::Now());
  }
  return 0;
}

// ---------------------------------------------------------- diff and repair
//
// Both run in one of two ways, with the same output, JSON and exit codes:
//  - on node A (the default): A is asked (Admin.RunDiff) to diff against B
//    itself and streams the differences, the repair's progress and the
//    summary back; the tool needs a link to A only, and the nodes' traffic
//    is one answer per exchange, a session's;
//  - from here (--third-party): the tool asks both nodes for their trees
//    and, for a repair, moves the rows itself: for nodes that cannot reach
//    each other. Used anyway, with a note on stderr, when A answers that it
//    cannot reach B or that it has no RunDiff (an older tallyd). A diff that
//    A has begun to stream is never run again from here.

// Why a RunDiff on A is run from here instead, or nullopt when it is not:
// only before A streamed anything, and only when A could not reach B or
// does not know the call.
std::optional<std::string> FallbackReason(const absl::Status& status,
                                          bool streamed, const std::string& a) {
  if (status.ok() || streamed) return std::nullopt;
  if (absl::IsUnimplemented(status)) {
    return absl::StrFormat("node %s has no RunDiff (an older tallyd)", a);
  }
  // A refuses to diff against itself (B names A, by its address or under
  // its name); from here the two are compared as before: equal.
  if (node::PeerIsSelf(status)) {
    return absl::StrFormat("node %s and B are the same node", a);
  }
  if (absl::IsUnavailable(status) && node::UnreachablePeer(status)) {
    return std::string(
        status.message());  // "node A (name) cannot reach B: ..."
  }
  return std::nullopt;
}

// The fallback's note goes on stderr once the run from here is over: as a
// line of its own after a success, within the one error line after a
// failure.
CommandResult WithFallbackNote(const std::optional<std::string>& reason,
                               CommandResult result) {
  if (!reason.has_value()) return result;
  if (!result.ok()) {
    return absl::Status(
        result.status().code(),
        absl::StrCat(result.status().message(), " (ran it from here because ",
                     *reason, ")"));
  }
  std::fprintf(stderr, "tally: %s; ran it from here instead\n",
               reason->c_str());
  return result;
}

// One side of a difference as A streamed it.
tree::RowEntry EntryOf(const std::string& key, const v1::DiffSide& side) {
  tree::RowEntry entry;
  entry.key = key;
  entry.version = VersionOf(side.version());
  entry.deleted = side.deleted();
  return entry;
}

// Connects to A only and waits for the connection, so that its set-up is
// not inside the diff's timing.
absl::StatusOr<std::unique_ptr<node::NodeClient>> ConnectToA(
    const Context& ctx) {
  constexpr absl::Duration kConnectWait = absl::Seconds(3);
  TALLY_ASSIGN_OR_RETURN(auto a, Connect(ctx, ctx.args[0]));
  a->AwaitConnection(std::min(ctx.client_options.rpc_timeout, kConnectWait));
  return a;
}

// -------------------------------------------------------------------- diff

Json DiffStatsJson(const tree::DiffStats& stats, double seconds) {
  return {{"differences", stats.differences},
          {"rounds", stats.rounds},
          {"bytes_sent", stats.bytes_sent},
          {"bytes_received", stats.bytes_received},
          {"seconds", seconds}};
}

std::string DiffStatsText(const tree::DiffStats& stats) {
  return absl::StrFormat("%d round%s, %s sent, %s received", stats.rounds,
                         stats.rounds == 1 ? "" : "s",
                         HumanBytes(stats.bytes_sent),
                         HumanBytes(stats.bytes_received));
}

tree::DiffStats DiffStatsOf(const v1::RunDiffSummary& summary) {
  tree::DiffStats stats;
  stats.differences = summary.differences();
  stats.rounds = summary.rounds();
  stats.bytes_sent = summary.bytes_sent();
  stats.bytes_received = summary.bytes_received();
  return stats;
}

// Sets up both connections at once and before the first round, so that a
// diff's rounds and its timing do not include them. A node that cannot be
// reached is reported by the first call, as without this; a link that
// swallows packets delays that report by at most kConnectWait.
void ConnectBoth(const Context& ctx, node::NodeClient& a, node::NodeClient& b) {
  constexpr absl::Duration kConnectWait = absl::Seconds(3);
  const absl::Duration wait =
      std::min(ctx.client_options.rpc_timeout, kConnectWait);
  a.StartConnecting();
  b.StartConnecting();
  a.AwaitConnection(wait);
  b.AwaitConnection(wait);
}

// `tally diff URL URL` / `tally repair URL URL`: two PostgreSQL databases
// compared directly (tools/cli/pg_diff.h), no node involved.
std::optional<CommandResult> MaybePostgres(const Context& ctx, bool repair) {
  const bool url_a = IsPostgresUrl(ctx.args[0]);
  const bool url_b = IsPostgresUrl(ctx.args[1]);
  if (!url_a && !url_b) return std::nullopt;
  if (url_a != url_b) {
    return CommandResult(absl::InvalidArgumentError(
        "give two PostgreSQL URLs or two node addresses, not one of each"));
  }
  PgDiffOptions options;
  options.url_a = ctx.args[0];
  options.url_b = ctx.args[1];
  options.tables = absl::GetFlag(FLAGS_table);
  options.json = ctx.json;
  options.timeout = ctx.client_options.rpc_timeout;
  options.repair = repair;
  options.source = absl::GetFlag(FLAGS_source);
  options.dry_run = absl::GetFlag(FLAGS_dry_run);
  return RunPgDiff(options);
}

// What a diff found, wherever it ran.
struct DiffOutcome {
  tree::DiffStats stats;
  double seconds = 0;
  bool a_absent = false;
  bool b_absent = false;
};

void PrintDifference(const Context& ctx, const tree::RowEntry* in_a,
                     const tree::RowEntry* in_b) {
  if (ctx.json) {
    PrintJson(DifferenceJson(in_a, in_b));
  } else {
    std::cout << DifferenceText(in_a, in_b) << "\n";
  }
}

// The diff from here: both nodes' trees, compared by this process.
absl::StatusOr<DiffOutcome> DiffFromHere(const Context& ctx) {
  TALLY_ASSIGN_OR_RETURN(auto a, Connect(ctx, ctx.args[0]));
  TALLY_ASSIGN_OR_RETURN(auto b, Connect(ctx, ctx.args[1]));
  ConnectBoth(ctx, *a, *b);
  TALLY_RETURN_IF_ERROR(CheckSchemas(ctx, *a, *b));
  // "A has 10 rows, B has none" is a diff, not an error.
  tree::AbsentAsEmptyView view_a(a->NewTreeView(ctx.keyspace));
  tree::AbsentAsEmptyView view_b(b->NewTreeView(ctx.keyspace));
  DiffOutcome outcome;
  const absl::Time start = absl::Now();
  absl::Status status = tree::DiffViews(
      view_a, view_b, tree::DiffOptions{},
      [&](const tree::RowEntry* in_a, const tree::RowEntry* in_b) {
        PrintDifference(ctx, in_a, in_b);
        return absl::OkStatus();
      },
      &outcome.stats);
  outcome.seconds = absl::ToDoubleSeconds(absl::Now() - start);
  std::cout.flush();
  if (!status.ok()) return CallFailed(ctx, status);
  outcome.a_absent = view_a.absent();
  outcome.b_absent = view_b.absent();
  return outcome;
}

// The diff on A, or nullopt with `*fallback` set when it is to run from
// here instead.
absl::StatusOr<std::optional<DiffOutcome>> DiffOnA(
    const Context& ctx, std::optional<std::string>* fallback) {
  TALLY_ASSIGN_OR_RETURN(auto a, ConnectToA(ctx));
  v1::RunDiffRequest request;
  request.set_peer(ctx.args[1]);
  request.set_keyspace(ctx.keyspace);
  request.set_mode(v1::RUN_DIFF_MODE_DIFF);
  bool streamed = false;
  std::optional<v1::RunDiffSummary> summary;
  const absl::Status status = a->RunDiff(request, [&](v1::RunDiffEvent& e) {
    streamed = true;
    for (const v1::DiffDifference& d : e.differences()) {
      const tree::RowEntry in_a = EntryOf(d.key(), d.a());
      const tree::RowEntry in_b = EntryOf(d.key(), d.b());
      PrintDifference(ctx, d.has_a() ? &in_a : nullptr,
                      d.has_b() ? &in_b : nullptr);
    }
    if (e.has_summary()) summary = e.summary();
    return absl::OkStatus();
  });
  std::cout.flush();
  *fallback = FallbackReason(status, streamed, a->address());
  if (fallback->has_value()) return std::optional<DiffOutcome>();
  if (!status.ok()) return CallFailed(ctx, status);
  if (!summary.has_value()) {
    return absl::DataLossError(absl::StrFormat(
        "node %s ended the diff without its summary", a->address()));
  }
  DiffOutcome outcome;
  outcome.stats = DiffStatsOf(*summary);
  outcome.seconds = summary->seconds();
  outcome.a_absent = !summary->a_has_keyspace();
  outcome.b_absent = !summary->b_has_keyspace();
  return std::optional<DiffOutcome>(outcome);
}

CommandResult PrintDiff(const Context& ctx, const DiffOutcome& outcome) {
  const std::string& a = ctx.args[0];
  const std::string& b = ctx.args[1];
  if (outcome.a_absent && outcome.b_absent) {
    return tree::KeyspaceAbsentOnBoth(ctx.keyspace, a, b);
  }
  const tree::DiffStats& stats = outcome.stats;
  if (ctx.json) {
    Json summary = DiffStatsJson(stats, outcome.seconds);
    summary["keyspace"] = ctx.keyspace;
    summary["a_has_keyspace"] = !outcome.a_absent;
    summary["b_has_keyspace"] = !outcome.b_absent;
    PrintJson({{"summary", summary}});
  } else {
    std::string absent;
    if (outcome.a_absent || outcome.b_absent) {
      absent = absl::StrFormat("; keyspace absent on %s, compared as empty",
                               outcome.a_absent ? "a" : "b");
    }
    std::cout << absl::StrFormat(
        "%s: keyspace '%s' on a=%s and b=%s (%s, %.3f s%s)\n",
        stats.differences == 0
            ? std::string("equal")
            : absl::StrCat(stats.differences, stats.differences == 1
                                                  ? " key differs"
                                                  : " keys differ"),
        ctx.keyspace, a, b, DiffStatsText(stats), outcome.seconds, absent);
  }
  return stats.differences == 0 ? 0 : 1;
}

CommandResult Diff(const Context& ctx) {
  if (auto pg = MaybePostgres(ctx, /*repair=*/false)) return *std::move(pg);
  TALLY_RETURN_IF_ERROR(CheckKeyspace(ctx));
  // Both addresses are checked here, whichever node dials B.
  for (const std::string& address : ctx.args) {
    TALLY_RETURN_IF_ERROR(Connect(ctx, address).status());
  }
  std::optional<std::string> fallback;
  if (!absl::GetFlag(FLAGS_third_party)) {
    TALLY_ASSIGN_OR_RETURN(std::optional<DiffOutcome> on_a,
                           DiffOnA(ctx, &fallback));
    if (on_a.has_value()) return PrintDiff(ctx, *on_a);
  }
  absl::StatusOr<DiffOutcome> here = DiffFromHere(ctx);
  if (!here.ok()) return WithFallbackNote(fallback, here.status());
  return WithFallbackNote(fallback, PrintDiff(ctx, *here));
}

// ------------------------------------------------------------------ repair

// Set by the first Ctrl-C during a repair: the sync stops between batches,
// so that no batch is left half applied on the way out.
std::atomic<bool> interrupted{false};

extern "C" void OnInterrupt(int) {
  interrupted.store(true);
  std::signal(SIGINT, SIG_DFL);  // a second Ctrl-C ends the process at once
}

// A keyspace's root on a node after a repair.
struct Root {
  std::string hex = std::string(32, '0');
  uint64_t rows = 0;
  bool present = false;
};

// What a repair is asked to do, in the user's terms (A and B as given).
struct RepairPlan {
  bool one_way = false;
  bool dry_run = false;
  bool source_is_b = false;  // with one_way: B is the source, A the copy
  std::string source_label() const { return source_is_b ? "B" : "A"; }
  std::string copy_label() const { return source_is_b ? "A" : "B"; }
};

// What a repair did (a dry run: would do), wherever it ran; A and B as the
// user named them.
struct RepairOutcome {
  node::SyncStats stats;  // rows_to_a and rows_to_b unused: see below
  uint64_t to_a = 0;
  uint64_t to_b = 0;
  uint64_t would_copy_to_a = 0;
  uint64_t would_copy_to_b = 0;
  uint64_t would_erase = 0;
  Root root_a;
  Root root_b;
};

// Prints one key a dry run would change, and counts it.
void PrintPlanned(const Context& ctx, const tree::RowEntry* in_a,
                  const tree::RowEntry* in_b, v1::DiffAction action,
                  RepairOutcome* outcome) {
  std::string name;  // JSON
  std::string what;  // text
  switch (action) {
    case v1::DIFF_ACTION_COPY_TO_A:
      name = "copy_to_a";
      what = "would copy to A";
      ++outcome->would_copy_to_a;
      break;
    case v1::DIFF_ACTION_COPY_TO_B:
      name = "copy_to_b";
      what = "would copy to B";
      ++outcome->would_copy_to_b;
      break;
    case v1::DIFF_ACTION_ERASE_FROM_A:
      name = "erase_from_a";
      what = "would erase from A";
      ++outcome->would_erase;
      break;
    case v1::DIFF_ACTION_ERASE_FROM_B:
      name = "erase_from_b";
      what = "would erase from B";
      ++outcome->would_erase;
      break;
    default:
      name = "conflict";  // SyncStats counts these, dry run or not
      what = "conflict (left alone)";
      break;
  }
  if (ctx.json) {
    Json line = DifferenceJson(in_a, in_b);
    line["action"] = name;
    PrintJson(line);
  } else {
    std::cout << absl::StrFormat("%-22s %s\n", what,
                                 DifferenceText(in_a, in_b, "A", "B"));
  }
}

void ShowProgress(ProgressLine& progress, uint64_t differences, uint64_t to_a,
                  uint64_t to_b) {
  progress.Update(absl::StrFormat(
      "repair: %d differences found, %d rows copied to A, %d to B", differences,
      to_a, to_b));
}

absl::Status RepairFailed(const Context& ctx, const RepairPlan& plan,
                          const absl::Status& status) {
  if (absl::IsNotFound(status)) return status;
  return absl::Status(
      status.code(),
      absl::StrFormat("repair of keyspace '%s' %s: %s%s", ctx.keyspace,
                      interrupted.load() ? "interrupted" : "failed",
                      CallFailed(ctx, status).message(),
                      plan.dry_run ? ""
                                   : "; rows repaired so far stay repaired, "
                                     "run it again to finish"));
}

// The repair from here: both nodes as remote replicas of this process.
absl::StatusOr<RepairOutcome> RepairFromHere(const Context& ctx,
                                             const RepairPlan& plan) {
  TALLY_ASSIGN_OR_RETURN(auto client_a, Connect(ctx, ctx.args[0]));
  TALLY_ASSIGN_OR_RETURN(auto client_b, Connect(ctx, ctx.args[1]));
  ConnectBoth(ctx, *client_a, *client_b);
  TALLY_RETURN_IF_ERROR(CheckSchemas(ctx, *client_a, *client_b));

  // The sync's `a` is the source; the user's A and B keep their names in
  // everything printed.
  const bool swapped = plan.one_way && plan.source_is_b;
  node::NodeClient* sync_a = swapped ? client_b.get() : client_a.get();
  node::NodeClient* sync_b = swapped ? client_a.get() : client_b.get();
  std::unique_ptr<node::Replica> replica_a = node::NewRemoteReplica(sync_a);
  std::unique_ptr<node::Replica> replica_b = node::NewRemoteReplica(sync_b);

  RepairOutcome outcome;
  ProgressLine progress;
  node::SyncOptions options;
  options.keyspace = ctx.keyspace;
  options.a_is_source = plan.one_way;
  options.dry_run = plan.dry_run;
  options.cancelled = &interrupted;
  if (plan.dry_run) {
    options.on_difference = [&](const node::KeyDifference& d) {
      using Action = node::KeyDifference::Action;
      const tree::RowEntry* in_user_a = swapped ? d.in_b : d.in_a;
      const tree::RowEntry* in_user_b = swapped ? d.in_a : d.in_b;
      // The target, in the sync's terms, then in the user's.
      const bool to_sync_b =
          d.action == Action::kCopyToB || d.action == Action::kEraseFromB;
      const bool to_user_a = to_sync_b == swapped;
      v1::DiffAction action = v1::DIFF_ACTION_CONFLICT;
      switch (d.action) {
        case Action::kCopyToA:
        case Action::kCopyToB:
          action =
              to_user_a ? v1::DIFF_ACTION_COPY_TO_A : v1::DIFF_ACTION_COPY_TO_B;
          break;
        case Action::kEraseFromB:
          action = to_user_a ? v1::DIFF_ACTION_ERASE_FROM_A
                             : v1::DIFF_ACTION_ERASE_FROM_B;
          break;
        case Action::kConflict:
          break;
      }
      progress.Clear();
      PrintPlanned(ctx, in_user_a, in_user_b, action, &outcome);
    };
  }
  if (progress.enabled()) {
    options.on_progress = [&](const node::SyncProgress& p) {
      ShowProgress(progress, p.differences, swapped ? p.rows_to_b : p.rows_to_a,
                   swapped ? p.rows_to_a : p.rows_to_b);
    };
  }

  std::signal(SIGINT, OnInterrupt);
  absl::StatusOr<node::SyncStats> result =
      node::SyncKeyspace(*replica_a, *replica_b, options);
  std::signal(SIGINT, SIG_DFL);
  progress.Clear();
  std::cout.flush();
  if (!result.ok()) return RepairFailed(ctx, plan, result.status());
  outcome.stats = *result;
  outcome.to_a = swapped ? result->rows_to_b : result->rows_to_a;
  outcome.to_b = swapped ? result->rows_to_a : result->rows_to_b;

  // After a real repair, read both roots again: equal roots are the proof
  // the user wants, unequal ones mean writes raced the repair or conflicts.
  if (!plan.dry_run) {
    for (auto [client, root] : {std::pair{client_a.get(), &outcome.root_a},
                                std::pair{client_b.get(), &outcome.root_b}}) {
      TALLY_ASSIGN_OR_RETURN(std::optional<v1::KeyspaceSummary> ks,
                             FindKeyspace(ctx, *client, ctx.keyspace));
      if (ks.has_value()) {
        root->hex = RootHex(ks->root());
        root->rows = ks->row_count();
        root->present = true;
      }
    }
  }
  return outcome;
}

Root RootOf(const v1::RunDiffRoot& root) {
  Root out;
  if (!root.has_keyspace()) return out;
  out.hex = RootHex(root.root());
  out.rows = root.row_count();
  out.present = true;
  return out;
}

// The repair on A, or nullopt with `*fallback` set when it is to run from
// here instead. A Ctrl-C cancels the call, and A stops between batches.
absl::StatusOr<std::optional<RepairOutcome>> RepairOnA(
    const Context& ctx, const RepairPlan& plan,
    std::optional<std::string>* fallback) {
  TALLY_ASSIGN_OR_RETURN(auto a, ConnectToA(ctx));
  v1::RunDiffRequest request;
  request.set_peer(ctx.args[1]);
  request.set_keyspace(ctx.keyspace);
  request.set_mode(!plan.one_way      ? v1::RUN_DIFF_MODE_REPAIR
                   : plan.source_is_b ? v1::RUN_DIFF_MODE_REPAIR_FROM_PEER
                                      : v1::RUN_DIFF_MODE_REPAIR_FROM_NODE);
  request.set_dry_run(plan.dry_run);

  RepairOutcome outcome;
  ProgressLine progress;
  bool streamed = false;
  std::optional<v1::RunDiffSummary> summary;
  // A signal handler cannot cancel a call; this thread does it for it.
  node::StreamCanceller canceller;
  std::atomic<bool> call_done{false};
  std::signal(SIGINT, OnInterrupt);
  std::thread watcher([&] {
    while (!call_done.load()) {
      if (interrupted.load()) {
        canceller.Cancel();
        return;
      }
      absl::SleepFor(absl::Milliseconds(50));
    }
  });
  const absl::Status status = a->RunDiff(
      request,
      [&](v1::RunDiffEvent& e) {
        streamed = true;
        for (const v1::DiffDifference& d : e.differences()) {
          const tree::RowEntry in_a = EntryOf(d.key(), d.a());
          const tree::RowEntry in_b = EntryOf(d.key(), d.b());
          progress.Clear();
          PrintPlanned(ctx, d.has_a() ? &in_a : nullptr,
                       d.has_b() ? &in_b : nullptr, d.action(), &outcome);
        }
        if (e.has_progress()) {
          ShowProgress(progress, e.progress().differences(),
                       e.progress().rows_to_a(), e.progress().rows_to_b());
        }
        if (e.has_summary()) summary = e.summary();
        return absl::OkStatus();
      },
      &canceller);
  call_done.store(true);
  watcher.join();
  std::signal(SIGINT, SIG_DFL);
  progress.Clear();
  std::cout.flush();
  *fallback = FallbackReason(status, streamed, a->address());
  if (fallback->has_value()) return std::optional<RepairOutcome>();
  if (!status.ok()) return RepairFailed(ctx, plan, status);
  if (!summary.has_value()) {
    return absl::DataLossError(absl::StrFormat(
        "node %s ended the repair without its summary", a->address()));
  }
  if (!summary->a_has_keyspace() && !summary->b_has_keyspace()) {
    // As the sync from here says it: the source first.
    const bool swapped = plan.one_way && plan.source_is_b;
    return tree::KeyspaceAbsentOnBoth(ctx.keyspace, ctx.args[swapped ? 1 : 0],
                                      ctx.args[swapped ? 0 : 1]);
  }
  outcome.stats.diff = DiffStatsOf(*summary);
  outcome.stats.erased_from_b = summary->erased();
  outcome.stats.ignored = summary->ignored();
  outcome.stats.conflicts = summary->conflicts();
  outcome.stats.repair_bytes = summary->repair_bytes();
  outcome.stats.duration = absl::Seconds(summary->seconds());
  outcome.to_a = summary->rows_to_a();
  outcome.to_b = summary->rows_to_b();
  outcome.root_a = RootOf(summary->a_after());
  outcome.root_b = RootOf(summary->b_after());
  return std::optional<RepairOutcome>(std::move(outcome));
}

CommandResult PrintRepair(const Context& ctx, const RepairPlan& plan,
                          const RepairOutcome& outcome) {
  const node::SyncStats& stats = outcome.stats;
  const bool one_way = plan.one_way;
  const bool dry_run = plan.dry_run;
  const std::string mode =
      one_way ? absl::StrFormat("one-way from %s (source) to %s",
                                plan.source_label(), plan.copy_label())
              : "two-way (last writer wins)";
  const double seconds = absl::ToDoubleSeconds(stats.duration);
  const Root& root_a = outcome.root_a;
  const Root& root_b = outcome.root_b;
  const bool equal = root_a.hex == root_b.hex && root_a.rows == root_b.rows;
  // Exit 1, as diff's "different": a script that runs repair and goes on
  // must not take nodes that still differ for repaired ones. A dry run
  // changes nothing, so the nodes still differ whenever it found a
  // difference.
  const bool still_differ = dry_run ? stats.diff.differences > 0 : !equal;
  const uint64_t to_a = dry_run ? outcome.would_copy_to_a : outcome.to_a;
  const uint64_t to_b = dry_run ? outcome.would_copy_to_b : outcome.to_b;
  const uint64_t erased = dry_run ? outcome.would_erase : stats.erased_from_b;

  if (ctx.json) {
    Json summary = DiffStatsJson(stats.diff, seconds);
    summary["keyspace"] = ctx.keyspace;
    summary["mode"] = one_way ? "one-way" : "two-way";
    summary["source"] = one_way ? Json(plan.source_label()) : nullptr;
    summary["dry_run"] = dry_run;
    summary["rows_to_a"] = to_a;
    summary["rows_to_b"] = to_b;
    summary["erased"] = erased;
    summary["ignored"] = stats.ignored;
    summary["conflicts"] = stats.conflicts;
    summary["repair_bytes"] = stats.repair_bytes;
    Json out = {{"summary", summary}};
    if (!dry_run) {
      auto root_json = [](const std::string& address, const Root& root) {
        return Json{{"address", address},
                    {"root", root.hex},
                    {"rows", root.rows},
                    {"has_keyspace", root.present}};
      };
      out["after"] = {{"a", root_json(ctx.args[0], root_a)},
                      {"b", root_json(ctx.args[1], root_b)},
                      {"equal", equal}};
    }
    PrintJson(out);
    return still_differ ? 1 : 0;
  }

  std::string text = absl::StrFormat(
      "%srepair of keyspace '%s', A=%s B=%s, %s\n", dry_run ? "dry-run " : "",
      ctx.keyspace, ctx.args[0], ctx.args[1], mode);
  const std::string verb = dry_run ? "would copy" : "copied";
  // The traffic is what the diff moved (between the nodes when A ran it,
  // through this tool when it ran here) and, in a real repair, the rows.
  std::vector<std::vector<std::string>> rows = {
      {"differences", absl::StrFormat("%d (%s)", stats.diff.differences,
                                      DiffStatsText(stats.diff))},
  };
  // One-way never copies towards the source.
  if (!one_way || plan.copy_label() == "A") {
    rows.push_back({absl::StrCat(verb, " to A"), absl::StrCat(to_a)});
  }
  if (!one_way || plan.copy_label() == "B") {
    rows.push_back({absl::StrCat(verb, " to B"), absl::StrCat(to_b)});
  }
  if (one_way) {
    rows.push_back({absl::StrCat(dry_run ? "would erase" : "erased", " from ",
                                 plan.copy_label()),
                    absl::StrCat(erased)});
  }
  if (!dry_run) {
    rows.push_back({"ignored", absl::StrFormat("%d (the target already had a "
                                               "newer version)",
                                               stats.ignored)});
  }
  rows.push_back({"conflicts", absl::StrFormat("%d (same version, different "
                                               "content: left alone)",
                                               stats.conflicts)});
  if (!dry_run) {
    rows.push_back(
        {"moved", absl::StrFormat("%s of keys and values in %.3f s",
                                  HumanBytes(stats.repair_bytes), seconds)});
  }
  absl::StrAppend(&text, Table(rows));
  if (!dry_run) {
    absl::StrAppend(
        &text, "after repair:\n",
        Table(
            {{"A", ctx.args[0], root_a.hex, absl::StrCat(root_a.rows, " rows")},
             {"B", ctx.args[1], root_b.hex,
              absl::StrCat(root_b.rows, " rows")}}),
        equal ? "  A and B are equal\n"
              : "  A and B still differ (writes during the repair, or "
                "conflicts); run repair again\n");
  }
  std::cout << text;
  return still_differ ? 1 : 0;
}

CommandResult Repair(const Context& ctx) {
  if (auto pg = MaybePostgres(ctx, /*repair=*/true)) return *std::move(pg);
  TALLY_RETURN_IF_ERROR(CheckKeyspace(ctx));
  RepairPlan plan;
  plan.one_way = ctx.given.count("source") > 0;
  plan.dry_run = absl::GetFlag(FLAGS_dry_run);
  if (plan.one_way) {
    TALLY_ASSIGN_OR_RETURN(
        const Side source,
        ParseSide(absl::GetFlag(FLAGS_source), ctx.args[0], ctx.args[1]));
    plan.source_is_b = source == Side::kB;
  }
  // Both addresses are checked here, whichever node dials B.
  for (const std::string& address : ctx.args) {
    TALLY_RETURN_IF_ERROR(Connect(ctx, address).status());
  }
  std::optional<std::string> fallback;
  if (!absl::GetFlag(FLAGS_third_party)) {
    TALLY_ASSIGN_OR_RETURN(std::optional<RepairOutcome> on_a,
                           RepairOnA(ctx, plan, &fallback));
    if (on_a.has_value()) return PrintRepair(ctx, plan, *on_a);
  }
  absl::StatusOr<RepairOutcome> here = RepairFromHere(ctx, plan);
  if (!here.ok()) return WithFallbackNote(fallback, here.status());
  return WithFallbackNote(fallback, PrintRepair(ctx, plan, *here));
}

// ------------------------------------------------------------------ verify

// A running sidecar to PostgreSQL (no --data-dir): its index against its
// tables (Admin.VerifyTables), after it caught up; --table names some.
CommandResult VerifyTables(const Context& ctx) {
  TALLY_ASSIGN_OR_RETURN(auto client, Connect(ctx, absl::GetFlag(FLAGS_node)));
  std::vector<std::string> tables = absl::GetFlag(FLAGS_table);
  if (tables.empty()) tables.push_back("");  // every kept table
  const absl::Time start = absl::Now();
  std::vector<v1::TableVerify> found;
  for (const std::string& table : tables) {
    v1::VerifyTablesRequest request;
    request.set_keyspace(table);
    absl::StatusOr<v1::VerifyTablesResponse> r = client->VerifyTables(request);
    if (!r.ok()) return CallFailed(ctx, r.status());
    for (const v1::TableVerify& t : r->tables()) found.push_back(t);
  }
  const double seconds = absl::ToDoubleSeconds(absl::Now() - start);
  bool sound = true;
  for (const v1::TableVerify& t : found) {
    sound = sound && t.mismatched() == 0 && t.missing_from_index() == 0 &&
            t.missing_from_table() == 0;
  }
  if (ctx.json) {
    Json out = Json::object();
    out["node"] = client->address();
    out["tables"] = Json::array();
    for (const v1::TableVerify& t : found) {
      Json j = Json::object();
      j["keyspace"] = t.keyspace();
      j["table_rows"] = t.table_rows();
      j["index_rows"] = t.index_rows();
      j["mismatched"] = t.mismatched();
      j["missing_from_index"] = t.missing_from_index();
      j["missing_from_table"] = t.missing_from_table();
      for (const auto& [field, keys] :
           {std::pair<const char*,
                      const google::protobuf::RepeatedPtrField<std::string>*>{
                "mismatched_keys", &t.mismatched_keys()},
            {"missing_from_index_keys", &t.missing_from_index_keys()},
            {"missing_from_table_keys", &t.missing_from_table_keys()}}) {
        j[field] = Json::array();
        for (const std::string& key : *keys) {
          Json k = Json::object();
          SetBytesField(k, "key", key);
          j[field].push_back(std::move(k));
        }
      }
      out["tables"].push_back(std::move(j));
    }
    out["ok"] = sound;
    out["seconds"] = seconds;
    PrintJson(out);
  } else {
    for (const v1::TableVerify& t : found) {
      const bool ok = t.mismatched() == 0 && t.missing_from_index() == 0 &&
                      t.missing_from_table() == 0;
      std::cout << absl::StrFormat(
          "%s: %s: %d rows in the table, %d in the index",
          ok ? "sound" : "different", t.keyspace(), t.table_rows(),
          t.index_rows());
      if (!ok) {
        std::cout << absl::StrFormat(
            "; %d missing from the index, %d missing from the table, %d with "
            "another value",
            t.missing_from_index(), t.missing_from_table(), t.mismatched());
      }
      std::cout << "\n";
      for (const std::string& key : t.missing_from_index_keys()) {
        std::cout << "  missing from the index: " << absl::CHexEscape(key)
                  << "\n";
      }
      for (const std::string& key : t.missing_from_table_keys()) {
        std::cout << "  missing from the table: " << absl::CHexEscape(key)
                  << "\n";
      }
      for (const std::string& key : t.mismatched_keys()) {
        std::cout << "  another value: " << absl::CHexEscape(key) << "\n";
      }
    }
    std::cout << absl::StrFormat(
        "%s: node %s, %d table%s in %.2f s\n", sound ? "sound" : "different",
        client->address(), found.size(), found.size() == 1 ? "" : "s", seconds);
  }
  return sound ? 0 : 1;
}

CommandResult Verify(const Context& ctx) {
  const std::string dir = absl::GetFlag(FLAGS_data_dir);
  if (dir.empty()) return VerifyTables(ctx);
  // Store::Open creates a store where there is none; verify must not.
  std::error_code ec;
  if (!std::filesystem::is_directory(dir, ec)) {
    return absl::NotFoundError(absl::StrFormat("%s is not a directory", dir));
  }
  if (!std::filesystem::exists(std::filesystem::path(dir) / "CURRENT", ec)) {
    return absl::NotFoundError(absl::StrFormat(
        "%s holds no tally store (no LevelDB CURRENT file); if it held one, "
        "`tally recover --data-dir %s` salvages it",
        dir, dir));
  }
  // An empty node name adopts the stored one.
  absl::StatusOr<std::unique_ptr<storage::Store>> store =
      storage::Store::Open(dir, storage::StoreOptions{});
  if (!store.ok()) {
    if (absl::IsUnavailable(store.status()) &&
        absl::StrContains(store.status().message(), "lock")) {
      return absl::UnavailableError(absl::StrFormat(
          "%s is locked by another process, probably a running tallyd; stop "
          "it first, or verify a copy of the directory",
          dir));
    }
    return absl::Status(store.status().code(),
                        absl::StrFormat("cannot open the store in %s: %s", dir,
                                        store.status().message()));
  }
  const absl::Time start = absl::Now();
  absl::StatusOr<storage::VerifyReport> report = (*store)->Verify();
  if (!report.ok()) {
    return absl::Status(report.status().code(),
                        absl::StrFormat("verify of %s could not read: %s", dir,
                                        report.status().message()));
  }
  const double seconds = absl::ToDoubleSeconds(absl::Now() - start);
  if (ctx.json) {
    PrintJson({{"data_dir", dir},
               {"node", (*store)->node_name()},
               {"keyspaces", report->keyspaces},
               {"rows", report->rows},
               {"problems", report->problems},
               {"ok", report->ok()},
               {"seconds", seconds}});
  } else {
    for (const std::string& problem : report->problems) {
      std::cout << "problem: " << problem << "\n";
    }
    std::cout << absl::StrFormat(
        "%s: node '%s' in %s, %d keyspace%s, %d rows checked in %.2f s\n",
        report->ok() ? "sound"
                     : absl::StrCat(report->problems.size(), " problem",
                                    report->problems.size() == 1 ? "" : "s"),
        (*store)->node_name(), dir, report->keyspaces,
        report->keyspaces == 1 ? "" : "s", report->rows, seconds);
  }
  return report->ok() ? 0 : 1;
}

// ----------------------------------------------------------------- recover

// RepairDB, then the store's own Verify: a store that tallyd refuses to open
// (damaged or missing log, missing CURRENT) is made to open again with what
// was readable; the node's peers bring back the rest through anti-entropy.
CommandResult Recover(const Context& ctx) {
  const std::string dir = absl::GetFlag(FLAGS_data_dir);
  if (dir.empty()) {
    return absl::InvalidArgumentError("recover needs --data-dir=DIR");
  }
  std::error_code ec;
  if (!std::filesystem::is_directory(dir, ec)) {
    return absl::NotFoundError(absl::StrFormat("%s is not a directory", dir));
  }
  const absl::Time start = absl::Now();
  const absl::StatusOr<uint64_t> removed =
      storage::RepairStore(dir, storage::StoreOptions{});
  if (!removed.ok()) {
    return absl::Status(removed.status().code(),
                        absl::StrFormat("cannot recover the store in %s: %s",
                                        dir, removed.status().message()));
  }
  // An empty node name adopts the stored one.
  absl::StatusOr<std::unique_ptr<storage::Store>> store =
      storage::Store::Open(dir, storage::StoreOptions{});
  if (!store.ok()) {
    return absl::Status(
        store.status().code(),
        absl::StrFormat("recovered %s, but it still does not open: %s", dir,
                        store.status().message()));
  }
  absl::StatusOr<storage::VerifyReport> report = (*store)->Verify();
  if (!report.ok()) {
    return absl::Status(
        report.status().code(),
        absl::StrFormat("recovered %s, but verify could not read it: %s", dir,
                        report.status().message()));
  }
  const double seconds = absl::ToDoubleSeconds(absl::Now() - start);
  const std::string lost = (std::filesystem::path(dir) / "lost").string();
  if (ctx.json) {
    PrintJson({{"data_dir", dir},
               {"node", (*store)->node_name()},
               {"keyspaces", report->keyspaces},
               {"rows", report->rows},
               {"problems", report->problems},
               {"ok", report->ok()},
               {"rows_removed", *removed},
               {"lost_dir", lost},
               {"seconds", seconds}});
  } else {
    for (const std::string& problem : report->problems) {
      std::cout << "problem: " << problem << "\n";
    }
    std::cout << absl::StrFormat(
        "recovered: node '%s' in %s, %d keyspace%s, %d rows, %s, in %.2f s\n"
        "what LevelDB could not read was dropped, and %d row%s that did not "
        "match %s digest; the files LevelDB's repair replaced or could not "
        "read are in %s (the store no longer needs them)\n"
        "%s\n",
        (*store)->node_name(), dir, report->keyspaces,
        report->keyspaces == 1 ? "" : "s", report->rows,
        report->ok() ? "sound"
                     : absl::StrCat(report->problems.size(), " problem",
                                    report->problems.size() == 1 ? "" : "s"),
        seconds, *removed, *removed == 1 ? "" : "s",
        *removed == 1 ? "its" : "their", lost,
        report->ok()
            ? "next: start tallyd; its anti-entropy sessions bring back from "
              "its peers the rows that were lost (or run `tally repair PEER "
              "NODE` once it is up)"
            : "the store is not sound: move the directory aside and start "
              "tallyd on an empty one, to be refilled from its peers");
  }
  return report->ok() ? 0 : 1;
}

// -------------------------------------------------------------------- main

CommandResult Help(const Context&) {
  std::cout << UsageText() << "\n" << FlagsText("tools/tally.cc");
  return 0;
}

CommandResult Run(const std::string& command, const Context& ctx) {
  if (command == "put") return Put(ctx);
  if (command == "get") return Get(ctx);
  if (command == "del") return Delete(ctx);
  if (command == "load") return Load(ctx);
  if (command == "status") return Status(ctx);
  if (command == "diff") return Diff(ctx);
  if (command == "repair") return Repair(ctx);
  if (command == "verify") return Verify(ctx);
  if (command == "recover") return Recover(ctx);
  return Help(ctx);
}

// One line, whatever the message holds (gRPC details can span lines).
int Trouble(const absl::Status& status) {
  std::string message(status.message());
  absl::StrReplaceAll({{"\r\n", " "}, {"\n", " "}, {"\r", " "}}, &message);
  std::fprintf(stderr, "tally: %s\n", message.c_str());
  return kTrouble;
}

// absl keeps only the last of a repeated list flag; `--table=a --table=b`
// means both, so the values are joined into one `--table=a,b` (where the
// first one stood). Runs on JoinFlagValues' output; stops at a bare "--".
void MergeRepeatedTables(std::vector<std::string>* args) {
  std::vector<std::string> out;
  std::optional<size_t> merged;
  for (size_t i = 0; i < args->size(); ++i) {
    const std::string& arg = (*args)[i];
    if (arg == "--") {
      out.insert(out.end(), args->begin() + i, args->end());
      break;
    }
    absl::string_view value(arg);
    if (!absl::ConsumePrefix(&value, "--table=") &&
        !absl::ConsumePrefix(&value, "-table=")) {
      out.push_back(arg);
      continue;
    }
    if (!merged.has_value()) {
      merged = out.size();
      out.push_back(arg);
    } else if (!value.empty()) {
      absl::StrAppend(&out[*merged], ",", value);
    }
  }
  *args = std::move(out);
}

void DiscardGrpcLog(gpr_log_func_args*) {}

int Main(int argc, char** argv) {
  // gRPC logs a refused TLS handshake on stderr itself; tally promises one
  // line there, and the error it returns says it all. GRPC_VERBOSITY set
  // brings gRPC's lines back for debugging.
  if (std::getenv("GRPC_VERBOSITY") == nullptr) {
    gpr_set_log_function(DiscardGrpcLog);
  }
  absl::SetProgramUsageMessage(UsageText());
  // absl's --version prints this; its default is a build-mode line
  // ("Debug build (NDEBUG not #defined)") that names no version.
  absl::FlagsUsageConfig usage_config;
  usage_config.version_string = [] {
    return node::VersionText("tally") + "\n";
  };
  absl::SetFlagsUsageConfig(usage_config);
  std::vector<std::string> args(argv + 1, argv + argc);
  // absl would read flag files itself, and report a bad one with exit 1.
  absl::Status expanded = ExpandFlagfiles(&args);
  if (!expanded.ok()) return Trouble(expanded);
  NormalizeFlagNames(&args);
  if (WantsHelp(args)) {
    Help(Context{}).IgnoreError();
    return 0;
  }
  // Checked before absl parses: absl reports a bad flag by printing its
  // whole usage and exiting 1, which reads as "different" to a script.
  absl::StatusOr<FlagSet> given = ScanFlags(args);
  if (!given.ok()) return Trouble(given.status());
  JoinFlagValues(&args);
  MergeRepeatedTables(&args);

  std::vector<char*> normalized = {argv[0]};
  for (std::string& arg : args) normalized.push_back(arg.data());
  std::vector<char*> positional = absl::ParseCommandLine(
      static_cast<int>(normalized.size()), normalized.data());
  if (positional.size() < 2) {
    return Trouble(absl::InvalidArgumentError(
        "no command given; 'tally help' lists the commands"));
  }
  const std::string command = positional[1];
  const CommandSpec* spec = FindCommand(command);
  if (spec == nullptr) {
    return Trouble(absl::InvalidArgumentError(
        absl::StrFormat("unknown command '%s'; 'tally help' lists the commands",
                        absl::CHexEscape(command))));
  }
  Context ctx;
  ctx.args.assign(positional.begin() + 2, positional.end());
  ctx.given = *std::move(given);
  absl::Status ok = CheckCommandLine(*spec, ctx.args.size(), ctx.given);
  if (!ok.ok()) return Trouble(ok);

  const double timeout = absl::GetFlag(FLAGS_timeout);
  if (!(timeout > 0) || timeout > 365 * 24 * 3600) {
    return Trouble(absl::InvalidArgumentError(absl::StrFormat(
        "--timeout=%g is out of range; it is seconds, more than 0", timeout)));
  }
  ctx.keyspace = absl::GetFlag(FLAGS_keyspace);
  ctx.json = absl::GetFlag(FLAGS_json);
  ctx.client_options.rpc_timeout = absl::Seconds(timeout);
  ctx.client_options.stream_timeout =
      std::max(ctx.client_options.stream_timeout, absl::Seconds(timeout));
  ctx.tls =
      node::TlsFiles{absl::GetFlag(FLAGS_tls_cert),
                     absl::GetFlag(FLAGS_tls_key), absl::GetFlag(FLAGS_tls_ca)};
  absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> credentials =
      node::MakeChannelCredentials(ctx.tls);
  if (!credentials.ok()) return Trouble(credentials.status());
  ctx.client_options.credentials = *std::move(credentials);

  CommandResult result = Run(command, ctx);
  std::cout.flush();
  if (!result.ok()) return Trouble(result.status());
  return *result;
}

}  // namespace
}  // namespace cli
}  // namespace tally

int main(int argc, char** argv) {
  // Nothing below throws on purpose; this turns a surprise (bad_alloc, a
  // library's exception) into the promised one line and exit 2 instead of
  // an abort.
  int code = 2;
  try {
    code = tally::cli::Main(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "tally: internal error: %s\n", e.what());
  }
  // Main's clients are gone; see node/exit.h for why no teardown runs.
  tally::node::ExitSkippingTeardown(code);
}
