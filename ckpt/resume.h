#pragma once
// Resuming from disk (docs/protocol.md "Whole-job failure"): the newest VALID checkpoint in a
// directory. Each candidate, newest first, goes through restore_state (which validates
// all of it before touching the state, R6); one that is missing, truncated, corrupted
// (bad CRC) or named for another step than it holds is skipped with a warning naming the
// file and the reason, and the previous one is tried. Steps are deterministic (R3, R4), so training continues at meta.step + 1 and
// ends bitwise identical to an uninterrupted run.
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "ckpt/state.h"

namespace rf::ckpt {

struct ResumePoint {
  std::string path;  // the file restored
  SnapshotMeta meta;
};

// nullopt (after a warning) when dir holds no valid checkpoint: the caller starts fresh.
// A file that cannot be read at all (UnreadableError: an I/O error, a permission) is
// skipped like a damaged one, but when no file could be resumed and one could not be
// read, UnreadableError naming the directory is thrown instead of starting fresh.
// An intact checkpoint of another model or optimizer (ForeignStateError from
// restore_state), met before a valid one, is not skipped but thrown (a ForeignStateError
// naming the file and the directory): the directory holds another run's work, which this
// run's checkpoints would overwrite and prune.
std::optional<ResumePoint> resume_newest(const std::string& dir, nn::Module& model, optim::Optimizer& optimizer,
                                         const RestoreExpect& expect, std::ostream& warn);

// What differs between the run that wrote p and this one (`ours`): the optimizer's
// hyper-parameters, the data order (when p records one). One line each; resuming is then
// no longer bitwise an uninterrupted run, which the programs say as a warning.
std::vector<std::string> resume_differences(const ResumePoint& p, const SnapshotMeta& ours);

// The user named the file: any problem is an error (FormatError naming it), not a skip.
ResumePoint resume_from_file(const std::string& path, nn::Module& model, optim::Optimizer& optimizer,
                             const RestoreExpect& expect);

}  // namespace rf::ckpt
