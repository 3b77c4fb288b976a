#!/usr/bin/env python3
"""Each fix of the NCCL backend that nccl_double_mp_test guards, reverted one at a time: applies the revert to the source,
rebuilds nccl_double_mp_test in BUILD (or the entry's targets), runs the scenario that catches it, and restores the
source (always). Every run must say FAILED: the double's scenarios fail without their
fix. Not part of CI (it edits the tree); tied to the code as committed with it.
A test name is nccl_double_NAME, except names that start with test_ (a unit test binary's ctest).
  python3 tests/comm/nccl_double_without_fixes.py BUILD [NAME...]   (default: all)
"""
import os, subprocess, sys
R = os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', '..') + '/'
def rep(path, old, new):
    p=R+path; s=open(p).read()
    assert old in s, (path, old[:60]); return (p, s, s.replace(old, new, 1))
reverts = {
 'fix1_shrink_polls_parent': ([('comm/nccl/nccl_form.cpp','if (r == ncclInProgress || r == ncclSuccess) r = settle(parent, until, false);','if (r == ncclInProgress || r == ncclSuccess) r = settle(*child, until, false);')], ['shrink_w3']),
 'fix2_done_after_launch': ([('comm/nccl/nccl_collectives.cpp','''  if (r == ncclInProgress) {
    op.launch = NcclOp::Launch::launching;
    return true;
  }''','''  if (r == ncclInProgress) return complete_launch(op, failed);'''),
   ('comm/nccl/wait_loop.cpp','if (o.launched && o.event == EventState::done) {','if (o.event == EventState::done) {')], ['inprogress_w3']),
 # Every call launches later now (ncclInProgress): the old caller's wait on `done` needs the launch first.
 'fix3_overlap': ([('comm/nccl/nccl_collectives.cpp','      if (ok) ok = advance_launches(failed);','      if (ok) ok = advance_launches(failed);\n      while (ok && device && op->launch != NcclOp::Launch::launched) ok = advance_launches(failed);\n      if (ok && device && op->done) cudaStreamWaitEvent(static_cast<cudaStream_t>(caller), op->done, 0);')], ['overlap_w2']),
 'fix4_stuck_names_self': ([('comm/nccl/wait_loop.cpp','    if (!o.started) {','    if (false) {')], ['stuck_w2']),
 'fix4b_stuck_on_abort': ([('comm/nccl/nccl_communicator.cpp','if (head.started != nullptr && judge_device_stuck(','if (false && judge_device_stuck(')], ['stuck_aborted_w2']),
 'fix5_plan_decides': ([('comm/nccl/nccl_form.cpp','  if (o.regroup.kind == CommRegroup::Kind::shrink) {\n    if (previous == nullptr)','''  CommOptions local = o;  // the old local decision
  if (previous && !o.members.empty() && previous->shrinkable() &&
      plan_regroup(previous->members(), o.members, true).kind == RegroupPlan::Kind::shrink)
    local.regroup = CommRegroup{CommRegroup::Kind::shrink, previous->generation()};
  if (local.regroup.kind == CommRegroup::Kind::shrink) {
    form_shrink(local, cfg, *previous);
    return;
  }
  if (o.regroup.kind == CommRegroup::Kind::shrink) {
    if (previous == nullptr)''')], ['disagree_w3']),
 'fix6_own_gpu_only': ([('comm/nccl/nccl_communicator.cpp','  if (pending_.empty()) return out;\n  bind_device(device_);','''  if (pending_.empty()) return out;
  struct OldGuard { int old = 0; explicit OldGuard(int d) { cudaGetDevice(&old); if (old != d) cudaSetDevice(d); } ~OldGuard() { cudaSetDevice(old); } } g(device_);'''),
   ('comm/nccl/nccl_impl.h','''      bind_device(device_);
      watchdog_main();''','''      watchdog_main();''')], ['allreduce_w2']),
 'fix7_bounded_teardown': ([('comm/nccl/nccl_form.cpp','if (st->cv.wait_for(lk, bound, [&] { return st->done; })) {','st->cv.wait(lk, [&] { return st->done; });\n  if (true) {')], ['stuck_w2']),
 'fix8_slots_return': ([('comm/nccl/nccl_form.cpp','  auto slots = std::make_unique<std::vector<StagingSlot>>(std::move(revoked_slots_));','  auto slots = std::make_unique<std::vector<StagingSlot>>();')], ['generations_w2']),
 'fix9_no_shrink_after_error': ([('comm/nccl/nccl_impl.h','return RF_NCCL_HAS_SHRINK && regroupable(Clock::now() + kRegroupSettleBound) != nullptr;','return RF_NCCL_HAS_SHRINK && shrinkable() != nullptr;')], ['death_no_shrink_w3']),
 'fix10_no_revoke_while_launching': ([('comm/nccl/nccl_communicator.cpp','    if (launching && settle(comm_,','    if (false && launching && settle(comm_,')], ['revoke_launching_w2']),
 'fix11_connect_at_init': ([('comm/nccl/nccl_form.cpp','  apply_runtime_connect();\n','  (void)&apply_runtime_connect;\n')], ['runtime_connect_w2']),
 'fix12_launch_poll': ([('comm/nccl/wait_loop.cpp','  const Duration interval = o.async == AsyncState::in_progress ? opt.launch_poll_interval : opt.poll_interval;','  const Duration interval = opt.poll_interval;')], ['test_comm'], ['test_comm']),
}
def test_name(t):
  return t if t.startswith('test_') else 'nccl_double_' + t

def run(name, build):
  edits, tests = reverts[name][:2]
  targets = ' '.join(reverts[name][2] if len(reverts[name]) > 2 else ['nccl_double_mp_test'])
  saved=[]
  try:
      for path, old, new in edits:
          p, orig, mod = rep(path, old, new); saved.append((p, orig)); open(p,'w').write(mod)
      b = subprocess.run(f'cd {build} && cmake --build . -j2 --target {targets} 2>&1 | grep -E "error" | head -5', shell=True, capture_output=True, text=True)
      print(b.stdout)
      r = subprocess.run(['ctest','-R','|'.join('^'+test_name(t)+'$' for t in tests),'--timeout','90'], cwd=build, capture_output=True, text=True)
      print(name, 'WITHOUT FIX:', [l for l in r.stdout.splitlines() if 'Test #' in l or 'tests passed' in l])
  finally:
      for p, orig in saved: open(p,'w').write(orig)
      # The build holds the reverted code until rebuilt: rebuild it from the restored tree.
      subprocess.run(f'cd {build} && cmake --build . -j2 --target {targets} > /dev/null', shell=True)

if __name__ == '__main__':
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    build = os.path.abspath(sys.argv[1])
    for name in sys.argv[2:] or list(reverts):
        run(name, build)
