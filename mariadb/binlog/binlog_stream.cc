#include "mariadb/binlog/binlog_stream.h"

#include <mysql.h>
// mysql.h first: the replication header uses its types.
#include <errmsg.h>
#include <mariadb_rpl.h>

#include <algorithm>
#include <deque>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "mariadb/connection.h"
#include "tree/status_macros.h"

namespace tally {
namespace mariadb {
namespace binlog {
namespace {

constexpr size_t kHeaderBytes = 19;
constexpr size_t kChecksumBytes = 4;
// ER_MASTER_FATAL_ERROR_READING_BINLOG: purged binlogs, unknown GTID.
constexpr unsigned kBinlogReadError = 1236;

uint64_t LittleEndian(const unsigned char* p, size_t n) {
  uint64_t v = 0;
  for (size_t i = n; i-- > 0;) v = (v << 8) | p[i];
  return v;
}

// CRC-32 (the zlib polynomial) as the server checksums events; only used
// on the few small events whose framing Connector/C gets wrong.
uint32_t Crc32(absl::string_view bytes) {
  uint32_t crc = 0xffffffffu;
  for (char c : bytes) {
    crc ^= static_cast<uint8_t>(c);
    for (int k = 0; k < 8; ++k) {
      crc = (crc >> 1) ^ (0xedb88320u & (0u - (crc & 1)));
    }
  }
  return ~crc;
}

absl::Status Malformed(absl::string_view what, size_t need, size_t have) {
  return absl::DataLossError(absl::StrCat("malformed binlog event: ", what,
                                          " needs ", need, " bytes, ", have,
                                          " in the event"));
}

}  // namespace

std::string Gtid::ToString() const {
  return absl::StrCat(domain_id, "-", server_id, "-", sequence);
}

absl::StatusOr<std::map<uint32_t, Gtid>> ParseGtidPosition(
    absl::string_view text) {
  std::map<uint32_t, Gtid> position;
  for (absl::string_view part :
       absl::StrSplit(text, ',', absl::SkipWhitespace())) {
    part = absl::StripAsciiWhitespace(part);
    std::vector<absl::string_view> fields = absl::StrSplit(part, '-');
    Gtid g;
    if (fields.size() != 3 || !absl::SimpleAtoi(fields[0], &g.domain_id) ||
        !absl::SimpleAtoi(fields[1], &g.server_id) ||
        !absl::SimpleAtoi(fields[2], &g.sequence)) {
      return absl::InvalidArgumentError(
          absl::StrCat("malformed GTID \"", part, "\" in position \"", text,
                       "\" (want domain-server-sequence)"));
    }
    if (!position.emplace(g.domain_id, g).second) {
      return absl::InvalidArgumentError(absl::StrCat(
          "GTID position \"", text, "\" names domain ", g.domain_id, " twice"));
    }
  }
  return position;
}

std::string GtidPositionText(const std::map<uint32_t, Gtid>& position) {
  std::vector<std::string> parts;
  for (const auto& [domain, gtid] : position) parts.push_back(gtid.ToString());
  return absl::StrJoin(parts, ",");
}

absl::StatusOr<std::unique_ptr<BinlogStream>> BinlogStream::Open(
    const MariaDbTarget& target, const BinlogStreamOptions& options) {
  if (options.replica_server_id == 0) {
    return absl::InvalidArgumentError(
        "a binlog reader needs a replica server_id other than 0");
  }
  if (options.read_timeout <= options.heartbeat_period ||
      options.heartbeat_period <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError(
        "the read timeout must exceed the heartbeat period (> 0)");
  }
  std::unique_ptr<BinlogStream> s(new BinlogStream());
  s->display_ = target.display;
  s->mysql_ = mysql_init(nullptr);
  if (s->mysql_ == nullptr) {
    return absl::ResourceExhaustedError("mysql_init failed");
  }
  const unsigned seconds = static_cast<unsigned>(
      std::max<int64_t>(1, absl::ToInt64Seconds(absl::Ceil(options.read_timeout,
                                                           absl::Seconds(1)))));
  mysql_optionsv(s->mysql_, MYSQL_OPT_CONNECT_TIMEOUT, &seconds);
  mysql_optionsv(s->mysql_, MYSQL_OPT_READ_TIMEOUT, &seconds);
  mysql_optionsv(s->mysql_, MYSQL_OPT_WRITE_TIMEOUT, &seconds);
  mysql_optionsv(s->mysql_, MYSQL_SET_CHARSET_NAME, "utf8mb4");
  if (mysql_real_connect(
          s->mysql_, target.socket.empty() ? target.host.c_str() : nullptr,
          target.user.c_str(), target.password.c_str(), nullptr,
          target.socket.empty() ? static_cast<unsigned>(target.port) : 0,
          target.socket.empty() ? nullptr : target.socket.c_str(),
          0) == nullptr) {
    return s->Error(absl::StrCat("cannot connect to ", target.display));
  }
  auto exec = [&](const std::string& sql) -> absl::Status {
    if (mysql_real_query(s->mysql_, sql.data(), sql.size()) != 0) {
      return s->Error(absl::StrCat("binlog stream setup (", sql, ")"));
    }
    if (MYSQL_RES* r = mysql_store_result(s->mysql_)) mysql_free_result(r);
    return absl::OkStatus();
  };
  s->start_gtid_ = options.start_gtid;
  if (s->start_gtid_.empty()) {
    if (mysql_real_query(s->mysql_, "SELECT @@global.gtid_binlog_pos", 31) !=
        0) {
      return s->Error("reading @@gtid_binlog_pos");
    }
    MYSQL_RES* r = mysql_store_result(s->mysql_);
    if (r == nullptr) return s->Error("reading @@gtid_binlog_pos");
    if (MYSQL_ROW row = mysql_fetch_row(r); row != nullptr && row[0]) {
      s->start_gtid_ = row[0];
    }
    mysql_free_result(r);
  }
  TALLY_ASSIGN_OR_RETURN(s->state_, ParseGtidPosition(s->start_gtid_));
  const int64_t heartbeat_ns =
      absl::ToInt64Nanoseconds(options.heartbeat_period);
  // GTID events as such (not rewritten as BEGIN), checksums as the server
  // writes them, heartbeats, and the GTID start.
  TALLY_RETURN_IF_ERROR(exec("SET @mariadb_slave_capability = 4"));
  TALLY_RETURN_IF_ERROR(
      exec("SET @master_binlog_checksum = @@global.binlog_checksum"));
  TALLY_RETURN_IF_ERROR(
      exec(absl::StrCat("SET @master_heartbeat_period = ", heartbeat_ns)));
  TALLY_RETURN_IF_ERROR(exec(absl::StrCat("SET @slave_connect_state = '",
                                          GtidPositionText(s->state_), "'")));
  s->start_gtid_ = GtidPositionText(s->state_);

  s->rpl_ = mariadb_rpl_init(s->mysql_);
  if (s->rpl_ == nullptr) return s->Error("mariadb_rpl_init");
  const char* no_file = "";
  mariadb_rpl_optionsv(s->rpl_, MARIADB_RPL_FILENAME, no_file, size_t{0});
  mariadb_rpl_optionsv(s->rpl_, MARIADB_RPL_START, 4UL);
  mariadb_rpl_optionsv(s->rpl_, MARIADB_RPL_SERVER_ID,
                       static_cast<unsigned int>(options.replica_server_id));
  mariadb_rpl_optionsv(
      s->rpl_, MARIADB_RPL_FLAGS,
      static_cast<unsigned int>(MARIADB_RPL_BINLOG_SEND_ANNOTATE_ROWS));
  if (mariadb_rpl_open(s->rpl_) != 0) {
    return s->Error("starting the binlog dump");
  }
  // The server answers a start position it cannot serve (error 1236) not
  // to the dump request but to the first read: read now so that Open
  // reports it, on through the artificial ROTATE and FORMAT_DESCRIPTION
  // that begin every dump (something always follows them: the file's GTID
  // list, or a heartbeat).
  for (;;) {
    TALLY_ASSIGN_OR_RETURN(BinlogEvent e, s->Fetch());
    const bool preamble =
        e.type == kRotateEvent || e.type == kFormatDescriptionEvent;
    s->pending_.push_back(std::move(e));
    if (!preamble) break;
  }
  return s;
}

BinlogStream::~BinlogStream() {
  if (event_ != nullptr) mariadb_free_rpl_event(event_);
  if (rpl_ != nullptr) mariadb_rpl_close(rpl_);
  if (mysql_ != nullptr) mysql_close(mysql_);
}

absl::Status BinlogStream::Error(absl::string_view what) const {
  const unsigned number = mysql_errno(mysql_);
  if (number == kBinlogReadError) {
    return absl::OutOfRangeError(absl::StrCat(
        what, ": ", display_, " cannot send its binlog from GTID position \"",
        start_gtid_, "\": ", mysql_error(mysql_), " (error ", number, ")"));
  }
  if (number == 0) {
    return absl::UnavailableError(
        absl::StrCat(what, ": ", display_, " ended the binlog stream"));
  }
  return StatusOfError(number, mysql_error(mysql_),
                       absl::StrCat(what, " (", display_, ")"));
}

absl::StatusOr<BinlogEvent> BinlogStream::Fetch() {
  for (;;) {
    // A fresh event each time: Connector/C frees the event it was handed
    // when the read or the parse fails, so a reused one would be freed
    // twice.
    if (event_ != nullptr) {
      mariadb_free_rpl_event(event_);
      event_ = nullptr;
    }
    MARIADB_RPL_EVENT* fetched = mariadb_rpl_fetch(rpl_, nullptr);
    if (fetched == nullptr) {
      if (after_rotate_ && mysql_errno(mysql_) == CR_BINLOG_ERROR) {
        after_rotate_ = false;
        ++recovered_rotations_;
        continue;
      }
      return Error("reading the binlog");
    }
    event_ = fetched;
    TALLY_ASSIGN_OR_RETURN(BinlogEvent e, Convert(*fetched));
    after_rotate_ = e.type == kRotateEvent;
    return e;
  }
}

absl::StatusOr<BinlogEvent> BinlogStream::Convert(
    const MARIADB_RPL_EVENT& raw) {
  // The event's bytes from its header on. Connector/C's raw data is the
  // network packet, its status byte first (semi-synchronous replication,
  // which would add two more, is not asked for); the header's own length
  // field confirms where the event starts.
  const unsigned char* p = raw.raw_data;
  size_t n = raw.raw_data_size;
  if (p == nullptr || n < kHeaderBytes) {
    return Malformed("the event header", kHeaderBytes, n);
  }
  if (LittleEndian(p + 9, 4) != n && n >= kHeaderBytes + 1 &&
      LittleEndian(p + 10, 4) == n - 1) {
    ++p;
    --n;
  }
  BinlogEvent e;
  e.timestamp = static_cast<uint32_t>(LittleEndian(p, 4));
  e.type = p[4];
  e.server_id = static_cast<uint32_t>(LittleEndian(p + 5, 4));
  const size_t length = LittleEndian(p + 9, 4);
  e.log_position = static_cast<uint32_t>(LittleEndian(p + 13, 4));
  e.flags = static_cast<uint16_t>(LittleEndian(p + 17, 2));
  if (length > n || length < kHeaderBytes) {
    return Malformed("the event", length, n);
  }
  absl::string_view whole(reinterpret_cast<const char*>(p), length);
  size_t body_end = length;
  if (e.type == kRotateEvent || e.type == kFormatDescriptionEvent) {
    // Whether these carry a checksum depends on which one (the artificial
    // first ROTATE is sent before the checksum algorithm is known): check.
    if (length >= kHeaderBytes + kChecksumBytes &&
        Crc32(whole.substr(0, length - kChecksumBytes)) ==
            LittleEndian(p + length - kChecksumBytes, 4)) {
      body_end -= kChecksumBytes;
    }
  } else if (rpl_->use_checksum && e.type != kHeartbeatEvent) {
    if (length < kHeaderBytes + kChecksumBytes) {
      return Malformed("the event's checksum", kChecksumBytes,
                       length - kHeaderBytes);
    }
    body_end -= kChecksumBytes;
  }
  e.body = std::string(whole.substr(kHeaderBytes, body_end - kHeaderBytes));
  const absl::string_view body = e.body;
  const auto* b = reinterpret_cast<const unsigned char*>(body.data());
  switch (e.type) {
    case kRotateEvent:
      if (body.size() < 8) return Malformed("ROTATE", 8, body.size());
      e.rotate_position = LittleEndian(b, 8);
      e.rotate_file = std::string(body.substr(8));
      log_file_ = e.rotate_file;
      break;
    case kGtidEvent: {
      if (body.size() < 13) return Malformed("GTID", 13, body.size());
      Gtid g;
      g.sequence = LittleEndian(b, 8);
      g.domain_id = static_cast<uint32_t>(LittleEndian(b + 8, 4));
      g.server_id = e.server_id;
      e.gtid = g;
      e.gtid_flags = b[12];
      break;
    }
    case kXidEvent:
      if (body.size() < 8) return Malformed("XID", 8, body.size());
      e.xid = LittleEndian(b, 8);
      break;
    case kQueryEvent: {
      // thread id 4, seconds 4, database length 1, error 2, status
      // variables length 2; the status variables; the database and a
      // zero byte; the statement.
      if (body.size() < 13) return Malformed("QUERY", 13, body.size());
      const size_t db_length = b[8];
      const size_t status_length = LittleEndian(b + 11, 2);
      const size_t db_at = 13 + status_length;
      if (db_at + db_length + 1 > body.size()) {
        return Malformed("QUERY", db_at + db_length + 1, body.size());
      }
      e.database = std::string(body.substr(db_at, db_length));
      e.statement = std::string(body.substr(db_at + db_length + 1));
      break;
    }
    case kAnnotateRowsEvent:
      e.statement = std::string(body);
      break;
    case kTableMapEvent: {
      TALLY_ASSIGN_OR_RETURN(TableMap map, DecodeTableMap(body));
      auto shared = std::make_shared<const TableMap>(std::move(map));
      maps_[shared->table_id] = shared;
      e.table_map = std::move(shared);
      break;
    }
    default:
      if (IsRowsEvent(e.type) && body.size() >= 6) {
        auto it = maps_.find(LittleEndian(b, 6));
        if (it != maps_.end()) e.table_map = it->second;
      }
      break;
  }
  e.log_file = log_file_;
  return e;
}

void BinlogStream::Track(const BinlogEvent& e) {
  auto commit = [&]() {
    if (open_) state_[open_->domain_id] = *open_;
    open_.reset();
    open_standalone_ = false;
  };
  switch (e.type) {
    case kGtidEvent:
      open_ = e.gtid;
      open_standalone_ = (e.gtid_flags & 1) != 0;
      // Table ids are bound by the TABLE_MAPs of each transaction.
      maps_.clear();
      break;
    case kXidEvent:
      commit();
      break;
    case kQueryEvent:
      if (open_standalone_ || e.statement == "COMMIT" ||
          e.statement == "ROLLBACK") {
        commit();
      }
      break;
    default:
      break;
  }
}

absl::StatusOr<BinlogEvent> BinlogStream::Next(absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  for (;;) {
    BinlogEvent e;
    if (!pending_.empty()) {
      e = std::move(pending_.front());
      pending_.pop_front();
    } else {
      TALLY_ASSIGN_OR_RETURN(e, Fetch());
    }
    if (e.idle() && absl::Now() < deadline) continue;
    Track(e);
    return e;
  }
}

}  // namespace binlog
}  // namespace mariadb
}  // namespace tally
