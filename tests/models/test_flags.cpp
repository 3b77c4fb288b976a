// Flag parsing of train_mlp / train_cnn: every flag, both spellings, clear errors.
#include <doctest/doctest.h>

#include "models/train_flags.h"

using namespace rf::models;

TEST_CASE("flags set the options") {
  auto p = parse_train_flags({"--epochs", "2", "--batch=64", "--lr", "0.1", "--momentum", "0.5",
                              "--seed", "3", "--data-dir", "/d", "--threads", "2",
                              "--log-interval", "10", "--max-steps", "151", "--synthetic", "100",
                              "--init", "i.st", "--metrics", "m.json", "--loss-log", "l.jsonl",
                              "--batch-log", "b.jsonl"},
                             ModelKind::CNN);
  const TrainOptions& o = p.options;
  CHECK(o.model == ModelKind::CNN);
  CHECK(o.epochs == 2);
  CHECK(o.batch == 64);
  CHECK(o.lr == doctest::Approx(0.1));
  CHECK(o.momentum == doctest::Approx(0.5));
  CHECK(o.seed == 3);
  CHECK(o.data_dir == "/d");
  CHECK(o.threads == 2);
  CHECK(o.log_interval == 10);
  CHECK(o.max_steps == 151);
  CHECK(o.synthetic == 100);
  CHECK(o.init_file == "i.st");
  CHECK(o.metrics_file == "m.json");
  CHECK(o.loss_log == "l.jsonl");
  CHECK(o.batch_log == "b.jsonl");
  CHECK_FALSE(p.help);
  CHECK(parse_train_flags({"--help"}, ModelKind::MLP).help);
}

TEST_CASE("bad flags are errors naming the flag") {
  auto fails = [](std::vector<std::string> args, const std::string& needle) {
    try {
      parse_train_flags(args, ModelKind::MLP);
    } catch (const FlagError& e) {
      return std::string(e.what()).find(needle) != std::string::npos;
    }
    return false;
  };
  CHECK(fails({"--bogus"}, "--bogus"));
  CHECK(fails({"--epochs"}, "missing value"));
  CHECK(fails({"--epochs", "two"}, "--epochs"));
  CHECK(fails({"--epochs", "0"}, "minimum"));
  CHECK(fails({"--batch", "12x"}, "--batch"));
  CHECK(fails({"--lr", "-1"}, "--lr"));
  CHECK(fails({"--lr", "nan"}, "--lr"));
  CHECK(fails({"--threads="}, "empty"));
  CHECK(fails({"positional"}, "positional"));
  // Numbers are numbers as written: no leading blanks, no hex floats (std::stod took both).
  CHECK(fails({"--lr", " 0.1"}, "--lr"));
  CHECK(fails({"--lr", "0x1p-3"}, "--lr"));
  CHECK(fails({"--momentum", "0.9 "}, "--momentum"));
  CHECK(parse_train_flags({"--lr", "1e-3"}, ModelKind::MLP).options.lr == 1e-3f);
  CHECK(parse_train_flags({"--lr", ".5"}, ModelKind::MLP).options.lr == 0.5f);
  // A flag missing its value does not swallow the next flag: `--ckpt-dir --resume` made a
  // directory named "--resume" and trained fresh into it. A value that starts with "--"
  // can still be given as --flag=--value.
  CHECK(fails({"--ckpt-dir", "--resume"}, "--ckpt-dir: missing value (the next argument is the flag '--resume';"));
  CHECK(fails({"--metrics", "--epochs", "2"}, "--metrics: missing value"));
  CHECK(parse_train_flags({"--metrics=--odd.json"}, ModelKind::MLP).options.metrics_file == "--odd.json");
  CHECK(parse_train_flags({"--seed", "-0"}, ModelKind::MLP).options.seed == 0);  // one dash: a value
  CHECK(fails({"--resume=yes", "--ckpt-dir", "/c"}, "--resume takes no value"));
}

TEST_CASE("checkpoint flags") {
  auto p = parse_train_flags({"--ckpt-dir", "/c", "--ckpt-every=10", "--ckpt-keep", "2", "--resume",
                              "--ckpt-test-pause-in-write", "19"},
                             ModelKind::CNN);
  CHECK(p.options.ckpt_dir == "/c");
  CHECK(p.options.ckpt_every == 10);
  CHECK(p.options.ckpt_keep == 2);
  CHECK(p.options.resume);
  CHECK(p.options.ckpt_test_pause_step == 19);
  CHECK(p.options.ckpt_staging == "/var/tmp");
  CHECK(parse_train_flags({"--ckpt-dir", "/c", "--ckpt-staging", "/s"}, ModelKind::MLP).options.ckpt_staging == "/s");
  CHECK(parse_train_flags({"--ckpt-dir", "/c", "--ckpt-staging", "none"}, ModelKind::MLP).options.ckpt_staging.empty());
  auto d = parse_train_flags({}, ModelKind::MLP).options;
  CHECK(d.ckpt_dir.empty());
  CHECK(d.ckpt_every == 0);
  CHECK(d.ckpt_keep == 3);
  CHECK_FALSE(d.resume);
  CHECK(d.ckpt_test_pause_step == -1);
  CHECK(parse_train_flags({"--resume-from", "f.safetensors"}, ModelKind::MLP).options.resume_from == "f.safetensors");

  auto fails = [](std::vector<std::string> args, const std::string& needle) {
    try {
      parse_train_flags(args, ModelKind::MLP);
    } catch (const FlagError& e) {
      return std::string(e.what()).find(needle) != std::string::npos;
    }
    return false;
  };
  CHECK(fails({"--resume"}, "--resume: needs --ckpt-dir"));
  CHECK(fails({"--ckpt-every", "5"}, "--ckpt-every: needs --ckpt-dir"));
  CHECK(fails({"--ckpt-keep=2"}, "--ckpt-keep: needs --ckpt-dir"));
  CHECK(fails({"--ckpt-staging", "/s"}, "--ckpt-staging: needs --ckpt-dir"));
  CHECK(fails({"--ckpt-dir", "/c", "--ckpt-keep", "0"}, "minimum 1"));
  CHECK(fails({"--ckpt-dir", "/c", "--ckpt-every", "-1"}, "--ckpt-every"));
  CHECK(fails({"--ckpt-dir", "/c", "--resume", "--resume-from", "f"}, "give one of them"));
}

TEST_CASE("--help lists every flag, in columns, from the parser's own table") {
  const std::string help = train_usage(ModelKind::CNN);
  CHECK(help.rfind("train_cnn — train the reference cnn on Fashion-MNIST", 0) == 0);
  CHECK(help.find("\nusage: train_cnn [flags]\n  --epochs N         epochs over the training set (default 1)\n") !=
        std::string::npos);
  // A description's later lines continue under its column; a long flag keeps its line.
  CHECK(help.find("  --device D         cpu, cuda or cuda:N: where the model, its gradients, the optimizer\n"
                  "                     state and each batch live") != std::string::npos);
  CHECK(help.find("  --resume-from FILE continue from this checkpoint") != std::string::npos);
  CHECK(help.find("  --ckpt-test-pause-in-write STEP  (tests) stop half-way") != std::string::npos);
  CHECK(help.find("  --help             this text\nUnder ringfence run only:\n  --verify-every N ") != std::string::npos);
  CHECK(help.find("slot 0 writes --loss-log and --batch-log; --resume-from is not available there.\n") !=
        std::string::npos);
  for (const char* f : {"--epochs", "--batch", "--lr", "--momentum", "--seed", "--data-dir", "--threads", "--device",
                        "--backend", "--log-interval", "--max-steps", "--synthetic", "--init", "--metrics",
                        "--loss-log", "--batch-log", "--ckpt-dir", "--ckpt-every", "--ckpt-keep", "--ckpt-staging", "--resume",
                        "--resume-from", "--verify-every", "--audit-log", "--flight-dir",
                        "--ckpt-test-pause-in-write", "--cuda-graph"})
    CHECK_MESSAGE(help.find(std::string("\n  ") + f + " ") != std::string::npos, f);
  // -h is --help's short form, parsed but not listed apart.
  CHECK(parse_train_flags({"-h"}, ModelKind::MLP).help);
  CHECK(help.find("  -h") == std::string::npos);
}

TEST_CASE("exact error texts, and the last of a repeated flag wins") {
  auto error = [](std::vector<std::string> args) {
    try {
      parse_train_flags(args, ModelKind::MLP);
    } catch (const FlagError& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  CHECK(error({"--bogus=1"}) == "unknown flag '--bogus=1' (see --help)");
  CHECK(error({"-x"}) == "unknown flag '-x' (see --help)");
  CHECK(error({"--epochs"}) == "--epochs: missing value");
  CHECK(error({"--epochs", "0"}) == "--epochs: 0 is below the minimum 1");
  CHECK(error({"--epochs", "0x2"}) == "--epochs: '0x2' is not an integer");
  CHECK(error({"--lr", "inf"}) == "--lr: 'inf' is not a non-negative number");
  CHECK(error({"--init", ""}) == "--init: empty value");
  CHECK(error({"--threads", "2000"}) == "--threads: 2000 is too many");
  CHECK(error({"--ckpt-dir", "--resume"}) ==
        "--ckpt-dir: missing value (the next argument is the flag '--resume'; write --ckpt-dir=VALUE for a value "
        "starting with --)");
  CHECK(error({"--help", "--bogus"}) == "unknown flag '--bogus' (see --help)");
  // The first mistake in argv order is the one reported.
  CHECK(error({"--epochs", "0", "--bogus"}) == "--epochs: 0 is below the minimum 1");
  CHECK(error({"--bogus", "--epochs", "0"}) == "unknown flag '--bogus' (see --help)");
  CHECK(error({"--lr", "x", "--batch"}) == "--lr: 'x' is not a non-negative number");
  CHECK(error({"--cuda-graph"}) == "--cuda-graph: needs --device cuda or cuda:N");
  CHECK(parse_train_flags({"--cuda-graph", "--device", "cuda"}, ModelKind::MLP).options.cuda_graph);
  CHECK_FALSE(parse_train_flags({"--device", "cuda"}, ModelKind::MLP).options.cuda_graph);
  CHECK(parse_train_flags({"--epochs", "2", "--epochs=3"}, ModelKind::MLP).options.epochs == 3);
}
