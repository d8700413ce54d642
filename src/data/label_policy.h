/* label_policy.h: what a multilabel manifest's uncertain and blank cells become, as CheXpert's labellers write them
 * (1 positive, 0 negative, -1 uncertain, empty: not mentioned) and its papers train on them:
 *   data.uncertain  "error" (the default: a -1 is one line, exit 2), or a policy for every label, or a list of
 *                   label=policy with a bare policy for the rest: "Atelectasis=u_ones,Edema=u_ones,u_zeros"
 *                     u_ignore  masked: out of the BCE (its term and gradient 0) and out of that label's AUROC
 *                     u_zeros   a negative;  u_ones  a positive
 *   data.blank      "error" (the default), "zero" (not mentioned = negative, CheXpert's usual reading) or "ignore"
 *                   (masked as u_ignore)
 * A masked cell is held as LABEL_MASKED (negative: no label value is), which head_loss.h's BCE and metrics.h's AUROC
 * leave out. */
#pragma once
#include "core/config_data.h"

#define LABEL_MASKED (-1.0f)

typedef enum { LABEL_KEEP_ERROR = 0, LABEL_MASK, LABEL_ZERO, LABEL_ONE } LabelPolicy;

/* The policy data.uncertain gives the label column `name` (names: every label column, n of them, to check that each
 * name the list gives is one); exit 2 naming what is wrong in the list. */
LabelPolicy label_uncertain_policy(const DataConfig *cfg, const char *name, char *const *names, int n,
                                   const char *origin);
/* data.blank's policy. */
LabelPolicy label_blank_policy(const DataConfig *cfg);
/* The value a policy gives a cell (LABEL_MASKED, 0 or 1); LABEL_KEEP_ERROR has none (the caller refuses the cell). */
float label_policy_value(LabelPolicy p);
