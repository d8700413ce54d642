/* metrics.h: the validation figures of a prediction head over a whole validation set (host arrays, double
 * precision), computed from what a user computes them from (predict's outputs) and as the reference libraries do:
 *   probabilities    softmax (classification) or sigmoid (multilabel) of the logits, in double, rounded to float32:
 *                    the bytes `voxscale predict` writes, and what accuracy and AUROC read
 *   accuracy         the share of samples whose largest probability is their class (ties: the lowest class index,
 *                    numpy's argmax)
 *   AUROC            per class, one-vs-rest: the probability that a random positive outscores a random negative,
 *                    ties counting one half (the Mann-Whitney U over average ranks; scikit-learn's roc_auc_score);
 *                    macro: the unweighted mean over the classes that have both positives and negatives
 *                    (scikit-learn's multi_class="ovr", average="macro", which refuses a set missing a class where
 *                    this leaves that class out); with 2 classes the macro figure is class 1's, as
 *                    roc_auc_score(y, p[:, 1]) gives it
 *   Harrell's C      over comparable pairs (i, j): i an event at t_i, and j with t_j > t_i or censored at t_j = t_i
 *                    (lifelines' concordance_index(time, -risk, event): a censoring at the time of a death outlived
 *                    it; two deaths at the same time are not comparable); concordant when i's risk is higher, tied
 *                    risks count one half
 *   losses           the mean over every sample given, as PyTorch's reduction "mean" over the whole set:
 *                    CrossEntropyLoss (weighted: sum w[y] l / sum w[y]), BCEWithLogitsLoss (pos_weight), MSELoss,
 *                    and the Cox partial likelihood (Breslow ties, over the whole set at once)
 * NaN: a NaN anywhere in the scores or risks a figure reads makes that figure NaN (scikit-learn and lifelines refuse
 * such input); nothing waits on a comparison with NaN. */
#pragma once

/* probs [n][k] from logits [n][k]: softmax over each row (multilabel 0) or each logit's sigmoid (multilabel 1). */
void metric_probabilities(const float *logits, int n, int k, int multilabel, float *probs);
/* scores [n][k] (probabilities), labels [n] (the class as a float). NaN for n = 0. */
double metric_accuracy(const float *scores, const float *labels, int n, int k);
/* AUROC of `scores` (stride apart: column c of [n][k] is scores + c, stride k) for positives where labels (same
 * stride) are >= 0.5, negatives where they are in [0, 0.5); a negative label is a masked cell (data.uncertain
 * u_ignore), left out as sklearn's roc_auc_score on the unmasked rows. NaN when one side is empty or a score is NaN. */
double metric_auroc(const float *scores, const float *labels, int n, int stride);
/* Classification (labels the class index): one-vs-rest AUROC of each class's probability into per_class[k] (NaN where
 * undefined); returns the macro figure (NaN when none is defined). Multilabel: labels [n][k] of 0/1. */
double metric_auroc_ovr(const float *scores, const float *labels, int n, int k, int multilabel, double *per_class);
/* Harrell's C of risk [n] against (time, event) pairs target [n][2]; NaN without a comparable pair. */
double metric_cindex(const float *risk, const float *target, int n);
/* The Cox partial likelihood loss (Breslow ties, mean over events, as head_loss.h's) of risk [n] and target [n][2];
 * 0 without an event. */
double metric_cox_loss(const float *risk, const float *target, int n);
/* Cross-entropy of logits [n][k] against class indices labels [n], weight [k] or NULL. */
double metric_cross_entropy(const float *logits, const float *labels, int n, int k, const float *weight);
/* Binary cross-entropy with logits [n][k] against 0/1 labels [n][k], pos_weight [k] or NULL. */
double metric_bce(const float *logits, const float *labels, int n, int k, const float *pos_weight);
/* Mean squared error of count values. */
double metric_mse(const float *pred, const float *target, long count);
