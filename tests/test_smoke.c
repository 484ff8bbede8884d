#include <criterion/criterion.h>
#include "engine/quant.h"
Test(quant, names_round_trip) { cr_assert_eq(quant_from_name("q4_k"), QUANT_Q4_K); }
