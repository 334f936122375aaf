// StatusSource: a part of a running node that reports on itself in
// Admin.Status (peers and sessions, the change feed it serves, ...).
#ifndef TALLY_NODE_OBSERVE_STATUS_SOURCE_H_
#define TALLY_NODE_OBSERVE_STATUS_SOURCE_H_

#include "tally/v1/tally.pb.h"

namespace tally {
namespace node {

// Fills the parts of a StatusResponse only the running node knows. Called
// from any thread; each source adds its own fields.
class StatusSource {
 public:
  virtual ~StatusSource() = default;
  virtual void FillStatus(::tally::v1::StatusResponse* response) = 0;
};

}  // namespace node
}  // namespace tally

#endif  // TALLY_NODE_OBSERVE_STATUS_SOURCE_H_
