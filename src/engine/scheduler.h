#pragma once
// The scheduler: iteration-level continuous batching as decisions on data.
// It owns the waiting and running requests and decides, step by step, who
// is admitted, what each running row feeds, how many drafts a row may take,
// and whom to preempt when the KV cache runs out. It never touches a model
// or a cache: it reads the KV store through KvAccounting and the drafter's
// has_room(), and the StepRunner carries its plans out, so every rule below
// is tested without a model (scheduler_test.cc).
//
// Admission. Waiting requests are admitted in FIFO order while fewer than
// max_running run and each fits (kv_room.h) beside the running rows in the
// target's cache and, when speculating, the drafter's storage. Every
// running row holds room to reach its max_length (prompt and max_tokens,
// capped by the context), and each byte is counted once, so rows admitted
// together are not preempted for room. With overcommit, admission holds
// room for the sequences as they stand: more rows run, and growth that
// outruns the pool preempts. A request admitted into an empty
// batch always runs: it fails later only if it cannot fit alone. The first
// that does not fit stops admission (no request overtakes an earlier one).
//
// A step's feeds. Every running row with one token left to compute feeds
// it, whatever the budget: a decoding row its last sampled token (with up
// to γ_row drafts after it when speculating), a row at its prompt's last
// token that token, undrafted. Prefill chunks then take what the token
// budget leaves after those tokens and the drafts, in admission order. A
// row resumed after preemption (its swapped-out KV restored, or not)
// computes what it lacks up to its last sampled token and then decodes it
// like any other row.
//
// The precision switch (kv::PrecisionSwitch). A row below the switch
// position stops there: its prefill chunk ends at it and its drafts stay
// below it, so the cache can switch the row before it appends past it (the
// step runner does), at the same position in every schedule.
//
// Drafts. γ_row is at most γ and no more than the row can still emit (its
// max_tokens, the context) with the token after them, nor than stay below
// the precision switch. A sampled row's γ_row
// depends on the request alone: which positions were drafted is part of
// what decides a sampled output, which must not depend on the schedule. A
// greedy row's output does not depend on it, so greedy rows take what the
// budget leaves, in admission order. (So decode tokens and sampled rows'
// drafts may exceed the budget; greedy drafts and prefill chunks never do.)
//
// Preemption. When the runner reports kv::OutOfBlocks, the most recently
// admitted row is preempted: its request goes back to the front of the
// waiting queue (it resumes first). A row that runs alone cannot be helped.
//
// Threads: the scheduler thread's (or the caller's, in manual mode) only.

#include <cstdint>
#include <deque>
#include <functional>
#include <list>
#include <memory>
#include <span>
#include <vector>

#include "engine/drafter.h"
#include "engine/kv_room.h"
#include "engine/request_state.h"
#include "engine/step_plan.h"

namespace rowlm::engine {

struct SchedulerOptions {
  int max_running = 64;       // most requests in the running batch
  int64_t token_budget = 256; // most prefill tokens and greedy drafts with the decode tokens of one step
  int draft_tokens = 0;       // γ when speculating; 0 = no speculation
  int64_t context = 0;        // the model's context (max_position); 0 = unknown
  bool prefix_cache = true;   // admission counts cached prefixes as reusable
  bool overcommit = false;    // admission holds room for what rows hold now, not their max_length
  // The KV cache's precision switch position (kv::PrecisionSwitch::after),
  // or -1: a row's prefill chunk or drafts never carry it across.
  int64_t precision_switch = -1;

  // The positions admission holds room for: the request's max_length, or
  // with overcommit its sequence as it stands.
  int64_t admission_target(const RequestState& r) const {
    return overcommit ? r.sequence_length() : r.max_length(context);
  }

  // The most tokens a row appends between settle points, for projected bytes.
  int64_t step_tokens() const { return token_budget + draft_tokens; }
};

// The preemption the scheduler chooses when a step does not fit.
struct Preemption {
  RequestState* request = nullptr;  // the most recently admitted running request
  bool alone = false;               // it runs alone: preempting it makes no room, it must fail
};

class Scheduler {
 public:
  using Queue = std::deque<std::unique_ptr<RequestState>>;
  using Running = std::list<std::unique_ptr<RequestState>>;  // in admission order

  // `kv` (the target cache's accounting) and `drafter` (consulted for room at
  // admission; may be null) outlive the scheduler.
  Scheduler(SchedulerOptions options, const KvAccounting& kv, const Drafter* drafter);

  const SchedulerOptions& options() const { return opt_; }
  const Queue& waiting() const { return waiting_; }
  const Running& running() const { return running_; }

  // --- Queues ---------------------------------------------------------------
  // A new request joins the back of the waiting queue.
  void enqueue(std::unique_ptr<RequestState> request);
  // Removes and returns every request whose handle asks to cancel, waiting
  // ones first, each in queue order; the caller finishes them.
  std::vector<std::unique_ptr<RequestState>> take_cancelled();
  // Removes and returns every request, waiting ones first (shutdown).
  std::vector<std::unique_ptr<RequestState>> take_all();
  // Drops the running requests whose handles are done (finished).
  void remove_finished();

  // --- Admission --------------------------------------------------------------
  // Admits waiting requests by the rules above and returns them in order.
  // `attach` gives each its KV rows (setting row and computed) before the
  // next is considered, since the room left depends on them; if it throws,
  // that request stays first in the waiting queue and the exception
  // propagates.
  std::vector<RequestState*> admit(const std::function<void(RequestState&)>& attach);

  // --- Planning -----------------------------------------------------------------
  // Speculating: one DraftJob per running row, in admission order, with
  // max_tokens = γ_row for decoding rows and 0 for the others (a drafter
  // keeps up with those). Empty when not speculating.
  std::vector<DraftJob> draft_jobs() const;
  // The step's feeds, given the jobs of draft_jobs() with their proposals
  // (unused draft budget goes to prefill); pass none when not speculating.
  StepPlan plan(std::span<const DraftJob> jobs) const;
  // The most drafts the row may take this step (γ_row before the budget).
  int draft_limit(const RequestState& r) const;

  // --- Preemption -----------------------------------------------------------------
  // The running request to give up when a step does not fit. Needs a running row.
  Preemption preemption() const;
  // Moves a running request (its KV released) to the front of the waiting queue.
  void requeue(RequestState& r);

 private:
  // Whether `r` fits beside the running rows (admission's room check).
  bool fits(const RequestState& r) const;

  const SchedulerOptions opt_;
  const KvAccounting& kv_;
  const Drafter* const drafter_;
  Queue waiting_;
  Running running_;
  uint64_t admit_counter_ = 0;
};

}  // namespace rowlm::engine
