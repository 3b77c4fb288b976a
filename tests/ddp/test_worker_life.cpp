// next_action (ddp/worker_life.h): the worker's life cycle as a pure function of (state,
// event), checked on every pair: the table's transitions, and every other pair refused.
#include <doctest/doctest.h>

#include <map>
#include <string>
#include <utility>
#include <vector>

#include "base/error.h"
#include "ddp/worker_life.h"

using namespace rf::ddp;
using S = WorkerState;
using E = WorkerEventKind;
using A = WorkerAction;

namespace {
constexpr S kStates[] = {S::Joining, S::Reporting, S::Forming, S::Resuming,
                         S::Training, S::Leaving, S::Dropping, S::Done};
constexpr E kEvents[] = {E::Joined, E::JobFinished, E::PlanReceived, E::Fenced, E::Formed,
                         E::FormFailed, E::Running, E::Revoked, E::StepFailed, E::Reconfigure,
                         E::StopRequested, E::Finished, E::Left, E::CommDropped};

WorkerEvent event(E kind) {
  return {kind, kind == E::StepFailed ? StepFailure::Transport : StepFailure::None};
}

// The expected table, written out independently of the implementation's.
const std::map<std::pair<S, E>, std::pair<S, A>>& expected() {
  static const std::map<std::pair<S, E>, std::pair<S, A>> t{
      {{S::Joining, E::Joined}, {S::Reporting, A::Report}},
      {{S::Joining, E::JobFinished}, {S::Done, A::EndStandby}},
      {{S::Reporting, E::PlanReceived}, {S::Forming, A::Form}},
      {{S::Reporting, E::Fenced}, {S::Dropping, A::DropComm}},
      {{S::Reporting, E::JobFinished}, {S::Done, A::EndStandby}},
      {{S::Forming, E::Formed}, {S::Resuming, A::Resume}},
      {{S::Forming, E::FormFailed}, {S::Dropping, A::DropComm}},
      {{S::Resuming, E::Running}, {S::Training, A::Train}},
      {{S::Resuming, E::Revoked}, {S::Dropping, A::DropComm}},
      {{S::Resuming, E::JobFinished}, {S::Done, A::End}},
      {{S::Training, E::StepFailed}, {S::Dropping, A::DropComm}},
      {{S::Training, E::Revoked}, {S::Dropping, A::DropComm}},
      {{S::Training, E::Reconfigure}, {S::Dropping, A::DropComm}},
      {{S::Training, E::StopRequested}, {S::Leaving, A::Leave}},
      {{S::Training, E::Finished}, {S::Leaving, A::Leave}},
      {{S::Leaving, E::Left}, {S::Done, A::End}},
      {{S::Leaving, E::Fenced}, {S::Dropping, A::DropComm}},
      {{S::Dropping, E::CommDropped}, {S::Reporting, A::Report}},
      {{S::Dropping, E::Fenced}, {S::Joining, A::Join}},
  };
  return t;
}

// Runs a sequence of events from Joining as Trainer::run does (each transition carries
// what the worker remembers into the next); returns the actions taken.
std::vector<A> run(std::initializer_list<WorkerEvent> events) {
  std::vector<A> actions;
  WorkerTransition t{S::Joining, A::Join};
  for (const WorkerEvent& e : events) {
    t = next_action(t, e);
    actions.push_back(t.action);
  }
  return actions;
}
}  // namespace

TEST_CASE("next_action: every (state, event) pair follows the table or is refused") {
  int transitions = 0;
  for (S s : kStates) {
    for (E e : kEvents) {
      CAPTURE(to_string(s));
      CAPTURE(to_string(e));
      const auto it = expected().find({s, e});
      if (it == expected().end()) {
        CHECK_THROWS_AS(next_action(s, event(e)), rf::EnforceError);
        continue;
      }
      const WorkerTransition t = next_action(s, event(e));
      CHECK(t.state == it->second.first);
      CHECK(t.action == it->second.second);
      ++transitions;
    }
  }
  CHECK(transitions == static_cast<int>(expected().size()));
}

TEST_CASE("next_action: the action names the state it leads to") {
  // Each state but Done is entered by exactly one action; Done by End or EndStandby.
  const std::map<S, A> enters{{S::Joining, A::Join},   {S::Reporting, A::Report}, {S::Forming, A::Form},
                              {S::Resuming, A::Resume}, {S::Training, A::Train},   {S::Leaving, A::Leave},
                              {S::Dropping, A::DropComm}};
  for (const auto& [from_event, to] : expected()) {
    CAPTURE(to_string(from_event.first));
    CAPTURE(to_string(from_event.second));
    if (to.first == S::Done) CHECK((to.second == A::End || to.second == A::EndStandby));
    else CHECK(enters.at(to.first) == to.second);
  }
}

TEST_CASE("next_action: a failed step recovers whatever its kind; the kind goes only with StepFailed") {
  for (StepFailure f : {StepFailure::Transport, StepFailure::Divergence}) {
    const WorkerTransition t = next_action(S::Training, {E::StepFailed, f});
    CHECK(t.state == S::Dropping);
    CHECK(t.action == A::DropComm);
  }
  CHECK_THROWS_AS(next_action(S::Training, {E::StepFailed, StepFailure::None}), rf::EnforceError);
  CHECK_THROWS_AS(next_action(S::Training, {E::Revoked, StepFailure::Transport}), rf::EnforceError);
}

TEST_CASE("next_action: the job finishing is a standby before training, the end after a plan ran") {
  CHECK(run({{E::JobFinished}}) == std::vector<A>{A::EndStandby});
  CHECK(run({{E::Joined}, {E::JobFinished}}) == std::vector<A>{A::Report, A::EndStandby});
  CHECK(run({{E::Joined}, {E::PlanReceived}, {E::Formed}, {E::JobFinished}}) ==
        std::vector<A>{A::Report, A::Form, A::Resume, A::End});
}

TEST_CASE("next_action: a failure-free life, then one with a failed step, a fence and a rejoin") {
  CHECK(run({{E::Joined}, {E::PlanReceived}, {E::Formed}, {E::Running}, {E::Finished}, {E::Left}}) ==
        std::vector<A>{A::Report, A::Form, A::Resume, A::Train, A::Leave, A::End});
  CHECK(run({{E::Joined}, {E::PlanReceived}, {E::Formed}, {E::Running}, {E::StepFailed, StepFailure::Transport},
             {E::CommDropped}, {E::PlanReceived}, {E::FormFailed}, {E::Fenced}, {E::Joined}, {E::PlanReceived},
             {E::Formed}, {E::Running}, {E::StopRequested}, {E::Fenced}, {E::CommDropped}, {E::PlanReceived},
             {E::Formed}, {E::Running}, {E::Finished}, {E::Left}}) ==
        std::vector<A>{A::Report, A::Form, A::Resume, A::Train, A::DropComm, A::Report, A::Form, A::DropComm,
                       A::Join, A::Report, A::Form, A::Resume, A::Train, A::Leave, A::DropComm, A::Report,
                       A::Form, A::Resume, A::Train, A::Leave, A::End});
}

TEST_CASE("next_action: fenced at the leave, the job finished meanwhile: it ends as a member, not a standby") {
  // The last step applied, the leave refused (the leader was lost), the join or the report
  // after it finds the job finished: the others left under the new leader.
  CHECK(run({{E::Joined}, {E::PlanReceived}, {E::Formed}, {E::Running}, {E::Finished}, {E::Fenced}, {E::Fenced},
             {E::JobFinished}}) ==
        std::vector<A>{A::Report, A::Form, A::Resume, A::Train, A::Leave, A::DropComm, A::Join, A::End});
  CHECK(run({{E::Joined}, {E::PlanReceived}, {E::Formed}, {E::Running}, {E::Finished}, {E::Fenced}, {E::Fenced},
             {E::Joined}, {E::JobFinished}}) ==
        std::vector<A>{A::Report, A::Form, A::Resume, A::Train, A::Leave, A::DropComm, A::Join, A::Report, A::End});
  // The same after a stop's step, and after a rejoined generation that failed to form.
  CHECK(run({{E::Joined}, {E::PlanReceived}, {E::Formed}, {E::Running}, {E::StopRequested}, {E::Fenced},
             {E::CommDropped}, {E::PlanReceived}, {E::FormFailed}, {E::CommDropped}, {E::JobFinished}})
            .back() == A::End);
  // Fenced before it reached the leave, it is a standby at the job's end as before.
  CHECK(run({{E::Joined}, {E::PlanReceived}, {E::Formed}, {E::Running}, {E::Revoked}, {E::Fenced},
             {E::JobFinished}})
            .back() == A::EndStandby);
  const WorkerTransition t = next_action({S::Training, A::Train}, {E::Finished});
  CHECK(t.reached_leave);
  CHECK(next_action(t, {E::Fenced}).reached_leave);
}

TEST_CASE("to_string names every state, event, failure and action") {
  for (S s : kStates) CHECK(std::string(to_string(s)) != "?");
  for (E e : kEvents) CHECK(std::string(to_string(e)) != "?");
  for (A a : {A::Join, A::Report, A::Form, A::Resume, A::Train, A::Leave, A::DropComm, A::End, A::EndStandby})
    CHECK(std::string(to_string(a)) != "?");
  CHECK(std::string(to_string(StepFailure::Divergence)) == "divergence");
}
