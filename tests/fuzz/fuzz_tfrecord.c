/* fuzz_tfrecord.c: the TensorBoard record reader the tests read event files with: tfrecord_next over the whole
 * input (lengths trusted only after their CRC), then each good record decoded as an Event by protobuf-c and its
 * summary values walked. Damaged files must stop at the first bad record, never read outside the buffer. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "tb/proto/event.pb-c.h"
#include "tb/tfrecord.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    size_t off = 0, records = 0;
    const uint8_t *rec;
    size_t n;
    TfRecordStatus st;
    while ((st = tfrecord_next(data, size, &off, &rec, &n)) == TFRECORD_OK) {
        if (rec < data || rec + n > data + size || off > size) abort();
        records++;
        Vxtb__Event *ev = vxtb__event__unpack(NULL, n, rec);
        if (!ev) continue;
        if (ev->what_case == VXTB__EVENT__WHAT_SUMMARY && ev->summary)
            for (size_t i = 0; i < ev->summary->n_value; i++)
                if (ev->summary->value[i]->tag) (void)strlen(ev->summary->value[i]->tag);
        vxtb__event__free_unpacked(ev, NULL);
    }
    if (st == TFRECORD_OK || off > size || (st == TFRECORD_END && off != size)) abort();
    (void)records;
    return 0;
}
