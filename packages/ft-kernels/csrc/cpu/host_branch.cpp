#include "cpu/host_branch.h"

#include <chrono>
#include <cstring>
#include <exception>
#include <stdexcept>

#if defined(__x86_64__) || defined(_M_X64)
#include <immintrin.h>
#define FT_PAUSE() _mm_pause()
#else
#define FT_PAUSE() std::this_thread::yield()
#endif

namespace ft {

HostBranch::HostBranch(const MoeArgs& weights, const HostBranchIo& io, int64_t experts, int64_t* stats,
                       int64_t layers)
    : w_(weights), io_(io), experts_(experts), layers_(layers), stats_(stats) {
  if (experts <= 0 || layers <= 0) throw std::invalid_argument("experts and layers must be > 0");
  tok_.resize(io.R), eid_.resize(io.R), gate_.resize(io.R);
}

HostBranch::~HostBranch() { stop_polling(); }

void HostBranch::run() noexcept {
  auto t0 = std::chrono::steady_clock::now();
  int64_t n = 0, layer = -1;
  try {
    for (int64_t r = 0; r < io_.R; ++r) {
      if (io_.route_slot[r] >= 0) continue;
      tok_[n] = static_cast<int32_t>(io_.tok[r]);
      eid_[n] = static_cast<int32_t>(io_.eid[r]);
      gate_[n] = io_.gate[r];
      ++n;
    }
    if (io_.R > 0) layer = io_.eid[0] / experts_;
    if (n == 0) {
      std::memset(io_.y, 0, sizeof(float) * io_.T * io_.H);
    } else {
      MoeArgs a = w_;
      a.x = io_.x, a.x_bf16 = io_.x_bf16, a.T = io_.T, a.H = io_.H;
      a.tok = tok_.data(), a.eid = eid_.data(), a.gate = gate_.data(), a.R = n, a.y = io_.y;
      moe_experts(a);
    }
  } catch (const std::exception& e) {
    std::lock_guard<std::mutex> g(err_mu_);
    if (error_.empty()) error_ = e.what();
    std::memset(io_.y, 0, sizeof(float) * io_.T * io_.H);
  } catch (...) {
    std::lock_guard<std::mutex> g(err_mu_);
    if (error_.empty()) error_ = "the host branch failed";
  }
  if (layer >= 0 && layer < layers_) {
    int64_t* s = stats_ + layer * kStatCols;
    auto us = std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::steady_clock::now() - t0);
    s[kSteps] += 1, s[kRoutes] += io_.R, s[kCpuRoutes] += n;
    s[kFills] += io_.counts[0], s[kHits] += io_.counts[1], s[kMisses] += io_.counts[2];
    s[kEvictions] += io_.counts[3], s[kCpuUs] += us.count();
  }
  runs_.fetch_add(1, std::memory_order_release);
}

std::string HostBranch::error() const {
  std::lock_guard<std::mutex> g(err_mu_);
  return error_;
}

void HostBranch::start_polling(const int32_t* flag, int32_t* done) {
  stop_polling();
  flag_ = flag, done_ = done;
  stop_.store(false);
  // the flag's value now is the one already answered: read here, not in the thread, which may start after
  // the caller has raised the flag for its first step
  const int32_t seen = __atomic_load_n(flag_, __ATOMIC_ACQUIRE);
  poller_ = std::thread([this, seen] { poll_loop(seen); });
}

void HostBranch::stop_polling() {
  if (!poller_.joinable()) return;
  stop_.store(true);
  poller_.join();
}

// Spins while steps come (a decode's layer steps are ~0.1-1 ms apart), then naps, so an idle engine does
// not hold a core.
void HostBranch::poll_loop(int32_t seen) {
  using clock = std::chrono::steady_clock;
  auto last = clock::now();
  while (!stop_.load(std::memory_order_relaxed)) {
    int32_t f = __atomic_load_n(flag_, __ATOMIC_ACQUIRE);
    if (f != seen) {
      run();
      seen = f;
      __atomic_store_n(done_, f, __ATOMIC_RELEASE);
      last = clock::now();
    } else if (clock::now() - last < std::chrono::milliseconds(20)) {
      for (int i = 0; i < 32; ++i) FT_PAUSE();
    } else {
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
  }
}

}  // namespace ft

extern "C" void ft_host_branch_call(void* branch) { static_cast<ft::HostBranch*>(branch)->run(); }
