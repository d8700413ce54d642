/* exp_nan.c: kernels/common/exp_cpu.h's exp and SiLU on the values a hostile volume brings (NaN, +-Inf, huge), for
 * tests/integration/test_data_hostile.py, which builds it with UBSan (every report fatal) and runs it. Prints
 * exp, silu and silu' of each argument. */
#include <stdio.h>
#include <stdlib.h>

#include "common/exp_cpu.h"

int main(int argc, char **argv) {
    for (int i = 1; i < argc; i++) {
        const float x = strtof(argv[i], NULL);
        printf("%s %.9g %.9g %.9g\n", argv[i], exp_vec(x), silu_vec(x), silu_grad_vec(x));
    }
    return 0;
}
