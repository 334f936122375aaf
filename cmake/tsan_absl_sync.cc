// Tells ThreadSanitizer what absl::Mutex, absl::CondVar and
// absl::Notification do, for builds with TALLY_SANITIZE=thread
// (cmake/sanitize.cmake links this file into every executable).
//
// Why: Debian's Abseil is compiled without ThreadSanitizer, so the code that
// takes and releases an absl::Mutex (a futex and atomics inside
// libabsl_synchronization) is invisible to it: every field guarded by a
// mutex would read as a data race. The linker's --wrap sends each call our
// code makes to the functions below, which call the real one between the
// annotations of <sanitizer/tsan_interface.h> that an Abseil built with
// ThreadSanitizer has inside. Only calls from our objects (and from static
// archives linked in) are seen: the synchronization gRPC does inside its own
// shared library stays invisible.
//
// Each wrapper names its symbol once, in its TALLY_WRAP; CMake reads these
// lines to pass the matching --wrap options, with TALLY_ABSL_NS the mangled
// inline namespace of the installed Abseil (e.g. "7debian3").

#include <sanitizer/tsan_interface.h>

#include <atomic>
#include <type_traits>

#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"

#ifndef TALLY_ABSL_NS
#error "TALLY_ABSL_NS must name Abseil's mangled inline namespace"
#endif

#define TALLY_SYMBOL(kind, nested, rest) \
  kind "_Z" nested "4absl" TALLY_ABSL_NS rest
#define TALLY_WRAP(nested, rest) asm(TALLY_SYMBOL("__wrap_", nested, rest))
#define TALLY_REAL(nested, rest) asm(TALLY_SYMBOL("__real_", nested, rest))

namespace {

using absl::Condition;
using absl::CondVar;
using absl::Duration;
using absl::Mutex;
using absl::Notification;
using absl::Time;

constexpr unsigned kRead = __tsan_mutex_read_lock;
constexpr unsigned kTry = __tsan_mutex_try_lock;
constexpr unsigned kFailed = __tsan_mutex_try_lock_failed;

// The accesses between pre_lock and post_lock are ignored by
// ThreadSanitizer, which is what the condition evaluations inside LockWhen
// and Await need: they run with the real mutex held but before post_lock.
template <typename F>
auto Locking(Mutex* mu, unsigned flags, F&& lock) {
  __tsan_mutex_pre_lock(mu, flags);
  if constexpr (std::is_void_v<decltype(lock())>) {
    lock();
    __tsan_mutex_post_lock(mu, flags, 0);
  } else {
    auto result = lock();
    __tsan_mutex_post_lock(mu, flags, 0);
    return result;
  }
}

void Unlocking(Mutex* mu, unsigned flags, void (*unlock)(Mutex*)) {
  __tsan_mutex_pre_unlock(mu, flags);
  unlock(mu);
  __tsan_mutex_post_unlock(mu, flags);
}

// Await and CondVar waits: entered and left with `mu` held, released
// meanwhile. Seen as an unlock and a lock around the real call.
template <typename F>
auto Waiting(Mutex* mu, F&& wait) {
  __tsan_mutex_pre_unlock(mu, 0);
  if constexpr (std::is_void_v<decltype(wait())>) {
    wait();
    __tsan_mutex_post_unlock(mu, 0);
    __tsan_mutex_pre_lock(mu, 0);
    __tsan_mutex_post_lock(mu, 0, 0);
  } else {
    auto result = wait();
    __tsan_mutex_post_unlock(mu, 0);
    __tsan_mutex_pre_lock(mu, 0);
    __tsan_mutex_post_lock(mu, 0, 0);
    return result;
  }
}

// Notification::HasBeenNotified is inline: it is compiled into our objects,
// instrumented, as an acquire load of the private `notified_yet_`. A release
// on that address in Notify pairs with it. (The explicit instantiation below
// is the standard's one way to name a private member from outside.)
struct NotifiedYet {
  using type = std::atomic<bool> Notification::*;
  friend type Member(NotifiedYet);
};
template <typename Tag, typename Tag::type M>
struct Expose {
  friend typename Tag::type Member(Tag) { return M; }
};
template struct Expose<NotifiedYet, &Notification::notified_yet_>;

void* SyncAddress(const Notification* n) {
  return const_cast<std::atomic<bool>*>(&(n->*Member(NotifiedYet())));
}

}  // namespace

// The real functions (Itanium ABI: `this` is the first argument).
void RealLock(Mutex*) TALLY_REAL("N", "5Mutex4LockEv");
void RealUnlock(Mutex*) TALLY_REAL("N", "5Mutex6UnlockEv");
bool RealTryLock(Mutex*) TALLY_REAL("N", "5Mutex7TryLockEv");
void RealReaderLock(Mutex*) TALLY_REAL("N", "5Mutex10ReaderLockEv");
void RealReaderUnlock(Mutex*) TALLY_REAL("N", "5Mutex12ReaderUnlockEv");
bool RealReaderTryLock(Mutex*) TALLY_REAL("N", "5Mutex13ReaderTryLockEv");
void RealLockWhen(Mutex*, const Condition&)
    TALLY_REAL("N", "5Mutex8LockWhenERKNS0_9ConditionE");
void RealReaderLockWhen(Mutex*, const Condition&)
    TALLY_REAL("N", "5Mutex14ReaderLockWhenERKNS0_9ConditionE");
bool RealLockWhenWithTimeout(Mutex*, const Condition&, Duration)
    TALLY_REAL("N",
               "5Mutex19LockWhenWithTimeoutERKNS0_9ConditionENS0_8DurationE");
bool RealLockWhenWithDeadline(Mutex*, const Condition&, Time)
    TALLY_REAL("N", "5Mutex20LockWhenWithDeadlineERKNS0_9ConditionENS0_4TimeE");
bool RealReaderLockWhenWithTimeout(Mutex*, const Condition&, Duration)
    TALLY_REAL("N",
               "5Mutex25ReaderLockWhenWithTimeoutERKNS0_9ConditionENS0_"
               "8DurationE");
bool RealReaderLockWhenWithDeadline(Mutex*, const Condition&, Time) TALLY_REAL(
    "N", "5Mutex26ReaderLockWhenWithDeadlineERKNS0_9ConditionENS0_4TimeE");
void RealAwait(Mutex*, const Condition&)
    TALLY_REAL("N", "5Mutex5AwaitERKNS0_9ConditionE");
bool RealAwaitWithTimeout(Mutex*, const Condition&, Duration)
    TALLY_REAL("N", "5Mutex16AwaitWithTimeoutERKNS0_9ConditionENS0_8DurationE");
bool RealAwaitWithDeadline(Mutex*, const Condition&, Time)
    TALLY_REAL("N", "5Mutex17AwaitWithDeadlineERKNS0_9ConditionENS0_4TimeE");
void RealDestroy1(Mutex*) TALLY_REAL("N", "5MutexD1Ev");
void RealDestroy2(Mutex*) TALLY_REAL("N", "5MutexD2Ev");
void RealWait(CondVar*, Mutex*) TALLY_REAL("N", "7CondVar4WaitEPNS0_5MutexE");
bool RealWaitWithTimeout(CondVar*, Mutex*, Duration)
    TALLY_REAL("N", "7CondVar15WaitWithTimeoutEPNS0_5MutexENS0_8DurationE");
bool RealWaitWithDeadline(CondVar*, Mutex*, Time)
    TALLY_REAL("N", "7CondVar16WaitWithDeadlineEPNS0_5MutexENS0_4TimeE");
void RealNotify(Notification*) TALLY_REAL("N", "12Notification6NotifyEv");
void RealWaitForNotification(const Notification*)
    TALLY_REAL("NK", "12Notification19WaitForNotificationEv");
bool RealWaitForNotificationWithTimeout(const Notification*, Duration)
    TALLY_REAL("NK",
               "12Notification30WaitForNotificationWithTimeoutENS0_8DurationE");
bool RealWaitForNotificationWithDeadline(const Notification*, Time)
    TALLY_REAL("NK",
               "12Notification31WaitForNotificationWithDeadlineENS0_4TimeE");

// The wrappers. Not static: the linker resolves the __wrap_ names to them.
void WrapLock(Mutex* mu) TALLY_WRAP("N", "5Mutex4LockEv");
void WrapLock(Mutex* mu) {
  Locking(mu, 0, [&] { RealLock(mu); });
}
void WrapUnlock(Mutex* mu) TALLY_WRAP("N", "5Mutex6UnlockEv");
void WrapUnlock(Mutex* mu) { Unlocking(mu, 0, RealUnlock); }
bool WrapTryLock(Mutex* mu) TALLY_WRAP("N", "5Mutex7TryLockEv");
bool WrapTryLock(Mutex* mu) {
  __tsan_mutex_pre_lock(mu, kTry);
  bool locked = RealTryLock(mu);
  __tsan_mutex_post_lock(mu, locked ? kTry : kTry | kFailed, 0);
  return locked;
}
void WrapReaderLock(Mutex* mu) TALLY_WRAP("N", "5Mutex10ReaderLockEv");
void WrapReaderLock(Mutex* mu) {
  Locking(mu, kRead, [&] { RealReaderLock(mu); });
}
void WrapReaderUnlock(Mutex* mu) TALLY_WRAP("N", "5Mutex12ReaderUnlockEv");
void WrapReaderUnlock(Mutex* mu) { Unlocking(mu, kRead, RealReaderUnlock); }
bool WrapReaderTryLock(Mutex* mu) TALLY_WRAP("N", "5Mutex13ReaderTryLockEv");
bool WrapReaderTryLock(Mutex* mu) {
  __tsan_mutex_pre_lock(mu, kRead | kTry);
  bool locked = RealReaderTryLock(mu);
  __tsan_mutex_post_lock(mu, locked ? kRead | kTry : kRead | kTry | kFailed, 0);
  return locked;
}
void WrapLockWhen(Mutex* mu, const Condition& c)
    TALLY_WRAP("N", "5Mutex8LockWhenERKNS0_9ConditionE");
void WrapLockWhen(Mutex* mu, const Condition& c) {
  Locking(mu, 0, [&] { RealLockWhen(mu, c); });
}
void WrapReaderLockWhen(Mutex* mu, const Condition& c)
    TALLY_WRAP("N", "5Mutex14ReaderLockWhenERKNS0_9ConditionE");
void WrapReaderLockWhen(Mutex* mu, const Condition& c) {
  Locking(mu, kRead, [&] { RealReaderLockWhen(mu, c); });
}
// The *WithTimeout/*WithDeadline locks hold the mutex on return either way.
bool WrapLockWhenWithTimeout(Mutex* mu, const Condition& c, Duration d)
    TALLY_WRAP("N",
               "5Mutex19LockWhenWithTimeoutERKNS0_9ConditionENS0_8DurationE");
bool WrapLockWhenWithTimeout(Mutex* mu, const Condition& c, Duration d) {
  return Locking(mu, 0, [&] { return RealLockWhenWithTimeout(mu, c, d); });
}
bool WrapLockWhenWithDeadline(Mutex* mu, const Condition& c, Time t)
    TALLY_WRAP("N", "5Mutex20LockWhenWithDeadlineERKNS0_9ConditionENS0_4TimeE");
bool WrapLockWhenWithDeadline(Mutex* mu, const Condition& c, Time t) {
  return Locking(mu, 0, [&] { return RealLockWhenWithDeadline(mu, c, t); });
}
bool WrapReaderLockWhenWithTimeout(Mutex* mu, const Condition& c, Duration d)
    TALLY_WRAP("N",
               "5Mutex25ReaderLockWhenWithTimeoutERKNS0_9ConditionENS0_"
               "8DurationE");
bool WrapReaderLockWhenWithTimeout(Mutex* mu, const Condition& c, Duration d) {
  return Locking(mu, kRead,
                 [&] { return RealReaderLockWhenWithTimeout(mu, c, d); });
}
bool WrapReaderLockWhenWithDeadline(Mutex* mu, const Condition& c, Time t)
    TALLY_WRAP(
        "N", "5Mutex26ReaderLockWhenWithDeadlineERKNS0_9ConditionENS0_4TimeE");
bool WrapReaderLockWhenWithDeadline(Mutex* mu, const Condition& c, Time t) {
  return Locking(mu, kRead,
                 [&] { return RealReaderLockWhenWithDeadline(mu, c, t); });
}
void WrapAwait(Mutex* mu, const Condition& c)
    TALLY_WRAP("N", "5Mutex5AwaitERKNS0_9ConditionE");
void WrapAwait(Mutex* mu, const Condition& c) {
  Waiting(mu, [&] { RealAwait(mu, c); });
}
bool WrapAwaitWithTimeout(Mutex* mu, const Condition& c, Duration d)
    TALLY_WRAP("N", "5Mutex16AwaitWithTimeoutERKNS0_9ConditionENS0_8DurationE");
bool WrapAwaitWithTimeout(Mutex* mu, const Condition& c, Duration d) {
  return Waiting(mu, [&] { return RealAwaitWithTimeout(mu, c, d); });
}
bool WrapAwaitWithDeadline(Mutex* mu, const Condition& c, Time t)
    TALLY_WRAP("N", "5Mutex17AwaitWithDeadlineERKNS0_9ConditionENS0_4TimeE");
bool WrapAwaitWithDeadline(Mutex* mu, const Condition& c, Time t) {
  return Waiting(mu, [&] { return RealAwaitWithDeadline(mu, c, t); });
}
// A destroyed mutex's state must not carry over to the next object at its
// address (stack frames, reused heap blocks).
void WrapDestroy1(Mutex* mu) TALLY_WRAP("N", "5MutexD1Ev");
void WrapDestroy1(Mutex* mu) {
  __tsan_mutex_destroy(mu, 0);
  RealDestroy1(mu);
}
void WrapDestroy2(Mutex* mu) TALLY_WRAP("N", "5MutexD2Ev");
void WrapDestroy2(Mutex* mu) {
  __tsan_mutex_destroy(mu, 0);
  RealDestroy2(mu);
}
void WrapWait(CondVar* cv, Mutex* mu)
    TALLY_WRAP("N", "7CondVar4WaitEPNS0_5MutexE");
void WrapWait(CondVar* cv, Mutex* mu) {
  Waiting(mu, [&] { RealWait(cv, mu); });
}
bool WrapWaitWithTimeout(CondVar* cv, Mutex* mu, Duration d)
    TALLY_WRAP("N", "7CondVar15WaitWithTimeoutEPNS0_5MutexENS0_8DurationE");
bool WrapWaitWithTimeout(CondVar* cv, Mutex* mu, Duration d) {
  return Waiting(mu, [&] { return RealWaitWithTimeout(cv, mu, d); });
}
bool WrapWaitWithDeadline(CondVar* cv, Mutex* mu, Time t)
    TALLY_WRAP("N", "7CondVar16WaitWithDeadlineEPNS0_5MutexENS0_4TimeE");
bool WrapWaitWithDeadline(CondVar* cv, Mutex* mu, Time t) {
  return Waiting(mu, [&] { return RealWaitWithDeadline(cv, mu, t); });
}
void WrapNotify(Notification* n) TALLY_WRAP("N", "12Notification6NotifyEv");
void WrapNotify(Notification* n) {
  __tsan_release(SyncAddress(n));
  RealNotify(n);
}
void WrapWaitForNotification(const Notification* n)
    TALLY_WRAP("NK", "12Notification19WaitForNotificationEv");
void WrapWaitForNotification(const Notification* n) {
  RealWaitForNotification(n);
  __tsan_acquire(SyncAddress(n));
}
bool WrapWaitForNotificationWithTimeout(const Notification* n, Duration d)
    TALLY_WRAP("NK",
               "12Notification30WaitForNotificationWithTimeoutENS0_8DurationE");
bool WrapWaitForNotificationWithTimeout(const Notification* n, Duration d) {
  bool notified = RealWaitForNotificationWithTimeout(n, d);
  if (notified) __tsan_acquire(SyncAddress(n));
  return notified;
}
bool WrapWaitForNotificationWithDeadline(const Notification* n, Time t)
    TALLY_WRAP("NK",
               "12Notification31WaitForNotificationWithDeadlineENS0_4TimeE");
bool WrapWaitForNotificationWithDeadline(const Notification* n, Time t) {
  bool notified = RealWaitForNotificationWithDeadline(n, t);
  if (notified) __tsan_acquire(SyncAddress(n));
  return notified;
}
