#include "storage/internal/fault_injection_env.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <memory>
#include <utility>

namespace tally {
namespace storage {
namespace internal {
namespace {

// A file whose appends draw on the Env's free space and whose syncs are
// recorded, so that unsynced bytes can be dropped later.
class FaultyFile : public leveldb::WritableFile {
 public:
  FaultyFile(FaultInjectionEnv* env, std::string fname, uint64_t size,
             std::unique_ptr<leveldb::WritableFile> target)
      : env_(env),
        fname_(std::move(fname)),
        size_(size),
        target_(std::move(target)) {}

  leveldb::Status Append(const leveldb::Slice& data) override {
    const uint64_t allowed = env_->Reserve(data.size());
    if (allowed > 0) {
      const leveldb::Status s =
          target_->Append(leveldb::Slice(data.data(), allowed));
      if (!s.ok()) return s;
      size_ += allowed;
    }
    if (allowed < data.size()) {
      // As write(2) on a full file system: a prefix is written, then ENOSPC.
      return leveldb::Status::IOError(fname_, std::strerror(ENOSPC));
    }
    return leveldb::Status::OK();
  }
  leveldb::Status Close() override { return target_->Close(); }
  leveldb::Status Flush() override { return target_->Flush(); }
  leveldb::Status Sync() override {
    const leveldb::Status s = target_->Sync();
    if (s.ok()) env_->RecordSynced(fname_, size_);
    return s;
  }

 private:
  FaultInjectionEnv* const env_;
  const std::string fname_;
  uint64_t size_;  // bytes handed to the target
  const std::unique_ptr<leveldb::WritableFile> target_;
};

}  // namespace

void FaultInjectionEnv::SetFreeBytes(uint64_t bytes) {
  absl::MutexLock lock(&mu_);
  free_bytes_ = bytes;
}

uint64_t FaultInjectionEnv::failed_appends() const {
  absl::MutexLock lock(&mu_);
  return failed_appends_;
}

uint64_t FaultInjectionEnv::Reserve(uint64_t wanted) {
  absl::MutexLock lock(&mu_);
  if (free_bytes_ == kUnlimited) return wanted;
  const uint64_t allowed = std::min(wanted, free_bytes_);
  free_bytes_ -= allowed;
  if (allowed < wanted) ++failed_appends_;
  return allowed;
}

void FaultInjectionEnv::RecordSynced(const std::string& fname, uint64_t size) {
  absl::MutexLock lock(&mu_);
  synced_[fname] = size;
}

leveldb::Status FaultInjectionEnv::Track(const std::string& fname,
                                         uint64_t size,
                                         leveldb::WritableFile** result) {
  *result = new FaultyFile(this, fname, size,
                           std::unique_ptr<leveldb::WritableFile>(*result));
  return leveldb::Status::OK();
}

leveldb::Status FaultInjectionEnv::NewWritableFile(
    const std::string& fname, leveldb::WritableFile** result) {
  leveldb::Status s = target()->NewWritableFile(fname, result);
  if (!s.ok()) return s;
  {
    // A new (or truncated) file has synced nothing yet.
    absl::MutexLock lock(&mu_);
    synced_[fname] = 0;
  }
  return Track(fname, 0, result);
}

leveldb::Status FaultInjectionEnv::NewAppendableFile(
    const std::string& fname, leveldb::WritableFile** result) {
  uint64_t size = 0;
  if (target()->FileExists(fname)) {
    leveldb::Status s = target()->GetFileSize(fname, &size);
    if (!s.ok()) return s;
  }
  leveldb::Status s = target()->NewAppendableFile(fname, result);
  if (!s.ok()) return s;
  {
    // An existing file untracked so far: assume what it holds is durable.
    absl::MutexLock lock(&mu_);
    synced_.emplace(fname, size);
  }
  return Track(fname, size, result);
}

leveldb::Status FaultInjectionEnv::RemoveFile(const std::string& fname) {
  leveldb::Status s = target()->RemoveFile(fname);
  if (s.ok()) {
    absl::MutexLock lock(&mu_);
    synced_.erase(fname);
  }
  return s;
}

leveldb::Status FaultInjectionEnv::RenameFile(const std::string& src,
                                              const std::string& target_name) {
  leveldb::Status s = target()->RenameFile(src, target_name);
  if (s.ok()) {
    absl::MutexLock lock(&mu_);
    auto it = synced_.find(src);
    if (it != synced_.end()) {
      const uint64_t size = it->second;
      synced_.erase(it);
      synced_[target_name] = size;
    } else {
      synced_.erase(target_name);
    }
  }
  return s;
}

leveldb::Status FaultInjectionEnv::DropUnsyncedData() {
  absl::MutexLock lock(&mu_);
  for (const auto& [fname, size] : synced_) {
    if (!target()->FileExists(fname)) continue;
    if (::truncate(fname.c_str(), static_cast<off_t>(size)) != 0) {
      return leveldb::Status::IOError(fname, std::strerror(errno));
    }
  }
  return leveldb::Status::OK();
}

}  // namespace internal
}  // namespace storage
}  // namespace tally
