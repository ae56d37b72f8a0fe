#include "cpu/threadpool.h"

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#if defined(__linux__)
#include <pthread.h>
#include <sched.h>
#endif

namespace ft {

namespace {
// The non-negative integer at the start of a small sysfs file, or -1.
int read_int(const std::string& path) {
  std::FILE* f = std::fopen(path.c_str(), "r");
  if (!f) return -1;
  int v = -1;
  if (std::fscanf(f, "%d", &v) != 1) v = -1;
  std::fclose(f);
  return v;
}
}  // namespace

std::vector<int> physical_core_cpus() {
  std::vector<int> out;
#if defined(__linux__)
  std::set<std::pair<int, int>> seen;  // (package, core)
  unsigned n = std::thread::hardware_concurrency();
  for (unsigned cpu = 0; cpu < n; ++cpu) {
    std::string base = "/sys/devices/system/cpu/cpu" + std::to_string(cpu) + "/topology/";
    // C stdio, not iostreams: with another libstdc++ loaded first (torch's, on some images) an
    // istream's locale facets crashed here (seen on an Intel Xeon H200 host)
    const int p = read_int(base + "physical_package_id"), c = read_int(base + "core_id");
    if (p < 0 || c < 0) continue;
    if (seen.insert({p, c}).second) out.push_back(static_cast<int>(cpu));
  }
#endif
  if (out.empty()) {
    unsigned n = std::thread::hardware_concurrency();
    for (unsigned i = 0; i < (n ? n : 1); ++i) out.push_back(static_cast<int>(i));
  }
  return out;
}

namespace {

// FT_SPIN_US (microseconds) when set, else -1: set_spin_us decides.
int64_t env_spin_us() {
  if (const char* e = std::getenv("FT_SPIN_US")) {
    const long v = std::strtol(e, nullptr, 10);
    if (v >= 0) return v;
  }
  return -1;
}
const int64_t g_env_spin = env_spin_us();
std::atomic<int64_t> g_spin_us{g_env_spin >= 0 ? g_env_spin : 0};

void pin_to(int cpu) {
#if defined(__linux__)
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  pthread_setaffinity_np(pthread_self(), sizeof(set), &set);
#else
  (void)cpu;
#endif
}

thread_local int t_job_threads = 1;  // ThreadPool::job_threads

class Pool final : public ThreadPool {
 public:
  explicit Pool(int n) : cpus_(physical_core_cpus()), parts_(new Part[n]), nparts_(n) {
    for (int i = 1; i < n; ++i) workers_.emplace_back([this, i] { loop(i); });
  }
  ~Pool() override {
    {
      std::lock_guard<std::mutex> g(m_);
      stop_.store(true);
    }
    cv_.notify_all();
    for (auto& t : workers_) t.join();
  }
  int size() const override { return static_cast<int>(workers_.size()) + 1; }

  void run(int64_t n, const std::function<void(int64_t)>& fn) override {
    if (n <= 0) return;
    std::lock_guard<std::mutex> job_lock(job_);  // one job at a time; concurrent callers queue here
    if (workers_.empty() || n == 1) {
      for (int64_t i = 0; i < n; ++i) fn(i);
      return;
    }
    {
      std::lock_guard<std::mutex> g(m_);
      fn_ = &fn;
      for (int p = 0; p < nparts_; ++p) {  // participant p's tasks: [n p / P, n (p + 1) / P)
        parts_[p].next.store(n * p / nparts_);
        parts_[p].end = n * (p + 1) / nparts_;
      }
      pending_.store(static_cast<int>(workers_.size()));
      error_ = nullptr;
      gen_.fetch_add(1, std::memory_order_release);  // spinning workers start here, sleeping ones below
    }
    cv_.notify_all();
    work(0);
    // The last worker is usually a few microseconds behind: spin for it before sleeping.
    if (!spin_until([this] { return pending_.load(std::memory_order_acquire) == 0; })) {
      std::unique_lock<std::mutex> g(m_);
      done_cv_.wait(g, [this] { return pending_.load() == 0; });
    }
    std::lock_guard<std::mutex> g(m_);
    fn_ = nullptr;
    if (error_) std::rethrow_exception(error_);
  }

 private:
  // Busy-wait (with pause) until pred() or the spin time (set_spin_us) has passed; true if pred() held.
  // Decode steps call the pool tens of times per token with ~0.1 ms of Python between calls: a worker
  // that spins through such gaps starts in ~1 us instead of a futex wake-up (~20-100 us on VMs).
  template <class P>
  bool spin_until(P pred) const {
    if (pred()) return true;
    const int64_t us = g_spin_us.load(std::memory_order_relaxed);
    if (us <= 0) return false;
    const auto end = std::chrono::steady_clock::now() + std::chrono::microseconds(us);
    for (;;) {
      for (int k = 0; k < 64; ++k) {
        if (pred()) return true;
        cpu_relax();
      }
      if (std::chrono::steady_clock::now() >= end) return pred();
    }
  }

  static void cpu_relax() {
#if defined(__x86_64__) || defined(_M_X64)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    asm volatile("yield");
#endif
  }

  // Participant `self` (0: the caller, i: worker i) runs its own contiguous range of tasks in order, then
  // helps the others with what is left of theirs. Contiguous ranges, not one shared counter: a task is
  // mostly a block of weight rows, and the row kernels prefetch the bytes after their block -- the next
  // block, which is this thread's next task. With tasks dealt round-robin that prefetch fed the other core
  // and every block started cold (2 Zen 5 cores, a [32768, 2048] linear in 64 KiB blocks from DRAM, bf16 x:
  // Q4_K 29 -> 40 GB/s, Q6_K 30 -> 44, INT4 25 -> 37, BF16 36 -> 49).
  void work(int self) {
    t_job_threads = nparts_;
    for (int k = 0; k < nparts_; ++k) {
      Part& part = parts_[(self + k) % nparts_];
      for (int64_t i; (i = part.next.fetch_add(1)) < part.end;) {
        try {
          (*fn_)(i);
        } catch (...) {
          std::lock_guard<std::mutex> g(m_);
          if (!error_) error_ = std::current_exception();
        }
      }
    }
    t_job_threads = 1;
  }

  void loop(int idx) {
    if (!cpus_.empty()) pin_to(cpus_[idx % cpus_.size()]);
    uint64_t seen = 0;
    for (;;) {
      if (!spin_until([&] { return stop_.load(std::memory_order_acquire) ||
                                   gen_.load(std::memory_order_acquire) != seen; })) {
        std::unique_lock<std::mutex> g(m_);
        cv_.wait(g, [&] { return stop_.load() || gen_.load() != seen; });
      }
      if (stop_.load()) return;
      seen = gen_.load(std::memory_order_acquire);
      work(idx);
      if (pending_.fetch_sub(1, std::memory_order_acq_rel) == 1) {
        std::lock_guard<std::mutex> g(m_);  // the caller may be asleep on done_cv_
        done_cv_.notify_one();
      }
    }
  }

  std::vector<int> cpus_;
  std::vector<std::thread> workers_;
  std::mutex m_, job_;
  std::condition_variable cv_, done_cv_;
  const std::function<void(int64_t)>* fn_ = nullptr;
  struct alignas(64) Part {  // one cache line each: the cursors are written by different cores
    std::atomic<int64_t> next{0};
    int64_t end = 0;
  };
  std::unique_ptr<Part[]> parts_;
  int nparts_;
  std::atomic<int> pending_{0};
  std::atomic<uint64_t> gen_{0};
  std::atomic<bool> stop_{false};
  std::exception_ptr error_;
};

std::mutex g_pool_mutex;
std::unique_ptr<Pool> g_pool;

int default_threads() {
  if (const char* e = std::getenv("FT_NUM_THREADS")) {
    int n = std::atoi(e);
    if (n >= 1) return n;
  }
  return static_cast<int>(physical_core_cpus().size());
}

}  // namespace

ThreadPool& ThreadPool::get() {
  std::lock_guard<std::mutex> g(g_pool_mutex);
  if (!g_pool) g_pool = std::make_unique<Pool>(default_threads());
  return *g_pool;
}

void ThreadPool::set_num_threads(int n) {
  std::lock_guard<std::mutex> g(g_pool_mutex);
  g_pool.reset();
  g_pool = std::make_unique<Pool>(n < 1 ? 1 : n);
}

int ThreadPool::num_threads() { return get().size(); }
int ThreadPool::job_threads() { return t_job_threads; }

void ThreadPool::set_spin_us(int64_t us) {
  if (g_env_spin < 0) g_spin_us.store(us < 0 ? 0 : us);
}

}  // namespace ft
