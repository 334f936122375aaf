// ExitSkippingTeardown: how tallyd and tally end their process.
//
// gRPC 1.51 keeps background threads after the last channel and server are
// destroyed; one may still be connecting a subchannel, building a TLS
// handshaker. Returning from main() runs OpenSSL's atexit cleanup, which
// frees the library's global state under that thread: a SIGSEGV at exit
// (seen in the TLS tests, exit code 139 after "stopped"). So once the
// program has released everything of its own — the store closed, output
// flushed — it ends with _Exit, and no library teardown runs.
#ifndef TALLY_NODE_EXIT_H_
#define TALLY_NODE_EXIT_H_

#include <cstdio>
#include <cstdlib>
#include <iostream>

namespace tally {
namespace node {

[[noreturn]] inline void ExitSkippingTeardown(int code) {
  std::cout.flush();
  std::cerr.flush();
  std::fflush(nullptr);
  std::_Exit(code);
}

}  // namespace node
}  // namespace tally

#endif  // TALLY_NODE_EXIT_H_
