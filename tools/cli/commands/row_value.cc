#include "tools/cli/commands/row_value.h"

#include "absl/status/statusor.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"

namespace tally {
namespace cli {

ReadValue ReadRowValue(const Context& ctx, node::NodeClient& node,
                       const std::string& key) {
  absl::StatusOr<v1::GetResponse> r = node.Get(ctx.keyspace, key);
  if (absl::IsNotFound(r.status())) return {std::nullopt, "missing"};
  if (!r.ok()) return {std::nullopt, std::string(r.status().message())};
  if (!r->has_row()) {
    return {std::nullopt,
            "a sidecar's table's row: read it with tally get and its primary "
            "key"};
  }
  if (r->row().deleted()) return {std::nullopt, "deleted"};
  return {r->row().value(), ""};
}

std::string ValueText(const ReadValue& read) {
  if (!read.value.has_value()) return absl::StrCat("(", read.none, ")");
  constexpr size_t kShown = 200;
  std::string text = absl::CHexEscape(*read.value);
  if (text.size() > kShown) {
    text = absl::StrCat(text.substr(0, kShown), "... (", read.value->size(),
                        " bytes)");
  }
  return absl::StrCat("'", text, "'");
}

Json ValueJson(const ReadValue& read) {
  Json out = Json::object();
  if (read.value.has_value()) {
    SetBytesField(out, "value", *read.value);
  } else {
    out["none"] = read.none;
  }
  return out;
}

}  // namespace cli
}  // namespace tally
