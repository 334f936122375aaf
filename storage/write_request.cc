#include "storage/write_request.h"

#include <utility>

namespace tally {
namespace storage {

Mutation Mutation::Put(std::string keyspace, std::string key,
                       std::string value) {
  Mutation m;
  m.keyspace = std::move(keyspace);
  m.key = std::move(key);
  m.value = std::move(value);
  return m;
}

Mutation Mutation::Erase(std::string keyspace, std::string key) {
  Mutation m;
  m.keyspace = std::move(keyspace);
  m.key = std::move(key);
  m.erase = true;
  return m;
}

Mutation Mutation::Delete(std::string keyspace, std::string key) {
  Mutation m;
  m.keyspace = std::move(keyspace);
  m.key = std::move(key);
  m.deleted = true;
  return m;
}

}  // namespace storage
}  // namespace tally
