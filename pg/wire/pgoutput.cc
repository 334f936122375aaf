#include "pg/wire/pgoutput.h"

#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "pg/wire/internal/big_endian.h"
#include "tree/status_macros.h"

namespace tally {
namespace pg {
namespace {

using internal::BigEndianReader;

// The parse of one message: a cursor over the payload plus what an error
// message needs (the message's name, where the cursor is).
class Parser {
 public:
  Parser(absl::string_view payload, absl::string_view message)
      : in_(payload), size_(payload.size()), message_(message) {}

  BigEndianReader& in() { return in_; }

  // kDataLoss: `field` could not be read (the payload ended first).
  absl::Status Truncated(absl::string_view field) const {
    return absl::DataLossError(absl::StrFormat(
        "pgoutput %s message truncated: %d of %d bytes read, %s missing",
        message_, in_.offset(), size_, field));
  }

  // kDataLoss: `field` was read but its value is impossible.
  absl::Status Malformed(absl::string_view field,
                         absl::string_view what) const {
    return absl::DataLossError(
        absl::StrFormat("pgoutput %s message: %s at byte %d: %s", message_,
                        field, in_.offset(), what));
  }

  absl::Status ExpectEnd() const {
    if (in_.empty()) return absl::OkStatus();
    return absl::DataLossError(absl::StrFormat(
        "pgoutput %s message: %d unexpected bytes after the message "
        "(%d of %d bytes parsed)",
        message_, in_.remaining(), in_.offset(), size_));
  }

  absl::Status U8(absl::string_view field, uint8_t* v) {
    return in_.ReadU8(v) ? absl::OkStatus() : Truncated(field);
  }
  absl::Status U32(absl::string_view field, uint32_t* v) {
    return in_.ReadU32(v) ? absl::OkStatus() : Truncated(field);
  }
  absl::Status I32(absl::string_view field, int32_t* v) {
    return in_.ReadI32(v) ? absl::OkStatus() : Truncated(field);
  }
  absl::Status U64(absl::string_view field, uint64_t* v) {
    return in_.ReadU64(v) ? absl::OkStatus() : Truncated(field);
  }
  absl::Status I64(absl::string_view field, int64_t* v) {
    return in_.ReadI64(v) ? absl::OkStatus() : Truncated(field);
  }
  absl::Status CString(absl::string_view field, absl::string_view* v) {
    return in_.ReadCString(v)
               ? absl::OkStatus()
               : Truncated(absl::StrCat(field, " (a NUL-terminated string)"));
  }
  // An Int16 count that must not be negative, nor larger than the bytes left
  // divided by the smallest encoding of one item (so that a corrupt count
  // never makes us reserve gigabytes).
  absl::Status Count16(absl::string_view field, size_t min_item_bytes,
                       size_t* count) {
    int16_t n = 0;
    if (!in_.ReadI16(&n)) return Truncated(field);
    if (n < 0) return Malformed(field, absl::StrCat("negative count ", n));
    if (static_cast<size_t>(n) * min_item_bytes > in_.remaining()) {
      return Malformed(field,
                       absl::StrFormat("count %d needs at least %d "
                                       "bytes but %d are left",
                                       n, n * min_item_bytes, in_.remaining()));
    }
    *count = static_cast<size_t>(n);
    return absl::OkStatus();
  }

 private:
  BigEndianReader in_;
  const size_t size_;
  const absl::string_view message_;
};

absl::Status ParseTuple(Parser& p, absl::string_view which, TupleData* out) {
  size_t ncols = 0;
  // Each column is at least its kind byte.
  TALLY_RETURN_IF_ERROR(
      p.Count16(absl::StrCat(which, " tuple column count"), 1, &ncols));
  out->clear();
  out->reserve(ncols);
  for (size_t i = 0; i < ncols; ++i) {
    // Named only for an error: formatting it for every column of every
    // change was ~2.5% of a capture's CPU.
    const auto field = [&](absl::string_view what) {
      return absl::StrFormat("%s tuple column %d of %d %s", which, i + 1, ncols,
                             what);
    };
    uint8_t kind = 0;
    if (!p.in().ReadU8(&kind)) return p.Truncated(field("kind"));
    TupleColumn column;
    switch (kind) {
      case 'n':
        column.kind = TupleColumnKind::kNull;
        break;
      case 'u':
        column.kind = TupleColumnKind::kUnchangedToast;
        break;
      case 't':
      case 'b': {
        column.kind =
            kind == 't' ? TupleColumnKind::kText : TupleColumnKind::kBinary;
        int32_t len = 0;
        if (!p.in().ReadI32(&len)) return p.Truncated(field("length"));
        if (len < 0) {
          return p.Malformed(field("length"),
                             absl::StrCat("negative length ", len));
        }
        if (!p.in().ReadBytes(static_cast<size_t>(len), &column.value)) {
          return p.Truncated(
              field(absl::StrFormat("value (%d bytes announced)", len)));
        }
        break;
      }
      default:
        return p.Malformed(field("kind"),
                           absl::StrFormat("unknown kind 0x%02x (expected "
                                           "'n', 'u', 't' or 'b')",
                                           kind));
    }
    out->push_back(column);
  }
  return absl::OkStatus();
}

absl::StatusOr<PgOutputMessage> ParseBegin(Parser& p) {
  BeginMessage m;
  TALLY_RETURN_IF_ERROR(p.U64("final LSN", &m.final_lsn));
  TALLY_RETURN_IF_ERROR(p.I64("commit timestamp", &m.commit_time_us));
  TALLY_RETURN_IF_ERROR(p.U32("xid", &m.xid));
  TALLY_RETURN_IF_ERROR(p.ExpectEnd());
  return m;
}

absl::StatusOr<PgOutputMessage> ParseCommit(Parser& p) {
  CommitMessage m;
  TALLY_RETURN_IF_ERROR(p.U8("flags", &m.flags));
  TALLY_RETURN_IF_ERROR(p.U64("commit LSN", &m.commit_lsn));
  TALLY_RETURN_IF_ERROR(p.U64("end LSN", &m.end_lsn));
  TALLY_RETURN_IF_ERROR(p.I64("commit timestamp", &m.commit_time_us));
  TALLY_RETURN_IF_ERROR(p.ExpectEnd());
  return m;
}

absl::StatusOr<PgOutputMessage> ParseOrigin(Parser& p) {
  OriginMessage m;
  TALLY_RETURN_IF_ERROR(p.U64("origin LSN", &m.origin_lsn));
  TALLY_RETURN_IF_ERROR(p.CString("origin name", &m.name));
  TALLY_RETURN_IF_ERROR(p.ExpectEnd());
  return m;
}

absl::StatusOr<PgOutputMessage> ParseRelation(Parser& p) {
  RelationMessage m;
  absl::string_view schema, table;
  TALLY_RETURN_IF_ERROR(p.U32("relation id", &m.relid));
  TALLY_RETURN_IF_ERROR(p.CString("schema", &schema));
  TALLY_RETURN_IF_ERROR(p.CString("table name", &table));
  m.schema = std::string(schema);
  m.table = std::string(table);
  uint8_t identity = 0;
  TALLY_RETURN_IF_ERROR(p.U8("replica identity", &identity));
  switch (identity) {
    case 'd':
    case 'n':
    case 'f':
    case 'i':
      m.replica_identity = static_cast<ReplicaIdentity>(identity);
      break;
    default:
      return p.Malformed("replica identity",
                         absl::StrFormat("unknown setting 0x%02x (expected "
                                         "'d', 'n', 'f' or 'i')",
                                         identity));
  }
  size_t ncols = 0;
  // flags + empty name's NUL + type oid + typmod.
  TALLY_RETURN_IF_ERROR(p.Count16("column count", 10, &ncols));
  m.columns.reserve(ncols);
  for (size_t i = 0; i < ncols; ++i) {
    const auto field = [&](absl::string_view what) {
      return absl::StrFormat("column %d of %d %s", i + 1, ncols, what);
    };
    RelationColumn column;
    uint8_t flags = 0;
    absl::string_view name;
    TALLY_RETURN_IF_ERROR(p.U8(field("flags"), &flags));
    column.key = (flags & 1) != 0;
    TALLY_RETURN_IF_ERROR(p.CString(field("name"), &name));
    column.name = std::string(name);
    TALLY_RETURN_IF_ERROR(p.U32(field("type oid"), &column.type_oid));
    TALLY_RETURN_IF_ERROR(p.I32(field("type modifier"), &column.type_modifier));
    m.columns.push_back(std::move(column));
  }
  TALLY_RETURN_IF_ERROR(p.ExpectEnd());
  return m;
}

absl::StatusOr<PgOutputMessage> ParseType(Parser& p) {
  TypeMessage m;
  absl::string_view schema, name;
  TALLY_RETURN_IF_ERROR(p.U32("type oid", &m.oid));
  TALLY_RETURN_IF_ERROR(p.CString("schema", &schema));
  TALLY_RETURN_IF_ERROR(p.CString("type name", &name));
  TALLY_RETURN_IF_ERROR(p.ExpectEnd());
  m.schema = std::string(schema);
  m.name = std::string(name);
  return m;
}

// The byte that announces a tuple: 'N' new, 'K' key, 'O' old.
absl::Status ExpectTupleTag(Parser& p, absl::string_view what, uint8_t tag,
                            absl::string_view expected) {
  if (expected.find(static_cast<char>(tag)) != absl::string_view::npos) {
    return absl::OkStatus();
  }
  return p.Malformed(
      what, absl::StrFormat("tuple tag 0x%02x (expected %s)", tag, expected));
}

absl::StatusOr<PgOutputMessage> ParseInsert(Parser& p) {
  InsertMessage m;
  uint8_t tag = 0;
  TALLY_RETURN_IF_ERROR(p.U32("relation id", &m.relid));
  TALLY_RETURN_IF_ERROR(p.U8("new tuple tag", &tag));
  TALLY_RETURN_IF_ERROR(ExpectTupleTag(p, "new tuple tag", tag, "N"));
  TALLY_RETURN_IF_ERROR(ParseTuple(p, "new", &m.new_tuple));
  TALLY_RETURN_IF_ERROR(p.ExpectEnd());
  return m;
}

absl::StatusOr<PgOutputMessage> ParseUpdate(Parser& p) {
  UpdateMessage m;
  uint8_t tag = 0;
  TALLY_RETURN_IF_ERROR(p.U32("relation id", &m.relid));
  TALLY_RETURN_IF_ERROR(p.U8("tuple tag", &tag));
  TALLY_RETURN_IF_ERROR(ExpectTupleTag(p, "tuple tag", tag, "KON"));
  if (tag != 'N') {
    m.old_kind = static_cast<OldTuple>(tag);
    TALLY_RETURN_IF_ERROR(ParseTuple(p, "old", &m.old_tuple));
    TALLY_RETURN_IF_ERROR(p.U8("new tuple tag", &tag));
    TALLY_RETURN_IF_ERROR(ExpectTupleTag(p, "new tuple tag", tag, "N"));
  }
  TALLY_RETURN_IF_ERROR(ParseTuple(p, "new", &m.new_tuple));
  TALLY_RETURN_IF_ERROR(p.ExpectEnd());
  return m;
}

absl::StatusOr<PgOutputMessage> ParseDelete(Parser& p) {
  DeleteMessage m;
  uint8_t tag = 0;
  TALLY_RETURN_IF_ERROR(p.U32("relation id", &m.relid));
  TALLY_RETURN_IF_ERROR(p.U8("old tuple tag", &tag));
  TALLY_RETURN_IF_ERROR(ExpectTupleTag(p, "old tuple tag", tag, "KO"));
  m.old_kind = static_cast<OldTuple>(tag);
  TALLY_RETURN_IF_ERROR(ParseTuple(p, "old", &m.old_tuple));
  TALLY_RETURN_IF_ERROR(p.ExpectEnd());
  return m;
}

absl::StatusOr<PgOutputMessage> ParseTruncate(Parser& p) {
  TruncateMessage m;
  uint32_t nrels = 0;
  TALLY_RETURN_IF_ERROR(p.U32("relation count", &nrels));
  TALLY_RETURN_IF_ERROR(p.U8("options", &m.options));
  if (nrels > p.in().remaining() / 4) {
    return p.Malformed(
        "relation count",
        absl::StrFormat("%d relations need %d bytes but %d are left", nrels,
                        uint64_t{nrels} * 4, p.in().remaining()));
  }
  m.relids.reserve(nrels);
  for (uint32_t i = 0; i < nrels; ++i) {
    uint32_t relid = 0;
    TALLY_RETURN_IF_ERROR(p.U32("relation id", &relid));
    m.relids.push_back(relid);
  }
  TALLY_RETURN_IF_ERROR(p.ExpectEnd());
  return m;
}

absl::StatusOr<PgOutputMessage> ParseLogicalMessage(Parser& p) {
  LogicalMessage m;
  uint8_t flags = 0;
  TALLY_RETURN_IF_ERROR(p.U8("flags", &flags));
  if (flags > 1) {
    return p.Malformed("flags", absl::StrFormat("unknown flags 0x%02x", flags));
  }
  m.transactional = flags == 1;
  TALLY_RETURN_IF_ERROR(p.U64("LSN", &m.lsn));
  TALLY_RETURN_IF_ERROR(p.CString("prefix", &m.prefix));
  int32_t len = 0;
  TALLY_RETURN_IF_ERROR(p.I32("content length", &len));
  if (len < 0) {
    return p.Malformed("content length", absl::StrCat("negative length ", len));
  }
  if (!p.in().ReadBytes(static_cast<size_t>(len), &m.content)) {
    return p.Truncated(absl::StrFormat("content (%d bytes announced)", len));
  }
  TALLY_RETURN_IF_ERROR(p.ExpectEnd());
  return m;
}

}  // namespace

absl::StatusOr<PgOutputMessage> ParsePgOutputMessage(
    absl::string_view payload) {
  if (payload.empty()) {
    return absl::DataLossError("pgoutput message is empty (no type byte)");
  }
  const char type = payload[0];
  const absl::string_view body = payload.substr(1);
  switch (type) {
    case 'B': {
      Parser p(body, "Begin");
      return ParseBegin(p);
    }
    case 'C': {
      Parser p(body, "Commit");
      return ParseCommit(p);
    }
    case 'O': {
      Parser p(body, "Origin");
      return ParseOrigin(p);
    }
    case 'R': {
      Parser p(body, "Relation");
      return ParseRelation(p);
    }
    case 'Y': {
      Parser p(body, "Type");
      return ParseType(p);
    }
    case 'I': {
      Parser p(body, "Insert");
      return ParseInsert(p);
    }
    case 'U': {
      Parser p(body, "Update");
      return ParseUpdate(p);
    }
    case 'D': {
      Parser p(body, "Delete");
      return ParseDelete(p);
    }
    case 'T': {
      Parser p(body, "Truncate");
      return ParseTruncate(p);
    }
    case 'M': {
      Parser p(body, "Message");
      return ParseLogicalMessage(p);
    }
    // Streamed transactions (protocol 2) and two-phase commit (protocol 3):
    // the server sends them only when asked for, which tally never does.
    case 'S':
    case 'E':
    case 'c':
    case 'A':
    case 'b':
    case 'P':
    case 'K':
    case 'r':
    case 'p':
      return absl::UnimplementedError(absl::StrFormat(
          "pgoutput message type '%c' belongs to a streaming or two-phase "
          "protocol (version 2 or later); tally asks for version 1",
          type));
    default:
      return absl::DataLossError(absl::StrFormat(
          "unknown pgoutput message type 0x%02x (%d-byte message)",
          static_cast<uint8_t>(type), payload.size()));
  }
}

absl::string_view PgOutputMessageName(const PgOutputMessage& message) {
  struct Namer {
    absl::string_view operator()(const BeginMessage&) { return "Begin"; }
    absl::string_view operator()(const CommitMessage&) { return "Commit"; }
    absl::string_view operator()(const OriginMessage&) { return "Origin"; }
    absl::string_view operator()(const RelationMessage&) { return "Relation"; }
    absl::string_view operator()(const TypeMessage&) { return "Type"; }
    absl::string_view operator()(const InsertMessage&) { return "Insert"; }
    absl::string_view operator()(const UpdateMessage&) { return "Update"; }
    absl::string_view operator()(const DeleteMessage&) { return "Delete"; }
    absl::string_view operator()(const TruncateMessage&) { return "Truncate"; }
    absl::string_view operator()(const LogicalMessage&) { return "Message"; }
  };
  return std::visit(Namer{}, message);
}

}  // namespace pg
}  // namespace tally
