#include "models/train_program.h"

int main(int argc, char** argv) {
  return rf::models::train_program_main(argc, argv, rf::models::ModelKind::CNN);
}
