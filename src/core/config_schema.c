/* config_schema.c: the schema table: every config key once, with its type, range or choices, default and help
 * (see config_schema.h). Reading, defaults, --set, the command-line flags, --help-config and the resolved
 * config.json all come from it (config.c), so a key cannot be documented but unreadable. */
#include "core/config_schema.h"

/* A key of the schema: its section, its name, and where it lives in a Config, which is its section's member of the
 * same name (cfg->model.input_size is model.input_size). */
#define K(section, key) #section, #key, offsetof(Config, section.key)
/* A key of a family's part of the model section (model.depth is Config.model.resnet.depth) */
#define KF(part, key) "model", #key, offsetof(Config, model.part.key)
/* A key of its own section kept in a part of the model section (diffusion.timesteps is Config.model.diff.timesteps) */
#define KM(section, part, key) #section, #key, offsetof(Config, model.part.key)
const KeySpec SCHEMA[] = {
    {K(model, family), T_STRING, 0, 0, "ae3d|resnet3d|densenet|vit3d|vit3d_diffusion", "\"ae3d\"",
     "the network: ae3d = the 3-D AutoencoderKL (the keys up to pad_input_channels); resnet3d = MONAI's 3-D ResNet "
     "for classification, regression and survival (the keys from depth on, and model.task); densenet = MONAI's "
     "DenseNet121/169/201, 2-D or 3-D, with the same heads (model.depth 121, growth_rate, init_features, bn_size, block_config, dropout_prob, "
     "spatial_dims, the BatchNorm keys, model.task); vit3d = a 3-D ViT over "
     "patches reconstructing its input (the keys from hidden_size on, and model.loss); vit3d_diffusion = the same "
     "blocks as a diffusion denoiser of the volume conditioned on two X-ray views (DRRs) by cross-attention and on "
     "the timestep by adaLN-Zero (the vit3d keys, and the diffusion, xray and loss sections)"},
    {K(model, input_size), T_INT3, 1, 1024, NULL, "[32, 32, 32]", "volume D, H, W in voxels"},
    {K(model, in_channels), T_INT, 1, 64, NULL, "1", "channels of the input volume"},
    {K(model, channels), T_INTLIST, 1, 4096, NULL, "[16, 32]",
     "channels per resolution level; each level after the first halves D, H, W"},
    {K(model, res_blocks), T_INT, 0, 16, NULL, "1", "ResBlocks per level"},
    {K(model, norm_groups), T_INT, 1, 1024, NULL, "8", "GroupNorm groups (divide every channels entry)"},
    {K(model, latent_channels), T_INT, 1, 256, NULL, "4", "channels of the latent"},
    {K(model, kl_weight), T_FLOAT, 0, 1e3, NULL, "1e-6", "weight of the KL term"},
    {K(model, loss), T_STRING, 0, 0, "l1|mse", "\"l1\"", "reconstruction loss"},
    {K(model, logvar_min), T_FLOAT, -100, 0, NULL, "-30", "log-variance clamp, low"},
    {K(model, logvar_max), T_FLOAT, 0, 100, NULL, "20", "log-variance clamp, high"},
    {K(model, norm_eps), T_FLOAT, 1e-12, 1, NULL, "1e-6", "GroupNorm epsilon"},
    {K(model, pad_input_channels), T_STRING, 0, 0, "auto|on|off", "\"auto\"",
     "store the first convolution's input and weights with in_channels padded with zeros to a multiple of 8, the "
     "channel count cuDNN's tensor-core kernels want; auto = with bf16/fp16, on = in any precision too (the CPU "
     "tests the path so), off = never. Parameters and checkpoints stay unpadded"},
    {KF(resnet, depth), T_INT, 10, 201, NULL, "18", "resnet3d: 10, 18, 34 (basic blocks), 50 or 101 (bottleneck), as "
     "monai.networks.nets.resnet10 ... resnet101; densenet: 121, 169 or 201 (DenseNet121 ...)"},
    {KF(densenet, growth_rate), T_INT, 1, 256, NULL, "32", "densenet: the channels each dense layer adds"},
    {KF(densenet, init_features), T_INT, 1, 1024, NULL, "64", "densenet: the stem's channels"},
    {KF(densenet, bn_size), T_INT, 1, 16, NULL, "4", "densenet: a dense layer's 1x1 bottleneck, bn_size * growth_rate"},
    {KF(densenet, block_config), T_LIST, 1, 63, NULL, "[]",
     "densenet: the layers of each dense block, MONAI's block_config (1 to 8 blocks, a transition between each two); "
     "[] = model.depth's: 121 [6, 12, 24, 16], 169 [6, 12, 32, 32], 201 [6, 12, 48, 32]"},
    {KF(densenet, dropout_prob), T_FLOAT, 0, 0.95, NULL, "0",
     "densenet: dropout after each dense layer's second convolution (MONAI's dropout_prob; keyed by sample and "
     "position as model.dropout)"},
    {KF(resnet, spatial_dims), T_INT, 2, 3, NULL, "3",
     "resnet3d and densenet: 3, or 2 for a volume of depth 1 (input_size [1, H, W]: every kernel is 1 deep, the "
     "weights those of MONAI's spatial_dims=2 net)"},
    {KF(resnet, conv1_t_size), T_INT, 1, 15, NULL, "7",
     "resnet3d: the stem conv's kernel along every axis, padded by half of it (MONAI's ensure_tuple_rep of it)"},
    {KF(resnet, conv1_t_stride), T_INT, 1, 4, NULL, "1", "resnet3d: the stem conv's stride along every axis"},
    {KF(resnet, no_max_pool), T_INT, 0, 1, NULL, "0", "resnet3d: 1 = no max pooling after the stem"},
    {KF(resnet, shortcut_type), T_STRING, 0, 0, "B", "\"B\"",
     "resnet3d: the shortcut where a block changes shape: B = 1x1x1 conv + BatchNorm (MONAI's default; A is not built)"},
    {KF(resnet, widen_factor), T_DOUBLE, 0.0625, 16, NULL, "1", "resnet3d: the planes 64/128/256/512 times this"},
    {KF(resnet, bias_downsample), T_INT, 0, 1, NULL, "1", "resnet3d: 1 = the shortcut conv has a bias (MONAI's default)"},
    {KF(resnet, bn_momentum), T_FLOAT, 0, 1, NULL, "0.1", "resnet3d, densenet: BatchNorm's running-statistics momentum"},
    {KF(resnet, bn_eps), T_FLOAT, 1e-12, 1, NULL, "1e-5", "resnet3d, densenet: BatchNorm's epsilon"},
    {KF(resnet, sync_bn), T_INT, 0, 1, NULL, "0",
     "resnet3d: 1 = SyncBatchNorm: every BatchNorm normalises with the statistics of the batch over all ranks, as "
     "torch.nn.SyncBatchNorm (two all-reduces per layer forward, one backward); 0 = each rank its own"},
    {KF(head, task), T_STRING, 0, 0, "classification|multilabel|regression|survival", "\"classification\"",
     "resnet3d: classification (softmax cross-entropy), multilabel (BCE with logits), regression (MSE) or survival "
     "(Cox partial likelihood over the global batch, Breslow ties)"},
    {KF(head, num_classes), T_INT, 1, 100000, NULL, "2",
     "resnet3d: classes, labels or regression targets the head predicts (survival: 1, the risk score)"},
    {KF(head, class_weights), T_LIST, 0, 1e6, NULL, "[]",
     "resnet3d classification: a weight per class for the cross-entropy, as CrossEntropyLoss(weight=...); [] = none"},
    {KF(head, pos_weight), T_LIST, 0, 1e6, NULL, "[]",
     "resnet3d multilabel: BCEWithLogitsLoss's pos_weight, one per label; [] = none"},
    {KF(head, pos_weight_auto), T_INT, 0, 1, NULL, "0",
     "resnet3d multilabel: 1 = pos_weight per label = negatives / positives among the training split's known labels "
     "(after data.uncertain and data.blank; masked cells not counted), logged by rank 0; a model.pos_weight given "
     "beside it must equal it"},
    {KF(head, dropout), T_FLOAT, 0, 0.95, NULL, "0",
     "resnet3d: dropout before the final Linear (keyed by sample and position: a resumed run drops the same values)"},
    {KF(vit, hidden_size), T_INT, 1, 16384, NULL, "384", "vit3d: token width (the seed's voxel_dim)"},
    {KF(vit, blocks), T_INT, 0, 128, NULL, "6", "vit3d: transformer blocks (depth)"},
    {KF(vit, heads), T_INT, 1, 256, NULL, "6", "vit3d: attention heads (dividing hidden_size; head dim <= 128 on a GPU)"},
    {KF(vit, patch_size), T_INT3, 1, 64, NULL, "[8, 8, 8]", "vit3d: voxels per patch along D, H, W (dividing input_size)"},
    {KF(vit, mlp_ratio), T_INT, 1, 16, NULL, "4", "vit3d: the MLP's hidden width in hidden_size"},
    {KF(vit, ln_eps), T_FLOAT, 1e-12, 1, NULL, "1e-6", "vit3d: LayerNorm's epsilon"},
    {KM(diffusion, diff, timesteps), T_INT, 2, 100000, NULL, "1000", "vit3d_diffusion: diffusion timesteps T"},
    {KM(diffusion, diff, schedule), T_STRING, 0, 0, "cosine|linear", "\"cosine\"",
     "vit3d_diffusion: the noise schedule: cosine (Nichol & Dhariwal) or linear (DDPM's betas 1e-4 .. 0.02)"},
    {KM(diffusion, diff, prediction), T_STRING, 0, 0, "v|epsilon", "\"v\"",
     "vit3d_diffusion: what the network predicts: v = alpha*eps - sigma*x0 (Salimans & Ho), or the noise eps"},
    {KM(diffusion, diff, sample_steps), T_INT, 1, 100000, NULL, "50", "vit3d_diffusion: DDIM steps when sampling"},
    {KM(diffusion, diff, data_scale), T_FLOAT, 1e-3, 1e3, NULL, "1",
     "vit3d_diffusion: the diffusion runs on data_scale * the volume (Stable Diffusion's scale factor, Chen 2023's input "
     "scaling): about 1 / the data's standard deviation, so that the unit noise meets the data at the schedule's "
     "intended signal-to-noise ratios; the projection loss, validation and samples stay in the data's units"},
    {KM(diffusion, diff, timestep_spacing), T_STRING, 0, 0, "trailing|leading", "\"trailing\"",
     "vit3d_diffusion: DDIM's timesteps (diffusers' timestep_spacing): trailing starts at T - 1, where the sampler's "
     "pure noise belongs (Lin et al. 2024); leading at T - T/steps, as diffusers' DDIMScheduler by default"},
    {KM(xray, diff, img_size), T_INT, 4, 4096, NULL, "64", "vit3d_diffusion: each X-ray view's side in pixels"},
    {KM(xray, diff, patch_size), T_INT, 1, 256, NULL, "8",
     "vit3d_diffusion: pixels per side of a view's patch token (dividing xray.img_size)"},
    {KM(xray, diff, mu_scale), T_FLOAT, 1e-6, 1e3, NULL, "3",
     "vit3d_diffusion: the attenuation line integral across the whole field of view through voxels of intensity 1 "
     "(a DRR is 1 - exp(-mu_scale * the mean intensity along the ray), the same at every volume size)"},
    {KM(xray, diff, backproject), T_INT, 0, 1, NULL, "0",
     "vit3d_diffusion: 1 = the two views lifted back into the volume (each voxel gets its AP and lateral ray's line "
     "integral over mu_scale: the mean intensity along the ray) as 2 input channels beside the noisy volume, as X-ray "
     "to CT networks lift their views; 0 = the views enter by cross-attention only"},
    {KM(loss, diff, physics_weight), T_FLOAT, 0, 1e3, NULL, "0.1",
     "vit3d_diffusion: weight of the projection loss (MSE of the predicted clean volume's DRRs against the views); 0 = off"},
    {KM(loss, diff, min_snr_gamma), T_FLOAT, 0, 1e3, NULL, "0",
     "vit3d_diffusion: min-SNR-gamma weighting of the diffusion loss (Hang et al. 2023; 5 is usual); 0 = off"},
    {K(train, steps), T_INT, 0, CONFIG_MAX_STEPS, NULL, "200", "optimizer steps in total"},
    {K(train, batch_size), T_INT, 0, 4096, NULL, "2", "volumes per micro-batch per rank; 0 = largest that fits"},
    {K(train, global_batch), T_INT, 0, 1 << 22, NULL, "0",
     "samples per optimizer step over all ranks; sets the per-rank batch (it must divide by ranks x grad_accum), so "
     "results do not depend on the number of GPUs; 0 = batch_size per rank"},
    {K(train, grad_accum), T_INT, 1, 1024, NULL, "1", "micro-batches per optimizer step"},
    {K(train, lr), T_FLOAT, 0, 10, NULL, "1e-3", "peak learning rate"},
    {K(train, min_lr), T_FLOAT, 0, 10, NULL, "1e-5", "learning rate at the end of the cosine"},
    {K(train, warmup_steps), T_INT, 0, 1e9, NULL, "20", "linear warmup steps"},
    {K(train, weight_decay), T_FLOAT, 0, 10, NULL, "0.01", "AdamW decoupled weight decay"},
    {K(train, beta1), T_FLOAT, 0, 0.9999999, NULL, "0.9", "AdamW beta1"},
    {K(train, beta2), T_FLOAT, 0, 0.9999999, NULL, "0.999", "AdamW beta2"},
    {K(train, adam_eps), T_FLOAT, 1e-20, 1, NULL, "1e-8", "AdamW epsilon"},
    {K(train, grad_clip), T_DOUBLE, 0, 1e9, NULL, "1.0", "clip the global gradient norm to this; 0 = off"},
    {K(train, lr_scaling), T_STRING, 0, 0, "none|linear|sqrt", "\"sqrt\"",
     "scale lr and min_lr with the number of ranks when the batch is per rank (not with global_batch): x ranks, "
     "x sqrt(ranks), or not"},
    {K(train, seed), T_INT64, 0, 9007199254740991.0, NULL, "1234", "seed of weights, data and noise"},
    {K(train, log_every), T_INT, 1, 1e9, NULL, "10", "steps between progress lines"},
    {K(train, val_every), T_INT, 0, 1e9, NULL, "50", "steps between validations; 0 = only at the end"},
    {K(train, val_samples), T_INT, 0, 1e6, NULL, "4", "held-out volumes per validation"},
    {K(train, ckpt_every), T_INT, 0, 1e9, NULL, "0", "steps between checkpoints; 0 = only at the end"},
    {K(train, best_metric), T_STRING, 0, 0, "auto|loss|l1|accuracy|auroc|cindex", "\"auto\"",
     "the validation figure best.ckpt (and each stage's stage_<k>_best.ckpt) keeps the best of: auto = l1 (ae3d, "
     "vit3d), loss (vit3d_diffusion, regression), accuracy (classification), auroc (multilabel), cindex (survival); "
     "loss and l1 lower is better, the others higher; a figure the family does not log is refused"},
    {K(train, device), T_STRING, 0, 0, "auto|cpu|cuda", "\"auto\"", "where to train"},
    {K(train, threads), T_INT, 0, 4096, NULL, "0", "CPU threads; 0 = all cores"},
    {K(train, deterministic), T_INT, 0, 1, NULL, "0",
     "1 = only deterministic GPU algorithms (bit-identical reruns, slower convolutions)"},
    {K(train, tf32), T_INT, 0, 1, NULL, "1",
     "1 = let cuDNN use TF32 tensor cores for float32 convolutions (PyTorch's default), 0 = strict FP32"},
    {K(train, fuse), T_INT, 0, 1, NULL, "1",
     "1 = run each GroupNorm and the SiLU after it as one op (no pre-activation tensor kept: less memory, one pass "
     "fewer each way), each BatchNorm and the ReLU after it as one op (resnet3d, densenet; the same bits in "
     "float32, the ReLU's pass each way gone), each dense layer's BatchNorm copying the batch statistics of the "
     "channels the one before it summed (densenet; the same bits on the CPU), and the decoder's nearest x2 "
     "upsampling + 3x3x3 convolution as one 2x2x2 convolution per output phase at the input's resolution (3.4x "
     "fewer FLOPs, no upsampled tensor); 0 = separate ops, as PyTorch eager"},
    {K(train, checkpoint_activations), T_INT, 0, 1, NULL, "0",
     "1 = keep only each segment's input and recompute its inside in backward (ae3d: ResBlocks, resnet3d: residual "
     "blocks, densenet: dense layers with their concatenations, vit3d: transformer blocks; less activation memory, "
     "about one more forward of the segments per step), as torch.utils.checkpoint"},
    {K(train, batch_preset), T_STRING, 0, 0, "none|cxr", "\"none\"",
     "with an automatic batch (train.batch_size 0) on a GPU: cxr = seed 002's table of batch x accumulation by the "
     "GPU's memory (>= 20 GB 16 x 4, 14-20 12 x 5, 10-14 8 x 8, 6-10 4 x 16, < 6 2 x 32), kept where the exact plan "
     "fits that batch, else the largest that fits with the accumulation keeping the samples per step; the plan line "
     "says where the two differ. none = the exact plan alone"},
    {K(train, precision), T_STRING, 0, 0, "auto|bf16|fp16|off", "\"auto\"",
     "storage and compute type of activations (--amp): bf16 or fp16 = mixed precision on a GPU (float32 master "
     "weights, optimizer state, statistics and every reduction); off = float32; auto = bf16 on a GPU (all this build "
     "runs on have it), float32 on the CPU"},
    {K(train, loss_scale), T_STRING, 0, 0, "auto|dynamic|off", "\"auto\"",
     "dynamic loss scaling, as torch.amp.GradScaler: a step whose gradient is not finite is skipped and the scale "
     "halved, growth_interval finite steps double it; auto = with fp16 only"},
    {K(train, loss_scale_init), T_FLOAT, 1, 1 << 24, NULL, "65536",
     "the first loss scale (a power of two, so scaling is exact)"},
    {K(train, loss_scale_growth_interval), T_INT, 1, 1e9, NULL, "2000",
     "finite steps in a row after which the loss scale doubles"},
    {K(train, compile), T_INT, 0, 1, NULL, "0",
     "1 = capture the training step in CUDA Graphs on its second use and replay them (--compile): one per kind of "
     "micro-batch (forward, loss, backward; with ranks the last one holds the gradient buckets' NCCL all-reduces) and "
     "one for the losses' all-reduce, clipping and AdamW; losses are read back one step late. The CPU runs the "
     "same step eagerly"},
    {K(train, init_from), T_STRING, 0, 0, NULL, "\"\"",
     "a safetensors file (voxscale export, or a PyTorch/MONAI state_dict through bench/reference/convert_pth.py) the "
     "parameters and BatchNorm statistics start from, matched by name; \"\" = the seed's initialisation. Ignored "
     "when resuming"},
    {K(train, init_allow), T_STRING, 0, 0, NULL, "\"\"",
     "comma-separated glob patterns of the keys that may be missing in train.init_from, unexpected in it or of "
     "another shape (they keep their fresh values: \"fc.*\" for a new head); any other difference is refused"},
    {K(train, freeze), T_STRING, 0, 0, NULL, "\"\"",
     "comma-separated name prefixes of parameters left untrained (e.g. \"conv1,bn1,layer1\"); they must be the "
     "network's first layers. BatchNorm's running statistics still move in training, as in PyTorch"},
    {K(train, backbone_lr_mult), T_DOUBLE, 0, 1e3, NULL, "1",
     "resnet3d: the learning rate of every parameter but the head's (fc) is train.lr times this (fine-tuning a "
     "pretrained backbone slower than a new head)"},
    {K(train, ema_eval), T_INT, 0, 1, NULL, "1",
     "with train.ema_decay > 0: 1 = validation, its images and best.ckpt's choice run the weights' moving average (what "
     "predict and a diffusion sampler use); 0 = the trained weights"},
    {K(train, ema_decay), T_FLOAT, 0, 0.999999, NULL, "0",
     "an exponential moving average of the weights, ema = decay * ema + (1 - decay) * weights after every optimizer "
     "step (DiT and diffusers sample with it: 0.9999); kept in the checkpoint (buffer ema.flat), exported as ema.<name> "
     "and used by predict; 0 = none"},
    {K(train, stages), T_STAGES, 0, 0, NULL, "[]",
     "progressive stages, e.g. [{\"input_size\": [64,64,64], \"steps\": 500, \"batch_size\": 8}, ...]; "
     "train.steps is then their sum; a stage also takes lr, epochs and (vit3d_diffusion) \"model\": {hidden_size, "
     "blocks, heads, patch_size, mlp_ratio}, its own network: one that differs from the stage before's is a new "
     "network of a cascade, conditioned on the earlier one's (frozen) x0 estimate"},
    {K(data, source), T_STRING, 0, 0, "phantom|csv|dir", "\"phantom\"",
     "where volumes come from: the built-in phantoms, a CSV manifest (data.csv) or a folder (data.dir)"},
    {K(data, noise), T_FLOAT, 0, 1, NULL, "0.02", "std of the phantom's Gaussian noise"},
    {K(data, phantom), T_STRING, 0, 0, "ellipsoids|chest", "\"ellipsoids\"",
     "source phantom: ellipsoids = 3-D volumes of random ellipsoids; chest = 2-D chest films (model.input_size [1, H, "
     "W]) with findings (opacity, cardiomegaly, effusion, nodule, again) as a multilabel head's labels"},
    {K(data, prefetch), T_INT, 1, 64, NULL, "2", "batches the loader prepares ahead"},
    {K(data, csv), T_STRING, 0, 0, NULL, "\"\"",
     "the manifest: a header row, a path column (relative paths are to the CSV's folder), optional split column"},
    {K(data, dir), T_STRING, 0, 0, NULL, "\"\"", "a folder of volumes (source dir)"},
    {K(data, glob), T_STRING, 0, 0, NULL, "\"*.nii*\"",
     "which entries of data.dir are volumes: NIfTI files, or folders of PNG slices (e.g. \"case*\")"},
    {K(data, path_column), T_STRING, 0, 0, NULL, "\"path\"", "the manifest's path column"},
    {K(data, label_columns), T_STRING, 0, 0, NULL, "\"\"",
     "resnet3d: the manifest's label columns, comma-separated; \"\" = label (classification: the class index "
     "0..num_classes-1), time,event (survival: event 1 observed, 0 censored), or one 0/1 column per label "
     "(multilabel) and per target (regression) named in order; with source phantom the labels are a function of "
     "each phantom's shape"},
    {K(data, view_columns), T_STRING, 0, 0, NULL, "\"\"",
     "vit3d_diffusion: the manifest's two columns of each CT's X-ray views, AP then lateral (e.g. \"drr_ap,drr_lat\"): "
     "grey PNGs (8-bit /255, 16-bit /65535) of xray.img_size square, paths relative to the CSV, conditioning the "
     "model and the projection loss's target; \"\" = render the views from each volume (drr.h)"},
    {K(data, split_column), T_STRING, 0, 0, NULL, "\"split\"",
     "the manifest's split column (train | val); without one, data.val_fraction is held out"},
    {K(data, val_fraction), T_DOUBLE, 0, 0.9, NULL, "0.1",
     "share of the volumes held out for validation by a seeded draw, when there is no split column"},
    {K(data, normalize), T_STRING, 0, 0, "percentile|zscore|none", "\"percentile\"",
     "per volume: clip to the clip_low..clip_high percentiles and scale to [0, 1], or zero mean unit std"},
    {K(data, uncertain), T_STRING, 0, 0, NULL, "\"error\"",
     "resnet3d multilabel: a -1 cell (CheXpert's uncertain): error, u_ignore (masked out of the BCE and that label's "
     "AUROC), u_zeros or u_ones for every label, or per label with a default: \"Atelectasis=u_ones,Edema=u_ones,"
     "u_zeros\""},
    {K(data, blank), T_STRING, 0, 0, "error|zero|ignore", "\"error\"",
     "resnet3d multilabel: an empty label cell (CheXpert's not mentioned): error, zero (a negative) or ignore "
     "(masked, as u_ignore)"},
    {K(data, resize), T_STRING, 0, 0, "none|fit|fill", "\"none\"",
     "2-D images (model.input_size [1, H, W]): resize each as decoded, aspect kept, antialiased bilinear (torch's "
     "interpolate with antialias): fit = inside H x W (the window pads the rest), fill = covering it (the window "
     "crops the rest); a JPEG is decoded at 1/2, 1/4 or 1/8 scale when that is still large enough"},
    {K(data, clip_low), T_DOUBLE, 0, 50, NULL, "0.5", "lower percentile of normalize percentile"},
    {K(data, clip_high), T_DOUBLE, 50, 100, NULL, "99.5", "upper percentile"},
    {K(data, pad), T_INT, 0, 1, NULL, "1",
     "1 = pad a volume smaller than the input with its minimum; 0 = such a volume is an error"},
    {K(data, augment), T_INT, 0, 1, NULL, "1",
     "1 = random flips and 90-degree rotations of training volumes read from files (seeded per sample)"},
    {K(data, affine), T_LIST, 0, 180, NULL, "[]",
     "2-D films (model.input_size [1, H, W]), training: a random rotation within +-degrees, zoom within 1 +- scale and "
     "shift within +-shift of each side, about the centre, per sample (bilinear, the image's minimum outside): "
     "[degrees, scale, shift], e.g. [10, 0.1, 0.05]; [] = none. Chest films want this and data.augment 0 (flips "
     "and 90-degree turns put the heart on the wrong side)"},
    {K(data, cache_rate), T_DOUBLE, 0, 1, NULL, "1",
     "share of the decoded training volumes kept in memory; an epoch draws from the cached ones"},
    {K(data, replace_rate), T_DOUBLE, 0, 1, NULL, "0",
     "share of the cache replaced by new volumes each epoch (decoded ahead by a background thread)"},
    {K(data, cache_max_gib), T_DOUBLE, 0.001, 4096, NULL, "8",
     "upper bound of the cache per rank; a cache_rate beyond it is refused"},
    {K(data, workers), T_INT, 0, 256, NULL, "0", "decoding threads; 0 = from the core count"},
    {K(data, skip_bad), T_INT, 0, 1, NULL, "0",
     "1 = skip an unreadable or unusable volume with a warning (counted); 0 = it is an error"},
    {K(data, nonfinite), T_STRING, 0, 0, "error|zero|skip", "\"error\"",
     "a volume with NaN or +-Inf voxels (in the file, or beyond float32 once scaled): error = refuse it (exit 2, "
     "the file and the count), zero = set them to 0 with a warning, skip = leave the volume out with a warning"},
    {K(output, dir), T_STRING, 0, 0, NULL, "\"\"", "run directory; empty = runs/<config>-<time>"},
    {K(output, tensorboard), T_INT, 0, 1, NULL, "1", "1 = write TensorBoard event files into the run directory"},
    {K(output, image_every), T_INT, 0, 1e9, NULL, "50",
     "steps between TensorBoard images (mid-slices of inputs, reconstructions, errors); 0 = off"},
    {K(output, image_samples), T_INT, 1, 64, NULL, "2", "held-out volumes shown per image step"},
    {K(output, hist_every), T_INT, 0, 1e9, NULL, "100",
     "steps between weight and gradient histograms per layer group; 0 = off"},
    {K(output, flush_secs), T_DOUBLE, 0.1, 3600, NULL, "5", "longest time TensorBoard records stay buffered"},
    {K(output, profile), T_STRING, 0, 0, NULL, "\"\"",
     "START:END records a profiler trace of optimizer steps START..END (1-based, inclusive); empty = off"},
    {K(dist, gpus), T_STRING, 0, 0, NULL, "\"\"",
     "N or all: start one rank per GPU of this machine (N CPU ranks with --device cpu); empty = one process"},
    {K(dist, timeout_s), T_DOUBLE, 0.1, 1e6, NULL, "600",
     "a collective not finished within this ends every rank with exit 3 (PyTorch's default is 600 s)"},
    {K(dist, bucket_mb), T_DOUBLE, 0.001, 4096, NULL, "25",
     "size of the gradient buckets all-reduced while backward runs (DDP's bucket_cap_mb)"},
    {K(dist, first_bucket_mb), T_DOUBLE, 0.001, 4096, NULL, "1",
     "size of the first bucket, smaller so that communication starts early"},
    {K(dist, zero), T_STRING, 0, 0, "0|1|2|auto", "\"0\"",
     "sharded data parallelism (ZeRO): 0 = every rank holds everything (DDP); 1 = AdamW's moments and the float32 "
     "master weights sharded over the ranks, updated parameters all-gathered; 2 = the gradients too, each bucket "
     "reduce-scattered to its owners during backward; auto = the cheapest that fits the memory plan (the start of "
     "train and detect print every mode's bytes per rank)"},
    {K(dist, offload_optimizer), T_STRING, 0, 0, "none|cpu", "\"none\"",
     "with dist.zero 1 or 2 on GPUs: cpu = the shard's AdamW moments and master weights in pinned host memory, "
     "AdamW on the CPU (ZeRO-Offload); on CPU ranks it changes nothing and says so"},
    {K(output, sample_log), T_INT, 0, 1, NULL, "0",
     "1 = write samples.tsv in the run directory: step, micro-batch, first global sample and count of every batch read"},
};
const int NKEYS = (int)(sizeof SCHEMA / sizeof SCHEMA[0]);

/* The keys of one entry of train.stages (section "" : the name is train.stages[i].key). A key left out inherits:
 * input_size from model.input_size, batch_size from train.batch_size, lr from train.lr (config_validate fills them
 * in); exactly one of steps and epochs is given. */
#define SK(key) "", #key, offsetof(Stage, key)
const KeySpec STAGE_SCHEMA[] = {
    {SK(input_size), T_INT3, 1, 1024, NULL, NULL, "volume D, H, W of this stage"},
    {SK(steps), T_INT, 1, CONFIG_MAX_STEPS, NULL, NULL, "optimizer steps of this stage"},
    {SK(epochs), T_DOUBLE, 1e-6, 1e6, NULL, NULL, "or: passes over the training set"},
    {SK(batch_size), T_INT, 0, 4096, NULL, NULL, "per-rank micro-batch of this stage"},
    {SK(lr), T_FLOAT, 0, 10, NULL, NULL, "peak learning rate of this stage"},
};
const int NSTAGE_KEYS = (int)(sizeof STAGE_SCHEMA / sizeof STAGE_SCHEMA[0]);

/* The keys of train.stages[i].model (vit3d_diffusion): the stage's own network; a key left out is the model
 * section's (config_stage.c). A stage whose network differs from the one before is a new network of a cascade. */
#define SMK(key) "", #key, offsetof(StageModel, key)
const KeySpec STAGE_MODEL_SCHEMA[] = {
    {SMK(hidden_size), T_INT, 8, 4096, NULL, NULL, "this stage's token width (model.hidden_size)"},
    {SMK(blocks), T_INT, 0, 128, NULL, NULL, "this stage's transformer blocks (model.blocks)"},
    {SMK(heads), T_INT, 1, 256, NULL, NULL, "this stage's attention heads (model.heads)"},
    {SMK(patch_size), T_INT3, 1, 64, NULL, NULL, "this stage's voxels per patch (model.patch_size)"},
    {SMK(mlp_ratio), T_INT, 1, 16, NULL, NULL, "this stage's MLP width in hidden_size (model.mlp_ratio)"},
};
const int NSTAGE_MODEL_KEYS = (int)(sizeof STAGE_MODEL_SCHEMA / sizeof STAGE_MODEL_SCHEMA[0]);

