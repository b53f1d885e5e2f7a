// Lock annotations checked by Clang's thread-safety analysis (-Wthread-safety; "Thread Safety
// Analysis", clang.llvm.org/docs/ThreadSafetyAnalysis.html), as leveldb's port/thread_annotations.h
// and Abseil's do. Under GCC (the default build) they expand to nothing; the CI's clang pass
// (scripts/check_thread_safety.sh, ctest `thread_safety_clang`) turns every violation into an error.
//
// Use them with zipmoe::Mutex / MutexLock (common/mutex.h): libstdc++'s std::mutex carries no
// capability attributes, so the analysis cannot see it.
//   ZM_GUARDED_BY(mu)      a member read or written only with `mu` held
//   ZM_PT_GUARDED_BY(mu)   what a pointer member points to, likewise
//   ZM_REQUIRES(mu)        a function called with `mu` held (the *Locked helpers)
//   ZM_EXCLUDES(mu)        a function that takes `mu` itself (must not be called with it held)
//   ZM_ACQUIRE / ZM_RELEASE, ZM_CAPABILITY, ZM_SCOPED_CAPABILITY: for the lock types themselves
//   ZM_NO_THREAD_SAFETY_ANALYSIS: a function the analysis cannot follow (say why beside it)
#pragma once

#if defined(__clang__)
#define ZM_THREAD_ANNOTATION(x) __attribute__((x))
#else
#define ZM_THREAD_ANNOTATION(x)
#endif

#define ZM_CAPABILITY(name) ZM_THREAD_ANNOTATION(capability(name))
#define ZM_SCOPED_CAPABILITY ZM_THREAD_ANNOTATION(scoped_lockable)
#define ZM_GUARDED_BY(x) ZM_THREAD_ANNOTATION(guarded_by(x))
#define ZM_PT_GUARDED_BY(x) ZM_THREAD_ANNOTATION(pt_guarded_by(x))
#define ZM_REQUIRES(...) ZM_THREAD_ANNOTATION(requires_capability(__VA_ARGS__))
#define ZM_EXCLUDES(...) ZM_THREAD_ANNOTATION(locks_excluded(__VA_ARGS__))
#define ZM_ACQUIRE(...) ZM_THREAD_ANNOTATION(acquire_capability(__VA_ARGS__))
#define ZM_RELEASE(...) ZM_THREAD_ANNOTATION(release_capability(__VA_ARGS__))
#define ZM_ASSERT_CAPABILITY(x) ZM_THREAD_ANNOTATION(assert_capability(x))
#define ZM_RETURN_CAPABILITY(x) ZM_THREAD_ANNOTATION(lock_returned(x))
#define ZM_NO_THREAD_SAFETY_ANALYSIS ZM_THREAD_ANNOTATION(no_thread_safety_analysis)
