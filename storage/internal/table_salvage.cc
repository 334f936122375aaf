#include "storage/internal/table_salvage.h"

#include <fcntl.h>
#include <leveldb/comparator.h>
#include <leveldb/filter_policy.h>
#include <leveldb/iterator.h>
#include <leveldb/table.h>
#include <leveldb/table_builder.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <system_error>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "tree/status_macros.h"

namespace tally {
namespace storage {
namespace internal {
namespace {

// The order of LevelDB's internal keys in a table (LevelDB's own comparator
// for them is not part of its public headers): the user key bytewise, as the
// store's options leave LevelDB's default comparator, then the 8-byte
// trailer (sequence << 8 | type, little-endian) descending. Keys shorter
// than the trailer never reach it: the salvage drops them first.
class InternalKeyOrder : public leveldb::Comparator {
 public:
  int Compare(const leveldb::Slice& a, const leveldb::Slice& b) const override {
    const leveldb::Slice a_user(a.data(), a.size() - 8);
    const leveldb::Slice b_user(b.data(), b.size() - 8);
    const int r = a_user.compare(b_user);
    if (r != 0) return r;
    const uint64_t a_trailer = Trailer(a);
    const uint64_t b_trailer = Trailer(b);
    if (a_trailer > b_trailer) return -1;
    if (a_trailer < b_trailer) return +1;
    return 0;
  }
  const char* Name() const override { return "tally.SalvageInternalKeyOrder"; }
  // Index keys left as they are: longer than LevelDB's shortened ones, and
  // as correct.
  void FindShortestSeparator(std::string*,
                             const leveldb::Slice&) const override {}
  void FindShortSuccessor(std::string*) const override {}

 private:
  static uint64_t Trailer(const leveldb::Slice& key) {
    uint64_t trailer = 0;
    for (int i = 7; i >= 0; --i) {
      trailer = (trailer << 8) |
                static_cast<unsigned char>(key.data()[key.size() - 8 + i]);
    }
    return trailer;
  }
};

bool IsTableFile(const std::string& name) {
  for (const char* suffix : {".ldb", ".sst"}) {
    const size_t n = std::strlen(suffix);
    if (name.size() > n && name.compare(name.size() - n, n, suffix) == 0 &&
        std::all_of(name.begin(), name.end() - n,
                    [](char c) { return c >= '0' && c <= '9'; })) {
      return true;
    }
  }
  return false;
}

using EntryVisitor =
    std::function<bool(const leveldb::Slice& key, const leveldb::Slice& value)>;

// An entry LevelDB could have written: a trailer, a known type (0 deletion,
// 1 value), and after the one before it.
bool Plausible(const InternalKeyOrder& order, const leveldb::Slice& key,
               const std::string& last) {
  if (key.size() < 8) return false;
  if (static_cast<unsigned char>(key.data()[key.size() - 8]) > 1) return false;
  return last.empty() || order.Compare(key, leveldb::Slice(last)) > 0;
}

// --- Reading a table whose index block fails its checksum ---------------
//
// Table::Open refuses such a table, yet most of its index entries (each the
// offset and size of a data block) are usually intact. The index is read
// unchecked through a table made up for it: the file's bytes followed by a
// one-entry index that names the real index block as if it were a data
// block, and a footer. Each entry that names a block inside the file's data
// is then read, checksum verified, through a second made-up index listing
// them. Only public LevelDB interfaces are used; the formats are LevelDB's
// documented table format (doc/table_format.md).

constexpr uint64_t kTableMagic = 0xdb4775248b80fb57ull;
constexpr size_t kFooterSize = 48;       // two handles padded to 40, magic
constexpr size_t kBlockTrailerSize = 5;  // compression type, crc32c

struct BlockHandle {
  uint64_t offset = 0;
  uint64_t size = 0;
  bool operator<(const BlockHandle& o) const {
    return offset != o.offset ? offset < o.offset : size < o.size;
  }
  bool operator==(const BlockHandle& o) const {
    return offset == o.offset && size == o.size;
  }
};

void PutVarint(std::string* dst, uint64_t v) {
  while (v >= 128) {
    dst->push_back(static_cast<char>(v | 128));
    v >>= 7;
  }
  dst->push_back(static_cast<char>(v));
}

void PutFixed32(std::string* dst, uint32_t v) {
  for (int i = 0; i < 4; ++i) dst->push_back(static_cast<char>(v >> (8 * i)));
}

bool GetVarint(const char** p, const char* limit, uint64_t* v) {
  uint64_t result = 0;
  for (int shift = 0; shift <= 63 && *p < limit; shift += 7) {
    const uint64_t byte = static_cast<unsigned char>(*(*p)++);
    result |= (byte & 127) << shift;
    if ((byte & 128) == 0) {
      *v = result;
      return true;
    }
  }
  return false;
}

bool DecodeHandle(const char** p, const char* limit, BlockHandle* handle) {
  return GetVarint(p, limit, &handle->offset) &&
         GetVarint(p, limit, &handle->size);
}

std::string EncodeHandle(const BlockHandle& handle) {
  std::string out;
  PutVarint(&out, handle.offset);
  PutVarint(&out, handle.size);
  return out;
}

// An index block naming `blocks`, uncompressed, keys unshared, one restart
// point, and its trailer (its checksum is never verified: the table made up
// around it is opened without paranoid checks). The keys only have to be
// distinct internal keys: the block is only iterated, never sought.
std::string IndexNaming(const std::vector<BlockHandle>& blocks) {
  std::string block;
  for (size_t i = 0; i < blocks.size(); ++i) {
    std::string key(16, '\0');
    for (int b = 0; b < 8; ++b) key[b] = static_cast<char>(i >> (56 - 8 * b));
    const std::string value = EncodeHandle(blocks[i]);
    PutVarint(&block, 0);
    PutVarint(&block, key.size());
    PutVarint(&block, value.size());
    block += key;
    block += value;
  }
  PutFixed32(&block, 0);  // the restart point
  PutFixed32(&block, 1);  // their number
  block.push_back('\0');  // no compression
  PutFixed32(&block, 0);  // unchecked
  return block;
}

// A file's bytes with more bytes after them.
class ExtendedFile : public leveldb::RandomAccessFile {
 public:
  ExtendedFile(const leveldb::RandomAccessFile* base, uint64_t base_size,
               std::string tail)
      : base_(base), base_size_(base_size), tail_(std::move(tail)) {}

  uint64_t size() const { return base_size_ + tail_.size(); }

  leveldb::Status Read(uint64_t offset, size_t n, leveldb::Slice* result,
                       char* scratch) const override {
    if (offset >= base_size_) {
      const uint64_t at = std::min<uint64_t>(offset - base_size_, tail_.size());
      *result = leveldb::Slice(tail_.data() + at,
                               std::min<uint64_t>(n, tail_.size() - at));
      return leveldb::Status::OK();
    }
    if (n <= base_size_ - offset)
      return base_->Read(offset, n, result, scratch);
    const size_t head = base_size_ - offset;
    leveldb::Slice part;
    leveldb::Status s = base_->Read(offset, head, &part, scratch);
    if (!s.ok()) return s;
    if (part.data() != scratch) std::memmove(scratch, part.data(), part.size());
    size_t filled = part.size();
    if (filled == head) {
      const size_t rest = std::min<size_t>(n - head, tail_.size());
      std::memcpy(scratch + filled, tail_.data(), rest);
      filled += rest;
    }
    *result = leveldb::Slice(scratch, filled);
    return leveldb::Status::OK();
  }

 private:
  const leveldb::RandomAccessFile* const base_;
  const uint64_t base_size_;
  const std::string tail_;
};

// `file` (of `size` bytes) with an index naming `blocks` after it: opened
// unchecked, it reads as a table of those blocks.
std::unique_ptr<ExtendedFile> WithIndex(
    const leveldb::RandomAccessFile* file, uint64_t size,
    const std::vector<BlockHandle>& blocks) {
  std::string tail = IndexNaming(blocks);
  const BlockHandle index{size, tail.size() - kBlockTrailerSize};
  std::string footer = EncodeHandle(BlockHandle{size, 0});  // no metaindex
  footer += EncodeHandle(index);
  footer.resize(kFooterSize - 8, '\0');
  PutFixed32(&footer, static_cast<uint32_t>(kTableMagic));
  PutFixed32(&footer, static_cast<uint32_t>(kTableMagic >> 32));
  tail += footer;
  return std::make_unique<ExtendedFile>(file, size, std::move(tail));
}

std::unique_ptr<leveldb::Table> OpenUnchecked(const leveldb::Comparator& order,
                                              ExtendedFile& file) {
  leveldb::Options options;
  options.comparator = &order;
  options.paranoid_checks = false;
  options.filter_policy = nullptr;
  leveldb::Table* table = nullptr;
  if (!leveldb::Table::Open(options, &file, file.size(), &table).ok()) {
    return nullptr;
  }
  return std::unique_ptr<leveldb::Table>(table);
}

// --- Finding data blocks without an index --------------------------------
//
// The index block of a damaged table may not be readable at all (one
// damaged byte in a snappy-compressed index makes it undecodable), or only
// up to its damage; so the data blocks are also found by their trailers:
// each block's contents are followed by a type
// byte (0: raw, 1: snappy) and the masked CRC-32C of the contents and that
// byte. From the start of the file, the first length whose trailer checks
// out ends a block, and the next block starts after its trailer; past a
// damaged block the walk resumes at the next start the index names. A
// false match (one in 2^32 per try) is a block of garbage, which the
// reading then refuses entry by entry.

// CRC-32C (Castagnoli), as LevelDB's util/crc32c computes it, a byte at a
// time: the state before the final inversion.
uint32_t Crc32cStep(uint32_t state, unsigned char byte) {
  static const auto* const kTable = [] {
    auto* table = new std::array<uint32_t, 256>;
    for (uint32_t i = 0; i < 256; ++i) {
      uint32_t crc = i;
      for (int k = 0; k < 8; ++k) {
        crc = (crc & 1) != 0 ? (crc >> 1) ^ 0x82f63b78u : crc >> 1;
      }
      (*table)[i] = crc;
    }
    return table;
  }();
  return (*kTable)[(state ^ byte) & 0xff] ^ (state >> 8);
}

// LevelDB stores a block's checksum masked (util/crc32c.h Mask).
uint32_t MaskedCrc(uint32_t crc) {
  return ((crc >> 15) | (crc << 17)) + 0xa282ead8u;
}

uint32_t Fixed32At(const std::string& data, size_t at) {
  uint32_t v = 0;
  for (int i = 3; i >= 0; --i) {
    v = (v << 8) | static_cast<unsigned char>(data[at + i]);
  }
  return v;
}

// The blocks of `data` (a table file's data region) whose trailers check
// out, in order, walking from its start. Past a block that does not check
// out, the walk goes on from the next of `known_starts` (the offsets an
// index read unchecked names), or ends: trying every byte as a start would
// take time quadratic in the damage.
std::vector<BlockHandle> DataBlocksByTrailer(
    const std::string& data, const std::vector<uint64_t>& known_starts) {
  // A block is about 4 KiB before compression, more for a large entry.
  constexpr size_t kLongestBlock = size_t{4} << 20;
  std::vector<BlockHandle> blocks;
  size_t start = 0;
  while (start + kBlockTrailerSize <= data.size()) {
    const size_t last_end =
        std::min(data.size() - kBlockTrailerSize, start + kLongestBlock);
    uint32_t state = ~0u;
    bool found = false;
    for (size_t end = start; end <= last_end; ++end) {
      const unsigned char type = static_cast<unsigned char>(data[end]);
      if (type <= 1 &&
          MaskedCrc(~Crc32cStep(state, type)) == Fixed32At(data, end + 1)) {
        blocks.push_back(BlockHandle{start, end - start});
        start = end + kBlockTrailerSize;
        found = true;
        break;
      }
      state = Crc32cStep(state, type);
    }
    if (found) continue;
    auto next = std::upper_bound(known_starts.begin(), known_starts.end(),
                                 static_cast<uint64_t>(start));
    if (next == known_starts.end()) break;
    start = static_cast<size_t>(*next);
  }
  return blocks;
}

// The data blocks the index of `file` names, as far as it can be read and
// as far as they lie inside the file's data, and those found by their
// trailers; empty when the footer is damaged.
std::vector<BlockHandle> DataBlocksNamed(const leveldb::Comparator& order,
                                         const leveldb::RandomAccessFile* file,
                                         uint64_t size) {
  if (size < kFooterSize) return {};
  char scratch[kFooterSize];
  leveldb::Slice footer;
  if (!file->Read(size - kFooterSize, kFooterSize, &footer, scratch).ok() ||
      footer.size() != kFooterSize) {
    return {};
  }
  uint64_t magic = 0;
  for (int i = 7; i >= 0; --i) {
    magic = (magic << 8) |
            static_cast<unsigned char>(footer.data()[kFooterSize - 8 + i]);
  }
  const char* p = footer.data();
  const char* limit = footer.data() + kFooterSize - 8;
  BlockHandle meta, index;
  if (magic != kTableMagic || !DecodeHandle(&p, limit, &meta) ||
      !DecodeHandle(&p, limit, &index)) {
    return {};
  }
  const uint64_t body = size - kFooterSize;
  if (index.offset > body || index.size > body - index.offset ||
      body - index.offset - index.size < kBlockTrailerSize) {
    return {};
  }
  // Data blocks come first; the filter, metaindex and index after them.
  uint64_t data_end = index.offset;
  if (meta.offset < data_end) data_end = meta.offset;
  std::unique_ptr<ExtendedFile> indexed = WithIndex(file, size, {index});
  std::unique_ptr<leveldb::Table> table = OpenUnchecked(order, *indexed);
  leveldb::ReadOptions read;
  read.fill_cache = false;
  std::unique_ptr<leveldb::Iterator> it(
      table != nullptr ? table->NewIterator(read) : nullptr);
  std::vector<BlockHandle> blocks;
  if (it != nullptr) it->SeekToFirst();
  for (; it != nullptr && it->Valid(); it->Next()) {
    const char* v = it->value().data();
    BlockHandle block;
    if (DecodeHandle(&v, v + it->value().size(), &block) &&
        block.offset <= data_end && block.size <= data_end - block.offset &&
        data_end - block.offset - block.size >= kBlockTrailerSize) {
      blocks.push_back(block);
    }
  }
  // And the blocks found by their trailers: an index read unchecked may
  // name garbage, or stop at its damage, while the data blocks lie one
  // after the other from the file's start. (A name from either that is not
  // a sound block fails its checksum when read.)
  if (data_end > 0 && data_end <= (uint64_t{256} << 20)) {
    std::string data(data_end, '\0');
    leveldb::Slice read_back;
    if (file->Read(0, data_end, &read_back, data.data()).ok() &&
        read_back.size() == data_end) {
      if (read_back.data() != data.data()) {
        data.assign(read_back.data(), read_back.size());
      }
      std::vector<uint64_t> starts;
      for (const BlockHandle& block : blocks) starts.push_back(block.offset);
      std::sort(starts.begin(), starts.end());
      for (const BlockHandle& block : DataBlocksByTrailer(data, starts)) {
        blocks.push_back(block);
      }
    }
  }
  std::sort(blocks.begin(), blocks.end());
  blocks.erase(std::unique(blocks.begin(), blocks.end()), blocks.end());
  return blocks;
}

// Every entry of `table`'s sound blocks, in order, to `visit` (if set;
// false from it ends the reading); counts them into `damaged` and returns
// whether every block read was sound.
bool ReadEntries(leveldb::Table& table, DamagedTable* damaged,
                 const EntryVisitor* visit) {
  const InternalKeyOrder order;
  leveldb::ReadOptions read;
  read.verify_checksums = true;
  read.fill_cache = false;
  std::unique_ptr<leveldb::Iterator> it(table.NewIterator(read));
  std::string last;
  bool sound = true;
  for (it->SeekToFirst(); it->Valid(); it->Next()) {
    if (!Plausible(order, it->key(), last)) {
      if (sound) damaged->reason = "an entry out of order or malformed";
      sound = false;
      continue;
    }
    last.assign(it->key().data(), it->key().size());
    ++damaged->readable_entries;
    if (visit != nullptr && !(*visit)(it->key(), it->value())) break;
  }
  if (!it->status().ok()) {
    // The first unreadable block's error; later blocks were still read.
    if (sound) damaged->reason = it->status().ToString();
    sound = false;
  }
  return sound;
}

// One table: opened with its footer and index checked, then read through
// with every block's checksum verified; when its index fails, through the
// entries of the index that can still be read. `visit` (if set) gets each
// entry of a sound block, in order, as ReadEntries says. Fills `table`
// (whose file name the caller set) and returns whether the table is sound.
bool ReadTable(leveldb::Env* env, const std::string& path, DamagedTable* table,
               const EntryVisitor* visit) {
  uint64_t size = 0;
  leveldb::Status s = env->GetFileSize(path, &size);
  leveldb::RandomAccessFile* raw_file = nullptr;
  if (s.ok()) s = env->NewRandomAccessFile(path, &raw_file);
  std::unique_ptr<leveldb::RandomAccessFile> file(raw_file);
  if (!s.ok()) {
    table->unreadable = true;
    table->reason = s.ToString();
    return false;
  }
  const InternalKeyOrder order;
  leveldb::Options options;
  options.comparator = &order;
  options.paranoid_checks = true;  // the footer and index checked
  options.filter_policy = nullptr;
  leveldb::Table* raw_table = nullptr;
  s = leveldb::Table::Open(options, file.get(), size, &raw_table);
  std::unique_ptr<leveldb::Table> opened(raw_table);
  if (s.ok()) return ReadEntries(*opened, table, visit);
  table->reason = s.ToString();
  const std::vector<BlockHandle> blocks =
      DataBlocksNamed(order, file.get(), size);
  std::unique_ptr<ExtendedFile> indexed;
  if (!blocks.empty()) {
    indexed = WithIndex(file.get(), size, blocks);
    opened = OpenUnchecked(order, *indexed);
  }
  if (opened == nullptr) {
    table->unreadable = true;
    return false;
  }
  const std::string reason = table->reason;
  ReadEntries(*opened, table, visit);
  table->reason = absl::StrCat(reason, ", read through its index's ",
                               blocks.size(), " readable entries");
  return false;
}

std::string FreeName(const std::filesystem::path& dir,
                     const std::string& name) {
  std::error_code ec;
  std::string candidate = name;
  for (int i = 1; std::filesystem::exists(dir / candidate, ec); ++i) {
    candidate = absl::StrCat(name, ".", i);
  }
  return candidate;
}

absl::Status SyncDirectory(const std::string& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY);
  if (fd < 0 || ::fsync(fd) != 0) {
    const int error = errno;
    if (fd >= 0) ::close(fd);
    return absl::UnavailableError(
        absl::StrFormat("syncing directory %s: %s", dir, std::strerror(error)));
  }
  ::close(fd);
  return absl::OkStatus();
}

// LevelDB's filter over internal keys (its own wrapper is not public): the
// user policy over the keys without their trailers, under the user policy's
// name, which is the name a table's reader looks the filter up by.
class InternalKeyFilter : public leveldb::FilterPolicy {
 public:
  explicit InternalKeyFilter(const leveldb::FilterPolicy* user) : user_(user) {}
  const char* Name() const override { return user_->Name(); }
  void CreateFilter(const leveldb::Slice* keys, int n,
                    std::string* dst) const override {
    std::vector<leveldb::Slice> user_keys;
    user_keys.reserve(n);
    for (int i = 0; i < n; ++i) user_keys.push_back(UserKey(keys[i]));
    user_->CreateFilter(user_keys.data(), n, dst);
  }
  bool KeyMayMatch(const leveldb::Slice& key,
                   const leveldb::Slice& filter) const override {
    return user_->KeyMayMatch(UserKey(key), filter);
  }

 private:
  static leveldb::Slice UserKey(const leveldb::Slice& key) {
    return leveldb::Slice(key.data(), key.size() - 8);
  }
  const leveldb::FilterPolicy* const user_;
};

// Writes the sound entries of `name` to a new file beside it, with an index
// and filter made from them. Fills `table` as ReadTable does; the
// new file's path is returned when `table` was readable, else no file is
// left.
absl::StatusOr<std::string> Rewrite(leveldb::Env* env,
                                    const leveldb::Options& base,
                                    const std::filesystem::path& dir,
                                    DamagedTable* table, bool* sound) {
  const std::string path = (dir / table->file).string();
  const std::string tmp = absl::StrCat(path, ".salvaged");
  leveldb::WritableFile* raw = nullptr;
  leveldb::Status s = env->NewWritableFile(tmp, &raw);
  if (!s.ok()) {
    return absl::UnavailableError(
        absl::StrFormat("creating %s: %s", tmp, s.ToString()));
  }
  std::unique_ptr<leveldb::WritableFile> file(raw);
  const InternalKeyOrder order;
  std::unique_ptr<InternalKeyFilter> filter;
  if (base.filter_policy != nullptr) {
    filter = std::make_unique<InternalKeyFilter>(base.filter_policy);
  }
  leveldb::Options options;
  options.comparator = &order;
  options.filter_policy = filter.get();
  options.block_size = base.block_size;
  options.compression = base.compression;
  leveldb::TableBuilder builder(options, file.get());
  const EntryVisitor add = [&builder](const leveldb::Slice& key,
                                      const leveldb::Slice& value) {
    builder.Add(key, value);
    return true;
  };
  *sound = ReadTable(env, path, table, &add);
  if (table->unreadable) {
    builder.Abandon();
    file.reset();
    env->RemoveFile(tmp);
    return std::string();
  }
  s = builder.Finish();
  if (s.ok()) s = file->Sync();
  if (s.ok()) s = file->Close();
  if (!s.ok()) {
    file.reset();
    env->RemoveFile(tmp);
    return absl::UnavailableError(
        absl::StrFormat("writing %s: %s", tmp, s.ToString()));
  }
  return tmp;
}

// --- The tables a store uses ----------------------------------------------
//
// A table file the MANIFEST does not name is the output of a compaction that
// a close interrupted: LevelDB deletes it at the next open, and it is not
// damage. The MANIFEST is a LevelDB log (doc/log_format.md) of version
// edits; the edit's fields are varint-tagged.

constexpr size_t kLogBlockSize = 32768;
constexpr size_t kLogHeaderSize = 7;  // crc32c, length, type

// The records of a LevelDB log, reassembled from their fragments; stops at
// the first malformed one. Checksums are not verified (no public crc32c):
// a damaged edit fails to parse or names files that are then checked anyway.
bool LogRecords(const std::string& log, std::vector<std::string>* records) {
  std::string pending;
  size_t at = 0;
  while (at + kLogHeaderSize <= log.size()) {
    const size_t left_in_block = kLogBlockSize - at % kLogBlockSize;
    if (left_in_block < kLogHeaderSize) {
      at += left_in_block;  // the block's zero padding
      continue;
    }
    const size_t length = static_cast<unsigned char>(log[at + 4]) |
                          static_cast<unsigned char>(log[at + 5]) << 8;
    const int type = static_cast<unsigned char>(log[at + 6]);
    if (type == 0 && length == 0) {  // preallocated zeros: the end
      break;
    }
    if (length > left_in_block - kLogHeaderSize ||
        at + kLogHeaderSize + length > log.size() || type < 1 || type > 4) {
      return false;
    }
    const std::string fragment = log.substr(at + kLogHeaderSize, length);
    at += kLogHeaderSize + length;
    if (type == 1) {  // full
      records->push_back(fragment);
    } else if (type == 2) {  // first
      pending = fragment;
    } else {
      pending += fragment;
      if (type == 4) {  // last
        records->push_back(std::move(pending));
        pending.clear();
      }
    }
  }
  return true;
}

// Applies one version edit to `live`; false when it does not parse.
bool ApplyEdit(const std::string& edit, std::set<uint64_t>* live) {
  const char* p = edit.data();
  const char* limit = p + edit.size();
  auto skip_string = [&]() {
    uint64_t n;
    if (!GetVarint(&p, limit, &n) || n > static_cast<uint64_t>(limit - p)) {
      return false;
    }
    p += n;
    return true;
  };
  while (p < limit) {
    uint64_t tag, level, number, ignored;
    if (!GetVarint(&p, limit, &tag)) return false;
    switch (tag) {
      case 1:  // comparator name
        if (!skip_string()) return false;
        break;
      case 2:  // log number
      case 3:  // next file number
      case 4:  // last sequence
      case 9:  // previous log number
        if (!GetVarint(&p, limit, &ignored)) return false;
        break;
      case 5:  // compaction pointer: level, key
        if (!GetVarint(&p, limit, &level) || !skip_string()) return false;
        break;
      case 6:  // deleted file: level, number
        if (!GetVarint(&p, limit, &level) || !GetVarint(&p, limit, &number)) {
          return false;
        }
        live->erase(number);
        break;
      case 7:  // new file: level, number, size, smallest, largest
        if (!GetVarint(&p, limit, &level) || !GetVarint(&p, limit, &number) ||
            !GetVarint(&p, limit, &ignored) || !skip_string() ||
            !skip_string()) {
          return false;
        }
        live->insert(number);
        break;
      default:
        return false;
    }
  }
  return true;
}

// The numbers of the tables the store in `dir` uses, from the MANIFEST
// that CURRENT names; nullopt when that cannot be read.
std::optional<std::set<uint64_t>> LiveTables(const std::string& dir) {
  std::ifstream current(std::filesystem::path(dir) / "CURRENT");
  std::string manifest_name;
  if (!std::getline(current, manifest_name) ||
      !absl::StartsWith(manifest_name, "MANIFEST-") ||
      manifest_name.find('/') != std::string::npos) {
    return std::nullopt;
  }
  std::ifstream in(std::filesystem::path(dir) / manifest_name,
                   std::ios::binary);
  if (!in) return std::nullopt;
  const std::string log((std::istreambuf_iterator<char>(in)),
                        std::istreambuf_iterator<char>());
  std::vector<std::string> edits;
  if (!LogRecords(log, &edits) || edits.empty()) return std::nullopt;
  std::set<uint64_t> live;
  for (const std::string& edit : edits) {
    if (!ApplyEdit(edit, &live)) return std::nullopt;
  }
  return live;
}

uint64_t TableNumber(const std::string& name) {
  uint64_t number = 0;
  for (char c : name) {
    if (c < '0' || c > '9') break;
    number = number * 10 + static_cast<uint64_t>(c - '0');
  }
  return number;
}

absl::StatusOr<std::vector<std::string>> TableFilesIn(const std::string& dir) {
  std::error_code ec;
  std::vector<std::string> names;
  for (std::filesystem::directory_iterator it(dir, ec), end; !ec && it != end;
       it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (IsTableFile(name)) names.push_back(name);
  }
  if (ec) {
    return absl::UnavailableError(
        absl::StrFormat("cannot list %s: %s", dir, ec.message()));
  }
  std::sort(names.begin(), names.end());
  return names;
}

}  // namespace

absl::StatusOr<TableCheck> CheckTables(const std::string& dir,
                                       leveldb::Env* env) {
  TALLY_ASSIGN_OR_RETURN(const std::vector<std::string> names,
                         TableFilesIn(dir));
  const std::optional<std::set<uint64_t>> live = LiveTables(dir);
  TableCheck check;
  for (const std::string& name : names) {
    if (live.has_value() && live->count(TableNumber(name)) == 0) continue;
    ++check.tables;
    DamagedTable table;
    table.file = name;
    if (!ReadTable(env, (std::filesystem::path(dir) / name).string(), &table,
                   nullptr)) {
      check.damaged.push_back(std::move(table));
    }
  }
  return check;
}

absl::StatusOr<bool> AnyTableKey(
    const std::string& dir, leveldb::Env* env,
    const std::function<bool(absl::string_view user_key)>& wanted) {
  TALLY_ASSIGN_OR_RETURN(const std::vector<std::string> names,
                         TableFilesIn(dir));
  bool found = false;
  const EntryVisitor visit = [&](const leveldb::Slice& key,
                                 const leveldb::Slice&) {
    found = wanted(absl::string_view(key.data(), key.size() - 8));
    return !found;
  };
  for (const std::string& name : names) {
    DamagedTable table;
    ReadTable(env, (std::filesystem::path(dir) / name).string(), &table,
              &visit);
    if (found) return true;
  }
  return false;
}

absl::StatusOr<TableCheck> SalvageTables(const std::string& dir,
                                         const std::string& lost_dir,
                                         const leveldb::Options& options) {
  leveldb::Env* env =
      options.env != nullptr ? options.env : leveldb::Env::Default();
  TALLY_ASSIGN_OR_RETURN(const std::vector<std::string> names,
                         TableFilesIn(dir));
  std::error_code ec;
  std::filesystem::create_directories(lost_dir, ec);
  if (ec) {
    return absl::UnavailableError(
        absl::StrFormat("cannot create %s: %s", lost_dir, ec.message()));
  }
  const std::filesystem::path from(dir);
  const std::filesystem::path lost(lost_dir);
  const std::optional<std::set<uint64_t>> live = LiveTables(dir);
  TableCheck check;
  for (const std::string& name : names) {
    ++check.tables;
    DamagedTable table;
    table.file = name;
    bool sound = false;
    TALLY_ASSIGN_OR_RETURN(const std::string rewritten,
                           Rewrite(env, options, from, &table, &sound));
    const std::filesystem::path original = from / name;
    if (!sound && live.has_value() && live->count(TableNumber(name)) == 0) {
      // Not a table of the store: the output of a compaction that a close
      // interrupted, cut short, which LevelDB deletes at its next open.
      // Set aside whole, and not reported as damage.
      if (!rewritten.empty()) std::filesystem::remove(rewritten, ec);
      ec.clear();
      std::filesystem::rename(original, lost / FreeName(lost, name), ec);
      if (ec) {
        return absl::UnavailableError(
            absl::StrFormat("moving the leftover table %s to %s: %s",
                            original.string(), lost_dir, ec.message()));
      }
      ++check.leftovers;
      continue;
    }
    if (table.unreadable) {
      std::filesystem::rename(original, lost / FreeName(lost, name), ec);
    } else if (!sound) {
      // The original is kept by a second name before the new table takes
      // its place: at every moment one complete table has the name.
      const std::filesystem::path kept = lost / FreeName(lost, name);
      std::filesystem::create_hard_link(original, kept, ec);
      if (ec) {
        ec.clear();
        std::filesystem::copy_file(original, kept, ec);
      }
      if (!ec) std::filesystem::rename(rewritten, original, ec);
    } else {
      // Every entry is in the new table. Its index and filter are new too:
      // a damaged filter block is not read with a checksum by the store,
      // and would hide rows from reads.
      std::filesystem::rename(rewritten, original, ec);
    }
    if (ec) {
      return absl::UnavailableError(absl::StrFormat(
          "replacing the table %s (damaged ones are kept in %s): %s",
          original.string(), lost_dir, ec.message()));
    }
    if (!sound) check.damaged.push_back(std::move(table));
  }
  absl::Status synced = SyncDirectory(lost_dir);
  if (synced.ok()) synced = SyncDirectory(dir);
  if (!synced.ok()) return synced;
  return check;
}

}  // namespace internal
}  // namespace storage
}  // namespace tally
