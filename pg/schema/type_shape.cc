#include "pg/schema/type_shape.h"

#include <cstdint>
#include <utility>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/string_view.h"
#include "pg/wire/internal/big_endian.h"
#include "tree/status_macros.h"

namespace tally {
namespace pg {

using internal::LoadBigEndian32;

namespace {

// array_recv's limit (MAXDIM).
constexpr int32_t kMaxArrayDimensions = 6;

// range_send's flags (utils/rangetypes.h): a bound is sent unless the
// range is empty or the bound is infinite (or NULL, which is unused).
constexpr uint8_t kRangeEmpty = 0x01;
constexpr uint8_t kRangeLowerInfinite = 0x08;
constexpr uint8_t kRangeUpperInfinite = 0x10;
constexpr uint8_t kRangeLowerNull = 0x20;
constexpr uint8_t kRangeUpperNull = 0x40;

void StoreOid(char* p, Oid v) {
  p[0] = static_cast<char>(v >> 24);
  p[1] = static_cast<char>(v >> 16);
  p[2] = static_cast<char>(v >> 8);
  p[3] = static_cast<char>(v);
}

// One walk over one value. Offsets are from the start of the value.
class Walker {
 public:
  Walker(OidMode mode, char* data, size_t size)
      : mode_(mode), data_(data), size_(size) {}

  absl::Status Walk(const TypeShape& shape) { return Value(shape, 0, size_); }

 private:
  absl::Status Error(const TypeShape& shape, size_t at,
                     absl::string_view what) const {
    std::string message =
        absl::StrCat("malformed ", shape.type, " value at byte ", at, " of ",
                     size_, ": ", what);
    return mode_ == OidMode::kCanonical
               ? absl::DataLossError(std::move(message))
               : absl::InvalidArgumentError(std::move(message));
  }

  // Reads a big-endian int32 at `*pos`, before `end`, and advances.
  bool Read32(size_t* pos, size_t end, uint32_t* v) const {
    if (end - *pos < 4) return false;
    *v = LoadBigEndian32(data_ + *pos);
    *pos += 4;
    return true;
  }

  void Rewrite(size_t at, Oid local) {
    const Oid carried = LoadBigEndian32(data_ + at);
    if (mode_ == OidMode::kCanonical) {
      if (carried >= kFirstNormalObjectId) StoreOid(data_ + at, 0);
    } else if (carried == 0) {
      StoreOid(data_ + at, local);
    }
  }

  // A length-prefixed inner value (an element, a field, a bound, a range)
  // at `*pos`: -1 is NULL when `nullable`. Walks it when its shape embeds
  // an OID to rewrite.
  absl::Status Inner(const TypeShape& outer, const TypeShape::Child& child,
                     bool nullable, size_t* pos, size_t end,
                     absl::string_view what) {
    const size_t at = *pos;
    uint32_t length = 0;
    if (!Read32(pos, end, &length)) {
      return Error(outer, at, absl::StrCat("the length of ", what, " is cut"));
    }
    if (length == 0xffffffffu && nullable) return absl::OkStatus();
    if (length > end - *pos) {
      return Error(outer, at,
                   absl::StrCat(what, " of ", static_cast<int32_t>(length),
                                " bytes; ", end - *pos, " follow"));
    }
    const size_t begin = *pos;
    *pos += length;
    if (child.shape == nullptr || !child.shape->rewrites) {
      return absl::OkStatus();
    }
    return Value(*child.shape, begin, begin + length);
  }

  absl::Status Value(const TypeShape& shape, size_t begin, size_t end) {
    size_t pos = begin;
    switch (shape.kind) {
      case TypeShape::Kind::kOpaque:
        return absl::OkStatus();
      case TypeShape::Kind::kArray: {
        uint32_t ndim = 0, flags = 0, elem = 0;
        if (!Read32(&pos, end, &ndim) || !Read32(&pos, end, &flags) ||
            !Read32(&pos, end, &elem)) {
          return Error(shape, begin, "the array header is cut");
        }
        if (static_cast<int32_t>(ndim) < 0 ||
            static_cast<int32_t>(ndim) > kMaxArrayDimensions) {
          return Error(shape, begin,
                       absl::StrCat(static_cast<int32_t>(ndim),
                                    " dimensions (0 to 6 allowed)"));
        }
        if (flags > 1) {
          return Error(shape, begin + 4,
                       absl::StrCat("array flags ", flags, " (0 or 1)"));
        }
        Rewrite(begin + 8, shape.children[0].oid);
        uint64_t items = ndim == 0 ? 0 : 1;
        for (uint32_t d = 0; d < ndim; ++d) {
          const size_t at = pos;
          uint32_t size = 0, lower = 0;
          if (!Read32(&pos, end, &size) || !Read32(&pos, end, &lower)) {
            return Error(shape, at, "the array's dimensions are cut");
          }
          if (static_cast<int32_t>(size) < 0) {
            return Error(shape, at, "a negative dimension");
          }
          items *= size;
          // Every element takes at least its 4-byte length: a count
          // past that is a lie, and stops the product from overflowing.
          if (items > (end - begin) / 4) {
            return Error(shape, at,
                         absl::StrCat("dimensions of ", items, " elements in ",
                                      end - begin, " bytes"));
          }
        }
        for (uint64_t i = 0; i < items; ++i) {
          TALLY_RETURN_IF_ERROR(Inner(shape, shape.children[0], true, &pos, end,
                                      absl::StrCat("element ", i + 1)));
        }
        break;
      }
      case TypeShape::Kind::kComposite: {
        uint32_t count = 0;
        if (!Read32(&pos, end, &count)) {
          return Error(shape, begin, "the field count is cut");
        }
        if (count != shape.children.size()) {
          return Error(
              shape, begin,
              absl::StrCat(static_cast<int32_t>(count),
                           " fields; the type has ", shape.children.size()));
        }
        for (const TypeShape::Child& field : shape.children) {
          const size_t at = pos;
          uint32_t oid = 0;
          if (!Read32(&pos, end, &oid)) {
            return Error(
                shape, at,
                absl::StrCat("the type of field ", field.name, " is cut"));
          }
          Rewrite(at, field.oid);
          TALLY_RETURN_IF_ERROR(Inner(shape, field, true, &pos, end,
                                      absl::StrCat("field ", field.name)));
        }
        break;
      }
      case TypeShape::Kind::kRange: {
        if (pos == end) return Error(shape, begin, "no range flags");
        const uint8_t flags = static_cast<uint8_t>(data_[pos++]);
        if (!(flags & (kRangeEmpty | kRangeLowerInfinite | kRangeLowerNull))) {
          TALLY_RETURN_IF_ERROR(Inner(shape, shape.children[0], false, &pos,
                                      end, "the lower bound"));
        }
        if (!(flags & (kRangeEmpty | kRangeUpperInfinite | kRangeUpperNull))) {
          TALLY_RETURN_IF_ERROR(Inner(shape, shape.children[0], false, &pos,
                                      end, "the upper bound"));
        }
        break;
      }
      case TypeShape::Kind::kMultirange: {
        uint32_t count = 0;
        if (!Read32(&pos, end, &count)) {
          return Error(shape, begin, "the range count is cut");
        }
        if (count > (end - pos) / 4) {
          return Error(shape, begin,
                       absl::StrCat(count, " ranges in ", end - pos, " bytes"));
        }
        for (uint32_t i = 0; i < count; ++i) {
          TALLY_RETURN_IF_ERROR(Inner(shape, shape.children[0], false, &pos,
                                      end, absl::StrCat("range ", i + 1)));
        }
        break;
      }
    }
    if (pos != end) {
      return Error(shape, pos,
                   absl::StrCat(end - pos, " bytes after the value's end"));
    }
    return absl::OkStatus();
  }

  const OidMode mode_;
  char* const data_;
  const size_t size_;
};

// What one catalog row says of a type.
struct RawType {
  char typtype = 'b';
  Oid element = 0;  // of a true array (array_subscript_handler)
  Oid base = 0;     // of a domain
  std::string base_type;
  Oid relid = 0;     // of a composite
  Oid subtype = 0;   // of a range
  Oid range = 0;     // of a multirange
  std::string name;  // format_type(oid, NULL)
  std::string element_type, subtype_type, range_type;
  std::vector<TypeShape::Child> fields;  // shapes filled in later
};

constexpr absl::string_view kTypesQuery = R"sql(
SELECT t.oid, t.typtype,
       CASE WHEN t.typsubscript =
                 'pg_catalog.array_subscript_handler'::pg_catalog.regproc
            THEN t.typelem ELSE 0 END,
       t.typbasetype, t.typrelid, coalesce(r.rngsubtype, 0),
       coalesce(m.rngtypid, 0), pg_catalog.format_type(t.oid, NULL),
       pg_catalog.format_type(t.typbasetype, t.typtypmod),
       pg_catalog.format_type(t.typelem, NULL),
       pg_catalog.format_type(r.rngsubtype, NULL),
       pg_catalog.format_type(m.rngtypid, NULL)
FROM pg_catalog.pg_type t
LEFT JOIN pg_catalog.pg_range r ON r.rngtypid = t.oid
LEFT JOIN pg_catalog.pg_range m ON m.rngmultitypid = t.oid
WHERE t.oid = ANY ($1::pg_catalog.oid[])
)sql";

constexpr absl::string_view kFieldsQuery = R"sql(
SELECT a.attrelid, a.attname, a.atttypid,
       pg_catalog.format_type(a.atttypid, a.atttypmod)
FROM pg_catalog.pg_attribute a
WHERE a.attrelid = ANY ($1::pg_catalog.oid[]) AND a.attnum > 0
  AND NOT a.attisdropped
ORDER BY a.attrelid, a.attnum
)sql";

std::string OidArray(const std::vector<Oid>& oids) {
  return absl::StrCat("{", absl::StrJoin(oids, ","), "}");
}

absl::Status NotNumeric(absl::string_view what) {
  return absl::InternalError(
      absl::StrCat("the catalog's ", what, " is not a number"));
}

class ShapeBuilder {
 public:
  explicit ShapeBuilder(const absl::flat_hash_map<Oid, RawType>& raw)
      : raw_(raw) {}

  absl::StatusOr<std::shared_ptr<const TypeShape>> Build(Oid oid) {
    if (oid < kFirstNormalObjectId) return nullptr;
    auto done = built_.find(oid);
    if (done != built_.end()) return done->second;
    auto it = raw_.find(oid);
    if (it == raw_.end()) {
      return absl::FailedPreconditionError(absl::StrCat(
          "type ", oid, " is not in the catalog (dropped meanwhile?)"));
    }
    const RawType& t = it->second;
    auto shape = std::make_shared<TypeShape>();
    shape->type = t.name;
    auto child = [&](Oid child_oid, std::string name,
                     std::string type) -> absl::Status {
      TypeShape::Child c;
      c.oid = child_oid;
      c.name = std::move(name);
      c.type = std::move(type);
      TALLY_ASSIGN_OR_RETURN(c.shape, Build(child_oid));
      shape->children.push_back(std::move(c));
      return absl::OkStatus();
    };
    if (t.typtype == 'd') {
      TALLY_ASSIGN_OR_RETURN(std::shared_ptr<const TypeShape> base,
                             Build(t.base));
      if (base == nullptr) {
        shape->type = t.base_type;  // a domain over a builtin type
      } else {
        shape = nullptr;
        built_[oid] = base;
        return base;
      }
    } else if (t.element != 0) {
      shape->kind = TypeShape::Kind::kArray;
      TALLY_RETURN_IF_ERROR(child(t.element, "", t.element_type));
    } else if (t.typtype == 'c') {
      shape->kind = TypeShape::Kind::kComposite;
      for (const TypeShape::Child& f : t.fields) {
        TALLY_RETURN_IF_ERROR(child(f.oid, f.name, f.type));
      }
    } else if (t.typtype == 'r' && t.subtype != 0) {
      shape->kind = TypeShape::Kind::kRange;
      TALLY_RETURN_IF_ERROR(child(t.subtype, "", t.subtype_type));
    } else if (t.typtype == 'm' && t.range != 0) {
      shape->kind = TypeShape::Kind::kMultirange;
      TALLY_RETURN_IF_ERROR(child(t.range, "", t.range_type));
    }
    shape->has_composite = shape->kind == TypeShape::Kind::kComposite;
    for (const TypeShape::Child& c : shape->children) {
      const bool embedded = shape->kind == TypeShape::Kind::kArray ||
                            shape->kind == TypeShape::Kind::kComposite;
      if ((embedded && c.oid >= kFirstNormalObjectId) ||
          (c.shape != nullptr && c.shape->rewrites)) {
        shape->rewrites = true;
      }
      if (c.shape != nullptr && c.shape->has_composite) {
        shape->has_composite = true;
      }
    }
    built_[oid] = shape;
    return std::shared_ptr<const TypeShape>(std::move(shape));
  }

 private:
  const absl::flat_hash_map<Oid, RawType>& raw_;
  absl::flat_hash_map<Oid, std::shared_ptr<const TypeShape>> built_;
};

std::string DescribeChild(const TypeShape::Child& c) {
  return c.shape == nullptr ? c.type : DescribeShape(*c.shape);
}

}  // namespace

absl::Status RewriteOids(const TypeShape& shape, OidMode mode, char* data,
                         size_t size) {
  return Walker(mode, data, size).Walk(shape);
}

std::string DescribeShape(const TypeShape& shape) {
  switch (shape.kind) {
    case TypeShape::Kind::kOpaque:
      return shape.type;
    case TypeShape::Kind::kArray:
      return absl::StrCat(DescribeChild(shape.children[0]), "[]");
    case TypeShape::Kind::kComposite:
      return absl::StrCat(
          shape.type, "(",
          absl::StrJoin(shape.children, ", ",
                        [](std::string* out, const TypeShape::Child& c) {
                          absl::StrAppend(out, c.name, " ", DescribeChild(c));
                        }),
          ")");
    case TypeShape::Kind::kRange:
    case TypeShape::Kind::kMultirange:
      return absl::StrCat(shape.type, "(", DescribeChild(shape.children[0]),
                          ")");
  }
  return shape.type;
}

absl::StatusOr<TypeShapes> ReadTypeShapes(Connection& conn,
                                          absl::Span<const Oid> oids) {
  absl::flat_hash_map<Oid, RawType> raw;
  std::vector<Oid> pending;
  absl::flat_hash_set<Oid> asked;
  auto want = [&](Oid oid) {
    if (oid >= kFirstNormalObjectId && asked.insert(oid).second) {
      pending.push_back(oid);
    }
  };
  for (Oid oid : oids) want(oid);
  // One round per level of nesting: each asks for the types the last one
  // named.
  while (!pending.empty()) {
    const std::vector<Oid> round = std::move(pending);
    pending.clear();
    TALLY_ASSIGN_OR_RETURN(
        Result types,
        conn.ExecParams(kTypesQuery, {Param::Text(OidArray(round))}));
    std::vector<Oid> relids;
    absl::flat_hash_map<Oid, Oid> type_of_relid;
    for (int r = 0; r < types.rows(); ++r) {
      Oid oid = 0;
      RawType t;
      if (!absl::SimpleAtoi(types.Value(r, 0), &oid) ||
          !absl::SimpleAtoi(types.Value(r, 2), &t.element) ||
          !absl::SimpleAtoi(types.Value(r, 3), &t.base) ||
          !absl::SimpleAtoi(types.Value(r, 4), &t.relid) ||
          !absl::SimpleAtoi(types.Value(r, 5), &t.subtype) ||
          !absl::SimpleAtoi(types.Value(r, 6), &t.range)) {
        return NotNumeric("pg_type row");
      }
      t.typtype = types.Value(r, 1).empty() ? 'b' : types.Value(r, 1)[0];
      t.name = std::string(types.Value(r, 7));
      t.base_type = std::string(types.Value(r, 8));
      t.element_type = std::string(types.Value(r, 9));
      t.subtype_type = std::string(types.Value(r, 10));
      t.range_type = std::string(types.Value(r, 11));
      if (t.typtype == 'd') want(t.base);
      want(t.element);
      want(t.subtype);
      want(t.range);
      if (t.typtype == 'c' && t.relid != 0) {
        relids.push_back(t.relid);
        type_of_relid[t.relid] = oid;
      }
      raw[oid] = std::move(t);
    }
    if (relids.empty()) continue;
    TALLY_ASSIGN_OR_RETURN(
        Result fields,
        conn.ExecParams(kFieldsQuery, {Param::Text(OidArray(relids))}));
    for (int r = 0; r < fields.rows(); ++r) {
      Oid relid = 0;
      TypeShape::Child f;
      if (!absl::SimpleAtoi(fields.Value(r, 0), &relid) ||
          !absl::SimpleAtoi(fields.Value(r, 2), &f.oid)) {
        return NotNumeric("pg_attribute row");
      }
      f.name = std::string(fields.Value(r, 1));
      f.type = std::string(fields.Value(r, 3));
      want(f.oid);
      raw[type_of_relid[relid]].fields.push_back(std::move(f));
    }
  }
  ShapeBuilder builder(raw);
  TypeShapes shapes;
  for (Oid oid : oids) {
    TALLY_ASSIGN_OR_RETURN(shapes[oid], builder.Build(oid));
  }
  return shapes;
}

}  // namespace pg
}  // namespace tally
