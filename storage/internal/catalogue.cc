#include "storage/internal/catalogue.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace tally {
namespace storage {
namespace internal {

KeyspaceId CatalogueEdit::AddKeyspace(const std::string& name, int depth) {
  const KeyspaceId id = next_keyspace_id;
  next_keyspace_id = KeyspaceId(id.value() + 1);
  new_keyspaces.emplace(name, NewKeyspace{id, depth});
  return id;
}

OriginId CatalogueEdit::AddOrigin(const std::string& name) {
  const OriginId id = next_origin_id;
  next_origin_id = OriginId(id.value() + 1);
  new_origins.emplace(name, id);
  return id;
}

std::string CatalogueEdit::NewOriginName(OriginId id) const {
  for (const auto& [name, new_id] : new_origins) {
    if (new_id == id) return name;
  }
  return std::string();
}

void Catalogue::RecoverNextIds(KeyspaceId next_keyspace_id,
                               OriginId next_origin_id) {
  absl::MutexLock lock(&mu_);
  next_keyspace_id_ = next_keyspace_id;
  next_origin_id_ = next_origin_id;
}

void Catalogue::RecoverOrigin(OriginId id, std::string name) {
  absl::MutexLock lock(&mu_);
  origin_ids_[name] = id;
  origin_names_[id] = std::move(name);
}

void Catalogue::RecoverKeyspace(Keyspace keyspace, tree::MerkleTree tree) {
  absl::MutexLock lock(&mu_);
  AddEntry(std::move(keyspace), std::move(tree));
}

void Catalogue::RecoverOriginRows(
    absl::flat_hash_map<OriginId, uint64_t> rows) {
  absl::MutexLock lock(&mu_);
  origin_rows_ = std::move(rows);
}

void Catalogue::AddEntry(Keyspace keyspace, tree::MerkleTree tree) {
  mu_.AssertHeld();
  auto entry =
      std::make_unique<Entry>(Entry{std::move(keyspace), std::move(tree)});
  keyspaces_by_id_[entry->keyspace.id] = entry.get();
  const std::string name = entry->keyspace.name;
  keyspaces_.emplace(name, std::move(entry));
}

Catalogue::Entry& Catalogue::EntryOf(KeyspaceId id) {
  mu_.AssertHeld();
  if (auto it = keyspaces_by_id_.find(id); it != keyspaces_by_id_.end()) {
    return *it->second;
  }
  return *retired_by_id_.at(id);
}

const tree::MerkleTree& Catalogue::TreeOf(KeyspaceId id) const {
  mu_.AssertHeld();
  if (auto it = keyspaces_by_id_.find(id); it != keyspaces_by_id_.end()) {
    return it->second->tree;
  }
  return retired_by_id_.at(id)->tree;
}

void Catalogue::RecoverDropped(std::string name, KeyspaceId former_id,
                               int64_t dropped_unix_ms) {
  absl::MutexLock lock(&mu_);
  dropped_[std::move(name)] = Dropped{former_id, dropped_unix_ms};
}

void Catalogue::RecoverRetiredId(KeyspaceId id, std::string name) {
  absl::MutexLock lock(&mu_);
  retired_names_[id] = std::move(name);
}

void Catalogue::Drop(absl::string_view name, int64_t dropped_unix_ms) {
  absl::MutexLock lock(&mu_);
  auto it = keyspaces_.find(name);
  if (it == keyspaces_.end()) return;  // (REQUIRES broken: nothing to do)
  std::unique_ptr<Entry> entry = std::move(it->second);
  keyspaces_.erase(it);
  keyspaces_by_id_.erase(entry->keyspace.id);
  // Its rows are gone: a view still holding it reads an empty tree.
  entry->tree = tree::MerkleTree::Create(entry->keyspace.depth).value();
  dropped_[entry->keyspace.name] = Dropped{entry->keyspace.id, dropped_unix_ms};
  retired_names_[entry->keyspace.id] = entry->keyspace.name;
  retired_by_id_[entry->keyspace.id] = entry.get();
  retired_.push_back(std::move(entry));
}

void Catalogue::Undrop(absl::string_view name) {
  absl::MutexLock lock(&mu_);
  if (auto it = dropped_.find(name); it != dropped_.end()) dropped_.erase(it);
}

bool Catalogue::IsDropped(absl::string_view name) const {
  absl::MutexLock lock(&mu_);
  return dropped_.find(name) != dropped_.end();
}

std::vector<DroppedKeyspaceInfo> Catalogue::ListDropped() const {
  absl::MutexLock lock(&mu_);
  std::vector<DroppedKeyspaceInfo> out;
  out.reserve(dropped_.size());
  for (const auto& [name, d] : dropped_) {
    out.push_back(DroppedKeyspaceInfo{name, d.dropped_unix_ms});
  }
  return out;
}

std::string Catalogue::DroppedName(KeyspaceId id) const {
  absl::MutexLock lock(&mu_);
  auto it = retired_names_.find(id);
  return it == retired_names_.end() ? std::string() : it->second;
}

CatalogueEdit Catalogue::StartEdit() const {
  CatalogueEdit edit;
  absl::MutexLock lock(&mu_);
  edit.next_keyspace_id = next_keyspace_id_;
  edit.next_origin_id = next_origin_id_;
  edit.first_new_origin_id = next_origin_id_;
  return edit;
}

void Catalogue::Install(const CatalogueEdit& edit) {
  absl::MutexLock lock(&mu_);
  for (const auto& [name, nk] : edit.new_keyspaces) {
    AddEntry(Keyspace{name, nk.id, nk.depth},
             tree::MerkleTree::Create(nk.depth).value());
  }
  next_keyspace_id_ = edit.next_keyspace_id;
  for (const auto& [name, id] : edit.new_origins) {
    origin_ids_[name] = id;
    origin_names_[id] = name;
  }
  next_origin_id_ = edit.next_origin_id;
  // Roots before the edit, per keyspace it touches (usually one).
  std::vector<std::pair<Entry*, tree::Digest128>> roots;
  for (const CatalogueEdit::LeafDelta& d : edit.leaf_deltas) {
    Entry* e = &EntryOf(d.keyspace);
    if (roots.empty() || roots.back().first != e) {
      auto seen = std::find_if(roots.begin(), roots.end(),
                               [e](const auto& r) { return r.first == e; });
      if (seen == roots.end()) roots.emplace_back(e, e->tree.root().digest);
    }
    e->tree.Update(d.leaf, d.digest, d.count);
  }
  for (const auto& [e, root] : roots) {
    if (e->tree.root().digest != root) ++e->root_changes;
  }
  for (const auto& [id, rows] : edit.origin_rows) {
    if (rows == 0) {
      origin_rows_.erase(id);
    } else {
      origin_rows_[id] = rows;
    }
  }
}

size_t Catalogue::SetLeaves(
    const Keyspace& keyspace,
    absl::Span<const std::pair<uint64_t, tree::NodeState>> leaves) {
  absl::MutexLock lock(&mu_);
  Entry& e = EntryOf(keyspace.id);
  const tree::Digest128 root = e.tree.root().digest;
  size_t changed = 0;
  for (const auto& [leaf, state] : leaves) {
    const tree::NodeState& now = e.tree.leaf(leaf);
    if (now != state) ++changed;
    e.tree.Update(
        leaf, now.digest ^ state.digest,
        static_cast<int64_t>(state.count) - static_cast<int64_t>(now.count));
  }
  if (e.tree.root().digest != root) ++e.root_changes;
  return changed;
}

const Keyspace* Catalogue::Find(absl::string_view name) const {
  absl::MutexLock lock(&mu_);
  auto it = keyspaces_.find(name);
  return it == keyspaces_.end() ? nullptr : &it->second->keyspace;
}

const Keyspace* Catalogue::Find(KeyspaceId id) const {
  absl::MutexLock lock(&mu_);
  auto it = keyspaces_by_id_.find(id);
  return it == keyspaces_by_id_.end() ? nullptr : &it->second->keyspace;
}

size_t Catalogue::keyspace_count() const {
  absl::MutexLock lock(&mu_);
  return keyspaces_.size();
}

KeyspaceInfo Catalogue::InfoOf(const Entry& e) {
  return KeyspaceInfo{e.keyspace.name, e.keyspace.depth, e.tree.root().count,
                      e.tree.root().digest, e.root_changes};
}

absl::StatusOr<KeyspaceInfo> Catalogue::GetKeyspace(
    absl::string_view name) const {
  absl::MutexLock lock(&mu_);
  auto it = keyspaces_.find(name);
  if (it == keyspaces_.end()) {
    return KeyspaceNotFound(name);
  }
  return InfoOf(*it->second);
}

std::vector<KeyspaceInfo> Catalogue::ListKeyspaces() const {
  absl::MutexLock lock(&mu_);
  std::vector<KeyspaceInfo> out;
  out.reserve(keyspaces_.size());
  for (const auto& [name, e] : keyspaces_) out.push_back(InfoOf(*e));
  return out;
}

std::vector<tree::NodeState> Catalogue::LeafStates(
    absl::Span<const LeafRef> leaves) const {
  std::vector<tree::NodeState> states;
  states.reserve(leaves.size());
  absl::MutexLock lock(&mu_);
  for (const LeafRef& ref : leaves) {
    states.push_back(TreeOf(ref.keyspace).leaf(ref.leaf));
  }
  return states;
}

std::vector<std::pair<const Keyspace*, tree::MerkleTree>> Catalogue::CopyTrees()
    const {
  std::vector<std::pair<const Keyspace*, tree::MerkleTree>> out;
  absl::MutexLock lock(&mu_);
  for (const auto& [name, e] : keyspaces_) {
    out.emplace_back(&e->keyspace, e->tree.Copy());
  }
  return out;
}

std::string Catalogue::OriginName(OriginId id) const {
  absl::MutexLock lock(&mu_);
  auto it = origin_names_.find(id);
  return it == origin_names_.end() ? std::string() : it->second;
}

std::optional<OriginId> Catalogue::FindOrigin(absl::string_view name) const {
  absl::MutexLock lock(&mu_);
  auto it = origin_ids_.find(name);
  if (it == origin_ids_.end()) return std::nullopt;
  return it->second;
}

uint64_t Catalogue::origin_rows(OriginId id) const {
  absl::MutexLock lock(&mu_);
  auto it = origin_rows_.find(id);
  return it == origin_rows_.end() ? 0 : it->second;
}

absl::flat_hash_map<OriginId, uint64_t> Catalogue::AllOriginRows() const {
  absl::MutexLock lock(&mu_);
  return origin_rows_;
}

std::vector<OriginRowCount> Catalogue::OriginRowCounts() const {
  std::vector<OriginRowCount> out;
  {
    absl::MutexLock lock(&mu_);
    for (const auto& [id, rows] : origin_rows_) {
      auto name = origin_names_.find(id);
      out.push_back(OriginRowCount{name == origin_names_.end()
                                       ? absl::StrCat("#", id.value())
                                       : name->second,
                                   rows});
    }
  }
  std::sort(out.begin(), out.end(),
            [](const OriginRowCount& a, const OriginRowCount& b) {
              return a.origin < b.origin;
            });
  return out;
}

}  // namespace internal
}  // namespace storage
}  // namespace tally
