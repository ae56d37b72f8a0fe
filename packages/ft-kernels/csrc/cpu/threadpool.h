// A persistent thread pool: one worker per physical core (or a set count), each pinned to its core,
// created once; callers hand it a task count and a function. Several callers may use it at once:
// one job runs at a time, the others wait their turn. Python-free.
#pragma once
#include <cstdint>
#include <functional>
#include <vector>

namespace ft {

class ThreadPool {
 public:
  // The process-wide pool. Its size: FT_NUM_THREADS if set, else the number of physical cores.
  static ThreadPool& get();
  // Resize (joins the old workers, starts new ones pinned to physical cores). n >= 1.
  static void set_num_threads(int n);
  static int num_threads();
  // How long idle workers (and a caller waiting for the last worker) spin before sleeping, in
  // microseconds; 0 sleeps at once (the default). Worth it only while the caller issues many short jobs
  // and nothing else needs the cores (a decode step with torch on one thread): the engine turns it on
  // around such steps. FT_SPIN_US, when set, fixes it for the process.
  static void set_spin_us(int64_t us);
  // How many threads share the pool job whose task the calling thread runs: the pool's size inside the tasks of
  // a job it split, 1 outside a job or where run kept the job on the caller. For kernels whose best way to stream
  // depends on whether other cores read beside them (x86_avx512bf16.h: one token's prefetch).
  static int job_threads();

  // Run fn(i) for i in [0, n) on the pool (the calling thread takes part); returns when all are done. Each
  // participant first runs a contiguous range of i in increasing order (neighbouring tasks, neighbouring
  // weight rows), then helps with what is left of the others'.
  // Exceptions from tasks are rethrown in the caller (the first one).
  virtual void run(int64_t n, const std::function<void(int64_t)>& fn) = 0;
  virtual int size() const = 0;
  virtual ~ThreadPool() = default;
};

// Physical cores: one logical CPU id per core (the first sibling), from sysfs topology; falls back to
// every online CPU when the topology is unreadable.
std::vector<int> physical_core_cpus();

}  // namespace ft
