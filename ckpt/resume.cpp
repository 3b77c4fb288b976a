#include "ckpt/resume.h"

#include <filesystem>

#include "base/str.h"
#include "ckpt/checkpoint_dir.h"
#include "ckpt/format_error.h"
#include "ckpt/safetensors_reader.h"

namespace rf::ckpt {

ResumePoint resume_from_file(const std::string& path, nn::Module& model, optim::Optimizer& optimizer,
                             const RestoreExpect& expect) {
  // The file's bytes are the staging buffer restore_state validates in place (R6).
  const std::vector<std::byte> image = read_file_bytes(path);
  // A checkpoint's name promises a step: one renamed by hand must not stand in for
  // another, so the name's step is an expectation checked before anything is copied.
  RestoreExpect want = expect;
  const auto named = parse_checkpoint_name(std::filesystem::path(path).filename().string());
  if (named && want.step && *want.step != *named) {
    throw MismatchError(path, "", str("is named for step ", *named, ", expected step ", *want.step));
  }
  if (named) want.step = *named;
  return {path, restore_state(image, model, optimizer, want, path)};
}

std::optional<ResumePoint> resume_newest(const std::string& dir, nn::Module& model, optim::Optimizer& optimizer,
                                         const RestoreExpect& expect, std::ostream& warn) {
  const auto files = list_checkpoints(dir);
  std::vector<std::string> unreadable;  // files whose bytes could not be read (may be intact)
  for (const auto& f : files) {
    try {
      return resume_from_file(f.path, model, optimizer, expect);
    } catch (const ForeignStateError& e) {
      // Intact, but another run's: skipping it would start this run here (fresh or from an
      // older file), and its checkpoints would overwrite and prune the other run's.
      throw ForeignStateError(e.source(), e.tensor(),
                              str(e.problem(), " — an intact checkpoint that holds the state of another run; not "
                                  "resuming in ", dir, ", where this run would overwrite and prune it (choose another "
                                  "checkpoint directory)"));
    } catch (const DigestVersionMismatch& e) {
      // Intact perhaps, but unverifiable by this build; so is every older file. Skipping
      // them all would start fresh over a run's work: stop and say why instead.
      throw DigestVersionMismatch(e.source(), e.tensor(),
                                  str(e.problem(), " — not resuming in ", dir,
                                      ": resume with the ringfence build that wrote it, or choose another "
                                      "checkpoint directory"));
    } catch (const UnreadableError& e) {
      warn << "resume: skipping " << f.path << ": " << e.what() << " (the storage failed; an older checkpoint is tried)\n";
      unreadable.push_back(e.what());
    } catch (const rf::Error& e) {
      // restore_state left the state untouched (R6), so the previous file can be tried.
      warn << "resume: skipping " << f.path << ": " << e.what() << "\n";
    }
  }
  // Starting fresh would train over checkpoints that may be intact, and this run's first
  // checkpoint would prune them: stop instead, and say why.
  if (!unreadable.empty())
    throw UnreadableError(dir, "",
                          str("no checkpoint could be resumed and ", unreadable.size(), " of ", files.size(),
                              " could not be read (", unreadable.front(), "); not starting fresh over them: repair "
                              "or remount the storage, or choose another checkpoint directory"));
  warn << "resume: no valid checkpoint in " << dir
       << (files.empty() ? " (none found)" : rf::str(" (", files.size(), " skipped)")) << "; starting fresh\n";
  return std::nullopt;
}

std::vector<std::string> resume_differences(const ResumePoint& p, const SnapshotMeta& ours) {
  std::vector<std::string> out;
  if (p.meta.optimizer_hparams != ours.optimizer_hparams)
    out.push_back(str(p.path, " was trained with ", p.meta.optimizer_hparams, ", continuing with ",
                      ours.optimizer_hparams));
  // Another batch size, seed or data set: step s no longer sees the samples it saw.
  if (!p.meta.data_order.empty() && p.meta.data_order != ours.data_order)
    out.push_back(str(p.path, " was trained with data order ", p.meta.data_order, ", continuing with ",
                      ours.data_order, ": the steps from here see other batches than an uninterrupted run would"));
  return out;
}

}  // namespace rf::ckpt
