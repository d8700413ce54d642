/* cmd_predict.c: placeholder until predict lands */
#include "app/commands.h"
#include "core/util.h"
int cmd_predict(int argc, char **argv) {
    (void)argc; (void)argv;
    vx_usage_error("predict: not built yet");
}
