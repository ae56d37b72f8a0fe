// The CPU share of a device's MoE layer step, run outside Python (DESIGN §3): the device copies a step's
// outcome and inputs into page-locked host buffers (HostBranchIo), then either queues a host function
// (cudaLaunchHostFunc: ft_host_branch_call) or raises a flag that a polling thread of this branch
// watches; the branch runs the routes the device left to the CPU (slot < 0) through moe_experts and
// writes their partial sum, which the device copies back and adds. Nothing here takes the GIL or calls
// CUDA (a host function may not), so the step needs no host synchronisation. Python-free.
#pragma once
#include <atomic>
#include <cstdint>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "cpu/moe_ffn.h"

namespace ft {

// A step's page-locked buffers, filled by the device before each run (shapes fixed per branch).
struct HostBranchIo {
  const int64_t* route_slot = nullptr;  // [R] the route's cache slot, < 0: computed here
  const int32_t* counts = nullptr;      // [4] the control step's copies, hits, misses, evictions
  const void* x = nullptr;              // [T, H] fp32, or bf16 when x_bf16
  bool x_bf16 = false;
  int64_t T = 0, H = 0;
  const int64_t* tok = nullptr;  // [R] token of each route
  const int64_t* eid = nullptr;  // [R] flat expert id (moe layer * E + e)
  const float* gate = nullptr;   // [R]
  int64_t R = 0;
  float* y = nullptr;  // [T, H] fp32, overwritten: the CPU routes' partial sum (zeros when none)
};

// Per-layer counters, int64 [layers, kStatCols], added to by every run.
enum HostBranchStat { kSteps, kRoutes, kCpuRoutes, kHits, kMisses, kFills, kEvictions, kCpuUs, kStatCols };

class HostBranch {
 public:
  // weights: moe_experts' arguments less the per-step ones (x, tok, eid, gate, R, T, y), which come from io.
  // experts: experts per MoE layer (a flat id's layer is id / experts); stats: [layers, kStatCols] int64.
  HostBranch(const MoeArgs& weights, const HostBranchIo& io, int64_t experts, int64_t* stats, int64_t layers);
  ~HostBranch();
  HostBranch(const HostBranch&) = delete;
  HostBranch& operator=(const HostBranch&) = delete;

  // One step from the buffers as they are now. Never throws: the first error is kept (error()) and y is
  // zeroed, so the device goes on and the caller raises at its next check.
  void run() noexcept;
  std::string error() const;

  // Polled flag: a thread runs a step each time *flag changes from the value it has when this is called, then
  // stores the flag's value in *done
  // (release order: y is written before done). flag / done: page-locked words the device writes / reads.
  void start_polling(const int32_t* flag, int32_t* done);
  void stop_polling();
  int64_t runs() const { return runs_.load(std::memory_order_acquire); }

 private:
  void poll_loop(int32_t seen);
  MoeArgs w_;
  HostBranchIo io_;
  int64_t experts_, layers_;
  int64_t* stats_;
  std::vector<int32_t> tok_, eid_;
  std::vector<float> gate_;
  mutable std::mutex err_mu_;
  std::string error_;
  std::atomic<int64_t> runs_{0};
  const int32_t* flag_ = nullptr;
  int32_t* done_ = nullptr;
  std::atomic<bool> stop_{false};
  std::thread poller_;
};

}  // namespace ft

// The host function a device queues (cudaHostFn_t): runs the HostBranch at `branch`.
extern "C" void ft_host_branch_call(void* branch);
