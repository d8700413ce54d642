"""Converts a PyTorch checkpoint (.pth / .pt: a state_dict, or a dict holding one) to safetensors offline, for
`voxscale train --init-from` and `voxscale predict --weights`, renaming keys where a known source names them otherwise.

  python bench/reference/convert_pth.py resnet_50_23dataset.pth medicalnet50.safetensors --source medicalnet
  python bench/reference/convert_pth.py model.pth out.safetensors --rename backbone.=  --drop 'head.*'

Sources (--source):
  auto        a "module." prefix on every key (DataParallel / DistributedDataParallel) is taken off
  medicalnet  Tencent's MedicalNet (the 3-D ResNets MONAI's ResNet reproduces, pretrained on 8 or 23 datasets): the
              state_dict under "state_dict", "module." taken off, and its segmentation head "conv_seg.*" dropped
              (MONAI's and voxscale's ResNet have none). Their names are MONAI's otherwise; the ResNet-10, 50 and 101
              weights use shortcut B without a bias on the shortcut conv: train them with model.bias_downsample 0
              (18 and 34 use shortcut A, which voxscale does not build: their downsample keys come out missing)
  monai       a MONAI network's state_dict as saved: nothing renamed
  torchvision-densenet  torchvision's DenseNet121/169/201 (ImageNet, and CheXNet-style checkpoints built on it) to
              MONAI's DenseNet names (model.family densenet): "module." and a "densenet121." (169, 201) wrapper taken
              off; the old checkpoints' "norm.1"/"conv.2" written "norm1"/"conv2" (what torchvision's own loader
              does); each dense layer's norm1, conv1, norm2, conv2 under ".layers."; "classifier." (or a
              Sequential's "classifier.0.") becomes "class_layers.out.". ImageNet weights take 3 channels: train
              them with model.in_channels 3 (a grey film is repeated over the three)
Then every --rename OLD=NEW replaces a leading OLD by NEW, and every --drop GLOB removes the matching keys.
The file is written by the few lines below (no safetensors package needed); the tensors keep their dtypes, and a
`voxscale` reading it checks everything (safetensors.h). Keys are kept in the checkpoint's order."""
import argparse
import fnmatch
import json
import os
import re
import struct
import sys

import torch

DTYPES = {torch.float32: "F32", torch.float16: "F16", torch.bfloat16: "BF16", torch.float64: "F64",
          torch.int64: "I64", torch.int32: "I32", torch.int16: "I16", torch.int8: "I8", torch.uint8: "U8",
          torch.bool: "BOOL"}


def state_dict_of(obj, source):
    """The state_dict inside what torch.load returned."""
    if isinstance(obj, torch.nn.Module):
        return obj.state_dict()
    if isinstance(obj, dict):
        for key in ("state_dict", "model_state_dict", "model", "net"):
            if key in obj and isinstance(obj[key], dict):
                return obj[key]
        if source == "medicalnet":
            raise SystemExit("convert_pth: a MedicalNet checkpoint holds its weights under \"state_dict\"; this one "
                             "has keys %s" % sorted(obj)[:8])
        return obj
    raise SystemExit("convert_pth: %s is neither a state_dict nor a module" % type(obj).__name__)


OLD_DENSELAYER = re.compile(r"^(.*denselayer\d+\.(?:norm|relu|conv))\."
                            r"((?:[12])\.(?:weight|bias|running_mean|running_var|num_batches_tracked))$")
DENSELAYER = re.compile(r"^(.*\.denselayer\d+\.)(norm1|conv1|norm2|conv2)\.")


def torchvision_densenet_name(name):
    """torchvision's DenseNet key as MONAI's DenseNet names it."""
    name = re.sub(r"^densenet(121|169|201)\.", "", name)
    m = OLD_DENSELAYER.match(name)
    if m:  # "norm.1.weight" -> "norm1.weight"
        name = m.group(1) + m.group(2)
    name = DENSELAYER.sub(lambda g: g.group(1) + "layers." + g.group(2) + ".", name)
    return re.sub(r"^classifier\.(0\.)?", "class_layers.out.", name)


def rename(sd, source, renames, drops):
    """(kept, what changed) after the source's rules, --rename and --drop."""
    keys = list(sd)
    strip = source in ("auto", "medicalnet", "torchvision-densenet") and keys and all(k.startswith("module.")
                                                                                       for k in keys)
    out, log = {}, {"renamed": 0, "dropped": []}
    for k in keys:
        name = k[len("module."):] if strip else k
        if source == "torchvision-densenet":
            name = torchvision_densenet_name(name)
        if source == "medicalnet" and name.startswith("conv_seg."):
            log["dropped"].append(k)
            continue
        for old, new in renames:
            if name.startswith(old):
                name = new + name[len(old):]
        if any(fnmatch.fnmatchcase(name, g) for g in drops):
            log["dropped"].append(k)
            continue
        if name in out:
            raise SystemExit("convert_pth: two keys become %r after renaming" % name)
        log["renamed"] += name != k
        out[name] = sd[k]
    return out, log


def save_safetensors(tensors, path, metadata):
    """safetensors: u64 header length, the JSON header (padded with spaces to 8 bytes), the raw little-endian data."""
    header, blobs, at = {"__metadata__": metadata}, [], 0
    for name, t in tensors.items():
        if not isinstance(t, torch.Tensor):
            raise SystemExit("convert_pth: %r is not a tensor (%s)" % (name, type(t).__name__))
        if t.dtype not in DTYPES:
            raise SystemExit("convert_pth: %r has dtype %s, which safetensors has no name for" % (name, t.dtype))
        t = t.detach().cpu().contiguous()
        raw = (t.view(torch.int16) if t.dtype == torch.bfloat16 else t).numpy().tobytes()
        header[name] = {"dtype": DTYPES[t.dtype], "shape": list(t.shape), "data_offsets": [at, at + len(raw)]}
        blobs.append(raw)
        at += len(raw)
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for raw in blobs:
            f.write(raw)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("input", help="a .pth / .pt file torch.load reads")
    ap.add_argument("output", help="the .safetensors file to write")
    ap.add_argument("--source", choices=["auto", "medicalnet", "monai", "torchvision-densenet"], default="auto")
    ap.add_argument("--rename", action="append", default=[], metavar="OLD=NEW", help="replace a leading OLD by NEW")
    ap.add_argument("--drop", action="append", default=[], metavar="GLOB", help="leave out the matching keys")
    args = ap.parse_args(argv)
    renames = []
    for r in args.rename:
        if "=" not in r:
            raise SystemExit("convert_pth: --rename %r: expected OLD=NEW" % r)
        renames.append(tuple(r.split("=", 1)))
    obj = torch.load(args.input, map_location="cpu")
    sd = state_dict_of(obj, args.source)
    out, log = rename(sd, args.source, renames, args.drop)
    save_safetensors(out, args.output, {"format": "pt", "source": os.path.basename(args.input),
                                        "converted_by": "bench/reference/convert_pth.py --source " + args.source})
    n = sum(t.numel() for t in out.values())
    print("convert_pth: %d tensors (%d values) -> %s; %d renamed, %d dropped%s" % (
        len(out), n, args.output, log["renamed"], len(log["dropped"]),
        (": " + ", ".join(log["dropped"][:6]) + (" ..." if len(log["dropped"]) > 6 else "")) if log["dropped"] else ""))


if __name__ == "__main__":
    sys.exit(main())
