/* dataset_state.h: the dataset's private state (struct Dataset, its cache slots) and the two helpers its files share:
 * dataset.c (the sample stream, the cache, opening and checking) and dataset_side.c (what each sample carries beside
 * its volume: a head's labels, the X-ray views). Internal to src/data. */
#pragma once
#include <pthread.h>
#include <stdint.h>

#include "data/dataset.h"
#include "data/manifest.h"
#include "data/volume.h"

#define VAL_SEED_SALT 0x7A11DA7Eull /* held-out phantoms come from another stream than training ones */

enum { SLOT_ABSENT = 0, SLOT_LOADING, SLOT_READY, SLOT_BAD };
enum { NOTED_BAD = 1, NOTED_ZEROED = 2 };

typedef struct {
    Volume vol;
    float *views; /* its X-ray views [2][img][img] when they are given (dataset_set_views), else NULL */
    float pad;
    int state, refs;
} Slot;

struct Dataset {
    DataConfig cfg;
    int64_t seed; /* train.seed */
    int files;   /* 0: the phantoms */
    int size[3]; /* the crop: the model's input */
    int c;
    Manifest man;
    int *train, n_train; /* manifest indices of the usable training / validation files */
    int *val, n_val;
    int window, slide;   /* files per epoch, and how far the window moves each epoch */
    int cache;           /* keep decoded volumes (cache_rate > 0) */
    uint32_t *order, *where; /* a seeded order of the training files, and each file's position in it */
    double vol_bytes;    /* the largest training volume, decoded */
    Slot *slot;          /* per training file */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int64_t epoch_now;   /* the newest epoch a sample was asked of */
    int64_t perm_epoch[2];
    uint32_t *perm[2];   /* the sample order of two recent epochs */
    /* the background thread decoding the next window's newcomers */
    pthread_t ahead;
    int ahead_started, stop;
    char error[1024]; /* the first unusable volume met while training without data.skip_bad: the main thread
                         reports it (a loader worker must not end the process under the trainer's feet) */
    unsigned char *noted; /* per manifest entry: NOTED_BAD once it was found unusable (warned once, then skipped
                             unread), NOTED_ZEROED once its non-finite voxels were reported */
    int *todo, n_todo;
    DatasetStats st;
    /* a prediction head's labels (dataset_set_labels): floats per sample, the task, and for files each manifest
     * entry's [n_labels] */
    int n_labels, num_classes;
    char task[32];
    float *entry_labels;
    /* the X-ray views given beside each CT (dataset_set_views): their side (0: none), each manifest entry's two
     * PNG paths ([n][2]; NULL where the cell is empty) and the columns' names */
    int view_img;
    int *dims;           /* each manifest entry's volume d, h, w as its header says (0s: unreadable) */
    char **view_file;
    char view_col[2][CONFIG_STR];
};

/* The labels of phantom `index` of stream `seed` (data.phantom's kind; dataset.c). */
void dataset_phantom_labels(const Dataset *ds, uint64_t seed, uint64_t index, float *labels);
/* A volume, or one of its views (file: the view's path, col its column; NULL, -1: the volume), that cannot be used:
 * see dataset.c. */
void dataset_bad_file(Dataset *ds, int m, const char *file, int col, const char *why, const char *hint,
                      int skip_anyway, int at_open);
/* The cache's bytes against data.cache_max_gib (exit 4 beyond it). */
void dataset_check_cache_bound(const Dataset *ds);
