// The one doctest main every unit-test executable links (rf_test_main).
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>
