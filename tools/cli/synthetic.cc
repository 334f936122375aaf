#include "tools/cli/synthetic.h"

#include "absl/strings/str_cat.h"

namespace tally {
namespace cli {

bool SyntheticRows::Next(std::string* key, std::string* value) {
  if (next_ >= count_) return false;
  static constexpr char kAlphabet[] =
      "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
  constexpr size_t kAlphabetSize = sizeof(kAlphabet) - 1;
  *key = absl::StrCat("key-", next_);
  value->resize(value_size_);
  // Ten characters per 64-bit draw (62^10 < 2^64); the modulo bias is
  // irrelevant for test data.
  uint64_t bits = 0;
  int left = 0;
  for (size_t i = 0; i < value_size_; ++i) {
    if (left == 0) {
      bits = random_();
      left = 10;
    }
    (*value)[i] = kAlphabet[bits % kAlphabetSize];
    bits /= kAlphabetSize;
    --left;
  }
  ++next_;
  return true;
}

}  // namespace cli
}  // namespace tally
