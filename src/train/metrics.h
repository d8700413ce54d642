/* metrics.h: the validation figures of a prediction head, over a whole validation set (host arrays, double
 * precision), as the field computes them:
 *   accuracy         the share of samples whose largest score is their class (ties: the lowest class index)
 *   AUROC            per class, one-vs-rest: the probability that a random positive outscores a random negative,
 *                    ties counting one half (the Mann-Whitney U over average ranks; scikit-learn's roc_auc_score);
 *                    macro: the unweighted mean over the classes that have both positives and negatives
 *   Harrell's C      over comparable pairs (i, j): event at t_i and t_j > t_i; concordant when i's risk is higher,
 *                    ties in risk count one half; pairs with tied times are not comparable (lifelines'
 *                    concordance_index with the risk negated) */
#pragma once

/* scores [n][k], labels [n] (the class as a float). NaN for n = 0. */
double metric_accuracy(const float *scores, const float *labels, int n, int k);
/* AUROC of `scores` (stride apart: column c of [n][k] is scores + c, stride k) for positives where labels (same
 * stride) are >= 0.5; NaN when one side is empty. */
double metric_auroc(const float *scores, const float *labels, int n, int stride);
/* Classification (labels the class index): one-vs-rest AUROC of each class's score into per_class[k] (NaN where
 * undefined); returns their macro mean (NaN when none is defined). Multilabel: labels [n][k] of 0/1. */
double metric_auroc_ovr(const float *scores, const float *labels, int n, int k, int multilabel, double *per_class);
/* Harrell's C of risk [n] against (time, event) pairs target [n][2]; NaN without a comparable pair. */
double metric_cindex(const float *risk, const float *target, int n);
/* The Cox partial likelihood loss (Breslow ties, mean over events, as head_loss.h's) of risk [n] and target [n][2];
 * 0 without an event. */
double metric_cox_loss(const float *risk, const float *target, int n);
